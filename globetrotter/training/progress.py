"""Where a run stands besides its weights (:class:`Progress`): written into its checkpoints (:class:`Checkpoints`)
and restored from one (:func:`restore_progress`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from accelerate import Accelerator
from tokenizers import Tokenizer

from backretrieval.errors import given
from backretrieval.records import json_text

from ..config import TrainConfig
from ..config_io import save_config
from ..errors import UserError, error_line
from ..threads import ThreadChoice
from ..tokenizer import copy_tokenizer
from ..data.stream import StreamPosition
from . import checkpoint as ckpt
from .logs import Log
from .tokenizer_file import tokenizer_path
from .resume import resume_position
from .selection import load_hits, save_hits


@dataclass
class Progress:
    """Where the run stands besides its weights: the next step, the best checkpoint (and its selection hits,
    main process), the bad samples met, and the data stream's position and seed."""

    position: StreamPosition
    loader_seed: int
    step: int = 0
    best: dict | None = None
    best_hits: np.ndarray | None = None
    bad_samples: int = 0


class Checkpoints:
    """Saves the run's checkpoints: ``step-N/`` (then ``latest`` points at it, and old ones are pruned to
    ``keep_checkpoints``) or ``best/``, each with its config, tokenizer, state (step, best, metrics, bad samples,
    threads), every process's stream position and, in ``best/``, the selection hits."""

    def __init__(self, cfg: TrainConfig, accelerator: Accelerator, tokenizer: Tokenizer, progress: Progress,
                 threads: ThreadChoice, log: Log) -> None:
        self.cfg, self.accelerator, self.progress, self.threads, self.log = cfg, accelerator, progress, threads, log
        self.root = ckpt.checkpoint_root(cfg.run_dir)
        self.tokenizer_file = tokenizer_path(cfg)

    def save(self, step: int, metrics: dict, as_best: bool = False, hits: np.ndarray | None = None) -> bool:
        """Write the checkpoint of ``step`` (``best/`` with ``as_best``); False when it could not be written."""
        progress, rank = self.progress, self.accelerator.process_index

        def fill(folder: Path, is_main: bool) -> None:
            ckpt.write_stream_position(folder, rank, progress.position.to_dict())
            if is_main:
                save_hits(folder, hits if as_best else None)
                save_config(self.cfg, folder / "config.yaml")
                copy_tokenizer(self.tokenizer_file, folder / "tokenizer.json")
                state = {"step": step, "best": progress.best, "metrics": metrics, "bad_samples": progress.bad_samples,
                         "threads": self.threads.threads}
                (folder / ckpt.STATE).write_text(json_text(state, indent=2))

        name = "best" if as_best else ckpt.step_name(step)
        return ckpt.write(self.accelerator, self.root, name, fill, latest=not as_best, keep=self.cfg.keep_checkpoints,
                          log=self.log)


def restore_progress(cfg: TrainConfig, accelerator: Accelerator, source: Path | None, log: Log) -> Progress:
    """A fresh run's progress, or the checkpoint's: its state (weights, optimizer, scheduler, RNG) loaded, its step,
    best and data-stream position; a stream that cannot continue gets a fresh seed, different from the first."""
    progress = Progress(StreamPosition(max(1, cfg.data.workers)), loader_seed=cfg.seed)
    if source is None:
        return progress
    _load_state(accelerator, source, log)
    state = ckpt.read_state(source)
    progress.step, progress.best = state["step"], state.get("best")
    log(f"resumed from {source} at step {progress.step}")
    if progress.best and source.resolve().parent != ckpt.checkpoint_root(cfg.run_dir).resolve():
        log(f"another run's checkpoint: its best (step {progress.best.get('step')}) stays in that run; this run's "
            f"best is chosen among its own validations")  # its best/ is not here: a best reported, none to load
        progress.best = None
    if accelerator.is_main_process:
        progress.best_hits = load_hits(ckpt.checkpoint_root(cfg.run_dir) / "best", progress.best)
    saved = resume_position(source, accelerator.process_index, cfg.data.workers, log, accelerator.num_processes)
    if saved is None:
        progress.loader_seed = cfg.seed * 1_000_003 + progress.step
    else:
        progress.position = saved
    return progress


def _load_state(accelerator: Accelerator, source: Path, log: Log) -> None:
    """``accelerator.load_state`` of checkpoint ``source``; a damaged file is a one-line error naming it, and RNG
    states that cannot be read (Accelerate goes on without them, saying so at info level) are one logged line."""
    rng = source / f"random_states_{accelerator.process_index}.pkl"
    why = ckpt.unreadable(rng) if rng.is_file() else "missing"
    if why:
        log(f"{rng}: cannot restore the RNG states ({why}); the run goes on from other random numbers, so this "
            f"resume is not exact")
    try:
        accelerator.load_state(str(source))
    except ckpt.LOAD_ERRORS as err:
        damaged = ckpt.damaged_file(source)
        what = f"{damaged[0].name} is damaged ({damaged[1]})" if damaged else error_line(err)
        others = sorted(p.name for p in source.parent.glob("step-*") if p.is_dir() and p.name != source.name)
        remedy = (f"resume from another one of the run's checkpoints ({', '.join(others)}: "
                  f"{given('resume', source.parent / others[-1])})" if others
                  else "the run holds no other checkpoint to resume from")
        raise UserError(f"{given('resume', source)}: cannot load the checkpoint: {what}; {remedy}") from None
