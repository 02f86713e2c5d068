"""BkR from a sample of the queries, each against every target and ranked among every source image: the large-N
estimate the trainer's validation makes (``queries``, ``max_queries``, one source-image index per language)."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval import ApproxConfig, BackRetrievalError, bkr_recall, evaluate_pairs

KS = (1, 5, 10)


def _world(rng: np.random.Generator, n: int, noise: float = 0.8) -> tuple[np.ndarray, ...]:
    """Texts and images as noisy views of a latent; the source and target sets show other scenes."""
    w_t, w_i = rng.standard_normal((8, 24)), rng.standard_normal((8, 40))
    out = []
    for _ in range(2):
        z = rng.standard_normal((n, 8))
        out += [(z @ w_t + noise * rng.standard_normal((n, 24))).astype(np.float32),
                (z @ w_i + noise * rng.standard_normal((n, 40))).astype(np.float32)]
    return tuple(out)


def test_sampled_queries_keep_every_source_image_in_the_ranking():
    st, si, tt, ti = _world(np.random.default_rng(0), 300)
    rows = np.sort(np.random.default_rng(1).choice(300, 60, replace=False))
    full = bkr_recall(st, si, tt, ti, KS)
    some = bkr_recall(st, si, tt, ti, KS, queries=rows)
    assert some["n_queries"] == 60 and some["n_images"] == 300
    np.testing.assert_array_equal(some["ranks"], full["ranks"][rows])
    for k in KS:
        np.testing.assert_array_equal(some["hits"][k], full["hits"][k][rows])
    # the same rows as a source set of their own rank among 60 images only: not the same metric
    alone = bkr_recall(st[rows], si[rows], tt, ti, KS)
    assert (alone["ranks"] <= some["ranks"]).all() and (alone["ranks"] < some["ranks"]).any()
    # a precomputed similarity has one row per query
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    sim = unit(st) @ unit(tt).T  # the cosine the embeddings' call ranks by
    given = bkr_recall(None, si, None, ti, KS, queries=rows, text_sim=sim[rows])
    np.testing.assert_array_equal(given["ranks"], full["ranks"][rows])
    with pytest.raises(BackRetrievalError, match="one per query"):
        bkr_recall(None, si, None, ti, KS, queries=rows, text_sim=sim)
    with pytest.raises(BackRetrievalError, match=r"queries: expected source rows in \[0, 300\)"):
        bkr_recall(st, si, tt, ti, KS, queries=[0, 300])


def test_exact_text_search_with_the_approximate_image_side_matches_exact_on_structured_data():
    st, si, tt, ti = _world(np.random.default_rng(2), 2000, noise=0.3)
    exact = bkr_recall(st, si, tt, ti, KS, max_rank=10)
    approx = bkr_recall(st, si, tt, ti, KS, approximate=ApproxConfig(index="exact"))
    np.testing.assert_array_equal(approx["retrieved"], exact["retrieved"])  # the text side is the exact search
    assert approx["approximate"] and abs(approx["bkr@10"] - exact["bkr@10"]) <= 0.01


def test_pairs_from_sampled_queries_estimate_the_full_figure_with_one_image_index_per_language(monkeypatch):
    import backretrieval.pairs as pairs

    rng = np.random.default_rng(3)
    langs = np.repeat(["a", "b", "c"], 1500)
    st, si, _, _ = _world(rng, len(langs), noise=0.5)
    ids = np.arange(len(langs))
    built = []
    real = pairs.SourceImageIndex
    monkeypatch.setattr(pairs, "SourceImageIndex", lambda *a, **k: built.append(1) or real(*a, **k))
    exact = evaluate_pairs(st, langs, si, ids, KS, with_corr=False, max_rank=10)
    sampled = evaluate_pairs(st, langs, si.astype(np.float16), ids, KS, with_corr=False, max_rank=10,
                             max_queries=400, approximate=ApproxConfig(index="exact"), return_hits=True)
    assert len(built) == 3  # one per source language, not one per pair
    assert len(sampled["hits"]["bkr@10"]) == 6 * 400
    assert all(entry["n_src"] == 1500 for entry in sampled["pairs"].values())  # every caption still a candidate
    # 2,400 queries: the mean's standard error is at most 0.01
    assert abs(sampled["mean"]["bkr@10"] - exact["mean"]["bkr@10"]) < 0.03
    assert 0.1 < exact["mean"]["bkr@10"] < 0.9  # a figure with room on both sides
    again = evaluate_pairs(st, langs, si.astype(np.float16), ids, KS, with_corr=False, max_rank=10,
                           max_queries=400, approximate=ApproxConfig(index="exact"), return_hits=True)
    np.testing.assert_array_equal(again["hits"]["bkr@10"], sampled["hits"]["bkr@10"])  # seeded: paired across calls
    with pytest.raises(BackRetrievalError, match="max_queries must be >= 1"):
        evaluate_pairs(st, langs, si, ids, KS, with_corr=False, max_queries=0)


def test_validation_set_samples_queries_past_its_budget_and_keeps_features_in_float16(tiny_world, monkeypatch):
    import globetrotter.evaluation.val_set as val_set

    monkeypatch.setattr(val_set, "_CHUNK", 5)  # several chunks of pictures
    whole = val_set.BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features="pixels")
    sampled = val_set.BackRetrievalSet(tiny_world / "val", max_per_lang=1000, image_features="pixels")
    # one pass (every caption) and two (a sample that holds every caption) read the same set
    assert whole.texts == sampled.texts and (whole.image_ids == sampled.image_ids).all()
    np.testing.assert_array_equal(whole.image_feats, sampled.image_feats)
    monkeypatch.setattr(val_set, "_CHUNK", 4096)
    reference = val_set.BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features="pixels")
    np.testing.assert_allclose(whole.image_feats, reference.image_feats, atol=1e-6)  # chunking changes nothing
    names = sorted(set(whole.langs.tolist()))
    pairs = len(names) * (len(names) - 1)
    assert whole.queries_per_pair is None and whole.image_feats.dtype == np.float32
    monkeypatch.setattr(val_set, "QUERY_BUDGET", 2 * pairs)  # two queries per pair
    small = val_set.BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features="pixels")
    assert small.queries_per_pair == 2 and small.image_feats.dtype == np.float16
    emb = np.random.default_rng(0).standard_normal((len(small.texts), 16)).astype(np.float32)
    metrics, hits = small.evaluate(emb)
    assert len(hits["val/bkr@10"]) == 2 * pairs and 0 <= metrics["val/bkr@10"] <= 1


def test_sampled_queries_under_csls_keep_the_penalty_of_every_source_text():
    st, si, tt, ti = _world(np.random.default_rng(4), 300)
    rows = np.arange(0, 300, 7)
    for approximate in (False, ApproxConfig(index="exact")):
        full = bkr_recall(st, si, tt, ti, KS, retrieval="csls", approximate=approximate)
        some = bkr_recall(st, si, tt, ti, KS, retrieval="csls", approximate=approximate, queries=rows)
        np.testing.assert_array_equal(some["retrieved"], full["retrieved"][rows])


def test_a_boolean_mask_of_queries_is_its_true_rows_not_rows_0_and_1():
    """``queries=mask`` was read as indices, True/False as rows 1/0: the figure of two queries, silently."""
    st, si, tt, ti = _world(np.random.default_rng(2), 100)
    mask = np.arange(100) < 50
    by_mask = bkr_recall(st, si, tt, ti, KS, queries=mask)
    by_rows = bkr_recall(st, si, tt, ti, KS, queries=np.arange(50))
    assert by_mask["n_queries"] == 50 and by_mask["n_images"] == 100
    np.testing.assert_array_equal(by_mask["ranks"], by_rows["ranks"])
    assert all(by_mask[f"bkr@{k}"] == by_rows[f"bkr@{k}"] for k in KS)
    assert bkr_recall(st, si, tt, ti, KS, queries=list(mask))["n_queries"] == 50  # a list of bools too
    with pytest.raises(BackRetrievalError, match=r"queries: a boolean mask needs one entry per source row \(100\), "
                                                 r"got shape \(50,\)"):
        bkr_recall(st, si, tt, ti, KS, queries=mask[:50])
    with pytest.raises(BackRetrievalError, match="queries: expected integer source rows or a boolean mask, got "
                                                 "float64"):
        bkr_recall(st, si, tt, ti, KS, queries=np.arange(50) + 0.5)
