"""The check the tasks that need a trained model share."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from globetrotter.errors import UserError
from globetrotter.tokenizer import provenance_languages, read_provenance

from .. import models


def require_trained(model, command: str) -> None:
    """A one-line error when ``model`` is a spec naming a baseline (``tfidf``, ``ridge:SPLIT``); a loaded encoder is
    taken as it is."""
    if isinstance(model, (str, Path)):
        models.require_trained(str(model), command)


def require_known_languages(encoder, given: Mapping[str, str | None]) -> None:
    """A one-line error when a language given (option name -> code; None: not given) is not among the captions the
    model's tokenizer was trained on, as its checkpoint's provenance record names them (no record: no check)."""
    checkpoint = getattr(encoder, "checkpoint", None)
    known = provenance_languages(read_provenance(Path(checkpoint) / "tokenizer.json")) if checkpoint else None
    if known is None:
        return
    for flag, lang in given.items():
        if lang is not None and lang not in known:
            raise UserError(f"{flag} {lang}: not a language of the model's training captions "
                            f"({', '.join(sorted(known))})")
