"""The BackRetrieval paper's case study (Fain et al. 2021, 3.2, Fig. 3): Triplet and TripletXL judged by BackRetrieval.

The documents without an image train the two siamese adapters of :mod:`.triplet` (Triplet, ``beta = 0``;
TripletXL, ``beta`` > 0, the same other options); those with an image judge three representations of them by
BackRetrieval Recall@K for every ordered language pair: ``frozen`` (the concatenated frozen title and body
embeddings), ``triplet`` and ``tripletxl`` (``concat(x_t, x_b)``). An image ending in ``.npy`` is a precomputed
feature vector.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from backretrieval.errors import BackRetrievalError, option, said
from backretrieval.files import load_npy
from backretrieval.pairs import evaluate_pairs
from globetrotter.config_io import to_dict
from globetrotter.errors import UserError

from .triplet import PAPER_BETA, Document, TripletConfig, train_siamese


def case_study_configs(beta: float = PAPER_BETA, **options: Any) -> dict[str, TripletConfig]:
    """The adapters compared, ``{"triplet": beta 0, "tripletxl": beta}``, with the same other
    :class:`~.triplet.TripletConfig` ``options``; a bad option is a one-line error."""
    configs = {name: TripletConfig(beta=b, **options) for name, b in (("triplet", 0.0), ("tripletxl", beta))}
    for config in configs.values():
        try:
            config.validate()
        except ValueError as err:
            raise UserError(f"triplet: {err}") from None
    return configs


def split_documents(docs: Sequence[Document], where: object = "documents") -> tuple[list[Document], list[Document]]:
    """The documents to train on (without an image, at least 2) and to evaluate with (with one, in at least
    2 languages); one-line errors name ``where``."""
    train = [d for d in docs if d.image is None]
    evaluate = [d for d in docs if d.image is not None]
    if len(train) < 2:
        raise UserError(f"{where}: need at least 2 documents without an image to train on, got {len(train)}")
    langs = sorted({d.lang for d in evaluate})
    if len(langs) < 2:
        raise UserError(f"{where}: need documents with images in at least 2 languages to evaluate, got {langs}")
    return train, evaluate


def languages_with_enough_images(
    docs: Sequence[Document], k: int, where: object = "documents"
) -> tuple[list[Document], dict[str, int]]:
    """The evaluation documents ``docs`` of the languages with more than ``k`` distinct images (the largest K), and
    ``{language: its number of distinct images}`` of the languages left out.

    BackRetrieval ranks a query's own image among the images of the query's language: with at most ``k`` of them
    Recall@``k`` is 1 for any model, and as the other side of a pair so few documents give every query the same
    few targets. Such a language (one stray document) is left out with all its pairs rather than entering the
    mean; fewer than 2 languages left is a one-line error naming ``where`` and every language's count."""
    counts = {lang: len({d.image for d in docs if d.lang == lang}) for lang in sorted({d.lang for d in docs})}
    left_out = {lang: n for lang, n in counts.items() if n <= k}
    if len(counts) - len(left_out) < 2:
        found = ", ".join(f"{lang} {n}" for lang, n in counts.items())
        raise UserError(f"{where}: need documents with images in at least 2 languages with more than {k} images each "
                        f"(the largest K), got {found}; add documents or lower {said('--ks', 'k')}")
    return [d for d in docs if d.lang not in left_out], left_out


def drop_small_pairs(results: dict[str, dict], k: int) -> dict[str, int]:
    """Leave out of every representation's :func:`run_case_study` result the language pairs with at most ``k``
    source documents (two languages that share images split them between the sides, so a pair can hold fewer
    than its languages do): their Recall@``k`` is 1 for any model. Their ``mean`` is recomputed over the pairs
    kept. Returns ``{pair: its source documents}`` of those left out; none kept is a one-line error."""
    first = next(iter(results.values()))
    small = {pair: entry["n_src"] for pair, entry in first["pairs"].items() if entry["n_src"] <= k}
    if not small:
        return {}
    if len(small) == len(first["pairs"]):
        raise UserError(f"every language pair has at most {k} source documents (the largest K) once the images "
                        f"the languages share are split between the sides; add documents or lower "
                        f"{said('--ks', 'k')}")
    for res in results.values():
        names = list(res["langs"])
        for pair in small:
            del res["pairs"][pair]
            a, b = pair.split("->")
            for matrix in res["matrix"].values():
                matrix[names.index(a), names.index(b)] = np.nan
        res["mean"] = {m: float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan")
                       for m, v in res["matrix"].items()}
    return small


def precomputed_images(docs: Sequence[Document], where: object = "documents") -> bool:
    """Whether the images of ``docs`` are precomputed ``.npy`` feature vectors (all of them) rather than image
    files (none of them); a mix is a one-line error."""
    npy = [image.endswith(".npy") for image in document_images(docs)]
    if all(npy):
        return True
    if not any(npy):
        return False
    raise UserError(f"{where}: images must be all image files or all .npy features, not a mix")


def document_images(docs: Sequence[Document]) -> list[str]:
    """The image paths of the evaluation documents ``docs`` (:func:`split_documents` gives each one)."""
    images = [d.image for d in docs if d.image is not None]
    if len(images) != len(docs):
        raise ValueError("document_images: a document without an image (evaluation documents have one each)")
    return images


def npy_image_features(paths: Sequence[str]) -> np.ndarray:
    """Stack precomputed image feature vectors (``.npy`` files of one finite 1-D vector), one row per path."""
    rows = []
    for path in paths:
        try:
            vector = load_npy(path, "image features", bools=False)  # one-line errors: missing, no .npy, not numbers
        except BackRetrievalError as err:
            raise UserError(str(err)) from None
        if vector.ndim != 1 or not len(vector):  # a matrix was flattened into one long vector
            raise UserError(f"{path}: image features of shape {vector.shape}; expected one non-empty 1-D feature "
                            "vector per image")
        rows.append(np.asarray(vector, dtype=np.float32))
        if not np.isfinite(rows[-1]).all():
            raise UserError(f"{path}: image features hold NaN or inf; expected finite numbers")
        if rows[-1].shape != rows[0].shape:
            raise UserError(f"{path}: {rows[-1].shape[0]}-d image features, but {paths[0]} has {rows[0].shape[0]}-d")
    return np.stack(rows)


def check_annotations(annotate: Sequence[str], docs: Sequence[Document]) -> None:
    """Refuse a pair to label that is not one of the box plot's ``A->B`` language pairs of ``docs`` (it was
    silently left unlabelled)."""
    langs = sorted({d.lang for d in docs})
    for pair in annotate:
        src, sep, tgt = pair.partition("->")
        if not sep or src not in langs or tgt not in langs or src == tgt:
            raise UserError(f"{option('annotate')} {pair!r}: not a language pair of the evaluation documents; "
                            f"expected A->B with A, B two of {', '.join(langs)} (e.g. {langs[0]}->{langs[-1]})")


def run_case_study(
    train_docs: Sequence[Document],
    eval_docs: Sequence[Document],
    embed: Callable[[list[str]], torch.Tensor],
    image_features: np.ndarray,
    configs: dict[str, TripletConfig],
    ks: Sequence[int] = (1, 5, 10),
    max_per_lang: int | None = None,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Train an adapter per config on ``train_docs`` and judge the representations of ``eval_docs`` (``frozen``
    and one per config) by BackRetrieval with ``image_features`` (a row per evaluation document). The adapters
    train on ``device``.

    ``embed`` gives the frozen text embeddings ``[n, D]``. Returns the
    :func:`~backretrieval.pairs.evaluate_pairs` result of each representation (``mean``, ``pairs``) and each
    adapter's training history (its config, train and validation losses, the epoch kept, counted from 1).
    """
    docs = [*train_docs, *eval_docs]
    title, body = embed([d.title for d in docs]), embed([d.body for d in docs])
    n_train = len(train_docs)
    lang_ids = {lang: i for i, lang in enumerate(sorted({d.lang for d in docs}))}
    langs = torch.tensor([lang_ids[d.lang] for d in train_docs])
    representations = {"frozen": torch.cat([title[n_train:], body[n_train:]], dim=1)}
    histories = {}
    for name, config in configs.items():
        model, history = train_siamese(title[:n_train], body[:n_train], langs, config, progress=progress, device=device)
        representations[name] = model.represent(title[n_train:], body[n_train:])
        histories[name] = {"config": to_dict(config), "train": history.train, "val": history.val,
                           "best_epoch": history.best_epoch + 1}  # counted from 1, as meta.json's
    doc_langs = [d.lang for d in eval_docs]
    image_ids = [d.image for d in eval_docs]
    results = {
        name: evaluate_pairs(rep.numpy(), doc_langs, image_features, image_ids, ks, max_per_lang=max_per_lang,
                             seed=seed, with_corr=False)
        for name, rep in representations.items()
    }
    return results, histories


def pair_summary(results: dict[str, dict], k: int) -> dict[str, dict[str, float]]:
    """Per representation: mean, min, max and std of BackRetrieval Recall@``k`` over the language pairs."""
    out = {}
    for name, res in results.items():
        vals = np.array([p[f"bkr@{k}"] for p in res["pairs"].values() if f"bkr@{k}" in p])
        out[name] = {"mean": float(vals.mean()), "min": float(vals.min()), "max": float(vals.max()),
                     "std": float(vals.std())}
    return out
