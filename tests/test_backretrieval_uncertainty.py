"""Bootstrap intervals over queries, paired tests between models, checkpoint selection beyond noise."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from backretrieval import (
    BackRetrievalError,
    better_beyond_noise,
    bkr_recall,
    compare_hits,
    corr_interval,
    p_better,
    recall_interval,
)
from backretrieval.metric import corr_terms
from backretrieval.uncertainty import bootstrap_weights, mcnemar_test, paired_bootstrap, percentile_interval


def _world(rng, n, noise, d=16, d_img=24):
    """Source and target sets of different scenes; a text model of quality ``noise`` (lower is better)."""
    w_t, w_i = rng.standard_normal((8, d)), rng.standard_normal((8, d_img))
    z_s, z_t = rng.standard_normal((n, 8)), rng.standard_normal((n, 8))
    img = lambda z: z @ w_i + 0.3 * rng.standard_normal((len(z), d_img))  # noqa: E731
    txt = lambda z: z @ w_t + noise * rng.standard_normal((len(z), d))  # noqa: E731
    return txt(z_s), img(z_s), txt(z_t), img(z_t)


def test_bootstrap_weights_are_resamples_and_seeded():
    chunks = list(bootstrap_weights(50, 300, seed=3))
    w = np.concatenate(chunks)
    assert w.shape == (300, 50) and np.all(w.sum(axis=1) == 50) and np.all(w >= 0)
    np.testing.assert_array_equal(w, np.concatenate(list(bootstrap_weights(50, 300, seed=3))))
    assert not np.array_equal(w, np.concatenate(list(bootstrap_weights(50, 300, seed=4))))
    assert w.mean() == pytest.approx(1.0)


def test_recall_interval_contains_the_estimate_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    widths = []
    for n in (200, 2000, 20000):
        hits = (rng.random(n) < 0.3).astype(float)
        ci = recall_interval(hits, bootstrap=500, seed=0)
        assert ci["lo"] <= ci["value"] <= ci["hi"]
        assert ci["value"] == pytest.approx(hits.mean())
        # the binomial standard error sqrt(p (1 - p) / n)
        assert ci["se"] == pytest.approx(np.sqrt(0.3 * 0.7 / n), rel=0.15)
        widths.append(ci["hi"] - ci["lo"])
    assert widths[0] > 2.5 * widths[1] > 2.5 * 2.5 * widths[2]  # ~ 1 / sqrt(n): sqrt(10) ~ 3.2 per step


def test_the_standard_errors_are_the_replicates_std_with_ddof_1_as_scipy_bootstrap_gives_it():
    """``se``: the sample standard deviation of the B replicates, divided by B - 1 as ``scipy.stats.bootstrap``'s
    ``standard_error`` is (given the same replicates); for CORR's replicates too (each a Pearson of the fixed ranks,
    each pair weighted by its query's multiplicity, computed here with numpy's weighted covariance)."""
    rng = np.random.default_rng(0)
    hits = (rng.random(30) < 0.4).astype(float)
    weights = np.concatenate(list(bootstrap_weights(30, 4, seed=2)))  # B = 4: ddof 0 is sqrt(3/4) of ddof 1
    reps = weights @ hits / 30

    class Replicates:  # a previous result, whose replicates scipy takes as they are (n_resamples=0)
        bootstrap_distribution = reps

    scipy_se = stats.bootstrap((hits,), np.mean, n_resamples=0, bootstrap_result=Replicates,
                               method="percentile").standard_error
    assert recall_interval(hits, bootstrap=4, seed=2)["se"] == pytest.approx(scipy_se, rel=1e-9)
    assert scipy_se == pytest.approx(np.sqrt(np.sum((reps - reps.mean()) ** 2) / 3), rel=1e-9)
    text, image = rng.random(60), rng.random(60)
    query = np.repeat(np.arange(30), 2)  # two pairs per query
    x, y = stats.rankdata(text), stats.rankdata(image)
    covariances = [np.cov(x, y, aweights=w[query]) for w in weights]
    corr = [c[0, 1] / np.sqrt(c[0, 0] * c[1, 1]) for c in covariances]
    se = corr_interval(text, image, query, 30, bootstrap=4, seed=2)["se"]
    assert se == pytest.approx(np.std(corr, ddof=1), rel=1e-6)


def test_recall_interval_covers_the_true_recall_at_the_nominal_rate():
    rng = np.random.default_rng(1)
    covered = 0
    for trial in range(200):
        hits = (rng.random(400) < 0.2).astype(float)
        ci = recall_interval(hits, bootstrap=400, seed=trial)
        covered += ci["lo"] <= 0.2 <= ci["hi"]
    assert 0.90 <= covered / 200 <= 0.99


def test_bkr_result_hits_give_its_recall():
    rng = np.random.default_rng(2)
    res = bkr_recall(*_world(rng, 150, 0.5), ks=(1, 10), ties="expected")
    for k in (1, 10):
        assert res["hits"][k].shape == (150,) and res["hits"][k].mean() == pytest.approx(res[f"bkr@{k}"])


def test_corr_interval_matches_spearman_and_shrinks_with_n():
    rng = np.random.default_rng(3)
    widths = []
    for n in (40, 400):
        st, si, tt, ti = _world(rng, n, 1.0)
        terms = corr_terms(st, si, tt, ti, corr_pairs=50_000, seed=0)
        ci = corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], n, bootstrap=300)
        rho = stats.spearmanr(terms["text_dist"], terms["image_dist"]).statistic
        assert ci["value"] == pytest.approx(rho, abs=1e-6)
        assert ci["lo"] <= ci["value"] <= ci["hi"]
        widths.append(ci["hi"] - ci["lo"])
    assert widths[1] < widths[0] / 2


def test_corr_of_a_collapsed_model_is_no_association_in_the_library_and_the_interval(recwarn):
    """A model that gives every caption one vector: its text distances are all equal. corr_interval (behind
    `score` and `correlate`) said 0.0 with a [nan, nan] interval, corr_score NaN with scipy's warning."""
    from backretrieval import corr_score

    rng = np.random.default_rng(5)
    st, si, tt, ti = _world(rng, 60, 1.0)
    same = np.tile(st[:1], (60, 1))
    terms = corr_terms(same, si, same, ti, corr_pairs=50_000, seed=0)
    ci = corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], 60, bootstrap=50)
    assert ci == {"value": 0.0, "lo": 0.0, "hi": 0.0, "se": 0.0}
    assert corr_score(same, si, same, ti) == 0.0
    # three pairs of 60 queries: most replicates draw none; those are left out without a warning
    terms = corr_terms(st, si, tt, ti, corr_pairs=3, seed=0)
    corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], 60, bootstrap=50)
    assert not [w for w in recwarn if issubclass(w.category, (RuntimeWarning, stats.ConstantInputWarning))]


def test_compare_detects_a_planted_difference_and_not_a_null_one():
    rng = np.random.default_rng(4)
    n = 2000
    base = (rng.random(n) < 0.3).astype(float)
    better = np.where(rng.random(n) < 0.1, 1.0, base)  # 10% of the queries turned into hits: ~ +0.07
    res = compare_hits(better, base, seed=0)
    assert res["verdict"] == "A" and res["mcnemar"]["p_value"] < 1e-6 and res["diff"] > 0.05
    assert res["p_value"] <= 2 / 1001  # the bootstrap p-value floor with 1000 replicates
    assert res["bootstrap"]["lo"] > 0
    swapped = compare_hits(base, better, seed=0)
    assert swapped["verdict"] == "B"
    # null: two models with the same recall that disagree at random on some queries
    null_p = []
    for seed in range(20):
        r = np.random.default_rng(100 + seed)
        a = (r.random(n) < 0.3).astype(float)
        b = np.where(r.random(n) < 0.2, (r.random(n) < 0.3).astype(float), a)
        null_p.append(compare_hits(a, b, seed=seed)["p_value"])
    assert np.mean(np.asarray(null_p) < 0.05) <= 0.15  # at most ~ alpha, with slack for 20 trials


def test_mcnemar_is_the_exact_binomial_test_on_discordant_queries():
    a = np.array([1, 1, 1, 1, 1, 0, 0, 1, 0, 0], float)
    b = np.array([0, 0, 0, 0, 1, 1, 0, 1, 0, 0], float)  # A only: 4, B only: 1
    res = mcnemar_test(a, b)
    assert (res["b"], res["c"]) == (4, 1)
    assert res["p_value"] == pytest.approx(stats.binomtest(4, 5, 0.5).pvalue)
    assert mcnemar_test(a, a)["p_value"] == 1.0
    with pytest.raises(BackRetrievalError, match="0/1 hits"):
        mcnemar_test(a * 0.5, b)


def test_paired_bootstrap_is_paired():
    # two models that hit on nearly the same queries: the paired difference is sure, the recalls' intervals overlap
    rng = np.random.default_rng(5)
    a = (rng.random(600) < 0.5).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 1)[:15]] = 0  # B misses 15 of A's hits, nothing else changes
    pb = paired_bootstrap(a, b, n_boot=1000, seed=0)
    assert pb["lo"] > 0 and pb["p_value"] < 0.01
    ci_a, ci_b = recall_interval(a, seed=0), recall_interval(b, seed=0)
    assert ci_a["lo"] < ci_b["hi"]  # unpaired intervals could not tell


def test_compare_with_fractional_hits_uses_the_bootstrap_only():
    rng = np.random.default_rng(6)
    a, b = rng.random(300), rng.random(300)
    res = compare_hits(a, b)
    assert res["mcnemar"] is None and res["p_value"] == res["bootstrap"]["p_value"]
    with pytest.raises(BackRetrievalError, match="McNemar needs 0/1"):
        compare_hits(a, b, tests=["mcnemar"])


def test_paired_tests_need_the_same_queries():
    with pytest.raises(BackRetrievalError, match="300 hits for A and 200 for B"):
        compare_hits(np.zeros(300), np.zeros(200))


def test_better_beyond_noise_keeps_the_best_unless_clearly_better():
    rng = np.random.default_rng(7)
    n = 1000
    best = (rng.random(n) < 0.3).astype(float)
    slightly = best.copy()
    slightly[np.flatnonzero(best == 0)[:13]] = 1  # 13 queries gained, 10 lost: +0.003, noise
    slightly[np.flatnonzero(best == 1)[:10]] = 0
    clearly = best.copy()
    clearly[np.flatnonzero(best == 0)[:60]] = 1  # +0.06
    assert better_beyond_noise(slightly, None)  # no best yet
    assert better_beyond_noise(slightly, best, test=None)  # plain max, as the trainer does now
    assert not better_beyond_noise(slightly, best)
    assert not better_beyond_noise(slightly, best, test="bootstrap")
    assert better_beyond_noise(clearly, best) and better_beyond_noise(clearly, best, test="bootstrap")
    assert not better_beyond_noise(best, clearly, test=None)


def test_compare_hits_refuses_an_alpha_below_the_bootstraps_smallest_p_value():
    a, b = np.ones(400), np.zeros(400)
    with pytest.raises(BackRetrievalError, match="raise bootstrap to at least 2000"):
        compare_hits(a, b, alpha=0.001, bootstrap=1000)
    res = compare_hits(a, b, alpha=0.003, bootstrap=1000)  # 2 / 1001 < 0.003: reachable
    assert res["bootstrap"]["p_value"] == pytest.approx(2 / 1001) and res["verdict"] == "A"
    assert compare_hits(a, b, tests=["mcnemar"], alpha=0.001)["verdict"] == "A"  # McNemar alone: no such floor


def test_recall_interval_refuses_ranks_as_compare_hits_does():
    """Ranks (1 = best) given where hits are due gave an 'interval' of mean rank (44.64), silently."""
    ranks = bkr_recall(*_world(np.random.default_rng(3), 100, 0.5))["ranks"]
    message = r"hits: \d+ values outside \[0, 1\] \(query \d+: \d+\); hits are 0/1, or fractions .*\(not ranks\)"
    with pytest.raises(BackRetrievalError, match=message):
        recall_interval(ranks)
    with pytest.raises(BackRetrievalError, match=r"hits: 1 values outside \[0, 1\] \(query 2: -0.5\)"):
        recall_interval([1, 0, -0.5])
    assert recall_interval([1, 0, 0.5])["value"] == pytest.approx(0.5)  # fractions (ties='expected') are hits


def test_a_bad_level_is_named_as_the_parameter_given():
    """The message named 'bootstrap: the interval level' for a wrong level=; it names level (--level on the CLI)."""
    with pytest.raises(BackRetrievalError, match=r"^level: expected an interval level in \(0, 1\), got 2$"):
        recall_interval([1, 0, 1, 1], level=2)


# --------------------------------------------------------------------------- mutation audit: gaps closed
def _discordant(only_a: int, only_b: int, n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Paired 0/1 hits of n queries that differ on ``only_a`` queries A hits alone and ``only_b`` B hits alone."""
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < 0.4).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 1)[:only_a]] = 0
    b[np.flatnonzero(a == 0)[:only_b]] = 1
    return a, b


def test_percentile_interval_cuts_equal_tails():
    """The central ``level`` interval leaves (1 - level) / 2 of the replicates on each side."""
    reps = np.arange(1001.0)  # quantile q sits at 1000 q
    assert percentile_interval(reps, 0.9) == pytest.approx((50.0, 950.0))
    assert percentile_interval(reps, 0.5) == pytest.approx((250.0, 750.0))


def test_identical_models_give_bootstrap_p_values_of_one():
    """Every replicate difference of two equal hit vectors is 0: no evidence either way, p = (1 + B) / (B + 1)."""
    a = (np.random.default_rng(8).random(200) < 0.4).astype(float)
    pb = paired_bootstrap(a, a.copy(), n_boot=200, seed=0)
    assert pb["diff"] == 0.0 and pb["p_value"] == 1.0 and pb["p_greater"] == 1.0
    assert p_better(a, a.copy(), test="bootstrap", bootstrap=200) == 1.0


def test_compare_hits_reports_the_largest_p_value_of_its_tests():
    """9 queries for A alone, 2 for B alone: McNemar's exact p = 2 P(X <= 2), X ~ Bin(11, 1/2) = 134 / 2048 > 0.05,
    while the bootstrap's p is below 0.05; the conservative p-value is McNemar's, and the verdict a tie."""
    a, b = _discordant(9, 2)
    res = compare_hits(a, b, seed=0)
    assert res["mcnemar"]["p_value"] == pytest.approx(134 / 2048)
    assert res["bootstrap"]["p_value"] < 0.05 < res["mcnemar"]["p_value"]
    assert res["p_value"] == pytest.approx(134 / 2048) and res["verdict"] == "tie"


def test_a_p_value_equal_to_alpha_is_no_difference():
    """Significant means p < alpha: McNemar's p of 5 discordant queries all for A is 2 / 32 = alpha -> a tie; and an
    alpha equal to the bootstrap's smallest p-value 2 / (B + 1) is refused, as no p-value could go below it."""
    a, b = _discordant(5, 0)
    p = sum(math.comb(5, i) for i in (0, 5)) / 2 ** 5
    assert compare_hits(a, b, tests=["mcnemar"], alpha=p)["verdict"] == "tie"
    assert compare_hits(a, b, tests=["mcnemar"], alpha=0.07)["verdict"] == "A"
    with pytest.raises(BackRetrievalError, match="raise bootstrap to at least"):
        compare_hits(np.ones(400), np.zeros(400), alpha=2 / 1001, bootstrap=1000)


def test_better_beyond_noise_keeps_the_best_on_equal_means():
    """A new checkpoint with the same mean (other queries hit) is not better, with or without a test."""
    best = (np.random.default_rng(9).random(500) < 0.3).astype(float)
    same_mean = np.roll(best, 1)
    assert same_mean.mean() == best.mean() and not np.array_equal(same_mean, best)
    assert not better_beyond_noise(same_mean, best, test=None)
    assert not better_beyond_noise(same_mean, best)


def test_p_better_mcnemar_is_one_sided():
    """"new > best" by McNemar: P(X >= b), X ~ Bin(b + c, 1/2), b the queries only the new model hits."""
    new, best = _discordant(5, 0)
    assert p_better(new, best) == pytest.approx(0.5 ** 5)  # one-sided: half the two-sided 2 / 32
    assert p_better(best, new) == pytest.approx(1.0)  # worse: P(X >= 0)
    new, best = _discordant(6, 2)
    one_sided = sum(math.comb(8, i) for i in range(6, 9)) / 2 ** 8
    assert p_better(new, best) == pytest.approx(one_sided)


@pytest.mark.parametrize("hits, message", [
    (["a", "b"], "hits: expected a vector of per-query hits \\(numbers\\), got list"),
    ([], "hits: no queries \\(empty hit vector\\)"),
    ([1.0, np.nan], "hits: hit vector contains NaN or inf"),
])
def test_hits_that_are_not_a_vector_of_finite_numbers_are_refused(hits, message):
    with pytest.raises(BackRetrievalError, match=message):
        recall_interval(hits, bootstrap=10)


def test_an_unknown_paired_test_is_refused_naming_the_known_ones():
    a, b = np.array([1.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0])
    for tests in ([], ["mcnemar", "wilcoxon"]):
        with pytest.raises(BackRetrievalError, match="tests: expected some of mcnemar, bootstrap"):
            compare_hits(a, b, tests=tests, bootstrap=10)
    with pytest.raises(BackRetrievalError, match="test: expected None or one of mcnemar, bootstrap, got 'wilcoxon'"):
        p_better(a, b, test="wilcoxon")
    with pytest.raises(BackRetrievalError, match="test: expected None or one of mcnemar, bootstrap, got 'wilcoxon'"):
        better_beyond_noise(a, b, test="wilcoxon")


def test_p_better_without_a_discordant_query_is_one():
    """McNemar on queries both models answer alike: no evidence either way, p = 1 (the binomial on 0 trials)."""
    hits = np.array([1.0, 0.0, 1.0, 1.0])
    assert p_better(hits, hits.copy(), test="mcnemar") == 1.0


def test_a_corr_interval_whose_replicates_all_draw_one_query_is_undefined():
    """Two queries, each with pairs of one text and one image distance: a replicate drawing one query only sees
    equal distances (left out). When every replicate does, the interval is undefined (NaN), while the value
    stays the Spearman of all pairs."""
    weights = lambda seed: np.concatenate(list(bootstrap_weights(2, 4, seed)))  # noqa: E731
    seed = next(s for s in range(200) if (weights(s).min(axis=1) == 0).all())  # each replicate: one query twice
    text, image, query = np.array([1.0, 1.0, 2.0, 2.0]), np.array([5.0, 5.0, 3.0, 3.0]), np.array([0, 0, 1, 1])
    res = corr_interval(text, image, query, 2, bootstrap=4, seed=seed)
    assert res["value"] == pytest.approx(stats.spearmanr(text, image)[0]) == pytest.approx(-1.0)
    assert all(math.isnan(res[key]) for key in ("lo", "hi", "se"))
