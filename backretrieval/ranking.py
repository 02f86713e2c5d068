"""The two kernels behind every metric here: exact nearest neighbours, and blockwise rank counting.

Similarities are cosines of float32 rows. Nothing builds an N x N matrix, and the large
inputs are not copied: rows are normalised tile by tile from precomputed inverse norms.

* :func:`nearest_neighbor` is an exact search with faiss ``IndexFlatIP`` on the
  L2-normalised database (top-1, with a documented tie rule);
* :func:`count_ranks` computes, for each query, how many candidates score above (and
  tie with) one designated candidate of that query (its *own* candidate). The own score
  is one dot product per query; the competitors are scored in tiles of (distinct rows x
  column chunk) with float32 matrix products of ``block_bytes`` at most, and counted with
  vectorised comparisons. Each distinct row is scored once however many queries share
  it, and with ``max_rank`` a row stops being scored once all its queries are known to
  rank below ``max_rank`` (enough for Recall@K with K <= ``max_rank``).

Tie policies (``TIES``), for the rank of the own candidate when ``G`` competitors score
strictly higher and ``E`` score exactly the same (the own candidate is excluded by index,
never by value):

* ``"pessimistic"`` (default): rank = 1 + G + E (tied candidates count as ranked above);
* ``"optimistic"``: rank = 1 + G;
* ``"expected"``: the expectation over a uniformly random order of the tied candidates
  (McSherry & Najork, ECIR 2008): Recall@K = clip((K - G) / (E + 1), 0, 1) per query and
  the reported rank is the mid-rank 1 + G + E / 2.

Exact ties come from identical vectors (or a precomputed similarity matrix). Note that a
BLAS may round the same dot product differently at different matrix positions, so two
*distinct* candidates with identical vectors are not guaranteed to tie bit for bit; give
copies of one picture the same image id instead (the metrics then rank it once).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, Sequence

import faiss
import numpy as np

TIES = ("pessimistic", "optimistic", "expected")
DEFAULT_BLOCK_BYTES = 64 << 20  # float32 scores held at once by count_ranks (64 MiB)
_MAX_CHUNK_COLS = 16384
_FIRST_CHUNK_COLS = 512
_BY_INDEX_ROWS = 1024  # rows per faiss call in VectorScorer.by_candidates
_TIE_K = 16  # nearest_neighbor: scores searched per query, enough to settle most ties without a re-score


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``x`` scaled to unit L2 norm, as a C-contiguous float32 copy (zero rows stay zero)."""
    x = as_float32(x)
    return np.ascontiguousarray(x * inverse_norms(x, eps)[:, None], dtype=np.float32)


def as_float32(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous float32 array: no copy when it already is one (memmaps included)."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float32)


def inverse_norms(x: np.ndarray, eps: float = 1e-12, chunk: int = 8192) -> np.ndarray:
    """``1 / max(||x_i||, eps)`` per row, float32, computed in row chunks (no full-size temporary)."""
    out = np.empty(len(x), dtype=np.float32)
    for s in range(0, len(x), chunk):
        block = np.asarray(x[s:s + chunk], dtype=np.float32)
        out[s:s + chunk] = 1.0 / np.maximum(np.sqrt(np.einsum("ij,ij->i", block, block)), eps)
    return out


def all_finite(x: np.ndarray, chunk: int = 8192) -> bool:
    """True when no entry of ``x`` is NaN or inf (checked in row chunks; float16 by its exponent bits, with no float32 copy)."""
    for s in range(0, len(x), chunk):
        block = np.asarray(x[s:s + chunk])
        if block.dtype == np.float16 and block.flags.c_contiguous:
            if (np.bitwise_and(block.view(np.uint16), 0x7C00) == 0x7C00).any():  # exponent all ones: inf or NaN
                return False
        elif not np.isfinite(block).all():
            return False
    return True


def nearest_neighbor(
    queries: np.ndarray, database: np.ndarray, chunk_rows: int = 1024, normalize: bool = True
) -> np.ndarray:
    """Index of the most cosine-similar ``database`` row for each ``queries`` row, shape ``(Q,)``.

    Exact search with faiss ``IndexFlatIP`` on the L2-normalised database (float32); the
    queries need no normalisation (it does not change their argmax). ``normalize=False``:
    the largest plain inner product (used with augmented vectors for CSLS). Tie rule: when
    several database rows share the best float32 score, the lowest index wins. faiss does
    not promise an order among ties, so the search keeps the best :data:`_TIE_K`: a query whose
    tie ends within them takes its lowest tied index; one whose :data:`_TIE_K` best all tie (more
    copies of one vector) is re-scored in float32 with numpy and resolved with ``argmax`` (first maximum).
    """
    queries = as_float32(queries)
    database = l2_normalize(database) if normalize else as_float32(database)
    index = faiss.IndexFlatIP(database.shape[1])
    index.add(database)
    k = min(_TIE_K, database.shape[0])
    best = np.empty(len(queries), dtype=np.int64)
    tied = []
    for s in range(0, len(queries), 65536):  # faiss needs its queries in memory: stream big inputs
        scores, ids = index.search(queries[s:s + 65536], k)
        ties = scores >= scores[:, :1]  # best first: the tie is a prefix
        best[s:s + 65536] = np.where(ties, ids, np.iinfo(np.int64).max).min(axis=1)
        tied.append(s + np.flatnonzero(ties[:, -1] & (k > 1)))
    tied = np.concatenate(tied) if tied else np.zeros(0, dtype=np.int64)
    for start in range(0, len(tied), chunk_rows):
        rows = tied[start:start + chunk_rows]
        best[rows] = np.argmax(queries[rows] @ database.T, axis=1)
    return best


class Scorer(Protocol):
    """Scores of a virtual ``(R, n_cols)`` matrix, delivered in tiles."""

    n_cols: int

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """float32 ``(len(rows), c1 - c0)`` scores of ``rows`` against columns ``c0:c1``."""
        ...

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """float32 ``(n,)`` scores of the pairs ``(rows[i], cols[i])``."""
        ...


class VectorScorer:
    """Cosines between row vectors ``(R, D)`` and column vectors ``(C, D)``, float32.

    The inputs are used as they are (float32 arrays and memmaps are not copied); each
    tile is normalised with precomputed inverse row and column norms.
    """

    def __init__(self, row_vecs: np.ndarray, col_vecs: np.ndarray, chunk: int = 8192) -> None:
        self.rows, self.cols, self.chunk = as_float32(row_vecs), as_float32(col_vecs), chunk
        self.inv_rows, self.inv_cols = inverse_norms(self.rows), inverse_norms(self.cols)
        self.n_cols = len(self.cols)

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        block = self.rows[rows] * self.inv_rows[rows, None]
        out = block @ self.cols[c0:c1].T
        out *= self.inv_cols[None, c0:c1]
        return out

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.float32)
        for s in range(0, len(rows), self.chunk):
            r, c = rows[s:s + self.chunk], cols[s:s + self.chunk]
            raw = np.einsum("ij,ij->i", self.rows[r], self.cols[c])
            out[s:s + self.chunk] = raw * self.inv_rows[r] * self.inv_cols[c]
        return out

    def by_candidates(self, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """float32 ``(R, C)`` scores of row ``rows[i]`` against the columns ``candidates[i]``; -inf for -1 ids.

        faiss reads the candidate columns in place (``fvec_inner_products_by_idx``, no
        ``(R, C, D)`` gather); blocks of rows run on ``faiss.omp_get_max_threads()`` threads.
        """
        rows = np.asarray(rows, dtype=np.int64)
        ids = np.ascontiguousarray(candidates, dtype=np.int64)
        out = np.empty(ids.shape, dtype=np.float32)

        def block(s: int) -> None:
            e = min(s + _BY_INDEX_ROWS, len(rows))
            x = np.ascontiguousarray(self.rows[rows[s:e]])
            faiss.fvec_inner_products_by_idx(faiss.swig_ptr(out[s:e]), faiss.swig_ptr(x), faiss.swig_ptr(self.cols),
                                             faiss.swig_ptr(ids[s:e]), x.shape[1], e - s, ids.shape[1])

        with ThreadPoolExecutor(max(1, faiss.omp_get_max_threads())) as pool:  # faiss releases the GIL
            list(pool.map(block, range(0, len(rows), _BY_INDEX_ROWS)))
        out *= self.inv_rows[rows, None]
        out *= self.inv_cols[np.maximum(ids, 0)]  # -inf (missing ids) stays -inf
        return out


class MatrixScorer:
    """Scores read from a precomputed ``(R, C0)`` matrix (array or memmap), columns ``col_index``."""

    def __init__(self, matrix: np.ndarray, col_index: np.ndarray) -> None:
        self.matrix, self.col_index = matrix, np.asarray(col_index, dtype=np.int64)
        self.n_cols = len(self.col_index)
        self.identity = self.n_cols == matrix.shape[1] and np.array_equal(self.col_index, np.arange(self.n_cols))

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        if self.identity:
            return np.asarray(self.matrix[rows, c0:c1], dtype=np.float32)
        return np.asarray(self.matrix[np.ix_(rows, self.col_index[c0:c1])], dtype=np.float32)

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix[rows, self.col_index[cols]], dtype=np.float32)


def count_ranks(
    scorer: Scorer,
    row_of_query: np.ndarray,
    col_of_query: np.ndarray,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> dict[str, np.ndarray]:
    """Count, per query ``q``, the competitors of its own candidate ``col_of_query[q]`` in row ``row_of_query[q]``.

    Returns int64 arrays of shape ``(Q,)``: ``"gt"`` (competitors scoring strictly
    higher) and/or ``"ge"`` (higher or equal), as the tie policy needs. With ``max_rank``
    a query stops being counted once its count reaches ``max_rank`` (so counts are exact
    below ``max_rank`` and only known to be ``>= max_rank`` above it).
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    need_gt = ties in ("optimistic", "expected")
    need_ge = ties in ("pessimistic", "expected")
    stop_key = "ge" if ties == "pessimistic" else "gt"
    row_of_query = np.asarray(row_of_query, dtype=np.int64)
    col_of_query = np.asarray(col_of_query, dtype=np.int64)
    n_queries, n_cols = len(row_of_query), scorer.n_cols
    out = {key: np.zeros(n_queries, dtype=np.int64) for key, need in (("gt", need_gt), ("ge", need_ge)) if need}
    if n_queries == 0:
        return out
    own = scorer.pairs(row_of_query, col_of_query)  # the query's own score: the threshold
    chunk = min(n_cols, _MAX_CHUNK_COLS, max(1, int(block_bytes) // (4 * 64)))
    # column chunks: full width for exact ranks; with max_rank, small first chunks that
    # double, so that rows whose queries are already out of the top max_rank stop early
    bounds, c0, width = [0], 0, chunk if max_rank is None else min(chunk, _FIRST_CHUNK_COLS)
    while c0 < n_cols:
        c0 = min(c0 + width, n_cols)
        bounds.append(c0)
        width = min(2 * width, chunk)
    # the outer loop runs over column chunks, so that the rows still active in a chunk
    # (with max_rank: few, spread over all rows) are packed together into full tiles
    active = np.argsort(row_of_query, kind="stable")  # queries, grouped by row
    for c0, c1 in zip(bounds[:-1], bounds[1:]):
        if max_rank is not None:
            active = active[out[stop_key][active] < max_rank]
            if len(active) == 0:
                break
        rows, pos = np.unique(row_of_query[active], return_inverse=True)
        pos = pos.reshape(-1)
        per_block = max(1, int(block_bytes) // (4 * (c1 - c0)))
        q_bounds = np.searchsorted(pos, np.arange(0, len(rows) + per_block, per_block))
        for b, b0 in enumerate(range(0, len(rows), per_block)):
            queries, local = active[q_bounds[b]:q_bounds[b + 1]], pos[q_bounds[b]:q_bounds[b + 1]] - b0
            scores = scorer.tile(rows[b0:b0 + per_block], c0, c1)
            shared = len(queries) != min(per_block, len(rows) - b0)  # several queries on one row: gather per query
            for s0 in range(0, len(queries), per_block):
                sub = queries[s0:s0 + per_block]
                rows_scores = scores[local[s0:s0 + per_block]] if shared else scores
                found = _count_tile(rows_scores, own[sub], col_of_query[sub] - c0, need_gt, need_ge)
                for key, value in found.items():
                    out[key][sub] += value
    return out


def _count_tile(
    scores: np.ndarray, thr: np.ndarray, own_col: np.ndarray, need_gt: bool, need_ge: bool
) -> dict[str, np.ndarray]:
    """Per row of ``scores``: entries above / at least ``thr``, the own column (if in the tile) excluded."""
    thr = thr[:, None]
    in_tile = np.flatnonzero((own_col >= 0) & (own_col < scores.shape[1]))
    own_score = scores[in_tile, own_col[in_tile]][:, None]
    found = {}
    if need_gt:
        found["gt"] = np.count_nonzero(scores > thr, axis=1)
        found["gt"][in_tile] -= (own_score > thr[in_tile]).ravel()
    if need_ge:
        found["ge"] = np.count_nonzero(scores >= thr, axis=1)
        found["ge"][in_tile] -= (own_score >= thr[in_tile]).ravel()
    return found


def ranks_and_recall(
    counts: dict[str, np.ndarray], ks: Sequence[int], ties: str, max_rank: int | None = None
) -> tuple[np.ndarray, dict[int, float]]:
    """Turn :func:`count_ranks` output into 1-based ranks and Recall@K for each K (module doc).

    With ``max_rank``, ranks above it are reported as ``max_rank + 1`` (censored).
    """
    ranks, hits = ranks_and_hits(counts, ks, ties, max_rank)
    recall = {k: float(np.mean(h)) if len(ranks) else float("nan") for k, h in hits.items()}
    return ranks, recall


def ranks_and_hits(
    counts: dict[str, np.ndarray], ks: Sequence[int], ties: str, max_rank: int | None = None
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """1-based ranks and the per-query hit vectors ``{K: (Q,) float64}`` whose means are Recall@K.

    Hits are 0/1, or fractions in [0, 1] under ``ties="expected"``; the bootstrap of
    :mod:`backretrieval.uncertainty` resamples them.
    """
    if ties == "optimistic":
        ranks = 1 + counts["gt"]
        hit = {k: ranks <= k for k in ks}
    elif ties == "pessimistic":
        ranks = 1 + counts["ge"]
        hit = {k: ranks <= k for k in ks}
    elif ties == "expected":
        greater, equal = counts["gt"], counts["ge"] - counts["gt"]
        ranks = 1.0 + greater + equal / 2.0
        hit = {k: np.clip((k - greater) / (equal + 1.0), 0.0, 1.0) for k in ks}
    else:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    if max_rank is not None:  # counts stopped at max_rank: only "rank > max_rank" is known
        ranks = np.where(ranks > max_rank, max_rank + 1, ranks)
    return ranks, {k: np.asarray(h, dtype=np.float64) for k, h in hit.items()}
