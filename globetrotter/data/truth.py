"""The id of a caption's language-independent content, shared by the streamed and the cached batch paths.

Its own module so that :mod:`globetrotter.data.pipeline` (which picks :mod:`globetrotter.data.feature_batches`
for a feature-cache run) and ``feature_batches`` both import it without importing each other.
"""
from __future__ import annotations

import zlib


def truth_id(meta: dict) -> int:
    """Id of a caption's language-independent content, for α precision and the supervised α.

    Synthetic data carries ``meaning`` (captions with equal meaning are translations);
    parallel data carries ``group``. -1 when neither is known.
    """
    key = meta.get("meaning") or meta.get("group")
    return zlib.crc32(str(key).encode("utf-8")) if key is not None else -1
