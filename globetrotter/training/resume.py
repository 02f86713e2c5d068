"""What a resumed run needs besides accelerate's state: the data stream's position, per-step seeds, and the checks
that a run folder holds one run only (one run at a time holds its lock, a fresh run refuses a used folder, a resume
a changed config)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from backretrieval.errors import given
from data_prep.out_folder import keep_lock_from_children, remove_empty_folders

from ..config import TrainConfig
from ..config_io import from_dict, read_yaml, to_dict
from ..data.stream import StreamPosition, derive_seed
from ..errors import UserError
from . import checkpoint as ckpt

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # no flock on this platform (Windows): runs are not locked
    fcntl = None

# keys that say how a run is carried out, not what it learns: a resume may change them
RUN_KEYS = frozenset({"steps", "threads", "compile", "log_every", "checkpoint_every", "keep_checkpoints",
                      "data.workers", "val.every", "output_dir", "run_name"})


LOCK = ".train.lock"
"""The file in a run folder that the running ``train.py`` holds locked (``flock``, released when it ends or dies)."""


@contextlib.contextmanager
def hold_run_folder(run_dir: Path, main: bool) -> Iterator[None]:
    """Hold ``run_dir``'s :data:`LOCK` for the run's life (main process only; the lock dies with the process, so none
    is ever stale): a second ``train.py`` into the folder is a one-line error before it writes anything. The folder
    is made here; a run that fails while it holds nothing but the lock takes it away again (a start that fails
    leaves no run folder). Readers (``eval.py``, ``globetrotter.load``) take no lock."""
    if not main or fcntl is None:
        yield
        return
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # the folders made here, deepest first
    lock_made = not (run_dir / LOCK).exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(run_dir / LOCK, "a")
    except OSError as err:  # one the early check could not foresee (a pseudo file system, say)
        raise UserError(f"output_dir/run_name: cannot create the run folder {run_dir} ({err.strerror})") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"{run_dir}: another training run is running in this run folder (it holds {LOCK}); "
                            f"wait for it to end, or choose another run_name") from None
        except OSError:  # a file system without locks (some network ones): the run goes on unlocked
            pass
        finished = False
        try:
            with keep_lock_from_children(handle.fileno()):  # data workers: a kill -9 frees the folder at once
                yield
            finished = True
        finally:
            if not finished:
                _take_away(run_dir, made, lock_made)
    finally:
        handle.close()


def _take_away(run_dir: Path, made: list[Path], lock_made: bool) -> None:
    """After a run that failed: the lock file when this run made it, and the folders it made (``made``, deepest
    first) where they are left empty."""
    if lock_made:
        (run_dir / LOCK).unlink(missing_ok=True)
    remove_empty_folders(made)


def refuse_used_folder(run_dir: Path, resumable: bool = True) -> None:
    """One-line error when ``run_dir`` already holds checkpoints: a fresh run there would mix two runs (its pruning
    could delete its own checkpoints while ``best/`` stayed the old run's). ``resumable``: whether the error may
    offer a resume (an adaptation is run again instead)."""
    root = ckpt.checkpoint_root(run_dir)
    held = sorted(p.name for p in root.glob("*") if p.is_dir() and (p / ckpt.STATE).is_file()) if root.is_dir() else []
    if held:
        remedy = (f"continue it with {given('resume', 'latest')}, or choose" if resumable
                  else "delete the folder to run it again, or choose")
        raise UserError(f"{run_dir}: already holds a run ({', '.join(held)}); {remedy} another run_name"
                        f"{' (or delete the folder)' if resumable else ''}")


OVERWRITTEN = ("config.yaml", "result.json")
"""The files a fresh run writes over in its folder (its checkpoints are refused apart, by :func:`refuse_used_folder`;
its TensorBoard events are added beside others)."""


def refuse_foreign_files(cfg: TrainConfig) -> None:
    """One-line error when a fresh run's folder holds a ``config.yaml`` or ``result.json`` that names no run of this
    folder (a user's files): the run would overwrite them. Other files of the folder are left alone, and a folder a run
    left before its first checkpoint (its own ``config.yaml``) is trained into, as before."""
    run_dir = cfg.run_dir
    foreign = [name for name in OVERWRITTEN if (run_dir / name).exists() and not _of_this_run(run_dir / name, run_dir)]
    if foreign:
        raise UserError(f"{run_dir}: holds files no run wrote ({', '.join(foreign)}); a run would overwrite them: move "
                        f"them away, or choose another run_name")


def _of_this_run(path: Path, run_dir: Path) -> bool:
    """Whether ``config.yaml`` or ``result.json`` in ``run_dir`` is a run's of that folder (by the folder it names);
    any other file a run writes: True."""
    import json

    try:
        if path.name == "config.yaml":
            saved = read_yaml(path)
            named = Path(str(saved.get("output_dir"))) / str(saved.get("run_name"))
        elif path.name == "result.json":
            named = Path(str(json.loads(path.read_text(encoding="utf-8")).get("run_dir")))
        else:
            return True
    except (UserError, OSError, ValueError, AttributeError):  # unreadable, or not a mapping
        return False
    return named.resolve() == run_dir.resolve()


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def refuse_changed_tokenizer(source: Path, tokenizer: Path) -> None:
    """One-line error when the tokenizer file a resumed run would load is not the one checkpoint ``source`` was
    trained with (its copy beside the checkpoint): the same text would map to other token ids."""
    saved = Path(source) / "tokenizer.json"
    if not saved.is_file() or not Path(tokenizer).is_file():
        return
    if saved.read_bytes() != Path(tokenizer).read_bytes():
        raise UserError(f"{tokenizer}: not the tokenizer {source.name} was trained with ({saved}); a resumed run keeps "
                        f"its tokenizer: put that file back, or start a new run")


def refuse_changed_config(source: Path, cfg: TrainConfig, skip: tuple[str, ...] = ()) -> None:
    """One-line error when ``cfg`` differs from the config checkpoint ``source`` was trained with in a key other than
    :data:`RUN_KEYS`: the resumed run would no longer be the run it continues. ``skip``: keys (and the keys under
    them) not compared, e.g. those the data completes, for a check of ``cfg`` as given, before any data is made."""
    shown = config_changes(Path(source) / "config.yaml", cfg, skip)
    if shown:
        raise UserError(f"{given('resume', source)}: the config differs from the checkpoint's ({shown}); resume with "
                        f"its config ({Path(source) / 'config.yaml'}), or start a new run_name")


def config_changes(saved_path: Path, cfg: TrainConfig, skip: tuple[str, ...] = ()) -> str | None:
    """How ``cfg`` differs from the config saved at ``saved_path`` in keys other than :data:`RUN_KEYS` and ``skip``
    (and the keys under them), as ``key: saved -> now`` for the first four (None when it does not, or when no config
    was saved there)."""
    if not saved_path.is_file():
        return None  # a checkpoint from before configs were saved beside it
    saved, now = _flat(read_yaml(saved_path)), _flat(to_dict(cfg))
    changed = sorted(k for k in saved.keys() | now.keys() if k not in RUN_KEYS and saved.get(k) != now.get(k)
                     and not any(k == s or k.startswith(f"{s}.") for s in skip))
    if not changed:
        return None
    more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed[:4]) + more


def keep_run_settings(cfg: TrainConfig, resume: str, given: dict, log: Callable[[str], None] = print) -> TrainConfig:
    """``cfg`` with each :data:`RUN_KEYS` setting that ``given`` (the mapping of an explicit ``--config`` file and the
    overrides) does not set taken from the config of the checkpoint ``resume`` names (``latest``: ``cfg``'s run
    folder's): ``--resume latest`` continues a run as it was started (``steps=60``, say), not as the default config
    file says. Said in one line when it differs from ``cfg``."""
    source = ckpt.to_resume(cfg.run_dir, resume)
    saved_path = source / "config.yaml"
    if not saved_path.is_file():
        return cfg  # a checkpoint from before configs were saved beside it
    saved, now, named = _flat(read_yaml(saved_path)), _flat(to_dict(cfg)), _flat(given)
    kept = {k: saved[k] for k in sorted(RUN_KEYS - {"output_dir", "run_name"})
            if k in saved and saved[k] != now.get(k) and not any(n == k or n.startswith(f"{k}.") for n in named)}
    if not kept:
        return cfg
    log(f"resume: the run's own {', '.join(f'{k}={v}' for k, v in kept.items())} ({saved_path}; set them to change "
        f"them)")
    data = to_dict(cfg)
    for key, value in kept.items():
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    return from_dict(type(cfg), data, where=str(saved_path))


def newly_ignored(source: Path, cfg: TrainConfig) -> set[str]:
    """The keys ``cfg`` ignores that the config saved with checkpoint ``source`` did not: those a resume's changed
    :data:`RUN_KEYS` make ignored (``val.every=0``: every ``val.select_*``), the only ones its start has not warned
    about (:func:`~globetrotter.config_checks.ignored_keys`; none for a checkpoint saved without its config)."""
    from ..config_checks import ignored_keys

    saved_path = Path(source) / "config.yaml"
    if not saved_path.is_file():
        return set()
    saved = from_dict(type(cfg), read_yaml(saved_path), where=str(saved_path))
    return {item.key for item in ignored_keys(cfg)} - {item.key for item in ignored_keys(saved)}


def refuse_finished(source: Path, steps: int) -> None:
    """One-line error when checkpoint ``source`` is already at ``steps``: there is nothing left to train."""
    done = ckpt.read_state(source)["step"]
    if done >= steps:
        raise UserError(f"{given('resume', source)}: the run is already trained to step {done} of steps={steps}; raise steps "
                        "to train on")


def mask_seed(seed: int, rank: int, step: int) -> int:
    """Seed of the cloze masks of ``step`` on process ``rank``: a pure function, so nothing to restore."""
    return derive_seed(seed, 7919, rank, step)


def resume_position(source: Path, rank: int, workers: int, log: Callable[[str], None] = print,
                    processes: int = 1) -> StreamPosition | None:
    """The data stream position process ``rank`` (of ``processes``) saved in checkpoint ``source``.

    None (and one logged line) when it cannot be continued exactly: a checkpoint written
    before positions were saved, or by a run with another number of processes or data workers
    (every process's stream restarts then: the saved positions divide the data among other processes).
    """
    count = ckpt.saved_stream_count(source)
    if count and count != processes:
        log(f"{source}: data streams saved by {count} process(es), {processes} now; every process's data stream "
            f"restarts with a fresh seed, so this resume is not exact")
        return None
    saved = ckpt.read_stream_position(source, rank)
    if saved is None:
        log(f"{source}: no data stream position for process {rank} (older checkpoint, or more processes now); "
            f"the data stream restarts with a fresh seed, so this resume is not exact")
        return None
    if saved["workers"] != max(1, workers):
        log(f"{source}: data stream saved with {saved['workers']} data workers, data.workers={workers} now; "
            f"the data stream restarts with a fresh seed, so this resume is not exact")
        return None
    return StreamPosition(**saved)
