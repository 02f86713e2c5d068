"""Globetrotter: multilingual text representations aligned through images, without parallel text.

The library (models, losses, data pipeline, evaluation) lives here; ``train.py`` and
``eval.py`` are thin entry points. Load a trained model with :func:`load` (an :class:`Encoder`).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UserError  # what load and the library raise for a mistake a user can fix

if TYPE_CHECKING:  # the encoder module imports torch: loaded by load() only
    from .embeddings import Encoder

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it: keep it a literal)


def load(path: str | Path, device: str = "cpu", prefer_best: bool = True) -> Encoder:
    """Load a trained model (run folder or checkpoint folder) as an :class:`~globetrotter.embeddings.Encoder` on
    ``device`` (``cpu``, ``cuda``, ``cuda:1``, ...).

    ``prefer_best``: from a run folder (or its ``checkpoints/``), load its ``best`` checkpoint (the one validation
    chose) when there is one, else its ``latest``; False loads ``latest``, the last one saved. A checkpoint folder
    (or a ``latest`` pointer file) loads that checkpoint whatever ``prefer_best`` says. A path that does not exist, a
    folder that holds no model, or a device this machine lacks, is a :class:`UserError`."""
    from .encoder import load as _load

    return _load(path, device=device, prefer_best=prefer_best)


def __getattr__(name: str) -> type:
    """``globetrotter.Encoder``, imported on first use (PEP 562), so that ``import globetrotter`` stays light."""
    if name == "Encoder":
        from .embeddings import Encoder

        return Encoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Encoder"})


__all__ = ["Encoder", "load", "UserError", "__version__"]
