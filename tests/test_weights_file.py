"""Weights files get the mode the umask allows, as every other file a run writes (safetensors writes 0600)."""
from __future__ import annotations

import os

import pytest
import torch

from globetrotter.weights_file import as_umask_allows, save_weights, umask_file_mode

pytestmark = pytest.mark.skipif(os.name != "posix", reason="permission bits are POSIX")


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_weights_file_gets_the_mode_of_an_ordinary_new_file(tmp_path, umask):
    before = os.umask(umask)
    try:
        assert umask_file_mode() == 0o666 & ~umask and os.umask(umask) == umask  # reading it leaves it as it was
        path = save_weights({"w": torch.zeros(3)}, tmp_path / "w.safetensors")
        (tmp_path / "config.yaml").write_text("x: 1\n")
    finally:
        os.umask(before)
    assert path.stat().st_mode & 0o777 == (tmp_path / "config.yaml").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_folder_s_weights_files_are_set_and_nothing_else(tmp_path):
    for name in ("a.safetensors", "b.safetensors", "notes.txt"):
        (tmp_path / name).write_text("x")
        os.chmod(tmp_path / name, 0o600)
    as_umask_allows(tmp_path)
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == \
        {"a.safetensors": umask_file_mode(), "b.safetensors": umask_file_mode(), "notes.txt": 0o600}
