"""Score one text model on precomputed embeddings: BkR, CORR and (with parallel data) XLR, with intervals.

:func:`score` is the library side of ``backretrieval score``: inputs are arrays or ``.npy``
paths (row i of ``src_text`` describes row i of ``src_img``, likewise for the target side),
and the :class:`ScoreResult` serialises to the command's JSON record
(:meth:`ScoreResult.to_record`). :func:`prepare_images` (the image side, checked, and its lists) is shared with
:func:`backretrieval.compare`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .approximate import ApproxConfig
from .errors import BackRetrievalError, BackRetrievalWarning, option
from .files import (ArrayInput, IdsInput, PathLike, enough_for_k, load_input, load_matrix, read_lines, same_dim,
                    same_rows, target_indices)
from .hubness import DEFAULT_CSLS_K
from .image_index import ImageNeighbours
from .image_index_file import image_neighbours_file
from .metric import DEFAULT_KS, bkr_recall, corr_with_interval, xlr_recall
from .metric_checks import censored_max_rank, check_ks, check_one_image_side
from .outputs import save_hits
from .pictures import shared_pictures
from .records import json_ready
from .uncertainty import DEFAULT_BOOTSTRAP, DEFAULT_LEVEL, check_interval_options, recall_intervals

DEFAULT_CORR_PAIRS = 1_000_000  # source x target pairs sampled for CORR


@dataclass
class ImageSide:
    """The image inputs of BkR, loaded and row-checked: features of both sides, or a similarity matrix."""

    src_img: np.ndarray | None
    tgt_img: np.ndarray | None
    image_sim: np.ndarray | None
    label: str  # what messages call the source images (a path or a parameter name)


@dataclass
class ImageLists:
    """Image neighbour lists kept in a file (``image_index``): the lists and whether this call built them."""

    lists: ImageNeighbours
    built: bool


@dataclass
class ScoreResult:
    """What :func:`score` measured; ``to_record()`` is the JSON record of ``backretrieval score``."""

    metrics: dict[str, float]  # bkr@K (, corr) (, xlr@K)
    intervals: dict[str, dict]  # per metric, with bootstrap > 0: {"value", "lo", "hi", ...}
    n_queries: int
    n_images: int
    ks: tuple[int, ...]
    ties: str
    retrieval: str
    approximate: bool
    image_neighbours: str | None  # how step 4's lists were made (None: exact count)
    hubness: dict
    bootstrap: int
    level: float
    ranks: np.ndarray = field(repr=False)  # per-query BkR rank
    hits: dict[int, np.ndarray] = field(repr=False)  # per-query BkR hit, per K
    image_lists: ImageLists | None = None

    def hits_matrix(self) -> np.ndarray:
        """``(n_queries, len(ks))`` hits, one column per K (what ``score --hits-out`` writes)."""
        return np.stack([self.hits[k] for k in self.ks], axis=1)

    def save_hits(self, path: PathLike, what: str = "the hits") -> Path:
        """Write :meth:`hits_matrix` to ``path`` (``.npy`` appended if missing) and its K beside it
        (``PATH.npy.ks.json``), as ``score --hits-out`` does and :func:`backretrieval.compare` reads them; returns
        the ``.npy`` written."""
        return save_hits(path, self.hits_matrix(), self.ks, what)

    def to_record(self, inputs: Mapping | None = None) -> dict:
        """The JSON-ready record; ``inputs`` are the options it was run with (the command line's arguments)."""
        intervals = {"level": self.level, "replicates": self.bootstrap, **self.intervals} if self.intervals else None
        return json_ready({
            "task": "backretrieval.score", "inputs": dict(inputs or {}), "n_queries": self.n_queries,
            "n_images": self.n_images, "ties": self.ties, "retrieval": self.retrieval,
            "approximate": self.approximate, "image_neighbours": self.image_neighbours, "metrics": self.metrics,
            "intervals": intervals, "hubness": self.hubness})


def image_side(src_img: ArrayInput | None, tgt_img: ArrayInput | None, image_sim: ArrayInput | None, src: tuple[str, int], tgt: tuple[str, int]) -> ImageSide:
    """Load ``src_img``/``tgt_img`` or ``image_sim`` (arrays or paths), checked against the text rows.

    ``src`` and ``tgt`` are (label, rows) of the source and target texts.
    """
    check_one_image_side(src_img, tgt_img, image_sim)
    if image_sim is not None:
        label, sim = load_matrix(image_sim, option("image_sim"), vectors=False)  # a similarity: zero rows are fine
        if sim.shape != (tgt[1], src[1]):
            raise BackRetrievalError(f"{label}: {option('image_sim')} has shape {sim.shape}, expected "
                                     f"({tgt[1]}, {src[1]}) = ({tgt[0]} rows, {src[0]} rows)")
        return ImageSide(None, None, sim, label)
    if src_img is not None and tgt_img is not None:
        src_label, src_arr = load_matrix(src_img, option("src_img"))
        tgt_label, tgt_arr = load_matrix(tgt_img, option("tgt_img"))
        same_dim([(src_label, src_arr), (tgt_label, tgt_arr)], "source vs target image features")
        same_rows([src, (src_label, len(src_arr))], "source texts vs images")
        same_rows([tgt, (tgt_label, len(tgt_arr))], "target texts vs images")
        return ImageSide(src_arr, tgt_arr, None, src_label)
    raise BackRetrievalError(f"the image side is missing: give {option('src_img')} and {option('tgt_img')}, "
                             f"or {option('image_sim')}")


def warn_shared_pictures(images: ImageSide) -> None:
    """Warn when target rows show the very pictures of source rows: BkR pivots on different pictures on the two
    sides (as ``eval`` splits languages that share images into non-matching halves); with a caption of the
    query's own picture among the targets, retrieving it scores like a translation found."""
    if images.src_img is None or images.tgt_img is None:  # a similarity: no features to compare
        return
    shared = shared_pictures(images.src_img, images.tgt_img)
    if shared:
        warnings.warn(f"{shared} of {len(images.tgt_img)} target rows show a picture of the source side (the same "
                      f"image features): BkR then rewards finding a caption of the query's own picture, as XLR on "
                      f"parallel data would; give source and target captions of different pictures",
                      BackRetrievalWarning, stacklevel=4)  # through prepare_images: the caller of score


def open_image_lists(image_index: PathLike | None, images: ImageSide, ks: Sequence[int], *, approximate: bool,
                     method: str | None = None, src_image_ids: Sequence[str] | None = None, seed: int = 0,
                     progress: bool = False) -> ImageLists | None:
    """The ``image_index`` file's lists (built and written there when missing, with a progress bar when big and
    ``progress``; default method ``pq`` when ``approximate``, else ``flat``), or None without a file."""
    if not image_index:
        return None
    if images.src_img is None or images.tgt_img is None:
        raise BackRetrievalError(f"{option('image_index')} needs {option('src_img')} and {option('tgt_img')} "
                                 f"(image features), not {option('image_sim')}")
    method = method or ("pq" if approximate else "flat")
    lists, built = image_neighbours_file(image_index, images.src_img, images.tgt_img, max(ks) + 1,
                                         src_image_ids=src_image_ids, method=method, seed=seed, progress=progress)
    return ImageLists(lists, built)


def source_image_ids(src_image_ids: IdsInput | None, n_src: int, rows: str = "src_text") -> list[str] | None:
    """The image id of each source row (a sequence, or a text file of one id per line), checked to be one per
    ``rows`` row; None without ids."""
    if src_image_ids is None:
        return None
    label, ids = read_lines(src_image_ids, option("src_image_ids"))
    blank = next((i for i, v in enumerate(ids) if not v.strip()), None)
    if blank is not None:
        where = f"line {blank + 1}" if label != option("src_image_ids") else f"id {blank}"
        raise BackRetrievalError(f"{label}: {where} is blank; expected one image id per {option(rows)} row, "
                                 f"{n_src} in all")
    if len(ids) != n_src:
        raise BackRetrievalError(f"{label}: {len(ids)} image ids, expected {n_src} "
                                 f"(one per {option(rows)} row)")
    return ids


def prepare_images(src_img: ArrayInput | None, tgt_img: ArrayInput | None, image_sim: ArrayInput | None,
                   src: tuple[str, int], tgt: tuple[str, int], src_image_ids: IdsInput | None, ks: Sequence[int],
                   *, image_index: PathLike | None, approximate: bool, method: str | None, seed: int, progress: bool,
                   rows: str = "src_text") -> tuple[ImageSide, list[str] | None, ImageLists | None]:
    """The image side of BkR, as :func:`score` and :func:`backretrieval.compare` use it: the features or similarity
    checked against the text rows (:func:`image_side`), the source image ids (:func:`source_image_ids`, one per
    ``rows`` row), a warning for pictures on both sides, enough distinct source images for the largest K, and the
    ``image_index`` file's lists (:func:`open_image_lists`)."""
    images = image_side(src_img, tgt_img, image_sim, src, tgt)
    ids = source_image_ids(src_image_ids, src[1], rows)
    warn_shared_pictures(images)
    enough_for_k(images.label, len(set(ids)) if ids is not None else src[1], ks, "distinct source images")
    lists = open_image_lists(image_index, images, ks, approximate=approximate, method=method, src_image_ids=ids,
                             seed=seed, progress=progress)
    return images, ids, lists


def score(
    src_text: ArrayInput,
    tgt_text: ArrayInput,
    *,
    src_img: ArrayInput | None = None,
    tgt_img: ArrayInput | None = None,
    image_sim: ArrayInput | None = None,
    src_image_ids: IdsInput | None = None,
    xlr_tgt_text: ArrayInput | None = None,
    xlr_gt: ArrayInput | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approximate: bool | ApproxConfig = False,
    image_index: PathLike | None = None,
    image_index_method: str | None = None,
    corr_pairs: int = DEFAULT_CORR_PAIRS,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    progress: bool = True,
) -> ScoreResult:
    """BkR Recall@K of one text model (CORR with image features, XLR with ``xlr_tgt_text``), with intervals.

    Args:
        src_text, tgt_text: ``(Ns, d)`` / ``(Nt, d)`` text embeddings (arrays or ``.npy`` paths).
        src_img, tgt_img: ``(Ns, D)`` / ``(Nt, D)`` image features of the captions' images, or
        image_sim: ``(Nt, Ns)`` precomputed image similarity g(I_T, I_S) instead.
        src_image_ids: one image id per source row (a sequence, or a text file of one id per
            line); rows sharing an id are one picture, ranked once.
        xlr_tgt_text, xlr_gt: parallel ground truth for XLR: the target-language embeddings of
            the source rows' translations, and optionally an int index per source row into them.
        ks, ties, max_rank, retrieval, csls_k, approximate: as in :func:`backretrieval.bkr_recall`.
        image_index, image_index_method: a file of image neighbour lists, read when it exists,
            else built (``"pq"`` or ``"flat"``) and written there: step 4 becomes a lookup.
        corr_pairs: source x target pairs sampled for CORR.
        bootstrap, level: replicates over queries for the intervals (0: none) and their level.
        seed: seed of the CORR pair sample, the bootstrap and the image lists.
        progress: progress bars over the search, the ranks and a new image list file, when the work is big.
    """
    ks = check_ks(ks)  # before max(ks) sizes anything
    # a --max-rank these modes would not use, before any file is read or image list built
    censored_max_rank(max_rank, ks, option("approximate") if approximate else option("image_index") if image_index
                      else None)
    check_interval_options(bootstrap, level)
    if xlr_gt is not None and xlr_tgt_text is None:
        raise BackRetrievalError(f"{option('xlr_gt')} indexes {option('xlr_tgt_text')}: give it too (XLR is scored "
                                 "only with the translations' embeddings)")
    src_label, src_arr = load_matrix(src_text, option("src_text"))
    tgt_label, tgt_arr = load_matrix(tgt_text, option("tgt_text"))
    same_dim([(src_label, src_arr), (tgt_label, tgt_arr)], "source vs target text embeddings")
    images, ids, lists = prepare_images(src_img, tgt_img, image_sim, (src_label, len(src_arr)),
                                        (tgt_label, len(tgt_arr)), src_image_ids, ks, image_index=image_index,
                                        approximate=bool(approximate), method=image_index_method, seed=seed,
                                        progress=progress)
    options: dict[str, Any] = {"ties": ties, "max_rank": max_rank, "retrieval": retrieval, "csls_k": csls_k,
                               "approximate": approximate, "progress": progress}
    bkr = bkr_recall(src_arr, images.src_img, tgt_arr, images.tgt_img, ks, src_image_ids=ids,
                     image_sim=images.image_sim, image_neighbours=lists.lists if lists else None, **options)
    metrics = {f"bkr@{k}": bkr[f"bkr@{k}"] for k in ks}
    intervals = recall_intervals(bkr, bootstrap, level, seed) if bootstrap > 0 else {}
    if images.src_img is not None and images.tgt_img is not None:
        ci = corr_with_interval(src_arr, images.src_img, tgt_arr, images.tgt_img, corr_pairs=corr_pairs,
                                bootstrap=bootstrap, level=level, seed=seed)
        metrics["corr"] = ci["value"]
        if bootstrap > 0:
            intervals["corr"] = ci
    if xlr_tgt_text is not None:
        xlr_label, xlr_tgt = load_matrix(xlr_tgt_text, option("xlr_tgt_text"))
        same_dim([(src_label, src_arr), (xlr_label, xlr_tgt)], "source texts vs XLR targets")
        gt = None if xlr_gt is None else target_indices(*load_input(xlr_gt, option("xlr_gt")), len(src_arr),
                                                        len(xlr_tgt))
        if gt is None:
            same_rows([(src_label, len(src_arr)), (xlr_label, len(xlr_tgt))], "XLR needs one translation per row")
        enough_for_k(xlr_label, len(xlr_tgt), ks, "target texts for XLR")
        xlr = xlr_recall(src_arr, xlr_tgt, ks, gt=gt, **options)
        metrics.update({f"xlr@{k}": xlr[f"xlr@{k}"] for k in ks})
        if bootstrap > 0:
            intervals.update(recall_intervals(xlr, bootstrap, level, seed))
    return ScoreResult(metrics, intervals, bkr["n_queries"], bkr["n_images"], tuple(ks), ties, retrieval,
                       bool(approximate), bkr["image_neighbours"], bkr["hubness"], bootstrap, level,
                       bkr["ranks"], bkr["hits"], lists)
