"""Hubness of the text-retrieval step, and CSLS retrieval that counters it.

In high dimensions a few points (*hubs*) are the nearest neighbour of very many queries
(Radovanovic et al., JMLR 2010). For BkR this matters at step 2: a hub target caption is
retrieved for many source queries, all of which are then judged through one image.

k-occurrence. ``N_k(t)`` is the number of queries that have target ``t`` among their k
nearest neighbours. BkR uses the top-1 retrieval, so the diagnostics here are on ``N_1``
(the counts of ``retrieved``): its skewness (hubness gives a long right tail), the share of
queries whose retrieved target is one of the top 1% most retrieved targets (``hub_share``), the
largest occurrence and the share of targets never retrieved (anti-hubs). Without hubs, each query
retrieving a target at random, ``N_1`` is Poisson with mean Q/N (Q queries, N targets): skewness
``sqrt(N/Q)`` and a hub share of about 4.4% at Q = N, not 1% (``skewness_random`` and
``hub_share_random``, the baselines each record carries).

CSLS (Conneau et al., ICLR 2018, "Word translation without parallel data", eq. 6):
``CSLS(x, y) = 2 cos(x, y) - r_T(x) - r_S(y)``, where ``r_S(y)`` is the mean cosine of
target ``y`` to its ``k`` nearest source queries and ``r_T(x)`` that of query ``x`` to its
``k`` nearest targets. For one query ``r_T(x)`` is a constant, so retrieval and ranks only
need ``cos(x, y) - r_S(y) / 2``: a hub (high ``r_S``) is penalised. Exactly, that is an
inner product of augmented vectors ``[x/|x|, -1/2] . [y/|y|, r_S(y)]``, so the same exact
faiss search serves both criteria.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp
from scipy import stats

from .errors import BackRetrievalError
from .files import require_count
from .ranking import progress_bar
from .scorers import VectorScorer
from .vectors import as_float32, l2_normalize

DEFAULT_CSLS_K = 10  # Conneau et al. 2018 use k = 10
RETRIEVALS = ("cosine", "csls")
HUB_SHARE = 0.01  # the top 1% most retrieved targets are the hubs


def k_occurrence(retrieved: np.ndarray, n_targets: int) -> np.ndarray:
    """``(n_targets,)`` int64 counts: how many queries retrieved each target (``N_1``)."""
    return np.bincount(np.asarray(retrieved, dtype=np.int64).reshape(-1), minlength=n_targets)


def hubness_stats(retrieved: np.ndarray, n_targets: int, top: float = HUB_SHARE) -> dict[str, float]:
    """Hubness of a top-1 retrieval (module doc).

    Returns ``{"skewness": skewness of N_1 over targets, "hub_share": share of queries whose
    retrieved target is among the ceil(top * n_targets) most retrieved, "skewness_random" and
    "hub_share_random": both without hubs (:func:`random_retrieval_baseline`), "max_occurrence",
    "never_retrieved": share of targets no query retrieved}``. ``retrieved``: each query's target index,
    in ``[0, n_targets)``.
    """
    retrieved = np.asarray(retrieved)
    require_count(n_targets, "n_targets")  # 2.5: numpy's error
    if not 0 < top <= 1:  # 0 or -1 took one hub in silence, 2 was a NaN conversion error
        raise BackRetrievalError(f"top: expected the share of targets that are hubs, in (0, 1], got {top!r}")
    if retrieved.size and (retrieved.dtype.kind not in "iu" or retrieved.min() < 0 or retrieved.max() >= n_targets):
        raise BackRetrievalError(f"retrieved: expected target indices (integers) in [0, {n_targets}), got "
                                 f"{retrieved.dtype} values in [{retrieved.min()}, {retrieved.max()}]")
    counts = k_occurrence(retrieved, n_targets)
    n_hubs = max(1, int(np.ceil(top * n_targets)))
    top_counts = np.partition(counts, n_targets - n_hubs)[n_targets - n_hubs:] if n_hubs < n_targets else counts
    total = max(int(counts.sum()), 1)
    skew = float(stats.skew(counts)) if n_targets > 2 and counts.std() > 0 else 0.0
    return {
        "skewness": skew,
        "hub_share": float(top_counts.sum() / total),
        **random_retrieval_baseline(retrieved.size, n_targets, top),
        "max_occurrence": int(counts.max()) if n_targets else 0,
        "never_retrieved": float(np.mean(counts == 0)) if n_targets else 0.0,
    }


def random_retrieval_baseline(n_queries: int, n_targets: int, top: float = HUB_SHARE) -> dict[str, float]:
    """What :func:`hubness_stats` reads when there are no hubs, each query retrieving a target at random:
    ``N_1`` is then Poisson with mean ``lam = n_queries / n_targets`` (the multinomial's limit), so
    ``{"skewness_random": 1 / sqrt(lam), "hub_share_random": the expected share of queries on the top ``top``
    of targets}`` (the top ``p`` of a Poisson: every count above ``t``, where ``P(X > t) <= p < P(X >= t)``,
    and ``t`` for the rest of ``p``)."""
    if n_queries < 1:
        return {"skewness_random": float("nan"), "hub_share_random": float("nan")}
    lam = n_queries / n_targets
    p = max(1, int(np.ceil(top * n_targets))) / n_targets
    t = int(stats.poisson.isf(p, lam))  # the smallest count with P(X > t) <= p
    while stats.poisson.sf(t, lam) > p:
        t += 1
    above = lam * stats.poisson.sf(t - 1, lam)  # E[X; X > t] = lam * P(X >= t)
    share = (above + (p - stats.poisson.sf(t, lam)) * t) / lam
    return {"skewness_random": float(1 / np.sqrt(lam)), "hub_share_random": float(min(share, 1.0))}


MAX_BLOCK = 1 << 24
"""Most similarities :func:`neighbourhood_radii` holds at once (64 MB of float32)."""


def _unit_rows(x: np.ndarray | sp.spmatrix) -> np.ndarray | sp.csr_matrix:
    """L2-normalised float32 rows, dense (contiguous) or ``scipy.sparse`` CSR."""
    if sp.issparse(x):
        x = sp.csr_matrix(x, dtype=np.float32)
        norms = np.sqrt(np.asarray(x.multiply(x).sum(1))).ravel()
        return (sp.diags(1.0 / np.maximum(norms, 1e-12)).astype(np.float32) @ x).tocsr()
    return np.ascontiguousarray(l2_normalize(x), dtype=np.float32)


def neighbourhood_radii(
    queries: np.ndarray | sp.spmatrix,
    pool: np.ndarray | sp.spmatrix,
    k: int = DEFAULT_CSLS_K,
    *,
    pool_groups: np.ndarray | None = None,
    extra: Callable[[np.ndarray], np.ndarray] | None = None,
    exclude: np.ndarray | None = None,
    chunk: int = 1024,
    progress: bool = False,
) -> np.ndarray:
    """CSLS's neighbourhood radius (Conneau et al., ICLR 2018, eq. 6): ``r(x)``, the mean of row ``x``'s ``k``
    highest similarities to the ``pool`` rows, exact.

    The similarity is the cosine of the rows (dense arrays or ``scipy.sparse`` matrices, L2-normalised here), plus
    ``extra(rows)`` ``[len(rows), P]`` when given (e.g. a late-interaction score). ``pool_groups`` ``(P,)`` integer
    codes ``0..G-1`` split the pool (languages): the result is ``[N, G]``, ``r_g(x)`` among group ``g``'s rows;
    without it ``[N]`` over the whole pool. ``exclude`` ``(N,)`` names the pool row that is query ``i`` itself
    (``-1``: none), never its own neighbour. Every group needs at least ``k`` rows besides an excluded one
    (:class:`ValueError` otherwise). Queries are scored in blocks of at most :data:`MAX_BLOCK` similarities: no
    ``N x P`` matrix is held. ``progress``: a bar over the query blocks when the work is big
    (:func:`~backretrieval.ranking.progress_bar`).
    """
    queries, pool = _unit_rows(queries), _unit_rows(pool)
    if queries.shape[1] != pool.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} dims, the pool {pool.shape[1]}")
    n, n_pool = queries.shape[0], pool.shape[0]
    groups = np.zeros(n_pool, np.int64) if pool_groups is None else np.asarray(pool_groups, np.int64)
    if groups.shape != (n_pool,):
        raise ValueError(f"pool_groups has {groups.shape[0]} codes for {n_pool} pool rows")
    columns = [np.flatnonzero(groups == g) for g in range(int(groups.max()) + 1 if n_pool else 0)]
    own = exclude is not None and bool((np.asarray(exclude) >= 0).any())
    for g, cols in enumerate(columns):
        if len(cols) - own < k:
            raise ValueError(f"k={k} neighbours exceed the {len(cols)} pool rows" +
                             (f" of group {g}" if pool_groups is not None else ""))
    pool_t = pool.T if isinstance(pool, np.ndarray) else pool.T.tocsr()
    out = np.empty((n, len(columns)), dtype=np.float32)
    step = max(1, min(chunk, MAX_BLOCK // max(n_pool, 1)))
    with progress_bar(n, "CSLS radii", progress, n * n_pool) as bar:
        for start in range(0, n, step):
            _radii_block(queries, pool_t, np.arange(start, min(start + step, n)), columns, k, extra, exclude if own
                         else None, out)
            bar.update(min(step, n - start))
    return out[:, 0] if pool_groups is None else out


def _radii_block(queries: np.ndarray | sp.spmatrix, pool_t: np.ndarray | sp.spmatrix, rows: np.ndarray, columns: list[np.ndarray], k: int,
                 extra: Callable[[np.ndarray], np.ndarray] | None, exclude: np.ndarray | None, out: np.ndarray) -> None:
    """:func:`neighbourhood_radii` of the query ``rows`` into ``out[rows]``."""
    sims = queries[rows] @ pool_t
    sims = sims.toarray() if sp.issparse(sims) else np.asarray(sims, dtype=np.float32)
    if extra is not None:
        sims += extra(rows)
    if exclude is not None:
        mine = np.asarray(exclude)[rows]
        keep = mine >= 0
        sims[np.flatnonzero(keep), mine[keep]] = -np.inf
    for g, cols in enumerate(columns):
        block = sims if len(columns) == 1 else sims[:, cols]
        out[rows, g] = np.partition(block, block.shape[1] - k, axis=1)[:, -k:].mean(axis=1)


def csls_penalty(targets: np.ndarray, sources: np.ndarray, k: int = DEFAULT_CSLS_K, progress: bool = False) -> np.ndarray:
    """``r_S(y)``: each target row's :func:`neighbourhood_radii` among the source rows, ``(Nt,)`` float32 (``k`` is
    capped at the number of sources). ``progress``: a bar when the work is big."""
    return neighbourhood_radii(targets, sources, max(1, min(int(k), len(sources))), progress=progress)


def augment_for_csls(queries: np.ndarray, targets: np.ndarray, penalty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Augmented vectors whose inner product is ``cos(x, y) - r_S(y) / 2`` (module doc)."""
    q = np.concatenate([l2_normalize(queries), np.full((len(queries), 1), -0.5, np.float32)], axis=1)
    t = np.concatenate([l2_normalize(targets), as_float32(penalty)[:, None]], axis=1)
    return q, t


class CSLSScorer:
    """Scores ``cos(x, y) - r_S(y) / 2`` of query rows against target columns (a ranking ``Scorer``).

    Ranks of targets by this score are ranks by CSLS (the query's own ``r_T`` is a constant).
    Copies of one target vector (``col_groups``) take one penalty, that of the first copy, so
    that they score alike, and count as tied in :func:`~backretrieval.ranking.count_ranks`.
    """

    def __init__(self, row_vecs: np.ndarray, col_vecs: np.ndarray, penalty: np.ndarray) -> None:
        self.base = VectorScorer(row_vecs, col_vecs)
        self.half_penalty = 0.5 * as_float32(penalty)
        if self.col_groups is not None:  # r_S of a copy: rounded like its own, but not bit for bit
            self.half_penalty = self.half_penalty[self.col_groups]
        self.n_cols = self.base.n_cols

    @property
    def col_groups(self) -> np.ndarray | None:
        """The cosine scorer's ``col_groups``: copies among the target columns (None: no copies)."""
        return self.base.col_groups

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """The cosines of ``rows`` against columns ``c0:c1``, less each column's half penalty."""
        out = self.base.tile(rows, c0, c1)
        out -= self.half_penalty[None, c0:c1]
        return out

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The cosines of the pairs ``(rows[i], cols[i])``, less each column's half penalty."""
        return self.base.pairs(rows, cols) - self.half_penalty[cols]

    def by_candidates(self, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """``(R, C)`` scores of ``rows[i]`` against the columns ``candidates[i]``; -inf for -1 ids."""
        return self.base.by_candidates(rows, candidates) - self.half_penalty[np.maximum(candidates, 0)]
