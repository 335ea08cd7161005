"""Florence-2 as an rlcap policy (rlcap.models.hf.seq2seq_vlm), built tiny offline (rlcap.models.hf.build_vlm): on
the cells of its vision tower's map (what `rlcap features --encoder hf:DIR` stores for it), rlcap's teacher-forced
logits are the model's own forward from pixels and the ``<CAPTION>`` prompt, its greedy and beam decoding write
what its own ``generate()`` writes, and the sampled captions' log-probabilities are those of the one-pass
scoring."""

from __future__ import annotations

import pytest
import torch

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS

transformers = pytest.importorskip("transformers")

CAPTIONS = ["a red circle above a blue square", "two green triangles", "a small yellow square left of a circle"]


@pytest.fixture(scope="module")
def florence(tmp_path_factory):
    """The folder, the model as transformers loads it, 3 random pictures, their image tokens and the prompt's
    ids as the processor makes them."""
    from rlcap.models.hf.build_vlm import build_vlm

    folder = build_vlm("florence2", tmp_path_factory.mktemp("florence") / "f", CAPTIONS, seed=3)
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    torch.manual_seed(0)
    pixels = torch.randn(3, 3, 32, 32)
    from PIL import Image

    from rlcap.encoders.hf import HFImageEncoder

    fc, att = HFImageEncoder(folder).features(pixels)  # what `rlcap features --encoder hf:DIR` stores

    prompt = processor(images=[Image.new("RGB", (32, 32))] * 3, text=["<CAPTION>"] * 3,
                       return_tensors="pt")["input_ids"]
    feats = Feats(fc, att, torch.ones(att.shape[:2], dtype=torch.bool))
    return folder, model, pixels, feats, prompt


def _policy(folder):
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    return Seq2SeqVLMCaptioner(folder).eval()


def test_teacher_forced_logits_are_the_models_own_forward(florence):
    folder, model, pixels, feats, prompt = florence
    policy = _policy(folder)
    assert policy.prompt == "<CAPTION>" and policy.prefix == [2, 0]  # </s> starts, <s> forced (BART's)
    torch.manual_seed(1)
    words = torch.randint(4, policy.vocab_size, (6, 5))  # 2 captions an image, rlcap ids
    tokens = torch.cat([torch.full((6, 1), BOS), words, torch.full((6, 1), EOS)], 1)
    with torch.no_grad():
        ours = policy(feats, tokens, seq_per_img=2)  # (6, 7, V) rlcap's order
        decoder = torch.cat([torch.tensor([[2, 0]]).expand(6, 2), policy.ids.hf_ids(tokens[:, 1:])], 1)
        theirs = model(pixel_values=pixels.repeat_interleave(2, 0), input_ids=prompt.repeat_interleave(2, 0),
                       decoder_input_ids=decoder).logits[:, 1:]  # (the logits after </s> <s>, then each word)
    assert ours.shape == (6, 7, policy.vocab_size)
    torch.testing.assert_close(ours.log_softmax(-1), policy.ids.rlcap_logits(theirs).log_softmax(-1),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("beams", [1, 3])
def test_decoding_is_the_models_own_generate(florence, beams):
    from rlcap.decoding import Decoding, beam_search, greedy

    folder, model, pixels, feats, prompt = florence
    policy = _policy(folder)
    ids = policy.ids
    with torch.no_grad():
        ours = greedy(policy, feats, max_len=8) if beams == 1 else beam_search(policy, feats,
                                                                               Decoding("beam", 8, beam_size=3))
        theirs = model.generate(pixel_values=pixels, input_ids=prompt, max_new_tokens=9, num_beams=beams,
                                do_sample=False, suppress_tokens=[ids.pad], forced_eos_token_id=None,
                                length_penalty=0.0)  # (rlcap ranks finished beams by their summed log-probability)
    theirs = theirs[:, 2:]  # (after </s> <s>: the decoder's prefix, never caption words; rlcap forces no EOS at
    # max_len, and its export turns BART's forced_eos_token_id off: docs/MODELS.md)
    for a, b in zip(ids.hf_ids(ours.tokens).tolist(), theirs.tolist()):
        until = a.index(ids.end) + 1 if ids.end in a else len(a)
        assert a[:until] == b[:until], (a, b)


def test_sampled_logprobs_are_the_scoring_pass(florence):
    """Sampling without autograd, then one teacher-forced pass: the same log-probabilities (fp32, 1e-5)."""
    from rlcap.decoding import Decoding, banned_words, sample, word_logprobs

    folder, _, _, feats, _ = florence
    policy = _policy(folder)
    generator = torch.Generator().manual_seed(0)  # cpu: the sampler draws on the CPU in this test
    with torch.no_grad():
        drawn = sample(policy, feats, 2, Decoding("sample", 6), generator=generator)
    memory = policy.expand_memory(policy.encode(feats), 2)
    inputs = torch.cat([torch.full((6, 1), BOS), drawn.tokens[:, :-1]], 1)
    scores, _ = policy.score_samples(memory, inputs, return_hidden=False)
    scored = word_logprobs(scores, banned_words(policy.vocab_size, scores))  # (without PAD and BOS, as drawn)
    logprobs = scored.gather(2, drawn.tokens[..., None])[..., 0]
    mask = drawn.tokens != 0
    torch.testing.assert_close(logprobs[mask], drawn.logprobs[mask], rtol=1e-5, atol=1e-5)


def test_cli_builds_extracts_trains_xe_and_exports(tmp_path, capsys):
    """As a user runs it: `rlcap hf-captioner --family florence2`, `rlcap features --encoder hf:DIR`, XE with
    `model.arch=hf`, `rlcap eval`, SCST from the XE model, `rlcap caption` on picture files, a run from the tuned
    `best/hf`; `best/hf`'s own `generate()` from the pictures and
    `<CAPTION>`, with the settings the export saved (the run's beam size and most words), writes rlcap's captions."""
    import json

    from PIL import Image

    from rlcap.cli import main
    from rlcap.train.logger import read_log
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset, tiny_overrides

    dataset, _ = make_tiny_dataset(tmp_path)
    add_pictures(dataset)
    model = tmp_path / "florence"
    assert main(["hf-captioner", str(model), "--dataset", str(dataset), "--family", "florence2", "--size", "tiny",
                 "--tokenizer", "word"]) == 0
    store = tmp_path / "florence.h5"
    assert main(["features", str(tmp_path), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    xe = tmp_path / "xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        "model.arch": "hf", "model.path": model, "model.dropout": 0.0, "xe.epochs": 3, "optim.lr": 0.003})]) == 0
    losses = [r["loss"] for r in read_log(xe / "log.jsonl") if r["split"] == "train"]
    assert losses[-1] < losses[0] * 0.8, losses  # it learns the captions
    assert main(["eval", str(xe / "best")]) == 0  # (the run's decoding: beam search, 3 beams)
    ours = {str(p["image_id"]): p["caption"] for p in
            json.loads((xe / "best" / "eval_test" / "predictions.json").read_text())}
    exported = transformers.AutoModelForImageTextToText.from_pretrained(xe / "best" / "hf").eval()
    processor = transformers.AutoProcessor.from_pretrained(xe / "best" / "hf")
    records = [r for r in json.loads(dataset.read_text())["images"] if r["split"] == "test"]
    pictures = [Image.open(tmp_path / r["filename"]).convert("RGB") for r in records]
    inputs = processor(images=pictures, text=["<CAPTION>"] * len(pictures), return_tensors="pt")
    with torch.no_grad():
        out = exported.generate(**inputs, do_sample=False)
    theirs = processor.batch_decode(out, skip_special_tokens=True)
    same = sum(ours[str(r["imgid"])] == text.strip() for r, text in zip(records, theirs))
    assert len(ours) == 6 and same >= 0.9 * len(ours), (ours, theirs)
    scst = tmp_path / "scst"  # sampled without autograd, scored in one pass
    overrides = [o for o in tiny_overrides(dataset, store, scst) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={xe / 'best'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2"]) == 0
    assert len([r for r in read_log(scst / "log.jsonl") if r["split"] == "train"]) == 3
    capsys.readouterr()
    pictures = [str(tmp_path / r["filename"]) for r in records]
    assert main(["caption", str(scst / "best"), *pictures, "--beam-size", "1"]) == 0
    written = capsys.readouterr().out.strip().splitlines()
    assert len(written) == len(pictures), written
    again = tmp_path / "from_hf"  # a tuned folder starts a run as a downloaded one does
    overrides = [o for o in tiny_overrides(dataset, store, again) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={scst / 'best' / 'hf'}",
                 "rl.epochs=1", "rl.batch_size=8", "rl.n_samples=2", "max_steps=1"]) == 0
    assert json.loads((again / "config.json").read_text())["model"]["arch"] == "hf"


def test_lora_trains_adapters_only_and_exports_them_merged(florence, tmp_path):
    """model.train=lora: only the adapters on the language model's layers train; the export merges them, with
    the frozen tower back in its place, and the folder computes what the policy computed."""
    pytest.importorskip("peft")
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder, _, _, feats, _ = florence
    policy = Seq2SeqVLMCaptioner(folder, train="lora", lora_rank=2, lora_alpha=4.0)
    trained = [name for name, p in policy.named_parameters() if p.requires_grad]
    assert trained and all(".lora_" in name for name in trained)
    assert any(".encoder." in name for name in trained) and any(".decoder." in name for name in trained)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)  # (B = 0 at the start: the adapters would change nothing)
    tokens = torch.cat([torch.full((3, 1), BOS), torch.randint(4, policy.vocab_size, (3, 4))], 1)
    policy.eval()
    with torch.no_grad():
        ours = policy(feats, tokens)
        policy.export_pretrained(tmp_path / "hf")
        exported = Seq2SeqVLMCaptioner(tmp_path / "hf").eval()(feats, tokens)
        plain = Seq2SeqVLMCaptioner(folder).eval()(feats, tokens)
    torch.testing.assert_close(exported, ours, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(plain, ours, atol=1e-3)  # (the adapters changed what it computes)


def test_gradient_checkpointing_gives_the_same_gradients(florence):
    from transformers.modeling_layers import GradientCheckpointingLayer

    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder, _, _, feats, _ = florence
    tokens = torch.cat([torch.full((3, 1), BOS), torch.randint(4, 20, (3, 4))], 1)
    grads = []
    for checkpointing in (False, True):
        policy = Seq2SeqVLMCaptioner(folder, gradient_checkpointing=checkpointing)  # (in training mode: transformers
        torch.manual_seed(0)  # checkpoints only then; its dropout draws the same masks again from the same seed)
        policy(feats, tokens).logsumexp(-1).sum().backward()
        layers = [m for m in policy.modules() if isinstance(m, GradientCheckpointingLayer)]
        assert len(layers) == 4 and all(m.gradient_checkpointing == checkpointing for m in layers)  # 2 + 2 layers
        grads.append({n: p.grad for n, p in policy.named_parameters() if p.grad is not None})
    assert grads[0] and grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6)


def test_weights_move_between_plain_and_lora_policies(florence):
    """A plain checkpoint starts a LoRA policy (its adapters new, the same function) and a LoRA checkpoint a plain
    one (merged), as init_from does between an XE run and a LoRA SCST run."""
    pytest.importorskip("peft")
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder, _, _, feats, _ = florence
    tokens = torch.cat([torch.full((3, 1), BOS), torch.randint(4, 20, (3, 4))], 1)
    plain, lora = Seq2SeqVLMCaptioner(folder).eval(), Seq2SeqVLMCaptioner(folder, train="lora").eval()
    with torch.no_grad():
        for p in plain.parameters():
            p.add_(0.01)  # (weights unlike the folder's)
        lora.load_state_dict(plain.state_dict())
        torch.testing.assert_close(lora(feats, tokens), plain(feats, tokens), rtol=1e-5, atol=1e-5)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
        again = Seq2SeqVLMCaptioner(folder).eval()
        again.load_state_dict(again.adapt_weights(lora.state_dict(), {"train": "lora", "lora_rank": 8,
                                                                      "lora_alpha": 16.0}))
        torch.testing.assert_close(again(feats, tokens), lora(feats, tokens), rtol=1e-4, atol=1e-4)


def test_lora_over_bfloat16_weights(florence, tmp_path):
    """model.dtype=bfloat16 with model.train=lora: the weights in bf16, the adapters (and their gradients) in fp32;
    the export holds the merged bf16 weights, which load and compute what the policy computes (bf16's 1e-2)."""
    pytest.importorskip("peft")
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder, _, _, feats, _ = florence
    policy = Seq2SeqVLMCaptioner(folder, train="lora", dtype="bfloat16")
    dtypes = {name: p.dtype for name, p in policy.named_parameters()}
    assert {d for n, d in dtypes.items() if ".lora_" in n} == {torch.float32}
    assert {d for n, d in dtypes.items() if ".lora_" not in n} == {torch.bfloat16}
    tokens = torch.cat([torch.full((3, 1), BOS), torch.randint(4, 20, (3, 4))], 1)
    policy(feats, tokens).logsumexp(-1).sum().backward()
    grads = [p.grad for n, p in policy.named_parameters() if ".lora_B" in n]
    assert grads and all(g is not None and g.dtype == torch.float32 and g.abs().sum() > 0 for g in grads)
    policy.eval()
    with torch.no_grad():
        ours = policy(feats, tokens)
        policy.export_pretrained(tmp_path / "hf")
        exported = Seq2SeqVLMCaptioner(tmp_path / "hf", dtype="bfloat16").eval()(feats, tokens)
    assert torch.isfinite(ours.logsumexp(-1)).all()  # (-inf only in the columns of tokens the model lacks)
    torch.testing.assert_close(exported, ours, rtol=1e-2, atol=1e-2)


def test_a_store_of_another_tower_is_refused(florence, tmp_path):
    """The store records its tower's weights (`rlcap features`); the policy reads only its own tower's cells, in
    whatever dtype its language model is loaded."""
    from rlcap.encoders.hf import HFImageEncoder
    from rlcap.errors import DataError
    from rlcap.models.hf.build_vlm import build_vlm
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder = florence[0]
    records = HFImageEncoder(folder).records()
    Seq2SeqVLMCaptioner(folder).check_store(records, "own.h5")
    Seq2SeqVLMCaptioner(folder, dtype="bfloat16").check_store(records, "own.h5")
    other = build_vlm("florence2", tmp_path / "other", CAPTIONS, seed=4)
    with pytest.raises(DataError, match="rlcap features --encoder hf:"):
        Seq2SeqVLMCaptioner(other).check_store(records, "own.h5")
