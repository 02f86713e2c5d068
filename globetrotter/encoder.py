"""A trained Globetrotter model, loaded for use: ``globetrotter.load(path).encode_text([...])``."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.torch import load_model
from tokenizers import Tokenizer

from backretrieval.devices import check_device

from .config import TrainConfig, load_train_config
from .embeddings import BACKRETRIEVAL_HEAD, Encoder
from .errors import UserError
from .models import GlobetrotterModel
from .shell import program_name
from .texts_cut import TextsCut
from .tokenizer import load_tokenizer, special_ids, token_strings_of
from .training.checkpoint import LATEST, PUBLISHING, STATE, read_state, resolve, tied_aliases, weights_sha256

WEIGHTS = "model.safetensors"

# TextsCut lives in texts_cut.py; docs/training.md names it globetrotter.encoder.TextsCut, so it stays importable here
__all__ = ["WEIGHTS", "TextsCut", "build_model", "load", "weights_fingerprint", "BackRetrievalAdapter",
           "backretrieval_embedder"]


def build_model(cfg: TrainConfig, vocab_size: int, tokenizer: Tokenizer | None = None) -> GlobetrotterModel:
    """The model a config describes (heads follow the active losses); ``tokenizer`` is needed by
    ``model.token_ngrams`` (the n-grams of its tokens) and ignored otherwise."""
    if not cfg.model.token_ngrams:
        return GlobetrotterModel(cfg.model, cfg.loss, vocab_size, cfg.data.max_length)
    if tokenizer is None:
        raise ValueError("model.token_ngrams builds the n-grams of the tokenizer's tokens: pass tokenizer=")
    return GlobetrotterModel(cfg.model, cfg.loss, vocab_size, cfg.data.max_length,
                             token_strings_of(tokenizer, 0, vocab_size),
                             list(special_ids(tokenizer).values()))


def load(path: str | Path, device: str = "cpu", prefer_best: bool = True) -> Encoder:
    """Load a trained model from a run folder (its ``best`` checkpoint, else ``latest``) or a checkpoint folder,
    onto ``device`` (``cpu``, ``cuda``, ``cuda:1``, ...; a device this machine lacks is a :class:`UserError`)."""
    device = check_device(device, UserError)
    if not isinstance(prefer_best, (bool, np.bool_)):  # "no" was read as true
        raise UserError(f"prefer_best: expected True or False, got {prefer_best!r}")
    if not Path(path).exists():  # said as such, not as a folder without a checkpoint
        raise UserError(f"{path}: no such file or folder (expected a run folder, its checkpoints/, or a checkpoint "
                        "folder)")
    ckpt = resolve(path, prefer_best=prefer_best)
    if prefer_best and ckpt.name == PUBLISHING:
        print(f"{ckpt.parent / 'best'}: missing (a run was stopped while it replaced best/); loading the best "
              f"checkpoint before it, {ckpt}: {program_name('train')} --resume puts it back", file=sys.stderr)
    elif prefer_best and ckpt.name != "best" and ckpt != Path(path) and Path(path).name != LATEST:  # a run folder
        best = ckpt.parent / "best"
        why = (f"best/ is incomplete (no {STATE} in {best})" if best.is_dir() else
               "no best checkpoint (no validation chose one)")
        print(f"{path}: {why}; loading the latest, {ckpt.name}", file=sys.stderr)
    try:
        return _load_checkpoint(ckpt, device)
    except UserError:
        if ckpt.is_dir():
            raise
        raise UserError(f"{ckpt}: the checkpoint was removed while it was being loaded (pruned by a training that "
                        f"is running, say); load again") from None


def _load_checkpoint(ckpt: Path, device: str) -> Encoder:
    """:func:`load` of checkpoint folder ``ckpt``."""
    cfg = load_train_config(ckpt / "config.yaml")
    tokenizer = load_tokenizer(ckpt / "tokenizer.json")
    # the checkpoint holds every weight: never read (or require) the file the run started from
    model = build_model(replace(cfg, model=replace(cfg.model, image_pretrained=None)), tokenizer.get_vocab_size(),
                        tokenizer)
    tied = tied_aliases(model)  # stored once, under their first name (training/checkpoint.py): both filled here
    try:
        missing, unexpected = load_model(model, str(ckpt / WEIGHTS), strict=False)
    except (OSError, SafetensorError, RuntimeError) as err:  # absent, truncated, or of other shapes than the config's
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = " ".join(lines[:2]) if lines else type(err).__name__
        raise UserError(f"{ckpt / WEIGHTS}: cannot load the weights ({reason[:200]}); the checkpoint is incomplete "
                        f"or does not match its config.yaml") from None
    if set(missing) - set(tied) or unexpected:
        raise UserError(f"{ckpt / WEIGHTS}: weights do not match the config (missing {sorted(missing)[:3]}, unexpected {unexpected[:3]})")
    read_state(ckpt)
    return Encoder(model, tokenizer, cfg, device, checkpoint=ckpt)


def weights_fingerprint(path: str | Path) -> dict:
    """``{"checkpoint", "weights_sha256"}`` of the checkpoint the run or checkpoint folder ``path`` loads now (its
    best, else latest): what a record of embeddings made with it names, since a run may save another ``best/`` under
    the same path. A folder without a checkpoint is :func:`resolve`'s one-line error."""
    checkpoint = resolve(path).resolve()
    return {"checkpoint": str(checkpoint), "weights_sha256": weights_sha256(str(checkpoint))}


class BackRetrievalAdapter:
    """A Globetrotter checkpoint as a BackRetrieval text embedder (``globetrotter:PATH``)."""

    def __init__(self, path: str, head: str = BACKRETRIEVAL_HEAD) -> None:
        self.encoder = load(path)
        self.head = head
        self.name = f"globetrotter:{path}"

    def encode(self, texts: list[str]) -> np.ndarray:
        """The checkpoint's ``head`` embeddings of ``texts`` (:meth:`Encoder.encode_text`)."""
        return self.encoder.encode_text(texts, head=self.head)


def _require_folder(spec: str) -> None:
    """A one-line BackRetrieval error for ``globetrotter:`` with no folder after it (it loaded the current folder)."""
    if not spec.strip():
        from backretrieval.errors import BackRetrievalError

        raise BackRetrievalError(f"embedder spec {'globetrotter:' + spec!r}: expected globetrotter:RUN_FOLDER (a run "
                                 f"folder, its checkpoints/, or a checkpoint folder)")


def backretrieval_embedder(spec: str) -> BackRetrievalAdapter:
    """Entry point of the ``backretrieval.embedders`` group: ``spec`` is a checkpoint or run folder. A folder that
    holds no model is BackRetrieval's own one-line error."""
    from backretrieval.errors import BackRetrievalError

    _require_folder(spec)
    try:
        return BackRetrievalAdapter(spec)
    except UserError as err:
        raise BackRetrievalError(f"globetrotter:{spec}: {err}") from None


def _check_backretrieval_spec(spec: str) -> None:
    """What ``backretrieval`` checks before any work (nothing loaded): the folder holds a checkpoint."""
    from backretrieval.errors import BackRetrievalError

    _require_folder(spec)
    try:
        resolve(spec)
    except UserError as err:
        raise BackRetrievalError(f"globetrotter:{spec}: {err}") from None


# backretrieval.embedders.check_spec_inputs calls it (setattr: mypy declares no attribute on a function)
setattr(backretrieval_embedder, "check", _check_backretrieval_spec)
