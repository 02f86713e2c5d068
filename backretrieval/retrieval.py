"""Step 2 of BkR (and the XLR scores): which target text each query retrieves, and by what score.

Two criteria (``retrieval``): ``"cosine"`` (the paper) and ``"csls"`` (cross-domain
similarity local scaling, :mod:`backretrieval.hubness`), each exact (faiss flat search)
or approximate (:mod:`backretrieval.approximate`: faiss candidates re-scored exactly).
"""
from __future__ import annotations

import numpy as np

from .approximate import ANNIndex, ApproxConfig, approx_nearest, approx_top_mean
from .errors import BackRetrievalError, option
from .files import is_whole
from .hubness import DEFAULT_CSLS_K, RETRIEVALS, CSLSScorer, augment_for_csls, csls_penalty
from .ranking import nearest_neighbor
from .scorers import Scorer, VectorScorer


def check_retrieval(retrieval: str, csls_k: int) -> None:
    """One-line errors for a bad retrieval criterion or CSLS neighbourhood."""
    if retrieval not in RETRIEVALS:
        raise BackRetrievalError(f"{option('retrieval')}: expected one of {', '.join(RETRIEVALS)}, got {retrieval!r}")
    if not is_whole(csls_k) or csls_k < 1:  # 2.5 was taken
        raise BackRetrievalError(f"{option('csls_k')}: expected a positive number of neighbours, got {csls_k}")


def text_scorer(
    queries: np.ndarray,
    targets: np.ndarray,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approx: ApproxConfig | None = None,
    query_index: ANNIndex | None = None,
    progress: bool = False,
) -> Scorer:
    """Scorer of queries (rows) against targets (columns) under ``retrieval``.

    For CSLS the targets' penalty ``r_S`` (mean cosine to their ``csls_k`` nearest queries)
    is computed exactly (``progress``: a bar when that is big), or from an index over the queries in approximate mode.
    """
    if retrieval == "cosine":
        return VectorScorer(queries, targets)
    if approx is None or approx.index == "exact":
        penalty = csls_penalty(targets, queries, csls_k, progress)
    else:
        index = query_index or ANNIndex(queries, approx)
        penalty = approx_top_mean(targets, index, VectorScorer(targets, queries), csls_k, approx.candidates)
    return CSLSScorer(queries, targets, penalty)


def retrieve(
    queries: np.ndarray,
    targets: np.ndarray,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approx: ApproxConfig | None = None,
    rows: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Index of the retrieved target for each query, ``(Q,)`` int64 (ties: lowest index). ``rows``: only these
    queries retrieve (CSLS's target term still reads every query); default all. ``progress``: a bar over the
    search when it is big."""
    check_retrieval(retrieval, csls_k)
    asking = queries if rows is None else queries[rows]
    if approx is None or approx.index == "exact":
        if retrieval == "cosine":
            return nearest_neighbor(asking, targets, progress=progress)
        csls = CSLSScorer(queries, targets, csls_penalty(targets, queries, csls_k, progress))  # text_scorer's, exact
        q, t = augment_for_csls(asking, targets, csls.half_penalty * 2)
        return nearest_neighbor(q, t, normalize=False, progress=progress)
    target_index = ANNIndex(targets, approx)
    scorer = text_scorer(queries, targets, retrieval, csls_k, approx)
    return approx_nearest(asking, target_index, scorer, approx.candidates, query_rows=rows, progress=progress)
