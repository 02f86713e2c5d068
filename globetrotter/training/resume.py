"""What a resumed run needs besides accelerate's state: the data stream's position, per-step seeds."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..data.stream import StreamPosition, derive_seed
from . import checkpoint as ckpt


def mask_seed(seed: int, rank: int, step: int) -> int:
    """Seed of the cloze masks of ``step`` on process ``rank``: a pure function, so nothing to restore."""
    return derive_seed(seed, 7919, rank, step)


def resume_position(source: Path, rank: int, workers: int, log: Callable[[str], None] = print) -> StreamPosition | None:
    """The data stream position process ``rank`` saved in checkpoint ``source``.

    None (and one logged line) when it cannot be continued exactly: a checkpoint written
    before positions were saved, or by a run with another number of processes or data workers.
    """
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
