"""Sentence translation by retrieval (Globetrotter paper, section 5.2; Fig. 7 and Fig. 9).

From the parallel test split, a fixed seeded sample of groups (default 200) is taken in
all M languages (200·M sentences). Every sentence is a query; its M−1 translations are
the positives. The score of a query is the share of its positives ranked in the top M−1
candidates by cosine similarity; the reported accuracy is that share over all queries, as
a fraction in [0, 1] (the paper plots percent). The per-language-pair matrix ``A[a, b]``
is the same share restricted to queries in language ``a`` and positives in language
``b``; ``A − Aᵀ`` is its asymmetry (Fig. 9).

Hubness: with ``retrieval="csls"`` candidates are ranked by CSLS (Conneau et al., 2018) instead of
cosine. CSLS is defined for one language pair: query ``x`` (language a) and candidate ``y`` (language
b) score ``2 cos(x, y) − r_b(x) − r_a(y)``, where ``r_b(x)`` is the mean similarity of ``x`` to its K
nearest sentences *of language b*. Here the candidates of one query span several languages, so the
query's term differs between them and is kept (:func:`csls_radii`, ``sentence_translation(csls_radii=)``):
a query whose neighbourhood is denser in one target language (a better-estimated language, whose
sentences sit close to everything) no longer fills its top k with that language. The neighbourhoods are
taken over the evaluated sentences themselves or over another, non-parallel pool (a val split's
captions). :func:`csls_penalty` is the earlier, pooled form: only the candidate's term, its neighbours
drawn from all other languages together.

Candidates: DESIGN.md section 7 ranks among all *other-language* sentences (the default,
``candidates="other-language"``); the paper's wording ("among all the 200M − 1 possible
options") also lets same-language sentences compete (``candidates="all"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import numpy as np
import scipy.sparse as sp

from globetrotter.errors import UserError

Candidates = Literal["other-language", "all"]
# query row indices -> [len(rows), n candidates] scores added to the cosines (e.g. late interaction)
ExtraScores = Callable[[np.ndarray], np.ndarray]


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
    """
    first: dict[str, dict[str, dict]] = {}
    images: dict[str, set] = {}
    for m in metas:
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
    if languages is None:
        languages = sorted({lang for per_lang in first.values() for lang in per_lang})
    languages = list(languages)
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


def _top_k_mean(queries, base_t, query_langs: np.ndarray, base_langs: np.ndarray, k: int,
                chunk_size: int = 1024, extra_scores: ExtraScores | None = None) -> np.ndarray:
    """Mean of each query row's ``k`` highest cosines (plus ``extra_scores``) to the base rows of *other* languages
    (dense or sparse rows; ``base_t`` is the base transposed). When base and queries are the same rows, a row's own
    entry is of its language, so it is left out too."""
    n = queries.shape[0]
    out = np.empty(n, dtype=np.float32)
    for start in range(0, n, chunk_size):
        q = np.arange(start, min(start + chunk_size, n))
        sims = queries[q] @ base_t
        sims = sims.toarray() if sp.issparse(sims) else np.asarray(sims)
        if extra_scores is not None:
            sims += extra_scores(q)
        sims[query_langs[q][:, None] == base_langs[None, :]] = -np.inf
        out[q] = np.partition(sims, sims.shape[1] - k, axis=1)[:, -k:].mean(axis=1)
    return out


def _with_pool(emb, langs, pool, pool_langs) -> tuple:
    """``emb`` and ``pool`` as float32 (CSR when sparse, else contiguous) with their languages as strings; the pool
    defaults to ``emb`` itself. Checks that the pool's languages and widths match."""
    def as_rows(x):
        return sp.csr_matrix(x, dtype=np.float32) if sp.issparse(x) else np.ascontiguousarray(x, dtype=np.float32)

    emb, langs = as_rows(emb), np.asarray(langs).astype(str)
    if pool is None:
        return emb, langs, emb, langs
    if pool_langs is None or len(pool_langs) != pool.shape[0]:
        raise ValueError(f"pool has {pool.shape[0]} rows but {0 if pool_langs is None else len(pool_langs)} languages")
    pool = as_rows(pool)
    if pool.shape[1] != emb.shape[1]:
        raise ValueError(f"pool rows have {pool.shape[1]} dims, embeddings {emb.shape[1]}")
    return emb, langs, pool, np.asarray(pool_langs).astype(str)


def csls_penalty(
    emb: np.ndarray,
    langs: Sequence[str] | np.ndarray,
    k: int = 10,
    pool: np.ndarray | None = None,
    pool_langs: Sequence[str] | np.ndarray | None = None,
    extra_scores: ExtraScores | None = None,
) -> np.ndarray:
    """``r(y)`` of every row for CSLS ranking (Conneau et al., 2018): the mean cosine of row ``y`` to its ``k``
    nearest rows of other languages, in ``pool`` (L2-normalised rows with languages ``pool_langs``; default:
    ``emb`` itself). CSLS scores a query ``x`` and candidate ``y`` by ``2 cos(x, y) − r(x) − r(y)``; for one
    query only ``r(y)`` changes the ranking, so :func:`sentence_translation` subtracts ``r(y) / 2`` from the
    cosines (``candidate_penalty``). A pool from another split (val captions, which are not parallel) keeps
    the test set out of the correction. ``extra_scores(rows)`` [len(rows), pool rows], when given, is added to
    the cosines, as :func:`sentence_translation` adds it."""
    emb, langs, pool, pool_langs = _with_pool(emb, langs, pool, pool_langs)
    others = [int((pool_langs != lang).sum()) for lang in np.unique(langs)]
    if others and min(others) < k:
        raise ValueError(f"csls k={k} exceeds the other-language pool rows of some language ({min(others)})")
    return _top_k_mean(emb, pool.T.tocsr() if sp.issparse(pool) else pool.T, langs, pool_langs, k,
                       extra_scores=extra_scores)


def csls_radii(
    emb,
    langs: Sequence[str] | np.ndarray,
    k: int = 10,
    pool=None,
    pool_langs: Sequence[str] | np.ndarray | None = None,
    extra_scores: ExtraScores | None = None,
    chunk_size: int = 1024,
) -> np.ndarray:
    """``[N, M]`` CSLS neighbourhood radii for ranking across several languages: entry ``[x, j]`` is ``r_j(x)``, the
    mean of row ``x``'s ``k`` highest cosines (plus ``extra_scores``) to the ``pool`` rows of language ``j``, for
    the ``M`` languages of ``langs`` in sorted order (the columns of :func:`sentence_translation`'s matrix). The pool
    defaults to ``emb`` itself, where a row is never its own neighbour; ``pool`` (L2-normalised rows in languages
    ``pool_langs``, dense or sparse like ``emb``) takes the neighbourhoods from another split instead.
    :func:`sentence_translation` with ``csls_radii`` ranks candidate ``y`` of query ``x`` by
    ``cos(x, y) − r_{lang y}(x) / 2 − r_{lang x}(y) / 2``: CSLS of the pair's two languages."""
    own = pool is None
    emb, langs, pool, pool_langs = _with_pool(emb, langs, pool, pool_langs)
    languages = np.unique(langs)
    columns = [np.flatnonzero(pool_langs == lang) for lang in languages]
    for lang, cols in zip(languages, columns):
        if len(cols) - own < k:  # a row of its own language is not its own neighbour
            raise ValueError(f"csls k={k} exceeds the pool's {len(cols)} rows in {lang!r}")
    pool_t = pool.T.tocsr() if sp.issparse(pool) else pool.T
    n = emb.shape[0]
    out = np.empty((n, len(languages)), dtype=np.float32)
    for start in range(0, n, chunk_size):
        q = np.arange(start, min(start + chunk_size, n))
        sims = emb[q] @ pool_t
        sims = sims.toarray() if sp.issparse(sims) else np.asarray(sims, dtype=np.float32)
        if extra_scores is not None:
            sims += extra_scores(q)
        if own:
            sims[np.arange(len(q)), q] = -np.inf
        for j, cols in enumerate(columns):
            block = sims[:, cols]
            out[q, j] = np.partition(block, block.shape[1] - k, axis=1)[:, -k:].mean(axis=1)
    return out


def sentence_translation(
    emb: np.ndarray,
    langs: Sequence[str] | np.ndarray,
    groups: Sequence | np.ndarray,
    k: int | None = None,
    candidates: Candidates = "other-language",
    chunk_size: int = 1024,
    tie_seed: int | None = None,
    candidate_penalty: np.ndarray | None = None,
    extra_scores: ExtraScores | None = None,
    csls_radii: np.ndarray | None = None,
) -> dict:
    """Sentence translation accuracy by retrieval (paper section 5.2).

    ``emb`` (N, D) L2-normalised sentence embeddings, dense or a ``scipy.sparse`` matrix
    (exact cosines over sparse vectors, e.g. the TF-IDF baseline); ``langs`` (N,) language codes;
    ``groups`` (N,) group ids (any exact-comparable values) with at most one sentence per
    (group, language). For query ``i`` the candidates are every other sentence (other
    languages only by default); the top ``k`` (default M−1) by cosine similarity are
    compared with the query's translations (same group, other language).

    Returns a dict (shares are fractions in [0, 1]): ``accuracy`` (share of positives
    found in the top k, over all queries), ``chance`` (its expected value under a random
    ranking), ``matrix`` (M×M, row = query language, column = target language; diagonal
    NaN), ``asymmetry`` (``matrix − matrixᵀ``, Fig. 9), ``per_query_language`` and
    ``per_target_language``, ``languages``, ``k``, ``n_queries``, ``n_groups``.
    Memory is O(chunk_size · N); no N×N matrix is held.

    Ties: by default equal similarities are taken in numpy's partition order. With
    ``tie_seed`` the candidates are ranked in a seeded random order among equals, so a
    model that cannot tell candidates apart (e.g. TF-IDF across scripts: every cosine is
    0) scores at chance instead of by the layout of the sample.

    ``candidate_penalty`` (N,) is subtracted from every cosine to that candidate: ``csls_penalty(...) / 2``
    ranks by CSLS in its pooled form. ``csls_radii`` (N, M) (:func:`csls_radii`) ranks by the CSLS of each query's
    and candidate's two languages: ``r_{lang y}(x) / 2 + r_{lang x}(y) / 2`` is subtracted. ``extra_scores(rows)``
    [len(rows), N], when given, is added to the cosines of the query ``rows`` (:func:`.late_interaction.scorer`:
    MaxSim over token vectors).
    """
    sparse = sp.issparse(emb)
    emb = sp.csr_matrix(emb, dtype=np.float32) if sparse else np.ascontiguousarray(emb, dtype=np.float32)
    emb_t = emb.T.tocsr() if sparse else emb.T
    n = emb.shape[0]
    languages, lang_idx = _codes(langs)
    group_idx = _group_codes(groups)
    if len(lang_idx) != n or len(group_idx) != n:
        raise ValueError(f"emb has {n} rows but langs has {len(lang_idx)} and groups {len(group_idx)}")
    n_lang, n_group = len(languages), int(group_idx.max()) + 1 if n else 0
    if n_lang < 2:
        raise ValueError(f"need at least 2 languages, got {list(languages)}")
    presence = np.zeros((n_group, n_lang), dtype=np.int64)
    np.add.at(presence, (group_idx, lang_idx), 1)
    if presence.max() > 1:
        g, l = np.argwhere(presence > 1)[0]
        raise ValueError(f"group #{g} has {presence[g, l]} sentences in {languages[l]!r}; keep one per language")
    if candidate_penalty is not None:
        candidate_penalty = np.asarray(candidate_penalty, dtype=np.float32).reshape(-1)
        if len(candidate_penalty) != n:
            raise ValueError(f"candidate_penalty has {len(candidate_penalty)} values for {n} rows")
    if csls_radii is not None:
        csls_radii = np.asarray(csls_radii, dtype=np.float32)
        if csls_radii.shape != (n, n_lang):
            raise ValueError(f"csls_radii has shape {csls_radii.shape}, expected ({n}, {n_lang}): one radius per row "
                             f"and language")
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
    for start in range(0, n, chunk_size):
        q = np.arange(start, min(start + chunk_size, n))
        sims = (emb[q] @ emb_t).toarray() if sparse else emb[q] @ emb_t
        if extra_scores is not None:
            sims += extra_scores(q)
        if candidate_penalty is not None:
            sims -= candidate_penalty[None, :]  # sims is this chunk's own array
        if csls_radii is not None:  # r_{lang y}(x) / 2 + r_{lang x}(y) / 2
            sims -= (csls_radii[q][:, lang_idx] + csls_radii[:, lang_idx[q]].T) / 2.0
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

    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = hits / positives
        per_query = hits.sum(1) / positives.sum(1)
        per_target = hits.sum(0) / positives.sum(0)
    np.fill_diagonal(matrix, np.nan)
    pos_per_query = positives[lang_idx].sum(1)  # positives of each query
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
    }
