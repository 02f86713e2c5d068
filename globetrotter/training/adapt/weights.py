"""The starting run's weights in the adapted model: the rows of the grown vocabulary (and n-gram table) added,
the image side frozen, and with ``adapt.train: new-tokens`` every weight but the new language's token rows."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ...config import TrainConfig
from ...embeddings import Encoder
from ...errors import UserError
from ...models import GlobetrotterModel
from ...models.subword import SubwordTable, extend_ngram_matrix, token_strings
from ...models.text import TextEncoder
from ...tokenizer import load_tokenizer, special_ids, token_strings_of
from ..tokenizer_file import tokenizer_path
from .start import rows_to_train


def _grow_rows(old: torch.Tensor, rows: int, generator: torch.Generator) -> torch.Tensor:
    """``old`` with rows appended up to ``rows``: drawn around 0 with the old rows' spread (a 1-d bias: their mean)."""
    extra = rows - old.shape[0]
    if old.dim() == 1:
        return torch.cat([old, old.mean().expand(extra)])
    fresh = torch.randn(extra, *old.shape[1:], generator=generator) * old.float().std()
    return torch.cat([old, fresh.to(old.dtype)])


def _transformer(model: GlobetrotterModel) -> TextEncoder:
    """``model``'s text encoder: the shared transformer, the only one adaptation grows (TrainConfig.validate)."""
    if not isinstance(model.text, TextEncoder):
        raise UserError(f"adapt.from: only the shared transformer text encoder adapts to a new language "
                        f"(model.text_encoder={model.cfg.text_encoder} has one word table per training language)")
    return model.text


def load_start(cfg: TrainConfig, model: GlobetrotterModel, start: Encoder,
               log: Callable[[str], None] = print) -> torch.Tensor | None:
    """Load ``start``'s weights into ``model`` (built with the grown vocabulary: the new rows start at random, with
    the trained rows' spread), and freeze the image side: the precomputed image features stay the model's own.
    With ``adapt.train: new-tokens`` only the new language's token rows train; returns those rows (else None)."""
    state = start.model.state_dict()
    if model.text.subword is not None:
        _grow_subword(cfg, model, start, state)
    generator = torch.Generator().manual_seed(cfg.seed)
    for key, value in model.state_dict().items():
        if key in state and state[key].shape != value.shape:  # token embedding and cloze bias: the new tokens
            state[key] = _grow_rows(state[key], value.shape[0], generator)
    if "cloze_head.token_embedding.weight" in state:  # tied to the text encoder's table
        state["cloze_head.token_embedding.weight"] = state["text.token_embedding.weight"]
    model.load_state_dict(state)
    trained_rows = None
    if cfg.adapt.train == "new-tokens":
        trained_rows = _train_new_tokens_only(cfg, model, start, start.tokenizer.get_vocab_size(), log)
    if model.image is not None:  # fixed: the precomputed image features stay the model's own
        for part in (model.image, model.image_head_x, model.image_head_v):
            if part is not None:
                part.requires_grad_(False)
        model.image_frozen = model.image_heads_frozen = True
        model.train(model.training)  # the frozen parts in eval mode from here on
    return trained_rows


def _grow_subword(cfg: TrainConfig, model: GlobetrotterModel, start: Encoder, state: dict) -> None:
    """``model.token_ngrams``: the start's n-gram matrix with the appended tokens' rows added
    (:func:`~globetrotter.models.subword.extend_ngram_matrix`: old rows and columns unchanged), set into
    ``model`` and ``state``; the new n-grams' rows start at zero, so an appended token starts as its own row plus
    the rows of the n-grams it shares with the old vocabulary."""
    start_ngrams = _transformer(start.model).subword
    if start_ngrams is None or not cfg.model.token_ngrams:  # resolve_config: the start's model config is this one's
        raise UserError(f"{cfg.adapt.from_run}: the starting run has no character n-gram table (model.token_ngrams)")
    old_vocab = token_strings_of(start.tokenizer)
    tokenizer = load_tokenizer(tokenizer_path(cfg))
    added = token_strings_of(tokenizer, len(old_vocab))
    specials = list(special_ids(tokenizer).values())
    matrix = extend_ngram_matrix(start_ngrams.matrix(), token_strings(old_vocab, specials),
                                 token_strings(added), cfg.model.token_ngrams)
    model.text.subword = SubwordTable(matrix, model.text.d_model)
    old_rows = state["text.subword.ngram_embedding.weight"]
    grown = torch.zeros(model.text.subword.ngram_embedding.weight.shape, dtype=old_rows.dtype)
    grown[: old_rows.shape[0]] = old_rows
    state.update({f"text.subword.{k}": v for k, v in model.text.subword.state_dict().items()})
    state["text.subword.ngram_embedding.weight"] = grown


def _train_new_tokens_only(cfg: TrainConfig, model: GlobetrotterModel, start: Encoder, n_old: int,
                           log: Callable[[str], None]) -> torch.Tensor:
    """Freeze every weight but the rows of the new language's tokens (:func:`rows_to_train`): the token
    embedding, the tied cloze decoder, the cloze bias. Returns those rows."""
    rows, appended = rows_to_train(load_tokenizer(tokenizer_path(cfg)), cfg, start.cfg, n_old)
    log(f"adapt.train=new-tokens: {len(rows)} token rows train ({appended} appended, {len(rows) - appended} "
        f"already in the vocabulary, held by {cfg.adapt.language}'s captions and no old training caption)")
    trained_rows = torch.tensor(rows, dtype=torch.long)
    model.requires_grad_(False)
    text = _transformer(model)
    trained = {text.token_embedding.weight: trained_rows}
    if model.cloze_head:
        trained[model.cloze_head.bias] = trained_rows
    if text.subword is not None:  # the n-grams that only trained tokens hold: no other token's vector moves
        matrix = text.subword.matrix()
        others = np.setdiff1d(np.arange(matrix.shape[0]), rows)
        free = np.setdiff1d(np.arange(matrix.shape[1]), matrix[others].indices)
        log(f"adapt.train=new-tokens: {len(free)} of {matrix.shape[1]} character n-gram rows train (those no "
            f"other token holds)")
        trained[text.subword.ngram_embedding.weight] = torch.from_numpy(free)
    for param, train_rows in trained.items():
        param.requires_grad_(True)
        keep = torch.zeros(param.shape[0], *[1] * (param.dim() - 1))
        keep[train_rows] = 1
        param.register_hook(lambda grad, keep=keep: grad * keep.to(grad))
    return trained_rows
