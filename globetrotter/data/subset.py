"""Which train captions a run reads: ``data.train_languages`` and ``data.train_image_share``.

The image share keeps a fixed, seed-free subset of the train split's images for learning curves: an
image is kept when a hash of its id, read as a number in [0, 1), falls below the share. The subsets
are nested (every image of share 0.25 is in share 0.5) and the same for every run, seed and data
path (the streamed loader, the feature cache, the image-pivot start), and on a split where each image
is captioned in one language they keep about that share of every language's images.
:func:`matching_share` gives the share that keeps an exact number of (image, language) slots
(``data.match_images_of``).
"""
from __future__ import annotations

import hashlib
from typing import Collection, Mapping

import numpy as np


def image_share_key(image_id: object) -> float:
    """The image's place in [0, 1): a hash of ``str(image_id)``, uniform over ids and the same in every process."""
    digest = hashlib.blake2b(str(image_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def keeps_caption(meta: dict, languages: Collection[str] | None = None, image_share: float = 1.0) -> bool:
    """Whether training reads this caption: its language is one of ``languages`` (None: any) and its image
    is in the ``image_share`` (1: every image)."""
    if languages is not None and meta.get("lang") not in languages:
        return False
    return image_share >= 1.0 or image_share_key(meta["image_id"]) < image_share


def matching_share(image_slots: Mapping[object, int], count: int) -> float:
    """The image share that keeps ``count`` (image, language) slots of the images ``image_slots`` maps to their
    number of training languages (1.0 when ``count`` reaches them all): half-way between the hash key of the image
    that fills the ``count``-th slot, in key order, and the next one's. On a parallel split (every image in every
    one of L languages) ``count = n · L`` keeps n images; on a one-language split it keeps about n per language."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    ordered = sorted((image_share_key(i), n) for i, n in {str(i): n for i, n in image_slots.items()}.items())
    keys = [k for k, _ in ordered]
    filled = np.cumsum([n for _, n in ordered])
    last = int(np.searchsorted(filled, count))  # the first image whose slots reach count
    if last >= len(keys) - 1:
        return 1.0
    return (keys[last] + keys[last + 1]) / 2.0
