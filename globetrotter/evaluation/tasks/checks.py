"""The checks the tasks share: a trained model, its languages, sequences given as one str."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from backretrieval.errors import BackRetrievalError, given, option, said
from backretrieval.files import is_whole
from backretrieval.metric_checks import check_ks
from globetrotter.errors import UserError
from globetrotter.tokenizer import provenance_languages, read_provenance

from .. import models
from ..models import ModelLike
from ..pivot_ridge import PREFIX as RIDGE_PREFIX
from ..pivot_ridge import PivotRidgeEncoder
from ..tfidf import TfidfEncoder


FLAG_OF = {"source": "--from", "corpus_lang": "--corpus-language"}
"""The library parameters whose ``eval.py`` flag is spelled otherwise (``translate --from``)."""


def named(name: str) -> str:
    """How a message names the parameter ``name``: its ``eval.py`` flag under
    :func:`~backretrieval.errors.cli_option_names` (:data:`FLAG_OF`, else :func:`~backretrieval.errors.option`'s
    spelling), the parameter itself in Python."""
    return said(FLAG_OF[name], name) if name in FLAG_OF else option(name)


def named_value(name: str, value: object) -> str:
    """How a message names the value given for ``name``: ``--flag VALUE`` under the command line, ``name=VALUE`` in
    Python (:func:`named`'s spellings)."""
    return said(f"{FLAG_OF[name]} {value}", f"{name}={value}") if name in FLAG_OF else given(name, value)


def require_sequence(value: object, name: str, what: str = "texts") -> None:
    """A ``TypeError`` when ``value`` is one ``str`` where a sequence of ``what`` is expected (it would be read as its
    characters), as :meth:`~globetrotter.embeddings.Encoder.encode_text` refuses one; for language codes the message
    shows the list a comma-separated value stands for."""
    if isinstance(value, (str, bytes)):
        items = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else []
        example = f" ({items!r})" if what == "language codes" and items else ""
        raise TypeError(f"{name}: expected a sequence of {what}, got one {type(value).__name__} ({value[:40]!r}); "
                        f"wrap it in a list{example}")


def require_language(value: object, name: str) -> None:
    """A ``TypeError`` when ``value`` is no str, one language code (a list was 'unhashable type: list')."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one language code (a str), got {type(value).__name__} {value!r}")


def require_positive_int(value: object, name: str) -> None:
    """A one-line :class:`UserError` naming ``name`` unless ``value`` is an integer >= 1 (a count, a k), as the
    command line's ``positive_int`` refuses 0, -5 or 2.5 (numpy's error, or a silent 'all', otherwise)."""
    if not is_whole(value) or value < 1:
        raise UserError(f"{name}: expected a positive integer, got {value!r}")


def require_ks(ks: Sequence[int] | int) -> tuple[int, ...]:
    """``ks`` as a tuple of positive integers (:func:`backretrieval.metric_checks.check_ks`), as a
    :class:`UserError`."""
    try:
        return check_ks(ks)
    except BackRetrievalError as err:
        raise UserError(str(err)) from None


def require_languages(**given: object) -> None:
    """:func:`require_sequence` of each language-list argument (name=value; None: not given)."""
    for name, value in given.items():
        require_sequence(value, name, "language codes")


def require_trained(model: ModelLike, command: str) -> None:
    """A one-line error when ``model`` is a baseline (``tfidf``, ``ridge:SPLIT``), as a spec or a loaded object; a
    loaded trained encoder is taken as it is."""
    if isinstance(model, (str, Path)):
        models.require_trained(str(model), command)
    elif isinstance(model, TfidfEncoder):
        models.require_trained("tfidf", command)
    elif isinstance(model, PivotRidgeEncoder):
        models.require_trained(RIDGE_PREFIX, command)


def require_known_languages(encoder: Any, given: Mapping[str, str | None]) -> None:
    """A one-line error when a language given (parameter name -> code; None: not given; named as :func:`named_value`
    says) is not among the captions the model's tokenizer was trained on, as its checkpoint's provenance record names
    them (no record: no check)."""
    checkpoint = getattr(encoder, "checkpoint", None)
    known = provenance_languages(read_provenance(Path(checkpoint) / "tokenizer.json")) if checkpoint else None
    if known is None:
        return
    for name, lang in given.items():
        if lang is not None and lang not in known:
            raise UserError(f"{named_value(name, lang)}: not a language of the model's training captions "
                            f"({', '.join(sorted(known))})")
