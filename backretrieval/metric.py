"""BackRetrieval (BkR), the ground-truth cross-lingual retrieval metric (XLR) and the CORR baseline.

Notation of the BackRetrieval paper (Fain et al. 2021, section 2). A source set Omega_S of text-image
pairs (T_S, I_S) and a target set Omega_T of pairs (T_T, I_T), with no correspondence
between them. ``f`` is the text model under evaluation and ``g`` the image similarity.
Here both similarities are cosines: every embedding row is L2-normalised and
f(a, b) = <a, b> on text embeddings, g(a, b) = <a, b> on image features (the paper takes
g as the cosine of CNN features, ResNet-50 last layer, see :mod:`backretrieval.images`).

BkR for a query (T_S^q, I_S^q), the four steps of the paper:

1. embed every target text with f;
2. retrieve T_T* = argmax_t f(T_S^q, T_T^t) (ties: lowest target index) and its image I_T*;
3. back-retrieve: rank every source image I_S by g(I_T*, I_S), descending;
4. rank_q = the rank of the query's own image I_S^q; BkR Recall@K = mean_q [rank_q <= K].

The query's own image competes with the *distinct* source images: when several source
texts describe the same picture (``src_image_ids``), that picture is ranked once, so the
query's siblings never push it down. Ties in g are handled by ``ties`` (see
:mod:`backretrieval.ranking`). If I_T* is the query's own picture (the source and target
sets share images) its rank is 1 (barring other copies of it): the retrieved text
describes the query's image, which is why the protocol keeps the two sets disjoint.

What the rank needs, and its cost: step 2 is an exact top-1 text search (faiss, one
float32 Nt x d pass per query block, never a full sort). Step 4 needs only
g(I_T*, I_S^q) (one dot product per query: the threshold) and how many distinct source
images beat it in the row g(I_T*, .), so one row per *distinct* retrieved target,
scored in float32 tiles and compared with the threshold; no sort and no N x N float64
matrix. Recall@K needs only rank_q <= K: with ``max_rank`` a row stops being scored once
all its queries have ``max_rank`` better images, which is most rows for weak models.

Beyond the paper: ``retrieval="csls"`` retrieves (and ranks, for XLR) by CSLS instead of
the cosine (:mod:`backretrieval.hubness`); ``approximate=True`` (or an
:class:`~backretrieval.approximate.ApproxConfig`) replaces the exact N x N text search by
faiss candidates (PCA + 4-bit codes) re-scored exactly, and counts better images (or
targets) only up to max(ks) (:mod:`backretrieval.approximate`); ``image_neighbours``
(:mod:`backretrieval.image_index`) turns step 4 into a lookup in lists computed once per
image set and reused across text models. Every result carries the
per-query ``hits`` of each Recall@K, which :mod:`backretrieval.uncertainty` resamples for
intervals and paired tests, and BkR's carries the ``hubness`` of its retrieval step.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import stats

from .approximate import ApproxConfig
from .bkr_steps import checked_image_side, checked_text_side, count_better_images, retrieve_targets
from .errors import BackRetrievalError, option
from .files import check_matrix, enough_for_k, is_whole, target_indices
from .hubness import DEFAULT_CSLS_K, hubness_stats
from .image_index import ImageNeighbours, SourceImageIndex
from .metric_checks import approx_config, censored_max_rank, check_recall_options
from .ranking import DEFAULT_BLOCK_BYTES, count_ranks, ranks_and_hits
from .renamed import renamed_keywords
from .retrieval import text_scorer
from .scorers import VectorScorer
from .uncertainty import corr_interval
from .vectors import l2_normalize

DEFAULT_KS = (1, 5, 10)


def _recall_dict(prefix: str, ks: tuple[int, ...], hits: dict[int, np.ndarray]) -> dict[str, float]:
    return {f"{prefix}@{k}": float(np.mean(hits[k])) if len(hits[k]) else float("nan") for k in ks}


def bkr_recall(
    src_text: np.ndarray | None,
    src_img: np.ndarray | None,
    tgt_text: np.ndarray | None,
    tgt_img: np.ndarray | None,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    src_image_ids: Sequence | None = None,
    image_sim: np.ndarray | None = None,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approximate: bool | ApproxConfig = False,
    image_neighbours: ImageNeighbours | None = None,
    text_sim: np.ndarray | None = None,
    queries: np.ndarray | None = None,
    source_index: SourceImageIndex | None = None,
    progress: bool = False,
    retrieved: np.ndarray | None = None,
) -> dict:
    """BackRetrieval Recall@K of a text model (paper section 2, steps 1-4; module doc).

    Args:
        src_text: ``(Ns, d)`` text embeddings f(T_S); row i describes source image row i.
        src_img: ``(Ns, D)`` image features of the source pairs (g = cosine), or None with ``image_sim``.
        tgt_text: ``(Nt, d)`` text embeddings f(T_T) of the target language.
        tgt_img: ``(Nt, D)`` image features of the target pairs, or None with ``image_sim``.
        ks: the K of Recall@K, several at once (with no more distinct source images than the largest K, a
            :class:`~backretrieval.errors.BackRetrievalWarning`: Recall@K is then 1 for any model).
        src_image_ids: optional ``(Ns,)`` image id per source row; rows sharing an id are one
            picture, ranked once (the query's own image is not pushed down by its siblings).
        image_sim: optional precomputed ``(Nt, Ns)`` image similarity g(I_T, I_S) (any g;
            array or memmap); replaces ``src_img``/``tgt_img`` (giving both is an error).
        ties: ``pessimistic`` | ``optimistic`` | ``expected`` (see :mod:`backretrieval.ranking`).
        max_rank: stop counting a query's rank once it exceeds ``max_rank`` (must be >=
            max(ks)); Recall@K is unchanged, ranks above are reported as ``max_rank + 1``.
            Much faster for weak models, whose queries quickly collect ``max_rank``
            better-scoring images. ``None`` (default): exact ranks for every query.
        block_bytes: memory for one tile of float32 image scores.
        retrieval: step 2 by ``"cosine"`` (the paper) or ``"csls"`` (hubness-corrected).
        csls_k: the CSLS neighbourhood size.
        approximate: the text search through faiss candidates re-scored exactly (True, or an
            :class:`ApproxConfig`) and ``max_rank = max(ks)``: ranks above it censored (another ``max_rank`` is
            refused). Without
            ``image_neighbours``, step 4 looks the retrieved targets up in ``pq`` lists built for their
            images only (``ApproxConfig.image_side``; the exact count with ``image_sim``).
        image_neighbours: step 4 by lookup in precomputed lists of these images
            (:func:`~backretrieval.image_index.image_neighbours`: built once per image set,
            reused across text models; exact when built with ``method="flat"``), with
            ``max_rank = max(ks)`` (another ``max_rank`` is refused). Needs ``src_img``/``tgt_img``.
        text_sim: optional precomputed ``(Ns, Nt)`` text similarity f(T_S, T_T), for an f that is no
            cosine of two embeddings (late interaction, CSLS with statistics from outside the two sets);
            replaces steps 1-2 (``src_text``/``tgt_text`` may then be None; ``retrieval`` and
            ``approximate`` do not apply). Step 2 retrieves each row's maximum (ties: lowest index).
            With ``queries``, its rows are those queries'.
        queries: optional source rows that query (e.g. a seeded sample): row indices, or a boolean mask of one
            entry per source row; the others still count among the source images every query is ranked against,
            so the mean hit over a sample of queries estimates the whole set's BkR without bias. Default: every
            source row.
        source_index: with ``approximate`` (``image_side="pq"``), a
            :class:`~backretrieval.image_index.SourceImageIndex` already built over the distinct source images
            (``pq``), reused instead of building one per call; one built over other images (their number,
            dimension or features) is refused (:func:`~backretrieval.image_index.check_source_index`), and so is
            one that would not be searched (without that mode, or with ``image_sim`` or ``image_neighbours``).
        progress: progress bars over the text search and the image ranks when they are big
            (:func:`~backretrieval.ranking.progress_bar`).
        retrieved: optional ``(Q,)`` index of each query's retrieved target, steps 1-2 done by the caller
            (``text_sim``'s row maxima, ties to the lowest index, found a block of rows at a time: no
            ``(Ns, Nt)`` matrix held); replaces ``text_sim`` and the text side as ``text_sim`` does, with the
            targets counted by ``tgt_img`` (or ``image_sim``). With ``queries``, one per query.

    Returns:
        ``{"bkr@K": float, ..., "hits": {K: (Q,) per-query hits}, "ranks": (Q,) rank of
        each query's image (1 = best), "retrieved": (Q,) index of the retrieved target
        text, "hubness": :func:`~backretrieval.hubness.hubness_stats` of the retrieval,
        "n_queries", "n_images", "ties", "retrieval", "approximate", "image_neighbours": the lists'
        method or None}``.
    """
    ks = check_recall_options(ks, ties, max_rank, retrieval, csls_k)
    approx = approx_config(approximate, ks)
    max_rank = censored_max_rank(max_rank, ks, option("approximate") if approx is not None else
                                 "image_neighbours" if image_neighbours is not None else None)
    text = checked_text_side(src_text, tgt_text, text_sim, retrieved, queries, src_img, tgt_img, image_sim, approx)
    image = checked_image_side(src_img, tgt_img, image_sim, image_neighbours, src_image_ids, text, max(ks), approx,
                               source_index)
    # after the shapes: a row-count error is the one message, not this warning before it
    enough_for_k("bkr_recall", len(image.rows), ks, "distinct source images", warn=True)
    found = retrieve_targets(text, retrieval, csls_k, approx, progress)  # steps 1-2: T_T* of each query
    # steps 3-4: rank of g(I_T*, I_S^q) among g(I_T*, I_S) over the distinct source images
    counts = count_better_images(image, found, ks, ties, max_rank, block_bytes, progress)
    ranks, hits = ranks_and_hits(counts, ks, ties, max_rank)
    out: dict[str, Any] = _recall_dict("bkr", ks, hits)
    out.update(hits=hits, ranks=ranks, retrieved=found, hubness=hubness_stats(found, text.n_tgt),
               n_queries=len(text.query_rows), n_images=len(image.rows), ties=ties,
               retrieval="given similarity" if text.text_sim is not None else
               "given targets" if text.retrieved is not None else retrieval,
               approximate=approx is not None,
               image_neighbours=None if image_neighbours is None else image_neighbours.method)
    return out


def xlr_recall(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    gt: Sequence[int] | np.ndarray | None = None,
    *,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approximate: bool | ApproxConfig = False,
    progress: bool = False,
) -> dict:
    """Ground-truth cross-lingual retrieval Recall@K (XLR, paper section 3.1).

    Each source text queries all target texts by cosine f (or CSLS with ``retrieval``);
    the rank of its true translation ``tgt_text[gt[q]]`` (default ``gt[q] = q``:
    row-aligned parallel sets) is counted blockwise, with the same tie policy and
    ``max_rank`` as :func:`bkr_recall`; ``approximate`` only sets ``max_rank = max(ks)``
    here, refusing another (and finds CSLS's neighbourhoods through a faiss candidate index): the count stays exact.
    With no more targets than the largest K, a :class:`~backretrieval.errors.BackRetrievalWarning` says that
    Recall@K is 1 for any model. ``progress``: a bar over the ranks when they are big.

    Returns ``{"xlr@K": float, ..., "hits": {K: (Ns,)}, "ranks": (Ns,), "n_queries",
    "n_targets", "ties", "retrieval", "approximate"}``.
    """
    ks = check_recall_options(ks, ties, max_rank, retrieval, csls_k)
    approx = approx_config(approximate, ks)
    # approximate: only "fewer than K better targets?", the exact count stopped at max(ks)
    max_rank = censored_max_rank(max_rank, ks, option("approximate") if approx is not None else None)
    src_text = check_matrix("src_text", src_text)
    tgt_text = check_matrix("tgt_text", tgt_text, dim=src_text.shape[1], dim_of="src_text")
    n_src, n_tgt = len(src_text), len(tgt_text)
    if gt is None:
        if n_tgt != n_src:
            raise BackRetrievalError(
                f"xlr_recall: without gt the sets must be row-aligned, got {n_src} sources and {n_tgt} targets"
            )
        gt = np.arange(n_src)
    gt = target_indices("gt", gt, n_src, n_tgt)
    enough_for_k("xlr_recall", n_tgt, ks, "target texts", warn=True)
    scorer = text_scorer(src_text, tgt_text, retrieval, csls_k, approx, progress=progress)
    counts = count_ranks(scorer, np.arange(n_src), gt, ties, max_rank, block_bytes, progress, "XLR ranks")
    ranks, hits = ranks_and_hits(counts, ks, ties, max_rank)
    out: dict[str, Any] = _recall_dict("xlr", ks, hits)
    out.update(hits=hits, ranks=ranks, n_queries=n_src, n_targets=n_tgt, ties=ties, retrieval=retrieval,
               approximate=approx is not None)
    return out


@renamed_keywords(max_pairs="corr_pairs")
def corr_score(
    src_text: np.ndarray,
    src_img: np.ndarray,
    tgt_text: np.ndarray,
    tgt_img: np.ndarray,
    *,
    corr_pairs: int = 1_000_000,
    seed: int = 0,
) -> float:
    """The CORR baseline (paper section 3.1): Spearman between text and image cosine distances.

    Over (source, target) pairs of the same sets as BkR: rho_Spearman(1 - f(T_S, T_T),
    1 - g(I_S, I_T)). All Ns*Nt pairs are used when there are at most ``corr_pairs``;
    otherwise ``corr_pairs`` pairs drawn uniformly (with replacement) with ``seed``. Distances that are all equal
    show no association: 0 (:func:`backretrieval.uncertainty.corr_interval`).
    """
    terms = corr_terms(src_text, src_img, tgt_text, tgt_img, corr_pairs=corr_pairs, seed=seed)
    if np.ptp(terms["text_dist"]) == 0 or np.ptp(terms["image_dist"]) == 0:  # no association (corr_interval)
        return 0.0
    return float(stats.spearmanr(terms["text_dist"], terms["image_dist"]).statistic)


def corr_terms(
    src_text: np.ndarray,
    src_img: np.ndarray,
    tgt_text: np.ndarray,
    tgt_img: np.ndarray,
    *,
    corr_pairs: int = 1_000_000,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """The pairs behind :func:`corr_score`: ``{"text_dist", "image_dist", "query"}``, each ``(P,)``.

    ``query`` is the source row of each pair, for the bootstrap over queries
    (:func:`backretrieval.uncertainty.corr_interval`).
    """
    if not is_whole(corr_pairs) or corr_pairs < 1:  # 2.5 was numpy's TypeError
        raise BackRetrievalError(f"corr: {option('corr_pairs')} must be an integer >= 1, got {corr_pairs}")
    src_text = check_matrix("src_text", src_text)
    tgt_text = check_matrix("tgt_text", tgt_text, dim=src_text.shape[1], dim_of="src_text")
    src_img = check_matrix("src_img", src_img, rows=len(src_text))
    tgt_img = check_matrix("tgt_img", tgt_img, rows=len(tgt_text), dim=src_img.shape[1], dim_of="src_img")
    n_s, n_t = len(src_text), len(tgt_text)
    if n_s * n_t <= corr_pairs:
        text_dist = 1.0 - (l2_normalize(src_text) @ l2_normalize(tgt_text).T).ravel()
        image_dist = 1.0 - (l2_normalize(src_img) @ l2_normalize(tgt_img).T).ravel()
        s_idx = np.repeat(np.arange(n_s), n_t)
    else:
        rng = np.random.default_rng(seed)
        s_idx = rng.integers(0, n_s, corr_pairs)
        t_idx = rng.integers(0, n_t, corr_pairs)
        text = VectorScorer(src_text, tgt_text)
        image = VectorScorer(src_img, tgt_img)
        text_dist = 1.0 - text.pairs(s_idx, t_idx)
        image_dist = 1.0 - image.pairs(s_idx, t_idx)
    return {"text_dist": text_dist, "image_dist": image_dist, "query": s_idx}


def corr_with_interval(
    src_text: np.ndarray,
    src_img: np.ndarray,
    tgt_text: np.ndarray,
    tgt_img: np.ndarray,
    *,
    corr_pairs: int = 1_000_000,
    bootstrap: int = 0,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """CORR (:func:`corr_score`) with its bootstrap interval over queries
    (:func:`backretrieval.uncertainty.corr_interval`; ``bootstrap`` replicates, at least one): ``{"value", ...}``."""
    terms = corr_terms(src_text, src_img, tgt_text, tgt_img, corr_pairs=corr_pairs, seed=seed)
    return corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], len(src_text), max(bootstrap, 1),
                         level, seed)

