"""optimizer_step: gradient clipping by global norm or by value, by hand; the gradients freed once used; fresh weights
under autocast."""

from types import SimpleNamespace

import pytest
import torch

from rlcap.errors import ConfigError
from rlcap.distributed import Ranks
from rlcap.run_config import OptimConfig
from rlcap.train.optimizer import optimizer_step
from rlcap.train.optimizer import Part


def _step(mode: str, clip: float) -> list[float]:
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    part = Part(model, torch.optim.SGD(model.parameters(), lr=1.0), None, OptimConfig(grad_clip=clip, grad_clip_mode=mode))
    session = SimpleNamespace(parts={"policy": part}, ranks=Ranks())  # one process
    loss = model(torch.tensor([[10.0, 0.01]])).sum()  # gradient (10, 0.01)
    optimizer_step(session, loss)
    return model.weight.detach().view(-1).tolist()


def test_value_clipping_clamps_every_element():
    assert _step("value", 0.1) == pytest.approx([-0.1, -0.01])


def test_norm_clipping_scales_the_whole_gradient():
    scale = 0.1 / (10.0**2 + 0.01**2) ** 0.5
    assert _step("norm", 0.1) == pytest.approx([-10.0 * scale, -0.01 * scale], rel=1e-5)


def test_no_clipping():
    assert _step("norm", 0.0) == pytest.approx([-10.0, -0.01])


def test_the_gradients_are_freed_once_the_step_is_taken():
    """No gradient outlives its step: a rank holds none during the next forward pass, validation or a save (a
    policy's 4 bytes a parameter, or FSDP2's shard of them)."""
    model = torch.nn.Linear(2, 1)
    part = Part(model, torch.optim.Adam(model.parameters(), lr=0.1), None, OptimConfig())
    optimizer_step(SimpleNamespace(parts={"policy": part}, ranks=Ranks()), model(torch.ones(1, 2)).sum())
    assert all(p.grad is None for p in model.parameters())
    assert part.optimizer.state[model.weight]["step"] == 1  # (the step was taken, with the gradients)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_each_forward_reads_the_weights_of_the_last_step(precision):
    """A loop enters the run's precision around each forward pass only (rlcap.devices.Precision): leaving it drops
    autocast's low-precision weight copies, so the forward after an optimizer step reads the new weights. (When one
    region wrapped the whole run, its cache kept the first forward's weights and the loss never moved.)"""
    from rlcap.devices import Precision

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    part = Part(model, torch.optim.SGD(model.parameters(), lr=0.1), None, OptimConfig())
    session = SimpleNamespace(parts={"policy": part}, ranks=Ranks())
    forward = Precision(precision, "cpu").forward
    x, y = torch.randn(8, 4), torch.ones(8, 1)
    losses = []
    for _ in range(3):
        with forward():
            out = model(x)
        assert out.dtype != torch.float32  # the forward ran low
        loss = ((out.float() - y) ** 2).mean()
        assert not torch.is_autocast_enabled("cpu")  # the loss and the step outside autocast
        optimizer_step(session, loss)
        losses.append(loss.item())
        with forward():
            fresh = model(x)  # the forward after the step, against the weights computed outside autocast
        assert torch.allclose(fresh.float(), x @ model.weight.detach().T + model.bias.detach(), atol=0.02)
    assert losses[0] > losses[1] > losses[2]


def test_unknown_clip_mode_is_rejected():
    with pytest.raises(ConfigError, match="grad_clip_mode"):
        OptimConfig(grad_clip_mode="sign").validate()


def test_named_parts_and_loop_state_round_trip_through_a_checkpoint(tiny_data, tmp_path):
    """A session with a policy and a second part (as actor-critic's value network): every module,
    optimizer, schedule and the loop state come back on resume."""
    from rlcap import api
    from rlcap.train.session import add_part, resume_or_start, open_session, save
    from tests.tiny import tiny_overrides

    dataset, feats = tiny_data
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run"))
    s = open_session(cfg)
    add_part(s, "value", torch.nn.Linear(3, 1), OptimConfig(lr=0.1))
    resume_or_start(s)
    for name in ("policy", "value"):
        loss = sum(p.sum() for p in s.parts[name].module.parameters())
        optimizer_step(s, loss, part=name)
    s.state["phase"] = 2
    save(s, "last")

    resumed = open_session(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run")))
    add_part(resumed, "value", torch.nn.Linear(3, 1), OptimConfig(lr=0.1))
    resume_or_start(resumed)
    assert resumed.state == {"phase": 2}
    for name in ("policy", "value"):
        a, b = s.parts[name], resumed.parts[name]
        assert all(torch.equal(x, y) for x, y in zip(a.module.state_dict().values(), b.module.state_dict().values()))
        assert str(a.optimizer.state_dict()) == str(b.optimizer.state_dict())
    assert sorted(p.name for p in (tmp_path / "run" / "last").glob("*.safetensors")) == ["policy.safetensors",
                                                                                         "value.safetensors"]


def test_recover_restores_a_checkpoint_caught_between_its_renames(tiny_data, tmp_path):
    from rlcap.train.checkpoint import is_complete, recover
    from rlcap import api
    from tests.tiny import tiny_overrides

    dataset, feats = tiny_data
    run = tmp_path / "run"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, run, **{"xe.epochs": 1})))
    (run / "last").rename(run / "last.old")          # killed after the first rename
    (run / "best.tmp-123").mkdir()                    # killed while writing
    (run / "best.tmp-123" / "policy.safetensors").write_bytes(b"half")
    done = recover(run)
    assert is_complete(run / "last") and not (run / "last.old").exists()
    assert not (run / "best.tmp-123").exists()
    assert len(done) == 2
