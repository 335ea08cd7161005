"""Actor-critic with the value network that attends over the regions (ac.value_features=att): a tiny
run trains, resumes, decodes with lookahead from its checkpoint, and its value fit is diagnosed."""

import json
import math

import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError, RlcapError
from rlcap.models import AttValueNetwork
from rlcap.train.checkpoint import load_checkpoint
from rlcap.diagnose.value_samples import diagnose_value
from rlcap.train.logger import read_log
from rlcap.eval.open_run import open_run
from tests.tiny import tiny_overrides
from tests.methods.test_actor_critic import ac_settings, runs  # noqa: F401 (runs is the fixture)

ATT = {"ac.value_features": "att"}


def train_losses(folder):
    return {r["step"]: r for r in read_log(folder / "log.jsonl") if r["split"] == "train"}


@pytest.fixture(scope="module")
def att_run(runs, tmp_path_factory):  # noqa: F811
    """An ac run with the att value network: one epoch of value pretraining, one joint (3 + 3 steps)."""
    dataset, feats, folder = runs
    out = tmp_path_factory.mktemp("ac_att") / "ac"
    overrides = tiny_overrides(dataset, feats, out, **ac_settings(folder, **ATT, **{"ac.lookahead": "[0.5, 1.0]"}))
    result = api.train(api.load_run_config(None, overrides))
    return dataset, feats, folder, out, result


def test_att_value_network_trains_and_is_recorded(att_run):
    dataset, feats, folder, out, result = att_run
    assert result.steps == 3 + 3
    train = list(train_losses(out).values())
    assert [r["phase"] for r in train] == [1.0] * 3 + [2.0] * 3
    assert all(math.isfinite(r[k]) for r in train for k in ("loss", "policy_loss", "value_loss", "value"))
    init, last = load_checkpoint(folder / "xe" / "best"), load_checkpoint(out / "last")
    assert last.config["ac"]["value_features"] == "att"  # what lookahead rebuilds the network from
    assert {"att_embed.0.weight", "ctx2att.weight", "h2att.weight", "alpha.weight"} <= set(last.weights["value"])
    assert any(not torch.equal(init.weights["policy"][k], v) for k, v in last.weights["policy"].items())
    value_net = open_run(out / "best", device="cpu", value=True).value
    assert isinstance(value_net, AttValueNetwork) and not value_net.training


def test_att_value_network_moves_and_the_run_resumes_exactly(att_run, tmp_path):
    dataset, feats, folder, out, _ = att_run
    stopped = tiny_overrides(dataset, feats, tmp_path / "ac", **ac_settings(folder, **ATT, max_steps=4))
    api.train(api.load_run_config(None, stopped))  # three steps of value pretraining, one joint
    first = load_checkpoint(tmp_path / "ac" / "last").weights["value"]
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "ac", **ac_settings(folder, **ATT))),
              resume=True)
    ref, got = train_losses(out), train_losses(tmp_path / "ac")
    assert sorted(got) == sorted(ref) == list(range(1, 7))
    assert len([r for r in read_log(tmp_path / "ac" / "log.jsonl") if r["split"] == "train"]) == 6  # not rerun
    assert [got[s]["loss"] for s in (5, 6)] == [ref[s]["loss"] for s in (5, 6)]
    final = load_checkpoint(tmp_path / "ac" / "last").weights["value"]
    assert [k for k in first if torch.equal(first[k], final[k])] == []  # the joint steps moved every tensor
    reference = load_checkpoint(out / "last").weights["value"]
    assert all(torch.equal(final[k], reference[k]) for k in reference)


def test_lookahead_with_the_att_value_network(att_run, tmp_path):
    _, _, _, out, _ = att_run
    choice = json.loads((out / "lookahead.json").read_text())
    assert set(choice["scores"]) == {"0.5", "1.0"}
    assert choice["scores"]["1.0"] == pytest.approx(load_checkpoint(out / "best").manifest["metrics"]["CIDEr"])
    assert main(["eval", str(out / "best"), "--lookahead", "0.5,1", "--out", str(tmp_path / "cli")]) == 0
    assert json.loads((tmp_path / "cli" / "lookahead.json").read_text())["scores"] == choice["scores"]


def test_diagnose_value_reports_r_squared_by_position(att_run):
    _, _, folder, out, _ = att_run
    ckpt = load_checkpoint(out / "best", with_trainer=False)
    data = open_run(out / "best", device="cpu").data(("train", "val"))
    got = diagnose_value(out / "best", data, "val", n_samples=3, batch_size=4)
    assert (got.split, got.value_features, got.images, got.samples_per_image) == ("val", "att", 6, 3)
    assert got.temperature == ckpt.config["decode"]["temperature"] and math.isfinite(got.mean_reward)
    rows = got.fit.rows.tolist()
    assert rows[0] == 6 * 3 and rows == sorted(rows, reverse=True) and rows[-1] >= 1
    assert got.fit.by_position.shape == (len(rows),) and math.isfinite(got.fit.overall.item())
    assert math.isfinite(got.fit.by_position[0].item())  # the rewards of 18 samples differ
    state = torch.get_rng_state()
    again = diagnose_value(out / "best", data, "val", n_samples=3, batch_size=4)
    assert torch.equal(torch.get_rng_state(), state)  # the global random state is left alone
    torch.testing.assert_close(again.fit.by_position, got.fit.by_position, equal_nan=True)
    with pytest.raises(RlcapError, match="holds no value network"):
        diagnose_value(folder / "xe" / "best", data, "val")
    with pytest.raises(RlcapError, match="no 'test' split"):
        diagnose_value(out / "best", data, "test")


def test_unknown_value_features_fail_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"ac.value_features: 'regions' is not one of \['fc', 'att', 'hidden'\]"):
        api.load_run_config(None, ["algorithm=ac", "ac.value_features=regions"])


def test_a_value_network_on_the_policys_state_cannot_step_lookahead():
    """ac.value_features=hidden reads the policy's decoder states: no state of its own to step word by word."""
    with pytest.raises(ConfigError, match="ac.lookahead steps the value network word by word"):
        api.load_run_config(None, ["algorithm=ac", "ac.value_features=hidden", "ac.lookahead=[0.5]"])
    assert api.load_run_config(None, ["algorithm=ac", "ac.value_features=hidden", "ac.lookahead=[]"]).ac.value_features \
        == "hidden"
