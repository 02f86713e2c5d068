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
candidate would land above or below it at random. :class:`~backretrieval.scorers.VectorScorer` therefore finds the
columns that are copies of one another (:func:`~backretrieval.duplicates.duplicate_rows`: equal float32 values), and
:func:`count_ranks` counts every copy of the own candidate as tied with it, whatever its
rounded score, so that copies tie exactly (as in exact arithmetic). The own score itself is
computed in the tiles' order of operations (rows normalised, then the dot product, then the
column's inverse norm); *distinct* vectors of equal cosine may still tie or not by rounding.
To rank copies of one picture once rather than as ties, give them one image id.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import faiss
import numpy as np

from .scorers import Scorer, column_groups
from .vectors import as_float32, l2_normalize

if TYPE_CHECKING:  # tqdm is imported when a bar is made
    from tqdm.auto import tqdm

TIES = ("pessimistic", "optimistic", "expected")
DEFAULT_BLOCK_BYTES = 64 << 20  # float32 scores held at once by count_ranks (64 MiB)
_MAX_CHUNK_COLS = 16384
_FIRST_CHUNK_COLS = 512
_TIE_K = 16  # nearest_neighbor: scores searched per query, enough to settle most ties without a re-score
_SEARCH_ROWS = 8192  # nearest_neighbor: queries per faiss search (a progress step; no slower than one big call)
_BAR_MIN_PAIRS = 1 << 28  # progress bars only for work of more (row, column) scores than this: seconds of it


def progress_bar(total: int, desc: str, show: bool, pairs: int, unit: str = "row") -> tqdm:
    """A tqdm bar of ``total`` steps (on stderr, gone when done), shown with ``show`` for work of at least
    :data:`_BAR_MIN_PAIRS` scored (row, column) ``pairs`` only: small calls stay quiet."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                disable=not show or pairs < _BAR_MIN_PAIRS)


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
