"""Weights files (safetensors) readable as the user's umask allows.

safetensors >= 0.8 writes through a temporary file created with mode 0600 and renames it into place
(safetensors/safetensors#782), so a model another user (a serving process, a container) should load
would be readable by its owner only, unlike every other file a run writes. These helpers give such
files the mode an ordinary new file gets: ``0o666`` less the umask.
"""
from __future__ import annotations

import os
from pathlib import Path


def umask_file_mode() -> int:
    """The permission bits a new file gets under the process's umask."""
    mask = os.umask(0o077)  # read it (os.umask can only set), then put it back at once
    os.umask(mask)
    return 0o666 & ~mask


def as_umask_allows(*paths: str | Path) -> None:
    """Give each file in ``paths`` (a folder: its ``*.safetensors``) the mode of an ordinary new file."""
    mode = umask_file_mode()
    for path in map(Path, paths):
        for file in sorted(path.glob("*.safetensors")) if path.is_dir() else [path]:
            os.chmod(file, mode)


def save_weights(tensors: dict, path: str | Path) -> Path:
    """``safetensors.torch.save_file(tensors, path)`` with the file's mode as the umask allows."""
    from safetensors.torch import save_file

    save_file(tensors, str(path))
    as_umask_allows(path)
    return Path(path)
