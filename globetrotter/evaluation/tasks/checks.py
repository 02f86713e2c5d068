"""The check the tasks that need a trained model share."""
from __future__ import annotations

from pathlib import Path

from .. import models


def require_trained(model, command: str) -> None:
    """A one-line error when ``model`` is a spec naming a baseline (``tfidf``, ``ridge:SPLIT``); a loaded encoder is
    taken as it is."""
    if isinstance(model, (str, Path)):
        models.require_trained(str(model), command)
