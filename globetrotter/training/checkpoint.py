"""Checkpoints: written atomically, found again by ``latest``/``best``.

A checkpoint folder holds what ``accelerate.Accelerator.save_state`` writes (safetensors
weights, optimizer, scheduler, RNG states of every process) plus ``config.yaml``,
``tokenizer.json`` and ``trainer_state.json`` (step, metrics). It is written to a
temporary folder and renamed into place, so a killed run never leaves a half checkpoint;
``latest`` is a one-line file naming the newest complete checkpoint.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import UserError

LATEST = "latest"
STATE = "trainer_state.json"


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def publish(tmp_dir: Path, final_dir: Path) -> None:
    """Move a complete checkpoint folder into place, replacing an older one of the same name."""
    trash = final_dir.with_name(final_dir.name + ".old")
    if trash.exists():
        shutil.rmtree(trash)
    if final_dir.exists():
        os.replace(final_dir, trash)
    os.replace(tmp_dir, final_dir)
    if trash.exists():
        shutil.rmtree(trash)


def mark_latest(root: Path, name: str) -> None:
    tmp = root / (LATEST + ".tmp")
    tmp.write_text(name + "\n")
    os.replace(tmp, root / LATEST)


def prune(root: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest step checkpoints (``best`` is never touched)."""
    steps = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith((".tmp", ".old")))
    for old in steps[: max(0, len(steps) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def resolve(path: str | Path, prefer_best: bool = True) -> Path:
    """A checkpoint folder from a run folder, a checkpoints folder, or a checkpoint itself.

    From a run folder: ``best`` when it exists and ``prefer_best``, else ``latest``.
    """
    path = Path(path)
    if (path / STATE).is_file():
        return path
    for root in (path / "checkpoints", path):
        if prefer_best and (root / "best" / STATE).is_file():
            return root / "best"
        if (root / LATEST).is_file():
            target = root / (root / LATEST).read_text().strip()
            if (target / STATE).is_file():
                return target
    raise UserError(f"{path}: no checkpoint found (expected a run folder, its checkpoints/, or a checkpoint with {STATE})")


def read_state(ckpt: Path) -> dict:
    return json.loads((Path(ckpt) / STATE).read_text())
