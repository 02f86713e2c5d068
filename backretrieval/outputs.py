"""Writing outputs: paths checked before the work, ``.npy``, hits and JSON files, an earlier run's leftovers."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .errors import BackRetrievalError
from .files import PathLike
from .records import dump_json, json_text


def write_file(path: PathLike, write: Callable[[Path], object], what: str) -> Path:
    """``write(path)`` after creating its folder; an OS error becomes a one-line user error."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as err:
        raise BackRetrievalError(f"{path}: cannot write {what} ({err.strerror or err})") from None
    return path


def _unwritable_folder(folder: Path) -> str | None:
    """Why files could not be created in ``folder`` (or in the folders that would be made for it), else None."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def writable_file(path: PathLike, what: str) -> Path:
    """Refuse an output file that could not be written (a folder, a file in the way of its folder, a folder not
    writable) without creating anything: checked before the work, so a refusal leaves no other output behind."""
    path = Path(path)
    why = "is a directory" if path.is_dir() else _unwritable_folder(path.parent)
    if why is None:
        return path
    raise BackRetrievalError(f"{path}: cannot write {what} ({why}); expected a file path to write")


def writable_dir(path: PathLike, what: str) -> Path:
    """Refuse an output folder that could not be created or written into (a file of that name, or in the way of
    its parents, a folder not writable) without creating anything: :func:`writable_file` for folders."""
    path = Path(path)
    why = "a file of that name exists" if path.exists() and not path.is_dir() else _unwritable_folder(path)
    if why is None:
        return path
    raise BackRetrievalError(f"{path}: cannot create {what} ({why}); expected a folder to write into")


def npy_path(path: PathLike) -> Path:
    """Where ``np.save(path)`` writes: ``path``, with ``.npy`` appended unless it ends so."""
    path = Path(path)
    return path if path.suffix == ".npy" else path.with_name(path.name + ".npy")


def save_npy(path: PathLike, array: np.ndarray, what: str) -> Path:
    """Write ``array`` to :func:`npy_path` of ``path`` (returned: the path written); one-line errors."""
    if Path(path).is_dir():
        raise BackRetrievalError(f"{path}: cannot write {what} (is a directory)")
    path = npy_path(path)

    def write(p: Path) -> None:
        with open(p, "wb") as handle:  # a handle: np.save appends no second suffix
            np.save(handle, array)

    return write_file(path, write, what)


def hits_ks_path(path: PathLike) -> Path:
    """The record of a hits file's K beside it: ``HITS.npy.ks.json``, a JSON list of the K of each column (as
    ``PATH.texts.json`` lists the text of each row of an embedding file)."""
    return Path(str(path) + ".ks.json")


def save_hits(path: PathLike, hits: np.ndarray, ks: Sequence[int], what: str) -> Path:
    """Write ``(queries, len(ks))`` hits to :func:`npy_path` of ``path`` and their K to :func:`hits_ks_path` of it
    (returned: the ``.npy`` written); one-line errors."""
    path = save_npy(path, hits, what)
    write_file(hits_ks_path(path), lambda p: p.write_text(json_text([int(k) for k in ks]) + "\n",
                                                          encoding="utf-8"), f"the K of {what}")
    return path


def recorded_ks(path: PathLike, columns: int) -> tuple[int, ...] | None:
    """The K of each column of the hits file ``path`` (:func:`save_hits`), or None when it has no record (a file
    written before hits files recorded them); one-line errors for a record that does not fit."""
    record = hits_ks_path(path)
    if not record.is_file():
        return None
    try:
        ks = json.loads(record.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # ValueError: bad JSON or not UTF-8
        raise BackRetrievalError(f"{record}: not a readable JSON list of K ({err})") from None
    if not isinstance(ks, list) or not ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1
                                                     for k in ks):
        raise BackRetrievalError(f"{record}: expected a JSON list of positive integers (the K of each hit column)")
    if len(ks) != columns:
        raise BackRetrievalError(f"{record}: lists {len(ks)} K but {path} has {columns} hit columns")
    return tuple(ks)


def make_dir(path: PathLike, what: str) -> Path:
    """Create the folder ``path`` (and its parents); an OS error becomes a one-line user error."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BackRetrievalError(f"{path}: cannot create {what} ({err.strerror or err})") from None
    return path


def remove_earlier_outputs(folder: PathLike, patterns: Sequence[str], written: Sequence[PathLike]) -> list[Path]:
    """Remove the files of ``folder`` named as a command names its outputs (``patterns``, e.g. ``heatmap_*.png``)
    that this run did not write (``written``): an earlier run's plots of other models or pairs, which would stand
    beside a record that no longer holds them. Every other file stays. Returns the paths removed."""
    keep = {Path(p).resolve() for p in written}
    stale = sorted({p for pattern in patterns for p in Path(folder).glob(pattern)
                    if p.is_file() and p.resolve() not in keep})
    for path in stale:
        try:
            path.unlink()
        except OSError as err:
            raise BackRetrievalError(f"{path}: cannot remove this earlier output ({err.strerror or err})") from None
    return stale


def write_json(record: dict, path: PathLike, what: str = "the JSON record") -> Path:
    """Write ``record`` as :func:`dump_json` text to ``path`` (its folder made) and return the path; an OS error is a
    one-line error naming ``what``."""
    text = dump_json(record)
    return write_file(path, lambda p: p.write_text(text + "\n", encoding="utf-8"), what)
