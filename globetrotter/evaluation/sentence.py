"""Sentence translation by retrieval (Globetrotter paper, section 5.2; Fig. 7 and Fig. 9).

From the parallel test split, a fixed seeded sample of groups (default 200) is taken in
all M languages (200·M sentences). Every sentence is a query; its M−1 translations are
the positives. The score of a query is the share of its positives ranked in the top M−1
candidates by cosine similarity; the reported accuracy is that share over all queries, as
a fraction in [0, 1] (the paper plots percent). The per-language-pair matrix ``A[a, b]``
is the same share restricted to queries in language ``a`` and positives in language
``b``; ``A − Aᵀ`` is its asymmetry (Fig. 9).

The scores need not be cosines: any ``scores(rows) -> [len(rows), N]`` ranks the candidates
(:class:`~.scoring.SentenceScorer`: CSLS per language pair, late interaction, with their statistics
taken from reference texts other than the evaluated ones).

Candidates: docs/design.md section 7 ranks among all *other-language* sentences (the default,
``candidates="other-language"``); the paper's wording ("among all the 200M − 1 possible
options") also lets same-language sentences compete (``candidates="all"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Callable, Literal, Sequence

import numpy as np
import scipy.sparse as sp
from backretrieval.files import check_matrix, require_count
from backretrieval.uncertainty import bootstrap_weights, percentile_interval

from globetrotter.errors import UserError

from .procrustes import normalize_rows

Candidates = Literal["other-language", "all"]
# query row indices -> [len(rows), N] scores of those rows against every sentence (higher: nearer)
Scores = Callable[[np.ndarray], np.ndarray]


def cosine_scores(emb: Any) -> Scores:
    """``rows -> emb[rows] @ emb.T``: the cosines of L2-normalised rows, dense or ``scipy.sparse`` (exact)."""
    sparse = sp.issparse(emb)
    emb = sp.csr_matrix(emb, dtype=np.float32) if sparse else np.ascontiguousarray(emb, dtype=np.float32)
    emb_t = emb.T.tocsr() if sparse else emb.T

    def scores(rows: np.ndarray) -> np.ndarray:
        block = emb[rows] @ emb_t
        return block.toarray() if sparse else block

    return scores


@dataclass
class ParallelSet:
    """A sample of parallel test groups, flattened group-major: sentence ``i`` belongs to
    group ``groups[i]`` (an index into ``group_ids``) and language ``langs[i]``."""

    captions: list[str]
    langs: np.ndarray
    groups: np.ndarray
    group_ids: list[str]
    languages: list[str]
    image_ids: list[str] = field(default_factory=list)
    skipped_groups: int = 0
    split_images: frozenset[str] = frozenset()  # every caption's image id in the split read, sampled or not

    def __len__(self) -> int:
        return len(self.captions)


def parallel_set(
    metas: Sequence[dict],
    languages: Sequence[str] | None = None,
    n_groups: int | None = 200,
    seed: int = 0,
    where: str = "<split>",
) -> ParallelSet:
    """Select a seeded sample of complete parallel groups from caption metadata.

    ``metas`` are dicts with ``caption``, ``lang``, ``group`` (and ``image_id``), as
    ``data_prep.shards.read_captions`` returns them. A group may hold several captions per
    language: the first (in shard order) is taken. Groups lacking one of ``languages``
    (default: every language of the split) are skipped. Group ids are compared as exact
    strings (no hashing), so distinct ids never collide; a group that ties captions of
    different images is reported as a :class:`UserError` (colliding ids in the data).
    The sample is a function of (sorted group ids, ``seed``) only, not of shard order.
    ``split_images`` holds every caption's image id (a reference split must show none of them).
    """
    for name, value, what in (("metas", metas, "caption dicts (data_prep.shards.read_captions(split))"),
                              ("languages", languages, "language codes")):
        if isinstance(value, (str, bytes, PathLike)):  # a split's path was AttributeError: no .get; "en,de" its letters
            raise TypeError(f"{name}: expected a sequence of {what}, got one {type(value).__name__} "
                            f"({str(value)[:40]!r}); wrap it in a list")
    if n_groups is not None:  # 0 gave an empty set in silence, 2.5 or -1 numpy's error
        require_count(n_groups, "n_groups")
    require_count(seed, "seed", minimum=0)  # 1.5 or -1 was numpy's SeedSequence error
    first: dict[str, dict[str, dict]] = {}
    images: dict[str, set] = {}
    every_image: set[str] = set()
    for m in metas:
        every_image.add(str(m.get("image_id")))
        group = m.get("group")
        if group is None:
            continue
        group = str(group)
        per_lang = first.setdefault(group, {})
        per_lang.setdefault(m["lang"], m)
        images.setdefault(group, set()).add(str(m.get("image_id")))
    if not first:
        raise UserError(f"{where}: no caption has a 'group'; expected a parallel (test) split, its groups tying translations")
    collided = [g for g, ids in images.items() if len(ids) > 1]
    if collided:
        g = collided[0]
        raise UserError(
            f"{where}: group {g!r} ties captions of {len(images[g])} different images "
            f"({sorted(images[g])[:3]}); group ids must identify one image"
        )
    present = sorted({lang for per_lang in first.values() for lang in per_lang})
    languages = present if languages is None else list(dict.fromkeys(languages))  # a language given twice counts once
    unknown = [lang for lang in languages if lang not in present]
    if unknown:
        raise UserError(f"{where}: no caption in language(s) {unknown} (has {present})")
    if len(languages) < 2:
        raise UserError(f"{where}: a parallel set needs at least 2 languages, found {languages}")
    complete = sorted(g for g, per_lang in first.items() if all(lang in per_lang for lang in languages))
    if not complete:
        raise UserError(f"{where}: no group has a caption in every one of {languages}")
    n_incomplete = len(first) - len(complete)
    rng = np.random.default_rng(seed)
    if n_groups is not None and n_groups < len(complete):
        chosen = np.sort(rng.choice(len(complete), size=n_groups, replace=False))
        complete = [complete[i] for i in chosen]
    captions, langs, groups, image_ids = [], [], [], []
    for gi, g in enumerate(complete):
        for lang in languages:
            m = first[g][lang]
            captions.append(m["caption"])
            langs.append(lang)
            groups.append(gi)
            image_ids.append(str(m.get("image_id")))
    return ParallelSet(
        captions=captions,
        langs=np.array(langs),
        groups=np.array(groups, dtype=np.int64),
        group_ids=complete,
        languages=languages,
        image_ids=image_ids,
        skipped_groups=n_incomplete,
        split_images=frozenset(every_image),
    )


def _codes(values: Sequence | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact-value integer codes (``np.unique``): no hashing, so no collisions."""
    uniq, inv = np.unique(np.asarray(values), return_inverse=True)
    return uniq, inv.reshape(-1)


def _group_codes(values: Sequence | np.ndarray) -> np.ndarray:
    """Integer code of each group id, equal only for equal ids.

    Integer arrays go through ``np.unique``; anything else is coded by Python equality,
    because ``np.asarray`` would turn mixed ids such as ``1`` and ``"1"`` into the same
    string (and tuples into extra columns).
    """
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "iub":
        return np.unique(values, return_inverse=True)[1].reshape(-1)
    seen: dict = {}
    items = values.tolist() if isinstance(values, np.ndarray) else values
    return np.array([seen.setdefault(v, len(seen)) for v in items], dtype=np.int64)


def sentence_translation(
    emb: np.ndarray | Scores,
    langs: Sequence[str] | np.ndarray,
    groups: Sequence | np.ndarray,
    k: int | None = None,
    candidates: Candidates = "other-language",
    chunk_size: int = 1024,
    tie_seed: int | None = None,
) -> dict:
    """Sentence translation accuracy by retrieval (paper section 5.2).

    ``emb`` (N, D) sentence embeddings, dense (any array of finite numbers: ranked by cosine whatever the rows'
    norms) or a ``scipy.sparse`` matrix of L2-normalised rows (exact cosines over sparse vectors, e.g. the TF-IDF
    baseline), or a function ``scores(rows)``
    giving the ``[len(rows), N]`` scores of query ``rows`` against every sentence (higher is
    better; :class:`~.scoring.SentenceScorer`); ``langs`` (N,) language codes;
    ``groups`` (N,) group ids (any exact-comparable values) with at most one sentence per
    (group, language). For query ``i`` the candidates are every other sentence (other
    languages only by default); the top ``k`` (default M−1) by cosine similarity are
    compared with the query's translations (same group, other language).

    Returns a dict (shares are fractions in [0, 1]): ``accuracy`` (share of positives
    found in the top k, over all queries), ``chance`` (its expected value under a random
    ranking), ``matrix`` (M×M, row = query language, column = target language; diagonal
    NaN), ``asymmetry`` (``matrix − matrixᵀ``, Fig. 9), ``per_query_language`` and
    ``per_target_language``, ``languages``, ``k``, ``n_queries``, ``n_groups``, and per group
    ``group_hits`` and ``group_positives`` (for :func:`group_interval`).
    Memory is O(chunk_size · N); no N×N matrix is held.

    Ties: by default equal similarities are taken in numpy's partition order. With
    ``tie_seed`` the candidates are ranked in a seeded random order among equals, so a
    model that cannot tell candidates apart (e.g. TF-IDF across scripts: every cosine is
    0) scores at chance instead of by the layout of the sample.

    """
    if not callable(emb) and not sp.issparse(emb):  # a list, 1-D or non-finite values: one line, not numpy's; rows of
        emb = normalize_rows(check_matrix("emb", emb, vectors=False))  # any norm ranked by cosine, not dot product
    if k is not None:  # 0 or -1 scored 0 or 1.0, 1.5 as 1
        require_count(k, "k")
    scores = emb if callable(emb) else cosine_scores(emb)
    n = len(langs)
    languages, lang_idx = _codes(langs)
    group_idx = _group_codes(groups)
    if len(group_idx) != n or (not callable(emb) and emb.shape[0] != n):
        raise ValueError(f"emb has {n if callable(emb) else emb.shape[0]} rows but langs has {n} and groups "
                         f"{len(group_idx)}")
    n_lang, n_group = len(languages), int(group_idx.max()) + 1 if n else 0
    if n_lang < 2:
        raise ValueError(f"need at least 2 languages, got {[str(lang) for lang in languages]}")
    presence = np.zeros((n_group, n_lang), dtype=np.int64)
    np.add.at(presence, (group_idx, lang_idx), 1)
    if presence.max() > 1:
        g, l = np.argwhere(presence > 1)[0]
        raise ValueError(f"group #{g} has {presence[g, l]} sentences in {languages[l]!r}; keep one per language")
    if candidates not in ("other-language", "all"):
        raise ValueError(f"candidates must be 'other-language' or 'all', got {candidates!r}")
    k = n_lang - 1 if k is None else int(k)
    positives = presence.T @ presence  # [a, b]: groups holding both a and b = positives of a-queries in b
    np.fill_diagonal(positives, 0)
    lang_count = presence.sum(0)
    n_cand = (n - lang_count[lang_idx]) if candidates == "other-language" else np.full(n, n - 1)
    if (n_cand < k).any():
        raise ValueError(f"k={k} exceeds the number of candidates ({int(n_cand.min())})")

    order = np.random.default_rng(tie_seed).permutation(n) if tie_seed is not None else None
    hits = np.zeros((n_lang, n_lang), dtype=np.int64)
    group_hits = np.zeros(n_group, dtype=np.int64)
    for start in range(0, n, chunk_size):
        q = np.arange(start, min(start + chunk_size, n))
        sims = np.array(scores(q), dtype=np.float32)  # this chunk's own array
        if sims.shape != (len(q), n):
            raise ValueError(f"scores of {len(q)} rows have shape {sims.shape}, expected ({len(q)}, {n})")
        if candidates == "other-language":
            sims[lang_idx[q][:, None] == lang_idx[None, :]] = -np.inf
        sims[np.arange(len(q)), q] = -np.inf
        if order is None:
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        else:  # partition in a random column order, so equal similarities are taken at random
            top = order[np.argpartition(-sims[:, order], k - 1, axis=1)[:, :k]]
        hit = (group_idx[top] == group_idx[q][:, None]) & (lang_idx[top] != lang_idx[q][:, None])
        rows = np.broadcast_to(lang_idx[q][:, None], top.shape)
        np.add.at(hits, (rows[hit], lang_idx[top][hit]), 1)
        np.add.at(group_hits, np.broadcast_to(group_idx[q][:, None], top.shape)[hit], 1)

    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = hits / positives
        per_query = hits.sum(1) / positives.sum(1)
        per_target = hits.sum(0) / positives.sum(0)
    np.fill_diagonal(matrix, np.nan)
    per_group = presence.sum(1)  # languages of each group: m(m - 1) ordered translation pairs
    pos_per_query = per_group[group_idx] - 1  # each query's translations: its group's other languages
    chance = float((pos_per_query * np.minimum(1.0, k / n_cand)).sum() / max(pos_per_query.sum(), 1))
    return {
        "accuracy": float(hits.sum() / max(positives.sum(), 1)),
        "chance": chance,
        "matrix": matrix,
        "asymmetry": matrix - matrix.T,
        "per_query_language": dict(zip(languages.tolist(), per_query.tolist())),
        "per_target_language": dict(zip(languages.tolist(), per_target.tolist())),
        "languages": languages.tolist(),
        "k": k,
        "candidates": candidates,
        "n_queries": int(n),
        "n_groups": int(n_group),
        "group_hits": group_hits,
        "group_positives": per_group * (per_group - 1),
    }


def _accuracy_replicates(hits: np.ndarray, positives: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """The accuracy (hits over positives) of each bootstrap replicate of the groups; the same replicates for any two
    results of the same groups and ``seed`` (paired)."""
    hits, positives = np.asarray(hits, np.float64), np.asarray(positives, np.float64)
    return np.concatenate([(w @ hits) / np.maximum(w @ positives, 1.0)
                           for w in bootstrap_weights(len(hits), n_boot, seed)])


def group_interval(group_hits: np.ndarray, group_positives: np.ndarray, n_boot: int = 1000, level: float = 0.95,
                   seed: int = 0) -> dict[str, float]:
    """Bootstrap interval of the accuracy over the evaluated groups (the images: a group's queries share their
    image and their errors, so the group is the unit resampled): ``{"lo", "hi", "level", "replicates"}``, from
    :func:`sentence_translation`'s ``group_hits`` and ``group_positives``."""
    lo, hi = percentile_interval(_accuracy_replicates(group_hits, group_positives, n_boot, seed), level)
    return {"lo": lo, "hi": hi, "level": level, "replicates": n_boot}


def ratio_interval(top: tuple[np.ndarray, np.ndarray], bottom: tuple[np.ndarray, np.ndarray], n_boot: int = 1000,
                   level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """The ratio of two models' accuracies on the same groups, with a paired bootstrap interval over the groups
    (each replicate draws the same groups for both): ``{"ratio", "lo", "hi", "level", "replicates"}``, ``inf`` where
    the bottom model finds nothing (``nan`` where neither does). ``top`` and ``bottom``: each model's per-group ``(hits, positives)``, rows in the
    same group order."""
    if len(top[0]) != len(bottom[0]):
        raise ValueError(f"{len(top[0])} groups against {len(bottom[0])}: a paired interval needs the same groups")
    accuracy = [float(np.sum(hits) / max(np.sum(positives), 1)) for hits, positives in (top, bottom)]
    value = accuracy[0] / accuracy[1] if accuracy[1] > 0 else float("inf") if accuracy[0] > 0 else float("nan")
    below = _accuracy_replicates(*bottom, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # a replicate where the bottom model finds nothing: inf
        reps = np.where(below > 0, _accuracy_replicates(*top, n_boot, seed) / below, np.inf)
    # quantiles without interpolation, which an inf replicate would turn into nan
    lo, hi = (float(q) for q in np.quantile(reps, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf"))
    return {"ratio": value, "lo": lo, "hi": hi, "level": level, "replicates": n_boot}
