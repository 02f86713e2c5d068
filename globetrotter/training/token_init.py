"""Image-pivot token embeddings (``model.token_init: image_pivot``): a closed-form start for the text side.

Before the first step, one ridge regression (scikit-learn, closed form) maps each training
caption's bag of shared-BPE tokens (log counts × idf, L2-normalised) to the whole-image features
of *its own image* (the frozen backbone's, from the feature cache; L2-normalised, centred,
projected on their top ``d_model`` principal directions). Row ``v`` of the solution is what
token ``v`` says about the picture; two tokens of different languages that name the same
visible thing get similar rows because their captions' images look alike. Those rows,
rescaled to the initial embedding's spread, replace the token embeddings of every token the
training captions hold (unseen and special tokens keep their random rows). Only captions and
their own images are used, so no parallel text enters; the images are the pivot, as in the
rest of the method. The transformer then trains from there with the configured losses.

Why (docs/design.md section 11): on real photos the same linear map, used directly as a sentence
encoder, already translates better than a short run of the contrastive losses from a random
start; a model started from these rows keeps that gain instead of having to rediscover it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import numpy as np
import torch
from scipy import sparse

from .. import image_ridge
from ..token_stats import smoothed_idf

if TYPE_CHECKING:
    from ..config import TrainConfig
    from tokenizers import Tokenizer

    from ..models.subword import SubwordTable

RECORD = "token_init.json"
"""The run-folder file that records the closed form's ridge strength (and its cross-validation errors)."""

_SETTINGS = ("model.token_init_alpha", "model.token_init_folds")
"""The config keys that ask for the cross-validated ridge strength, named in its errors."""

__all__ = ["PivotRows", "choose_alpha", "image_pivot_embeddings", "init_token_embeddings", "init_from_config"]


def token_bags(ids: np.ndarray, mask: np.ndarray, vocab_size: int, skip: Sequence[int]) -> tuple[sparse.csr_matrix, np.ndarray]:
    """Rows of log(1 + count) × idf over the vocabulary (``skip`` tokens left out), L2-normalised; and the idf."""
    rows = np.repeat(np.arange(len(ids)), ids.shape[1])
    keep = mask.reshape(-1).astype(bool) & ~np.isin(ids.reshape(-1), np.asarray(list(skip), dtype=ids.dtype))
    counts = sparse.csr_matrix((np.ones(int(keep.sum()), dtype=np.float32), (rows[keep], ids.reshape(-1)[keep])),
                               shape=(len(ids), vocab_size))  # duplicates are summed
    idf = smoothed_idf(np.bincount(counts.indices, minlength=vocab_size), len(ids)).astype(np.float32)
    bags = counts.log1p().multiply(idf[None, :]).tocsr()
    norms = np.sqrt(np.asarray(bags.multiply(bags).sum(1))).ravel()
    return sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ bags, idf


class PivotRows(NamedTuple):
    """The closed form's solution: token rows, which tokens the captions hold, n-gram rows, and the ridge strength."""

    rows: np.ndarray  # [vocab_size, k]
    seen: np.ndarray  # [vocab_size] bool
    ngram_rows: np.ndarray | None  # [G, k] with model.token_ngrams, else None
    alpha: float  # the one used: the given one, or the one cross-validation chose
    cv_errors: dict[float, float] | None  # held-out squared error of each candidate alpha (None for a given alpha)
    idf: np.ndarray  # [vocab_size] the captions' token idf (the rows carry it; n-gram compositions scale by it)


def choose_alpha(inputs: np.ndarray | sparse.csr_matrix, target: np.ndarray, groups: np.ndarray, alphas: Sequence[float], folds: int = 5
                 ) -> tuple[float, dict[float, float]]:
    """The ridge strength among ``alphas`` with the lowest held-out squared error, by ``folds``-fold cross-validation
    that keeps each image's captions in one fold (:func:`globetrotter.image_ridge.choose_alpha`, ``groups``: the image
    ids): the captions of one image share a target, so a split by caption would reward remembering images. Returns the
    chosen alpha and each candidate's mean error. Only captions and their own images enter: no parallel text."""
    return image_ridge.choose_alpha(inputs, target, groups, alphas, folds, *_SETTINGS)


def image_pivot_embeddings(ids: np.ndarray, mask: np.ndarray, image_features: np.ndarray, vocab_size: int, dim: int,
                           alpha: float | Sequence[float] = 3.0, skip: Sequence[int] = (),
                           ngrams: sparse.csr_matrix | None = None, groups: np.ndarray | None = None,
                           folds: int = 5, jobs: int = 1) -> PivotRows:
    """``[vocab_size, k]`` token rows (k = min(dim, feature width, captions)) of the ridge map from each caption's
    token bag (``ids``/``mask`` ``[N, L]``) to its image's features (``[N, F]``), a boolean mask of the tokens
    the captions hold, and (with ``ngrams``, the ``[vocab_size, G]`` matrix of :mod:`globetrotter.models.subword`)
    ``[G, k]`` n-gram rows, else None. Row ``v`` is the ridge weight of token ``v`` times its idf, so the mean of a
    caption's rows points where its predicted image does.

    With ``ngrams`` the ridge reads each bag twice: the tokens, and the bag's character n-grams (bag @ ``ngrams``),
    one weight per n-gram shared by every token (of any language) that holds it. A token's composed vector is then
    ``idf · (its row + ngrams[v] @ n-gram rows)``: :class:`~globetrotter.models.subword.SubwordTable` with ``C``
    scaled by the idf (:meth:`~globetrotter.models.subword.SubwordTable.scale_tokens`).

    A list of ``alpha`` values is chosen from by :func:`choose_alpha` (``groups``: each caption's image id), ``jobs``
    of its fits at a time."""
    if len(ids) != len(image_features):
        raise ValueError(f"{len(ids)} captions but {len(image_features)} image-feature rows")
    bags, idf = token_bags(ids, mask, vocab_size, skip)
    target, _ = image_ridge.image_targets(image_features)
    k = min(dim, target.shape[1], len(target))
    basis = np.linalg.svd(target, full_matrices=False)[2][:k].T  # [F, k]: the top-k principal directions
    inputs = bags if ngrams is None else sparse.hstack([bags, bags @ ngrams]).tocsr()
    fit = image_ridge.fit_image_ridge(inputs, target @ basis, alpha, groups, folds, *_SETTINGS, jobs=jobs)
    weights = fit.model.coef_.T.astype(np.float32)  # [V (+ G), k]
    seen = np.bincount(bags.indices, minlength=vocab_size) > 0
    ngram_rows = None if ngrams is None else weights[vocab_size:]
    return PivotRows(weights[:vocab_size] * idf[:, None], seen, ngram_rows, fit.alpha, fit.cv_errors, idf)


def init_token_embeddings(embedding: torch.nn.Embedding, ids: torch.Tensor, mask: torch.Tensor,
                          image_features: np.ndarray, alpha: float | Sequence[float], skip: Sequence[int],
                          log: Callable[[str], None] = print, std: float | None = None,
                          subword: "SubwordTable | None" = None, groups: np.ndarray | None = None,
                          folds: int = 5, jobs: int = 1) -> dict:
    """Overwrite the rows of the tokens the captions hold with their image-pivot rows (:func:`image_pivot_embeddings`),
    rescaled to standard deviation ``std`` (None: the table's current one). Returns the record ``{"rows": how many
    were set, "alpha": the ridge strength, "cv_errors": each candidate's held-out error or None}``.

    With ``subword`` (a subword-informed table) its n-gram rows are set from the same ridge, its ``C`` is scaled by
    the tokens' idf, and the rescaling is that of the composed vectors of the tokens the captions hold. A list of
    ``alpha`` values is cross-validated over ``folds`` folds of the images ``groups`` (:func:`choose_alpha`), ``jobs``
    fits at a time."""
    table = embedding.weight
    ngrams = None if subword is None else subword.matrix()
    search = "" if isinstance(alpha, (int, float)) else \
        f", its strength cross-validated first ({len(alpha)} candidates x {folds} folds, up to {max(1, jobs)} fit(s) at a time)"
    log(f"token_init=image_pivot: fitting the ridge map on {len(ids)} captions{search}")
    rows, seen, ngram_rows, alpha, cv_errors, idf = image_pivot_embeddings(
        ids.numpy(), mask.numpy(), image_features, table.shape[0], table.shape[1], alpha, skip, ngrams, groups, folds,
        jobs)
    k = rows.shape[1]
    if ngrams is None or ngram_rows is None:  # no subword table (n-gram rows come with ngrams, ngrams with it)
        spread = rows[seen]
    else:
        spread = rows[seen] + (idf[:, None] * (ngrams @ ngram_rows))[seen]
    target_std = float(table.detach().std()) if std is None else std
    scale = target_std / max(float(spread.std(ddof=1)), 1e-12)  # ddof=1: torch's std, as the table's spread is read
    with torch.no_grad():
        table[torch.from_numpy(seen), :k] = torch.from_numpy(rows[seen] * scale).to(table.dtype)
        if subword is not None and ngram_rows is not None:
            weight = subword.ngram_embedding.weight
            weight.zero_()
            weight[: ngram_rows.shape[0], :k] = torch.from_numpy(ngram_rows * scale).to(weight.dtype)
            subword.scale_tokens(torch.from_numpy(idf))
    what = "" if ngrams is None else f" and {ngrams.shape[1]} character n-gram rows"
    if cv_errors is not None:
        table_text = ", ".join(f"{a:g}: {e:.5f}" for a, e in cv_errors.items())
        log(f"token_init_alpha: {alpha:g} has the lowest held-out squared error of {folds}-fold cross-validation "
            f"over the images ({table_text})")
    log(f"token_init=image_pivot: {int(seen.sum())} token rows{what} from the ridge map to image features "
        f"({len(ids)} captions, {k} principal image directions, alpha {alpha:g})")
    return {"rows": int(seen.sum()), "alpha": alpha, "cv_errors": cv_errors}


def init_from_config(model: torch.nn.Module, cfg: "TrainConfig", tokenizer: Tokenizer, log: Callable[[str], None] = print) -> dict:
    """``model.token_init: image_pivot``: set the text encoder's token rows from the train split's captions (those of
    ``data.train_languages``) and the whole-image rows of its feature cache (``data.features``, built by then).
    Returns :func:`init_token_embeddings`'s record."""
    from ..data.feature_cache_build import ensure_feature_cache
    from ..errors import UserError
    from ..models.text import TextEncoder
    from ..tokenizer import encode_batch, special_ids
    from .train_set import train_captions

    text = model.text
    if not isinstance(text, TextEncoder):  # as TrainConfig.validate says it
        raise UserError("model.token_init=image_pivot sets the token rows of model.text_encoder=transformer")
    split = Path(cfg.data.root) / cfg.data.train_split
    metas = train_captions(cfg)  # data.train_languages: a language left out of training is left out of the ridge
    cache = ensure_feature_cache(cfg, cfg.data.train_split, log)
    rows = cache.rows([str(m["image_id"]) for m in metas], split)
    ids, mask = encode_batch(tokenizer, [m["caption"] for m in metas], cfg.data.max_length)
    return init_token_embeddings(text.token_embedding, torch.tensor(ids), torch.tensor(mask),
                                 np.asarray(cache.features[rows, 0], dtype=np.float32), cfg.model.token_init_alpha,
                                 list(special_ids(tokenizer).values()), log, cfg.model.token_init_std,
                                 text.subword, np.array([str(m["image_id"]) for m in metas]),
                                 cfg.model.token_init_folds, torch.get_num_threads())
