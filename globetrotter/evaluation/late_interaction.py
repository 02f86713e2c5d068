"""Late-interaction sentence scores: MaxSim over the model's token vectors (as ColBERT and BERTScore score).

A sentence embedding is one vector per caption: two captions that share a scene but differ in a
colour or a count land close. Matching token by token keeps those details: each token of one
caption is paired with its most similar token of the other, and the pairs' similarities are
averaged, idf-weighted, in both directions:

    MaxSim(a, b) = ½ [ Σ_i w_i max_j s_ij / Σ_i w_i  +  Σ_j w_j max_i s_ij / Σ_j w_j ]

``s_ij`` is the cosine of the two tokens' input embedding rows (the image-pivot map of the full
model: a row points where its token's images lie), less the two rows' hubness
(``s_ij − r_i/2 − r_j/2``, CSLS at the token level), so that a frequent token that is near every
other token does not match everything. ``r`` is a row's neighbourhood radius
(:func:`backretrieval.hubness.neighbourhood_radii`) among the tokens *of the other sentence's
language* when the texts' languages are given: ``r_i`` for token ``i`` of a sentence in language a
matched against one in language b is taken among b's tokens, and ``r_j`` among a's, as CSLS is
defined for a language pair; without languages, among the rows of the whole vocabulary (a property of
the model alone). ``w`` is the token's smoothed idf (BERTScore's choice). Idf and per-language hubness
are statistics of a set of *reference* texts: unlabelled captions other than the ones scored
(inductive scoring, the default of ``eval.py sentence``), or the scored sentences themselves
(transductive).

``eval.py sentence --maxsim W`` ranks by ``cos(sentence embeddings) + W · MaxSim``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Sequence

import numpy as np

from backretrieval.hubness import neighbourhood_radii
from globetrotter.token_stats import idf


@dataclass(frozen=True)
class SentenceTokens:
    """The token vectors of ``n`` sentences, grouped by sentence (sentence 0's tokens first)."""

    vectors: np.ndarray  # [T, d] float32, L2-normalised
    owner: np.ndarray  # [T] int64, non-decreasing sentence index
    weight: np.ndarray  # [T] float32 > 0 (idf)
    half_hub: np.ndarray  # [T, M] float32: r / 2 of each token's row among the tokens of language m (M = 1: vocabulary)
    n: int
    column: np.ndarray  # [T] int64: the language of each token's sentence, a column of the other bags' half_hub (0 for M = 1)

    @cached_property
    def starts(self) -> np.ndarray:
        """First token of every sentence that has tokens (``reduceat`` offsets)."""
        return np.flatnonzero(np.r_[True, np.diff(self.owner) != 0]) if len(self.owner) else np.zeros(0, np.int64)


def row_hubness(table: np.ndarray, k: int = 10, rows: np.ndarray | None = None) -> np.ndarray:
    """[V] mean cosine of each row of ``table`` [V, d] to its ``k`` nearest other rows among ``rows`` (indices;
    default: all): :func:`~backretrieval.hubness.neighbourhood_radii`, a row never its own neighbour."""
    pool = np.arange(len(table)) if rows is None else np.asarray(rows, dtype=np.int64)
    if len(pool) <= k:
        raise ValueError(f"hubness k={k} needs more than {k} rows, the table has {len(pool)}")
    position = np.full(len(table), -1, dtype=np.int64)
    position[pool] = np.arange(len(pool))
    return neighbourhood_radii(table, table[pool], k, exclude=position)


def sentence_tokens(token_ids: Sequence[np.ndarray], table: np.ndarray, weights: np.ndarray, hubness: np.ndarray,
               languages: np.ndarray | None = None) -> SentenceTokens:
    """Bags of ``n`` sentences from their token ids (specials already left out): rows of ``table`` [V, d]
    L2-normalised, ``weights`` [V] and ``hubness`` looked up per token: [V] over the vocabulary, or [V, M] among
    each of ``M`` languages' tokens (:func:`language_hubness`), with ``languages`` [n] each sentence's column."""
    hubness = np.asarray(hubness, dtype=np.float32)
    per_language = hubness.ndim == 2
    if per_language != (languages is not None):
        raise ValueError("per-language hubness [V, M] needs each sentence's language column, and only it")
    lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
    flat = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in token_ids]) if len(token_ids) else np.zeros(0, np.int64)
    vectors = np.ascontiguousarray(table[flat], dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    if per_language:
        languages = np.asarray(languages, dtype=np.int64)
        if len(languages) != len(lengths) or (len(languages) and not 0 <= languages.min() <= languages.max() < hubness.shape[1]):
            raise ValueError(f"languages: expected {len(lengths)} columns in [0, {hubness.shape[1]}), "
                             f"got {len(languages)}")
    else:  # one column: the vocabulary's hubness
        languages, hubness = np.zeros(len(lengths), dtype=np.int64), hubness[:, None]
    half_hub = hubness[flat]
    return SentenceTokens(vectors, np.repeat(np.arange(len(lengths)), lengths), np.asarray(weights[flat], np.float32),
                     half_hub / 2.0, len(lengths), np.repeat(languages, lengths))


HUB_K = 10
"""Neighbours of a token row's hubness (:class:`LateInteraction`'s default): per language, the reference texts must
hold more distinct tokens than that."""


def language_hubness(table: np.ndarray, token_ids: Sequence[np.ndarray], languages: np.ndarray, k: int = 10,
                     names: Sequence[str] | None = None) -> np.ndarray:
    """[V, M] hubness of every row of ``table`` among the tokens of each language's sentences: column ``m`` is
    :func:`row_hubness` over the token ids that the sentences with ``languages == m`` (codes 0..M-1, named by
    ``names`` in errors) hold."""
    languages = np.asarray(languages, dtype=np.int64)
    out = []
    for m in range(int(languages.max()) + 1 if len(languages) else 0):
        held = [np.asarray(token_ids[int(i)], dtype=np.int64) for i in np.flatnonzero(languages == m)]
        pool = np.unique(np.concatenate(held)) if held else np.zeros(0, np.int64)
        if len(pool) <= k:
            name = repr(names[m]) if names is not None else f"#{m}"
            raise ValueError(f"per-language hubness k={k} needs more than {k} distinct tokens in each language's "
                             f"texts; language {name} has {len(pool)}")
        out.append(row_hubness(table, k, rows=pool))
    return np.stack(out, axis=1)


def _weighted_means(values: np.ndarray, bags: SentenceTokens, axis: int) -> np.ndarray:
    """Per-sentence idf-weighted means of ``values`` along ``axis`` (that axis runs over ``bags``' tokens)."""
    shape = (-1, 1) if axis == 0 else (1, -1)
    totals = np.add.reduceat(bags.weight, bags.starts).reshape(shape)
    return np.add.reduceat(values * bags.weight.reshape(shape), bags.starts, axis=axis) / totals


MAX_BLOCK = 1 << 25
"""Most token pairs a group of :func:`maxsim` spans (128 MB of float32): it holds the similarities of their distinct
rows and the maxima of their sentences, no more."""


def _language_onehot(bags: SentenceTokens, tokens: np.ndarray | slice) -> np.ndarray:
    """[len(tokens), M] one-hot of each token's language column (all ones for M = 1: the vocabulary's hubness)."""
    return np.eye(bags.half_hub.shape[1], dtype=np.float32)[bags.column[tokens]]


def _augmented(*blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.hstack(blocks), dtype=np.float32)


def _token_groups(a: SentenceTokens, rows: np.ndarray, b: SentenceTokens, chunk_tokens: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """How :func:`maxsim` takes ``rows``' tokens: ``(start_of, picked, out_row, groups)``, ``start_of[s]:start_of[s +
    1]`` sentence ``s``'s tokens in ``a``, ``picked`` the rows that have tokens (at ``out_row`` of the output), and
    ``groups`` the ``(first, last)`` slices of ``picked`` scored in one product each: as many sentences as hold at most
    ``chunk_tokens`` tokens (fewer when ``b`` is large: :data:`MAX_BLOCK`), at least one."""
    chunk_tokens = max(1, min(chunk_tokens, MAX_BLOCK // max(1, len(b.owner))))
    start_of = np.searchsorted(a.owner, np.arange(a.n + 1))  # a's sentence s holds tokens start_of[s]:start_of[s + 1]
    has_tokens = start_of[rows + 1] > start_of[rows]
    picked, out_row = rows[has_tokens], np.flatnonzero(has_tokens)
    spans = np.cumsum(start_of[picked + 1] - start_of[picked])
    groups, first = [], 0
    while first < len(picked):
        base = spans[first - 1] if first else 0
        last = max(first + 1, int(np.searchsorted(spans, base + chunk_tokens, side="right")))
        groups.append((first, last))
        first = last
    return start_of, picked, out_row, groups


def maxsim_group_starts(a: SentenceTokens, b: SentenceTokens, n: int | None = None,
                        chunk_tokens: int = 1024) -> np.ndarray:
    """The sentences of ``a`` at which ``maxsim(a, np.arange(n), b, chunk_tokens)`` (``n`` default ``a.n``) starts a
    product: ``maxsim`` of a range ``np.arange(lo, hi)`` between two of them (or ``n``) makes the same products, so
    its rows are those of the whole ``[n, b.n]`` bit for bit (rows grouped otherwise make other products, which BLAS
    may round otherwise in the last bit)."""
    rows = np.arange(a.n if n is None else n, dtype=np.int64)
    _, picked, _, groups = _token_groups(a, rows, b, chunk_tokens)
    return np.array([picked[first] for first, _ in groups], dtype=np.int64)


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` of the rows of ``x`` [T, D], compared bit for bit: ``first`` one row index per distinct
    row, ``inverse`` [T] each row's place in ``first`` (``x[first][inverse]`` is ``x``)."""
    x = np.ascontiguousarray(x)
    _, first, inverse = np.unique(x.view(np.dtype((np.void, x.shape[1] * x.itemsize))).ravel(), return_index=True,
                                  return_inverse=True)
    return first, inverse.ravel()


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``starts[0]..starts[0] + lengths[0] - 1``, then the next range, ...: the ranges concatenated, without a loop."""
    ends = np.cumsum(lengths)
    return np.repeat(starts + lengths - ends, lengths) + np.arange(ends[-1] if len(ends) else 0)


def _by_position(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sentences (tokens ``starts[s]`` onwards, ``lengths`` > 0) in position-major order: ``(order, steps)``,
    ``order`` the sentences longest first and ``steps[l]`` the tokens at position ``l`` of the first
    ``len(steps[l])`` of them (those that have one), so that a per-sentence reduction is one elementwise operation on
    a prefix per position (``max_length`` of them) rather than one per sentence."""
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    held = np.searchsorted(-lengths, -np.arange(lengths[0] if len(lengths) else 0), side="left")  # lengths > l
    return order, [starts[:n] + position for position, n in enumerate(held.tolist())]


def _bag_max(values: np.ndarray, steps: Sequence[np.ndarray]) -> np.ndarray:
    """[sentences, X]: each sentence's maximum of the rows of ``values`` [U, X] that its tokens index, the sentences in
    :func:`_by_position` order (``steps[l]`` the rows of their tokens at position ``l``)."""
    out = values[steps[0]]
    for index in steps[1:]:
        np.maximum(out[:len(index)], values[index], out=out[:len(index)])
    return out


def maxsim(a: SentenceTokens, rows: np.ndarray, b: SentenceTokens, chunk_tokens: int = 1024) -> np.ndarray:
    """[len(rows), b.n] symmetric MaxSim of sentences ``rows`` of ``a`` against every sentence of ``b``
    (module docstring); 0 where either sentence has no token. ``rows``' tokens are taken about
    ``chunk_tokens`` at a time, fewer when ``b`` is large: a group spans at most :data:`MAX_BLOCK` token pairs
    (or one sentence's tokens against ``b``'s); :func:`maxsim_group_starts` says where.

    A token's similarities depend on its row alone (vector, hubness, language), and captions repeat rows (the same
    token): a group's product pairs its distinct rows with ``b``'s distinct rows once, each sentence's maxima are
    taken position by position (:func:`_by_position`: one elementwise maximum per token position, no loop over
    sentences), and the idf-weighted means add the same maxima in the same order as over a product of every token
    pair, so the scores are that product's (bit for bit where BLAS rounds the smaller product's entries as the
    larger's: OpenBLAS does, save for small products of a thousand entries or so)."""
    rows = np.asarray(rows, dtype=np.int64)
    if a.half_hub.shape[1] != b.half_hub.shape[1]:
        raise ValueError("maxsim: both bags need the same hubness (vocabulary, or per language over the same languages)")
    out = np.zeros((len(rows), b.n), dtype=np.float32)
    if not len(b.owner):
        return out
    # one product gives cos - r_a/2 - r_b/2: [v_a, -hub_a, -onehot_a] . [v_b, onehot_b, hub_b], where a token's hub
    # row holds its half-hubness among each language's tokens and the one-hots pick the other side's language
    right = _augmented(b.vectors, _language_onehot(b, slice(None)), b.half_hub)
    b_first, b_row = _distinct_rows(right)
    right = right[b_first]
    b_order, b_steps = _by_position(b.starts, np.diff(np.r_[b.starts, len(b.owner)]))
    b_steps = [b_row[tokens] for tokens in b_steps]
    b_has = b.owner[b.starts]
    start_of, picked, out_row, groups = _token_groups(a, rows, b, chunk_tokens)
    for first, last in groups:  # sentences of ``rows`` in groups of about chunk_tokens tokens
        group = picked[first:last]
        lengths = start_of[group + 1] - start_of[group]
        tok = _ranges(start_of[group], lengths)
        vectors = a.vectors[tok]
        left = _augmented(vectors, -a.half_hub[tok], -_language_onehot(a, tok))
        a_first, a_row = _distinct_rows(left)
        sims = left[a_first] @ right.T  # [distinct rows of the group, distinct rows of b]
        sub = SentenceTokens(vectors, np.repeat(np.arange(len(group)), lengths), a.weight[tok], a.half_hub[tok],
                             len(group), a.column[tok])
        best = _bag_max(np.ascontiguousarray(sims.T), b_steps)  # [b sentences longest first, distinct rows]
        forward = _weighted_means(best[:, a_row].T, sub, axis=0)  # [group, b sentences longest first]
        order, steps = _by_position(sub.starts, lengths)
        most = np.empty((len(group), len(right)), dtype=np.float32)
        most[order] = _bag_max(sims, [a_row[tokens] for tokens in steps])  # [group, distinct rows of b]
        backward = _weighted_means(most[:, b_row], b, axis=1)  # [group, b sentences]
        out[out_row[first:last, None], b_has[None, b_order]] = (forward + backward[:, b_order]) / 2.0
    return out


class LateInteraction:
    """MaxSim between sentence sets with ``encoder``'s token rows (``encoder.token_ids``/``token_table``), weighted by
    ``weight``. Its statistics come from the ``reference`` texts: their idf, and the rows' hubness with ``hub_k``
    neighbours per language among the tokens of each language's reference texts when ``languages`` (one per
    reference text) are given, else over the vocabulary (module docstring). Bags of texts in those languages
    (:meth:`bags`) are then scored against each other. ``source`` says in records what the reference texts are."""

    def __init__(self, encoder: Any, weight: float, reference: Sequence[str], hub_k: int = HUB_K,
                 languages: Sequence[str] | np.ndarray | None = None, source: str = "reference texts") -> None:
        if weight < 0:
            raise ValueError(f"the MaxSim weight must be >= 0, got {weight}")
        self.encoder, self.weight, self.hub_k, self.source = encoder, float(weight), hub_k, source
        self.table, vocabulary = encoder.token_table()
        self._reference_ids = encoder.token_ids(reference)
        self.idf = idf(self._reference_ids, len(self.table))
        self.languages: list[str] | None = None
        self._columns = None
        if languages is None:
            self.hubness = row_hubness(self.table, hub_k, rows=vocabulary)
        else:
            if len(languages) != len(self._reference_ids):
                raise ValueError(f"{len(languages)} languages for {len(self._reference_ids)} texts")
            names, self._columns = np.unique(np.asarray(languages).astype(str), return_inverse=True)
            self.languages = names.tolist()
            self.hubness = language_hubness(self.table, self._reference_ids, self._columns, hub_k, self.languages)

    def _language_columns(self, languages: Sequence[str] | np.ndarray | None) -> np.ndarray | None:
        if self.languages is None:
            return None
        if languages is None:
            raise ValueError("per-language hubness: give the texts' languages")
        languages = np.asarray(languages).astype(str)
        unknown = sorted(set(languages.tolist()) - set(self.languages))  # str, not np.str_ in the message
        if unknown:
            raise ValueError(f"languages {unknown} are not among the reference texts' {self.languages}")
        return np.searchsorted(self.languages, languages)

    def bags(self, texts: Sequence[str], languages: Sequence[str] | np.ndarray | None = None) -> SentenceTokens:
        """The token bags of ``texts`` (in ``languages``, one per text, with per-language hubness)."""
        return sentence_tokens(self.encoder.token_ids(texts), self.table, self.idf, self.hubness,
                               self._language_columns(languages))

    @cached_property
    def reference_bags(self) -> SentenceTokens:
        """The bags of the reference texts, from the token ids the statistics were counted on (built on first use)."""
        return sentence_tokens(self._reference_ids, self.table, self.idf, self.hubness, self._columns)

    def scorer(self, a: SentenceTokens, b: SentenceTokens) -> Callable[[np.ndarray], np.ndarray]:
        """``rows -> weight · maxsim(a, rows, b)``: scores of sentences ``rows`` of ``a`` against every one of ``b``."""
        return lambda rows: self.weight * maxsim(a, rows, b)

    @property
    def record(self) -> dict:
        """What a result record says of the scoring."""
        hubness = "vocabulary" if self.languages is None else "per language, among the reference texts' tokens"
        return {"weight": self.weight, "token_vectors": "input token embedding rows", "hub_k": self.hub_k,
                "hubness": hubness, "idf": "smoothed, over the reference texts", "reference": self.source}
