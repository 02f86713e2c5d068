"""The two g's without a network, beside the CNN: a degraded g (thumbnail pixels) and the null g (a random vector
per image)."""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
from PIL import Image

from .errors import BackRetrievalError
from .image_inputs import ImageSource, default_image_ids, image_sources, open_image

RANDOM_G_DIM = 512


class ThumbnailFeatures:
    """A degraded g from raw pixels: ``extract(images) -> (n, 3 * size**2)`` float32.

    Each image is centre-cropped to a square, box-averaged down to ``size`` x ``size``
    (PIL ``BOX``: each output pixel is the mean of its block) and flattened in (row,
    column, RGB) order, scaled from [0, 255] to [-1, 1] so that the cosine of g compares
    layouts of colour around mid-grey rather than overall brightness. No network, no cache.
    """

    kind = "thumbnail"

    def __init__(self, size: int, spec: str | None = None) -> None:
        if int(size) < 1:
            raise BackRetrievalError(f"image model 'thumbnail:{size}': SIZE must be >= 1")
        self.size = int(size)
        self.name = f"thumbnail:{self.size}"
        self.spec = spec or self.name  # as given (what result records call g)

    def extract(self, images: Sequence[ImageSource], ids: Sequence[str] | None = None) -> np.ndarray:
        """Thumbnail vectors of ``images`` (paths, encoded bytes or PIL images); ``ids`` are ignored."""
        images = image_sources(images)
        if not images:
            raise BackRetrievalError("no images to extract features from")
        out = np.empty((len(images), 3 * self.size * self.size), dtype=np.float32)
        for i, source in enumerate(images):
            img = open_image(source, i)
            side = min(img.size)
            left, top = (img.width - side) // 2, (img.height - side) // 2
            img = img.crop((left, top, left + side, top + side)).resize((self.size, self.size), Image.Resampling.BOX)
            out[i] = np.asarray(img, dtype=np.float32).reshape(-1) / 127.5 - 1.0
        return out


class RandomImageFeatures:
    """The null g: a standard Gaussian ``dim``-vector per image, seeded by a hash of its identity.

    ``extract(images, ids) -> (n, dim)`` float32. The same image (same id, default
    :func:`default_image_ids`) always gets the same vector whatever its position, and
    distinct images independent ones, so g carries no information about what the
    pictures show: BkR@K is K / N in expectation for every text model.
    """

    kind = "random"

    def __init__(self, seed: int = 0, dim: int = RANDOM_G_DIM, spec: str | None = None) -> None:
        self.seed, self.dim = int(seed), int(dim)
        self.name = f"random:{self.seed}"
        self.spec = spec or self.name  # as given (what result records call g)

    def extract(self, images: Sequence, ids: Sequence[str] | None = None) -> np.ndarray:
        """One vector per image, from ``ids`` when given (then ``images`` are not read)."""
        images = image_sources(images, entries=ids is None)
        if not images:
            raise BackRetrievalError("no images to extract features from")
        if ids is not None and len(ids) != len(images):
            raise BackRetrievalError(f"{len(ids)} image ids for {len(images)} images")
        keys = list(map(str, ids)) if ids is not None else default_image_ids(images)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=str(self.seed).encode()).digest()
            out[i] = np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(self.dim, np.float32)
        return out
