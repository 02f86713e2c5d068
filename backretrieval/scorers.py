"""Scores for :func:`~backretrieval.ranking.count_ranks`, in tiles: cosines of vectors, or a precomputed matrix."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Protocol

import faiss
import numpy as np

from .duplicates import duplicate_rows
from .vectors import as_float32, inverse_norms

_BY_INDEX_ROWS = 1024  # rows per faiss call in VectorScorer.by_candidates


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
