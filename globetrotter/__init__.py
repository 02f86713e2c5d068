"""Globetrotter: multilingual text representations aligned through images, without parallel text.

The library (models, losses, data pipeline, evaluation) lives here; ``train.py`` and
``eval.py`` are thin entry points. Load a trained model with :func:`load`.
"""
from __future__ import annotations

__version__ = "0.1.0"


def load(path, device: str = "cpu", prefer_best: bool = True):
    """Load a trained model (run folder or checkpoint folder) as an :class:`~globetrotter.encoder.Encoder`."""
    from .encoder import load as _load

    return _load(path, device=device, prefer_best=prefer_best)


__all__ = ["load", "__version__"]
