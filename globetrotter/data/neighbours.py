"""Visual nearest neighbours across languages, for neighbour-aware batches (docs/design.md section 10).

The transitive loss needs, inside one batch, two images that look alike and are captioned in
different languages. With a few thousand images per language and a batch of a few hundred,
random batches hold almost none. The neighbours are mined once, over the frozen backbone's
whole-image features (no text, no parallel data): for each image, its ``k`` nearest images
(cosine) among those captioned in any *other* language.

Up to :data:`EXACT_MAX` images the search is exact (one flat faiss search per language: its cost
grows with the square of the images). Above, it is approximate and grows as about n^1.5: one
inverted-file index (faiss ``IndexIVFScalarQuantizer`` with float16 codes, about ``4 sqrt(n)``
lists, ``nprobe`` of them searched) over all images, searched once per language with a selector
that leaves that language's images out; the normalised rows are held as float16 too, so the search
needs about two bytes per dimension and image twice. :func:`neighbour_recall` measures what the
approximation keeps.
"""
from __future__ import annotations

import math

import faiss
import numpy as np

from ..errors import UserError

EXACT_MAX = 100_000  # images: exact search up to here, inverted file above
DEFAULT_NPROBE = 8
TRAIN_SAMPLE = 64  # points per inverted list used to train the coarse quantiser
CHUNK = 65_536  # rows normalised, added or searched at once


def _check(features: np.ndarray, langs: np.ndarray, k: int, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """``(rows L2-normalised as dtype, langs)`` after checking the arguments; normalised a chunk at a time, so
    float16 rows of a memory-mapped cache never become a whole float32 copy."""
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
                            f"{str(lang)!r}, fewer than data.neighbours_k={k}")
    x: np.ndarray = np.empty(features.shape, dtype=dtype)
    for s in range(0, n, CHUNK):
        chunk = np.array(features[s:s + CHUNK], dtype=np.float32)
        faiss.normalize_L2(chunk)
        x[s:s + CHUNK] = chunk
    return x, langs


def other_language_neighbours(features: np.ndarray, langs: np.ndarray, k: int, method: str = "auto",
                              nprobe: int = DEFAULT_NPROBE, seed: int = 0) -> np.ndarray:
    """[n, k] indices: row ``i`` lists the ``k`` images most similar to image ``i`` whose language differs.

    ``features`` [n, dim] (any float dtype; L2-normalised here), ``langs`` [n] one language per image.
    Neighbours are sorted by decreasing cosine similarity. ``method``: ``exact``, ``ivf`` (approximate,
    ``nprobe`` lists searched, quantiser trained on a ``seed``-ed sample) or ``auto`` (exact up to
    :data:`EXACT_MAX` images).
    """
    if method == "auto":
        method = "exact" if len(features) <= EXACT_MAX else "ivf"
    if method == "exact":
        return _exact(*_check(features, langs, k), k)
    if method == "ivf":  # rows kept as float16 and indexed as float16 codes: a quarter of two float32 copies
        return _ivf(*_check(features, langs, k, np.float16), k, nprobe, seed)
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
    """Inverted-file search over float16 rows ``x``, stored as float16 codes (faiss scalar quantiser)."""
    n, dim = x.shape
    nlist = max(1, min(int(4 * math.sqrt(n)), n // TRAIN_SAMPLE))
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_fp16,
                                          faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    sample = x[np.sort(rng.choice(n, size=min(n, nlist * TRAIN_SAMPLE), replace=False))].astype(np.float32)
    index.cp.seed = seed
    index.train(sample)
    for s in range(0, n, CHUNK):
        index.add(x[s:s + CHUNK].astype(np.float32))
    out = np.empty((n, k), dtype=np.int64)
    for lang in np.unique(langs):
        queries = np.flatnonzero(langs == lang)
        own = faiss.IDSelectorBatch(queries.astype(np.int64))
        # (the ignores: faiss's stub lacks the keyword arguments its SearchParameters classes take)
        params = faiss.SearchParametersIVF(sel=faiss.IDSelectorNot(own), nprobe=min(nprobe, nlist))  # type: ignore[call-arg]
        for s in range(0, len(queries), CHUNK):
            part = queries[s:s + CHUNK]
            _, found = index.search(x[part].astype(np.float32), k, params=params)
            if (found < 0).any():  # too few other-language images in the probed lists: widen the search for those
                short = np.flatnonzero((found < 0).any(1))
                wide = faiss.SearchParametersIVF(sel=faiss.IDSelectorNot(own), nprobe=nlist)  # type: ignore[call-arg]
                _, found[short] = index.search(x[part[short]].astype(np.float32), k, params=wide)
            out[part] = found
    return out


def neighbour_recall(approximate: np.ndarray, exact: np.ndarray) -> float:
    """Share of the exact ``[n, k]`` neighbours that the approximate ``[n, k]`` search also returned."""
    if approximate.shape != exact.shape:
        raise ValueError(f"shapes differ: {approximate.shape} vs {exact.shape}")
    hits = sum(len(np.intersect1d(a, e, assume_unique=True)) for a, e in zip(approximate, exact))
    return hits / exact.size
