"""Which train captions a run reads: ``data.train_languages`` and ``data.train_image_share``.

The image share keeps a fixed, seed-free subset of the train split's images for learning curves: an
image is kept when a hash of its id, read as a number in [0, 1), falls below the share. The subsets
are nested (every image of share 0.25 is in share 0.5) and the same for every run, seed and data
path (the streamed loader, the feature cache, the image-pivot start), and on a split where each image
is captioned in one language they keep about that share of every language's images.
:func:`matching_share` gives the share that keeps an exact number of images (``data.match_images_of``).
"""
from __future__ import annotations

import hashlib
from typing import Collection, Iterable


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


def matching_share(image_ids: Iterable[object], count: int) -> float:
    """The image share that keeps exactly ``count`` of the distinct ``image_ids`` (1.0 when ``count`` reaches their
    number): half-way between the hash key of the ``count``-th image, in key order, and the next one's."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    keys = sorted(image_share_key(i) for i in {str(i) for i in image_ids})
    if count >= len(keys):
        return 1.0
    return (keys[count - 1] + keys[count]) / 2.0
