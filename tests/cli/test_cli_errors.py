"""Bad input through the real CLI: one clear line on stderr naming the item, exit code 2, no traceback."""

import json

import numpy as np
import pytest
from PIL import Image

from rlcap import api
from rlcap.cli import main
from tests.tiny import make_tiny_dataset, tiny_overrides


def _one_line_error(capsys, argv, *needles):
    capsys.readouterr()  # drop what fixtures wrote (progress bars)
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "Traceback" not in err[0], err
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


def test_unknown_config_key(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  hiden_dim: 3\n")
    _one_line_error(capsys, ["train", str(cfg)], "model.hiden_dim", "hidden_dim")


def test_missing_config_file(capsys, tmp_path):
    _one_line_error(capsys, ["train", str(tmp_path / "nope.yaml")], "nope.yaml")


def test_missing_checkpoint(capsys, tmp_path):
    _one_line_error(capsys, ["eval", str(tmp_path / "ckpt")], "checkpoint folder not found")


@pytest.fixture
def trained(tiny_data, tmp_path):
    dataset, feats = tiny_data
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{"xe.epochs": 1})))
    return dataset, feats, tmp_path / "run" / "best"


def test_feature_id_missing_from_store(capsys, trained, tmp_path):
    dataset, feats, ckpt = trained
    data = json.loads(dataset.read_text())
    data["images"].append({"imgid": 999, "split": "test", "sentences": [{"raw": "a red circle"}]})
    other = tmp_path / "more.json"
    other.write_text(json.dumps(data))
    _one_line_error(capsys, ["eval", str(ckpt), f"data.dataset={other}"], "'999'", "feats.h5")


@pytest.fixture
def encoder_ckpt(tmp_path):
    """A checkpoint trained on 1280-d features of 64-px images (2x2 grid), like `rlcap features` output."""
    dataset, feats = make_tiny_dataset(tmp_path, fc_dim=1280, regions=4, image_size=64)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", arch="updown",
                                                       **{"xe.epochs": 1})))
    return tmp_path / "run" / "best"


def test_caption_missing_and_corrupt_images(capsys, encoder_ckpt, tmp_path):
    ckpt = encoder_ckpt
    _one_line_error(capsys, ["caption", str(ckpt), str(tmp_path / "none.png")], "none.png")
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG not really")
    _one_line_error(capsys, ["caption", str(ckpt), str(bad)], "bad.png")


def test_eval_length_penalty_reaches_the_beam_search(capsys, trained, tmp_path, monkeypatch):
    import inspect

    import rlcap.decoding.options as evaluate  # (decode_split decodes through rlcap.decoding.options.decode)

    seen = []

    def recording(*args, **kwargs):
        seen.append(inspect.signature(beam_search).bind(*args, **kwargs).arguments["decoding"].length_penalty)
        return beam_search(*args, **kwargs)

    beam_search = evaluate.beam_search
    monkeypatch.setattr(evaluate, "beam_search", recording)
    assert main(["eval", str(trained[2]), "--split", "test", "--length-penalty", "0.7", "--out", str(tmp_path / "lp")]) == 0
    assert seen and set(seen) == {0.7}
    preds = json.loads((tmp_path / "lp" / "predictions.json").read_text())
    assert len(preds) == 6


def test_eval_no_repeat_ngram_reaches_the_beam_search(capsys, trained, tmp_path):
    def captions(*flags):
        out = tmp_path / "_".join(("nr",) + flags)
        assert main(["eval", str(trained[2]), "--split", "test", *flags, "--out", str(out)]) == 0
        return [p["caption"].split() for p in json.loads((out / "predictions.json").read_text())]

    assert any(len(c) != len(set(c)) for c in captions())  # this model repeats words
    banned = captions("--no-repeat-ngram", "1")
    assert len(banned) == 6 and all(len(c) == len(set(c)) for c in banned)
    _one_line_error(capsys, ["eval", str(trained[2]), "--lookahead", "1", "--no-repeat-ngram", "3"], "lookahead")


def test_eval_and_caption_work(capsys, trained, tmp_path):
    _, _, ckpt = trained
    assert main(["eval", str(ckpt), "--split", "test", "--beam-size", "2", "--out", str(tmp_path / "ev"),
                 "--reference", "nearest_neighbour"]) == 0
    scores = json.loads((tmp_path / "ev" / "scores.json").read_text())
    assert {"Bleu_4", "CIDEr", "ROUGE_L"} <= set(scores["model"])
    assert {"Bleu_4", "CIDEr"} <= set(scores["references"]["nearest_neighbour"])
    preds = json.loads((tmp_path / "ev" / "predictions.json").read_text())
    assert len(preds) == 6 and all(isinstance(p["image_id"], int) for p in preds)
    capsys.readouterr()
    grey = tmp_path / "grey.png"
    Image.fromarray(np.full((40, 40), 128, dtype=np.uint8), mode="L").save(grey)
    # this checkpoint was trained on 8-d toy features, not the encoder's 1280-d ones
    _one_line_error(capsys, ["caption", str(ckpt), str(grey)], "1280", "8")


def test_caption_greyscale_rgba_cmyk_end_to_end(capsys, encoder_ckpt, tmp_path):
    images = []
    for mode, fill in (("L", 90), ("RGBA", (200, 10, 10, 128)), ("CMYK", (0, 255, 255, 0))):
        path = tmp_path / f"{mode}.{'jpg' if mode == 'CMYK' else 'png'}"
        Image.new(mode, (50, 40), fill).save(path)
        images.append(str(path))
    capsys.readouterr()
    assert main(["caption", str(encoder_ckpt), *images, "--out", str(tmp_path / "c.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == images
    assert set(json.loads((tmp_path / "c.json").read_text())) == set(images)
