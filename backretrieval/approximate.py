"""Approximate mode for large N: text candidates from a compressed faiss index, re-scored exactly.

Exact BkR costs two N x N passes: the text search (N x N x d) and the image
back-retrieval (N x D per distinct retrieved target). What each step really needs:

* step 2 needs only the best target per query. The approximate mode fetches ``candidates``
  neighbours per query from a candidate index over the L2-normalised target texts and
  re-scores them exactly with the full float32 vectors (faiss reads them in place), keeping
  the best (ties: lowest index). It is the exact argmax whenever the true nearest target is
  among the candidates; when it is not, a target almost as close is retrieved. The default
  index (``"pq"``) projects rows on their top ``pca_dim = 64`` uncentred principal directions
  and scans 4-bit codes of every target (one code per dimension; faiss ``IndexPQFastScan``).
  The earlier default, ``"ivf"`` (k-means cells, ``nprobe`` visited), is kept: on
  noise-dominated data it misses far more true neighbours.
* step 4 needs only whether *fewer than K* distinct source images score above the query's
  own image in the row g(I_T*, .). That row depends on the images only, so
  :mod:`backretrieval.image_index` computes the K' best source images of every target image
  once per image set, and step 4 becomes a lookup for every model. Without such lists
  (``image_side="pq"``, the default) the same lists are built in the call for the distinct
  retrieved targets only; ``image_side="exact"`` counts better images exactly, stopped at K
  (``max_rank = max(ks)`` of :func:`backretrieval.ranking.count_ranks`).

So approximate ranks are censored above max(ks), as with ``max_rank``. How often the
candidates hold the exact nearest caption, the resulting |dBkR@K| and the time against the
exact count are measured by ``bench/bench_backretrieval.py`` (docs/results.md, benchmarks) on
synthetic data where a low-dimensional signal is buried in isotropic noise, the hard case for
any index. Missing the nearest caption there takes a caption close in the principal (signal)
directions, so the approximate BkR tends to come out slightly *higher*.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Iterator

import faiss
import numpy as np

from .errors import BackRetrievalError
from .ranking import progress_bar
from .scorers import Scorer
from .vectors import l2_normalize

_CHUNK = 16384  # rows normalised / reduced / searched at once
PCA_ROWS = 20_000  # rows of the training sample the PCA sees
INDEXES = ("pq", "ivf", "exact")
IMAGE_SIDES = ("pq", "exact")
_PQ_MIN_ROWS = 16 * 39  # faiss k-means wants 39 rows per centroid: 16 centroids per PQ sub-quantizer


@dataclass(frozen=True)
class ApproxConfig:
    """Options of the approximate mode (module doc).

    Attributes:
        index: ``"pq"``: exhaustive scan of 4-bit product-quantized PCA codes (faiss fast scan);
            ``"ivf"``: faiss IVF over the (reduced) rows, ``nprobe`` of ``nlist`` cells visited;
            ``"exact"``: no index, the exact text search (only the image side is approximate: for few queries
            against many targets, where the exact search costs less than building an index).
        pca_dim: rows wider than this are projected on their top ``pca_dim`` principal
            directions (uncentred: inner products are kept) for the candidate search (0: never).
        nlist: ``ivf`` cells (default ``4 sqrt(N)``, at most ``N // 39`` so k-means has data).
        nprobe: ``ivf`` cells visited per query (more: slower, closer to exact).
        candidates: neighbours fetched per query and re-scored exactly (at least 1: step 2 keeps their best, so K
            does not bound it; CSLS's radii fetch at least ``csls_k``).
        train_size: rows sampled (seeded) to train the PCA, the k-means and the quantizer.
        seed: seed of that sample and of k-means.
        image_side: BkR's step 4 without precomputed image lists: ``"pq"`` (default) builds the
            :mod:`backretrieval.image_index` ``pq`` lists for the distinct retrieved targets' images only
            (the lists a later ``--image-index`` file would hold for them: the same Recall@K); ``"exact"``
            counts better images exactly up to max(K) (slower; the mode's earlier behaviour).
    """

    index: str = "pq"
    pca_dim: int = 64
    nlist: int | None = None
    nprobe: int = 32
    candidates: int = 128
    train_size: int = 50_000
    seed: int = 0
    image_side: str = "pq"

    def __post_init__(self) -> None:
        """One-line :class:`~backretrieval.errors.BackRetrievalError` for a field set to another value than its default
        where :attr:`index` never reads it (it was ignored in silence): ``nlist`` and ``nprobe`` but with ``"ivf"``,
        and ``pca_dim``, ``candidates`` and ``train_size`` with ``"exact"`` (no index: the exact text search).
        ``seed`` is not among them: the ``image_side="pq"`` lists read it too, and a caller's one seed serves all."""
        unused = {"pq": ("nlist", "nprobe"), "exact": ("pca_dim", "nlist", "nprobe", "candidates", "train_size")}
        given = [f"{name}={getattr(self, name)!r}" for name in unused.get(self.index, ())
                 if getattr(self, name) != _FIELD_DEFAULTS[name]]
        if given:
            raise BackRetrievalError(f"approximate: {', '.join(given)} not used with index={self.index!r} (ignored); "
                                     f"drop {'it' if len(given) == 1 else 'them'}"
                                     + ("" if self.index == "exact" else ", or give index='ivf'"))


_FIELD_DEFAULTS = {f.name: f.default for f in fields(ApproxConfig)}


class ANNIndex:
    """Candidate index over the L2-normalised (and PCA-projected) rows of ``database``: k-NN candidate ids."""

    def __init__(self, database: np.ndarray, config: ApproxConfig = ApproxConfig()) -> None:
        n, dim = database.shape
        rng = np.random.default_rng(config.seed)
        sample = np.sort(rng.choice(n, size=min(n, config.train_size), replace=False))
        train = l2_normalize(database[sample])
        self.proj = None
        if 0 < config.pca_dim < dim:
            _, self.proj = pca_basis(train[:PCA_ROWS], config.pca_dim, rng, center=False)
            train = self.reduce(database[sample])
        if config.index == "pq":
            self.index = _pq_index(train, n)
        else:
            self.index, self.quantizer = _ivf_index(train, n, config)  # the IVF index does not own its quantizer
        for s in range(0, n, _CHUNK):
            self.index.add(self.reduce(database[s:s + _CHUNK]))
        self.n = n

    def reduce(self, x: np.ndarray) -> np.ndarray:
        """Rows normalised and projected as the index stores them."""
        return normalise_and_project(x, self.proj)

    def search(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``(Q, k)`` int64 candidate ids per query, nearest first; -1 where fewer than k were found."""
        k = min(int(k), self.n)
        out = np.empty((len(queries), k), dtype=np.int64)
        for s in range(0, len(queries), _CHUNK):
            _, ids = self.index.search(self.reduce(queries[s:s + _CHUNK]), k)
            out[s:s + _CHUNK] = ids
        return out


def _pq_index(train: np.ndarray, n: int) -> faiss.Index:
    """faiss ``IndexPQFastScan``: one 4-bit code per dimension, inner product, trained; flat when n is small.

    One dimension per code (16 levels each) finds the true nearest caption more often than two dimensions per code
    at about the same time (``bench/bench_backretrieval.py``; figures in docs/results.md).
    """
    d = train.shape[1]
    if n < _PQ_MIN_ROWS or len(train) < _PQ_MIN_ROWS:
        return faiss.IndexFlatIP(d)
    index = faiss.IndexPQFastScan(d, d, 4, faiss.METRIC_INNER_PRODUCT)
    with one_faiss_thread():
        index.train(train)
    index.implem = 15  # reservoir, no query blocks: faster than the automatic choice at large N
    return index


@contextmanager
def one_faiss_thread() -> Iterator[None]:
    """faiss on one OpenMP thread inside the block (restored after).

    For small work in many parallel regions (k-means of 16 centroids per quantizer): on a
    loaded machine spinning OpenMP threads slow the quantizer's training by orders of
    magnitude.
    """
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


def _ivf_index(train: np.ndarray, n: int, config: ApproxConfig) -> tuple[faiss.Index, faiss.Index | None]:
    """faiss ``IndexIVFFlat`` (inner product, ``nprobe`` set), trained, and its quantizer; flat when one cell."""
    d = train.shape[1]
    nlist = max(1, min(config.nlist or int(4 * np.sqrt(n)), n // 39))
    if nlist == 1:
        return faiss.IndexFlatIP(d), None
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = config.seed
    index.train(train)
    index.nprobe = min(config.nprobe, nlist)
    return index, quantizer


def normalise_and_project(x: np.ndarray, proj: np.ndarray | None) -> np.ndarray:
    """Rows L2-normalised, then projected on ``proj`` ``(D, d)`` when there is one (float32, contiguous)."""
    x = l2_normalize(x)
    return x if proj is None else np.ascontiguousarray(x @ proj, dtype=np.float32)


def pca_basis(
    x: np.ndarray, dim: int, rng: np.random.Generator, power_iters: int = 2, center: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``(D,)`` and the top-``dim`` principal directions ``(D, dim)`` of the rows of ``x``.

    Randomised range finder with power iterations (Halko, Martinsson & Tropp 2011): a few
    ``(n, D) x (D, dim + 10)`` products instead of a ``D x D`` eigendecomposition.
    ``center=False``: the directions of the uncentred second moment (mean returned as zeros),
    the rank-``dim`` projection that best keeps inner products.
    """
    mean = x.mean(axis=0) if center else np.zeros(x.shape[1], dtype=np.float32)
    xc = x - mean
    basis = rng.standard_normal((x.shape[1], dim + 10)).astype(np.float32)
    for _ in range(power_iters + 1):
        basis, _ = np.linalg.qr(xc.T @ (xc @ basis))
    _, _, vt = np.linalg.svd(xc @ basis, full_matrices=False)
    return mean.astype(np.float32), np.ascontiguousarray((basis @ vt.T)[:, :dim], dtype=np.float32)


def rescore(scorer: Scorer, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Exact ``(R, C)`` float32 scores of ``candidates[i]`` in row ``rows[i]``; -inf for missing (-1) ids.

    Uses the scorer's ``by_candidates`` when it has one (faiss gathers the columns itself).
    """
    fast = getattr(scorer, "by_candidates", None)
    if fast is not None:
        return fast(np.asarray(rows), candidates)
    valid = candidates >= 0
    out = np.full(candidates.shape, -np.inf, dtype=np.float32)
    r = np.broadcast_to(np.asarray(rows)[:, None], candidates.shape)[valid]
    out[valid] = scorer.pairs(r, candidates[valid])
    return out


def approx_nearest(
    queries: np.ndarray, index: ANNIndex, scorer: Scorer, candidates: int, query_rows: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Best target per query among its ``candidates`` index neighbours, by the exact ``scorer``.

    ``scorer`` rows are the queries (``query_rows[i]`` for query vector i, default ``i``),
    its columns the indexed database. Ties: the lowest target index. ``(Q,)`` int64. ``progress``: a bar over the
    query chunks when the search is big (:func:`~backretrieval.ranking.progress_bar`).
    """
    rows = np.arange(len(queries)) if query_rows is None else query_rows
    best = np.empty(len(queries), dtype=np.int64)
    with progress_bar(len(queries), "nearest", progress, len(queries) * index.n) as bar:
        for s in range(0, len(queries), _CHUNK):
            cand = index.search(queries[s:s + _CHUNK], candidates)
            scores = rescore(scorer, rows[s:s + _CHUNK], cand)
            top = scores.max(axis=1, keepdims=True)
            best[s:s + _CHUNK] = np.where((scores == top) & (cand >= 0), cand, np.iinfo(np.int64).max).min(axis=1)
            bar.update(len(cand))
    return best


def approx_top_mean(queries: np.ndarray, index: ANNIndex, scorer: Scorer, k: int, candidates: int) -> np.ndarray:
    """Mean of the ``k`` best exact scores among each query's index candidates, ``(Q,)`` float32 (CSLS's r); where
    the index finds fewer than ``k`` (an IVF search whose visited cells hold fewer rows), the mean of those it found
    (0 where it found none)."""
    k = max(1, min(int(k), index.n))
    out = np.empty(len(queries), dtype=np.float32)
    for s in range(0, len(queries), _CHUNK):
        cand = index.search(queries[s:s + _CHUNK], max(candidates, k))
        scores = rescore(scorer, np.arange(s, s + len(cand)), cand)
        top = -np.partition(-scores, k - 1, axis=1)[:, :k]
        found = np.isfinite(top)
        out[s:s + _CHUNK] = np.where(found, top, 0.0).sum(axis=1) / np.maximum(found.sum(axis=1), 1)
    return out
