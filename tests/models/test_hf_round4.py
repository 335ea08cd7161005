"""Transformers captioners whose stores, tokenizers and special tokens must be their own, as a new user meets them
through the CLI: a store of another tower, a folder without its tokenizer, the nlpconnect/vit-gpt2 layout (start =
end = pad, the pad on the top-level config only), the export's generation settings, and the one-line refusals of
truncated weights, of too long captions and of folders that hold no captioner."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from rlcap.cli import main
from rlcap.models.hf.build_captioner import build_captioner
from rlcap.train.logger import read_log
from tests.models.hf_captioners import exported_generate, save_captioner
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny dataset with pictures, a tiny GIT and BLIP, a ViT+GPT-2 in the nlpconnect layout, and each one's
    store written by `rlcap features --encoder hf:DIR`."""
    folder = tmp_path_factory.mktemp("hf_round4")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    found = {"git": save_captioner("git", folder / "git", dataset),
             "blip": save_captioner("blip", folder / "blip", dataset),
             "nlp": build_captioner("vision_encoder_decoder", folder / "nlp", captions, size="tiny", tokenizer="word",
                                    layout="nlpconnect")}
    for name, model in found.items():
        assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                     "--out", str(folder / f"{name}.h5")]) == 0
    return folder, dataset, found


def _train(folder, dataset, store, out, path, *extra, epochs=1):
    return main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, out, **{
        "model.arch": "hf", "model.path": path, "model.dropout": 0.0, "xe.epochs": epochs, "optim.lr": 0.003}),
        *extra])


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_store_of_another_tower_is_refused(models, capsys, caplog):
    """Build 2: a GIT policy on a BLIP store (both 32-d) is refused in one line naming both towers; its own store
    trains, and so does a run from its checkpoint's hf/ export on that store (the export's tower is the same)."""
    folder, dataset, found = models
    capsys.readouterr()
    assert _train(folder, dataset, folder / "blip.h5", folder / "git_on_blip", found["git"]) != 0
    err = _one_line_error(capsys)
    assert "hf:BlipForConditionalGeneration" in err and "hf:GitForCausalLM" in err and "image side" in err, err
    assert _train(folder, dataset, folder / "git.h5", folder / "git_own", found["git"], "max_steps=2") == 0
    again = folder / "git_from_hf"
    overrides = [o for o in tiny_overrides(dataset, folder / "git.h5", again) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_xe.yaml", *overrides, f"init_from={folder / 'git_own' / 'last' / 'hf'}",
                 "max_steps=1"]) == 0
    capsys.readouterr()
    assert main(["eval", str(folder / "git_own" / "last"), f"data.features={folder / 'blip.h5'}"]) != 0
    assert "hf:BlipForConditionalGeneration" in _one_line_error(capsys)
    # a store that records no encoder (written before rlcap recorded it) passes, with a warning
    from rlcap.models.hf.captioner import HFCaptioner

    policy = HFCaptioner(found["git"])
    with caplog.at_level(logging.WARNING):
        policy.check_store({"fc": 32}, "old.h5")
    assert "records no encoder weights" in caplog.text
    with pytest.raises(Exception, match="hf:GitForCausalLM.*image side 0+"):
        policy.check_store({"encoder": "hf:GitForCausalLM", "tower_weights": "0" * 32}, "other.h5")


def test_a_folder_without_its_tokenizer_is_refused(models, tmp_path, capsys):
    """Build 3: a GIT folder without tokenizer files (transformers builds an empty 5-token BertTokenizer) and one
    whose config's end token is an ordinary word of its tokenizer are refused in one line each."""
    folder, dataset, found = models
    bare = tmp_path / "git_no_tokenizer"
    shutil.copytree(found["git"], bare)
    for file in bare.glob("tokenizer*"):
        file.unlink()
    capsys.readouterr()
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run1", bare) != 0
    err = _one_line_error(capsys)
    assert "tokenizer has 5 tokens and the model's output layer 17" in err, err
    other = tmp_path / "git_other_end"
    shutil.copytree(found["git"], other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "eos_token_id": 7}))
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run2", other) != 0
    err = _one_line_error(capsys)
    assert "the config's end token 7" in err and "not one of its special tokens" in err, err


def _batch(policy, vocab, records, n=6):
    """Stored tower tokens of ``n`` training images and one caption each as rlcap ids (B, T) from BOS."""
    from rlcap.data.vocab import BOS, EOS, PAD

    rows = [[BOS, *vocab.encode(r["sentences"][1]["raw"].split()), EOS]
            for r in records[:n]]
    width = max(map(len, rows))
    return torch.tensor([row + [PAD] * (width - len(row)) for row in rows])


def test_xe_is_the_models_own_nll_when_start_end_and_pad_share_an_id(models):
    """Build 5: on the nlpconnect layout (start = end = pad = <|endoftext|>), rlcap's XE over its widened
    vocabulary equals the transformers model's own loss with labels (within 1e-5), as its step's
    log-probabilities equal the model's own log-softmax."""
    import h5py

    from rlcap.data.feats import Feats
    from rlcap.data.hf_text import TokenizerVocab
    from rlcap.data.vocab import PAD
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.rl.losses import xe_loss

    folder, dataset, found = models
    policy = HFCaptioner(found["nlp"]).eval()
    vocab = TokenizerVocab.from_folder(found["nlp"])
    assert policy.ids.start == policy.ids.end == policy.ids.pad == len(vocab.tokenizer.get_vocab()) - 1
    records = [r for r in json.loads(dataset.read_text())["images"] if r["split"] == "train"]
    with h5py.File(folder / "nlp.h5", "r") as f:
        row = {i: n for n, i in enumerate(f["ids"].asstr()[()])}
        att = torch.from_numpy(f["att"][[row[str(r["imgid"])] for r in records[:6]]]).float()  # (6, T, D)
    tokens = _batch(policy, vocab, records)
    feats = Feats(att[:, 0], att, torch.ones(att.shape[:2], dtype=torch.bool))
    targets = tokens[:, 1:]
    with torch.no_grad():
        ours = xe_loss(policy(feats, tokens[:, :-1]), targets, targets != PAD)
        labels = policy.ids.hf_ids(targets).masked_fill(targets == PAD, -100)
        theirs = policy.model(pixel_values=att[:, None], labels=labels).loss
    assert torch.isfinite(ours) and abs(float(ours) - float(theirs)) < 1e-5, (float(ours), float(theirs))


def test_the_nlpconnect_layout_trains_and_captions(models, capsys):
    """Build 4: a ViT+GPT-2 with pad = eos = start on its top-level config only trains XE to a finite, falling loss
    through the CLI, and its checkpoint evaluates and captions pictures."""
    folder, dataset, found = models
    run = folder / "nlp_xe"
    assert _train(folder, dataset, folder / "nlp.h5", run, found["nlp"], epochs=2) == 0
    losses = [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert all(map(torch.isfinite, torch.tensor(losses))) and losses[-1] < losses[0], losses
    assert main(["eval", str(run / "best"), "--beam-size", "2"]) == 0
    predictions = json.loads((run / "best" / "eval_test" / "predictions.json").read_text())
    assert len(predictions) == 6 and any(p["caption"] for p in predictions), predictions
    out = folder / "nlp_captions.json"
    assert main(["caption", str(run / "best"), str(folder / "0.png"), str(folder / "1.png"), "--out", str(out)]) == 0
    assert out.is_file()


def test_a_config_without_a_pad_trains(models, tmp_path):
    """Build 4: the nlpconnect layout with no pad in any config (nor in its tokenizer) trains XE to finite
    losses: its PAD is a column of its own, never one of the model's tokens."""
    folder, dataset, found = models
    bare = tmp_path / "nlp_no_pad"
    shutil.copytree(found["nlp"], bare)
    config = json.loads((bare / "config.json").read_text())
    config.pop("pad_token_id")
    config["decoder"].pop("pad_token_id", None)
    (bare / "config.json").write_text(json.dumps(config))
    from rlcap.data.hf_text import TokenizerVocab

    assert TokenizerVocab.from_folder(bare).ids.pad is None
    run = tmp_path / "run"
    assert _train(folder, dataset, folder / "nlp.h5", run, bare, "max_steps=3") == 0
    losses = [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert len(losses) == 3 and all(map(torch.isfinite, torch.tensor(losses))), losses


def test_shared_ids_count_once():
    """Build 5: with start = end = the model's id 5 and no pad, rlcap's widened logits hold that id once (its other
    copies and the PAD/UNK it lacks are -inf), so their log-softmax is the model's own, reordered."""
    from rlcap.data.hf_text import TokenIds
    from rlcap.data.vocab import BOS, EOS, PAD, UNK

    ids = TokenIds(start=5, end=5, pad=None, unk=None, hf_size=6)
    logits = torch.randn(2, 6)
    ours = torch.log_softmax(ids.rlcap_logits(logits), -1)  # (2, 9): PAD BOS EOS UNK and model ids 0-4
    theirs = torch.log_softmax(logits, -1)
    assert ids.size == 9 and torch.isinf(ours[:, [PAD, BOS, UNK]]).all()
    assert torch.allclose(ours[:, EOS], theirs[:, 5]) and torch.allclose(ours[:, 4:], theirs[:, :5])
    assert ids.from_hf[5] == EOS and ids.hf_ids(torch.tensor([PAD, BOS, EOS])).tolist() == [5, 5, 5]


def _rlcap(best, *options) -> dict[str, str]:
    assert main(["eval", str(best), *options]) == 0
    return {str(p["image_id"]): p["caption"] for p in json.loads((best / "eval_test" / "predictions.json").read_text())}


@pytest.mark.parametrize("name", ["git", "nlp"])
def test_the_export_decodes_as_rlcap_eval(models, name, capsys):
    """Build 7: `best/hf`'s generation config carries the run's decode section (beam size 2, length penalty,
    max_len, n-gram blocking): `generate()` with no arguments writes `rlcap eval`'s captions,
    `generate(num_beams=3)` those of `rlcap eval --beam-size 3`, and greedy `generate()` without blocking those of
    `--beam-size 1`."""
    folder, dataset, found = models
    run = folder / f"{name}_export"
    assert _train(folder, dataset, folder / f"{name}.h5", run, found[name], "decode.beam_size=2",
                  "decode.no_repeat_ngram=2", epochs=3) == 0
    generation = json.loads((run / "best" / "hf" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["max_new_tokens"], generation["no_repeat_ngram_size"],
            generation["length_penalty"]) == (2, 6, 2, 0.0), generation
    ours, theirs = _rlcap(run / "best"), exported_generate(run / "best", folder, dataset)
    assert ours == theirs, (ours, theirs)
    ours, theirs = _rlcap(run / "best", "--beam-size", "3"), exported_generate(run / "best", folder, dataset, num_beams=3)
    assert ours == theirs, (ours, theirs)
    # (rlcap's greedy decoding blocks no n-gram)
    ours = _rlcap(run / "best", "--beam-size", "1")
    assert ours == exported_generate(run / "best", folder, dataset, num_beams=1, no_repeat_ngram_size=0), ours


def test_a_greedy_runs_export_decodes_greedily(models, tmp_path, capsys):
    """Build 7: a run that decodes greedily (decode.beam_size=1, with n-gram blocking set, which rlcap's greedy
    decoding does not do) from a folder whose generation config beams (num_beams 4, length_penalty 2.0,
    no_repeat_ngram_size 3) saves its checkpoint (transformers refuses to save a length penalty without beams),
    and its export's `generate()` writes `rlcap eval`'s greedy captions."""
    folder, dataset, found = models
    source = tmp_path / "git_beams"
    shutil.copytree(found["git"], source)
    generation = json.loads((source / "generation_config.json").read_text())
    (source / "generation_config.json").write_text(json.dumps({**generation, "num_beams": 4, "length_penalty": 2.0,
                                                               "no_repeat_ngram_size": 3}))
    run = tmp_path / "greedy"
    assert _train(folder, dataset, folder / "git.h5", run, source, "decode.beam_size=1", "decode.no_repeat_ngram=2",
                  epochs=2) == 0
    exported = json.loads((run / "best" / "hf" / "generation_config.json").read_text())
    assert (exported["num_beams"], exported["no_repeat_ngram_size"]) == (1, 0), exported
    ours, theirs = _rlcap(run / "best"), exported_generate(run / "best", folder, dataset)
    assert ours == theirs, (ours, theirs)


def test_xe_drops_padded_targets_of_a_minus_inf_column():
    """Build 4: a -inf column (a PAD the model lacks, or a shared id's second copy) at a padded target leaves XE
    finite, and label smoothing spreads over the finite columns. Hand-computed: row 0 p(target) = 3/4; row 1 is
    padding. Smoothed (0.2): 0.8 * -log(3/4) + 0.2 * (-log(1/4) - log(3/4)) / 2."""
    import math

    from rlcap.rl.losses import xe_loss

    logits = torch.tensor([[[0.0, math.log(3.0), float("-inf")], [0.0, 0.0, float("-inf")]]], requires_grad=True)
    targets, mask = torch.tensor([[1, 2]]), torch.tensor([[True, False]])
    loss = xe_loss(logits, targets, mask)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(-math.log(0.75)) and torch.isfinite(logits.grad).all()
    smoothed = xe_loss(logits, targets, mask, label_smoothing=0.2)
    expected = 0.8 * -math.log(0.75) + 0.2 * (-math.log(0.25) - math.log(0.75)) / 2
    assert float(smoothed.detach()) == pytest.approx(expected)


def test_truncated_weights_and_too_long_captions_are_one_line(models, tmp_path, capsys):
    """Build 10: a truncated model.safetensors (features --encoder hf:, model.path=, init_from=) and a data.max_len
    beyond the decoder's positions (tiny GIT: 64) are refused in one line, the latter naming the largest value."""
    folder, dataset, found = models
    broken = tmp_path / "git_truncated"
    shutil.copytree(found["git"], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{broken}",
                 "--out", str(tmp_path / "broken.h5")]) != 0
    assert "weights cannot be read" in _one_line_error(capsys)
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run1", broken) != 0
    assert "weights cannot be read" in _one_line_error(capsys)
    overrides = [o for o in tiny_overrides(dataset, folder / "git.h5", tmp_path / "run2") if not o.startswith("model.")]
    assert main(["train", "configs/shapes_xe.yaml", *overrides, f"init_from={broken}"]) != 0
    assert "weights cannot be read" in _one_line_error(capsys)
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run3", found["git"], "data.max_len=70") != 0
    err = _one_line_error(capsys)
    assert "data.max_len=70" in err and "64 positions" in err and "data.max_len=63 or less" in err, err
    # the largest allowed: captions of 63 subwords after BOS; decoding 64 steps
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run4", found["git"], "data.max_len=63",
                  "decode.max_len=64", "max_steps=1") == 0
    assert main(["eval", str(tmp_path / "run4" / "last"), "--beam-size", "1"]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run4" / "last"), "--max-len", "65"]) != 0
    assert "decode.max_len=65: the model's text decoder has 64 positions" in _one_line_error(capsys)


def test_folders_that_hold_no_captioner_say_so(models, tmp_path, capsys):
    """Build 10: a model.path folder that is not there, a ViT (vision only) as model.path, and a BERT (text only)
    as `--encoder hf:` are refused in one line saying what the folder is."""
    import transformers

    folder, dataset, found = models
    capsys.readouterr()
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run1", tmp_path / "nowhere") != 0
    err = _one_line_error(capsys)
    assert "no such folder" in err and "Hub" not in err, err
    vit = tmp_path / "vit"
    config = transformers.ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    image_size=32, patch_size=8)
    transformers.ViTModel(config).save_pretrained(vit)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(vit)
    capsys.readouterr()  # (save_pretrained's progress bars)
    assert _train(folder, dataset, folder / "git.h5", tmp_path / "run2", vit) != 0
    err = _one_line_error(capsys)
    assert "a ViTModel is not a captioner, it writes no text" in err, err
    bert = tmp_path / "bert"
    transformers.BertModel(transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                   num_attention_heads=2, vocab_size=30)).save_pretrained(bert)
    capsys.readouterr()
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{bert}",
                 "--out", str(tmp_path / "bert.h5")]) != 0
    err = _one_line_error(capsys)
    assert "BertModel is a text-only model" in err and "image processor" not in err, err
