"""Globetrotter: multilingual text representations aligned through images, without parallel text.

The library (models, losses, data pipeline, evaluation) lives here; ``train.py`` and
``eval.py`` are thin entry points. Load a trained model with :func:`load`.
"""
from __future__ import annotations

from .errors import UserError  # what load and the library raise for a mistake a user can fix

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it: keep it a literal)


def load(path, device: str = "cpu", prefer_best: bool = True):
    """Load a trained model (run folder or checkpoint folder) as an :class:`~globetrotter.encoder.Encoder`; a folder
    that holds no model, or a device this machine lacks, is a :class:`UserError`."""
    from .encoder import load as _load

    return _load(path, device=device, prefer_best=prefer_best)


__all__ = ["load", "UserError", "__version__"]
