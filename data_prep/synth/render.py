"""Draw a :class:`~data_prep.synth.scene.Scene` with Pillow and numpy.

Backgrounds (plain, gradient, stripes, checkerboard, noise texture) are numpy arrays;
objects are Pillow polygons (rotated by rotating their vertices) or ellipses, drawn at
``supersample`` times the final size and box-filtered down for smooth edges; Gaussian
pixel noise is added last. The output depends only on the scene, so it is identical in
every process.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from .scene import Background, Scene, SceneObject


@lru_cache(maxsize=None)
def unit_outline(shape: str) -> np.ndarray:
    """Vertices (k, 2) of a polygonal shape inside the unit circle, centred at the origin, y down."""
    if shape == "square":
        t = np.pi / 4 + np.arange(4) * np.pi / 2
        return 0.95 * np.stack([np.cos(t), np.sin(t)], 1)
    if shape == "triangle":
        t = -np.pi / 2 + np.arange(3) * 2 * np.pi / 3
        return np.stack([np.cos(t), np.sin(t)], 1) + [0.0, 0.12]  # centre the area, not the circumcircle
    if shape == "hexagon":
        t = np.arange(6) * np.pi / 3
        return np.stack([np.cos(t), np.sin(t)], 1)
    if shape == "star":
        t = -np.pi / 2 + np.arange(10) * np.pi / 5
        r = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
        return np.stack([r * np.cos(t), r * np.sin(t)], 1) + [0.0, 0.05]
    if shape == "cross":
        a, b = 0.95, 0.32
        return np.array([[-b, -a], [b, -a], [b, -b], [a, -b], [a, b], [b, b],
                         [b, a], [-b, a], [-b, b], [-a, b], [-a, -b], [-b, -b]])
    if shape == "heart":  # the classic parametric heart curve, scaled into the unit circle
        t = np.linspace(0, 2 * np.pi, 48, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        return np.stack([x, y + 2.5], 1) / 17.0
    raise ValueError(f"no outline for shape {shape!r}")


@lru_cache(maxsize=8)
def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1): a column (n, 1) of y and a row (1, n) of x."""
    axis = ((np.arange(n, dtype=np.float32) + 0.5) / n)
    return axis[:, None], axis[None, :]


def _background(bg: Background, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, n, 3) uint8 background of the given pattern."""
    c1 = np.asarray(bg.colour1, np.float32)
    c2 = np.asarray(bg.colour2, np.float32)
    if bg.kind == "plain":
        return np.broadcast_to(c1.astype(np.uint8), (n, n, 3)).copy()
    if bg.kind == "noisy":
        grain = rng.standard_normal((n // 2, n // 2, 1), dtype=np.float32) * bg.noise_std
        grain = grain.repeat(2, 0).repeat(2, 1)  # grains of 2x2 supersampled pixels
        return np.clip(c1 + grain, 0, 255).astype(np.uint8)
    yy, xx = _grid(n)
    if bg.kind == "gradient":
        c, s = np.cos(bg.angle), np.sin(bg.angle)
        proj = (xx - 0.5) * c + (yy - 0.5) * s
        w = (proj + 0.5 * (abs(c) + abs(s))) / (abs(c) + abs(s))  # 0..1 across the square
    elif bg.kind == "striped":
        proj = xx * np.cos(bg.angle) + yy * np.sin(bg.angle)
        w = np.floor(proj / bg.period) % 2
    elif bg.kind == "checkered":
        w = (np.floor(xx / bg.period) + np.floor(yy / bg.period)) % 2
    else:
        raise ValueError(f"unknown background {bg.kind!r}")
    return (c1 + (c2 - c1) * w[..., None].astype(np.float32)).astype(np.uint8)


def _draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject, scale: float) -> None:
    cx, cy, r = obj.cx * scale, obj.cy * scale, obj.radius * scale
    box = (cx - r, cy - r, cx + r, cy + r)
    if obj.shape == "circle":
        draw.ellipse(box, fill=obj.rgb)
    elif obj.shape == "ring":
        draw.ellipse(box, outline=obj.rgb, width=max(2, int(round(0.38 * r))))
    else:
        c, s = np.cos(obj.angle), np.sin(obj.angle)
        pts = unit_outline(obj.shape) @ np.array([[c, s], [-s, c]]) * r + [cx, cy]
        draw.polygon([tuple(p) for p in pts.tolist()], fill=obj.rgb)


def render_scene(scene: Scene, image_size: int, supersample: int = 2) -> Image.Image:
    """RGB image (``image_size`` square) of ``scene``; deterministic for the scene."""
    rng = np.random.default_rng(scene.noise_seed)
    n = image_size * supersample
    canvas = Image.fromarray(_background(scene.background, n, rng))
    draw = ImageDraw.Draw(canvas)
    for obj in scene.objects:
        _draw_object(draw, obj, supersample)
    if supersample > 1:
        canvas = canvas.reduce(supersample)
    if scene.pixel_noise > 0:
        pixels = np.asarray(canvas, np.float32)
        pixels += rng.standard_normal(pixels.shape, dtype=np.float32) * np.float32(scene.pixel_noise)
        canvas = Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8))
    return canvas
