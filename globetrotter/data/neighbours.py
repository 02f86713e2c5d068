"""Visual nearest neighbours across languages, for neighbour-aware batches (docs/design.md section 10).

The transitive loss needs, inside one batch, two images that look alike and are captioned in
different languages. With a few thousand images per language and a batch of a few hundred,
random batches hold almost none. The neighbours are mined once, over the frozen backbone's
whole-image features (no text, no parallel data): for each image, its ``k`` nearest images
(cosine) among those captioned in any *other* language, with one exact faiss search per language.
"""
from __future__ import annotations

import faiss
import numpy as np

from ..errors import UserError


def other_language_neighbours(features: np.ndarray, langs: np.ndarray, k: int) -> np.ndarray:
    """[n, k] indices: row ``i`` lists the ``k`` images most similar to image ``i`` whose language differs.

    ``features`` [n, dim] (any float dtype; L2-normalised here), ``langs`` [n] one language per image.
    Neighbours are sorted by decreasing cosine similarity.
    """
    langs = np.asarray(langs)
    n = features.shape[0]
    if langs.shape != (n,):
        raise ValueError(f"langs must have one entry per image ({n}), got shape {langs.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    x = np.ascontiguousarray(features, dtype=np.float32)
    faiss.normalize_L2(x)
    out = np.empty((n, k), dtype=np.int64)
    for lang in np.unique(langs):
        queries = np.flatnonzero(langs == lang)
        pool = np.flatnonzero(langs != lang)
        if len(pool) < k:
            raise UserError(f"neighbour batching: only {len(pool)} images are captioned in a language other than "
                            f"{lang!r}, fewer than data.neighbours_k={k}")
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x[pool])
        _, found = index.search(x[queries], k)
        out[queries] = pool[found]
    return out
