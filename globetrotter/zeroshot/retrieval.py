"""Text->image retrieval metrics for the zero-shot protocol (XTD10 sections 3.3.1 and 4.2).

Each query caption is projected by the adapter into the image space and the gallery images
are ranked by distance (squared Euclidean, as the losses use; or cosine). Recall@K is the
share of queries whose own image is among the K nearest. faiss does the nearest-neighbour
search, so 100k-image galleries are handled without a Python loop. Metric names follow
CLIP_benchmark (``image_retrieval_recall@K`` = text->image).
"""
from __future__ import annotations

from typing import Literal, Mapping, Sequence

import faiss
import numpy as np
import torch

from .adapter import TextToImageAdapter

Metric = Literal["l2", "cosine"]
DEFAULT_KS = (1, 5, 10)


def _as_f32(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def nearest_images(
    queries: torch.Tensor | np.ndarray, images: torch.Tensor | np.ndarray, k: int, metric: Metric = "l2"
) -> np.ndarray:
    """Indices ``[Q, k]`` of the ``k`` gallery images nearest to each query (nearest first).

    ``metric="l2"`` ranks by squared Euclidean distance, ``"cosine"`` by cosine similarity.
    """
    q, g = _as_f32(queries), _as_f32(images)
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"query dim {q.shape[1]} != image dim {g.shape[1]}")
    k = min(k, g.shape[0])
    if metric == "cosine":
        q, g = q.copy(), g.copy()
        faiss.normalize_L2(q)
        faiss.normalize_L2(g)
        index = faiss.IndexFlatIP(g.shape[1])
    elif metric == "l2":
        index = faiss.IndexFlatL2(g.shape[1])
    else:
        raise ValueError(f"unknown metric {metric!r}; expected 'l2' or 'cosine'")
    index.add(g)
    _, nn = index.search(q, k)
    return nn


def recall_at_k(
    queries: torch.Tensor | np.ndarray,
    images: torch.Tensor | np.ndarray,
    targets: torch.Tensor | np.ndarray | Sequence[int],
    ks: Sequence[int] = DEFAULT_KS,
    metric: Metric = "l2",
) -> dict[str, float]:
    """Text->image Recall@K: share of queries whose target image row is among the K nearest.

    ``queries`` ``[Q, D]`` (already in the image space), ``images`` ``[M, D]``, ``targets``
    ``[Q]`` rows of ``images``. Returns ``{"image_retrieval_recall@K": r}`` for each K.
    """
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    if len(targets) != len(queries):
        raise ValueError(f"{len(queries)} queries but {len(targets)} targets")
    if len(targets) == 0:
        raise ValueError("no queries to evaluate")
    nn = nearest_images(queries, images, max(ks), metric)
    hit = nn == targets[:, None]
    return {f"image_retrieval_recall@{k}": float(hit[:, :k].any(1).mean()) for k in ks}


def chance_recall(num_images: int, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Recall@K of a random ranking: ``K / num_images``."""
    return {f"image_retrieval_recall@{k}": min(1.0, k / num_images) for k in ks}


def zero_shot_recall(
    adapter: TextToImageAdapter,
    text_features: Mapping[str, torch.Tensor],
    targets: Mapping[str, torch.Tensor | np.ndarray],
    image_features: torch.Tensor,
    ks: Sequence[int] = DEFAULT_KS,
    metric: Metric = "l2",
) -> dict[str, dict[str, float]]:
    """Per-language text->image Recall@K of an adapter (the layout of XTD10 Tables 2 and 3).

    ``text_features[lang]`` ``[Q_lang, Dt]``: frozen sentence embeddings of the test captions
    in ``lang``; ``targets[lang]`` ``[Q_lang]``: their image rows in ``image_features``.
    """
    return {
        lang: recall_at_k(adapter.embed(feats), image_features, targets[lang], ks, metric)
        for lang, feats in text_features.items()
    }


def format_table(rows: Mapping[str, Mapping[str, Mapping[str, float]]], k: int = 10) -> str:
    """A plain-text table, one row per model and one column per language, of Recall@``k``."""
    langs: list[str] = []
    for per_lang in rows.values():
        langs += [lang for lang in per_lang if lang not in langs]
    key = f"image_retrieval_recall@{k}"
    width = max([len("model")] + [len(name) for name in rows])
    lines = [f"{'model':<{width}} " + " ".join(f"{lang:>6}" for lang in langs)]
    for name, per_lang in rows.items():
        cells = [f"{per_lang[lang][key]:6.3f}" if lang in per_lang else f"{'-':>6}" for lang in langs]
        lines.append(f"{name:<{width}} " + " ".join(cells))
    return "\n".join(lines)
