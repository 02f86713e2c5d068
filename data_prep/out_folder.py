"""Writing a dataset folder (``--out``) safely: one writer at a time, and the new splits moved in once complete.

:func:`lock_out_folder` holds an exclusive ``fcntl.flock`` lock on ``.<name>.lock`` beside the folder for a
command's life, so that a second command writing the same folder (two ``synth`` runs, two conversions) is refused
in one line instead of mixing its shards with the first's or deleting its staging folder. The kernel releases the
lock when its process dies (no stale lock to clear by hand); where ``fcntl`` is missing (Windows) nothing is locked.
:func:`move_splits` moves the split folders a command wrote in a staging folder into place.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .errors import UserError

try:
    import fcntl
    _HAS_FLOCK = True
except ImportError:  # Windows: no flock
    _HAS_FLOCK = False

_LOCK_FDS: set[int] = set()
"""Descriptors of the locks this process holds, which a forked child gives up (:func:`keep_lock_from_children`)."""


def _drop_locks_in_child() -> None:
    # an flock belongs to the open file, which fork shares: a child (a data loader worker, a pool process) outliving
    # a killed parent would hold the lock on. Its copy is pointed at /dev/null (dup2 closes it; the number stays
    # valid, so a later close of it in the child touches nothing of the parent's).
    if not _LOCK_FDS:
        return
    null = os.open(os.devnull, os.O_RDONLY)
    for fd in _LOCK_FDS:
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)
    _LOCK_FDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_locks_in_child)


@contextmanager
def keep_lock_from_children(fd: int) -> Iterator[None]:
    """While the block runs, a child forked by this process gives up its copy of the locked descriptor ``fd``, so the
    lock ends with this process alone (a SIGKILLed run's data workers do not keep its folder locked)."""
    _LOCK_FDS.add(fd)
    try:
        yield
    finally:
        _LOCK_FDS.discard(fd)


def lock_path(out_dir: str | Path) -> Path:
    """The lock file of ``out_dir``: ``.<name>.lock`` beside it (its real path's, so that two spellings of one
    folder share it)."""
    target = Path(out_dir).resolve()
    return target.parent / f".{target.name}.lock"


@contextmanager
def lock_out_folder(out_dir: str | Path, flag: str = "--out",
                    wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of ``out_dir`` while the block runs; a one-line :class:`UserError` naming ``flag``
    and the folder when another process (or another open of the lock in this one) holds it, or, with ``wait``, a
    line passed to ``wait`` and a wait until the holder lets go. The lock file is removed on release, and the
    folders made for it are removed again when they are left empty. Where the lock file cannot be made (a read-only
    parent, a path under a file) the block runs unlocked, and the command meets the problem where it writes."""
    lock = lock_path(out_dir)
    made = [p for p in lock.parents if not p.exists()]  # deepest first
    what = f"{flag} {out_dir}" if flag else str(out_dir)
    fd = _acquire(lock, made, what, wait) if _HAS_FLOCK else None
    try:
        if fd is None:
            yield
        else:
            with keep_lock_from_children(fd):
                yield
    finally:
        if fd is not None:
            lock.unlink(missing_ok=True)  # while still held: a process that opened this file then opens the next
            os.close(fd)
        remove_empty_folders(made)


def _acquire(lock: Path, made: list[Path], what: str, wait: Callable[[str], None] | None) -> int | None:
    """The open descriptor of ``lock``, exclusively locked; None where no lock can be taken there. When another
    holds it: a one-line :class:`UserError` starting with ``what``, or with ``wait`` a line to it and a wait."""
    said = False
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if wait is None:
                    raise
                if not said:  # once, however many holders come and go
                    wait(f"{what}: another command is writing there now (it holds {lock}); waiting for it to finish")
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BlockingIOError:
            os.close(fd)
            remove_empty_folders(made)
            raise UserError(f"{what}: another command is writing there now (it holds {lock}); wait for it to finish, "
                            f"or give another folder") from None
        except OSError:  # a file system without flock: nothing is locked, so no lock file is left behind
            os.close(fd)
            lock.unlink(missing_ok=True)
            return None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder before us removed this file as it let go: lock the one now there


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first: the folders a command made) that is an empty folder; one already
    gone is passed over, and the first that holds something ends it (its parents hold it too)."""
    for folder in folders:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def move_splits(staging: Path, out_dir: Path) -> None:
    """Move each split folder written under ``staging`` into ``out_dir`` (files only: a split folder's other
    contents, such as a feature cache, stay)."""
    for folder in sorted(p for p in staging.iterdir() if p.is_dir()):
        dest = out_dir / folder.name
        dest.mkdir(exist_ok=True)
        for f in folder.iterdir():
            f.replace(dest / f.name)
