"""The closed-form image ridge (globetrotter.image_ridge) against hand-written references: the normal equations for
the fit, a fold-by-fold loop for the cross-validated choice of its strength."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from globetrotter.errors import UserError
from globetrotter.image_ridge import choose_alpha, fit_image_ridge, image_targets


def normal_equations(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Ridge with an unpenalised intercept: W = (Xc'Xc + alpha I)^-1 Xc'Yc on centred X, Y; b = mean(y) - mean(x) W."""
    xm, ym = x.mean(0), y.mean(0)
    xc, yc = x - xm, y - ym
    w = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ yc)
    return w, ym - xm @ w


def data(n: int = 60, f: int = 12, d: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f))
    y = x @ rng.normal(size=(f, d)) + 0.3 * rng.normal(size=(n, d)) + 2.0  # an offset the intercept takes
    return x, y


def test_targets_are_unit_rows_less_their_mean():
    features = np.random.default_rng(1).normal(size=(20, 7)) * np.arange(1, 21)[:, None]
    target, centre = image_targets(features)
    unit = features / np.linalg.norm(features, axis=1, keepdims=True)
    assert target.dtype == np.float32 and centre.dtype == np.float32
    np.testing.assert_allclose(centre, unit.mean(0), atol=1e-6)
    np.testing.assert_allclose(target, unit - unit.mean(0), atol=1e-6)
    assert np.allclose(target.mean(0), 0, atol=1e-6)
    zero, _ = image_targets(np.zeros((3, 4)))  # a zero row stays finite
    assert np.isfinite(zero).all()


@pytest.mark.parametrize("alpha", [0.1, 3.0, 50.0])
def test_fit_is_the_normal_equations_solution(alpha):
    x, y = data()
    fit = fit_image_ridge(x, y, alpha)
    w, b = normal_equations(x, y, alpha)
    assert fit.alpha == alpha and fit.cv_errors is None
    np.testing.assert_allclose(fit.model.coef_.T, w, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.model.intercept_, b, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.model.predict(x[:4]), x[:4] @ w + b, rtol=1e-8)


def test_fit_of_sparse_inputs_matches_the_normal_equations_of_the_dense_ones():
    x = sparse.random(80, 15, density=0.3, random_state=2, format="csr")
    y = np.random.default_rng(2).normal(size=(80, 3))
    fit = fit_image_ridge(x, y, 1.0)
    w, b = normal_equations(x.toarray(), y, 1.0)
    # scikit-learn solves the sparse case iteratively (tolerance 1e-4): equal to that precision
    np.testing.assert_allclose(fit.model.coef_.T, w, atol=1e-3)
    np.testing.assert_allclose(fit.model.intercept_, b, atol=1e-3)


def test_cross_validation_matches_a_fold_by_fold_loop_that_keeps_groups_together():
    from sklearn.model_selection import GroupKFold

    x, y = data(n=48)
    y[::2] += np.random.default_rng(4).normal(size=y[::2].shape)  # noise: a stronger ridge wins some folds
    groups = np.arange(48) // 3  # three captions per image
    alphas = [0.01, 1.0, 30.0, 1000.0]
    by_hand = {}
    for a in alphas:
        errors = []
        for train, test in GroupKFold(4).split(x, y, groups):
            assert not set(groups[train]) & set(groups[test])  # no image on both sides
            w, b = normal_equations(x[train], y[train], a)
            errors.append(((x[test] @ w + b - y[test]) ** 2).mean())
        by_hand[a] = float(np.mean(errors))
    best, errors = choose_alpha(x, y, groups, alphas, folds=4)
    assert list(errors) == alphas and errors == pytest.approx(by_hand, rel=1e-8)
    assert best == min(by_hand, key=by_hand.get)
    fit = fit_image_ridge(x, y, alphas, groups, folds=4)
    assert fit.alpha == best and fit.cv_errors == errors
    w, _ = normal_equations(x, y, best)  # then refitted on everything with the chosen strength
    np.testing.assert_allclose(fit.model.coef_.T, w, rtol=1e-8, atol=1e-10)
    # fits in separate processes: the same errors, to the last bit, and the same choice
    assert choose_alpha(x, y, groups, alphas, folds=4, jobs=2) == (best, errors)


def test_bad_input_is_named():
    x, y = data(n=20)
    groups = np.arange(20)
    with pytest.raises(ValueError, match="image id"):
        fit_image_ridge(x, y, [1.0, 2.0])
    with pytest.raises(ValueError, match="image id"):
        fit_image_ridge(x, y, [1.0, 2.0], groups[:-1])
    with pytest.raises(UserError, match=r"^ridge_alpha: .* over 5 folds \(ridge_folds\) needs at least 5 images, "
                                        r"the captions have 2$"):
        choose_alpha(x, y, np.arange(20) % 2, [1.0, 2.0], folds=5, setting="ridge_alpha", folds_setting="ridge_folds")


def test_unit_centred_rows_are_of_unit_length_around_their_mean_and_match_the_fine_tunes_targets():
    from globetrotter.image_ridge import unit_centred
    from globetrotter.training.backbone_finetune import unit_centred_targets

    vectors = np.random.default_rng(0).normal(size=(50, 7)) + 3.0  # a shared direction the centring takes off
    out = unit_centred(vectors)
    assert out.dtype == np.float64 and np.allclose(np.linalg.norm(out, axis=1), 1)
    centred = vectors - vectors.mean(0)
    np.testing.assert_allclose(out * np.linalg.norm(centred, axis=1, keepdims=True), centred)
    np.testing.assert_allclose(out, unit_centred_targets(vectors).numpy(), atol=1e-6)
    assert np.isfinite(unit_centred(np.ones((3, 4)))).all()  # rows equal to their mean: zeros, not NaN
