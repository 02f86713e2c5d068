"""Hubness diagnostics, CSLS retrieval, and the approximate (faiss PQ / IVF) mode against exact."""
from __future__ import annotations

import math

import numpy as np
import pytest

from backretrieval import ApproxConfig, BackRetrievalError, bkr_recall, hubness_stats, xlr_recall
from backretrieval.hubness import CSLSScorer, csls_penalty, k_occurrence
from backretrieval.retrieval import retrieve


def _cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def _hub_world(rng, n=300, d=32, n_hubs=3):
    """Row-aligned parallel texts (target i translates source i) plus ``n_hubs`` planted hubs:
    target captions near the centre of all sources, close to every query."""
    src = rng.standard_normal((n, d)) + 0.8  # a common offset: the mean direction is close to everything
    tgt = src + 1.5 * rng.standard_normal((n, d))
    tgt[:n_hubs] = src.mean(axis=0) + 0.05 * rng.standard_normal((n_hubs, d))
    return src, tgt


def test_hubness_stats_on_hand_built_retrievals():
    uniform = hubness_stats(np.arange(100), 100)
    assert uniform["skewness"] == 0.0 and uniform["hub_share"] == pytest.approx(0.01)
    assert uniform["never_retrieved"] == 0.0 and uniform["max_occurrence"] == 1
    hubbed = hubness_stats(np.r_[np.zeros(60, int), np.arange(40)], 100)  # target 0 takes 61 queries
    assert hubbed["hub_share"] == pytest.approx(0.61) and hubbed["max_occurrence"] == 61
    assert hubbed["skewness"] > 5 and hubbed["never_retrieved"] == pytest.approx(0.60)
    np.testing.assert_array_equal(k_occurrence([2, 2, 0], 4), [1, 0, 2, 0])


def test_the_no_hub_baseline_is_what_random_retrieval_reads():
    """Each record's baseline said 1% (every target retrieved equally often); a retrieval with no hubs at all, each
    query drawing its target at random, reads about 4.5% and skewness 1 at as many queries as targets."""
    rng = np.random.default_rng(0)
    for n_queries, n_targets in ((20_000, 20_000), (60_000, 2_000), (2_000, 20_000)):
        draws = [hubness_stats(rng.integers(0, n_targets, n_queries), n_targets) for _ in range(5)]
        mean = {key: np.mean([d[key] for d in draws]) for key in ("hub_share", "skewness")}
        base = draws[0]
        assert mean["hub_share"] == pytest.approx(base["hub_share_random"], rel=0.05)
        assert mean["skewness"] == pytest.approx(base["skewness_random"], abs=0.06)  # a sample skewness: noisy
    assert math.isnan(hubness_stats(np.zeros(0, int), 10)["hub_share_random"])  # no query: NaN


def test_csls_matches_its_definition():
    rng = np.random.default_rng(0)
    q, t = rng.standard_normal((40, 8)), rng.standard_normal((30, 8))
    cos = _cos(q, t)
    r_s = np.sort(cos.T, axis=1)[:, -5:].mean(axis=1)  # mean cosine of each target to its 5 nearest queries
    r_t = np.sort(cos, axis=1)[:, -5:].mean(axis=1)
    csls = 2 * cos - r_t[:, None] - r_s[None, :]
    np.testing.assert_allclose(csls_penalty(t, q, 5), r_s, atol=1e-5)
    np.testing.assert_array_equal(retrieve(q, t, "csls", 5), csls.argmax(axis=1))
    scorer = CSLSScorer(q, t, csls_penalty(t, q, 5))
    np.testing.assert_allclose(2 * scorer.tile(np.arange(40), 0, 30), csls + r_t[:, None], atol=1e-5)


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_approximate_csls_penalty_is_the_mean_over_csls_k_neighbours_even_beyond_the_candidates(chunk,
                                                                                                    monkeypatch):
    """r_S in approximate mode: each target's mean cosine to its csls_k nearest queries (a small set: the index finds
    the exact neighbours), csls_k more than the candidates re-scored per query included; the same when the rows are
    searched a chunk at a time (``chunk``: rows per chunk, as for more than 16384 rows)."""
    from backretrieval import approximate
    from backretrieval.retrieval import text_scorer

    if chunk is not None:
        monkeypatch.setattr(approximate, "_CHUNK", chunk)
    rng = np.random.default_rng(1)
    q, t = rng.standard_normal((40, 8)), rng.standard_normal((30, 8))
    r_s = np.sort(_cos(q, t).T, axis=1)[:, -10:].mean(axis=1)
    for candidates in (5, 20):
        scorer = text_scorer(q, t, "csls", csls_k=10, approx=ApproxConfig(candidates=candidates))
        np.testing.assert_allclose(2 * scorer.half_penalty, r_s, atol=1e-5, err_msg=f"candidates={candidates}")
    csls = 2 * _cos(q, t) - np.sort(_cos(q, t), axis=1)[:, -10:].mean(axis=1)[:, None] - r_s[None, :]
    found = retrieve(q, t, "csls", 10, approx=ApproxConfig(candidates=30))  # every target a candidate: exact
    np.testing.assert_array_equal(found, csls.argmax(axis=1))


def test_the_approximate_csls_penalty_averages_the_neighbours_the_index_found(monkeypatch):
    """An IVF search whose visited cells hold fewer than csls_k rows returns -1 ids: r_S is the mean over the
    neighbours it did find (it counted each missing one as a cosine of 0, so a target whose search came back short
    looked less of a hub than it is); a target with no neighbour found gets 0."""
    from backretrieval.approximate import ANNIndex, approx_top_mean
    from backretrieval.scorers import VectorScorer

    rng = np.random.default_rng(4)
    q = rng.standard_normal((40, 8)) + 1.0  # a shared offset: every cosine well above 0
    t = rng.standard_normal((6, 8)) + 1.0
    cos = _cos(t, q)
    index = ANNIndex(q, ApproxConfig())
    exact = np.argsort(-cos, axis=1)
    found = exact[:, :10].copy()
    found[0, 4:] = -1  # the search of target 0 found 4 of its 10
    found[1, :] = -1  # that of target 1 none
    monkeypatch.setattr(index, "search", lambda x, k: found[:, :k])  # the 6 targets: one chunk
    r = approx_top_mean(t, index, VectorScorer(t, q), k=10, candidates=10)
    expected = np.sort(cos, axis=1)[:, -10:].mean(axis=1)
    expected[0] = np.sort(cos[0])[-4:].mean()
    expected[1] = 0.0
    np.testing.assert_allclose(r, expected, atol=1e-5)


def test_the_candidate_index_projects_on_the_uncentred_principal_directions():
    """pca_dim: the rows' top directions of their second moment (uncentred: inner products, a shared offset direction
    included), not of their variance about the mean; checked against an eigendecomposition."""
    from backretrieval.approximate import ANNIndex

    rng = np.random.default_rng(3)
    x = rng.standard_normal((400, 16)) * np.r_[0.05, 1.0, 0.7, 0.5, 0.4, np.full(11, 0.1)]
    x[:, 0] += 3.0  # every row shares a large component along axis 0, with little spread
    rows = x / np.linalg.norm(x, axis=1, keepdims=True)
    _, vectors = np.linalg.eigh(rows.T @ rows)
    top = vectors[:, -3:]  # the 3 leading directions of the uncentred second moment; axis 0 among them
    assert abs(top[0]).max() > 0.9
    proj = ANNIndex(x, ApproxConfig(pca_dim=3)).proj
    np.testing.assert_allclose(np.linalg.norm(proj.T @ top, axis=0), 1.0, atol=1e-3)  # the same subspace


@pytest.mark.parametrize("retrieval", ["cosine", "csls"])
def test_some_rows_retrieve_what_they_retrieve_among_all_rows_in_approximate_mode(retrieval):
    """``rows``: only those queries retrieve, each its own target (every target a candidate: the exact search's)."""
    rng = np.random.default_rng(4)
    q, t = rng.standard_normal((40, 8)), rng.standard_normal((30, 8))
    rows = np.array([31, 2, 17, 2])
    every = retrieve(q, t, retrieval, 5)
    np.testing.assert_array_equal(retrieve(q, t, retrieval, 5, approx=ApproxConfig(candidates=30), rows=rows),
                                  every[rows])
    np.testing.assert_array_equal(retrieve(q, t, retrieval, 5, rows=rows), every[rows])


@pytest.mark.parametrize("approx", [None, ApproxConfig(candidates=8)])
def test_a_query_equally_close_to_two_targets_retrieves_the_lower_index(approx):
    """Ties (two copies of one caption among the targets): the lowest target index, in exact and approximate mode."""
    rng = np.random.default_rng(2)
    t = rng.standard_normal((30, 8))
    t[[4, 17, 25]] = t[11]  # four copies of one row: 4 is the lowest index
    q = np.vstack([t[11] + 0.01 * rng.standard_normal(8), rng.standard_normal((5, 8))])
    found = retrieve(q, t, "cosine", approx=approx)
    best = _cos(q, t).max(axis=1, keepdims=True)
    np.testing.assert_array_equal(found, np.argmax(_cos(q, t) >= best - 1e-6, axis=1))  # the first of the best
    assert found[0] == 4


def test_csls_reduces_hub_occurrence_and_restores_retrieval_on_planted_hubs():
    rng = np.random.default_rng(1)
    src, tgt = _hub_world(rng)
    img_s = rng.standard_normal((300, 16))
    cos_res = bkr_recall(src, img_s, tgt, img_s + 0.1, (1, 10))
    csls_res = bkr_recall(src, img_s, tgt, img_s + 0.1, (1, 10), retrieval="csls")
    hub_cos, hub_csls = cos_res["hubness"], csls_res["hubness"]
    assert hub_cos["max_occurrence"] > 3 * hub_csls["max_occurrence"]
    assert hub_cos["hub_share"] > 2 * hub_csls["hub_share"] and hub_cos["skewness"] > hub_csls["skewness"]
    assert csls_res["retrieval"] == "csls"
    xc, xs = xlr_recall(src, tgt, (1,)), xlr_recall(src, tgt, (1,), retrieval="csls")
    assert xs["xlr@1"] > xc["xlr@1"]  # hubs no longer steal the true translations
    assert csls_res["bkr@1"] > cos_res["bkr@1"]


def test_xlr_csls_ranks_match_a_full_sort():
    rng = np.random.default_rng(2)
    src, tgt = _hub_world(rng, n=80, d=12)
    cos = _cos(src, tgt)
    score = cos - 0.5 * np.sort(cos.T, axis=1)[:, -10:].mean(axis=1)[None, :]
    ranks = 1 + np.sum(score > np.diag(score)[:, None], axis=1)
    res = xlr_recall(src, tgt, (1, 5), retrieval="csls", ties="optimistic")
    np.testing.assert_array_equal(res["ranks"], ranks)


@pytest.mark.parametrize("retrieval", ["cosine", "csls"])
def test_approximate_equals_exact_on_small_data(retrieval):
    rng = np.random.default_rng(3)
    n = 400
    z_s, z_t = rng.standard_normal((n, 8)), rng.standard_normal((n, 8))
    w_t, w_i = rng.standard_normal((8, 24)), rng.standard_normal((8, 40))
    st, tt = z_s @ w_t + 0.5 * rng.standard_normal((n, 24)), z_t @ w_t + 0.5 * rng.standard_normal((n, 24))
    si, ti = z_s @ w_i + 0.5 * rng.standard_normal((n, 40)), z_t @ w_i + 0.5 * rng.standard_normal((n, 40))
    exact = bkr_recall(st, si, tt, ti, (1, 5, 10), retrieval=retrieval)
    # an IVF index of 10 cells (every cell probed: the candidates are the exact top 16)
    ivf = dict(index="ivf", pca_dim=0, candidates=16)
    full = bkr_recall(st, si, tt, ti, (1, 5, 10), retrieval=retrieval,
                      approximate=ApproxConfig(nlist=10, nprobe=10, **ivf))
    np.testing.assert_array_equal(full["retrieved"], exact["retrieved"])
    assert all(full[f"bkr@{k}"] == exact[f"bkr@{k}"] for k in (1, 5, 10))
    np.testing.assert_array_equal(full["ranks"], np.minimum(exact["ranks"], 11))  # censored above max K
    # 2 of 10 cells probed: approximate candidates, close recall
    part = bkr_recall(st, si, tt, ti, (1, 5, 10), retrieval=retrieval,
                      approximate=ApproxConfig(nlist=10, nprobe=2, **ivf))
    assert np.mean(part["retrieved"] == exact["retrieved"]) > 0.8
    assert abs(part["bkr@10"] - exact["bkr@10"]) <= 0.03
    assert part["approximate"] and not exact["approximate"]
    par = st + 0.3 * rng.standard_normal(st.shape)
    x_exact = xlr_recall(st, par, (1, 10), retrieval=retrieval)
    x_approx = xlr_recall(st, par, (1, 10), retrieval=retrieval, approximate=ApproxConfig(nlist=10, nprobe=10, **ivf))
    assert x_approx["xlr@1"] == x_exact["xlr@1"] and x_approx["xlr@10"] == x_exact["xlr@10"]


def test_approximate_with_pca_reduction_stays_close():
    rng = np.random.default_rng(4)
    n = 600
    z = rng.standard_normal((2 * n, 6))
    w = rng.standard_normal((6, 64))
    text = z @ w + 0.5 * rng.standard_normal((2 * n, 64))
    imgs = z @ rng.standard_normal((6, 32)) + 0.5 * rng.standard_normal((2 * n, 32))
    exact = bkr_recall(text[:n], imgs[:n], text[n:], imgs[n:], (10,))
    approx = bkr_recall(text[:n], imgs[:n], text[n:], imgs[n:], (10,),
                        approximate=ApproxConfig(index="ivf", pca_dim=16, nlist=16, nprobe=4, candidates=32))
    assert abs(approx["bkr@10"] - exact["bkr@10"]) <= 0.03


@pytest.mark.parametrize("retrieval", ["cosine", "csls"])
def test_pq_candidates_find_the_exact_neighbours_on_structured_data(retrieval):
    rng = np.random.default_rng(6)
    n = 2000  # enough rows to train the 4-bit quantizer (below 624 the candidates come from an exact search)
    z_s, z_t = rng.standard_normal((n, 12)), rng.standard_normal((n, 12))
    w_t, w_i = rng.standard_normal((12, 96)), rng.standard_normal((12, 48))
    st, tt = z_s @ w_t + 1.5 * rng.standard_normal((n, 96)), z_t @ w_t + 1.5 * rng.standard_normal((n, 96))
    si, ti = z_s @ w_i + 1.5 * rng.standard_normal((n, 48)), z_t @ w_i + 1.5 * rng.standard_normal((n, 48))
    exact = bkr_recall(st, si, tt, ti, (1, 10), retrieval=retrieval, max_rank=10)
    pq = bkr_recall(st, si, tt, ti, (1, 10), retrieval=retrieval, approximate=ApproxConfig(pca_dim=16, candidates=32))
    assert np.mean(pq["retrieved"] == exact["retrieved"]) > 0.95
    assert abs(pq["bkr@10"] - exact["bkr@10"]) <= 0.01
    every = bkr_recall(st, si, tt, ti, (1, 10), retrieval=retrieval, approximate=ApproxConfig(candidates=n))
    np.testing.assert_array_equal(every["retrieved"], exact["retrieved"])  # all targets re-scored: exact
    np.testing.assert_array_equal(every["ranks"], exact["ranks"])


def test_bad_retrieval_options_are_one_line_errors():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((20, 4))
    with pytest.raises(BackRetrievalError, match="retrieval: expected one of cosine, csls"):
        bkr_recall(x, x, x, x, (1,), retrieval="dot")
    with pytest.raises(BackRetrievalError, match="csls_k"):
        xlr_recall(x, x, (1,), retrieval="csls", csls_k=0)
    with pytest.raises(BackRetrievalError, match="approximate"):
        bkr_recall(x, x, x, x, (1,), approximate=ApproxConfig(nprobe=0))
    with pytest.raises(BackRetrievalError, match="index must be one of pq, ivf"):
        bkr_recall(x, x, x, x, (1,), approximate=ApproxConfig(index="hnsw"))


# ----------------------------------------------------------------------------- the neighbourhood radius


def _brute_radius(q, pool, k, extra=None, exclude=None):
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    pool = pool / np.linalg.norm(pool, axis=1, keepdims=True)
    out = []
    for i, row in enumerate(q):
        sims = [float(row @ p) + (0.0 if extra is None else extra[i, j]) for j, p in enumerate(pool)
                if exclude is None or exclude[i] != j]
        out.append(np.mean(sorted(sims)[-k:]))
    return np.array(out)


def test_neighbourhood_radii_are_the_mean_of_the_k_best_similarities():
    import scipy.sparse as sp

    from backretrieval.hubness import neighbourhood_radii

    rng = np.random.default_rng(0)
    q, pool = rng.standard_normal((13, 5)), rng.standard_normal((40, 5))
    np.testing.assert_allclose(neighbourhood_radii(q, pool, 4), _brute_radius(q, pool, 4), atol=1e-5)
    # sparse rows give the same radii; an extra score is added before the k best are taken
    extra = rng.standard_normal((13, 40)).astype(np.float32)
    np.testing.assert_allclose(neighbourhood_radii(sp.csr_matrix(q), sp.csr_matrix(pool), 4, extra=lambda r: extra[r]),
                               _brute_radius(q, pool, 4, extra), atol=1e-5)
    # a row of its own pool is never its own neighbour; groups split the pool (languages)
    own = neighbourhood_radii(pool, pool, 3, exclude=np.arange(40))
    np.testing.assert_allclose(own, _brute_radius(pool, pool, 3, exclude=np.arange(40)), atol=1e-5)
    groups = np.arange(40) % 2
    by_group = neighbourhood_radii(q, pool, 3, pool_groups=groups, chunk=5)
    for g in (0, 1):
        np.testing.assert_allclose(by_group[:, g], _brute_radius(q, pool[groups == g], 3), atol=1e-5)
    with pytest.raises(ValueError, match="k=21 neighbours exceed the 20 pool rows of group 0"):
        neighbourhood_radii(q, pool, 21, pool_groups=groups)


def test_an_approximate_option_its_index_never_reads_is_refused():
    """Was ignored in silence: ``ApproxConfig(index="exact", candidates=16)`` searched exactly, ``nprobe``/``nlist``
    reached no IVF with the default ``pq`` index. A field left at its default, and every field an index reads, pass."""
    cases = [(dict(index="exact", candidates=16), "candidates=16 not used with index='exact' (ignored); drop it"),
             (dict(index="exact", pca_dim=0, train_size=100),
              "pca_dim=0, train_size=100 not used with index='exact' (ignored); drop them"),
             (dict(nprobe=4), "nprobe=4 not used with index='pq' (ignored); drop it, or give index='ivf'"),
             (dict(index="pq", nlist=16, nprobe=4), "nlist=16, nprobe=4 not used with index='pq'")]
    for options, message in cases:
        with pytest.raises(BackRetrievalError) as err:
            ApproxConfig(**options)
        assert str(err.value).startswith(f"approximate: {message}"), str(err.value)
    ApproxConfig(index="exact", seed=3, image_side="exact", candidates=128)
    ApproxConfig(index="ivf", nlist=16, nprobe=4, pca_dim=0, candidates=8, train_size=100, seed=1)
    ApproxConfig(pca_dim=16, candidates=32, train_size=100, seed=1, image_side="exact")


def test_hub_share_takes_the_top_ceil_of_one_percent_and_skewness_is_the_moment_ratio():
    """150 targets: the top 1% is ceil(1.5) = 2 targets; the skewness is the standardised third moment of N_1
    (Radovanovic et al.: E[(N - mu)^3] / sigma^3 over targets), as the Poisson baseline 1 / sqrt(lam) is."""
    retrieved = np.r_[np.zeros(5, int), np.ones(4, int), np.arange(2, 12)]  # N_1: 5, 4, ten 1s, 138 0s
    stats_ = hubness_stats(retrieved, 150)
    assert stats_["hub_share"] == pytest.approx((5 + 4) / 19)
    counts = np.r_[5, 4, np.ones(10), np.zeros(138)]
    centred = counts - counts.mean()
    moment_ratio = np.mean(centred ** 3) / np.mean(centred ** 2) ** 1.5
    assert stats_["skewness"] == pytest.approx(moment_ratio, rel=1e-9)


def test_neighbourhood_radii_refuse_rows_of_another_dimension_or_groups_of_another_length():
    from backretrieval.hubness import neighbourhood_radii

    rng = np.random.default_rng(1)
    q, pool = rng.standard_normal((4, 5)), rng.standard_normal((10, 5))
    with pytest.raises(ValueError, match="^queries have 3 dims, the pool 5$"):
        neighbourhood_radii(q[:, :3], pool, 2)
    with pytest.raises(ValueError, match="^pool_groups has 9 codes for 10 pool rows$"):
        neighbourhood_radii(q, pool, 2, pool_groups=np.zeros(9, int))


def test_rescore_without_a_faiss_scorer_reads_each_candidate_and_marks_missing_ones():
    """A scorer with no ``by_candidates`` (a precomputed matrix): candidate j of row i scores matrix[rows[i], j],
    and a missing candidate (-1, a list shorter than asked) scores -inf, below every real score."""
    from backretrieval.approximate import rescore
    from backretrieval.scorers import MatrixScorer

    matrix = np.arange(20, dtype=np.float32).reshape(4, 5)
    rows, candidates = np.array([3, 0]), np.array([[4, -1, 0], [2, 2, -1]])
    np.testing.assert_array_equal(rescore(MatrixScorer(matrix, np.arange(5)), rows, candidates),
                                  [[19, -np.inf, 15], [2, 2, -np.inf]])
