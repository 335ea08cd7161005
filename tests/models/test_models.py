"""Every captioner: output shapes, teacher forcing == step-by-step decoding, att_mask, gradients."""

from dataclasses import fields, replace

import pytest
import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS
from rlcap.errors import ConfigError
from rlcap.models import ARCHITECTURES, Feats, ModelConfig, build_model, expand_batch, select_batch
from rlcap.methods.registry import load_run_config
from rlcap.models.own_architectures import OwnArchitecture

# rlcap's own captioners (hf: tests/models/test_hf_captioner.py)
OWN = tuple(arch for arch, family in ARCHITECTURES.items() if isinstance(family, OwnArchitecture))

V, FC_DIM, ATT_DIM, B, N, T = 17, 12, 10, 3, 5, 6


def tiny_config(arch: str) -> ModelConfig:
    return ModelConfig(arch=arch, embed_dim=16, hidden_dim=16, att_hidden_dim=8, dropout=0.1, num_layers=2,
                       num_enc_layers=1, num_heads=2, ff_dim=24, max_len=8)


def make_feats(seed: int = 0) -> Feats:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 3:] = False  # image 1 has 3 regions, image 2 has 4
    mask[2, 4:] = False
    return Feats(torch.randn(B, FC_DIM, generator=gen), torch.randn(B, N, ATT_DIM, generator=gen), mask)


def make_tokens(rows: int = B, length: int = T, seed: int = 1) -> torch.Tensor:
    tokens = torch.randint(4, V, (rows, length), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0] = BOS
    return tokens


def build(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(tiny_config(arch), V, FC_DIM, ATT_DIM)


def step_through(model, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
    memory = expand_batch(model.encode(feats), seq_per_img)
    state = model.init_state(memory)
    out = []
    for t in range(tokens.size(1)):
        logprobs, state = model.step(memory, state, tokens[:, t])
        out.append(logprobs)
    return torch.stack(out, dim=1)  # (B, T, V)


@pytest.mark.parametrize("arch", OWN)
def test_output_shapes(arch):
    model = build(arch)
    feats, tokens = make_feats(), make_tokens()
    assert model.vocab_size == V
    assert model(feats, tokens).shape == (B, T, V)
    memory = model.encode(feats)
    state = model.init_state(memory)
    assert isinstance(state, tuple) and all(s.size(0) == B for s in state)
    assert all(m.size(0) == B for m in memory)
    logprobs, state = model.step(memory, state, tokens[:, 0])
    assert logprobs.shape == (B, V)
    torch.testing.assert_close(logprobs.exp().sum(1), torch.ones(B))


@pytest.mark.parametrize("arch", OWN)
@pytest.mark.parametrize("grad", [True, False])
def test_teacher_forcing_matches_step_by_step(arch, grad):
    model = build(arch).eval()
    feats, tokens = make_feats(), make_tokens(rows=2 * B)
    forced = F.log_softmax(model(feats, tokens, seq_per_img=2), dim=-1)  # (2B, T, V)
    with torch.set_grad_enabled(grad):  # without grad the LSTMs read word gates from a table
        stepped = step_through(model, feats, tokens, seq_per_img=2)
    torch.testing.assert_close(stepped, forced, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", OWN)
def test_seq_per_img_repeats_each_image(arch):
    model = build(arch).eval()
    feats, tokens = make_feats(), make_tokens(rows=2 * B)
    torch.testing.assert_close(model(feats, tokens, seq_per_img=2), model(feats.expand(2), tokens))


@pytest.mark.parametrize("arch", ["updown", "transformer"])
def test_masked_regions_do_not_change_output(arch):
    model = build(arch).eval()
    feats, tokens = make_feats(), make_tokens()
    noisy_att = torch.where(feats.att_mask[..., None], feats.att, torch.randn_like(feats.att) * 100)
    torch.testing.assert_close(model(feats._replace(att=noisy_att), tokens), model(feats, tokens))
    unmasked = feats._replace(att=noisy_att, att_mask=torch.ones_like(feats.att_mask))
    assert not torch.allclose(model(unmasked, tokens), model(feats, tokens))


@pytest.mark.parametrize("arch", OWN + ("value",))
def test_gradient_reaches_every_parameter(arch):
    torch.manual_seed(0)
    if arch == "value":
        from rlcap.models import build_value_model

        model = build_value_model(tiny_config("fc"), V, FC_DIM)
    else:
        model = build(arch)
    model(make_feats(), make_tokens()).square().mean().backward()
    missing = [name for name, p in model.named_parameters()
               if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert missing == []
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    assert all(name.startswith("critic.") for name in frozen)  # only HRL's internal critic is frozen ([Wang18 sec. 3.2])


@pytest.mark.parametrize("arch", OWN)
def test_state_reorders_with_select_batch(arch):
    model = build(arch).eval()
    feats, tokens = make_feats(), make_tokens()
    memory = model.encode(feats)
    state = model.init_state(memory)
    _, state = model.step(memory, state, tokens[:, 0])
    order = torch.tensor([2, 0, 1])
    logprobs, _ = model.step(memory, state, tokens[:, 1])
    reordered, _ = model.step(select_batch(memory, order), select_batch(state, order), tokens[order, 1])
    torch.testing.assert_close(reordered, logprobs[order])


@pytest.mark.parametrize("arch", ["fc", "updown"])
def test_word_gate_table_follows_optimizer_updates(arch):
    model = build(arch)
    feats, tokens = make_feats(), make_tokens()
    model.eval()
    with torch.no_grad():
        step_through(model, feats, tokens)  # builds the table
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model.train()
    model(feats, tokens).mean().backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        stepped = step_through(model, feats, tokens)
    torch.testing.assert_close(stepped, F.log_softmax(model(feats, tokens), -1), atol=1e-5, rtol=1e-5)


def test_transformer_refuses_captions_longer_than_max_len():
    model = build("transformer")
    with pytest.raises(ConfigError, match="max_len"):
        model(make_feats(), make_tokens(length=10))


def test_value_network_shapes():
    from rlcap.models import build_value_model

    net = build_value_model(tiny_config("fc"), V, FC_DIM)
    assert net(make_feats(), make_tokens()).shape == (B, T)
    assert net(make_feats(), make_tokens(rows=2 * B), seq_per_img=2).shape == (2 * B, T)


def test_unknown_arch_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match="unknown architecture 'lstm'; expected one of fc, updown, transformer"):
        load_run_config(None, ["model.arch=lstm"])
    cfg = tiny_config("fc")
    cfg.arch = "lstm"  # bypasses __post_init__, as a hand-edited object could
    with pytest.raises(ConfigError, match="fc, updown, transformer"):
        build_model(cfg, V, FC_DIM, ATT_DIM)


def test_each_family_builds_its_class_and_names_keys_of_the_model_section():
    """The architectures are the registry's (no list of them elsewhere); each own family's keys are the model
    section's."""
    assert OWN == ("fc", "updown", "transformer", "hrl")
    sections = {field.name for field in fields(ModelConfig)}
    for arch in OWN:
        assert isinstance(build(arch), ARCHITECTURES[arch].model)
        assert ARCHITECTURES[arch].keys and set(ARCHITECTURES[arch].keys) <= sections - {"arch"}, arch


@pytest.mark.parametrize("change", [{"hidden_dim": 0}, {"dropout": 1.0}, {"num_enc_layers": -1},
                                    {"arch": "transformer", "hidden_dim": 10, "num_heads": 4}])
def test_config_rejects_bad_values(change):
    with pytest.raises(ConfigError, match=next(iter(change)) if "arch" not in change else "num_heads"):
        replace(ModelConfig(), **change)


def test_every_config_field_has_help():
    assert all(f.metadata.get("help") for f in fields(ModelConfig))


def test_updown_regions_shared_per_image_give_the_same_values_and_gradients_as_copies():
    """UpDown keeps the regions once per image for n rows (expand_memory); copying them to each
    row (expand_batch, or expanded features) must give the same outputs and parameter gradients."""
    feats, tokens = make_feats(), make_tokens(rows=3 * B)
    results = []
    for shared in (True, False):
        model = build("updown").eval()  # no dropout: copies would draw different masks
        logits = model(feats, tokens, seq_per_img=3) if shared else model(feats.expand(3), tokens)
        (logits.log_softmax(-1)[..., 4].sum()).backward()
        results.append((logits, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (shared_logits, shared_grads), (copied_logits, copied_grads) = results
    torch.testing.assert_close(shared_logits, copied_logits, atol=1e-5, rtol=1e-5)
    for name, grad in shared_grads.items():
        torch.testing.assert_close(grad, copied_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_lstm_runs_in_fp32_on_the_cpu_under_autocast():
    """oneDNN has no bf16 LSTM on CPUs without bf16 instructions (every call failed under autocast): the
    LSTM of the value network and the embedding models leaves autocast on the CPU, same weights and keys."""
    from rlcap.models.lstm import LSTM

    torch.manual_seed(0)
    ours, plain = LSTM(8, 6, batch_first=True), torch.nn.LSTM(8, 6, batch_first=True)
    plain.load_state_dict(ours.state_dict())  # the same state dict: checkpoints of either load in the other
    x = torch.randn(3, 5, 8)
    expected, (h, c) = plain(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, (h2, c2) = ours(x)
        again, _ = ours(x[:, :1], (h2, c2))  # a step from a given state, as the value network's lookahead
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(again, plain(x[:, :1], (h, c))[0])
