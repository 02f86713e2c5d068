"""Approximate mode for large N: faiss IVF candidates for the text search, re-scored exactly.

Exact BkR costs two N x N passes: the text search (N x N x d) and the image
back-retrieval (N x D per distinct retrieved target). What each step really needs:

* step 2 needs only the best target per query. The approximate mode searches a faiss
  ``IndexIVFFlat`` (k-means cells over the L2-normalised target texts, ``nprobe`` cells
  visited per query; L2 on unit vectors orders exactly as the cosine; optional PCA to
  ``pca_dim``) for ``candidates`` neighbours, re-scores them exactly with the full
  float32 vectors and keeps the best (ties: lowest index). It is the exact argmax
  whenever the true nearest target is among the candidates; when it is not, a target
  almost as close is retrieved, which moves BkR far less than the share of changed
  retrievals (bench, nprobe 32: 56% of retrievals changed at N = 30k, |dBkR@10| =
  0.008; BkR came out lower at every N, the exact best caption being missed).
* step 4 needs only whether *fewer than K* distinct source images score above the
  query's own image in the row g(I_T*, .): the own score is one dot product, and the
  count of better images stops at K (``max_rank = max(ks)`` of
  :func:`backretrieval.ranking.count_ranks`): no sort, and a row is dropped as soon as
  its queries have K better images, which for most rows happens in the first 512
  columns. This side stays exact in the approximate mode. A k-NN candidate list for it
  (IVF over PCA-reduced image features, candidates re-scored exactly: a miss is then
  proven by K better candidates, a hit assumed otherwise) was measured and rejected: on
  the benchmark's noise-dominated 2048-d features it missed better images so often that
  BkR@10 rose from 0.108 to 0.25 (N = 10k), and building the index cost more than the
  capped exact count.

So approximate ranks are censored above max(ks), as with ``max_rank``. The benchmark
``bench/bench_backretrieval.py`` prints |dBkR@K| against exact in the same run: 1.8x
faster at N = 100k (113 s against 203 s, |dBkR@10| = 0.0085) on its synthetic data, where
a 64-d signal is buried in isotropic 512/2048-d noise, the hard case for any index: the
nearest caption is barely closer than the hundredth. The image side, not the text, is
then the bottleneck (every hit needs its full row: hits x N x D). The next step measured
but not taken: bfloat16 tiles (torch matmul 121 GFLOP/s against 52 in float32 on this
CPU) with exact re-scoring of the scores within the bf16 error bound of the threshold,
which would keep both steps exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from .ranking import Scorer, l2_normalize

_CHUNK = 16384  # rows normalised / reduced / searched at once


@dataclass(frozen=True)
class ApproxConfig:
    """Options of the approximate mode (module doc).

    Attributes:
        pca_dim: rows wider than this are PCA-reduced to it for the candidate search (0: never).
        nlist: IVF cells (default ``4 sqrt(N)``, at most ``N // 39`` so k-means has data).
        nprobe: cells visited per query (more: slower, closer to exact).
        candidates: neighbours fetched per query and re-scored exactly (must exceed max K).
        train_size: rows sampled (seeded) to train the PCA and the k-means.
        seed: seed of that sample and of k-means.
    """

    pca_dim: int = 0
    nlist: int | None = None
    nprobe: int = 32
    candidates: int = 16
    train_size: int = 50_000
    seed: int = 0


class ANNIndex:
    """IVF index over the L2-normalised (and PCA-reduced) rows of ``database``: k-NN candidate ids."""

    def __init__(self, database: np.ndarray, config: ApproxConfig = ApproxConfig()) -> None:
        n, dim = database.shape
        rng = np.random.default_rng(config.seed)
        sample = np.sort(rng.choice(n, size=min(n, config.train_size), replace=False))
        train = l2_normalize(database[sample])
        self.mean, self.proj = None, None
        if 0 < config.pca_dim < dim:
            self.mean, self.proj = pca_basis(train, config.pca_dim, rng)
            train = self.reduce(database[sample])
        d = train.shape[1]
        nlist = config.nlist or int(4 * np.sqrt(n))
        self.nlist = max(1, min(nlist, n // 39))
        if self.nlist == 1:
            self.index = faiss.IndexFlatL2(d)
        else:
            self.quantizer = faiss.IndexFlatL2(d)  # kept referenced: the IVF index does not own it
            self.index = faiss.IndexIVFFlat(self.quantizer, d, self.nlist, faiss.METRIC_L2)
            self.index.cp.seed = config.seed
            self.index.train(train)
            self.index.nprobe = min(config.nprobe, self.nlist)
        for s in range(0, n, _CHUNK):
            self.index.add(self.reduce(database[s:s + _CHUNK]))
        self.n = n

    def reduce(self, x: np.ndarray) -> np.ndarray:
        """Rows normalised and projected as the index stores them."""
        x = l2_normalize(x)
        return x if self.proj is None else np.ascontiguousarray((x - self.mean) @ self.proj, dtype=np.float32)

    def search(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``(Q, k)`` int64 candidate ids per query, nearest first; -1 where fewer than k were found."""
        k = min(int(k), self.n)
        out = np.empty((len(queries), k), dtype=np.int64)
        for s in range(0, len(queries), _CHUNK):
            _, ids = self.index.search(self.reduce(queries[s:s + _CHUNK]), k)
            out[s:s + _CHUNK] = ids
        return out


def pca_basis(x: np.ndarray, dim: int, rng: np.random.Generator, power_iters: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(D,)`` and the top-``dim`` principal directions ``(D, dim)`` of the rows of ``x``.

    Randomised range finder with power iterations (Halko, Martinsson & Tropp 2011): a few
    ``(n, D) x (D, dim + 10)`` products instead of a ``D x D`` eigendecomposition.
    """
    mean = x.mean(axis=0)
    xc = x - mean
    basis = rng.standard_normal((x.shape[1], dim + 10)).astype(np.float32)
    for _ in range(power_iters + 1):
        basis, _ = np.linalg.qr(xc.T @ (xc @ basis))
    _, _, vt = np.linalg.svd(xc @ basis, full_matrices=False)
    return mean.astype(np.float32), np.ascontiguousarray((basis @ vt.T)[:, :dim], dtype=np.float32)


def rescore(scorer: Scorer, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Exact ``(R, C)`` float32 scores of ``candidates[i]`` in row ``rows[i]``; -inf for missing (-1) ids."""
    valid = candidates >= 0
    out = np.full(candidates.shape, -np.inf, dtype=np.float32)
    r = np.broadcast_to(np.asarray(rows)[:, None], candidates.shape)[valid]
    out[valid] = scorer.pairs(r, candidates[valid])
    return out


def approx_nearest(
    queries: np.ndarray, index: ANNIndex, scorer: Scorer, candidates: int, query_rows: np.ndarray | None = None
) -> np.ndarray:
    """Best target per query among its ``candidates`` index neighbours, by the exact ``scorer``.

    ``scorer`` rows are the queries (``query_rows[i]`` for query vector i, default ``i``),
    its columns the indexed database. Ties: the lowest target index. ``(Q,)`` int64.
    """
    rows = np.arange(len(queries)) if query_rows is None else query_rows
    best = np.empty(len(queries), dtype=np.int64)
    for s in range(0, len(queries), _CHUNK):
        cand = index.search(queries[s:s + _CHUNK], candidates)
        scores = rescore(scorer, rows[s:s + _CHUNK], cand)
        top = scores.max(axis=1, keepdims=True)
        best[s:s + _CHUNK] = np.where((scores == top) & (cand >= 0), cand, np.iinfo(np.int64).max).min(axis=1)
    return best


def approx_top_mean(queries: np.ndarray, index: ANNIndex, scorer: Scorer, k: int, candidates: int) -> np.ndarray:
    """Mean of the ``k`` best exact scores among each query's index candidates, ``(Q,)`` float32 (CSLS's r)."""
    k = max(1, min(int(k), index.n))
    out = np.empty(len(queries), dtype=np.float32)
    for s in range(0, len(queries), _CHUNK):
        cand = index.search(queries[s:s + _CHUNK], max(candidates, k))
        scores = rescore(scorer, np.arange(s, s + len(cand)), cand)
        top = -np.partition(-scores, k - 1, axis=1)[:, :k]
        out[s:s + _CHUNK] = np.where(np.isfinite(top), top, 0.0).mean(axis=1)  # missing ids: count as 0
    return out
