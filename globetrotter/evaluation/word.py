"""Word translation by retrieval (Globetrotter paper, section 5.3; MUSE).

Ground truth comes from a lexicon or the paper's tf-idf builder (:mod:`.word_dictionary`); words are dictionary keys
with vectors (:mod:`.word_keys`). Metrics, per ordered language pair (both directions): Recall@10 over dictionary
pairs (paper Fig. 5: share of pairs whose target is in the source word's 10 nearest target
words), with and without pairs whose two tokens are identical; and MUSE's P@1/5/10 per
unique source word (a hit if any valid translation is in the top k), ranked by nearest
neighbour (cosine) or CSLS (Lample et al., 2018b):

    CSLS(x, y) = 2 cos(x, y) − r_T(x) − r_S(y),

``r_T(x)`` the mean cosine of ``x`` to its 10 nearest target words, ``r_S(y)`` of ``y``
to its 10 nearest source words. Nearest neighbours use faiss and query chunks in
float32: no vocabulary × vocabulary matrix is ever held.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from backretrieval.files import require_count, require_sequence
from backretrieval.hubness import neighbourhood_radii
from backretrieval.metric_checks import check_ks

from .procrustes import knn, normalize_rows, refine_multi, refine_pairwise, word_vectors

Method = Literal["nn", "csls"]


def rank_word_vectors(
    queries: np.ndarray,
    targets: np.ndarray,
    k: int = 10,
    method: Method = "nn",
    sources: np.ndarray | None = None,
    csls_k: int = 10,
    chunk_size: int = 512,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k target rows for each query row: ``(idx, scores)`` each (n_queries, k), best first.

    ``queries``/``targets``/``sources`` are L2-normalised (n, d) float arrays. ``method="nn"``
    ranks by cosine (faiss, exact); ``"csls"`` by CSLS, where ``r_S`` is taken over
    ``sources`` (the whole source vocabulary; defaults to ``queries``). Memory: a
    (chunk_size, n_targets) float32 block at a time.
    """
    k = require_count(k, "k")  # 0 ranked nothing, -1 every target, in silence
    queries = np.ascontiguousarray(word_vectors("queries", queries), dtype=np.float32)
    targets = np.ascontiguousarray(word_vectors("targets", targets, queries.shape[1], "queries"), dtype=np.float32)
    k = min(k, len(targets))
    if method == "nn":
        scores, idx = knn(queries, targets, k)
        return idx, scores
    if method != "csls":
        raise ValueError(f"method must be 'nn' or 'csls', got {method!r}")
    require_count(csls_k, "csls_k")
    require_count(chunk_size, "chunk_size")
    sources = queries if sources is None else np.ascontiguousarray(
        word_vectors("sources", sources, queries.shape[1], "queries"), dtype=np.float32)  # a NaN row: every score NaN
    r_tgt_of_query = neighbourhood_radii(queries, targets, min(csls_k, len(targets)))  # r_T(x)
    r_src_of_target = neighbourhood_radii(targets, sources, min(csls_k, len(sources)))  # r_S(y)
    idx = np.empty((len(queries), k), dtype=np.int64)
    out = np.empty((len(queries), k), dtype=np.float32)
    for start in range(0, len(queries), chunk_size):
        q = slice(start, start + chunk_size)
        block = 2.0 * (queries[q] @ targets.T) - r_src_of_target[None, :] - r_tgt_of_query[q, None]
        part = np.argpartition(-block, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(block, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        idx[q] = np.take_along_axis(part, order, axis=1)
        out[q] = np.take_along_axis(vals, order, axis=1)
    return idx, out


@dataclass
class WordSpace:
    """The candidate words of one language and their L2-normalised embeddings (row i = words[i])."""

    words: list[str]
    emb: np.ndarray

    def __post_init__(self) -> None:
        require_sequence(self.words, "words", "words")  # "abc" was the words 'a', 'b', 'c'
        self.emb = normalize_rows(word_vectors("emb", self.emb))
        if len(self.emb) != len(self.words):  # extra rows were candidates no word names, fewer an IndexError
            raise ValueError(f"emb has {len(self.emb)} rows but words has {len(self.words)}; expected one per word")
        self.index = {w: i for i, w in enumerate(self.words)}


def _subset_scores(top: np.ndarray, src_idx: np.ndarray, tgt_idx: np.ndarray, ks: Sequence[int], recall_k: int) -> dict:
    """Recall@recall_k over pairs and P@k per unique source word, from the top lists of each source."""
    if len(src_idx) == 0:
        return {"n_pairs": 0, "n_sources": 0, f"recall@{recall_k}": float("nan"), **{f"precision@{k}": float("nan") for k in ks}}
    uniq, inv = np.unique(src_idx, return_inverse=True)
    rank_hit = top[src_idx] == tgt_idx[:, None]  # (n_pairs, K) position of the pair's target
    pair_hit = rank_hit[:, :recall_k].any(axis=1)
    out = {"n_pairs": int(len(src_idx)), "n_sources": int(len(uniq)), f"recall@{recall_k}": float(pair_hit.mean())}
    for k in ks:
        hit = np.zeros(len(uniq), dtype=bool)
        np.logical_or.at(hit, inv.reshape(-1), rank_hit[:, :k].any(axis=1))
        out[f"precision@{k}"] = float(hit.mean())
    return out


def word_translation_scores(
    src: WordSpace,
    tgt: WordSpace,
    pairs: Sequence[tuple[str, str]],
    method: Method = "nn",
    ks: Sequence[int] = (1, 5, 10),
    recall_k: int = 10,
    csls_k: int = 10,
) -> dict:
    """Recall@10 (paper) and P@k (MUSE) of source→target word translation for one direction.

    ``pairs`` are the ground-truth ``(src_word, tgt_word)``; pairs with a word missing
    from a space are counted in ``coverage`` and left out. Returns ``{"all": {...},
    "no_identical": {...}, "coverage", "chance_recall"}`` (fractions in [0, 1]); the
    ``no_identical`` subset drops pairs whose two strings are equal (paper Fig. 5, right).
    """
    ks, recall_k = check_ks(ks), require_count(recall_k, "recall_k")  # recall@0 was 0, recall@-1 1.0, in silence
    known = [(src.index[s], tgt.index[t], s == t) for s, t in pairs if s in src.index and t in tgt.index]
    coverage = len(known) / max(len(pairs), 1)
    result: dict[str, float | dict] = {"coverage": coverage,
                                       "chance_recall": min(1.0, recall_k / max(len(tgt.words), 1)),
                                       "n_targets": len(tgt.words)}
    if not known:
        return {**result, "all": _subset_scores(np.zeros((0, 1)), np.array([]), np.array([]), ks, recall_k),
                "no_identical": _subset_scores(np.zeros((0, 1)), np.array([]), np.array([]), ks, recall_k)}
    s_idx, t_idx, same = (np.array(v) for v in zip(*known))
    queries = np.unique(s_idx)
    kmax = max(max(ks), recall_k)
    top_q, _ = rank_word_vectors(src.emb[queries], tgt.emb, kmax, method, sources=src.emb, csls_k=csls_k)
    top = np.full((len(src.words), top_q.shape[1]), -1, dtype=np.int64)
    top[queries] = top_q
    result["all"] = _subset_scores(top, s_idx, t_idx, ks, recall_k)
    result["no_identical"] = _subset_scores(top, s_idx[~same], t_idx[~same], ks, recall_k)
    return result


PROCRUSTES_K, PROCRUSTES_ITER = 5, 10
"""Procrustes refinement's defaults: mutual nearest neighbours for anchors (the paper's 5), rounds."""


def word_translation(
    spaces: Mapping[str, WordSpace],
    dictionaries: Mapping[tuple[str, str], Sequence[tuple[str, str]]],
    method: Method = "nn",
    procrustes: Literal["none", "pairwise", "multi"] = "none",
    ks: Sequence[int] = (1, 5, 10),
    recall_k: int = 10,
    csls_k: int = 10,
    procrustes_k: int = PROCRUSTES_K,
    procrustes_iter: int = PROCRUSTES_ITER,
) -> dict:
    """Word translation over every ordered language pair that has a dictionary.

    ``spaces[lang]`` candidate words and embeddings per language; ``dictionaries[(a, b)]``
    ground-truth pairs (give both directions, see :func:`~.word_dictionary.both_directions`). With
    ``procrustes="pairwise"`` each source space is first mapped onto the target by
    iterated Procrustes (:func:`~.procrustes.refine_pairwise`); with ``"multi"`` every
    language gets one map into a shared space (:func:`~.procrustes.refine_multi`).
    Returns per-pair results, the recall matrix (row = source, column = target)
    with and without identical tokens, averages over pairs and the Procrustes logs.
    """
    ks, recall_k = check_ks(ks), require_count(recall_k, "recall_k")
    if procrustes != "none":
        require_count(procrustes_k, "procrustes_k")
    languages = sorted({lang for pair in dictionaries for lang in pair if lang in spaces})
    mapped = dict(spaces)
    logs: dict = {}
    if procrustes == "multi":
        res = refine_multi([spaces[l].emb for l in languages], k=procrustes_k, n_iter=procrustes_iter)
        mapped = {l: WordSpace(spaces[l].words, spaces[l].emb @ m.astype(np.float32)) for l, m in zip(languages, res.maps)}
        logs["multi"] = res.log
    elif procrustes not in ("none", "pairwise"):
        raise ValueError(f"procrustes must be 'none', 'pairwise' or 'multi', got {procrustes!r}")
    per_pair = {}
    n = len(languages)
    pos = {l: i for i, l in enumerate(languages)}
    matrix = np.full((n, n), np.nan)
    matrix_noid = np.full((n, n), np.nan)
    for (a, b), pairs in sorted(dictionaries.items()):
        if a not in pos or b not in pos or a == b:
            continue
        src = mapped[a]
        if procrustes == "pairwise":
            pair_res = refine_pairwise(spaces[a].emb, spaces[b].emb, k=procrustes_k, n_iter=procrustes_iter)
            src = WordSpace(spaces[a].words, spaces[a].emb @ pair_res.w.astype(np.float32))
            logs[f"{a}-{b}"] = pair_res.log
        scores = word_translation_scores(src, mapped[b], pairs, method, ks, recall_k, csls_k)
        per_pair[f"{a}-{b}"] = scores
        matrix[pos[a], pos[b]] = scores["all"][f"recall@{recall_k}"]
        matrix_noid[pos[a], pos[b]] = scores["no_identical"][f"recall@{recall_k}"]

    def mean_of(subset: str, key: str) -> float:
        vals = [p[subset][key] for p in per_pair.values() if p[subset]["n_pairs"]]
        return float(np.mean(vals)) if vals else float("nan")

    summary = {}
    for subset in ("all", "no_identical"):
        suffix = "" if subset == "all" else "_no_identical"
        summary[f"recall@{recall_k}{suffix}"] = mean_of(subset, f"recall@{recall_k}")
        for k in ks:
            summary[f"precision@{k}{suffix}"] = mean_of(subset, f"precision@{k}")
    return {
        **summary,
        "method": method,
        "procrustes": procrustes,
        "languages": languages,
        "matrix": matrix,
        "matrix_no_identical": matrix_noid,
        "pairs": per_pair,
        "procrustes_log": logs,
    }
