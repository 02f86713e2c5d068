"""Float32 rows as the kernels read them: C-contiguous without a copy, inverse L2 norms, unit rows, finiteness."""
from __future__ import annotations

import numpy as np


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
