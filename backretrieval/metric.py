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

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from .approximate import IMAGE_SIDES, INDEXES, ApproxConfig
from .errors import BackRetrievalError, option
from .files import ArrayInput, as_array, check_numbers, check_rows, enough_for_k, target_indices
from .hubness import DEFAULT_CSLS_K, hubness_stats
from .image_index import (
    ImageNeighbours,
    SourceImageIndex,
    check_image_neighbours,
    check_one_picture_per_id,
    check_source_index,
    distinct_images,
    neighbour_counts,
)
from .ranking import (
    DEFAULT_BLOCK_BYTES,
    TIES,
    count_ranks,
    ranks_and_hits,
)
from .renamed import renamed_keywords
from .retrieval import check_retrieval, retrieve, text_scorer
from .scorers import MatrixScorer, VectorScorer
from .uncertainty import corr_interval
from .vectors import all_finite, l2_normalize

DEFAULT_KS = (1, 5, 10)


def check_matrix(name: str, x: object, rows: int | None = None, dim: int | None = None, dim_of: str = "",
            vectors: bool = True) -> np.ndarray:
    """``x`` checked as a ``(rows, dim)`` matrix of finite numbers; ``vectors`` (embeddings, image features: rows
    compared by cosine): no all-zero row either (:func:`~backretrieval.files.check_rows`)."""
    x = as_array(name, x)
    check_numbers(name, x, "the array", bools=False)
    if x.ndim != 2:
        raise BackRetrievalError(f"{name}: expected a 2-D array (rows x dim), got shape {x.shape}")
    if rows is not None and x.shape[0] != rows:
        raise BackRetrievalError(f"{name}: expected {rows} rows (one per text), got {x.shape[0]}")
    if dim is not None and x.shape[1] != dim:
        raise BackRetrievalError(f"{name}: expected dimension {dim} (as {dim_of}), got {x.shape[1]}")
    if x.shape[0] == 0:
        raise BackRetrievalError(f"{name}: empty (0 rows)")
    if x.shape[1] == 0:
        raise BackRetrievalError(f"{name}: 0 columns (vectors of dimension 0)")
    if vectors:  # NaN, inf or all-zero rows, the first one named: one pass
        check_rows(name, x, "the array")
    elif not all_finite(x):
        raise BackRetrievalError(f"{name}: contains NaN or inf")
    return x


def check_ks(ks: Sequence[int] | int) -> tuple[int, ...]:
    """``ks`` (one K or several) as a tuple of positive ints; 1.5 or ``"5"`` is an error, not silently K=1 or 5."""
    given: Any = [ks] if np.isscalar(ks) else ks  # whatever the caller passed: checked here
    try:
        given = list(given)
    except TypeError:
        raise BackRetrievalError(f"{option('ks')}: expected positive integers, got {ks!r}") from None
    integral = all(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))
                   or isinstance(k, (float, np.floating)) and float(k).is_integer() for k in given)
    if not given or not integral or any(k < 1 for k in given):
        raise BackRetrievalError(f"{option('ks')}: expected positive integers, got {ks!r}")
    return tuple(int(k) for k in given)


def check_recall_options(ks: Sequence[int] | int, ties: str, max_rank: int | None, retrieval: str,
                         csls_k: int) -> tuple[int, ...]:
    """The options :func:`bkr_recall`, :func:`xlr_recall` and :func:`~backretrieval.pairs.evaluate_pairs` share,
    checked in this order with one-line errors: ``ks`` (:func:`check_ks`), ``ties``, ``max_rank`` (at least the
    largest K), ``retrieval`` and ``csls_k`` (:func:`~backretrieval.retrieval.check_retrieval`). Returns the checked
    ks. Internal: not exported by the package."""
    ks = check_ks(ks)
    if ties not in TIES:
        raise BackRetrievalError(f"ties: expected one of {', '.join(TIES)}, got {ties!r}")
    if max_rank is not None and max_rank < max(ks):
        raise BackRetrievalError(f"{option('max_rank')} {max_rank}: must be >= the largest K ({max(ks)}) for exact "
                                 "Recall@K")
    check_retrieval(retrieval, csls_k)
    return ks


def censored_max_rank(max_rank: int | None, ks: tuple[int, ...], by: str | None) -> int | None:
    """The rank cap used: ``max_rank``, or max(ks) with ``by`` (the name of a mode that counts better images or
    targets only up to the largest K: the approximate mode, image lists). There a ``max_rank`` other than max(ks) is
    refused: it was silently replaced by max(ks), so ranks were censored at another cap than the one asked for."""
    if by is None:
        return max_rank
    if max_rank is not None and max_rank != max(ks):
        raise BackRetrievalError(f"{option('max_rank')} {max_rank}: with {by} ranks are counted only up to the largest "
                                 f"K ({max(ks)}) and censored above it; drop {option('max_rank')} (or give {max(ks)})")
    return max(ks)


def approx_config(approximate: bool | ApproxConfig, ks: tuple[int, ...]) -> ApproxConfig | None:
    """The approximate mode's options (None: exact)."""
    if approximate is False or approximate is None:
        return None
    config = ApproxConfig() if approximate is True else approximate
    if not isinstance(config, ApproxConfig):
        raise BackRetrievalError(f"approximate: expected True/False or an ApproxConfig, got {approximate!r}")
    if config.index not in INDEXES:
        raise BackRetrievalError(f"approximate: index must be one of {', '.join(INDEXES)}, got {config.index!r}")
    if config.image_side not in IMAGE_SIDES:
        raise BackRetrievalError(f"approximate: image_side must be one of {', '.join(IMAGE_SIDES)}, "
                                 f"got {config.image_side!r}")
    if config.candidates < 1 or config.nprobe < 1 or config.pca_dim < 0:
        raise BackRetrievalError(
            f"approximate: candidates and nprobe must be >= 1 and pca_dim >= 0, got {config.candidates}, "
            f"{config.nprobe}, {config.pca_dim}"
        )
    return config


def check_source_index_used(source_index: SourceImageIndex | None, approx: ApproxConfig | None, image_sim: np.ndarray | None,
                            image_neighbours: ImageNeighbours | None) -> None:
    """One-line error when ``source_index`` is given but step 4 would not search it (it was ignored in silence, the
    caller believing it used): only ``approximate`` with ``image_side="pq"`` on image features searches one."""
    if source_index is None:
        return
    why = ("without approximate" if approx is None else
           f"with approximate image_side={approx.image_side!r}" if approx.image_side != "pq" else
           f"with {option('image_sim')} (the given g is counted)" if image_sim is not None else
           f"with {option('image_neighbours')} (their lists are looked up)" if image_neighbours is not None else None)
    if why:
        raise BackRetrievalError(f"source_index: not used {why}; only approximate with image_side='pq' on "
                                 f"{option('src_img')}/{option('tgt_img')} searches it: drop source_index or use that")


def check_one_image_side(src_img: ArrayInput | None, tgt_img: ArrayInput | None,
                          image_sim: ArrayInput | None) -> None:
    """One-line error when both ``image_sim`` and ``src_img``/``tgt_img`` are given: one of them would be ignored."""
    if image_sim is not None and (src_img is not None or tgt_img is not None):
        raise BackRetrievalError(f"give either {option('image_sim')} or {option('src_img')}/{option('tgt_img')}, "
                                 "not both")


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


def _recall_dict(prefix: str, ks: tuple[int, ...], hits: dict[int, np.ndarray]) -> dict[str, float]:
    return {f"{prefix}@{k}": float(np.mean(hits[k])) if len(hits[k]) else float("nan") for k in ks}


@dataclass(frozen=True)
class _TextSide:
    """What steps 1-2 read, checked by :func:`_text_side`: the source and target set sizes, the source rows that
    query (``sampled``: ``queries`` was given) and one of the embeddings (``src_text``, ``tgt_text``), a given text
    similarity (``text_sim``, one row per query) or the given targets (``retrieved``, one per query)."""

    n_src: int
    n_tgt: int
    query_rows: np.ndarray
    sampled: bool
    src_text: np.ndarray | None = None
    tgt_text: np.ndarray | None = None
    text_sim: np.ndarray | None = None
    retrieved: np.ndarray | None = None


def _n_images(img: np.ndarray | None, image_sim: np.ndarray | None, axis: int) -> int | None:
    """How many images the image side holds: ``img``'s rows, else ``image_sim``'s size along ``axis`` (1: sources,
    0: targets), else None."""
    return len(img) if img is not None else np.shape(image_sim)[axis] if image_sim is not None else None


def _text_side(src_text: np.ndarray | None, tgt_text: np.ndarray | None, text_sim: np.ndarray | None,
               retrieved: np.ndarray | None, queries: np.ndarray | None, src_img: np.ndarray | None,
               tgt_img: np.ndarray | None, image_sim: np.ndarray | None, approx: ApproxConfig | None) -> _TextSide:
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
    return _TextSide(n_src, n_tgt, query_rows, queries is not None, src_text, tgt_text, text_sim, retrieved)


def _retrieve(text: _TextSide, retrieval: str, csls_k: int, approx: ApproxConfig | None,
              progress: bool) -> np.ndarray:
    """Steps 1-2: the ``(Q,)`` index of each query's retrieved target T_T* (ties: lowest index), given, the row
    maxima of a given similarity, or the search of the target embeddings."""
    if text.retrieved is not None:
        return text.retrieved
    if text.text_sim is not None:  # each query's best-scoring target
        return np.asarray(text.text_sim).argmax(axis=1).astype(np.int64)
    if text.src_text is None or text.tgt_text is None:  # _text_side checked them: the message it would give
        raise BackRetrievalError("bkr_recall needs src_text and tgt_text (text embeddings), text_sim or retrieved")
    return retrieve(text.src_text, text.tgt_text, retrieval, csls_k, approx,
                    rows=text.query_rows if text.sampled else None, progress=progress)


@dataclass(frozen=True)
class _ImageSide:
    """What steps 3-4 read, checked by :func:`_image_side`: the distinct source images (``rows``: the first source row
    of each; ``own``: the column of each query's own image among them) and g, whose form decides how step 4 counts:

    - ``matrix``: a given g (``image_sim``) over the distinct images, counted exactly;
    - ``neighbours``: given lists of the cosine of ``tgt_img`` and ``distinct`` (the distinct source images' features),
      looked up;
    - ``pq_seed``: ``pq`` lists of ``distinct`` built for the retrieved targets only (from ``source_index`` when
      given), looked up;
    - otherwise the cosine of ``tgt_img`` and ``distinct``, counted exactly.
    """

    rows: np.ndarray
    own: np.ndarray
    matrix: MatrixScorer | None = None
    tgt_img: np.ndarray | None = None
    distinct: np.ndarray | None = None
    neighbours: ImageNeighbours | None = None
    pq_seed: int | None = None
    source_index: SourceImageIndex | None = None


def _image_side(src_img: np.ndarray | None, tgt_img: np.ndarray | None, image_sim: np.ndarray | None,
                image_neighbours: ImageNeighbours | None, src_image_ids: Sequence | None,
                text: _TextSide, max_k: int, approx: ApproxConfig | None,
                source_index: SourceImageIndex | None) -> _ImageSide:
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
        return _ImageSide(image_rows, own, matrix=MatrixScorer(image_sim, image_rows))
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
        return _ImageSide(image_rows, own, tgt_img=tgt_img, distinct=distinct, neighbours=image_neighbours)
    pq_seed = approx.seed if approx is not None and approx.image_side == "pq" else None
    if pq_seed is not None and source_index is not None:  # the index step 4 will search: of these images?
        check_source_index(source_index, distinct)
    return _ImageSide(image_rows, own, tgt_img=tgt_img, distinct=distinct, pq_seed=pq_seed, source_index=source_index)


def _count_better_images(image: _ImageSide, retrieved: np.ndarray, ks: tuple[int, ...], ties: str,
                         max_rank: int | None, block_bytes: int, progress: bool) -> dict[str, np.ndarray]:
    """Steps 3-4: for each query, how many distinct source images I_S beat (``"gt"``) or tie (``"ge"``) its own in
    g(I_T*, .), the row of its retrieved target (:func:`~backretrieval.ranking.count_ranks`' counts). Lists (given,
    or ``pq`` ones) only tell "fewer than K better images?": there ``max_rank`` is max(ks)."""
    if image.matrix is not None:  # the exact count, stopped at max_rank
        return count_ranks(image.matrix, retrieved, image.own, ties, max_rank, block_bytes, progress, "BkR ranks")
    tgt_img, distinct = image.tgt_img, image.distinct
    if tgt_img is None or distinct is None:  # _image_side checked them: the message it would give
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
    text = _text_side(src_text, tgt_text, text_sim, retrieved, queries, src_img, tgt_img, image_sim, approx)
    image = _image_side(src_img, tgt_img, image_sim, image_neighbours, src_image_ids, text, max(ks), approx,
                        source_index)
    # after the shapes: a row-count error is the one message, not this warning before it
    enough_for_k("bkr_recall", len(image.rows), ks, "distinct source images", warn=True)
    found = _retrieve(text, retrieval, csls_k, approx, progress)  # steps 1-2: T_T* of each query
    # steps 3-4: rank of g(I_T*, I_S^q) among g(I_T*, I_S) over the distinct source images
    counts = _count_better_images(image, found, ks, ties, max_rank, block_bytes, progress)
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
    if corr_pairs < 1:
        raise BackRetrievalError(f"corr: {option('corr_pairs')} must be >= 1, got {corr_pairs}")
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

