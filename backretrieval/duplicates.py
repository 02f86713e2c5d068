"""Rows that are copies of one another (equal float32 values), found by exact hashes of the rows in chunks."""
from __future__ import annotations

import numpy as np

_HASH_ROWS = 2048  # duplicate_rows: rows hashed at once
_HASH_DIMS = 64  # duplicate_rows: columns of the first hash (rows that share it are hashed on every column)
_HASH_SEED = 20210711  # duplicate_rows: fixed weights of the row hash


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
