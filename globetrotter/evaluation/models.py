"""What ``--model`` names: a trained run (or checkpoint) folder, or one of the two baselines that need no training
run — ``tfidf`` (character n-gram TF-IDF, :mod:`.tfidf`) and ``ridge:TRAIN_SPLIT`` (the linear image pivot,
:mod:`.pivot_ridge`) — and the small adapters every evaluation uses to call them alike."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np
import scipy.sparse as sp

from backretrieval.errors import given
from globetrotter.errors import UserError
from globetrotter.shell import program_name
from globetrotter.training.checkpoint import weights_sha256

from .pivot_ridge import PREFIX as RIDGE_PREFIX
from .pivot_ridge import PivotRidgeEncoder, is_pivot_ridge_spec
from .tfidf import TfidfEncoder, is_tfidf_spec

if TYPE_CHECKING:  # the encoder module imports torch
    from globetrotter.embeddings import Encoder

ModelLike = Union[str, Path, "Encoder", TfidfEncoder, PivotRidgeEncoder]
"""What an evaluation's ``model`` is: a run or checkpoint folder, a baseline spec (``tfidf``, ``ridge:SPLIT``), or
an encoder already loaded (:func:`globetrotter.load`'s, or a baseline's object)."""


def is_baseline(spec: str | None) -> bool:
    """Whether ``spec`` names a baseline (``tfidf``, ``ridge:SPLIT``) rather than a trained run."""
    return is_tfidf_spec(spec) or is_pivot_ridge_spec(spec)


def load_model(spec: str, device: str = "cpu") -> Encoder | TfidfEncoder | PivotRidgeEncoder:
    """The encoder ``spec`` names: ``globetrotter.load(spec, device)`` for a run or checkpoint folder, an unfitted
    :class:`~.tfidf.TfidfEncoder` for ``tfidf``, a :class:`~.pivot_ridge.PivotRidgeEncoder` fitted on
    ``TRAIN_SPLIT`` for ``ridge:TRAIN_SPLIT``. A missing folder is a one-line error."""
    if is_tfidf_spec(spec):
        return TfidfEncoder()
    if is_pivot_ridge_spec(spec):
        return PivotRidgeEncoder(spec[len(RIDGE_PREFIX):])
    if not Path(spec).exists():
        raise UserError(f"{spec}: model not found (expected a run folder or a checkpoint folder)")
    from globetrotter import load

    return load(spec, device=device)


def model_name(spec: str, name: str | None = None) -> str:
    """The name records and file names give the model: ``name`` when set, else derived from ``spec`` (the run
    folder's last two path parts without ``checkpoints``; ``tfidf``; ``ridge-<split>``)."""
    if name:
        return name
    if is_tfidf_spec(spec):
        return "tfidf"
    if is_pivot_ridge_spec(spec):
        return "ridge-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(Path(spec[len(RIDGE_PREFIX):]).parts[-2:]))
    parts = [p for p in Path(spec).resolve().parts[-3:] if p != "checkpoints"]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts[-2:]))


def model_info(spec: str, name: str | None = None, encoder: Any = None) -> dict:
    """``{"path", "name", "checkpoint", "weights_sha256"}`` of a record's model: ``path`` is ``spec`` with its folder
    resolved, ``checkpoint`` the folder whose weights ``encoder`` holds (a run folder loads its best checkpoint, else
    its latest), ``None`` for a baseline or without ``encoder``, and :func:`weights_sha256` of it."""
    if is_tfidf_spec(spec):
        path = spec
    elif is_pivot_ridge_spec(spec):
        path = RIDGE_PREFIX + str(Path(spec[len(RIDGE_PREFIX):]).resolve())
    else:
        path = str(Path(spec).resolve())
    return {"path": path, "name": model_name(spec, name), **fingerprint(checkpoint_of(encoder))}


def fingerprint(checkpoint: str | None) -> dict:
    """``{"checkpoint", "weights_sha256"}`` of a checkpoint folder (both None for none: a baseline), as records name
    the weights they were made with (:func:`weights_sha256`: a run may save another ``best/`` at the same path)."""
    return {"checkpoint": checkpoint, "weights_sha256": weights_sha256(checkpoint)}


def baseline_spec(encoder: Any) -> str | None:
    """The spec a record's ``model.path`` gives a baseline object (``tfidf``, ``ridge:<resolved split>``)."""
    if isinstance(encoder, TfidfEncoder):
        return "tfidf"
    if isinstance(encoder, PivotRidgeEncoder):
        return RIDGE_PREFIX + str(Path(encoder.train_split).resolve())
    return None


def current_checkpoint(spec: str) -> str | None:
    """The resolved checkpoint folder ``spec`` loads now (a run folder: its best, else latest); None for a baseline
    or a folder without a checkpoint."""
    if is_baseline(spec):
        return None
    from globetrotter.training.checkpoint import resolve

    try:
        return str(resolve(spec).resolve())
    except (UserError, OSError):  # loading it then says why
        return None


def checkpoint_of(encoder: Any) -> str | None:
    """The resolved checkpoint folder a loaded encoder's weights come from; ``None`` for a baseline."""
    checkpoint = getattr(encoder, "checkpoint", None)
    return str(Path(checkpoint).resolve()) if checkpoint else None


def require_trained(spec: str | None, command: str) -> None:
    """A one-line error when a command that needs a trained model is given a baseline."""
    if spec is not None and is_baseline(spec):
        raise UserError(f"{command}: {given('model', spec.split(':')[0])} is a baseline of "
                        f"`{program_name('eval')} sentence` and `select` only; "
                        f"{command} needs a trained run folder")


def language_kwargs(encoder: Any, langs: str | Sequence[str] | np.ndarray | None) -> dict:
    """``{"langs": langs}`` for an encoder with per-language tables (the Sigurdsson baseline, the ridge baseline),
    else ``{}``: the other encoders take no languages."""
    if not getattr(encoder, "needs_language", False):
        return {}
    return {"langs": langs if langs is None or isinstance(langs, str) else list(langs)}


def encode_texts(encoder: Any, texts: Sequence[str], langs: str | Sequence[str] | np.ndarray | None, head: str = "text",
                 batch_size: int = 256) -> np.ndarray | sp.csr_matrix:
    """``encoder.encode_text`` with the languages passed where the encoder needs them."""
    return encoder.encode_text(list(texts), batch_size=batch_size, head=head, **language_kwargs(encoder, langs))


def encode_texts_by_head(encoder: Any, texts: Sequence[str], langs: str | Sequence[str] | np.ndarray | None,
                         heads: Sequence[str], batch_size: int = 256) -> dict:
    """:func:`encode_texts` by each of ``heads``, ``{head: embeddings}``: one pass of the text encoder for them all
    where the encoder gives several heads at once (``encode_text_heads``), else one pass per head."""
    heads = list(dict.fromkeys(heads))
    if len(heads) > 1 and hasattr(encoder, "encode_text_heads"):
        return encoder.encode_text_heads(list(texts), heads, batch_size=batch_size, **language_kwargs(encoder, langs))
    return {head: encode_texts(encoder, texts, langs, head, batch_size) for head in heads}


def token_embeddings(encoder: Any, lang: str | None) -> tuple[list[str], np.ndarray]:
    """``encoder.token_embeddings()``; ``lang``'s own table for an encoder with per-language tables."""
    return encoder.token_embeddings(lang) if getattr(encoder, "needs_language", False) else encoder.token_embeddings()
