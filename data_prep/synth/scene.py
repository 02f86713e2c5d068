"""What a synthetic scene holds, and what its caption says about it.

A scene is 1..``max_objects`` objects in at most three *kinds* (a kind = one shape in
one colour and size class, seen 1-3 times) on a background. :func:`sample_scene` draws
the kinds, lays the objects out without overlap, and records everything the renderer
needs, so rendering is a pure function of the :class:`Scene`.

A caption never says everything: :func:`sample_meaning` picks a random subset of the
kinds and of their attributes (colour, size, count, position, background). The result
is a language-independent :class:`Meaning`; captions of equal meaning in different
languages are translations of each other, and ``Meaning.canonical()`` is the string
stored as ``"meaning"`` in every sample's json.
"""
from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

# The world's inventory (language-independent concept ids).
SHAPES = ("circle", "square", "triangle", "star", "cross", "heart", "hexagon", "ring")
COLOURS = {  # prototype RGB; each scene jitters it a little
    "red": (215, 35, 35),
    "green": (35, 165, 55),
    "blue": (35, 75, 225),
    "yellow": (240, 220, 40),
    "orange": (250, 135, 20),
    "purple": (140, 45, 185),
    "black": (20, 20, 20),
    "white": (245, 245, 245),
}
SIZES = {"small": (0.08, 0.115), "large": (0.17, 0.22)}  # radius range as a fraction of the image side
POSITIONS = ("left", "right", "top", "bottom", "center")
BACKGROUNDS = ("plain", "gradient", "striped", "checkered", "noisy")
MAX_PER_KIND = 3  # count words exist for one..three
MAX_KINDS = 3
COLOUR_JITTER = 14  # +- per RGB channel


@dataclass(frozen=True)
class SceneObject:
    """One drawn object; coordinates and radius in pixels of the final image, angle in radians."""

    shape: str
    rgb: tuple[int, int, int]
    cx: float
    cy: float
    radius: float
    angle: float


@dataclass(frozen=True)
class Kind:
    """A group of identical-looking objects. ``position`` is set only for a single object in a clear region."""

    shape: str
    colour: str
    size: str
    count: int
    position: str | None


@dataclass(frozen=True)
class Background:
    """Background pattern and its parameters (colours RGB 0-255, lengths in fractions of the side)."""

    kind: str
    colour1: tuple[int, int, int]
    colour2: tuple[int, int, int]
    angle: float
    period: float
    noise_std: float


@dataclass(frozen=True)
class Scene:
    """One drawn scene: its kinds, every object laid out, the background and the noise; rendering is a pure
    function of it."""
    kinds: tuple[Kind, ...]
    objects: tuple[SceneObject, ...]
    background: Background
    pixel_noise: float  # std of the Gaussian noise added to the whole image
    noise_seed: int  # seeds the noise textures, so rendering is a pure function of the scene


@dataclass(frozen=True)
class Mention:
    """What a caption says about one kind. ``count`` None means "several" (2-3, number unsaid)."""

    shape: str
    count: int | None
    colour: str | None = None
    size: str | None = None
    position: str | None = None

    @property
    def plural(self) -> bool:
        """True unless the count is one ("several" is plural)."""
        return self.count != 1

    def canonical(self) -> str:
        """The mention in words: count (none for one), size, colour, shape, ``at`` position (``2 large red circle``)."""
        count = "several" if self.count is None else ("" if self.count == 1 else str(self.count))
        where = f"at {self.position}" if self.position else ""
        return " ".join(p for p in (count, self.size, self.colour, self.shape, where) if p)


@dataclass(frozen=True)
class Meaning:
    """The language-independent content of one caption."""

    mentions: tuple[Mention, ...]
    background: str | None = None

    def canonical(self) -> str:
        """E.g. ``"2 large red circle; small blue square at left; on striped"`` (kinds sorted by shape)."""
        parts = [m.canonical() for m in sorted(self.mentions, key=lambda m: SHAPES.index(m.shape))]
        if self.background:
            parts.append(f"on {self.background}")
        return "; ".join(parts)


def _position_label(cx: float, cy: float, margin: float = 0.17) -> str | None:
    """Region of a centre given in fractions of the side; None where it is not clear (corners)."""
    dx, dy = cx - 0.5, cy - 0.5
    if max(abs(dx), abs(dy)) < 0.1:
        return "center"
    if abs(dx) > margin and abs(dy) < 0.5 * abs(dx):
        return "left" if dx < 0 else "right"
    if abs(dy) > margin and abs(dx) < 0.5 * abs(dy):
        return "top" if dy < 0 else "bottom"
    return None


def _sample_counts(rng: np.random.Generator, max_objects: int) -> list[int]:
    n_kinds = int(rng.integers(1, min(MAX_KINDS, max_objects) + 1))
    counts = [1] * n_kinds
    for _ in range(int(rng.integers(0, max_objects - n_kinds + 1))):
        open_kinds = [i for i, c in enumerate(counts) if c < MAX_PER_KIND]
        if not open_kinds:
            break
        counts[open_kinds[int(rng.integers(len(open_kinds)))]] += 1
    return counts


def _jitter(rgb: tuple[int, int, int], rng: np.random.Generator) -> tuple[int, int, int]:
    values = np.clip(np.asarray(rgb) + rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, size=3), 0, 255)
    r, g, b = (int(v) for v in values)
    return r, g, b


def _bytes_rgb(rgb: tuple[float, float, float]) -> tuple[int, int, int]:
    """An RGB colour with channels in 0..1 (``colorsys``) as channels in 0..255."""
    r, g, b = (int(round(255 * c)) for c in rgb)
    return r, g, b


def _sample_background(rng: np.random.Generator) -> Background:
    """Muted mid-tone colours (saturation <= 0.25, value 0.38-0.72) so every object colour stands out."""
    kind = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    hue, sat, val = rng.random(), rng.uniform(0.0, 0.25), rng.uniform(0.38, 0.72)
    shift = rng.uniform(0.12, 0.22) * (1 if val < 0.55 else -1)
    c1 = _bytes_rgb(colorsys.hsv_to_rgb(hue, sat, val))
    c2 = _bytes_rgb(colorsys.hsv_to_rgb(hue, sat, val + shift))
    return Background(kind, c1, c2, float(rng.uniform(0, np.pi)), float(rng.uniform(0.09, 0.18)),
                      float(rng.uniform(16, 28)))


def _layout(rng: np.random.Generator, radii: list[float], size: int, tries: int = 60) -> list[tuple[float, float]] | None:
    """Non-overlapping centres for the given radii by rejection sampling; None if it does not fit."""
    centres: list[tuple[float, float]] = []
    for r in radii:
        for _ in range(tries):
            cx, cy = rng.uniform(r + 1, size - r - 1, size=2)
            if all((cx - x) ** 2 + (cy - y) ** 2 >= (r + rr + 2) ** 2 for (x, y), rr in zip(centres, radii)):
                centres.append((float(cx), float(cy)))
                break
        else:
            return None
    return centres


def sample_scene(rng: np.random.Generator, image_size: int, max_objects: int, pixel_noise: float) -> Scene:
    """Draw a random scene: kinds (distinct shapes), object layout, background, noise."""
    counts = _sample_counts(rng, max_objects)
    shapes = [SHAPES[i] for i in rng.choice(len(SHAPES), size=len(counts), replace=False)]
    colour_names = list(COLOURS)
    colours = [colour_names[int(i)] for i in rng.integers(len(colour_names), size=len(counts))]
    sizes = ["small" if s == 0 else "large" for s in rng.integers(2, size=len(counts))]
    rgbs = [_jitter(COLOURS[c], rng) for c in colours]
    while True:  # shrink the biggest kind to "small" until the layout fits (rare with <= 3 objects)
        per_object = [k for k, c in enumerate(counts) for _ in range(c)]  # kind of each object
        radii = [image_size * rng.uniform(*SIZES[sizes[k]]) for k in per_object]
        centres = None
        for _ in range(20):
            centres = _layout(rng, radii, image_size)
            if centres is not None:
                break
        if centres is not None:
            break
        large = [k for k, s in enumerate(sizes) if s == "large"]
        if not large:
            raise RuntimeError(f"cannot place {sum(counts)} small objects in a {image_size}px image")
        sizes[large[int(rng.integers(len(large)))]] = "small"
    objects = []
    for k, r, (cx, cy) in zip(per_object, radii, centres):
        limit = np.pi / 5 if shapes[k] == "heart" else np.pi  # hearts stay roughly upright
        objects.append(SceneObject(shapes[k], rgbs[k], cx, cy, float(r), float(rng.uniform(-limit, limit))))
    kinds = []
    for k, count in enumerate(counts):
        position = None
        if count == 1:
            obj = objects[per_object.index(k)]
            position = _position_label(obj.cx / image_size, obj.cy / image_size)
        kinds.append(Kind(shapes[k], colours[k], sizes[k], count, position))
    background = _sample_background(rng)
    return Scene(tuple(kinds), tuple(objects), background, float(rng.uniform(0, pixel_noise)),
                 int(rng.integers(2**31)))


def sample_meaning(
    scene: Scene,
    rng: np.random.Generator,
    p_object: float = 0.7,
    p_colour: float = 0.8,
    p_size: float = 0.5,
    p_count: float = 0.8,
    p_position: float = 0.4,
    p_background: float = 0.3,
) -> Meaning:
    """Choose what a caption of ``scene`` says: a non-empty subset of kinds and of their attributes.

    Every mentioned attribute is true of the image (grounded captions). A kind seen 2-3
    times is counted exactly with probability ``p_count``, else called "several".
    """
    chosen = [k for k in scene.kinds if rng.random() < p_object]
    if not chosen:
        chosen = [scene.kinds[int(rng.integers(len(scene.kinds)))]]
    mentions = []
    for kind in chosen:
        says_colour, says_size = rng.random() < p_colour, rng.random() < p_size
        says_count, says_position = rng.random() < p_count, rng.random() < p_position
        count = 1 if kind.count == 1 else (kind.count if says_count else None)
        mentions.append(Mention(
            shape=kind.shape,
            count=count,
            colour=kind.colour if says_colour else None,
            size=kind.size if says_size else None,
            position=kind.position if says_position else None,
        ))
    background = scene.background.kind if rng.random() < p_background else None
    return Meaning(tuple(mentions), background)
