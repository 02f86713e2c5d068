"""Which train captions a run reads: ``data.train_languages`` and ``data.train_image_share``.

The image share keeps a fixed, seed-free subset of the train split's images for learning curves: an
image is kept when a hash of its id, read as a number in [0, 1), falls below the share. The subsets
are nested (every image of share 0.25 is in share 0.5) and the same for every run, seed and data
path (the streamed loader, the feature cache, the image-pivot start), and on a split where each image
is captioned in one language they keep about that share of every language's images.
"""
from __future__ import annotations

import hashlib
from typing import Collection


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
