"""The closed-form image ridge: a linear map from caption features to the whole-image features of each caption's own
image, fitted by scikit-learn's ``Ridge`` (with an intercept).

Two parts of the project fit it: the image-pivot token initialisation (:mod:`globetrotter.training.token_init`,
caption token bags → the image features' principal directions) and the linear image-pivot baseline
(:mod:`globetrotter.evaluation.pivot_ridge`, one language's character n-gram TF-IDF → image features). Both take the
targets from :func:`image_targets` (rows L2-normalised, then centred) and the map from :func:`fit_image_ridge`: with a
given ridge strength, or the one of several candidates with the lowest held-out squared error by grouped K-fold
cross-validation (:func:`choose_alpha`; the groups are the image ids, so an image's captions, which share a target,
never sit on both sides of a fold). Only captions and their own images enter: no parallel text.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:  # scipy is imported by scikit-learn when a ridge is fitted
    from scipy import sparse

from .errors import UserError


class ImageRidge(NamedTuple):
    """A fitted map: the scikit-learn ``Ridge`` (``coef_`` [F, D], ``intercept_``, ``predict``), its strength, and
    each candidate strength's held-out squared error (None when the strength was given)."""

    model: Any  # sklearn.linear_model.Ridge (scikit-learn ships no type information)
    alpha: float
    cv_errors: dict[float, float] | None


def image_targets(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(targets, centre)``: the rows of ``features`` (one image per row) L2-normalised in float32, less their mean
    ``centre``."""
    target = np.asarray(features, dtype=np.float32)
    target = target / np.maximum(np.linalg.norm(target, axis=1, keepdims=True), 1e-12)
    centre = target.mean(0)
    return target - centre, centre


def unit_centred(vectors: np.ndarray) -> np.ndarray:
    """The rows of ``vectors`` (one image per row) less their mean, scaled to unit length, in float64: what a cosine
    of image vectors reads once the direction every image shares is taken off. (The fine-tune's targets,
    :func:`globetrotter.training.backbone_finetune.unit_centred_targets`, are the same in torch float32.)"""
    out = np.asarray(vectors, dtype=np.float64)
    out = out - out.mean(axis=0)
    return out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-12)


def choose_alpha(inputs: np.ndarray | sparse.spmatrix, target: np.ndarray, groups: np.ndarray, alphas: Sequence[float], folds: int = 5,
                 setting: str = "alpha", folds_setting: str | None = None, jobs: int = 1) -> tuple[float, dict[float, float]]:
    """The ridge strength among ``alphas`` with the lowest mean held-out squared error over ``folds`` folds that keep
    each group (image id) in one fold (scikit-learn ``GroupKFold``); ties go to the earlier candidate. Returns it and
    each candidate's mean error. Fewer groups than folds is a :class:`UserError` naming ``setting`` (and
    ``folds_setting``), the options that asked for the search. ``jobs``: fits run at a time (separate processes;
    each fit is deterministic, so the result is the same for any count)."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV, GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < folds:
        where = f" ({folds_setting})" if folds_setting else ""
        raise UserError(f"{setting}: cross-validating the ridge strength over {folds} folds{where} needs at least "
                        f"{folds} images, the captions have {n_groups}")
    search = GridSearchCV(Ridge(), {"alpha": [float(a) for a in alphas]}, cv=GroupKFold(folds),
                          scoring="neg_mean_squared_error", refit=False, error_score="raise",
                          n_jobs=min(jobs, folds * len(alphas)) if jobs > 1 else None)
    search.fit(inputs, target, groups=groups)
    results = search.cv_results_
    errors = {float(a): float(-e) for a, e in zip(results["param_alpha"], results["mean_test_score"])}
    return min(errors, key=errors.__getitem__), errors


def fit_image_ridge(inputs: np.ndarray | sparse.spmatrix, target: np.ndarray, alpha: float | Sequence[float], groups: np.ndarray | None = None,
                    folds: int = 5, setting: str = "alpha", folds_setting: str | None = None,
                    jobs: int = 1) -> ImageRidge:
    """The ridge map from ``inputs`` (``[N, F]``, dense or sparse) to ``target`` (``[N, D]``, e.g.
    :func:`image_targets`). ``alpha``: the strength, or a list of candidates chosen from by :func:`choose_alpha`
    (``jobs`` fits at a time), which needs ``groups`` (each row's image id)."""
    from sklearn.linear_model import Ridge

    cv_errors = None
    if not isinstance(alpha, (int, float)):
        if groups is None or len(groups) != target.shape[0]:
            raise ValueError("choosing the ridge strength needs each caption's image id (groups)")
        alpha, cv_errors = choose_alpha(inputs, target, np.asarray(groups), alpha, folds, setting, folds_setting, jobs)
    return ImageRidge(Ridge(alpha=alpha).fit(inputs, target), float(alpha), cv_errors)
