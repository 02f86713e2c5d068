"""Writing a feature-cache folder: the guard that replaces only a cache, and the swap of a finished one into place."""
from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from data_prep.out_folder import lock_out_folder

from ..errors import UserError
from .feature_cache import CACHE_FILES, SPEC


def _listing(names: list[str], limit: int = 4) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _entries(folder: Path) -> list[str]:
    """The names in ``folder``, sorted, a folder's with a trailing ``/``."""
    return sorted(e.name + ("/" if e.is_dir() else "") for e in folder.iterdir())


def check_cache_folder(out_dir: str | Path, label: str = "") -> None:
    """Refuse (one-line :class:`UserError` naming the folder and what it holds) to write a cache to ``out_dir``
    unless it is absent, an empty folder, or a feature cache: ``cache.json`` and nothing beyond a cache's own files
    (:data:`CACHE_FILES`). The guard of every writer, ``--overwrite`` or not: a split or a dataset root is never
    replaced. ``label`` (``--out``, ``data.features``) names where the folder was given."""
    out_dir = Path(out_dir)
    where = f"{label} {out_dir}" if label else str(out_dir)
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if not out_dir.is_dir():
        raise UserError(f"{where}: is not a folder, so not a feature cache to replace; choose another folder")
    names = _entries(out_dir)
    others = [n for n in names if n not in CACHE_FILES]
    if not names or ((out_dir / SPEC).is_file() and not others):
        return
    what = (f"a feature cache and other files too ({_listing(others)})" if (out_dir / SPEC).is_file()
            else f"no feature cache ({SPEC} missing) but {_listing(names)}")
    raise UserError(f"{where}: holds {what}; a cache is written only to a new or empty folder or over a feature "
                    f"cache, never over other files (--overwrite or not): choose another folder")


def start_cache_write(out_dir: str | Path, label: str = "") -> Path:
    """Check ``out_dir`` (:func:`check_cache_folder`) and make the empty ``<out_dir>.tmp`` folder a cache is written
    in (a leftover of an interrupted write is cleared; a folder of that name holding anything else is refused)."""
    out_dir = Path(out_dir)
    check_cache_folder(out_dir, label)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    clear_stale_write(out_dir)
    tmp.mkdir(parents=True)
    return tmp


def clear_stale_write(out_dir: str | Path) -> Path | None:
    """Remove ``<out_dir>.tmp`` left by an interrupted (killed) cache write, and return it (``None`` when there is
    none); a folder of that name holding anything else than cache files is refused (it is never deleted)."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if not (tmp.exists() or tmp.is_symlink()):
        return None
    names = _entries(tmp) if tmp.is_dir() and not tmp.is_symlink() else None
    if names is None or any(n not in CACHE_FILES for n in names):
        raise UserError(f"{tmp}: the temporary folder of a cache write, but it holds "
                        f"{_listing(names) if names else 'something other than a folder'}, not a leftover of "
                        f"one; move it away (it is never deleted) or choose another folder")
    shutil.rmtree(tmp)
    return tmp


def finish_cache_write(tmp: Path, out_dir: str | Path, label: str = "") -> None:
    """Swap the finished cache ``tmp`` in as ``out_dir``: the old cache (checked again) is renamed aside, ``tmp``
    renamed into place (the old one renamed back should that fail), then the old one deleted."""
    out_dir = Path(out_dir)
    check_cache_folder(out_dir, label)
    if not out_dir.exists() and not out_dir.is_symlink():
        os.replace(tmp, out_dir)
        return
    aside = out_dir.with_name(f"{out_dir.name}.old-{uuid.uuid4().hex[:12]}")
    os.rename(out_dir, aside)
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        os.rename(aside, out_dir)
        raise
    if aside.is_symlink():
        aside.unlink()  # a link to a cache: the link goes, whatever it pointed at stays
    else:
        shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def cache_write(out_dir: str | Path, label: str = "") -> Iterator[Path]:
    """Write a cache to ``out_dir`` as one writer at a time: hold its lock (:func:`data_prep.out_folder.lock_out_folder`:
    a second writer is refused in one line naming ``label`` and the folder, instead of deleting this one's ``.tmp``
    folder as a leftover), yield the empty ``.tmp`` folder (:func:`start_cache_write`), swap it in when the block ends
    (:func:`finish_cache_write`), remove it when the block raises."""
    with lock_out_folder(out_dir, label):
        tmp = start_cache_write(out_dir, label)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finish_cache_write(tmp, out_dir, label)
