"""Cross-lingual text→image and image→text retrieval, Recall@K per language (XTD10 protocol).

Metric names follow CLIP_benchmark: ``image_retrieval_recall@K`` is text→image (the share
of captions whose own image is among the K images nearest to the caption) and
``text_retrieval_recall@K`` is image→text (the share of images with at least one of their
captions among the K captions nearest to the image). Values are fractions in [0, 1], as
CLIP_benchmark reports them. Similarity is cosine on L2-normalised embeddings (faiss).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from backretrieval.files import check_matrix
from backretrieval.metric_checks import check_ks
from scipy.stats import hypergeom

from .procrustes import knn, normalize_rows

DEFAULT_KS = (1, 5, 10)


def retrieval_recall(
    text_emb: np.ndarray,
    image_emb: np.ndarray,
    text_to_image: Sequence[int] | np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, float]:
    """Text→image and image→text Recall@K for one language.

    ``text_emb`` (T, D) caption embeddings, ``image_emb`` (I, D) image embeddings,
    ``text_to_image`` (T,) the image row of each caption (an image may have several
    captions, or none). Returns ``image_retrieval_recall@K`` (over captions) and
    ``text_retrieval_recall@K`` (over images that have a caption), plus the chance
    levels ``chance_image_retrieval_recall@K`` = K / I and ``chance_text_retrieval_recall@K``: the mean over those
    images of the chance that K captions drawn at random hold one of the image's (its c of the T captions:
    1 - C(T - c, K) / C(T, K)); on a split where few images have a caption in the language it is far above K / I.
    """
    ks = check_ks(ks)  # K=0, 1.5 or "5": one line (recall@0 was reported)
    given = np.asarray(text_to_image).reshape(-1)
    if len(given) == 0 and len(text_emb) == 0:
        raise ValueError("no captions to evaluate")
    image_emb = normalize_rows(check_matrix("image_emb", image_emb, vectors=False))
    text_emb = normalize_rows(check_matrix("text_emb", text_emb, dim=image_emb.shape[1], dim_of="image_emb",
                                           vectors=False))
    if len(given) != len(text_emb):
        raise ValueError(f"{len(text_emb)} captions but {len(given)} image indices")
    if given.dtype.kind not in "iu" or given.min() < 0 or given.max() >= len(image_emb):  # 0.5 was read as image 0
        raise ValueError(f"text_to_image: expected image rows (integers) in [0, {len(image_emb)}), got {given.dtype} "
                         f"values in [{given.min()}, {given.max()}]")
    target = given.astype(np.int64)
    kmax = max(ks)
    _, t2i = knn(text_emb, image_emb, kmax)
    t2i_hit = t2i == target[:, None]
    images_with_text = np.unique(target)
    _, i2t = knn(image_emb[images_with_text], text_emb, kmax)
    i2t_hit = target[i2t] == images_with_text[:, None]
    out: dict[str, float] = {}
    for k in ks:
        out[f"image_retrieval_recall@{k}"] = float(t2i_hit[:, :k].any(axis=1).mean())
        out[f"text_retrieval_recall@{k}"] = float(i2t_hit[:, :k].any(axis=1).mean())
    per_image = np.bincount(target)[images_with_text]  # c: each image's captions among the T
    for k in ks:
        out[f"chance_image_retrieval_recall@{k}"] = min(1.0, k / len(image_emb))
        none = hypergeom.pmf(0, len(target), per_image, min(k, len(target)))  # no caption of it among K drawn
        out[f"chance_text_retrieval_recall@{k}"] = float(np.mean(1.0 - none))
    return out


def retrieval_per_language(
    text_emb: np.ndarray,
    langs: Sequence[str] | np.ndarray,
    image_emb: np.ndarray,
    text_to_image: Sequence[int] | np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict:
    """:func:`retrieval_recall` for the captions of each language against the shared image
    gallery; returns ``{"per_language": {lang: metrics}, "mean": metrics averaged over languages}``."""
    langs = np.asarray(langs)
    target = np.asarray(text_to_image)
    if len(text_emb) == 0:
        raise ValueError("no captions to evaluate")
    if langs.shape != (len(text_emb),):
        raise ValueError(f"langs: expected one language per caption ({len(text_emb)}), got shape {langs.shape}")
    per_lang = {}
    for lang in sorted(set(langs.tolist())):
        sel = langs == lang
        per_lang[lang] = retrieval_recall(text_emb[sel], image_emb, target[sel], ks)
    keys = next(iter(per_lang.values())).keys()
    mean = {key: float(np.mean([m[key] for m in per_lang.values()])) for key in keys}
    return {"per_language": per_lang, "mean": mean}
