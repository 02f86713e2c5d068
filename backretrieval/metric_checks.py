"""The metric functions' options, checked with one-line errors: ks, the recall options, the rank cap, the approximate
mode and which image inputs go together (their matrices: :func:`~backretrieval.files.check_matrix`)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .approximate import IMAGE_SIDES, INDEXES, ApproxConfig
from .errors import BackRetrievalError, option
from .files import ArrayInput
from .image_index import ImageNeighbours, SourceImageIndex
from .ranking import TIES
from .retrieval import check_retrieval


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
