"""What the evaluation tasks share: resolving a model argument, reading a parallel sample of a split, the default
``log`` and whether progress bars show."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import models
from ..models import ModelLike
from ..sentence import ParallelSet, parallel_set
from .checks import require_positive_int


def log_to_stderr(message: str) -> None:
    """The tasks' default ``log``: each note a line on stderr."""
    print(message, file=sys.stderr)


def shows_progress(log: Callable[[str], None]) -> bool:
    """Whether a task logging to ``log`` shows its progress bars: only with the default :func:`log_to_stderr`; a
    ``log`` of the caller's own (``lambda _: None``: quiet) shows none."""
    return log is log_to_stderr


def resolve_model(model: ModelLike, name: str | None = None, device: str = "cpu") -> tuple[Any, dict]:
    """``(encoder, record's model entry)`` for a model spec (run folder, ``tfidf``, ``ridge:SPLIT``; loaded on
    ``device``) or an encoder object already loaded (named ``name``, or by its checkpoint)."""
    if isinstance(model, (str, Path)):
        encoder = models.load_model(str(model), device=device)
        return encoder, models.model_info(str(model), name, encoder)
    checkpoint = models.checkpoint_of(model)
    return model, {"path": checkpoint or models.baseline_spec(model),
                   "name": name or (models.model_name(checkpoint) if checkpoint else type(model).__name__),
                   **models.fingerprint(checkpoint)}


def read_parallel(split: str | Path, languages: Sequence[str] | None, n_groups: int | None, seed: int) -> ParallelSet:
    """A ``seed``-ed sample of ``n_groups`` parallel groups of ``split`` in ``languages`` (default: all of its; None:
    every group)."""
    from data_prep.shards import read_captions

    if n_groups is not None:
        require_positive_int(n_groups, "n_groups")

    return parallel_set(read_captions(split), languages, n_groups=n_groups, seed=seed, where=str(split))
