"""Procrustes refinement (paper 3.4): recovers known rotations between noisy copies of a space."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import special_ortho_group

from globetrotter.evaluation.procrustes import (
    mutual_nearest_neighbors,
    normalize_rows,
    orthogonal_map,
    refine_multi,
    refine_pairwise,
)

DIM, N = 16, 500


def _noisy_rotated_copy(x: np.ndarray, seed: int, noise: float = 0.01):
    """``x`` rotated by a random rotation, noised and row-shuffled; returns (y, rotation, where_i)."""
    rng = np.random.default_rng(seed)
    rotation = special_ortho_group.rvs(DIM, random_state=seed)
    perm = rng.permutation(len(x))
    y = (x @ rotation)[perm] + noise * rng.normal(size=x.shape)
    return y, rotation, np.argsort(perm)  # x[i] <-> y[where_i[i]]


@pytest.fixture(scope="module")
def space() -> np.ndarray:
    return normalize_rows(np.random.default_rng(0).normal(size=(N, DIM)))


def test_orthogonal_map_is_exact_on_noise_free_pairs(space):
    rotation = special_ortho_group.rvs(DIM, random_state=7)
    w = orthogonal_map(space, space @ rotation)
    assert np.allclose(w, rotation, atol=1e-6)
    assert np.allclose(w.T @ w, np.eye(DIM), atol=1e-8)


def test_mutual_nearest_neighbors_hand_case():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    y = np.array([[0.0, 1.0], [1.0, 0.1]])
    i, j = mutual_nearest_neighbors(x, y, k=1)
    assert sorted(zip(i.tolist(), j.tolist())) == [(0, 1), (1, 0)]  # x2's nearest y1 prefers x0
    i, j = mutual_nearest_neighbors(x, y, k=2, one_per_word=False)
    assert len(i) == 4 and {(0, 1), (1, 0)} <= set(zip(i.tolist(), j.tolist()))


def test_pairwise_refinement_recovers_a_random_rotation(space):
    y, rotation, where = _noisy_rotated_copy(space, seed=1)
    seed_pairs = (np.arange(10), where[:10])  # a 10-word seed dictionary (2% of the words)
    res = refine_pairwise(space, y, k=5, seed_pairs=seed_pairs)
    assert np.linalg.norm(res.w - rotation) < 0.05
    i, j = res.anchors
    assert len(i) == N and np.all(j == where[i])  # every word anchored to its true copy
    assert res.log[-1]["delta"] < 1e-6 and res.log[-1]["mean_cosine"] > 0.99


def test_multi_language_refinement_recovers_every_rotation(space):
    y, r1, w1 = _noisy_rotated_copy(space, seed=2)
    z, r2, w2 = _noisy_rotated_copy(space, seed=3)
    seeds = {(0, 1): (np.arange(10), w1[:10]), (0, 2): (np.arange(10), w2[:10]), (1, 2): (w1[:10], w2[:10])}
    res = refine_multi([space, y, z], k=5, seed_pairs=seeds)
    assert np.allclose(res.maps[0], np.eye(DIM))  # reference language
    assert np.linalg.norm(res.maps[1] - r1.T) < 0.05 and np.linalg.norm(res.maps[2] - r2.T) < 0.05
    for entry in res.log:  # block-coordinate sweeps never increase the objective
        obj = np.array(entry["objective"])
        assert np.all(np.diff(obj) <= 1e-12)
    assert res.log[-1]["anchors_per_pair"] == N and res.log[-1]["delta"] < 1e-6


def test_refinement_without_seeds_cannot_undo_a_random_rotation(space):
    # the unsupervised start is the identity: a far random rotation is out of reach,
    # which is why the Globetrotter spaces (already shared) need no seed
    y, rotation, _ = _noisy_rotated_copy(space, seed=4)
    res = refine_pairwise(space, y, k=5)
    assert np.linalg.norm(res.w - rotation) > 1.0


def test_knn_by_faiss_at_scale_finds_what_the_exact_product_does():
    from globetrotter.evaluation.procrustes import knn

    rng = np.random.default_rng(1)
    queries, base = normalize_rows(rng.normal(size=(20, DIM))), normalize_rows(rng.normal(size=(60, DIM)))
    product = knn(queries, base, 5)  # 20 x 60 is below exact_below: numpy
    by_faiss = knn(queries, base, 5, exact_below=0)
    np.testing.assert_array_equal(by_faiss[1], product[1])
    np.testing.assert_allclose(by_faiss[0], product[0], atol=1e-5)
    brute = np.argsort(-(queries @ base.T), axis=1)[:, :5]
    np.testing.assert_array_equal(product[1], brute)


def test_pairwise_refinement_stops_when_fewer_than_two_mutual_anchors_are_left():
    """One source word has one mutual neighbour: no map can be fitted on one pair, so the start (the identity) is kept
    and the log says why it stopped."""
    x, y = np.array([[1.0, 0.0]]), np.array([[1.0, 0.1], [0.0, 1.0]])
    res = refine_pairwise(x, y, k=1)
    np.testing.assert_array_equal(res.w, np.eye(2))
    assert len(res.log) == 1 and res.log[0]["anchors"] == 1 and np.isnan(res.log[0]["mean_cosine"])
    assert res.log[0]["delta"] == 0.0
    with pytest.raises(ValueError, match=r"^y: expected dimension 2 \(as x\), got 3$"):
        refine_pairwise(x, np.ones((2, 3)))
    with pytest.raises(ValueError, match="need at least 2 languages"):
        refine_multi([x])


def test_the_convergence_plot_of_a_pairwise_log_draws_its_mean_anchor_cosines(space, tmp_path, monkeypatch):
    from globetrotter.evaluation import plots

    y, _, _ = _noisy_rotated_copy(space, seed=3)
    log = refine_pairwise(space, y, k=5, n_iter=3, seed_pairs=(np.arange(50), np.arange(50))).log
    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: drawn.setdefault("ax", fig.axes[0]) and Path(path))
    plots.plot_convergence(log, tmp_path / "c.png", "pairwise")
    line = drawn["ax"].lines[0]
    assert drawn["ax"].get_ylabel() == "mean anchor cosine"
    assert list(line.get_xdata()) == [e["iteration"] for e in log]
    assert list(line.get_ydata()) == [e["mean_cosine"] for e in log]
