"""The ``--image-index`` file: image neighbour lists kept in an ``.npz`` with what they belong to, read back with
one-line errors, or built once and kept."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import BackRetrievalError, option
from .files import PathLike
from .image_index import DEFAULT_NEIGHBOURS, ImageNeighbours, image_neighbours
from .outputs import write_file

_FIELDS = ("ids", "scores", "n_sources", "dim", "fingerprint", "method")  # of the .npz


def image_neighbours_file(
    path: PathLike,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    n_neighbours: int = DEFAULT_NEIGHBOURS,
    *,
    src_image_ids: Sequence | None = None,
    method: str = "flat",
    seed: int = 0,
    progress: bool = False,
) -> tuple[ImageNeighbours, bool]:
    """Lists kept in a file: ``(lists, built)``, read from ``path`` when it exists, else built and written there.

    A new file holds ``max(DEFAULT_NEIGHBOURS, n_neighbours)`` neighbours per target image,
    built with ``method`` (:func:`image_neighbours`). Whether existing lists belong to these
    images is checked where they are used (:func:`check_image_neighbours`, naming the file). ``progress``: a bar
    over a big build.
    """
    path = Path(path)
    if path.exists():
        return load_image_neighbours(path), False
    lists = image_neighbours(src_img, tgt_img, max(DEFAULT_NEIGHBOURS, n_neighbours), src_image_ids=src_image_ids,
                             method=method, seed=seed, progress=progress)
    write_file(path, lambda p: save_image_neighbours(p, lists), option("image_index"))
    return replace(lists, origin=str(path)), True


def save_image_neighbours(path: str | Path, neighbours: ImageNeighbours) -> None:
    """Write the lists and what they belong to into ``path`` (``.npz``, the name kept as given)."""
    with open(path, "wb") as handle:
        np.savez(handle, ids=neighbours.ids, scores=neighbours.scores, n_sources=neighbours.n_sources,
                 dim=neighbours.dim, fingerprint=neighbours.fingerprint, method=neighbours.method)


def load_image_neighbours(path: str | Path) -> ImageNeighbours:
    """Lists written by :func:`save_image_neighbours`; one-line errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise BackRetrievalError(f"{path}: image neighbour file not found")
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError):  # EOFError: an empty file
        data = None
    if not isinstance(data, np.lib.npyio.NpzFile):
        empty = " (an empty file)" if path.stat().st_size == 0 else ""
        raise BackRetrievalError(f"{path}: not an image neighbour file{empty} (an .npz written by --image-index)")
    with data:
        missing = [key for key in _FIELDS if key not in data.files]
        if missing:
            raise BackRetrievalError(f"{path}: not an image neighbour file (no {', '.join(missing)} array)")
        fields = {key: data[key] for key in _FIELDS}
    ids, scores = fields["ids"], fields["scores"]
    if ids.ndim != 2 or scores.shape != ids.shape:
        raise BackRetrievalError(f"{path}: ids {ids.shape} and scores {scores.shape} must be one (Nt, C) shape")
    nb = ImageNeighbours(ids.astype(np.int64, copy=False), scores.astype(np.float32, copy=False),
                         int(fields["n_sources"]), int(fields["dim"]), str(fields["fingerprint"]),
                         str(fields["method"]))
    return replace(nb, origin=str(path))
