"""Drawing a :class:`~rlcap.data.synthetic.scenes.Scene` with PIL.

Objects are drawn at ``SUPERSAMPLE`` times the output size and the canvas is then reduced, which
anti-aliases the edges. Each object is a solid fill (its colour jittered a little) pasted through
a shape mask, with an optional texture drawn in a shade of the same colour; the background is a
flat colour with a faint linear gradient. Variation is kept moderate on purpose: at 128 px a frozen
ImageNet encoder must still separate the 8 colours, 8 shapes and 3 sizes.
"""

from __future__ import annotations

import math
import random

import numpy as np
from PIL import Image, ImageDraw

from rlcap.data.synthetic.scenes import Scene, SceneObject

SUPERSAMPLE = 2
COLOUR_JITTER = 12  # per channel, on 0..255
GRADIENT_MAX = 20  # brightness change across the background, on 0..255
BACKGROUND_JITTER = 12  # per-image brightness change of the background colour
ROTATION_JITTER = 12.0  # degrees; larger would turn squares into diamonds

COLOUR_RGB = {
    "red": (225, 25, 30),
    "orange": (250, 130, 0),
    "yellow": (250, 225, 20),
    "green": (30, 165, 50),
    "blue": (30, 75, 230),
    "purple": (130, 40, 185),
    "pink": (250, 120, 200),
    "brown": (115, 65, 25),
}
BACKGROUND_RGB = {
    "white": (242, 242, 238),
    "grey": (185, 185, 185),
    "black": (45, 45, 48),
    "beige": (225, 210, 175),
    "light blue": (195, 215, 235),
    "light green": (200, 225, 190),
}

Point = tuple[float, float]


def render_scene(scene: Scene, image_size: int, rng: random.Random) -> Image.Image:
    """The RGB image of ``scene``, ``image_size`` pixels square; jitter comes from ``rng``."""
    side = image_size * SUPERSAMPLE
    canvas = _background(BACKGROUND_RGB[scene.background], side, rng)
    for obj in scene.objects:
        _draw_object(canvas, obj, side, rng)
    return canvas.reduce(SUPERSAMPLE)


def _background(rgb: tuple[int, int, int], side: int, rng: random.Random) -> Image.Image:
    shift = rng.uniform(-BACKGROUND_JITTER, BACKGROUND_JITTER)
    amplitude = rng.uniform(0, GRADIENT_MAX)
    angle = rng.uniform(0, 2 * math.pi)
    ramp = np.linspace(-amplitude, amplitude, side, dtype=np.float32)
    # (side, side) gradient along a random direction.
    grad = math.cos(angle) * ramp[None, :] + math.sin(angle) * ramp[:, None]
    pixels = np.asarray(rgb, dtype=np.float32)[None, None, :] + shift + grad[:, :, None]
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def _jitter(rgb: tuple[int, int, int], rng: random.Random) -> tuple[int, int, int]:
    return tuple(min(255, max(0, c + rng.randint(-COLOUR_JITTER, COLOUR_JITTER))) for c in rgb)


def _shade(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """A texture colour: darker for light colours, lighter for dark ones."""
    luma = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    if luma > 110:
        return tuple(int(c * 0.5) for c in rgb)
    return tuple(int(c + (255 - c) * 0.55) for c in rgb)


def _draw_object(canvas: Image.Image, obj: SceneObject, side: int, rng: random.Random) -> None:
    radius = obj.radius * side
    patch = int(math.ceil(2 * radius)) + 4
    centre = patch / 2.0
    colour = _jitter(COLOUR_RGB[obj.colour], rng)
    mask = Image.new("L", (patch, patch), 0)
    SHAPE_DRAWERS[obj.shape](ImageDraw.Draw(mask), centre, radius, rng)
    layer = Image.new("RGB", (patch, patch), colour)
    if obj.texture is not None:
        _draw_texture(ImageDraw.Draw(layer), obj.texture, patch, _shade(colour), side)
    corner = (int(round(obj.x * side - centre)), int(round(obj.y * side - centre)))
    canvas.paste(layer, corner, mask)


def _polygon(centre: float, points: list[Point], degrees: float) -> list[Point]:
    """``points`` (relative to the centre) rotated by ``degrees`` and moved to the centre."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return [(centre + x * c - y * s, centre + x * s + y * c) for x, y in points]


def _ring(n: int, radius: float, start_degrees: float) -> list[Point]:
    return [(radius * math.cos(math.radians(start_degrees + 360.0 * i / n)),
             radius * math.sin(math.radians(start_degrees + 360.0 * i / n))) for i in range(n)]


def _box(centre: float, r: float, dx: float = 0.0, dy: float = 0.0) -> list[float]:
    return [centre + dx - r, centre + dy - r, centre + dx + r, centre + dy + r]


def _circle(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    draw.ellipse(_box(c, 0.9 * r), fill=255)


def _square(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    draw.polygon(_polygon(c, _ring(4, 0.98 * r, 45), _tilt(rng)), fill=255)


def _triangle(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    # Centroid moved down a little so the triangle looks centred in its circle.
    pts = [(x, y + 0.12 * r) for x, y in _ring(3, 1.05 * r, -90)]
    draw.polygon(_polygon(c, pts, _tilt(rng)), fill=255)


def _star(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    outer, inner = _ring(5, r, -90), _ring(5, 0.45 * r, -54)
    pts = [p for pair in zip(outer, inner) for p in pair]
    draw.polygon(_polygon(c, pts, _tilt(rng)), fill=255)


def _diamond(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    pts = [(0, -r), (0.62 * r, 0), (0, r), (-0.62 * r, 0)]
    draw.polygon(_polygon(c, pts, _tilt(rng)), fill=255)


def _cross(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    a, w = 0.95 * r, 0.3 * r
    pts = [(-w, -a), (w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w),
           (-a, w), (-a, -w), (-w, -w)]
    draw.polygon(_polygon(c, pts, _tilt(rng)), fill=255)


def _heart(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    tilt = _tilt(rng)
    for lobe_x in (-0.42 * r, 0.42 * r):
        (cx, cy), = _polygon(0.0, [(lobe_x, -0.3 * r)], tilt)
        draw.ellipse(_box(c, 0.5 * r, cx, cy), fill=255)
    pts = [(-0.9 * r, -0.15 * r), (0.9 * r, -0.15 * r), (0, 0.92 * r)]
    draw.polygon(_polygon(c, pts, tilt), fill=255)


def _crescent(draw: ImageDraw.ImageDraw, c: float, r: float, rng: random.Random) -> None:
    direction = math.radians(rng.uniform(0, 360))  # the bite may face any way
    dx, dy = 0.42 * r * math.cos(direction), 0.42 * r * math.sin(direction)
    draw.ellipse(_box(c, 0.9 * r), fill=255)
    draw.ellipse(_box(c, 0.75 * r, dx, dy), fill=0)


def _tilt(rng: random.Random) -> float:
    return rng.uniform(-ROTATION_JITTER, ROTATION_JITTER)


# shape -> function drawing its mask (value 255) inside the circle of radius r around (c, c).
SHAPE_DRAWERS = {
    "circle": _circle, "square": _square, "triangle": _triangle, "star": _star,
    "diamond": _diamond, "cross": _cross, "heart": _heart, "crescent": _crescent,
}


def _draw_texture(draw: ImageDraw.ImageDraw, texture: str, patch: int,
                  shade: tuple[int, int, int], side: int) -> None:
    unit = max(1, round(side / 128))  # 1 output pixel = SUPERSAMPLE canvas pixels at 128 px
    if texture == "striped":
        period, width = 6 * unit, 3 * unit
        for k in range(-patch, patch, period):
            draw.line([(k, 0), (k + patch, patch)], fill=shade, width=width)
    elif texture == "dotted":
        period, r = 6 * unit, 1.5 * unit
        for i in range(period // 2, patch, period):
            for j in range(period // 2, patch, period):
                draw.ellipse([i - r, j - r, i + r, j + r], fill=shade)
    elif texture == "checkered":
        cell = 4 * unit
        for i in range(0, patch, cell):
            for j in range(0, patch, cell):
                if (i // cell + j // cell) % 2:
                    draw.rectangle([i, j, i + cell - 1, j + cell - 1], fill=shade)
    else:
        raise ValueError(f"unknown texture {texture!r}")
