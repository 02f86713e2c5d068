"""Sentence translation by retrieval (paper 5.2) on hand-built embeddings with known answers."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.errors import UserError
from globetrotter.evaluation.procrustes import normalize_rows
from globetrotter.evaluation.sentence import group_interval, parallel_set, ratio_interval, sentence_translation


def _layout(n_groups: int, languages: list[str]) -> tuple[np.ndarray, np.ndarray]:
    langs = np.tile(np.array(languages), n_groups)
    groups = np.repeat(np.arange(n_groups), len(languages))
    return langs, groups


def test_perfectly_aligned_languages_score_100_percent():
    rng = np.random.default_rng(0)
    langs, groups = _layout(50, ["en", "de", "ja", "ar"])
    meaning = normalize_rows(rng.normal(size=(50, 32)))
    emb = normalize_rows(meaning[groups] + 0.01 * rng.normal(size=(len(groups), 32)))
    res = sentence_translation(emb, langs, groups)
    assert res["accuracy"] == 1.0
    off_diag = res["matrix"][~np.eye(4, dtype=bool)]
    assert np.all(off_diag == 1.0) and np.all(np.isnan(np.diag(res["matrix"])))
    assert res["k"] == 3 and res["n_queries"] == 200 and res["n_groups"] == 50


def test_per_group_counts_and_their_interval():
    rng = np.random.default_rng(2)
    langs, groups = _layout(40, ["en", "de", "ja", "ar"])
    keep = ~((groups == 3) & (langs == "ja"))  # group 3 in three languages: 6 ordered translation pairs, not 12
    langs, groups = langs[keep], groups[keep]
    meaning = normalize_rows(rng.normal(size=(40, 16)))
    perfect = sentence_translation(normalize_rows(meaning[groups]), langs, groups)
    assert perfect["group_positives"][3] == 6 and perfect["group_positives"].sum() == 39 * 12 + 6
    assert np.array_equal(perfect["group_hits"], perfect["group_positives"])
    assert group_interval(perfect["group_hits"], perfect["group_positives"]) | {"level": 0} == {
        "lo": 1.0, "hi": 1.0, "level": 0, "replicates": 1000}
    noisy = sentence_translation(normalize_rows(meaning[groups] + 0.9 * rng.normal(size=(len(groups), 16))),
                                 langs, groups, k=1)
    assert noisy["group_hits"].sum() / noisy["group_positives"].sum() == pytest.approx(noisy["accuracy"])
    interval = group_interval(noisy["group_hits"], noisy["group_positives"], seed=3)
    assert interval["lo"] < noisy["accuracy"] < interval["hi"]
    assert interval == group_interval(noisy["group_hits"], noisy["group_positives"], seed=3)  # seeded


def test_the_ratio_of_two_models_on_the_same_groups_has_a_paired_interval():
    rng = np.random.default_rng(4)
    langs, groups = _layout(60, ["en", "de", "fr"])
    meaning = normalize_rows(rng.normal(size=(60, 16)))
    runs = [sentence_translation(normalize_rows(meaning[groups] + noise * rng.normal(size=(len(groups), 16))),
                                 langs, groups, k=1) for noise in (0.6, 1.2)]
    (good_h, good_p), (weak_h, weak_p) = [(r["group_hits"], r["group_positives"]) for r in runs]
    ratio = ratio_interval((weak_h, weak_p), (good_h, good_p), seed=1)
    assert ratio["ratio"] == pytest.approx(runs[1]["accuracy"] / runs[0]["accuracy"])
    assert ratio["lo"] < ratio["ratio"] < ratio["hi"] < 1.0  # the weaker model, beyond noise
    assert ratio_interval((good_h, good_p), (good_h, good_p)) | {"level": 0} == {
        "ratio": 1.0, "lo": 1.0, "hi": 1.0, "level": 0, "replicates": 1000}  # paired: the same groups each time
    # unpaired replicates of the two figures would give the same ratio a wide interval
    unpaired = (group_interval(weak_h, weak_p, seed=1), group_interval(good_h, good_p, seed=2))
    assert ratio["hi"] - ratio["lo"] < unpaired[0]["hi"] / unpaired[1]["lo"] - unpaired[0]["lo"] / unpaired[1]["hi"]
    nothing = ratio_interval((good_h, good_p), (np.zeros_like(good_h), good_p))  # a bottom model that finds nothing
    assert nothing["ratio"] == nothing["lo"] == nothing["hi"] == np.inf
    with pytest.raises(ValueError, match="same groups"):
        ratio_interval((weak_h[:-1], weak_p[:-1]), (good_h, good_p))


def test_random_model_scores_chance():
    rng = np.random.default_rng(1)
    langs, groups = _layout(100, ["en", "de", "fr", "ru"])
    scores = []
    for seed in range(5):
        emb = normalize_rows(np.random.default_rng(seed).normal(size=(len(groups), 64)))
        res = sentence_translation(emb, langs, groups)
        scores.append(res["accuracy"])
    # chance: each positive lands in the top 3 of 300 other-language candidates with p = 3/300
    assert res["chance"] == pytest.approx(3 / 300)
    # 5 runs x 1200 positives, binomial sd of the mean ~ 0.0013
    assert np.mean(scores) == pytest.approx(0.01, abs=0.005)
    del rng


def test_chance_weighs_each_query_by_its_own_translations_when_groups_lack_languages():
    """Groups missing languages: chance is each query's translations (its group's other languages) times the share
    of its candidates in the top k, over all translations; a constant scorer with seeded ties averages to it."""
    presence = [["en", "de", "fr"], ["en", "de"], ["en"], ["en", "de", "fr"], ["de", "fr"], ["en", "fr"]] * 4
    langs = np.array([lang for group in presence for lang in group])
    groups = np.array([g for g, group in enumerate(presence) for _ in group])
    translations = np.array([len(presence[g]) - 1 for g in groups])
    candidates = np.array([(langs != lang).sum() for lang in langs])
    expected = float((translations * np.minimum(1, 2 / candidates)).sum() / translations.sum())
    constant = np.ones((len(langs), 4), np.float32)
    runs = [sentence_translation(constant, langs, groups, tie_seed=seed) for seed in range(400)]
    assert runs[0]["chance"] == pytest.approx(expected)
    assert np.mean([r["accuracy"] for r in runs]) == pytest.approx(expected, abs=0.01)


def test_pair_matrix_and_asymmetry_match_hand_computed_case():
    # 2 groups, 3 languages. en and de are aligned; fr is placed so that fr queries
    # retrieve the translations of the *other* group, while en/de queries ignore fr.
    e = np.eye(4, dtype=np.float32)
    emb = np.stack([
        e[0], e[0], 0.6 * e[1] + 0.8 * e[2],  # group 0: en, de, fr
        e[1], e[1], 0.6 * e[0] + 0.8 * e[3],  # group 1: en, de, fr
    ])
    langs = np.array(["en", "de", "fr"] * 2)
    groups = np.array(["g0"] * 3 + ["g1"] * 3)
    res = sentence_translation(normalize_rows(emb), langs, groups, k=1)
    m = dict(zip(res["languages"], range(3)))
    mat = res["matrix"]
    # en and de find each other at rank 1
    assert mat[m["en"], m["de"]] == 1.0 and mat[m["de"], m["en"]] == 1.0
    # with k=1 an en query's single slot goes to de, so its fr translation is missed
    assert mat[m["en"], m["fr"]] == 0.0
    # a fr query of group 0 is nearest to e[1] (group 1's en/de): wrong group
    assert mat[m["fr"], m["en"]] + mat[m["fr"], m["de"]] == 0.0
    # 2 hits (en->de, de->en) per group out of 6 positives per group
    assert res["accuracy"] == pytest.approx(4 / 12)
    assert np.allclose(res["asymmetry"], res["matrix"] - res["matrix"].T, equal_nan=True)


def test_candidates_all_lets_same_language_sentences_compete():
    # Two en sentences are identical, their translations are only close: with every
    # sentence as a candidate the same-language twin takes the single top slot.
    emb = normalize_rows(np.array([[1, 0, 0], [1, 0, 0], [0.9, 0.1, 0], [0.9, -0.1, 0]], dtype=np.float32))
    langs = np.array(["en", "en", "de", "de"])
    groups = np.array([0, 1, 0, 1])
    other = sentence_translation(emb, langs, groups, k=1)
    every = sentence_translation(emb, langs, groups, k=1, candidates="all")
    assert other["per_query_language"]["en"] == 0.5  # each en query: de twin tie broken one way
    assert every["per_query_language"]["en"] == 0.0  # the other en sentence wins the slot
    assert every["chance"] == pytest.approx(1 / 3) and other["chance"] == pytest.approx(1 / 2)


def test_duplicate_caption_per_group_and_language_is_rejected():
    emb = normalize_rows(np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="one per language"):
        sentence_translation(emb, ["en", "en", "de"], [0, 0, 0])


def _metas(n_groups: int, languages: list[str], extra: bool = False) -> list[dict]:
    metas = []
    for g in range(n_groups):
        for lang in languages:
            metas.append({"caption": f"{lang} caption {g}", "lang": lang, "group": f"img-{g}", "image_id": f"img-{g}"})
            if extra:
                metas.append({"caption": f"{lang} second caption {g}", "lang": lang, "group": f"img-{g}", "image_id": f"img-{g}"})
    return metas


def test_parallel_set_is_seeded_complete_and_takes_first_caption():
    metas = _metas(30, ["en", "de", "fr"], extra=True)
    metas.append({"caption": "orphan", "lang": "en", "group": "img-x", "image_id": "img-x"})  # lacks de, fr
    a = parallel_set(metas, n_groups=10, seed=3)
    b = parallel_set(list(reversed(metas)), n_groups=10, seed=3)
    c = parallel_set(metas, n_groups=10, seed=4)
    assert a.group_ids == b.group_ids  # independent of shard order
    assert a.group_ids != c.group_ids
    assert a.skipped_groups == 1 and len(a) == 30
    assert all("second" not in cap for cap in a.captions)  # first caption per language
    for i in range(len(a)):
        gid = a.group_ids[a.groups[i]]
        assert a.captions[i] == f"{a.langs[i]} caption {gid.split('-')[1]}"


def test_parallel_set_keeps_distinct_group_ids_apart_and_reports_collisions():
    metas = [
        {"caption": "x", "lang": "en", "group": "1", "image_id": "a"},
        {"caption": "y", "lang": "de", "group": "1", "image_id": "a"},
        {"caption": "z", "lang": "en", "group": "01", "image_id": "b"},  # differs from "1" as a string
        {"caption": "w", "lang": "de", "group": "01", "image_id": "b"},
    ]
    ps = parallel_set(metas, n_groups=None)
    assert ps.group_ids == ["01", "1"]
    metas.append({"caption": "v", "lang": "en", "group": "1", "image_id": "c"})  # same id, another image
    with pytest.raises(UserError, match="different images"):
        parallel_set(metas, n_groups=None)


def test_group_ids_of_mixed_types_never_collide():
    # 1 and "1" are distinct ids; np.asarray would turn both into the string "1"
    e = np.eye(2, dtype=np.float32)
    emb = np.stack([e[0], e[1], e[0], e[1]])
    res = sentence_translation(emb, ["en", "en", "de", "de"], [1, "1", 1, "1"])
    assert res["n_groups"] == 2 and res["accuracy"] == 1.0
    # tuples are ids too, not extra columns
    res = sentence_translation(emb, ["en", "en", "de", "de"], [("img", 0), ("img", 1), ("img", 0), ("img", 1)])
    assert res["n_groups"] == 2 and res["accuracy"] == 1.0


def test_parallel_set_errors_do_not_blame_sentence_translation():
    # parallel_set also feeds word translation, build-dictionary and clustering
    with pytest.raises(UserError, match="at least 2 languages") as err:
        parallel_set(_metas(3, ["en", "de"]), languages=["en"])
    assert "sentence" not in str(err.value)
    with pytest.raises(UserError, match="parallel") as err:
        parallel_set([{"caption": "x", "lang": "en", "group": None, "image_id": "a"}])
    assert "sentence" not in str(err.value)


def test_candidates_all_never_counts_the_query_as_its_own_candidate():
    """With every sentence a candidate, the query itself is still none: translations a little off their query fill
    the top M − 1 and score 100%, though the query's own similarity (1) is higher than theirs."""
    rng = np.random.default_rng(5)
    langs, groups = _layout(20, ["en", "de", "fr"])
    meaning = normalize_rows(rng.normal(size=(20, 16)))
    emb = normalize_rows(meaning[groups] + 0.01 * rng.normal(size=(len(groups), 16)))
    res = sentence_translation(emb, langs, groups, candidates="all")
    assert res["accuracy"] == 1.0 and res["chance"] == pytest.approx(2 / 59)


def test_k_may_reach_the_number_of_candidates_but_not_pass_it():
    """k equal to a query's candidates takes them all: every translation found, at chance 1."""
    langs, groups = _layout(3, ["en", "de"])  # each query: 3 other-language candidates
    emb = normalize_rows(np.random.default_rng(6).normal(size=(6, 4)))
    res = sentence_translation(emb, langs, groups, k=3)
    assert res["accuracy"] == 1.0 and res["chance"] == 1.0
    with pytest.raises(ValueError, match="exceeds"):
        sentence_translation(emb, langs, groups, k=4)


@pytest.mark.parametrize("level", [0.95, 0.5])
def test_the_ratio_interval_holds_the_central_level_of_the_paired_replicate_ratios(level):
    """``lo`` and ``hi`` are the (1 − level)/2 and (1 + level)/2 quantiles of the replicates' ratios, each replicate
    drawing the same groups for both models (bootstrap_weights, the same seed): written out here."""
    from backretrieval.uncertainty import bootstrap_weights

    rng = np.random.default_rng(7)
    n = 50
    positives = np.full(n, 6)
    top, bottom = rng.integers(0, 7, n), rng.integers(1, 7, n)
    got = ratio_interval((top, positives), (bottom, positives), n_boot=400, level=level, seed=2)
    w = np.concatenate(list(bootstrap_weights(n, 400, 2)))
    ratios = (w @ top) / (w @ bottom)  # the same positives on both sides cancel
    tail = (1 - level) / 2
    for value, share in ((got["lo"], tail), (got["hi"], 1 - tail)):  # a quantile: share below <= q <= share at most
        assert np.mean(ratios < value - 1e-12) <= share <= np.mean(ratios <= value + 1e-12)
    assert got["ratio"] == pytest.approx(top.sum() / bottom.sum())


def test_sentence_translation_refuses_inputs_it_cannot_score():
    emb = normalize_rows(np.eye(4, dtype=np.float32))
    langs, groups = ["en", "de", "en", "de"], ["g0", "g0", "g1", "g1"]
    with pytest.raises(ValueError, match="emb has 3 rows but langs has 4 and groups 4"):
        sentence_translation(emb[:3], langs, groups)
    with pytest.raises(ValueError, match=r"need at least 2 languages, got \['en'\]"):
        sentence_translation(emb, ["en"] * 4, ["g0", "g1", "g2", "g3"])
    with pytest.raises(ValueError, match="candidates must be 'other-language' or 'all', got 'same'"):
        sentence_translation(emb, langs, groups, candidates="same")
    with pytest.raises(ValueError, match=r"scores of 4 rows have shape \(4, 3\), expected \(4, 4\)"):
        sentence_translation(lambda rows: np.zeros((len(rows), 3)), langs, groups)
