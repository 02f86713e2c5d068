"""Visual nearest neighbours across languages, for neighbour-aware batches (docs/design.md section 10).

The transitive loss needs, inside one batch, two images that look alike and are captioned in
different languages. With a few thousand images per language and a batch of a few hundred,
random batches hold almost none. The neighbours are mined once, over the frozen backbone's
whole-image features (no text, no parallel data): for each image, its ``k`` nearest images
(cosine) among those captioned in any *other* language.

Up to :data:`EXACT_MAX` images the search is exact (one flat faiss search per language: its cost
grows with the square of the images). Above, it is approximate and grows as about n^1.5: one
inverted-file index (faiss ``IndexIVFFlat``, about ``4 sqrt(n)`` lists, ``nprobe`` of them
searched) over all images, searched once per language with a selector that leaves that
language's images out. :func:`neighbour_recall` measures what the approximation keeps.
"""
from __future__ import annotations

import math

import faiss
import numpy as np

from ..errors import UserError

EXACT_MAX = 100_000  # images: exact search up to here, inverted file above
DEFAULT_NPROBE = 8
TRAIN_SAMPLE = 64  # points per inverted list used to train the coarse quantiser


def _check(features: np.ndarray, langs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    langs = np.asarray(langs)
    n = features.shape[0]
    if langs.shape != (n,):
        raise ValueError(f"langs must have one entry per image ({n}), got shape {langs.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    for lang in np.unique(langs):
        pool = int((langs != lang).sum())
        if pool < k:
            raise UserError(f"neighbour batching: only {pool} images are captioned in a language other than "
                            f"{lang!r}, fewer than data.neighbours_k={k}")
    x = np.ascontiguousarray(features, dtype=np.float32).copy()
    faiss.normalize_L2(x)
    return x, langs


def other_language_neighbours(features: np.ndarray, langs: np.ndarray, k: int, method: str = "auto",
                              nprobe: int = DEFAULT_NPROBE, seed: int = 0) -> np.ndarray:
    """[n, k] indices: row ``i`` lists the ``k`` images most similar to image ``i`` whose language differs.

    ``features`` [n, dim] (any float dtype; L2-normalised here), ``langs`` [n] one language per image.
    Neighbours are sorted by decreasing cosine similarity. ``method``: ``exact``, ``ivf`` (approximate,
    ``nprobe`` lists searched, quantiser trained on a ``seed``-ed sample) or ``auto`` (exact up to
    :data:`EXACT_MAX` images).
    """
    x, langs = _check(features, langs, k)
    if method == "auto":
        method = "exact" if len(x) <= EXACT_MAX else "ivf"
    if method == "exact":
        return _exact(x, langs, k)
    if method == "ivf":
        return _ivf(x, langs, k, nprobe, seed)
    raise ValueError(f"unknown neighbour search {method!r}; expected auto, exact or ivf")


def _exact(x: np.ndarray, langs: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Exact neighbours of the images ``rows`` (default: all), one row of the result per query, in order."""
    rows = np.arange(len(x)) if rows is None else np.asarray(rows)
    out = np.empty((len(rows), k), dtype=np.int64)
    for lang in np.unique(langs[rows]):
        mine = np.flatnonzero(langs[rows] == lang)
        pool = np.flatnonzero(langs != lang)
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x[pool])
        _, found = index.search(x[rows[mine]], k)
        out[mine] = pool[found]
    return out


def exact_neighbours_of(features: np.ndarray, langs: np.ndarray, k: int, rows: np.ndarray) -> np.ndarray:
    """[len(rows), k]: the exact other-language neighbours of the images ``rows`` only (a sample to measure an
    approximate search against, :func:`neighbour_recall`)."""
    x, langs = _check(features, langs, k)
    return _exact(x, langs, k, rows)


def _ivf(x: np.ndarray, langs: np.ndarray, k: int, nprobe: int, seed: int) -> np.ndarray:
    n, dim = x.shape
    nlist = max(1, min(int(4 * math.sqrt(n)), n // TRAIN_SAMPLE))
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    sample = x[np.sort(rng.choice(n, size=min(n, nlist * TRAIN_SAMPLE), replace=False))]
    index.cp.seed = seed
    index.train(sample)
    index.add(x)
    out = np.empty((n, k), dtype=np.int64)
    for lang in np.unique(langs):
        queries = np.flatnonzero(langs == lang)
        own = faiss.IDSelectorBatch(queries.astype(np.int64))
        params = faiss.SearchParametersIVF(sel=faiss.IDSelectorNot(own), nprobe=min(nprobe, nlist))
        _, found = index.search(x[queries], k, params=params)
        if (found < 0).any():  # too few other-language images in the probed lists: widen the search for those
            short = np.flatnonzero((found < 0).any(1))
            wide = faiss.SearchParametersIVF(sel=faiss.IDSelectorNot(own), nprobe=nlist)
            _, found[short] = index.search(x[queries[short]], k, params=wide)
        out[queries] = found
    return out


def neighbour_recall(approximate: np.ndarray, exact: np.ndarray) -> float:
    """Share of the exact ``[n, k]`` neighbours that the approximate ``[n, k]`` search also returned."""
    if approximate.shape != exact.shape:
        raise ValueError(f"shapes differ: {approximate.shape} vs {exact.shape}")
    hits = sum(len(np.intersect1d(a, e, assume_unique=True)) for a, e in zip(approximate, exact))
    return hits / exact.size
