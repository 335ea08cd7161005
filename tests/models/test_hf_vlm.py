"""Instruction vision-language models as rlcap policies (rlcap.models.hf.vlm), each built tiny with random weights
(rlcap.models.hf.build_vlm): rlcap's teacher-forced log-probabilities of a caption are the model's own forward from
the pixels and the prompt, greedy and beam-3 decoding are its own ``generate()`` with the same prompt, the sampled
and scored passes agree, LoRA, bf16 and gradient checkpointing, and the stores a policy refuses. Through the CLI:
tests/models/test_hf_vlm_cli.py."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.models.vlm_matrix import (CAPTIONS, built_family, captions as _captions, check_teacher_forced,  # noqa: E402
                                    their_inputs as _their_inputs)

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "smolvlm", "llava", "paligemma", "idefics2", "gemma3", "qwen3_vl", "glm4v",
            "internvl", "llava_onevision", "mistral3")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """family -> (folder, policy in eval mode, its reference model, the pictures, their Feats)."""
    root = tmp_path_factory.mktemp("vlm")
    return {family: built_family(family, root / family) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_teacher_forced_logprobs_are_the_models_own_forward(built, family):
    """Stored image tokens and the processor's prompt for a blank picture of the stored size give the log-
    probabilities of the model's own forward from the picture's pixels and the prompt (1e-4), for pictures of three
    sizes in one padded batch (Qwen2-VL: three grids; SmolVLM: tilings)."""
    _, policy, reference, pictures, feats = built[family]
    check_teacher_forced(policy, reference, pictures, feats)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("beams", [1, 3])
def test_greedy_and_beam_search_are_the_models_own_generate(built, family, beams):
    """With the generation settings `best/hf` exports: rlcap's end token, its pad, start and image tokens suppressed
    and the scores renormalised after (as rlcap's decoding renormalises without them; transformers' beam search
    without `renormalize_logits` ranks beams otherwise)."""
    from rlcap.decoding import Decoding, beam_search, greedy

    _, policy, reference, pictures, feats = built[family]
    ids = policy.ids
    banned = policy.banned()  # its pad, start and image tokens
    with torch.no_grad():
        out = greedy(policy, feats, max_len=8) if beams == 1 else beam_search(policy, feats,
                                                                              Decoding("beam", 8, beam_size=beams))
        for i, picture in enumerate(pictures):
            inputs = _their_inputs(policy, picture)
            # length_penalty 0: rlcap's beam search ranks finished captions by their summed log-probability, as
            # `best/hf` exports it (transformers' default 1.0 would divide by the length: a caption ended early
            # would rank otherwise)
            theirs = reference.generate(**inputs, max_new_tokens=8, num_beams=beams, do_sample=False,
                                        eos_token_id=ids.end, suppress_tokens=banned, renormalize_logits=True,
                                        length_penalty=0.0)
            theirs = theirs[0, inputs["input_ids"].shape[1]:].tolist()
            ours = ids.hf_ids(out.tokens[i][out.tokens[i] != 0]).tolist()
            assert ours == theirs[:len(ours)] and len(ours) >= min(len(theirs), 1), (i, ours, theirs)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_and_scored_logprobs_agree(built, family):
    """The scoring pass (one teacher-forced pass over prompt and sampled words) gives the log-probabilities the
    sampling steps computed (fp32, 1e-5): the cache, positions and masks of the steps are the forward's."""
    from rlcap.decoding import Decoding, sample
    from rlcap.decoding.word_distribution import banned_words, word_logprobs

    _, policy, _, _, feats = built[family]
    torch.manual_seed(0)
    with torch.no_grad():
        drawn = sample(policy, feats, 2, Decoding("sample", 6))
        memory = policy.expand_memory(policy.encode(feats), 2)
        inputs = torch.cat([torch.ones_like(drawn.tokens[:, :1]), drawn.tokens[:, :-1]], 1)  # BOS, then the words
        scores, _ = policy.score_samples(memory, inputs, False)
        scored = word_logprobs(scores, banned_words(scores.shape[-1], scores))  # (R, T, V)
        scored = scored.gather(2, drawn.tokens[..., None])[..., 0]
    torch.testing.assert_close(scored[drawn.mask], drawn.logprobs[drawn.mask], rtol=1e-5, atol=1e-5)


def _xe_grads(policy, feats, tokens, phase=None) -> dict[str, torch.Tensor]:
    """The XE loss's gradients; ``phase`` (a list) holds "forward", then "backward" while the backward pass runs."""
    phase = [] if phase is None else phase
    phase.append("forward")
    logits = policy(feats, tokens)  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), ignore_index=0)
    phase.append("backward")
    loss.backward()
    return {name: p.grad.clone() for name, p in policy.named_parameters() if p.requires_grad}


def test_lora_in_fp32_over_bf16_weights_and_gradient_checkpointing(built):
    """model.train=lora with model.dtype=bfloat16: the weights load in bf16, only the language model's LoRA adapters
    train, in fp32 (so their optimizer state is fp32); model.gradient_checkpointing gives the gradients of a pass
    without it (fp32)."""
    from rlcap.models.hf.parts import layer_stack
    from rlcap.models.hf.vlm import HFVLMCaptioner

    folder, policy, _, _, feats = built["qwen2_vl"]
    tokens = _captions(policy)
    lora = HFVLMCaptioner(folder, train="lora", dtype="bfloat16").eval()
    grads = _xe_grads(lora, feats, tokens)
    assert grads and all(".lora_" in name and g.dtype == torch.float32 for name, g in grads.items()), list(grads)
    assert next(lora.model.get_decoder().parameters()).dtype == torch.bfloat16
    runs, recomputed = {}, {}
    for name, checkpointing in (("plain", False), ("checkpointed", True)):
        policy = HFVLMCaptioner(folder, gradient_checkpointing=checkpointing).train()  # (the tiny model: no dropout)
        phase, calls = [], []  # a module inside the first layer: called again in the backward pass when checkpointed
        inner = next(iter(layer_stack(policy.model.get_decoder())[0].children()))
        hook = inner.register_forward_hook(lambda *_: calls.append(phase[-1]))
        runs[name] = _xe_grads(policy, feats, tokens, phase)
        recomputed[name] = calls.count("backward")
        hook.remove()
    assert recomputed == {"plain": 0, "checkpointed": 1}, recomputed
    plain, checkpointed = runs["plain"], runs["checkpointed"]
    assert plain.keys() == checkpointed.keys() and len(plain) > 10
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6)


def test_a_store_of_other_image_tokens_is_refused(built):
    """The policy reads its own image side's tokens, placed by its own processor: a store of another model, of
    other weights, or written with other image processor settings (another max_pixels: other grids and token
    counts) is refused in one line naming what to run."""
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.errors import DataError

    folder, policy, _, _, _ = built["qwen2_vl"]
    own = load_vlm_encoder(folder).records()
    policy.check_store(own, "own.h5")
    other_side = load_vlm_encoder(built["qwen2_5_vl"][0]).records()
    others = [other_side, {**own, "tower_weights": other_side["tower_weights"]},
              {**own, "preprocessing": own["preprocessing"].replace('"merge_size": 2', '"merge_size": 4')},
              {k: v for k, v in own.items() if k != "fc_layout"}]
    for records in others:
        assert records != own
        with pytest.raises(DataError, match="rlcap features --encoder hf:"):
            policy.check_store(records, "other.h5")


def test_a_captioner_of_the_last_release_refuses_dtype_and_checkpointing(tmp_path):
    """model.dtype and model.gradient_checkpointing are a vision-language model's: a GIT folder refuses them in
    one line rather than ignoring them."""
    from rlcap.errors import ConfigError
    from rlcap.models.hf.build_captioner import build_captioner
    from rlcap.models.hf.architecture import HF
    from rlcap.models.model_config import ModelConfig

    folder = build_captioner("git", tmp_path / "git", CAPTIONS, size="tiny", tokenizer="word")
    for setting in ({"dtype": "bfloat16"}, {"gradient_checkpointing": True}):
        with pytest.raises(ConfigError, match="apply to vision-language models"):
            HF.build(ModelConfig(arch="hf", path=str(folder), **setting), 0, 0, 0)


def test_sampled_without_autograd_and_scored_in_micro_batches(built):
    """With autograd, a vision-language policy samples without it and is scored in one pass (ScoresSamples): the
    same words as sampling without autograd from the same seed, and micro-batches of 4 and 3 captions (3 splits an
    image's samples) give the loss and gradients of one pass (1e-6; in float64, where the sums' order, which
    micro-batches change, leaves no fp32 rounding of 1e-5 in the largest gradients)."""
    from rlcap.data.feats import Feats
    from rlcap.decoding import Decoding, sample
    from rlcap.models.hf.vlm import HFVLMCaptioner

    folder, _, _, _, feats = built["smolvlm"]
    policy = HFVLMCaptioner(folder).double()
    feats = Feats(feats.fc.double(), feats.att.double(), feats.att_mask)

    def run(micro_batch, grad=True):
        policy.zero_grad()
        with torch.set_grad_enabled(grad):
            out = sample(policy, feats, 2, Decoding("sample", 6), generator=torch.Generator().manual_seed(0),
                         micro_batch=micro_batch)
        if not grad:
            return out.tokens, None, None
        loss = -(out.logprobs * torch.arange(1, 7, dtype=out.logprobs.dtype)[:, None]).sum()  # rows weighed apart
        loss.backward()
        return out.tokens, loss.detach(), [p.grad.clone() for p in policy.parameters() if p.requires_grad]

    words, _, _ = run(0, grad=False)
    tokens, loss, grads = run(0)
    assert torch.equal(tokens, words)
    for micro_batch in (4, 3):
        tokens_m, loss_m, grads_m = run(micro_batch)
        assert torch.equal(tokens_m, tokens)
        torch.testing.assert_close(loss_m, loss, rtol=1e-6, atol=1e-6)
        for g_m, g in zip(grads_m, grads):
            torch.testing.assert_close(g_m, g, rtol=1e-6, atol=1e-6)


def test_deepstack_features_travel_in_the_store(built):
    """Qwen3-VL's get_image_features returns deepstack_features beside its pooler_output: the store's rows hold both
    (its fc_layout says so), the policy reads them (zeroing them changes its log-probabilities), and a store of
    the pooler_output alone is refused."""
    from rlcap.data.feats import Feats
    from rlcap.encoders.hf_vlm import FC_LAYOUT, load_vlm_encoder
    from rlcap.errors import DataError, RlcapError
    from rlcap.models.hf.vlm import HFVLMCaptioner

    folder, policy, _, _, feats = built["qwen3_vl"]
    records = load_vlm_encoder(folder).records()
    width = policy.hidden_size
    assert policy.adapters.images.parts == 2 and feats.att.shape[-1] == 2 * width and "deepstack_features" in records["fc_layout"]
    tokens = _captions(policy)
    with torch.no_grad():
        ours = policy(feats, tokens)
        plain = feats.att.clone()
        plain[..., width:] = 0
        without = policy(Feats(feats.fc, plain, feats.att_mask), tokens)
    real = torch.isfinite(ours)
    assert not torch.allclose(ours[real], without[real], atol=1e-4)
    with pytest.raises(DataError, match="rlcap features --encoder hf:"):
        policy.check_store({**records, "fc_layout": FC_LAYOUT}, "plain.h5")
    with pytest.raises(RlcapError, match="-d image tokens"):
        HFVLMCaptioner(folder, att_dim=width)


def _family_table() -> dict[str, dict[str, str]]:
    """docs/MODELS.md's family table: --family -> its adapters' columns."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "MODELS.md").read_text(encoding="utf-8")
    section = page.split("### The vision-language families and the adapters each takes")[1].split("\n\n|")[1]
    header, _, *rows = ("|" + section.split("\n\n")[0]).splitlines()
    names = [cell.strip() for cell in header.strip("|").split("|")]
    table = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0].strip("`")] = dict(zip(names[2:], cells[2:]))
    return table


def test_models_md_lists_the_adapters_each_family_takes(built):
    """Each family's row of docs/MODELS.md's table is what its tiny folder's policy chose from what the model and
    its processor declare (rlcap.models.hf.adapters.choose), and every family rlcap builds has a row."""
    table = _family_table()
    assert set(table) == set(FAMILIES), sorted(set(table) ^ set(FAMILIES))
    for family in FAMILIES:
        assert table[family] == built[family][1].adapters.labels(), family
