"""BkR's two sides, checked and run for :func:`~backretrieval.metric.bkr_recall`: the text side (steps 1-2: each
query's retrieved target) and the image side (steps 3-4: how many distinct source images beat the query's own)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .approximate import ApproxConfig
from .errors import BackRetrievalError, option
from .files import as_array, check_matrix, target_indices
from .image_index import (ImageNeighbours, SourceImageIndex, check_image_neighbours, check_source_index,
                          neighbour_counts)
from .metric_checks import check_one_image_side, check_source_index_used
from .pictures import check_one_picture_per_id, distinct_images
from .ranking import count_ranks
from .retrieval import retrieve
from .scorers import MatrixScorer, VectorScorer
from .vectors import all_finite


def _query_rows(queries: ArrayLike, n_src: int) -> np.ndarray:
    """``bkr_recall``'s ``queries`` as source row indices: integer rows in ``[0, n_src)``, or a boolean mask of one
    entry per source row (its True rows); one-line errors otherwise (a mask is not read as rows 0 and 1)."""
    rows = as_array("queries", queries)
    if rows.dtype.kind == "b":
        if rows.shape != (n_src,):
            raise BackRetrievalError(f"queries: a boolean mask needs one entry per source row ({n_src}), got shape "
                                     f"{rows.shape}")
        rows = np.flatnonzero(rows)
    if rows.size == 0:  # np.asarray([]) is float
        rows = rows.astype(np.int64)
    if rows.dtype.kind not in "iu":
        raise BackRetrievalError(f"queries: expected integer source rows or a boolean mask, got {rows.dtype} values")
    if rows.ndim != 1 or (len(rows) and (rows.min() < 0 or rows.max() >= n_src)):
        raise BackRetrievalError(f"queries: expected source rows in [0, {n_src}), got {rows!r:.80}")
    if len(rows) == 0:  # Recall@K would be the mean of no hits: NaN
        raise BackRetrievalError("queries: no source row queries (an empty list or an all-False mask); give at least one")
    return rows.astype(np.int64)


@dataclass(frozen=True)
class CheckedTextSide:
    """What steps 1-2 read, checked by :func:`checked_text_side`. One of ``src_text``/``tgt_text``, ``text_sim`` or
    ``retrieved`` is set; the others are None."""

    n_src: int  # source rows (captions in the query language)
    n_tgt: int  # target rows (captions in the other language)
    query_rows: np.ndarray  # (Q,) int64: the source rows that query
    sampled: bool  # ``queries`` was given (query_rows is a subset, not every source row)
    src_text: np.ndarray | None = None  # (n_src, d) source text embeddings
    tgt_text: np.ndarray | None = None  # (n_tgt, d) target text embeddings
    text_sim: np.ndarray | None = None  # (Q, n_tgt) a given text similarity, one row per query
    retrieved: np.ndarray | None = None  # (Q,) int64: the given retrieved target of each query


def _n_images(img: np.ndarray | None, image_sim: np.ndarray | None, axis: int) -> int | None:
    """How many images the image side holds: ``img``'s rows, else ``image_sim``'s size along ``axis`` (1: sources,
    0: targets), else None."""
    return len(img) if img is not None else np.shape(image_sim)[axis] if image_sim is not None else None


def checked_text_side(src_text: np.ndarray | None, tgt_text: np.ndarray | None, text_sim: np.ndarray | None,
                      retrieved: np.ndarray | None, queries: np.ndarray | None, src_img: np.ndarray | None,
                      tgt_img: np.ndarray | None, image_sim: np.ndarray | None,
                      approx: ApproxConfig | None) -> CheckedTextSide:
    """:func:`bkr_recall`'s text inputs (embeddings, ``text_sim`` or ``retrieved``) and ``queries``, checked; the set
    sizes come from the text, or from the images where the text side does not hold them (given targets, or a given
    similarity of sampled queries)."""
    if text_sim is not None and retrieved is not None:
        raise BackRetrievalError("retrieved: the targets text_sim retrieves are given; give one of the two")
    if text_sim is not None:
        if approx is not None and approx.index != "exact":
            raise BackRetrievalError("text_sim: a precomputed text similarity is searched exactly; drop approximate")
        text_sim = check_matrix("text_sim", text_sim, vectors=False)
        n_src, n_tgt = text_sim.shape
        if queries is not None:  # the source set is the images'
            n_images = _n_images(src_img, image_sim, 1)
            n_src = n_src if n_images is None else n_images
    elif retrieved is not None:
        if approx is not None and approx.index != "exact":
            raise BackRetrievalError("retrieved: the targets are given; drop approximate")
        if image_sim is None and (src_img is None or tgt_img is None):
            raise BackRetrievalError("retrieved: the sources and targets are counted by src_img/tgt_img or image_sim; "
                                     "give them")
        n_src, n_tgt = _n_images(src_img, image_sim, 1), _n_images(tgt_img, image_sim, 0)
        if n_tgt == 0:
            raise BackRetrievalError("retrieved: no target to retrieve (0 target rows)")
    else:
        src_text = check_matrix("src_text", src_text)
        tgt_text = check_matrix("tgt_text", tgt_text, dim=src_text.shape[1], dim_of="src_text")
        n_src, n_tgt = len(src_text), len(tgt_text)
    query_rows = np.arange(n_src) if queries is None else _query_rows(queries, n_src)
    if text_sim is not None and len(text_sim) != len(query_rows):
        raise BackRetrievalError(f"text_sim: expected {len(query_rows)} rows (one per query), got {len(text_sim)}")
    if retrieved is not None:
        retrieved = target_indices("retrieved", retrieved, len(query_rows), n_tgt)
    return CheckedTextSide(n_src, n_tgt, query_rows, queries is not None, src_text, tgt_text, text_sim, retrieved)


def retrieve_targets(text: CheckedTextSide, retrieval: str, csls_k: int, approx: ApproxConfig | None,
                     progress: bool) -> np.ndarray:
    """Steps 1-2: the ``(Q,)`` index of each query's retrieved target T_T* (ties: lowest index), given, the row
    maxima of a given similarity, or the search of the target embeddings."""
    if text.retrieved is not None:
        return text.retrieved
    if text.text_sim is not None:  # each query's best-scoring target
        return np.asarray(text.text_sim).argmax(axis=1).astype(np.int64)
    if text.src_text is None or text.tgt_text is None:  # checked_text_side checked them: the message it would give
        raise BackRetrievalError("bkr_recall needs src_text and tgt_text (text embeddings), text_sim or retrieved")
    return retrieve(text.src_text, text.tgt_text, retrieval, csls_k, approx,
                    rows=text.query_rows if text.sampled else None, progress=progress)


@dataclass(frozen=True)
class CheckedImageSide:
    """What steps 3-4 read, checked by :func:`checked_image_side`: the distinct source images and g, whose form
    decides how step 4 counts: ``matrix`` counted exactly; ``neighbours`` looked up; ``pq_seed`` set: ``pq`` lists
    of ``distinct`` built for the retrieved targets only, looked up; otherwise the cosine of ``tgt_img`` and
    ``distinct``, counted exactly."""

    rows: np.ndarray  # the first source row of each distinct source image
    own: np.ndarray  # (Q,) the column of each query's own image among the distinct images
    matrix: MatrixScorer | None = None  # a given g (``image_sim``) over the distinct images
    tgt_img: np.ndarray | None = None  # (n_tgt, d) target image features
    distinct: np.ndarray | None = None  # one feature row per distinct source image
    neighbours: ImageNeighbours | None = None  # given lists of the cosine of ``tgt_img`` and ``distinct``
    pq_seed: int | None = None  # the seed of the ``pq`` lists step 4 builds (None: no ``pq`` lists)
    source_index: SourceImageIndex | None = None  # a given ``pq`` index of ``distinct`` the lists come from


def checked_image_side(src_img: np.ndarray | None, tgt_img: np.ndarray | None, image_sim: np.ndarray | None,
                       image_neighbours: ImageNeighbours | None, src_image_ids: Sequence | None,
                       text: CheckedTextSide, max_k: int, approx: ApproxConfig | None,
                       source_index: SourceImageIndex | None) -> CheckedImageSide:
    """:func:`bkr_recall`'s image inputs (``image_sim`` or features, ``src_image_ids``, ``image_neighbours``) checked
    against the set sizes of the text side."""
    n_src, n_tgt = text.n_src, text.n_tgt
    image_rows, every_col = distinct_images(src_image_ids, n_src)
    own = every_col[text.query_rows]
    check_one_image_side(src_img, tgt_img, image_sim)
    check_source_index_used(source_index, approx, image_sim, image_neighbours)
    if image_neighbours is not None and approx is not None and approx.image_side != "pq":  # was ignored in silence
        raise BackRetrievalError(f"approximate: image_side={approx.image_side!r} not used with "
                                 f"{option('image_neighbours')} (their lists are looked up); drop one of them")
    if image_sim is not None and image_neighbours is not None:
        raise BackRetrievalError("image_neighbours: the lists are built from image features; "
                                 "give src_img/tgt_img instead of image_sim")
    if image_sim is not None:  # step 3 with a user-given g
        image_sim = np.asarray(image_sim)  # memmaps stay memmaps
        if image_sim.shape != (n_tgt, n_src):
            raise BackRetrievalError(
                f"image_sim: expected shape ({n_tgt}, {n_src}) = (targets, sources), got {image_sim.shape}"
            )
        if not all_finite(image_sim):  # NaN compares false everywhere: every rank would be 1
            raise BackRetrievalError("image_sim: contains NaN or inf")
        return CheckedImageSide(image_rows, own, matrix=MatrixScorer(image_sim, image_rows))
    if src_img is None or tgt_img is None:
        raise BackRetrievalError("bkr_recall needs src_img and tgt_img (image features) or image_sim")
    src_img = check_matrix("src_img", src_img, rows=n_src)
    tgt_img = check_matrix("tgt_img", tgt_img, rows=n_tgt, dim=src_img.shape[1], dim_of="src_img")
    if src_image_ids is not None:
        check_one_picture_per_id(src_img, src_image_ids, image_rows, every_col)
    every = src_image_ids is None or (len(image_rows) == n_src and bool((image_rows == np.arange(n_src)).all()))
    distinct = src_img if every else src_img[image_rows]  # one row per image: no copy
    if image_neighbours is not None:
        check_image_neighbours(image_neighbours, tgt_img, distinct, max_k)
        return CheckedImageSide(image_rows, own, tgt_img=tgt_img, distinct=distinct, neighbours=image_neighbours)
    pq_seed = approx.seed if approx is not None and approx.image_side == "pq" else None
    if pq_seed is not None and source_index is not None:  # the index step 4 will search: of these images?
        check_source_index(source_index, distinct)
    return CheckedImageSide(image_rows, own, tgt_img=tgt_img, distinct=distinct, pq_seed=pq_seed,
                            source_index=source_index)


def count_better_images(image: CheckedImageSide, retrieved: np.ndarray, ks: tuple[int, ...], ties: str,
                        max_rank: int | None, block_bytes: int, progress: bool) -> dict[str, np.ndarray]:
    """Steps 3-4: for each query, how many distinct source images I_S beat (``"gt"``) or tie (``"ge"``) its own in
    g(I_T*, .), the row of its retrieved target (:func:`~backretrieval.ranking.count_ranks`' counts). Lists (given,
    or ``pq`` ones) only tell "fewer than K better images?": there ``max_rank`` is max(ks)."""
    if image.matrix is not None:  # the exact count, stopped at max_rank
        return count_ranks(image.matrix, retrieved, image.own, ties, max_rank, block_bytes, progress, "BkR ranks")
    tgt_img, distinct = image.tgt_img, image.distinct
    if tgt_img is None or distinct is None:  # checked_image_side checked them: the message it would give
        raise BackRetrievalError("bkr_recall needs src_img and tgt_img (image features) or image_sim")
    if image.neighbours is not None:  # a lookup in the lists of the retrieved targets
        scorer = VectorScorer(tgt_img, distinct)
        return neighbour_counts(image.neighbours, scorer, retrieved, image.own, ties)
    # g(I_T, I_S), the cosine of image features: only the retrieved targets' images are read
    used, row_of = np.unique(retrieved, return_inverse=True)
    row_of = row_of.reshape(-1)
    used_img = tgt_img[used]
    scorer = VectorScorer(used_img, distinct)
    if image.pq_seed is not None:  # lists of the retrieved only: the source index does not depend on the targets,
        # so each list is the one a build for every target image holds
        index = image.source_index or SourceImageIndex(distinct, "pq", seed=image.pq_seed)
        # one entry past K, so that an image tied with the own one at the list's end is seen
        return neighbour_counts(index.lists(used_img, max(ks) + 1, progress), scorer, row_of, image.own, ties)
    return count_ranks(scorer, row_of, image.own, ties, max_rank, block_bytes, progress, "BkR ranks")
