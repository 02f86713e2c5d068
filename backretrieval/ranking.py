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

Exact ties come from identical vectors (or a precomputed similarity matrix). A BLAS rounds
the same dot product differently at different matrix positions and in calls of different
shapes, so float32 scores alone would not make copies of one vector tie: a copy of the own
candidate would land above or below it at random. :class:`VectorScorer` therefore finds the
columns that are copies of one another (:func:`duplicate_rows`: equal float32 values), and
:func:`count_ranks` counts every copy of the own candidate as tied with it, whatever its
rounded score, so that copies tie exactly (as in exact arithmetic). The own score itself is
computed in the tiles' order of operations (rows normalised, then the dot product, then the
column's inverse norm); *distinct* vectors of equal cosine may still tie or not by rounding.
To rank copies of one picture once rather than as ties, give them one image id.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import TYPE_CHECKING, Protocol, Sequence

import faiss
import numpy as np

if TYPE_CHECKING:  # tqdm is imported when a bar is made
    from tqdm.auto import tqdm

TIES = ("pessimistic", "optimistic", "expected")
DEFAULT_BLOCK_BYTES = 64 << 20  # float32 scores held at once by count_ranks (64 MiB)
_MAX_CHUNK_COLS = 16384
_FIRST_CHUNK_COLS = 512
_BY_INDEX_ROWS = 1024  # rows per faiss call in VectorScorer.by_candidates
_TIE_K = 16  # nearest_neighbor: scores searched per query, enough to settle most ties without a re-score
_HASH_ROWS = 2048  # duplicate_rows: rows hashed at once
_HASH_DIMS = 64  # duplicate_rows: columns of the first hash (rows that share it are hashed on every column)
_HASH_SEED = 20210711  # duplicate_rows: fixed weights of the row hash
_SEARCH_ROWS = 8192  # nearest_neighbor: queries per faiss search (a progress step; no slower than one big call)
_BAR_MIN_PAIRS = 1 << 28  # progress bars only for work of more (row, column) scores than this: seconds of it


def progress_bar(total: int, desc: str, show: bool, pairs: int, unit: str = "row") -> tqdm:
    """A tqdm bar of ``total`` steps (on stderr, gone when done), shown with ``show`` for work of at least
    :data:`_BAR_MIN_PAIRS` scored (row, column) ``pairs`` only: small calls stay quiet."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                disable=not show or pairs < _BAR_MIN_PAIRS)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` scaled to unit L2 norm, as a C-contiguous float32 copy (zero rows stay zero)."""
    x = as_float32(x)
    return np.ascontiguousarray(x * inverse_norms(x)[:, None], dtype=np.float32)


def as_float32(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous float32 array: no copy when it already is one (memmaps included)."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float32)


_FLOAT32 = np.finfo(np.float32)


def inverse_norms(x: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """``1 / ||x_i||`` per row (0 for an all-zero row), float32, computed in row chunks (no full-size temporary).

    Any non-zero finite row gets its own inverse norm, so the cosine is scale-invariant: a row whose float32 sum of
    squares overflows (a norm past about 1.8e19) or underflows (below about 1e-19) is summed again in float64; no
    floor (an ``eps`` of 1e-12 scored a row of norm 1e-13 at a tenth of its cosine). Only rows of float32
    subnormals (a norm below about 3e-39) get float32's largest number, not their inverse norm."""
    out = np.empty(len(x), dtype=np.float32)
    for s in range(0, len(x), chunk):
        block = np.asarray(x[s:s + chunk], dtype=np.float32)
        squares = np.einsum("ij,ij->i", block, block)
        suspect = np.flatnonzero((squares < _FLOAT32.tiny) | np.isinf(squares))  # zero rows too: a few, or none
        if len(suspect):
            part = block[suspect]
            finite = np.isfinite(part).all(axis=1)  # inf entries stay inf
            squares = squares.astype(np.float64)
            squares[suspect[finite]] = np.einsum("ij,ij->i", part[finite], part[finite], dtype=np.float64)
        norms = np.sqrt(squares)
        with np.errstate(divide="ignore"):
            out[s:s + chunk] = np.minimum(np.where(norms > 0, 1.0 / norms, 0.0), _FLOAT32.max)
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


def duplicate_rows(x: np.ndarray) -> np.ndarray | None:
    """For each row of ``x``, the lowest index of a row with the same float32 values (itself when none), ``(N,)``
    int64; None when all rows differ.

    Rows are hashed exactly (their float32 bit patterns, ``-0.0`` as ``0.0``, times fixed odd 64-bit weights,
    summed modulo 2**64: the same for equal rows in any order of operations), in chunks of rows (memmaps stay on
    disk): first on :data:`_HASH_DIMS` evenly spaced columns, then on every column for the rows that share a
    first hash with another; rows of equal hash are then compared value by value, so a hash collision never
    merges distinct rows.
    """
    n = len(x)
    if n < 2:
        return None
    dim = int(np.prod(x.shape[1:]))
    picked = np.unique(np.linspace(0, dim - 1, min(dim, _HASH_DIMS)).astype(np.int64)) if dim else None
    rows = np.arange(n)
    hashes = _row_hashes(x, rows, picked)
    if picked is not None and len(picked) < dim:  # the rows that may have a copy: hashed again, on every column
        rows = rows[_shared(hashes)]
        hashes = _row_hashes(x, rows)
    keep = _shared(hashes)
    rows, hashes = rows[keep], hashes[keep]
    if len(rows) == 0:
        return None
    order = np.argsort(hashes, kind="stable")  # equal hashes: in row order
    rows, hashes = rows[order], hashes[order]
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
    sizes = np.diff(np.r_[starts, len(rows)])
    lead = np.repeat(rows[starts], sizes)  # the lowest row of each run of equal hashes
    out = np.arange(n, dtype=np.int64)
    same = np.ones(len(rows), dtype=bool)
    for s in range(0, len(rows), _HASH_ROWS):
        a = np.asarray(x[rows[s:s + _HASH_ROWS]], dtype=np.float32).reshape(len(rows[s:s + _HASH_ROWS]), -1)
        b = np.asarray(x[lead[s:s + _HASH_ROWS]], dtype=np.float32).reshape(len(a), -1)
        same[s:s + _HASH_ROWS] = (a == b).all(axis=1)
    out[rows[same]] = lead[same]
    for r in np.unique(np.searchsorted(starts, np.flatnonzero(~same), side="right") - 1):  # hash collisions
        members = rows[starts[r]:starts[r] + sizes[r]]  # in row order: settle the run by its values
        values = np.asarray(x[members], dtype=np.float32).reshape(len(members), -1) + np.float32(0.0)
        _, firsts, inverse = np.unique(values, axis=0, return_index=True, return_inverse=True)
        out[members] = members[firsts][inverse.reshape(-1)]
    return None if (out == np.arange(n)).all() else out


def _shared(hashes: np.ndarray) -> np.ndarray:
    """Mask of the entries of ``hashes`` that some other entry equals."""
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)] > 1


def _row_hashes(x: np.ndarray, rows: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
    """``(len(rows),)`` uint64 exact hashes of the float32 values of ``x[rows]`` (of its columns ``cols``, default
    all) (:func:`duplicate_rows`)."""
    dim = int(np.prod(x.shape[1:])) if cols is None else len(cols)
    weights = np.random.default_rng(_HASH_SEED).integers(1, 2**62, size=dim, dtype=np.uint64) * np.uint64(2) + \
        np.uint64(1)  # odd
    hashes = np.empty(len(rows), dtype=np.uint64)
    contiguous = len(rows) == len(x)  # every row, in order: read slices
    for s in range(0, len(rows), _HASH_ROWS):
        block = np.asarray(x[s:s + _HASH_ROWS] if contiguous else x[rows[s:s + _HASH_ROWS]], dtype=np.float32)
        block = block.reshape(len(block), -1)
        if cols is not None:
            block = block[:, cols]
        block = np.ascontiguousarray(block) + np.float32(0.0)  # -0.0 -> 0.0
        hashes[s:s + _HASH_ROWS] = (block.view(np.uint32).astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return hashes


def nearest_neighbor(
    queries: np.ndarray, database: np.ndarray, chunk_rows: int = 1024, normalize: bool = True, progress: bool = False
) -> np.ndarray:
    """Index of the most cosine-similar ``database`` row for each ``queries`` row, shape ``(Q,)``.

    Exact search with faiss ``IndexFlatIP`` on the L2-normalised database (float32); the
    queries need no normalisation (it does not change their argmax). ``normalize=False``:
    the largest plain inner product (used with augmented vectors for CSLS). Tie rule: when
    several database rows share the best float32 score, the lowest index wins. faiss does
    not promise an order among ties, so the search keeps the best :data:`_TIE_K`: a query whose
    tie ends within them takes its lowest tied index; one whose :data:`_TIE_K` best all tie (more
    copies of one vector) is re-scored in float32 with numpy and resolved with ``argmax`` (first maximum).
    ``progress``: a bar over the query chunks when the search is big (:func:`progress_bar`).
    """
    queries = as_float32(queries)
    database = l2_normalize(database) if normalize else as_float32(database)
    index = faiss.IndexFlatIP(database.shape[1])
    index.add(database)
    k = min(_TIE_K, database.shape[0])
    best = np.empty(len(queries), dtype=np.int64)
    tied_parts = []
    with progress_bar(len(queries), "nearest", progress, len(queries) * len(database)) as bar:
        for s in range(0, len(queries), _SEARCH_ROWS):  # faiss needs its queries in memory: stream big inputs
            scores, ids = index.search(queries[s:s + _SEARCH_ROWS], k)
            ties = scores >= scores[:, :1]  # best first: the tie is a prefix
            best[s:s + _SEARCH_ROWS] = np.where(ties, ids, np.iinfo(np.int64).max).min(axis=1)
            tied_parts.append(s + np.flatnonzero(ties[:, -1] & (k > 1)))
            bar.update(len(ids))
    tied = np.concatenate(tied_parts) if tied_parts else np.zeros(0, dtype=np.int64)
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


def column_groups(scorer: Scorer) -> np.ndarray | None:
    """A scorer's ``col_groups`` (:func:`duplicate_rows` of its column vectors: copies tie), or None (no copies,
    or a scorer without column vectors: its scores of equal columns are equal as read)."""
    return getattr(scorer, "col_groups", None)


class VectorScorer:
    """Cosines between row vectors ``(R, D)`` and column vectors ``(C, D)``, float32.

    The inputs are used as they are (float32 arrays and memmaps are not copied); each
    tile is normalised with precomputed inverse row and column norms. ``col_groups``
    (computed when first read) marks the columns that are copies of one another
    (:func:`duplicate_rows`), which :func:`count_ranks` counts as tied.
    """

    def __init__(self, row_vecs: np.ndarray, col_vecs: np.ndarray, chunk: int = 8192) -> None:
        self.rows, self.cols, self.chunk = as_float32(row_vecs), as_float32(col_vecs), chunk
        self.inv_rows, self.inv_cols = inverse_norms(self.rows), inverse_norms(self.cols)
        self.n_cols = len(self.cols)

    @cached_property
    def col_groups(self) -> np.ndarray | None:
        """:func:`duplicate_rows` of the column vectors (None: no two columns are equal), computed when first read."""
        return duplicate_rows(self.cols)

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """float32 ``(len(rows), c1 - c0)`` cosines of ``rows`` against the columns ``c0:c1``."""
        block = self.rows[rows] * self.inv_rows[rows, None]
        out = block @ self.cols[c0:c1].T
        out *= self.inv_cols[None, c0:c1]
        return out

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """float32 cosines of the pairs ``(rows[i], cols[i])``, ``chunk`` pairs at a time, in the order of operations of
        :meth:`tile`."""
        out = np.empty(len(rows), dtype=np.float32)
        for s in range(0, len(rows), self.chunk):
            r, c = rows[s:s + self.chunk], cols[s:s + self.chunk]  # the order of operations of tile()
            dot = np.einsum("ij,ij->i", self.rows[r] * self.inv_rows[r, None], self.cols[c])
            out[s:s + self.chunk] = dot * self.inv_cols[c]
        return out

    def by_candidates(self, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """float32 ``(R, C)`` scores of row ``rows[i]`` against the columns ``candidates[i]``; -inf for -1 ids.

        faiss reads the candidate columns in place (``fvec_inner_products_by_idx``, no
        ``(R, C, D)`` gather); blocks of rows run on ``faiss.omp_get_max_threads()`` threads. Rows are normalised
        first, as in :meth:`tile` (two huge rows' raw inner product overflowed float32).
        """
        rows = np.asarray(rows, dtype=np.int64)
        ids = np.ascontiguousarray(candidates, dtype=np.int64)
        out = np.empty(ids.shape, dtype=np.float32)

        def block(s: int) -> None:
            e = min(s + _BY_INDEX_ROWS, len(rows))
            x = np.ascontiguousarray(self.rows[rows[s:e]] * self.inv_rows[rows[s:e], None])
            faiss.fvec_inner_products_by_idx(  # type: ignore[attr-defined]  # in faiss, not in its __init__.pyi
                faiss.swig_ptr(out[s:e]), faiss.swig_ptr(x), faiss.swig_ptr(self.cols), faiss.swig_ptr(ids[s:e]),
                x.shape[1], e - s, ids.shape[1])

        with ThreadPoolExecutor(max(1, faiss.omp_get_max_threads())) as pool:  # faiss releases the GIL
            list(pool.map(block, range(0, len(rows), _BY_INDEX_ROWS)))
        out *= self.inv_cols[np.maximum(ids, 0)]  # -inf (missing ids) stays -inf
        return out


class MatrixScorer:
    """Scores read from a precomputed ``(R, C0)`` matrix (array or memmap), columns ``col_index``."""

    def __init__(self, matrix: np.ndarray, col_index: np.ndarray) -> None:
        self.matrix, self.col_index = matrix, np.asarray(col_index, dtype=np.int64)
        self.n_cols = len(self.col_index)
        self.identity = self.n_cols == matrix.shape[1] and np.array_equal(self.col_index, np.arange(self.n_cols))

    def tile(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """The matrix's float32 scores of ``rows`` against the columns ``c0:c1`` (read through ``col_index``)."""
        if self.identity:
            return np.asarray(self.matrix[rows, c0:c1], dtype=np.float32)
        return np.asarray(self.matrix[np.ix_(rows, self.col_index[c0:c1])], dtype=np.float32)

    def pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The matrix's float32 scores of the pairs ``(rows[i], cols[i])`` (columns read through ``col_index``)."""
        return np.asarray(self.matrix[rows, self.col_index[cols]], dtype=np.float32)


def count_ranks(
    scorer: Scorer,
    row_of_query: np.ndarray,
    col_of_query: np.ndarray,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    progress: bool = False,
    desc: str = "ranks",
) -> dict[str, np.ndarray]:
    """Count, per query ``q``, the competitors of its own candidate ``col_of_query[q]`` in row ``row_of_query[q]``.

    Returns int64 arrays of shape ``(Q,)``: ``"gt"`` (competitors scoring strictly
    higher) and/or ``"ge"`` (higher or equal), as the tie policy needs. With ``max_rank``
    a query stops being counted once its count reaches ``max_rank`` (so counts are exact
    below ``max_rank`` and only known to be ``>= max_rank`` above it). Competitors that are
    copies of the own candidate (the scorer's ``col_groups``) count as tied with it, whatever
    their rounded scores (module doc). ``progress``: a bar (named ``desc``) over the (row, column) scores when they
    are many (:func:`progress_bar`; with ``max_rank`` it stops short, as the rows do).
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
    groups = column_groups(scorer)
    own_group, copied = np.zeros(0, np.int64), np.zeros(0, bool)  # set and read only with groups
    if groups is not None:  # copies of the own candidate tie with it, however their scores were rounded
        own_group = groups[col_of_query]
        copied = np.bincount(groups, minlength=n_cols)[own_group] > 1
        if not copied.any():
            groups = None
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
    work = len(np.unique(row_of_query)) * n_cols if progress else 0
    bar = progress_bar(work, desc, progress, work, unit="score")
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
                if groups is not None:
                    _count_copies(found, rows_scores, own[sub], col_of_query[sub] - c0, groups[c0:c1],
                                  own_group[sub], copied[sub])
                for key, value in found.items():
                    out[key][sub] += value
            bar.update(len(rows[b0:b0 + per_block]) * (c1 - c0))
    bar.close()
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


def _count_copies(
    found: dict[str, np.ndarray], scores: np.ndarray, thr: np.ndarray, own_col: np.ndarray, groups: np.ndarray,
    own_group: np.ndarray, copied: np.ndarray
) -> None:
    """Correct :func:`_count_tile`'s counts so that the copies of each row's own candidate in the tile (columns of
    its group, the own column excluded) count as tied with it: in ``ge``, never in ``gt``."""
    rows = np.flatnonzero(copied)
    if len(rows) == 0:
        return
    same = groups[None, :] == own_group[rows, None]
    inside = (own_col[rows] >= 0) & (own_col[rows] < scores.shape[1])
    same[np.flatnonzero(inside), own_col[rows][inside]] = False
    block, t = scores[rows], thr[rows, None]
    if "gt" in found:
        found["gt"][rows] -= np.count_nonzero(same & (block > t), axis=1)
    if "ge" in found:
        found["ge"][rows] += np.count_nonzero(same & ~(block >= t), axis=1)


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
