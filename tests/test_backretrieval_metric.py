"""BkR / XLR / CORR against a naive reference (loops and full sorts) and hand-built cases."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
from scipy import stats

from backretrieval import BackRetrievalError, BackRetrievalWarning, RandomEmbedder, bkr_recall, corr_score, xlr_recall
from backretrieval.approximate import ApproxConfig
from backretrieval.ranking import _TIE_K, nearest_neighbor

KS = (1, 2, 5, 10)


# --------------------------------------------------------------------------- reference
def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def _rank_by_sort(scores: list[float], own: int, ties: str, k_values) -> tuple[float, dict]:
    """Rank of candidate ``own`` after a full descending sort, and its Recall@K contribution."""
    ordered = sorted(scores, reverse=True)
    value = scores[own]
    first = ordered.index(value) + 1  # own placed before its ties
    last = len(ordered) - ordered[::-1].index(value)  # own placed after its ties
    if ties == "optimistic":
        return first, {k: float(first <= k) for k in k_values}
    if ties == "pessimistic":
        return last, {k: float(last <= k) for k in k_values}
    # expected: every position among the tied block equally likely
    positions = range(first, last + 1)
    return (first + last) / 2, {k: float(np.mean([p <= k for p in positions])) for k in k_values}


def naive_bkr(src_text, src_img, tgt_text, tgt_img, ks, ties="pessimistic", src_image_ids=None):
    f = _cos(src_text, tgt_text)
    ids = list(range(len(src_text))) if src_image_ids is None else list(src_image_ids)
    distinct = list(dict.fromkeys(ids))  # first-seen order; one picture per id
    first_row = {i: ids.index(i) for i in distinct}
    ranks, hits = [], {k: [] for k in ks}
    for q in range(len(src_text)):
        best = max(f[q])
        j = min(t for t in range(len(tgt_text)) if f[q, t] == best)  # lowest index among ties
        g = [float(_cos(tgt_img[j:j + 1], src_img[first_row[i]:first_row[i] + 1])[0, 0]) for i in distinct]
        rank, hit = _rank_by_sort(g, distinct.index(ids[q]), ties, ks)
        ranks.append(rank)
        for k in ks:
            hits[k].append(hit[k])
    return np.array(ranks), {k: float(np.mean(v)) for k, v in hits.items()}


def naive_xlr(src_text, tgt_text, ks, gt, ties="pessimistic"):
    f = _cos(src_text, tgt_text)
    ranks, hits = [], {k: [] for k in ks}
    for q in range(len(src_text)):
        rank, hit = _rank_by_sort(list(f[q]), gt[q], ties, ks)
        ranks.append(rank)
        for k in ks:
            hits[k].append(hit[k])
    return np.array(ranks), {k: float(np.mean(v)) for k, v in hits.items()}


def _sign_data(rng, n, d):
    """+-1 vectors in 16 dims: every cosine is an exact multiple of 1/16, so ties are exact."""
    return rng.choice([-1.0, 1.0], size=(n, d)).astype(np.float32)


# --------------------------------------------------------------------------- vs reference
@pytest.mark.parametrize("n_src,n_tgt,d_text,d_img", [(1, 1, 3, 2), (7, 3, 4, 5), (40, 55, 8, 12), (120, 90, 16, 32)])
@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_bkr_matches_naive_reference_on_random_data(n_src, n_tgt, d_text, d_img, ties):
    rng = np.random.default_rng(n_src * 1000 + n_tgt)
    st, tt = rng.standard_normal((n_src, d_text)), rng.standard_normal((n_tgt, d_text))
    si, ti = rng.standard_normal((n_src, d_img)), rng.standard_normal((n_tgt, d_img))
    few = pytest.warns(BackRetrievalWarning, match=f"{n_src} distinct source images, not more than the largest K")
    with few if n_src <= max(KS) else contextlib.nullcontext():  # Recall@10 of 7 images is 1 for any model: said
        res = bkr_recall(st, si, tt, ti, KS, ties=ties, block_bytes=4 * 3 * n_src)  # a few rows per block
    ranks, recall = naive_bkr(st, si, tt, ti, KS, ties)
    np.testing.assert_allclose(res["ranks"], ranks)
    for k in KS:
        assert res[f"bkr@{k}"] == pytest.approx(recall[k])


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bkr_matches_naive_reference_with_exact_ties_and_shared_images(ties, seed):
    rng = np.random.default_rng(seed)
    n_src, n_tgt = 60, 45
    st, tt = _sign_data(rng, n_src, 16), _sign_data(rng, n_tgt, 16)
    tt[10] = tt[3]  # duplicate target texts: retrieval ties
    ids = rng.integers(0, 35, n_src)  # several source captions per picture
    pictures = _sign_data(rng, 35, 16)
    si, ti = pictures[ids], _sign_data(rng, n_tgt, 16)
    res = bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, block_bytes=4 * 35 * 4)
    ranks, recall = naive_bkr(st, si, tt, ti, KS, ties, src_image_ids=ids)
    np.testing.assert_allclose(res["ranks"], ranks)
    for k in KS:
        assert res[f"bkr@{k}"] == pytest.approx(recall[k])
    assert res["n_images"] == len(np.unique(ids))


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_xlr_matches_naive_reference(ties):
    rng = np.random.default_rng(7)
    for n_src, n_tgt in [(1, 1), (30, 30), (50, 80)]:
        st = rng.standard_normal((n_src, 6))
        tt = rng.standard_normal((n_tgt, 6))
        gt = rng.integers(0, n_tgt, n_src)
        few = pytest.warns(BackRetrievalWarning, match=f"{n_tgt} target texts, not more than the largest K")
        with few if n_tgt <= max(KS) else contextlib.nullcontext():
            res = xlr_recall(st, tt, KS, gt=gt, ties=ties, block_bytes=4 * 2 * n_tgt)
        ranks, recall = naive_xlr(st, tt, KS, gt, ties)
        np.testing.assert_allclose(res["ranks"], ranks)
        for k in KS:
            assert res[f"xlr@{k}"] == pytest.approx(recall[k])
    st, tt = _sign_data(rng, 40, 16), _sign_data(rng, 40, 16)
    tt[5] = tt[0]  # the true translation of query 0 ties with target 5
    res = xlr_recall(st, tt, KS, ties=ties)
    ranks, recall = naive_xlr(st, tt, KS, np.arange(40), ties)
    np.testing.assert_allclose(res["ranks"], ranks)
    assert all(res[f"xlr@{k}"] == pytest.approx(recall[k]) for k in KS)


# --------------------------------------------------------------------------- hand-built cases
def test_identical_embeddings_and_perfect_images_give_bkr_and_xlr_of_one():
    rng = np.random.default_rng(0)
    text = rng.standard_normal((200, 32))
    images = rng.standard_normal((200, 64))
    # target captions are perfect translations; target photos are other shots of the same scenes
    other_shots = images + 0.01 * rng.standard_normal(images.shape)
    bkr = bkr_recall(text, images, text.copy(), other_shots, (1, 10))
    xlr = xlr_recall(text, text.copy(), (1, 10))
    assert bkr["bkr@1"] == 1.0 and xlr["xlr@1"] == 1.0
    assert np.all(bkr["ranks"] == 1) and np.all(bkr["retrieved"] == np.arange(200))


def test_target_shuffled_is_followed_by_back_retrieval():
    rng = np.random.default_rng(1)
    text, images = rng.standard_normal((50, 16)), rng.standard_normal((50, 24))
    perm = rng.permutation(50)  # the target set in another order: no correspondence given
    res = bkr_recall(text, images, text[perm], images[perm], (1,))
    assert res["bkr@1"] == 1.0
    np.testing.assert_array_equal(perm[res["retrieved"]], np.arange(50))


def test_random_text_model_is_at_chance_level():
    rng = np.random.default_rng(3)
    n, k, scores = 400, 10, []
    for seed in range(5):
        texts = [f"caption {seed} {i}" for i in range(2 * n)]
        emb = RandomEmbedder(64, seed).encode(texts)
        images = rng.standard_normal((2 * n, 128))
        scores.append(bkr_recall(emb[:n], images[:n], emb[n:], images[n:], (k,))[f"bkr@{k}"])
    # expectation is exactly K/N; the mean of 5 runs has std ~0.0035 here
    assert np.mean(scores) == pytest.approx(k / n, abs=0.012)


def test_tie_policies_on_a_hand_built_case():
    # one query, one target; source pictures: the query's own (col 0), an identical twin
    # picture with another id (col 1), a worse one (col 2) and a better one (col 3)
    src_text = np.array([[1.0, 0.0]])
    tgt_text = np.array([[1.0, 0.1]])
    tgt_img = np.array([[1.0, 0.0, 0.0]])
    own = np.array([0.8, 0.6, 0.0])
    better = np.array([0.9, 0.3, 0.3])
    worse = np.array([0.1, 1.0, 0.0])
    src_img = np.stack([own, own, worse, better])
    src_text4 = np.repeat(src_text, 4, axis=0)
    # query 0 (col 0): 1 better, 1 tie -> optimistic 2, pessimistic 3, expected 2.5
    res = {t: bkr_recall(src_text4, src_img, tgt_text, tgt_img, (2,), ties=t)
           for t in ("optimistic", "pessimistic", "expected")}
    assert res["optimistic"]["ranks"][0] == 2 and res["pessimistic"]["ranks"][0] == 3
    assert res["expected"]["ranks"][0] == 2.5
    # Recall@2 over the 4 queries: ranks (opt) 2,2,4,1 -> 3/4; (pes) 3,3,4,1 -> 1/4; (exp) .5,.5,0,1 -> 1/2
    assert res["optimistic"]["bkr@2"] == 0.75
    assert res["pessimistic"]["bkr@2"] == 0.25
    assert res["expected"]["bkr@2"] == 0.5
    # if the twins are one picture (same id), it is ranked once: rank 2 for both of its captions
    same = bkr_recall(src_text4, src_img, tgt_text, tgt_img, (2,), src_image_ids=["a", "a", "b", "c"])
    np.testing.assert_array_equal(same["ranks"], [2, 2, 3, 1])
    assert same["n_images"] == 3


def test_text_retrieval_ties_resolve_to_lowest_index():
    rng = np.random.default_rng(5)
    tgt = rng.standard_normal((300, 8)).astype(np.float32)
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    tgt[[40, 120, 299]] = tgt[200]  # four equal best targets for the queries below
    queries = np.repeat(tgt[200:201], 50, axis=0)
    np.testing.assert_array_equal(nearest_neighbor(queries, tgt), np.full(50, 40))
    brute = np.argmax(tgt[:100] @ tgt.T, axis=1)
    np.testing.assert_array_equal(nearest_neighbor(tgt[:100], tgt), brute)
    # more copies than the search keeps (ranking._TIE_K): settled by a re-score, still the lowest index
    many = rng.choice(np.arange(60, 300), size=3 * _TIE_K, replace=False)
    tgt[many] = tgt[7]
    np.testing.assert_array_equal(nearest_neighbor(np.repeat(tgt[7:8], 3, axis=0), tgt), np.full(3, 7))
    tgt[7] = -tgt[7]
    np.testing.assert_array_equal(nearest_neighbor(-tgt[7:8], tgt), [many.min()])


def test_precomputed_image_similarity_matches_features():
    rng = np.random.default_rng(2)
    st, tt = rng.standard_normal((30, 5)), rng.standard_normal((25, 5))
    si, ti = rng.standard_normal((30, 7)), rng.standard_normal((25, 7))
    sim = _cos(ti, si).astype(np.float32)
    a = bkr_recall(st, si, tt, ti, KS)
    b = bkr_recall(st, None, tt, None, KS, image_sim=sim)
    np.testing.assert_array_equal(a["ranks"], b["ranks"])
    # g may be any similarity, e.g. negative Euclidean distance: checked against the reference sort
    dist_sim = -np.linalg.norm(ti[:, None, :] - si[None, :, :], axis=2).astype(np.float32)
    c = bkr_recall(st, None, tt, None, (1, 5), image_sim=dist_sim)
    j = np.argmax(_cos(st, tt), axis=1)
    expected = [1 + np.sum(dist_sim[j[q]] > dist_sim[j[q], q]) for q in range(30)]
    np.testing.assert_array_equal(c["ranks"], expected)


def test_corr_score_matches_scipy_on_all_pairs_and_sampling():
    rng = np.random.default_rng(4)
    st, tt = rng.standard_normal((20, 6)), rng.standard_normal((15, 6))
    si, ti = rng.standard_normal((20, 9)), rng.standard_normal((15, 9))
    text_d = (1 - _cos(st, tt)).ravel()
    img_d = (1 - _cos(si, ti)).ravel()
    assert corr_score(st, si, tt, ti) == pytest.approx(stats.spearmanr(text_d, img_d).statistic, abs=1e-5)
    # text space = image space: the distances agree exactly
    assert corr_score(si, si, ti, ti) == pytest.approx(1.0)
    # a sample of the pairs estimates the all-pairs value
    big = [rng.standard_normal((300, 8)) for _ in range(2)]
    full = corr_score(big[0], big[0] + 0.5 * rng.standard_normal((300, 8)), big[1], big[1])
    sampled = corr_score(big[0], big[0] + 0.5 * rng.standard_normal((300, 8)), big[1], big[1], corr_pairs=20_000)
    assert 0.3 < full and sampled == pytest.approx(full, abs=0.05)


def test_bad_inputs_raise_one_line_errors():
    x = np.ones((4, 3))  # not zeros: an all-zero row is an error of its own
    with pytest.raises(BackRetrievalError, match="tgt_text: expected dimension 3"):
        bkr_recall(x, x, np.zeros((4, 2)), x)
    with pytest.raises(BackRetrievalError, match="src_img: expected 4 rows"):
        bkr_recall(x, np.zeros((5, 3)), x, x)
    with pytest.raises(BackRetrievalError, match="ties"):
        bkr_recall(x, x, x, x, ties="random")
    with pytest.raises(BackRetrievalError, match="ks"):
        xlr_recall(x, x, ks=(0,))
    with pytest.raises(BackRetrievalError, match="NaN"):
        xlr_recall(np.full((2, 2), np.nan), x[:, :2])
    with pytest.raises(BackRetrievalError, match="image_sim: expected shape"):
        bkr_recall(x, None, x, None, image_sim=np.zeros((3, 4)))


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_max_rank_keeps_recall_exact_and_censors_ranks(ties):
    rng = np.random.default_rng(8)
    st, tt = rng.standard_normal((150, 8)), rng.standard_normal((140, 8))
    si, ti = _sign_data(rng, 150, 16), _sign_data(rng, 140, 16)  # exact ties in g too
    full = bkr_recall(st, si, tt, ti, (1, 5, 10), ties=ties, block_bytes=4 * 64 * 8)
    capped = bkr_recall(st, si, tt, ti, (1, 5, 10), ties=ties, max_rank=10, block_bytes=4 * 64 * 8)
    for k in (1, 5, 10):
        assert capped[f"bkr@{k}"] == full[f"bkr@{k}"]
    np.testing.assert_array_equal(capped["ranks"], np.where(full["ranks"] > 10, 11, full["ranks"]))
    translations = st + 2.0 * rng.standard_normal(st.shape)
    xfull = xlr_recall(st, translations, (1, 10), ties=ties)
    xcap = xlr_recall(st, translations, (1, 10), ties=ties, max_rank=10)
    assert xcap["xlr@10"] == xfull["xlr@10"] and xcap["xlr@1"] == xfull["xlr@1"]
    np.testing.assert_array_equal(xcap["ranks"], np.where(xfull["ranks"] > 10, 11, xfull["ranks"]))
    with pytest.raises(BackRetrievalError, match="max_rank"):
        bkr_recall(st, si, tt, ti, (1, 20), max_rank=10)


def test_a_max_rank_the_approximate_mode_or_image_lists_would_not_use_is_refused():
    """approximate / image_neighbours set max_rank = max(ks) silently: ranks came back censored at max(ks) + 1 while
    the caller asked for another cap. Another cap is refused now; max(ks) itself (what they use) is accepted."""
    from backretrieval.image_index import image_neighbours

    rng = np.random.default_rng(4)
    st, tt, si, ti = (rng.standard_normal((60, d)).astype(np.float32) for d in (8, 8, 12, 12))
    lists = image_neighbours(si, ti, 32)
    for mode in ({"approximate": True}, {"image_neighbours": lists}):
        with pytest.raises(BackRetrievalError, match="max_rank 50: with .* ranks are counted only up to the largest K"):
            bkr_recall(st, si, tt, ti, (1, 10), max_rank=50, **mode)
        same = bkr_recall(st, si, tt, ti, (1, 10), max_rank=10, **mode)
        assert same["ranks"].max() <= 11
    with pytest.raises(BackRetrievalError, match="max_rank 50: with approximate"):
        xlr_recall(st, tt, (1, 10), max_rank=50, approximate=True)


def test_rows_of_a_huge_norm_keep_their_cosine():
    """A float32 row scaled by 1e20 has a sum of squares past float32's range: its inverse norm was 1 / inf = 0, so
    it was scored as a zero vector (XLR@1 fell from 1.0 to 0.5 with half the rows scaled; the approximate mode's
    exact re-scoring, whose raw inner products of two such rows overflowed, crashed)."""
    from backretrieval.vectors import l2_normalize

    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 16)).astype(np.float32)
    y = (x + 0.01 * rng.standard_normal(x.shape)).astype(np.float32)
    huge = y.copy()
    huge[::2] *= np.float32(1e20)
    np.testing.assert_allclose(np.linalg.norm(l2_normalize(huge).astype(np.float64), axis=1), 1.0, rtol=1e-5)
    assert xlr_recall(y, x, (1,))["xlr@1"] == 1.0
    assert xlr_recall(huge, x, (1,))["xlr@1"] == 1.0 and xlr_recall(x, huge, (1,))["xlr@1"] == 1.0
    si = rng.standard_normal((40, 8)).astype(np.float32)
    ti = (si + 0.01 * rng.standard_normal(si.shape)).astype(np.float32)
    for approximate in (False, True):
        plain = bkr_recall(x, si, y, ti, (1, 5), approximate=approximate)
        scaled = bkr_recall(x * np.float32(1e20), si * np.float32(1e20), huge, ti * np.float32(1e20), (1, 5),
                            approximate=approximate)
        np.testing.assert_array_equal(scaled["retrieved"], plain["retrieved"])
        assert scaled["bkr@1"] == plain["bkr@1"] == 1.0
    assert corr_score(x, si, huge, ti) == pytest.approx(corr_score(x, si, y, ti), abs=1e-6)


def test_rows_of_a_tiny_norm_keep_their_cosine():
    """A row of norm 1e-13 (or 1e-25, whose float32 sum of squares underflows) was divided by max(norm, 1e-12): its
    cosines were a tenth (or nothing) of their value, so the nearest neighbour changed with the row's scale."""
    from backretrieval.vectors import l2_normalize

    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 16)).astype(np.float32)
    y = (x + 0.01 * rng.standard_normal(x.shape)).astype(np.float32)
    for scale in (1e-13, 1e-25):
        tiny = y / np.linalg.norm(y, axis=1, keepdims=True)
        tiny[::2] *= np.float32(scale)
        np.testing.assert_allclose(np.linalg.norm(l2_normalize(tiny).astype(np.float64), axis=1), 1.0, rtol=1e-5)
        assert xlr_recall(x, tiny, (1,))["xlr@1"] == 1.0 and xlr_recall(tiny, x, (1,))["xlr@1"] == 1.0
        si = rng.standard_normal((40, 8)).astype(np.float32)
        ti = (si + 0.01 * rng.standard_normal(si.shape)).astype(np.float32)
        assert bkr_recall(x, si * np.float32(scale), tiny, ti, (1, 5))["bkr@1"] == 1.0
    zero = y.copy()
    zero[5] = 0  # still refused: no direction at all
    with pytest.raises(BackRetrievalError, match=r"tgt_text: the array has 1 of 40 rows that are all zero"):
        xlr_recall(x, zero, (1,))
    assert not l2_normalize(zero)[5].any()


def test_non_finite_image_similarity_is_rejected():
    # NaN compares false with everything: before the check, every query got rank 1 (BkR = 1.0)
    x = np.random.default_rng(9).standard_normal((4, 3))
    sim = np.zeros((4, 4), np.float32)
    sim[2, 1] = np.nan
    with pytest.raises(BackRetrievalError, match="image_sim: contains NaN"):
        bkr_recall(x, None, x, None, (1,), image_sim=sim)
    with pytest.raises(BackRetrievalError, match="image_sim: expected shape"):
        bkr_recall(x, None, x, None, (1,), image_sim=[[0.0] * 4] * 3)  # a nested list is read as an array


def test_xlr_ground_truth_must_be_integer_indices():
    x = np.random.default_rng(10).standard_normal((5, 3))
    with pytest.raises(BackRetrievalError, match="gt: expected integer"):
        xlr_recall(x, x, (1,), gt=np.linspace(0, 1, 5))  # was silently truncated to index 0
    assert xlr_recall(x, x, (1,), gt=np.arange(5, dtype=np.int32))["xlr@1"] == 1.0


def test_corr_needs_at_least_one_pair():
    x = np.random.default_rng(11).standard_normal((5, 3))
    with pytest.raises(BackRetrievalError, match="corr_pairs"):
        corr_score(x, x, x, x, corr_pairs=0)  # was NaN from an empty sample


def test_a_given_text_similarity_replaces_the_embeddings():
    """Any f, given as a matrix (late interaction, CSLS with outside statistics), is back-retrieved as the cosine is."""
    from backretrieval import evaluate_pairs
    from backretrieval.vectors import l2_normalize

    rng = np.random.default_rng(3)
    st, si, tt, ti = (rng.standard_normal((30, 6)) for _ in range(4))
    cos = l2_normalize(st) @ l2_normalize(tt).T
    by_emb, by_matrix = bkr_recall(st, si, tt, ti, (1, 5)), bkr_recall(None, si, None, ti, (1, 5), text_sim=cos)
    np.testing.assert_array_equal(by_emb["retrieved"], by_matrix["retrieved"])
    assert by_emb["bkr@5"] == by_matrix["bkr@5"] and by_matrix["retrieval"] == "given similarity"
    flipped = bkr_recall(None, si, None, ti, (1,), text_sim=-cos)  # another f retrieves other targets
    assert (flipped["retrieved"] != by_emb["retrieved"]).any()
    # the retrieved targets given (the row maxima found a block of rows at a time): the same figures
    given_targets = bkr_recall(None, si, None, ti, (1, 5), retrieved=by_matrix["retrieved"])
    assert given_targets["retrieval"] == "given targets"
    for key in ("bkr@1", "bkr@5", "hubness"):
        assert given_targets[key] == by_matrix[key]
    np.testing.assert_array_equal(given_targets["ranks"], by_matrix["ranks"])
    with pytest.raises(BackRetrievalError, match="retrieved: row 2 holds target index 30"):
        bkr_recall(None, si, None, ti, (1,), retrieved=np.r_[0, 1, 30, np.zeros(27, int)])
    with pytest.raises(BackRetrievalError, match="give one of the two"):
        bkr_recall(None, si, None, ti, (1,), text_sim=cos, retrieved=by_matrix["retrieved"])
    # per language pair: the scores of rows of one dataset
    text, langs = np.vstack([st, tt]), ["a"] * 30 + ["b"] * 30
    images, ids = np.vstack([si, ti]), [f"i{i}" for i in range(60)]
    plain = evaluate_pairs(text, langs, images, ids, (1, 5), with_corr=False)
    full = l2_normalize(text) @ l2_normalize(text).T
    given = evaluate_pairs(None, langs, images, ids, (1, 5), with_corr=False,
                           text_scores=lambda s, t: full[np.ix_(s, t)])
    assert given["mean"] == plain["mean"]
    with pytest.raises(BackRetrievalError, match="text_sim: contains NaN"):
        bkr_recall(None, si, None, ti, (1,), text_sim=np.full((30, 30), np.nan))


def test_given_targets_or_similarity_count_the_sets_by_the_image_side():
    """With ``retrieved``, or ``text_sim`` of sampled ``queries``, the text side does not hold the source (or target)
    set: src_img/tgt_img or image_sim's shape count it. Each combination (features or a matrix g, every row or a
    sample querying) ranks the queries as the embeddings' call does, and as a brute-force count on g."""
    rng = np.random.default_rng(12)
    st, tt = rng.standard_normal((40, 6)), rng.standard_normal((30, 6))
    si, ti = rng.standard_normal((40, 5)), rng.standard_normal((30, 5))
    f, g = _cos(st, tt), _cos(ti, si).astype(np.float32)
    full = bkr_recall(st, si, tt, ti, (1, 5))
    np.testing.assert_array_equal(full["retrieved"], f.argmax(axis=1))
    for rows in (np.arange(40), np.array([0, 3, 8, 21, 39])):
        best = f.argmax(axis=1)[rows]
        brute = [1 + int(np.sum(g[best[q]] > g[best[q], r])) for q, r in enumerate(rows)]  # no ties in g here
        np.testing.assert_array_equal(full["ranks"][rows], brute)
        sample = {} if len(rows) == 40 else {"queries": rows}
        for images in ((si, ti, {}), (None, None, {"image_sim": g})):
            for text in ({"retrieved": best}, {"text_sim": f[rows]}):
                res = bkr_recall(None, images[0], None, images[1], (1, 5), **images[2], **text, **sample)
                assert (res["n_queries"], res["n_images"]) == (len(rows), 40)
                np.testing.assert_array_equal(res["retrieved"], best)
                np.testing.assert_array_equal(res["ranks"], brute)
                assert res["hubness"] == bkr_recall(st, si, tt, ti, (1, 5), **sample)["hubness"]


def test_all_finite_finds_nan_and_inf_in_float16_and_float32():
    from backretrieval.vectors import all_finite

    for dtype in (np.float16, np.float32):
        x = np.random.default_rng(0).standard_normal((20_000, 5)).astype(dtype)
        assert all_finite(x) and all_finite(x[:, 1:])  # a strided view too
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[15_000, 2] = bad
            assert not all_finite(y) and not all_finite(y[:, 1:])
        assert all_finite(np.full((3, 2), np.finfo(dtype).max, dtype))  # the largest finite value is finite


# --------------------------------------------------------------------------- copies of one vector tie exactly
@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_copies_of_the_own_image_tie_with_it_as_in_exact_arithmetic(ties):
    """20 pictures, about 10 copies each, under distinct ids, Gaussian features of dim 64: a BLAS rounds the same
    dot product differently at different matrix positions, yet every copy must tie with the own image, as in the
    float64 reference (in one tile, and in tiles of a few rows and columns)."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((20, 64)).astype(np.float32)
    si, ti = base[rng.integers(0, 20, 200)], rng.standard_normal((200, 64)).astype(np.float32)
    st, tt = rng.standard_normal((2, 200, 16)).astype(np.float32)
    ranks, recall = naive_bkr(st, si, tt, ti, KS, ties)
    for kwargs in ({}, {"block_bytes": 4 * 3 * 200}, {"max_rank": max(KS)}):
        res = bkr_recall(st, si, tt, ti, KS, ties=ties, **kwargs)
        expected = np.where(ranks > max(KS), max(KS) + 1, ranks) if "max_rank" in kwargs else ranks
        np.testing.assert_allclose(res["ranks"], expected, err_msg=str(kwargs))
        for k in KS:
            assert res[f"bkr@{k}"] == pytest.approx(recall[k]), (kwargs, k)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_copies_of_the_translation_tie_with_it_as_in_exact_arithmetic(ties):
    """XLR with targets 10..19 copies of target 0 (duplicate captions): queries 0 and 10..19 tie with 10 copies."""
    rng = np.random.default_rng(1)
    src = rng.standard_normal((30, 6)).astype(np.float32)
    tgt = src.copy()
    tgt[10:20] = tgt[0]
    res = xlr_recall(src, tgt, KS, ties=ties)
    ranks, recall = naive_xlr(src, tgt, KS, np.arange(30), ties)
    np.testing.assert_allclose(res["ranks"], ranks)
    for k in KS:
        assert res[f"xlr@{k}"] == pytest.approx(recall[k])


def test_csls_copies_of_the_translation_tie_with_it():
    """Under CSLS too (copies share one penalty r_S): each of the 11 copies of target 0 ties with the 10 others."""
    rng = np.random.default_rng(1)
    src = rng.standard_normal((30, 6)).astype(np.float32)
    tgt = src.copy()
    tgt[10:20] = tgt[0]
    pess = xlr_recall(src, tgt, KS, ties="pessimistic", retrieval="csls")["ranks"]
    opt = xlr_recall(src, tgt, KS, ties="optimistic", retrieval="csls")["ranks"]
    copies = np.r_[0, np.arange(10, 20)]
    np.testing.assert_array_equal((pess - opt)[copies], 10)
    np.testing.assert_array_equal(np.delete(pess - opt, copies), 0)


def test_duplicate_rows_finds_equal_rows_and_survives_hash_collisions(monkeypatch):
    from backretrieval import duplicates

    rng = np.random.default_rng(2)
    x = rng.standard_normal((50, 7)).astype(np.float32)
    x[[3, 17, 40]] = x[8]
    x[22] = x[5]
    x[31, 0] = 0.0
    x[30] = x[31]
    x[30, 0] = -0.0  # equal values, other bits
    x[44] = x[8] * np.float32(1.0000001)  # close, not equal
    reference = np.array([min(j for j in range(50) if (x[j] == x[i]).all()) for i in range(50)])
    np.testing.assert_array_equal(duplicates.duplicate_rows(x), reference)
    assert duplicates.duplicate_rows(rng.standard_normal((50, 7))) is None
    wide = np.repeat(x, 30, axis=1)  # 210 columns: a first hash on 64 of them, then on all for the candidates
    np.testing.assert_array_equal(duplicates.duplicate_rows(wide), reference)
    unpicked = sorted(set(range(210)) - set(np.linspace(0, 209, duplicates._HASH_DIMS).astype(int)))[0]
    wide[45] = wide[9]
    wide[45, unpicked] += 1.0  # row 45 equals row 9 on the first hash's columns only
    np.testing.assert_array_equal(duplicates.duplicate_rows(wide), reference)
    monkeypatch.setattr(duplicates, "_row_hashes", lambda x, rows, cols=None: np.zeros(len(rows), np.uint64))
    np.testing.assert_array_equal(duplicates.duplicate_rows(x), reference)  # every hash collides


def test_k_not_below_the_pool_warns_that_recall_is_one_for_any_model():
    """With no more candidates than K every rank is at most K: score and the CLI refuse it, the metric functions
    (which callers use on small sets: a small val split, the references above) say so instead of a silent 1.0."""
    from backretrieval.errors import BackRetrievalWarning

    rng = np.random.default_rng(4)
    st, si, tt, ti = (rng.standard_normal((8, 4)) for _ in range(4))
    with pytest.warns(BackRetrievalWarning, match=r"bkr_recall: 8 distinct source images, not more than the largest "
                                                  r"K \(10\): Recall@10 would be 1 for any model"):
        res = bkr_recall(st, si, tt, ti, (1, 10))
    assert res["bkr@10"] == 1.0
    with pytest.warns(BackRetrievalWarning, match=r"bkr_recall: 4 distinct source images.*largest K \(5\)"):
        bkr_recall(st, si[np.arange(8) // 2 * 2], tt, ti, (1, 5), src_image_ids=[i // 2 for i in range(8)])
    with pytest.warns(BackRetrievalWarning, match=r"xlr_recall: 5 target texts, not more than the largest K \(10\)"):
        xlr_recall(st[:5], tt[:5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fewer: no warning
        bkr_recall(st, si, tt, ti, (1, 7))
        xlr_recall(st, tt, (1, 7))


def test_an_all_zero_text_or_image_row_is_refused_naming_the_row():
    """A zero vector has no cosine: scored 0 against everything, it was ranked arbitrarily, silently."""
    rng = np.random.default_rng(6)
    st, si, tt, ti = (rng.standard_normal((20, 4)) for _ in range(4))
    for name, x in (("src_text", st), ("tgt_img", ti)):
        x[3] = 0
        with pytest.raises(BackRetrievalError, match=rf"{name}: the array has 1 of 20 rows that are all zero "
                                                     r"\(first: row 3\)"):
            bkr_recall(st, si, tt, ti, (1, 5))
        x[3] = 1
    tt[11] = 0
    with pytest.raises(BackRetrievalError, match=r"tgt_text: the array has 1 of 20 rows that are all zero \(first: "
                                                 r"row 11\)"):
        xlr_recall(st, tt, (1, 5))
    sim = rng.random((20, 20))
    sim[0] = 0  # a similarity row of zeros is no vector: fine
    bkr_recall(None, si, None, ti, (1, 5), text_sim=sim)


def test_image_sim_with_image_features_is_refused_as_score_refuses_it():
    """bkr_recall used image_sim and dropped src_img/tgt_img in silence; score refused the pair."""
    rng = np.random.default_rng(7)
    st, si, tt, ti = (rng.standard_normal((12, 4)) for _ in range(4))
    with pytest.raises(BackRetrievalError, match=r"give either image_sim or src_img/tgt_img, not both"):
        bkr_recall(st, si, tt, ti, (1, 5), image_sim=np.zeros((12, 12)))


def test_a_row_count_error_comes_alone_without_a_warning_about_distinct_images():
    """bkr_recall warned 'Recall@10 would be 1' from the text rows before refusing src_img's row count."""
    rng = np.random.default_rng(8)
    st, si, tt, ti = (rng.standard_normal((50, 4)) for _ in range(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BackRetrievalError, match="src_img: expected 10 rows"):
            bkr_recall(st[:10], si, tt, ti, (1, 10))


@pytest.mark.parametrize("queries", [[], np.zeros(30, bool)])
def test_an_empty_query_set_is_refused(queries):
    """No query gave Recall@K = NaN in silence."""
    rng = np.random.default_rng(9)
    st, si, tt, ti = (rng.standard_normal((30, 4)) for _ in range(4))
    with pytest.raises(BackRetrievalError, match="queries: no source row queries"):
        bkr_recall(st, si, tt, ti, (1, 5), queries=queries)


# --------------------------------------------------------------------------- mutation audit: gaps closed
def test_a_given_text_similarity_ties_resolve_to_the_lowest_target():
    """Step 2 on a given ``text_sim`` takes, among equal row maxima, the lowest target index (as the search does)."""
    rng = np.random.default_rng(21)
    si, ti = rng.standard_normal((6, 5)), rng.standard_normal((8, 5))
    sim = rng.uniform(-1, 0, (6, 8))
    sim[:, [2, 5, 7]] = 0.5  # three equal best targets in every row
    sim[4, 6] = 0.9  # one row with a single best
    res = bkr_recall(None, si, None, ti, (1,), text_sim=sim)
    lowest = [min(t for t in range(8) if sim[q, t] == sim[q].max()) for q in range(6)]
    np.testing.assert_array_equal(res["retrieved"], lowest)
    assert lowest == [2, 2, 2, 2, 6, 2]


def test_corr_uses_every_pair_once_when_they_fit_the_budget_exactly():
    """With Ns * Nt == corr_pairs all pairs are used, once each ("at most corr_pairs"), not a sample of them."""
    from backretrieval.metric import corr_terms

    rng = np.random.default_rng(22)
    st, tt = rng.standard_normal((7, 4)), rng.standard_normal((5, 4))
    si, ti = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    terms = corr_terms(st, si, tt, ti, corr_pairs=35)
    np.testing.assert_array_equal(terms["query"], np.repeat(np.arange(7), 5))
    np.testing.assert_allclose(terms["text_dist"], (1 - _cos(st, tt)).ravel(), atol=1e-6)
    np.testing.assert_allclose(terms["image_dist"], (1 - _cos(si, ti)).ravel(), atol=1e-6)
    every = stats.spearmanr((1 - _cos(st, tt)).ravel(), (1 - _cos(si, ti)).ravel()).statistic
    assert corr_score(st, si, tt, ti, corr_pairs=35) == pytest.approx(every, abs=1e-6)


def test_bkr_hubness_counts_the_target_set_not_the_source_set():
    """The hubness of step 2 is over the Nt targets (N_1 per target), also when Ns != Nt."""
    rng = np.random.default_rng(23)
    st, tt = rng.standard_normal((40, 6)), rng.standard_normal((30, 6))
    si, ti = rng.standard_normal((40, 5)), rng.standard_normal((30, 5))
    res = bkr_recall(st, si, tt, ti, (1, 5))
    occurrence = np.bincount(res["retrieved"], minlength=30)
    assert len(occurrence) == 30
    hub = res["hubness"]
    assert hub["never_retrieved"] == pytest.approx(np.mean(occurrence == 0))
    assert hub["max_occurrence"] == occurrence.max()
    assert hub["skewness_random"] == pytest.approx(np.sqrt(30 / 40))  # Poisson of mean Q / Nt


_X = np.random.default_rng(0).standard_normal((4, 3))


@pytest.mark.parametrize("call, message", [
    (lambda: bkr_recall(_X[:, :, None], _X, _X, _X),
     r"src_text: expected a 2-D array \(rows x dim\), got shape \(4, 3, 1\)"),
    (lambda: xlr_recall(np.zeros((0, 3)), np.zeros((0, 3))), r"src_text: empty \(0 rows\)"),
    (lambda: xlr_recall(_X, _X[:3]), "without gt the sets must be row-aligned, got 4 sources and 3 targets"),
    (lambda: bkr_recall(_X, None, _X, None), "needs src_img and tgt_img .* or image_sim"),
    (lambda: bkr_recall(_X, _X, _X, _X, approximate="yes"),
     "approximate: expected True/False or an ApproxConfig, got 'yes'"),
    (lambda: bkr_recall(_X, _X, _X, _X, approximate=ApproxConfig(candidates=0)),
     "candidates and nprobe must be >= 1 and pca_dim >= 0, got 0, "),
    (lambda: bkr_recall(None, _X, None, _X, text_sim=_X @ _X.T, approximate=True), "text_sim: .* drop approximate"),
    (lambda: bkr_recall(None, _X, None, _X, retrieved=np.arange(4), approximate=True),
     "retrieved: .* drop approximate"),
    (lambda: bkr_recall(None, _X, None, None, retrieved=np.arange(4)), "counted by src_img/tgt_img or image_sim"),
    (lambda: bkr_recall(None, _X, None, np.zeros((0, 3)), retrieved=np.arange(4)), r"no target to retrieve \(0 target"),
    (lambda: bkr_recall(None, None, None, None, image_sim=np.zeros((0, 4)), retrieved=np.zeros(4, int)),
     "no target to retrieve"),
])
def test_inputs_the_metric_cannot_rank_are_refused_naming_the_argument(call, message):
    """Wrong shapes, missing sides and options that contradict the given targets: a one-line error naming the
    argument and what was expected, never a figure."""
    with pytest.raises(BackRetrievalError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def _brute_counts(scores: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> dict[str, np.ndarray]:
    """Competitors above / at least the own score, by a loop over each query's row (the own column excluded)."""
    gt, ge = [], []
    for r, c in zip(rows, cols):
        others = np.delete(scores[r], c)
        gt.append(int(np.sum(others > scores[r, c])))
        ge.append(int(np.sum(others >= scores[r, c])))
    return {"gt": np.array(gt), "ge": np.array(ge)}


def test_count_ranks_reads_the_columns_a_matrix_scorer_picks():
    """Columns picked out of a precomputed matrix (one per distinct image), in another order: the counts are those
    of the picked sub-matrix, in tiles of a few columns as in one."""
    from backretrieval.ranking import count_ranks
    from backretrieval.scorers import MatrixScorer

    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((7, 12)).astype(np.float32)
    picked = np.array([11, 0, 4, 3, 9, 6])
    rows, cols = np.array([0, 3, 3, 6, 2]), np.array([0, 5, 1, 2, 4])
    expected = _brute_counts(matrix[:, picked], rows, cols)
    for block_bytes in (8, 1 << 20):
        found = count_ranks(MatrixScorer(matrix, picked), rows, cols, "expected", block_bytes=block_bytes)
        for key in ("gt", "ge"):
            np.testing.assert_array_equal(found[key], expected[key])
    empty = count_ranks(MatrixScorer(matrix, picked), np.zeros(0, int), np.zeros(0, int), "pessimistic")
    assert list(empty) == ["ge"] and empty["ge"].shape == (0,)


def test_count_ranks_stops_once_every_query_is_past_max_rank():
    """Every query's own column scores lowest of its row: after the first column chunk all are past max_rank, and the
    count stops there. The counts are only promised >= max_rank (and never above the true ones)."""
    from backretrieval.ranking import _FIRST_CHUNK_COLS, count_ranks
    from backretrieval.scorers import MatrixScorer

    rng = np.random.default_rng(6)
    n_cols = 2 * _FIRST_CHUNK_COLS + 100
    matrix = rng.uniform(0.5, 1.0, (4, n_cols)).astype(np.float32)
    rows, cols = np.arange(4), np.array([0, 7, n_cols - 1, 600])
    matrix[rows, cols] = 0.0
    scorer = MatrixScorer(matrix, np.arange(n_cols))
    exact = count_ranks(scorer, rows, cols, "pessimistic")["ge"]
    np.testing.assert_array_equal(exact, np.full(4, n_cols - 1))
    stopped = count_ranks(scorer, rows, cols, "pessimistic", max_rank=10)["ge"]
    assert (stopped >= 10).all() and (stopped < exact).all()  # the last chunks were never read


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_copies_count_as_ties_only_for_the_queries_whose_own_column_has_one(ties):
    """Columns 0 and 1 are copies: a query owning column 0 ties with column 1 (in ``ge``, never ``gt``); queries
    owning a column without a copy count as plain cosines, whether or not a query with a copy shares their tile."""
    from backretrieval.ranking import count_ranks
    from backretrieval.scorers import VectorScorer

    rng = np.random.default_rng(7)
    row_vecs, col_vecs = rng.standard_normal((5, 4)), rng.standard_normal((6, 4))
    col_vecs[1] = col_vecs[0]
    exact = _cos(row_vecs, col_vecs)
    exact[:, 1] = exact[:, 0]  # the copy's cosine, in exact arithmetic
    for rows, cols in ((np.array([0, 1, 4]), np.array([2, 3, 5])),  # no query owns a copied column
                       (np.array([0, 1, 2, 3]), np.array([0, 3, 1, 4]))):
        expected = _brute_counts(exact, rows, cols)
        for block_bytes in (1, 1 << 20):  # one column and one query per tile, or all at once
            found = count_ranks(VectorScorer(row_vecs, col_vecs), rows, cols, ties, block_bytes=block_bytes)
            assert found and all(np.array_equal(found[key], expected[key]) for key in found)


def test_an_unknown_tie_policy_is_refused_by_the_rank_functions():
    from backretrieval.image_index import neighbour_counts
    from backretrieval.ranking import count_ranks, ranks_and_hits
    from backretrieval.scorers import MatrixScorer

    with pytest.raises(ValueError, match="ties must be one of"):
        count_ranks(MatrixScorer(np.eye(3), np.arange(3)), np.arange(3), np.arange(3), "random")
    with pytest.raises(ValueError, match="ties must be one of"):
        ranks_and_hits({"ge": np.zeros(3, int)}, (1,), "random")
    with pytest.raises(ValueError, match="ties must be one of"):
        neighbour_counts(None, MatrixScorer(np.eye(3), np.arange(3)), np.arange(3), np.arange(3), "random")
