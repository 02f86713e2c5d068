"""Checkpoints: written atomically, found again by ``latest``/``best``.

A checkpoint folder holds what ``accelerate.Accelerator.save_state`` writes (safetensors
weights, optimizer, scheduler, RNG states of every process) plus ``config.yaml``,
``tokenizer.json``, ``trainer_state.json`` (step, metrics) and one ``data_stream_<rank>.json``
per process (the data stream's position, :class:`~globetrotter.data.stream.StreamPosition`).
It is written to a temporary folder and renamed into place, so a killed run never leaves a
half checkpoint; ``latest`` is a one-line file naming the newest complete checkpoint. A write
that fails (disk full, permission denied) leaves the previous checkpoints and ``latest`` as
they were, removes the partial folder, and the run goes on (:func:`write`).

Tied weights: the cloze decoder is tied to the token embeddings (one tensor, two names). Safetensors
stores a tensor once, so the weights file holds it under its first name only
(``text.token_embedding.weight``): :func:`save_without_tied_aliases` drops the alias from the state dict
before Accelerate writes it (Accelerate would otherwise drop it itself, with a warning at every
checkpoint), and loading fills both names, since the model ties them when it is built
(:func:`tied_aliases` tells the loader which names to expect missing).
"""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import torch
from safetensors import SafetensorError

from backretrieval.errors import given, said
from backretrieval.records import json_text

from ..errors import UserError, error_line
from ..shell import program_name
from ..weights_file import as_umask_allows

if TYPE_CHECKING:
    from accelerate import Accelerator

LATEST = "latest"
STATE = "trainer_state.json"
PUBLISHING = "best.old"
"""Where :func:`publish` keeps the previous ``best/`` while it renames the new one into place: a run stopped between
the two renames leaves only this (:func:`resolve` reads it, :func:`restore_best` puts it back)."""
DATA_STREAM = "data_stream_{rank}.json"


def checkpoint_root(run_dir: str | Path) -> Path:
    """The folder of a run's checkpoints: ``run_dir/checkpoints``."""
    return Path(run_dir) / "checkpoints"


def step_name(step: int) -> str:
    """The folder name of the checkpoint of ``step``: ``step-`` and the step in eight digits."""
    return f"step-{step:08d}"


def publish(tmp_dir: Path, final_dir: Path) -> None:
    """Move a complete checkpoint folder into place, replacing an older one of the same name."""
    trash = final_dir.with_name(final_dir.name + ".old")
    if trash.exists():
        shutil.rmtree(trash)
    if final_dir.exists():
        os.replace(final_dir, trash)
    try:
        os.replace(tmp_dir, final_dir)
    except OSError:
        if trash.exists() and not final_dir.exists():
            os.replace(trash, final_dir)  # put the older one back
        raise
    shutil.rmtree(trash, ignore_errors=True)


def mark_latest(root: Path, name: str) -> None:
    """Point ``root/latest`` at checkpoint ``name``, atomically (written beside it, then renamed into place)."""
    tmp = root / (LATEST + ".tmp")
    tmp.write_text(name + "\n")
    os.replace(tmp, root / LATEST)


def prune(root: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest step checkpoints (``best`` is never touched)."""
    steps = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith((".tmp", ".old")))
    for old in steps[: max(0, len(steps) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def resolve(path: str | Path, prefer_best: bool = True) -> Path:
    """A checkpoint folder from a run folder, a checkpoints folder, a checkpoint itself, or the ``latest`` pointer
    file (the checkpoint it names).

    From a run folder: ``best`` when it exists and ``prefer_best``, else ``latest``.
    """
    path = Path(path)
    if (path / STATE).is_file():
        return path
    if path.name == LATEST and path.is_file():
        return resolve(path.parent, prefer_best=False)
    for root in (path / "checkpoints", path):
        if prefer_best and (root / "best" / STATE).is_file():
            return root / "best"
        if prefer_best and not (root / "best").exists() and (root / PUBLISHING / STATE).is_file():
            return root / PUBLISHING  # a publish of best/ stopped between its renames
        if (root / LATEST).is_file():
            target = root / _read_pointer(root / LATEST)
            if (target / STATE).is_file():
                return target
    if path.is_file():  # model.safetensors, config.yaml: said to hold no checkpoint, as a folder without one
        try:
            resolve(path.parent, prefer_best)
            hint = f"; give the folder it is in, {path.parent}"
        except UserError:
            hint = ""
        raise UserError(f"{path}: a file, not a folder (expected a run folder, its checkpoints/, or a checkpoint "
                        f"folder){hint}")
    if _left_before_first_checkpoint(path):
        raise UserError(f"{path}: no checkpoint found ({_STOPPED_EARLY}: nothing to load); to train it again, give "
                        f"the {program_name('train')} command that started it, without --resume")
    raise UserError(f"{path}: no checkpoint found (expected a run folder, its checkpoints/, or a checkpoint with {STATE})")


_STOPPED_EARLY = "a run there stopped before its first checkpoint"
"""What a run folder without a checkpoint is said to be, to a reader (:func:`resolve`) and to ``--resume latest``
(:func:`furthest`)."""


def _left_before_first_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a run folder that a run left before its first checkpoint: its ``config.yaml`` (and
    TensorBoard logs), and nothing of a checkpoint: no ``latest`` pointer, nothing in ``checkpoints/``, and not the
    ``trainer_state.json`` or ``tokenizer.json`` that a checkpoint folder holds beside its ``config.yaml`` (one
    without its state is incomplete, not a run that stopped early)."""
    root, of_a_checkpoint = checkpoint_root(path), (LATEST, STATE, "tokenizer.json")
    return ((path / "config.yaml").is_file() and not any((path / name).exists() for name in of_a_checkpoint)
            and not (root.is_dir() and any(root.iterdir())))


def _read_pointer(pointer: Path) -> str:
    """The checkpoint name the ``latest`` pointer file holds; a one-line error when it is not such a file."""
    try:
        raw = pointer.read_bytes()
    except OSError as err:
        raise UserError(f"{pointer}: cannot read the checkpoint pointer ({err.strerror or err})") from None
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise UserError(f"{pointer}: not a checkpoint pointer (not UTF-8 text, byte {err.start}); it should hold the "
                        f"name of a checkpoint folder in {pointer.parent} (such as step-00000005): write that name "
                        "into it, or give the checkpoint folder itself") from None


def restore_best(run_dir: str | Path, log: Callable[[str], None] = print) -> None:
    """Put ``best/`` back from :data:`PUBLISHING` when a run was stopped between the two renames of :func:`publish`
    (``best/`` missing); said in one line. For the run that holds the folder (a resume), not for readers."""
    root = checkpoint_root(run_dir)
    if not (root / "best").exists() and (root / PUBLISHING / STATE).is_file():
        os.replace(root / PUBLISHING, root / "best")
        log(f"{root / 'best'}: put back from {PUBLISHING} (a run was stopped while it replaced best/)")


def furthest(run_dir: str | Path) -> Path:
    """The checkpoint of a run that got furthest, for ``--resume latest``: the one ``latest`` names, or ``best/``
    when it holds a later step (a validation between step checkpoints: a run killed before its first step
    checkpoint has only ``best/``); a one-line error when the run has neither (one that says what to do when the
    folder holds no ``latest`` pointer: a run that stopped before its first checkpoint, or none ran there)."""
    held = [path for path in (_latest_or_none(run_dir), checkpoint_root(run_dir) / "best") if path is not None
            and (path / STATE).is_file()]
    if not held:
        if any((root / LATEST).is_file() for root in (checkpoint_root(run_dir), Path(run_dir))):
            return resolve(run_dir, prefer_best=False)  # its one-line error: a damaged pointer, say
        raise UserError(f"{run_dir}: no checkpoint found to resume ({_STOPPED_EARLY}, or none ran there: check "
                        f"output_dir/run_name); to run it again, {said('give the same command', 'call train')} "
                        f"without {given('resume', 'latest')}")
    return max(held, key=lambda path: read_state(path).get("step", 0))  # a tie: latest's


def to_resume(run_dir: str | Path, resume: str | Path) -> Path:
    """The checkpoint ``--resume`` names: ``latest`` is the run folder's :func:`furthest`, anything else a run folder's
    latest or a checkpoint folder itself (:func:`resolve`)."""
    return furthest(run_dir) if str(resume) == "latest" else resolve(resume, prefer_best=False)


def _latest_or_none(run_dir: str | Path) -> Path | None:
    try:
        return resolve(run_dir, prefer_best=False)
    except UserError:
        return None


def saved_steps(run_dir: str | Path) -> dict[str, int | None]:
    """The steps of the checkpoints a run folder holds: ``{"latest": ..., "best": ...}`` (None where there is none)."""
    latest, best = _latest_or_none(run_dir), checkpoint_root(run_dir) / "best"
    return {"latest": read_state(latest).get("step") if latest is not None else None,
            "best": read_state(best).get("step") if (best / STATE).is_file() else None}


def read_state(ckpt: Path) -> dict:
    """A checkpoint's ``trainer_state.json``; one-line error when it is missing or not a JSON object."""
    path = Path(ckpt) / STATE
    damaged = (f"the checkpoint is damaged: use another checkpoint of the run (best/ or a step-* folder in "
               f"{path.parent.parent}) or train again")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a trainer state (not UTF-8 text, byte {err.start}); {damaged}") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: cannot read the checkpoint's state (not JSON: {err.msg}); "
                        f"{damaged}") from None
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot read the checkpoint's state ({type(err).__name__}: {err}); the checkpoint "
                        f"is incomplete") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(state).__name__}; the checkpoint is incomplete")
    return state


def tied_aliases(tensors: torch.nn.Module | Mapping[str, object]) -> dict[str, str]:
    """``{alias: first name}`` of the tensors a module (or a state dict) holds under more than one name: the
    same storage, offset, shape and strides (a tie, such as the cloze decoder's to the token embeddings)."""
    if isinstance(tensors, torch.nn.Module):
        tensors = tensors.state_dict(keep_vars=True)
    first: dict[tuple, str] = {}
    aliases = {}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
               tensor.device)
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def save_without_tied_aliases(accelerator: Accelerator) -> None:
    """Register an Accelerate save hook that stores each tied tensor once, under its first name, so that
    ``save_state`` has no shared tensor to remove (and warn about) at every checkpoint."""

    def drop_aliases(models: list[torch.nn.Module], weights: list[dict[str, torch.Tensor]], output_dir: str) -> None:
        for state in weights:
            for alias in tied_aliases(state):
                del state[alias]

    accelerator.register_save_state_pre_hook(drop_aliases)


WRITER_FAILURE = re.compile(r"PytorchStreamWriter|inline_container|unexpected pos|file write failed")
"""How torch's zip writer says a write failed (a full disk: ``[enforce fail at inline_container.cc] . unexpected pos``):
a ``RuntimeError``, not the ``OSError`` of Python's own writes."""


def save_state(accelerator: Accelerator, folder: Path) -> None:
    """``accelerator.save_state`` into ``folder``, its write failures raised as ``OSError`` (a full disk: torch's zip
    writer raises ``RuntimeError``, safetensors ``SafetensorError`` "File too large"); other errors, bugs, as they are."""
    try:
        accelerator.save_state(str(folder), safe_serialization=True)
    except (RuntimeError, SafetensorError) as err:
        if isinstance(err, RuntimeError) and not WRITER_FAILURE.search(str(err)):
            raise
        raise OSError(error_line(err)) from err


def _everywhere(accelerator: Accelerator, ok: bool) -> bool:
    """True when ``ok`` holds on every process (a collective: every process must call it)."""
    if accelerator.num_processes == 1:
        return ok
    flag = torch.tensor([float(ok)], device=accelerator.device)
    return accelerator.reduce(flag, reduction="sum").item() == accelerator.num_processes


def write(accelerator: Accelerator, root: Path, name: str, fill: Callable[[Path, bool], None], *, latest: bool, keep: int,
          log: Callable[[str], None] = print) -> bool:
    """Write checkpoint ``root/name`` from every process; True when it is in place.

    ``accelerator.save_state`` and ``fill(folder, is_main)`` write into ``name.tmp``, which the
    main process renames into place (then points ``latest`` at it and prunes to ``keep``
    when ``latest``). An ``OSError`` on any process (disk full, permission denied; torch's and safetensors' write
    failures too, :func:`save_state`) leaves the
    previous checkpoints and ``latest`` untouched, removes ``name.tmp``, logs one line and
    returns False: the run goes on and the next checkpoint tries again.
    """
    tmp = root / (name + ".tmp")
    error: OSError | None = None
    try:
        save_state(accelerator, tmp)
        as_umask_allows(tmp)  # safetensors writes its files 0600 (weights_file)
        fill(tmp, accelerator.is_main_process)
    except OSError as err:
        error = err
    ok = _everywhere(accelerator, error is None)
    if ok and accelerator.is_main_process:
        try:
            publish(tmp, root / name)
            if latest:
                mark_latest(root, name)
                prune(root, keep)
        except OSError as err:
            error = err
    ok = _everywhere(accelerator, ok and error is None)
    if not ok and accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        (root / (LATEST + ".tmp")).unlink(missing_ok=True)
        pointer = root / LATEST
        kept = pointer.read_text().strip() if pointer.is_file() else "none yet"
        why = str(error) if error else "failed on another process"
        log(f"checkpoint {name} not written ({why}); latest checkpoint kept: {kept}; training goes on, "
            f"the next checkpoint tries again")
    accelerator.wait_for_everyone()
    return ok


LOAD_ERRORS = (OSError, RuntimeError, SafetensorError, EOFError, ValueError, pickle.UnpicklingError)
"""What loading a damaged checkpoint file raises: truncated safetensors (``SafetensorError``), torch's zip reader
(``RuntimeError: PytorchStreamReader failed ...``), a truncated pickle (``EOFError``, ``UnpicklingError``), bad JSON
(``ValueError``)."""


def unreadable(path: Path) -> str | None:
    """Why checkpoint file ``path`` cannot be read as Accelerate (or :func:`read_state`) reads it; None when it can."""
    from accelerate.utils.other import load
    from safetensors import safe_open

    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), "pt") as weights:
                for key in weights.keys():
                    weights.get_slice(key)
        elif path.suffix in (".bin", ".pkl"):
            load(path, map_location="cpu")
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
    except LOAD_ERRORS as err:
        return error_line(err)
    return None


def damaged_file(ckpt: Path) -> tuple[Path, str] | None:
    """The first file of checkpoint folder ``ckpt`` that cannot be read, and why (None: every one reads)."""
    for path in sorted(Path(ckpt).iterdir()):
        why = unreadable(path) if path.is_file() else None
        if why:
            return path, why
    return None


def write_stream_position(folder: Path, rank: int, position: dict) -> None:
    """Write process ``rank``'s data stream ``position`` (:meth:`StreamPosition.to_dict`) into checkpoint ``folder``."""
    (Path(folder) / DATA_STREAM.format(rank=rank)).write_text(json_text(position))


def saved_stream_count(ckpt: Path) -> int:
    """How many processes saved a data stream position in ``ckpt`` (0: an older checkpoint without one)."""
    return len(list(Path(ckpt).glob(DATA_STREAM.format(rank="*"))))


def read_stream_position(ckpt: Path, rank: int) -> dict | None:
    """The data stream position process ``rank`` saved in ``ckpt`` (None: an older checkpoint without one)."""
    path = Path(ckpt) / DATA_STREAM.format(rank=rank)
    if not path.is_file():
        return None
    damaged = "the checkpoint is damaged: resume from another one of the run's checkpoints"
    try:
        position = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # empty or cut short
        raise UserError(f"{path}: cannot read the data stream position ({error_line(err)}); {damaged}") from None
    fields = {"workers": int, "cursors": list, "bad": list, "bad_shard": str}  # bad, bad_shard: default when absent
    if not isinstance(position, dict) or not {"workers", "cursors"} <= set(position) <= set(fields) or not all(
            isinstance(v, fields[k]) and not isinstance(v, bool) for k, v in position.items()) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in position["cursors"]):
        raise UserError(f"{path}: {json_text(position)[:60]} is no data stream position (expected an object of "
                        f"workers, cursors: a list of integers, bad, bad_shard); {damaged}")
    return position


def weights_sha256(checkpoint: str | None) -> str | None:
    """The sha256 of a checkpoint folder's weights file (what a record was made with: a run may save another
    ``best/`` under the same path later); ``None`` for a baseline or a folder without one. Read once per file
    version: a command asks before loading the model and again for its record."""
    weights = Path(checkpoint) / "model.safetensors" if checkpoint else None
    if weights is None or not weights.is_file():
        return None
    stat = weights.stat()
    return _file_sha256(str(weights.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _file_sha256(path: str, _mtime_ns: int, _size: int) -> str:
    from data_prep.checksums import file_sha256

    return file_sha256(Path(path))
