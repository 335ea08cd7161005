"""`rlcap caption`: --skip-bad captions the good images and reports each bad one; folders expand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from rlcap import api
from rlcap.cli import main
from rlcap.encoders.sources import expand_image_paths
from rlcap.errors import DataError
from tests.tiny import make_tiny_dataset, tiny_overrides


@pytest.fixture(scope="module")
def encoder_ckpt(tmp_path_factory):
    """A checkpoint trained on 1280-d features of 64-px images (2x2 grid), like `rlcap features` output."""
    folder = tmp_path_factory.mktemp("caption")
    dataset, feats = make_tiny_dataset(folder, fc_dim=1280, regions=4, image_size=64)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "run", arch="updown",
                                                       **{"xe.epochs": 1})))
    return folder / "run" / "best"


def _png(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((40, 40, 3), value, dtype=np.uint8)).save(path)
    return path


def test_skip_bad_captions_the_good_ones(encoder_ckpt, tmp_path, capsys):
    good = [_png(tmp_path / "a.png", 10), _png(tmp_path / "c.png", 200)]
    bad = tmp_path / "b.png"
    bad.write_bytes(b"\x89PNG not really")
    missing = tmp_path / "gone.png"
    out = tmp_path / "captions.json"
    argv = ["caption", str(encoder_ckpt), str(good[0]), str(bad), str(missing), str(good[1]), "--out", str(out)]
    capsys.readouterr()
    assert main([*argv, "--skip-bad"]) == 1
    captured = capsys.readouterr()
    assert [line.split("\t")[0] for line in captured.out.splitlines()] == [str(p) for p in good]
    err = captured.err.splitlines()
    assert err[0].startswith(f"rlcap caption: skipped: cannot read image {bad}: ")
    assert err[1:] == [f"rlcap caption: skipped: image not found: {missing}",
                       "rlcap caption: 2 of 4 images could not be read"]
    assert set(json.loads(out.read_text())) == {str(p) for p in good}
    out.unlink()
    assert main(argv) == 2  # without --skip-bad: one line, nothing written
    assert capsys.readouterr().err.startswith(f"rlcap caption: error: cannot read image {bad}: ")
    assert not out.exists()


def test_folder_is_every_image_inside(encoder_ckpt, tmp_path, capsys):
    images = [_png(tmp_path / "pics" / "x.png", 30), _png(tmp_path / "pics" / "sub" / "y.jpg", 90)]
    (tmp_path / "pics" / "notes.txt").write_text("not an image")
    capsys.readouterr()
    assert main(["caption", str(encoder_ckpt), str(tmp_path / "pics")]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == [str(images[1]), str(images[0])]


def test_folder_without_images_is_one_line(encoder_ckpt, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main(["caption", str(encoder_ckpt), str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == (
        f"rlcap caption: error: {tmp_path / 'empty'} is a folder with no images or videos in it "
        "(.jpg, .jpeg, .png, .bmp, .gif, .webp, .tif, .tiff, .mp4, .avi, .mkv, .mov, .webm, .m4v, .mpg, .mpeg)\n")


def test_expand_image_paths_keeps_order(tmp_path):
    b, a = _png(tmp_path / "d" / "b.png", 1), _png(tmp_path / "d" / "a.png", 2)
    single = _png(tmp_path / "z.png", 3)
    assert expand_image_paths([single, tmp_path / "d", tmp_path / "gone.png"]) == [single, a, b, tmp_path / "gone.png"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty is a folder with no images or videos"):
        expand_image_paths([tmp_path / "empty"])


def test_caption_a_video_file_and_a_corrupt_one(encoder_ckpt, tmp_path, capsys):
    from tests.encoders.test_video import write_clip

    pytest.importorskip("av")
    write_clip(tmp_path / "clip.mp4", frames=12)
    image = _png(tmp_path / "a.png", 10)
    capsys.readouterr()
    assert main(["caption", str(encoder_ckpt), str(tmp_path / "clip.mp4"), str(image)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(tmp_path / "clip.mp4"), str(image)]  # input order
    assert all(len(line.split("\t")[1].split()) >= 1 for line in lines)
    (tmp_path / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 truncated")
    assert main(["caption", str(encoder_ckpt), str(tmp_path / "broken.mp4")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlcap caption: error: {tmp_path / 'broken.mp4'}: cannot decode the video") and err.count("\n") == 1
    (tmp_path / "empty.mp4").write_bytes(b"")
    assert main(["caption", str(encoder_ckpt), str(tmp_path / "empty.mp4")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
