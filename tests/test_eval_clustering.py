"""k-means language vs meaning purity (paper A.4) on spaces clustered by language or by meaning."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.evaluation.clustering import cluster_analysis, nmi, purity_scores
from globetrotter.evaluation.procrustes import normalize_rows

LANGS = ["en", "de", "ja", "ar"]
GROUPS = 40


def _labels():
    langs = np.tile(np.array(LANGS), GROUPS)
    groups = np.repeat(np.arange(GROUPS), len(LANGS))
    return langs, groups


def test_purity_scores_hand_case():
    labels = np.array([0, 0, 1, 1])
    langs = np.array(["en", "de", "en", "de"])
    groups = np.array([0, 0, 1, 1])
    s = purity_scores(labels, langs, groups)
    assert s["language_purity"] == 0.5 and s["meaning_purity"] == 1.0
    assert s["nmi_meaning"] == pytest.approx(1.0) and s["nmi_language"] == pytest.approx(0.0, abs=1e-12)
    assert nmi(np.array([0, 1, 0, 1]), np.array(["a", "b", "a", "b"])) == pytest.approx(1.0)


def test_language_clustered_space_is_language_pure():
    rng = np.random.default_rng(0)
    langs, groups = _labels()
    lang_vec = normalize_rows(rng.normal(size=(len(LANGS), 32)))
    emb = normalize_rows(lang_vec[[LANGS.index(l) for l in langs]]
                         + 0.05 * rng.normal(size=(len(langs), 32)))
    res = cluster_analysis(emb, langs, groups, k=8)
    assert res["language_purity"] == 1.0
    assert res["meaning_purity"] < 0.5


def test_meaning_clustered_space_is_meaning_pure():
    rng = np.random.default_rng(1)
    langs, groups = _labels()
    topics = normalize_rows(rng.normal(size=(8, 32)))  # 8 topics, 5 groups each
    emb = normalize_rows(topics[groups % 8] + 0.05 * rng.normal(size=(len(langs), 32)))
    captions = [f"{l}:{g}" for l, g in zip(langs, groups)]
    res = cluster_analysis(emb, langs, groups, captions, k=8)
    assert res["meaning_purity"] == 1.0
    assert res["language_purity"] < 0.5
    assert res["chance"]["meaning_purity"] < 0.6
    assert len(res["examples"]) == 3 and len(res["examples"][0]["sentences"]) == 3
    assert sum(res["cluster_sizes"]) == len(langs)


def test_nmi_normalises_by_the_arithmetic_mean_of_the_entropies():
    """As scikit-learn's default (``average_method="arithmetic"``), including two single-cluster labellings (1)."""
    from sklearn.metrics import normalized_mutual_info_score

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 3, 200), rng.integers(0, 7, 200)
    b[:100] = a[:100]  # partly dependent, and the two entropies differ
    assert nmi(a, b) == pytest.approx(normalized_mutual_info_score(a, b), rel=1e-9)
    assert nmi(np.zeros(5), np.ones(5)) == normalized_mutual_info_score(np.zeros(5), np.ones(5)) == 1.0
