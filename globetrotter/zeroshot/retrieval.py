"""Text->image retrieval metrics for the zero-shot protocol (XTD10 sections 3.3.1 and 4.2).

Each query caption is projected by the adapter into the image space and the gallery images
are ranked by distance (squared Euclidean, as the losses use; or cosine). Recall@K is the
share of queries whose own image is among the K nearest. The own image's rank is counted in
chunks of queries (:func:`target_ranks`), so 100k-image galleries need no Python loop and no
``Q x M`` matrix. Metric names follow CLIP_benchmark (``image_retrieval_recall@K`` = text->image).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Sequence

import numpy as np
import torch

from backretrieval.errors import option
from backretrieval.files import check_matrix, require_count
from backretrieval.metric_checks import check_ks
from backretrieval.renamed import renamed_keywords
from backretrieval.uncertainty import recall_interval

from globetrotter.errors import UserError

from .adapter import TextToImageAdapter

if TYPE_CHECKING:
    from .data import SplitFeatures

Metric = Literal["l2", "cosine"]
DEFAULT_KS = (1, 5, 10)


def _as_f32(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def target_ranks(
    queries: torch.Tensor | np.ndarray,
    images: torch.Tensor | np.ndarray,
    targets: torch.Tensor | np.ndarray | Sequence[int],
    metric: Metric = "l2",
    chunk: int = 1024,
) -> np.ndarray:
    """The 1-based rank of each query's own image among all gallery images ``[Q]`` (1 = nearest).

    The rank is the number of images at least as near to the query as its target, the target
    included: a tie counts against the query (as BackRetrieval's pessimistic ranks do), so an
    adapter whose outputs tell no images apart ranks every target last, not first. ``metric``:
    ``"l2"`` (squared Euclidean distance) or ``"cosine"``. Computed in chunks of ``chunk`` queries,
    so memory stays ``chunk x M``.
    """
    q = torch.from_numpy(_as_f32(queries))
    g = torch.from_numpy(_as_f32(images))
    given = np.asarray(targets).reshape(-1)
    if q.ndim != 2 or g.ndim != 2:  # IndexError: tuple index out of range
        raise ValueError(f"queries and images: expected 2-D arrays (rows x dim), got shapes {tuple(q.shape)} and "
                         f"{tuple(g.shape)}")
    if len(given) != len(q):
        raise ValueError(f"{len(q)} queries but {len(given)} targets")
    if len(given) == 0:
        raise ValueError("no queries to evaluate")
    if given.dtype.kind not in "iu" or given.min() < 0 or given.max() >= len(g):  # torch's gather error; 0.5 as 0
        raise ValueError(f"targets: expected image rows (integers) in [0, {len(g)}), got {given.dtype} values in "
                         f"[{given.min()}, {given.max()}]")
    t = torch.as_tensor(given.astype(np.int64))
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"query dim {q.shape[1]} != image dim {g.shape[1]}")
    if metric == "cosine":
        q, g = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(g, dim=1)
        score = lambda a: a @ g.T  # noqa: E731
    elif metric == "l2":  # -||a - g||^2 up to the per-query constant ||a||^2
        g_sq = (g * g).sum(1)
        score = lambda a: 2.0 * a @ g.T - g_sq  # noqa: E731
    else:
        raise ValueError(f"unknown metric {metric!r}; expected 'l2' or 'cosine'")
    ranks = []
    for i in range(0, len(q), chunk):
        s = score(q[i : i + chunk])
        own = s.gather(1, t[i : i + chunk, None])
        # a non-finite own score (a diverged adapter) ranks last, never first as its false comparisons would say
        ranks.append(torch.where(torch.isfinite(own[:, 0]), (s >= own).sum(1), s.shape[1]))
    return torch.cat(ranks).numpy()


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
    ks = check_ks(ks)  # K=0 or -1 reported 0.0, 1.5 its own figure, in silence
    ranks = target_ranks(queries, images, targets, metric)
    return {f"image_retrieval_recall@{k}": float((ranks <= k).mean()) for k in ks}


def rank_metrics(ranks: np.ndarray, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Recall@K of the ranks ``[Q]`` of the queries' own images, and their ``median_rank``."""
    ranks, ks = np.asarray(ranks), check_ks(ks)
    return {**{f"image_retrieval_recall@{k}": float((ranks <= k).mean()) for k in ks},
            "median_rank": float(np.median(ranks))}


def rank_summary(ranks: np.ndarray, ks: Sequence[int] = DEFAULT_KS, n_boot: int = 1000, seed: int = 0) -> dict:
    """What the ranks ``[Q]`` of the queries' own images say: ``metrics`` (Recall@K and ``median_rank``) and
    ``intervals`` (each Recall@K's 95% bootstrap interval over queries, ``{"value", "lo", "hi", "se"}``)."""
    ranks = np.asarray(ranks)
    intervals = {f"image_retrieval_recall@{k}": recall_interval(ranks <= k, n_boot, seed=seed) for k in ks}
    return {"metrics": rank_metrics(ranks, ks), "intervals": intervals}


@renamed_keywords(num_images="n_images")
def chance_recall(n_images: int, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Recall@K of a random ranking: ``min(K, n_images) / n_images``."""
    require_count(n_images, "n_images")  # 0 divided by zero, -3 gave a negative chance
    ks = check_ks(ks)
    return {f"image_retrieval_recall@{k}": min(1.0, k / n_images) for k in ks}


def zero_shot_recall(
    adapter: TextToImageAdapter,
    text_features: Mapping[str, torch.Tensor | np.ndarray],
    targets: Mapping[str, torch.Tensor | np.ndarray],
    image_features: torch.Tensor | np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    metric: Metric = "l2",
) -> dict[str, dict[str, float]]:
    """Per-language text->image Recall@K of an adapter (the layout of XTD10 Tables 2 and 3).

    ``text_features[lang]`` ``[Q_lang, Dt]``: frozen sentence embeddings of the test captions
    in ``lang``; ``targets[lang]`` ``[Q_lang]``: their image rows in ``image_features``. Features may be tensors,
    numpy arrays or lists of rows.
    """
    for name, given in (("text_features", text_features), ("targets", targets)):
        if not isinstance(given, Mapping):  # a tensor was AttributeError: no .items
            raise UserError(f"{name}: expected a dict of language -> rows, got a {type(given).__name__}")
    missing = [lang for lang in text_features if lang not in targets]  # KeyError: 'de'
    if missing:
        raise UserError(f"targets: no image rows for {missing} (text_features has {list(text_features)}, targets "
                        f"{list(targets)}); expected one entry per language of text_features")
    feats = {lang: as_features(f"text_features[{lang!r}]", x) for lang, x in text_features.items()}
    images = as_features("image_features", image_features)
    return {lang: rank_metrics(ranks, ks)
            for lang, ranks in language_ranks(adapter, feats, targets, images, metric).items()}


def as_features(name: str, x: object) -> torch.Tensor:
    """``x`` as a ``(rows, dim)`` tensor: a tensor as it is, an array or a list of rows checked
    (:func:`~backretrieval.files.check_matrix`); a numpy array was AttributeError: no ``.to``."""
    if isinstance(x, torch.Tensor):
        if x.ndim != 2:  # a 1-D tensor's length was read as its width
            raise UserError(f"{name}: expected a 2-D array (rows x dim), got shape {tuple(x.shape)}")
        return x
    return torch.from_numpy(np.array(check_matrix(name, x, vectors=False), dtype=np.float32))


def language_ranks(
    adapter: TextToImageAdapter,
    text_features: Mapping[str, torch.Tensor],
    targets: Mapping[str, torch.Tensor | np.ndarray],
    image_features: torch.Tensor,
    metric: Metric = "l2",
) -> dict[str, np.ndarray]:
    """Per language, the rank of each query's own image (:func:`target_ranks`) after the adapter."""
    for lang, feats in text_features.items():  # torch's 'mat1 and mat2 shapes cannot be multiplied'
        if isinstance(adapter, TextToImageAdapter):
            check_adapter_dims(adapter, feats.shape[-1], image_features.shape[-1], f"text_features[{lang!r}]")
    return {lang: target_ranks(adapter.embed(feats), image_features, targets[lang], metric)
            for lang, feats in text_features.items()}


def check_adapter_dims(adapter: TextToImageAdapter, text_dim: int, image_dim: int, where: str) -> None:
    """One-line error when the features at hand do not fit the adapter's input/output widths."""
    if adapter.text_dim != text_dim or adapter.image_dim != image_dim:
        raise UserError(
            f"{where}: the adapter maps {adapter.text_dim}-d text embeddings to {adapter.image_dim}-d image "
            f"features, but the encoders give {text_dim}-d text and {image_dim}-d image features"
        )


def split_recall(
    adapter: TextToImageAdapter,
    test: SplitFeatures,
    langs: Sequence[str] | None = None,
    all_captions: bool = False,
    ks: Sequence[int] = DEFAULT_KS,
    metric: Metric = "l2",
    where: str = "test split",
    adapter_name: str = "adapter",
    n_boot: int = 1000,
    remedy: str | None = None,
) -> dict:
    """Text->image Recall@K of ``adapter`` in each language of a test split (XTD10 Tables 2 and 3).

    The queries of a language are one caption per image, its first (as XTD10 and Multi30K count), or every
    caption with ``all_captions``; the gallery is every image of the split. ``langs`` defaults to all of the
    split's; one without a caption, or features that do not fit the adapter, are one-line errors naming the
    split (``where``) and the adapter (``adapter_name``); so is a gallery of at most the largest K images, where
    Recall@K is 1 for any adapter (``remedy`` says what to do; None: lower ``ks``). Returns ``{"metrics": {lang:
    {"image_retrieval_recall@K": r, "median_rank": m}}, "intervals": {lang: {"image_retrieval_recall@K": 95% bootstrap
    interval}}, "n_queries": {lang: n}, "n_images": M}``.
    """
    present = sorted(set(test.langs.tolist()))
    rows = {lang: (test.rows(lang) if all_captions else test.first_per_image(lang)) for lang in langs or present}
    missing = [lang for lang, r in rows.items() if len(r) == 0]
    if missing:
        raise UserError(f"{where}: no captions in {missing} (languages present: {present})")
    check_adapter_dims(adapter, test.text_features.shape[1], test.image_features.shape[1], f"{where} vs {adapter_name}")
    n_images, k = len(test.image_keys), max(ks)
    if n_images <= k:  # every rank is at most K: Recall@500 of 80 images was printed as 1.000
        raise UserError(f"{where}: {n_images} image(s), not more than the largest K ({k}): Recall@{k} would be 1 for "
                        f"any adapter; {remedy or 'lower ' + option('ks')}")
    ranks = language_ranks(
        adapter,
        {lang: torch.from_numpy(test.text_features[r]) for lang, r in rows.items()},
        {lang: test.caption_image[r] for lang, r in rows.items()},
        torch.from_numpy(test.image_features),
        metric,
    )
    summaries = {lang: rank_summary(r, ks, n_boot) for lang, r in ranks.items()}
    return {"metrics": {lang: s["metrics"] for lang, s in summaries.items()},
            "intervals": {lang: s["intervals"] for lang, s in summaries.items()},
            "n_queries": {lang: int(len(r)) for lang, r in rows.items()}, "n_images": len(test.image_keys)}


def format_table(rows: Mapping[str, Mapping[str, Mapping[str, float]]], k: int = 10, key: str | None = None) -> str:
    """A plain-text table, one row per model and one column per language, of Recall@``k`` (or of ``key``)."""
    langs: list[str] = []
    for per_lang in rows.values():
        langs += [lang for lang in per_lang if lang not in langs]
    key = key or f"image_retrieval_recall@{k}"
    width = max([len("model")] + [len(name) for name in rows])
    lines = [f"{'model':<{width}} " + " ".join(f"{lang:>6}" for lang in langs)]
    for name, per_lang in rows.items():
        fmt = "6.1f" if key == "median_rank" else "6.3f"
        cells = [f"{per_lang[lang][key]:{fmt}}" if lang in per_lang else f"{'-':>6}" for lang in langs]
        lines.append(f"{name:<{width}} " + " ".join(cells))
    return "\n".join(lines)
