"""Source pictures: the distinct images behind the source rows (``src_image_ids``), one picture's features per id,
and pictures shown on both sides."""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from .errors import BackRetrievalError


def distinct_images(src_image_ids: Sequence | None, n_src: int) -> tuple[np.ndarray, np.ndarray]:
    """(first source row of each distinct image, column of each source row's image); no ids: one image per row."""
    if src_image_ids is None:
        rows = np.arange(n_src)
        return rows, rows
    ids = np.asarray(src_image_ids)
    if ids.shape != (n_src,):
        raise BackRetrievalError(f"src_image_ids: expected {n_src} ids (one per source text), got shape {ids.shape}")
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def shared_pictures(src_img: np.ndarray, tgt_img: np.ndarray) -> int:
    """How many target rows hold the very features of a source row (the same picture on both sides).

    BkR pivots on pictures that differ between the two sides: with a target caption of the query's own picture
    among the candidates, retrieving it is rewarded as a translation (BkR then reads like XLR on parallel data).
    """
    def digests(features: np.ndarray) -> list[bytes]:
        out: list[bytes] = []
        for start in range(0, len(features), 65_536):  # in blocks: a memmap is never read whole at once
            block = np.ascontiguousarray(np.asarray(features[start:start + 65_536], np.float32))
            out.extend(hashlib.blake2b(row.tobytes(), digest_size=12).digest() for row in block)
        return out

    source = set(digests(src_img))
    return sum(d in source for d in digests(tgt_img))


def check_one_picture_per_id(src_img: np.ndarray, src_image_ids: Sequence, first: np.ndarray,
                             inverse: np.ndarray) -> None:
    """One-line error when source rows that share an image id hold different image features: the metric ranks an
    id's picture once, by its first row's features, so the others' would be dropped in silence."""
    if len(first) == len(inverse):
        return
    for start in range(0, len(inverse), 65_536):  # in blocks: a memmap is never read whole at once
        rows = np.arange(start, min(start + 65_536, len(inverse)))
        own, kept = np.asarray(src_img[rows], np.float32), np.asarray(src_img[first[inverse[rows]]], np.float32)
        differ = ~np.isclose(own, kept, rtol=1e-4, atol=1e-6).all(axis=1)
        if differ.any():
            row = int(rows[np.argmax(differ)])
            other = int(first[inverse[row]])
            raise BackRetrievalError(f"src_image_ids: rows {other} and {row} share the image id "
                                     f"{str(np.asarray(src_image_ids)[row])!r} but their image features differ; rows "
                                     f"sharing an id must be one picture (give each picture its own id)")
