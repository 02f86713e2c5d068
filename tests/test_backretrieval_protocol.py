"""The paper's protocol (non-matching samples, BkR vs XLR over models) and per-language-pair evaluation."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from backretrieval import (
    BackRetrievalError,
    bkr_recall,
    corr_score,
    correlate_over_models,
    evaluate_pairs,
    run_protocol,
    sample_non_matching,
    xlr_recall,
)
from backretrieval.pairs import non_matching_sides
from backretrieval.protocol import format_table


def _world(rng, n_items, latent=24, d_img=48):
    """Items with a latent scene; photos and captions are noisy views of it."""
    z = rng.standard_normal((n_items, latent))
    images = z @ rng.standard_normal((latent, d_img)) + 0.8 * rng.standard_normal((n_items, d_img))
    return z, images


def test_sample_non_matching_is_disjoint_and_seeded():
    a, b = sample_non_matching(100, 40, seed=3)
    assert len(a) == len(b) == 40 and not set(a) & set(b)
    a2, b2 = sample_non_matching(100, 40, seed=3)
    np.testing.assert_array_equal(a, a2)
    assert not np.array_equal(a, sample_non_matching(100, 40, seed=4)[0])
    # was "protocol: N=51 needs 2N <= 100 items": now the parameter (--n under the CLI) and the largest N allowed
    with pytest.raises(BackRetrievalError, match=r"^n=51: needs 2N <= 100 items .*; use n=50 or less$"):
        sample_non_matching(100, 51, seed=0)
    with pytest.raises(BackRetrievalError, match=r"^n=0: expected at least 1 item per side$"):
        sample_non_matching(100, 0, seed=0)


def test_bkr_tracks_xlr_over_models_of_graded_quality():
    rng = np.random.default_rng(0)
    z, images = _world(rng, 600)
    proj = rng.standard_normal((24, 32))
    src = z @ proj
    models = {}
    for noise in (0.0, 2.0, 4.0, 8.0, 16.0, 64.0):  # target-language captions drift from the source ones
        models[f"noise{noise:g}"] = (src, src + noise * rng.standard_normal(src.shape))
    res = run_protocol(models, images, n=250, seeds=3, ks=(1, 10), progress=False)
    xlr = [res["models"][m]["mean"]["xlr@10"] for m in models]
    bkr = [res["models"][m]["mean"]["bkr@10"] for m in models]
    assert xlr[0] == 1.0 and xlr[-1] < 0.2 and all(np.diff(xlr) <= 0)
    corr = res["correlation"]["@10"]
    assert corr["pearson"]["bkr"]["mean"] > 0.9 and corr["spearman"]["bkr"]["mean"] > 0.8
    assert len(corr["pearson"]["bkr"]["per_seed"]) == 3
    # the protocol's numbers are those of the metric functions on the sampled sets
    src_idx, tgt_idx = sample_non_matching(600, 250, seed=0)
    s, t = models["noise4"]
    rec = res["models"]["noise4"]["per_seed"][0]
    assert rec["bkr@10"] == bkr_recall(s[src_idx], images[src_idx], t[tgt_idx], images[tgt_idx], (10,))["bkr@10"]
    assert rec["xlr@10"] == xlr_recall(s[src_idx], t[src_idx], (10,))["xlr@10"]
    assert bkr[0] > bkr[-1]


def test_shared_image_similarity_gives_the_same_result():
    rng = np.random.default_rng(1)
    z, images = _world(rng, 200)
    models = {"a": (z, z + rng.standard_normal(z.shape)), "b": (z, rng.standard_normal(z.shape))}
    shared = run_protocol(models, images, n=80, seeds=2, ks=(5,), progress=False)
    alone = run_protocol(models, images, n=80, seeds=2, ks=(5,), image_sim_bytes=0, progress=False)
    for m in models:
        per_seed = shared["models"][m]["per_seed"]
        assert len(per_seed) == 2 and all({"bkr@5", "xlr@5"} <= set(rec) for rec in per_seed)  # one per seed
        assert per_seed == alone["models"][m]["per_seed"]


def test_correlate_over_models_is_pearson_and_spearman_per_seed():
    per_model = {
        "m1": [{"xlr@10": 0.9, "bkr@10": 0.30, "corr": 0.5}, {"xlr@10": 0.8, "bkr@10": 0.2, "corr": 0.1}],
        "m2": [{"xlr@10": 0.5, "bkr@10": 0.20, "corr": 0.6}, {"xlr@10": 0.6, "bkr@10": 0.3, "corr": 0.2}],
        "m3": [{"xlr@10": 0.1, "bkr@10": 0.05, "corr": 0.4}, {"xlr@10": 0.1, "bkr@10": 0.1, "corr": 0.3}],
    }
    out = correlate_over_models(per_model, (10,))["@10"]
    p0 = np.corrcoef([0.9, 0.5, 0.1], [0.30, 0.20, 0.05])[0, 1]
    p1 = np.corrcoef([0.8, 0.6, 0.1], [0.2, 0.3, 0.1])[0, 1]
    assert out["pearson"]["bkr"]["per_seed"] == pytest.approx([p0, p1])
    assert out["pearson"]["bkr"]["mean"] == pytest.approx((p0 + p1) / 2)
    assert out["pearson"]["bkr"]["std"] == pytest.approx(abs(p0 - p1) / 2)
    rho = stats.spearmanr([0.9, 0.5, 0.1], [0.5, 0.6, 0.4]).statistic
    assert out["spearman"]["corr"]["per_seed"][0] == pytest.approx(rho)
    table = format_table({"toy en->de": correlate_over_models(per_model, (10,))}, 10)
    assert "toy en->de" in table and f"{(p0 + p1) / 2:.3f}" in table
    with pytest.raises(BackRetrievalError, match="at least 2 models"):
        correlate_over_models({"m1": per_model["m1"]}, (10,))
    # a seed where every model has the same XLR@10: its correlation is undefined, left out of the mean (was NaN)
    flat = {m: [*records, {"xlr@10": 0.5, "bkr@10": 0.1 * i, "corr": 0.2}] for i, (m, records) in
            enumerate(per_model.items())}
    bkr = correlate_over_models(flat, (10,))["@10"]["pearson"]["bkr"]
    assert np.isnan(bkr["per_seed"][2]) and bkr["defined"] == 2 and bkr["mean"] == pytest.approx((p0 + p1) / 2)
    assert "(2 of 3 seeds)" in format_table({"toy": correlate_over_models(flat, (10,))}, 10)


def _multilingual(rng, langs, n_images, parallel, d=16):
    """Captions of images in several languages; language offsets make some pairs harder."""
    z, feats = _world(rng, n_images)
    proj = rng.standard_normal((24, d))
    rows = []
    for i in range(n_images):
        shown = langs if parallel else [langs[i % len(langs)]]
        rows += [(i, lang) for lang in shown]
    img = np.array([r[0] for r in rows])
    lang = np.array([r[1] for r in rows])
    emb = z[img] @ proj + 0.3 * rng.standard_normal((len(rows), d))
    return emb, lang, feats[img], np.array([f"img{i}" for i in img]), np.array([f"g{i}" for i in img])


def test_evaluate_pairs_on_a_split_with_one_language_per_image_equals_bkr_per_pair():
    rng = np.random.default_rng(2)
    emb, langs, feats, ids, _ = _multilingual(rng, ["de", "en", "ja"], 300, parallel=False)
    res = evaluate_pairs(emb, langs, feats, ids, ks=(1, 10), seed=0)
    assert res["langs"] == ["de", "en", "ja"] and res["matrix"]["bkr@10"].shape == (3, 3)
    assert np.all(np.isnan(np.diag(res["matrix"]["bkr@10"])))
    assert "xlr@10" not in res["matrix"]  # no groups: no ground truth
    for i, a in enumerate(res["langs"]):
        for j, b in enumerate(res["langs"]):
            if a != b:
                s, t = langs == a, langs == b
                ref = bkr_recall(emb[s], feats[s], emb[t], feats[t], (10,), src_image_ids=ids[s])["bkr@10"]
                assert res["matrix"]["bkr@10"][i, j] == ref == res["pairs"][f"{a}->{b}"]["bkr@10"]
                assert res["pairs"][f"{a}->{b}"]["corr"] == pytest.approx(corr_score(emb[s], feats[s], emb[t], feats[t]))
    assert res["mean"]["bkr@10"] == pytest.approx(np.nanmean(res["matrix"]["bkr@10"]))


def test_evaluate_pairs_on_a_parallel_split_is_non_matching_and_has_xlr():
    rng = np.random.default_rng(3)
    emb, langs, feats, ids, groups = _multilingual(rng, ["de", "en", "fr"], 200, parallel=True)
    emb[langs == "fr"] = rng.standard_normal(emb[langs == "fr"].shape)  # one language the model fails on
    res = evaluate_pairs(emb, langs, feats, ids, ks=(1, 10), groups=groups, max_per_lang=80, seed=0)
    pair = res["pairs"]["de->en"]
    assert pair["n_src"] == pair["n_tgt"] == 80 and pair["n_xlr"] == 80
    assert res["pairs"]["en->de"]["xlr@10"] > 0.9
    for p in ("de->fr", "fr->en"):
        assert res["pairs"][p]["xlr@10"] < 0.3 and res["pairs"][p]["bkr@10"] < res["pairs"]["de->en"]["bkr@10"]
    again = evaluate_pairs(emb, langs, feats, ids, ks=(1, 10), groups=groups, max_per_lang=80, seed=0)
    assert again["pairs"] == res["pairs"]
    # uncapped, each of the 200 images every language captions is on one side of a pair only, half to each
    # (a matching split would keep all 200 on both sides)
    whole = evaluate_pairs(emb, langs, feats, ids, ks=(10,), groups=groups, seed=0, with_corr=False)
    for name, entry in whole["pairs"].items():
        assert (entry["n_src"], entry["n_tgt"]) == (100, 100) and entry["n_xlr"] == 200, name


def test_non_matching_sides_share_no_image():
    rng = np.random.default_rng(4)
    ids = np.array([f"i{k % 50}" for k in range(150)])
    src, tgt = np.arange(0, 100), np.arange(50, 150)  # ids i0..i49 appear on both sides
    a, b = non_matching_sides(src, tgt, ids, rng)
    assert not set(ids[a]) & set(ids[b])
    assert len(set(ids[a])) == 25 and len(set(ids[b])) == 25  # the shared images are halved


def test_evaluate_pairs_rejects_misaligned_inputs():
    with pytest.raises(BackRetrievalError, match="row-aligned"):
        evaluate_pairs(np.ones((4, 2)), ["en"] * 4, np.ones((3, 2)), list("abcd"))
    with pytest.raises(BackRetrievalError, match="at least 2 languages"):
        evaluate_pairs(np.ones((4, 2)), ["en"] * 4, np.ones((4, 2)), list("abcd"))


def test_run_protocol_needs_a_seed():
    rng = np.random.default_rng(5)
    z, images = _world(rng, 40)
    with pytest.raises(BackRetrievalError, match="at least 1 seed"):
        run_protocol({"a": (z, z), "b": (z, -z)}, images, n=12, seeds=0, progress=False)


def test_evaluate_pairs_intervals_and_paired_hits_for_checkpoint_selection():
    from backretrieval import better_beyond_noise

    rng = np.random.default_rng(7)
    emb, langs, feats, ids, groups = _multilingual(rng, ["de", "en", "fr"], 200, parallel=True)
    worse = emb + 2.0 * rng.standard_normal(emb.shape)  # a later, much worse checkpoint of the same captions
    kw = dict(ks=(1, 10), groups=groups, max_per_lang=80, seed=0, max_rank=10, with_corr=True, return_hits=True)
    res = evaluate_pairs(emb, langs, feats, ids, bootstrap=200, **kw)
    pair = res["pairs"]["de->en"]
    for metric in ("bkr@10", "xlr@10", "corr"):
        ci = pair["intervals"][metric]
        assert ci["lo"] <= pair[metric] <= ci["hi"] and ci["value"] == pytest.approx(pair[metric])
    assert set(pair["hubness"]) >= {"skewness", "hub_share"}
    hits = res["hits"]["bkr@10"]
    assert len(hits) == sum(p["n_src"] for p in res["pairs"].values())
    sizes = np.array([p["n_src"] for p in res["pairs"].values()])
    recalls = np.array([p["bkr@10"] for p in res["pairs"].values()])
    assert hits.mean() == pytest.approx(np.sum(sizes * recalls) / sizes.sum())  # the pairs' hits, concatenated
    bad = evaluate_pairs(worse, langs, feats, ids, **kw)
    assert bad["hits"]["bkr@10"].shape == hits.shape  # same queries: paired
    assert better_beyond_noise(hits, bad["hits"]["bkr@10"])
    assert not better_beyond_noise(bad["hits"]["bkr@10"], hits)
    assert "intervals" not in bad["pairs"]["de->en"]  # bootstrap=0 (the default): none


def test_run_protocol_intervals_per_seed():
    rng = np.random.default_rng(8)
    z, images = _world(rng, 120)
    proj = rng.standard_normal((24, 16))
    models = {f"m{s}": (z @ proj + s * rng.standard_normal((120, 16)), z @ proj + s * rng.standard_normal((120, 16)))
              for s in (0.5, 2.0)}
    res = run_protocol(models, images, n=50, seeds=2, ks=(10,), bootstrap=100, progress=False)
    rec = res["models"]["m0.5"]["per_seed"][0]
    for metric in ("bkr@10", "xlr@10", "corr"):
        assert rec["intervals"][metric]["lo"] <= rec[metric] <= rec["intervals"][metric]["hi"]
    assert "intervals" not in res["models"]["m0.5"]["mean"]


def test_random_g_leaves_bkr_at_chance_while_a_perfect_g_tracks_xlr():
    from backretrieval.images import image_feature_extractor

    rng = np.random.default_rng(5)
    z = rng.standard_normal((400, 16))  # each item's meaning
    models = {f"noise{s:g}": (z + 0.1 * rng.standard_normal(z.shape), z + s * rng.standard_normal(z.shape))
              for s in (0.1, 0.5, 1.0, 1.5, 2.5, 8.0)}
    perfect = run_protocol(models, z, n=200, seeds=5, ks=(10,), progress=False)  # g = similarity of meanings
    null_g = image_feature_extractor("random:0").extract([None] * 400, ids=[f"img{i}" for i in range(400)])
    null = run_protocol(models, null_g, n=200, seeds=5, ks=(10,), progress=False)
    bkr = {name: [res["models"][m]["mean"]["bkr@10"] for m in models] for name, res in (("perfect", perfect),
                                                                                         ("null", null))}
    tracking = perfect["correlation"]["@10"]
    assert tracking["pearson"]["bkr"]["mean"] > 0.85 and tracking["spearman"]["bkr"]["mean"] > 0.95
    assert max(bkr["perfect"]) - min(bkr["perfect"]) > 0.3
    assert max(abs(b - 10 / 200) for b in bkr["null"]) < 0.03  # every model at chance, K / N
    assert abs(null["correlation"]["@10"]["pearson"]["bkr"]["mean"]) < 0.5
    assert abs(null["models"]["noise0.1"]["mean"]["corr"]) < 0.05  # CORR knows nothing either


def test_evaluate_pairs_checks_every_row_naming_text_emb_and_its_row():
    """A NaN row was reported as a pair's src_text/tgt_text with a row number of the pair's subset, or accepted when
    the non-matching split left it out; every row of the inputs is checked first, named as given."""
    rng = np.random.default_rng(0)
    n_img = 100
    feats = rng.standard_normal((n_img, 16)).astype(np.float32)
    langs, ids = ["en", "de"] * n_img, [f"i{i // 2}" for i in range(2 * n_img)]
    image_feats = feats[[i // 2 for i in range(2 * n_img)]]
    emb = rng.standard_normal((2 * n_img, 8)).astype(np.float32)
    for row in (150, 151):  # one is left out of every pair by the non-matching split
        bad = emb.copy()
        bad[row] = np.nan
        with pytest.raises(BackRetrievalError, match=rf"^text_emb: the array has 1 of 200 rows with NaN or inf "
                                                     rf"\(first: row {row}\)"):
            evaluate_pairs(bad, langs, image_feats, ids)
    bad = image_feats.copy()
    bad[151] = np.inf
    with pytest.raises(BackRetrievalError, match=r"^image_feats: the array has 1 of 200 rows with NaN or inf "
                                                 r"\(first: row 151\)"):
        evaluate_pairs(emb, langs, bad, ids)


def test_evaluate_pairs_refuses_one_string_for_a_list():
    """langs="en" was read as its characters (a TypeError of len() on the way)."""
    rng = np.random.default_rng(1)
    emb, feats = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    with pytest.raises(BackRetrievalError, match=r"^langs: expected a sequence of language codes, got one str "
                                                 r"\('en'\); wrap it in a list$"):
        evaluate_pairs(emb, "en", feats, ["a", "b", "c", "d"])
    with pytest.raises(BackRetrievalError, match=r"^image_ids: expected a sequence of image ids, got one str"):
        evaluate_pairs(emb, ["en", "de"] * 2, feats, "abcd")


@pytest.mark.parametrize("option,message", [
    ({"ties": "best"}, r"^ties: expected one of pessimistic, optimistic, expected, got 'best'$"),
    ({"max_rank": 4, "ks": (1, 5)}, r"^max_rank 4: must be >= the largest K \(5\) for exact Recall@K$"),
    ({"retrieval": "dot"}, r"^retrieval: expected one of cosine, csls, got 'dot'$"),
    ({"csls_k": 0}, r"^csls_k: expected a positive number of neighbours, got 0$"),
])
def test_evaluate_pairs_checks_its_ranking_options_before_any_pair(option, message, monkeypatch):
    """A bad ties, max_rank, retrieval or csls_k was seen only by the first pair's bkr_recall: after the progress
    bar started, and never when no pair is scored (each image captioned in both languages, one image: the
    non-matching split leaves every pair a side without captions), so a result came back for a bad option."""
    import backretrieval.pairs as pairs

    emb = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    args = (emb, ["en", "de"], np.ones((2, 3), np.float32), ["a", "a"])
    assert all(0 in (p["n_src"], p["n_tgt"]) for p in evaluate_pairs(*args)["pairs"].values())  # nothing scored
    monkeypatch.setattr(pairs, "progress_bar", lambda *a, **k: pytest.fail("the pairs started before the check"))
    with pytest.raises(BackRetrievalError, match=message):
        evaluate_pairs(*args, **option)
    with pytest.raises(BackRetrievalError, match=message):  # the message bkr_recall gives
        bkr_recall(emb, np.ones((2, 3)), emb, np.ones((2, 3)), **option)


# --------------------------------------------------------------------------- mutation audit: gaps closed
def test_first_per_group_keeps_the_first_row_in_the_order_given():
    """XLR's parallel set takes the first caption of each group (in ``rows`` order); rows with no group are skipped."""
    from backretrieval.pairs import first_per_group

    groups = np.array(["g1", "g2", "g1", None, "g2"], dtype=object)
    assert first_per_group(np.arange(5), groups) == {"g1": 0, "g2": 1}
    assert first_per_group(np.array([4, 2, 1, 0, 3]), groups) == {"g2": 4, "g1": 2}


def test_run_protocol_default_n_is_half_the_items():
    """Without n, N = M // 2 per side: the most that keeps the two samples disjoint (20 items: 10 and 10)."""
    rng = np.random.default_rng(6)
    z, images = _world(rng, 20)
    out = run_protocol({"m": (z, z)}, images, seeds=1, ks=(1,), corr_pairs=1_000, progress=False)
    assert out["n"] == 10


def test_a_model_without_one_embedding_per_image_is_refused_naming_it():
    rng = np.random.default_rng(2)
    _, images = _world(rng, 20)
    good, short = rng.standard_normal((20, 8)), rng.standard_normal((19, 8))
    with pytest.raises(BackRetrievalError, match="^model short: 20 source / 19 target embeddings for 20 images; "
                                                 "expected one per image$"):
        run_protocol({"good": (good, good), "short": (good, short)}, images, seeds=1)
