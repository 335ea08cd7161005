"""Image loading: every Pillow mode becomes 8-bit RGB; bad files raise DataError naming them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from rlcap.encoders.images import load_image, preprocess, resize, to_rgb
from rlcap.errors import DataError


def _save(img: Image.Image, path, **kwargs):
    img.save(path, **kwargs)
    return path


def _pixel(path, xy=(0, 0)):
    img = load_image(path)
    assert img.mode == "RGB"
    return img.getpixel(xy)


@pytest.mark.parametrize("mode, value, expected", [
    ("L", 100, (100, 100, 100)),
    ("1", 1, (255, 255, 255)),
    ("I;16", 65535, (255, 255, 255)),
    ("I;16", 32896, (128, 128, 128)),
])
def test_greyscale_modes_become_rgb(tmp_path, mode, value, expected):
    path = _save(Image.new(mode, (8, 6), value), tmp_path / "grey.png")
    assert _pixel(path) == expected


def test_32bit_and_float_greyscale_are_rescaled_not_clipped():
    assert to_rgb(Image.new("I", (2, 2), 65535)).getpixel((0, 0)) == (255, 255, 255)
    assert to_rgb(Image.new("I", (2, 2), 200)).getpixel((0, 0)) == (200, 200, 200)
    assert to_rgb(Image.new("F", (2, 2), 0.5)).getpixel((0, 0)) == (128, 128, 128)
    assert to_rgb(Image.new("F", (2, 2), 300.0)).getpixel((0, 0)) == (255, 255, 255)


def test_cmyk_jpeg_becomes_rgb(tmp_path):
    path = _save(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), tmp_path / "cmyk.jpg", quality=100)
    r, g, b = _pixel(path, (4, 4))
    assert r > 240 and g < 15 and b < 15  # pure red


def test_palette_without_transparency(tmp_path):
    img = Image.new("RGB", (8, 8), (10, 200, 30)).convert("P", palette=Image.Palette.ADAPTIVE)
    assert _pixel(_save(img, tmp_path / "p.png")) == (10, 200, 30)


def test_palette_transparency_composited_on_white(tmp_path):
    img = Image.new("P", (4, 4), 0)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    img.putpixel((1, 1), 1)
    path = _save(img, tmp_path / "pt.png", transparency=0)
    assert _pixel(path, (0, 0)) == (255, 255, 255)
    assert _pixel(path, (1, 1)) == (255, 0, 0)


def test_rgba_and_la_composited_on_white(tmp_path):
    rgba = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    rgba.putpixel((1, 1), (0, 0, 0, 255))
    rgba.putpixel((2, 2), (0, 0, 0, 128))
    path = _save(rgba, tmp_path / "rgba.png")
    assert _pixel(path, (0, 0)) == (255, 255, 255)
    assert _pixel(path, (1, 1)) == (0, 0, 0)
    assert _pixel(path, (2, 2)) == pytest.approx((127, 127, 127), abs=1)
    la = _save(Image.new("LA", (4, 4), (0, 0)), tmp_path / "la.png")
    assert _pixel(la) == (255, 255, 255)


def test_exif_orientation_applied(tmp_path):
    img = Image.new("RGB", (40, 20), (0, 0, 255))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = _save(img, tmp_path / "rot.jpg", exif=exif)
    assert load_image(path).size == (20, 40)


def test_missing_file_names_it(tmp_path):
    path = tmp_path / "nope.jpg"
    with pytest.raises(DataError, match=f"image not found: {path}"):
        load_image(path)


@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n" + bytes(50)])
def test_not_an_image_names_the_file(tmp_path, content):
    path = tmp_path / "bad.png"
    path.write_bytes(content)
    with pytest.raises(DataError, match="bad.png"):
        load_image(path)


def test_truncated_jpeg_names_the_file(tmp_path):
    noise = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    path = _save(Image.fromarray(noise), tmp_path / "cut.jpg", quality=90)
    path.write_bytes(path.read_bytes()[:600])
    with pytest.raises(DataError, match="cut.jpg"):
        load_image(path)


def test_directory_is_not_an_image(tmp_path):
    with pytest.raises(DataError, match="is a folder, not an image file"):
        load_image(tmp_path)


def test_draft_keeps_at_least_the_requested_size(tmp_path):
    path = _save(Image.new("RGB", (640, 480), (50, 60, 70)), tmp_path / "big.jpg")
    img = load_image(path, draft_size=100)
    assert min(img.size) >= 100 and img.size[0] < 640


def test_preprocess_resizes_whole_image_and_scales_like_lite():
    white = Image.new("RGB", (50, 20), (255, 255, 255))
    black = Image.new("RGB", (20, 50), (0, 0, 0))
    batch = preprocess([white, black], 32)
    assert batch.shape == (2, 3, 32, 32) and batch.dtype == torch.float32
    assert torch.allclose(batch[0], torch.full_like(batch[0], (255 - 127) / 128))
    assert torch.allclose(batch[1], torch.full_like(batch[1], -127 / 128))


def test_resize_keeps_channel_layout():
    img = Image.new("RGB", (10, 30), (1, 2, 3))
    pixels = resize(img, 16)
    assert pixels.shape == (16, 16, 3) and pixels.dtype == np.uint8
    assert tuple(pixels[8, 8]) == (1, 2, 3)
