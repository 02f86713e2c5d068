"""Image neighbour lists: step 4 of BkR as a lookup, against the exact count; saved, reloaded and refused."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval import ApproxConfig, BackRetrievalError, bkr_recall
from backretrieval.image_index import SourceImageIndex, image_neighbours
from backretrieval.image_index_file import load_image_neighbours, save_image_neighbours

KS = (1, 5, 10)


def _world(rng: np.random.Generator, n: int, latent: int = 8, noise: float = 0.5) -> tuple[np.ndarray, ...]:
    """Non-matching source and target sets: texts and images are noisy views of a shared latent."""
    w_t, w_i = rng.standard_normal((latent, 24)), rng.standard_normal((latent, 40))
    z_s, z_t = rng.standard_normal((n, latent)), rng.standard_normal((n, latent))
    st, tt = z_s @ w_t + noise * rng.standard_normal((n, 24)), z_t @ w_t + noise * rng.standard_normal((n, 24))
    si, ti = z_s @ w_i + noise * rng.standard_normal((n, 40)), z_t @ w_i + noise * rng.standard_normal((n, 40))
    return st, si, tt, ti


def _clustered(rng: np.random.Generator, n: int, clusters: int = 40, latent: int = 16) -> tuple[np.ndarray, ...]:
    """Like :func:`_world`, the shared latents drawn around ``clusters`` centres; images 128-d, noisy."""
    centres = rng.standard_normal((clusters, latent))
    w_t, w_i = rng.standard_normal((latent, 32)), rng.standard_normal((latent, 128))
    views = []
    for _ in range(2):  # source, then target: other scenes of the same clusters
        z = centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, latent))
        views += [z @ w_t + 6.0 * rng.standard_normal((n, 32)), z @ w_i + 6.0 * rng.standard_normal((n, 128))]
    return tuple(v.astype(np.float32) for v in views)


def _same(a: dict, b: dict) -> None:
    np.testing.assert_array_equal(a["ranks"], b["ranks"])
    for k in KS:
        np.testing.assert_array_equal(a["hits"][k], b["hits"][k])
        assert a[f"bkr@{k}"] == b[f"bkr@{k}"]


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
@pytest.mark.parametrize("shared_images", [False, True])
def test_exact_lists_give_the_exact_count(ties, shared_images):
    rng = np.random.default_rng(0)
    st, si, tt, ti = _world(rng, 400)
    ids = rng.integers(0, 250, 400) if shared_images else None
    if shared_images:
        si = si[ids]  # captions of one picture share its features
    lists = image_neighbours(si, ti, 12, src_image_ids=ids)
    exact = bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, max_rank=max(KS))
    looked_up = bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, image_neighbours=lists)
    _same(looked_up, exact)
    assert 0 < exact["bkr@10"] < 1 and looked_up["image_neighbours"] == "flat" and exact["image_neighbours"] is None
    approx = bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, approximate=True)
    _same(bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, approximate=True, image_neighbours=lists),
          approx)


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic", "expected"])
def test_exact_lists_count_exact_ties_like_the_full_count(ties):
    rng = np.random.default_rng(1)
    sign = lambda n: rng.choice([-1.0, 1.0], size=(n, 16)).astype(np.float32)  # cosines: multiples of 1/16
    st, tt, pictures, ti = sign(60), sign(45), sign(35), sign(45)
    ids = rng.integers(0, 35, 60)
    si = pictures[ids]
    lists = image_neighbours(si, ti, 35, src_image_ids=ids)  # every picture listed: ties included
    exact = bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, max_rank=max(KS))
    _same(bkr_recall(st, si, tt, ti, KS, ties=ties, src_image_ids=ids, image_neighbours=lists), exact)


def test_hnsw_lists_are_close_to_exact_on_structured_data():
    rng = np.random.default_rng(2)
    st, si, tt, ti = _world(rng, 1500, latent=16, noise=1.5)
    exact = bkr_recall(st, si, tt, ti, KS, max_rank=max(KS))
    lists = image_neighbours(si, ti, 16, method="hnsw", hnsw_m=16, candidates=32)
    approx = bkr_recall(st, si, tt, ti, KS, image_neighbours=lists)
    assert lists.method == "hnsw" and approx["image_neighbours"] == "hnsw"
    assert np.mean(approx["ranks"] == exact["ranks"]) > 0.98  # measured: 0.996
    assert abs(approx["bkr@10"] - exact["bkr@10"]) <= 0.01  # measured: 0.002
    reduced = image_neighbours(si, ti, 16, method="hnsw", pca_dim=16, candidates=64)  # graph over 16 PCA dims
    assert abs(bkr_recall(st, si, tt, ti, KS, image_neighbours=reduced)["bkr@10"] - exact["bkr@10"]) <= 0.01


def test_pq_lists_recall_the_exact_lists_on_clustered_data(tmp_path):
    rng = np.random.default_rng(5)
    st, si, tt, ti = _clustered(rng, 2000)  # above the 624 rows the 4-bit quantizer is trained from
    exact_lists = image_neighbours(si, ti, 16)
    lists = image_neighbours(si, ti, 16, method="pq", candidates=48)  # 128-d images, 64 principal directions coded
    assert lists.method == "pq" and lists.ids.shape == (2000, 16) and lists.dim == 128
    assert all(len(set(row)) == 16 for row in lists.ids[:200])  # distinct images, none missing
    recall = np.mean([len(np.intersect1d(a, b)) for a, b in zip(lists.ids, exact_lists.ids)]) / 16
    assert recall >= 0.9, recall  # measured: 0.94
    np.testing.assert_array_less(lists.scores[:, 1:], lists.scores[:, :-1] + 1e-6)  # exact scores, best first
    assert np.mean(np.isclose(lists.scores[:, 0], exact_lists.scores[:, 0], atol=1e-5)) > 0.99  # the best: 0.999
    exact = bkr_recall(st, si, tt, ti, KS, max_rank=max(KS))
    approx = bkr_recall(st, si, tt, ti, KS, image_neighbours=lists)
    assert approx["image_neighbours"] == "pq" and 0.03 < exact["bkr@10"] < 0.5
    assert np.mean(approx["ranks"] == exact["ranks"]) > 0.98  # measured: 0.997
    assert abs(approx["bkr@10"] - exact["bkr@10"]) <= 0.005  # measured: 0.001
    save_image_neighbours(tmp_path / "pq.npz", lists)
    loaded = load_image_neighbours(tmp_path / "pq.npz")
    assert loaded.method == "pq"
    _same(bkr_recall(st, si, tt, ti, KS, image_neighbours=loaded), approx)
    small = image_neighbours(si[:300], ti[:300], 8, method="pq")  # too few rows to train codes: a flat PCA index
    assert small.method == "pq" and small.ids.shape == (300, 8) and (small.ids >= 0).all()


@pytest.mark.parametrize("shared_images", [False, True])
def test_the_approximate_mode_builds_lists_for_the_retrieved_targets_only(shared_images):
    rng = np.random.default_rng(6)
    st, si, tt, ti = _clustered(rng, 2000)
    ids = np.arange(2000) // 2 if shared_images else None  # two source texts per picture
    if shared_images:
        si = si[ids * 2]  # ... and its features on both rows
    default = bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=True)
    assert len(np.unique(default["retrieved"])) < 2000  # lists of only some target images were built
    every = image_neighbours(si, ti, 32, method="pq", src_image_ids=ids)  # what --image-index would write
    _same(default, bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=True, image_neighbours=every))
    counted = bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=ApproxConfig(image_side="exact"))
    np.testing.assert_array_equal(counted["retrieved"], default["retrieved"])
    assert abs(counted["bkr@10"] - default["bkr@10"]) <= 0.005  # the exact count on the same retrieval
    with pytest.raises(BackRetrievalError, match="image_side must be one of pq, exact, got 'hnsw'"):
        bkr_recall(st, si, tt, ti, KS, approximate=ApproxConfig(image_side="hnsw"))


def test_saved_lists_give_the_same_result_as_computing_them(tmp_path):
    rng = np.random.default_rng(3)
    st, si, tt, ti = _world(rng, 300)
    lists = image_neighbours(si, ti)
    save_image_neighbours(tmp_path / "lists.npz", lists)
    loaded = load_image_neighbours(tmp_path / "lists.npz")
    assert loaded.origin == str(tmp_path / "lists.npz") and loaded.fingerprint == lists.fingerprint
    computed = bkr_recall(st, si, tt, ti, KS, approximate=ApproxConfig(candidates=64), image_neighbours=lists)
    with pytest.raises(BackRetrievalError, match=r"^approximate: image_side='exact' not used with image_neighbours "
                                                  r"\(their lists are looked up\); drop one of them$"):  # was ignored
        bkr_recall(st, si, tt, ti, KS, approximate=ApproxConfig(image_side="exact"), image_neighbours=lists)
    _same(bkr_recall(st, si, tt, ti, KS, approximate=ApproxConfig(candidates=64), image_neighbours=loaded), computed)
    other = rng.standard_normal(st.shape)  # another text model, the same lists
    _same(bkr_recall(other, si, tt, ti, KS, image_neighbours=loaded),
          bkr_recall(other, si, tt, ti, KS, max_rank=max(KS)))


def test_lists_of_other_images_are_refused_in_one_line(tmp_path):
    rng = np.random.default_rng(4)
    st, si, tt, ti = _world(rng, 200)
    path = tmp_path / "lists.npz"
    save_image_neighbours(path, image_neighbours(si, ti, 8))
    lists = load_image_neighbours(path)
    cases = [
        ((st[:150], si[:150], tt, ti), {}, ["lists.npz", "200 target and 200 source", "200 target and 150 distinct"]),
        ((st, si, tt[:120], ti[:120]), {}, ["lists.npz", "120 target and 200 distinct"]),
        ((st, si[:, :30], tt, ti[:, :30]), {}, ["lists.npz", "of dim 40", "of dim 30"]),
        ((st, si + 1.0, tt, ti), {}, ["lists.npz", "other image features", "200 target, 200 source"]),
        ((st, si, tt, ti), {"ks": (1, 10)}, ["lists.npz", "8 neighbours", "largest K (10)"]),
    ]
    for args, kw, expected in cases:
        with pytest.raises(BackRetrievalError) as err:
            bkr_recall(*args, kw.get("ks", (1, 5)), image_neighbours=lists)
        message = str(err.value)
        assert "\n" not in message and all(e in message for e in expected), (expected, message)
    with pytest.raises(BackRetrievalError, match="image_sim"):
        bkr_recall(st, None, tt, None, (1,), image_sim=np.zeros((200, 200)), image_neighbours=lists)
    (tmp_path / "junk.npz").write_text("not an npz")
    for bad, expected in [(tmp_path / "junk.npz", "junk.npz: not an image neighbour file"),
                          (tmp_path / "missing.npz", "missing.npz: image neighbour file not found")]:
        with pytest.raises(BackRetrievalError, match=expected):
            load_image_neighbours(bad)
    with pytest.raises(BackRetrievalError, match="method must be one of flat, pq, hnsw"):
        image_neighbours(si, ti, method="ivf")


def test_a_list_file_whose_ids_and_scores_differ_in_shape_is_refused_in_one_line(tmp_path):
    """Each neighbour id has its score: a file whose two arrays differ in shape (or whose ids are no (Nt, C) table)
    was written by something else, and is refused when read, not at the first lookup past its end."""
    rng = np.random.default_rng(5)
    _, si, _, ti = _world(rng, 50)
    path = tmp_path / "lists.npz"
    save_image_neighbours(path, image_neighbours(si, ti, 8))
    with np.load(path) as data:
        fields = dict(data)
    for ids, scores in ((fields["ids"], fields["scores"][:, :7]), (fields["ids"][:, 0], fields["scores"][:, 0])):
        with open(path, "wb") as handle:
            np.savez(handle, **{**fields, "ids": ids, "scores": scores})
        with pytest.raises(BackRetrievalError, match=rf"^{path}: ids \({ids.shape[0]},.*\) and scores .* must be one "
                                                      r"\(Nt, C\) shape$"):
            load_image_neighbours(path)


def test_a_source_index_of_other_images_is_refused_in_one_line():
    """bkr_recall used any SourceImageIndex it was given: one built over other images (all source rows rather than
    the distinct pictures, another language's, other features of the same size) silently gave wrong ranks."""
    rng = np.random.default_rng(9)
    st, si, tt, ti = _world(rng, 200)
    ids = np.arange(200) // 2  # two source texts per picture: 100 distinct images
    si = si[ids * 2]
    index = SourceImageIndex(si[::2], "pq")  # the distinct pictures, as bkr_recall ranks them
    _same(bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=True, source_index=index),
          bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=True))
    changed = si[::2].copy()
    changed[37, 5] += 0.5  # one value of one picture
    cases = [
        (SourceImageIndex(si, "pq"), "built over 200 source images of dim 40, but the data has 100 distinct"),
        (SourceImageIndex(si[::2, :30], "pq"), "of dim 30, but the data has 100 distinct source images of dim 40"),
        (SourceImageIndex(changed, "pq"), "built over other image features of the same size (100 distinct source "
                                          "images, dim 40)"),
    ]
    for other, expected in cases:
        with pytest.raises(BackRetrievalError) as err:
            bkr_recall(st, si, tt, ti, KS, src_image_ids=ids, approximate=True, source_index=other)
        message = str(err.value)
        assert message.startswith("source_index: ") and expected in message and "\n" not in message, message


def test_a_source_index_that_would_not_be_searched_is_refused_in_one_line():
    """bkr_recall searches a given SourceImageIndex only with approximate (image_side="pq") on image features; in any
    other mode it was ignored in silence, and the caller believed it used. It is now refused, naming why."""
    rng = np.random.default_rng(9)
    st, si, tt, ti = _world(rng, 60)
    index = SourceImageIndex(si, "pq")
    lists = image_neighbours(si, ti, 11, method="flat")
    sim = ti @ si.T
    cases = [
        ({}, "not used without approximate"),
        ({"approximate": ApproxConfig(image_side="exact")}, "not used with approximate image_side='exact'"),
        ({"approximate": True, "image_neighbours": lists}, "not used with image_neighbours"),
        ({"approximate": True, "image_sim": sim}, "not used with image_sim"),
    ]
    for options, expected in cases:
        src_img, tgt_img = (None, None) if "image_sim" in options else (si, ti)
        with pytest.raises(BackRetrievalError) as err:
            bkr_recall(st, src_img, tt, tgt_img, KS, source_index=index, **options)
        message = str(err.value)
        assert message.startswith(f"source_index: {expected}") and "\n" not in message, message
        assert bkr_recall(st, src_img, tt, tgt_img, KS, **options)["n_queries"] == 60  # valid without the index
    assert bkr_recall(st, si, tt, ti, KS, approximate=True, source_index=index)["approximate"]


@pytest.mark.parametrize("ties", ["pessimistic", "optimistic"])
def test_lists_see_an_image_tied_with_the_own_one_just_past_the_largest_k(ties):
    """Every picture alike: the own image ties with all 20, so no query is a pessimistic hit at K = 1 and every one
    an optimistic hit. Lists one entry past K see the tie, as the exact count does; lists of K entries are refused.
    (``expected``: test_expected_hit_counts_every_tie_when_all_pictures_are_alike.)"""
    rng = np.random.default_rng(0)
    st, tt = rng.standard_normal((2, 20, 4)).astype(np.float32)
    si = ti = np.ones((20, 3), np.float32)
    exact = bkr_recall(st, si, tt, ti, (1,), ties=ties)["bkr@1"]
    assert exact == (0.0 if ties == "pessimistic" else 1.0)
    for kwargs in ({"approximate": True}, {"image_neighbours": image_neighbours(si, ti, 2)}):
        assert bkr_recall(st, si, tt, ti, (1,), ties=ties, **kwargs)["bkr@1"] == exact, kwargs
    with pytest.raises(BackRetrievalError, match="a list needs K \\+ 1 to see ties at its end"):
        bkr_recall(st, si, tt, ti, (1,), ties=ties, image_neighbours=image_neighbours(si, ti, 1))


@pytest.mark.parametrize("how", ["flat lists of K + 1", "flat lists of 32", "approximate (pq image side)"])
def test_expected_ties_running_past_the_lists_end_are_counted_in_full(how):
    """One-hot image features: 5 pictures among 40 source rows under distinct ids, so the own image ties with about
    7 others and a tie often runs past the end of a list. ``ties="expected"``'s hit (K - G) / (E + 1) needs every
    tied image: lists and the approximate mode must give the exact count's hits, query by query."""
    rng = np.random.default_rng(1)
    st, tt = rng.standard_normal((40, 6)).astype(np.float32), rng.standard_normal((45, 6)).astype(np.float32)
    si = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 40)]
    ti = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 45)]
    kwargs = {"flat lists of K + 1": {"image_neighbours": image_neighbours(si, ti, max(KS) + 1)},
              "flat lists of 32": {"image_neighbours": image_neighbours(si, ti)},
              "approximate (pq image side)": {"approximate": True}}[how]
    exact = bkr_recall(st, si, tt, ti, KS, ties="expected")
    res = bkr_recall(st, si, tt, ti, KS, ties="expected", **kwargs)
    np.testing.assert_array_equal(res["retrieved"], exact["retrieved"])
    for k in KS:
        np.testing.assert_allclose(res["hits"][k], exact["hits"][k], err_msg=f"K={k}")


def test_expected_hit_counts_every_tie_when_all_pictures_are_alike():
    """All 20 pictures alike: G = 0 and E = 19 for every query, so the expected Recall@1 is 1 / 20, with a list of
    two entries as with the full count (the list sees only one of the 19 ties)."""
    rng = np.random.default_rng(0)
    st, tt = rng.standard_normal((2, 20, 4)).astype(np.float32)
    si = ti = np.ones((20, 3), np.float32)
    for kwargs in ({}, {"approximate": True}, {"image_neighbours": image_neighbours(si, ti, 2)}):
        assert bkr_recall(st, si, tt, ti, (1,), ties="expected", **kwargs)["bkr@1"] == pytest.approx(1 / 20), kwargs


def test_a_new_list_file_holds_the_default_length_so_a_larger_k_can_reuse_it(tmp_path):
    """Built for a small K, the file still holds DEFAULT_NEIGHBOURS per target image (a later run with a larger K reads
    it rather than being refused), each list the exact best source images."""
    from backretrieval.image_index import DEFAULT_NEIGHBOURS
    from backretrieval.image_index_file import image_neighbours_file

    rng = np.random.default_rng(0)
    src, tgt = rng.normal(size=(40, 6)).astype(np.float32), rng.normal(size=(5, 6)).astype(np.float32)
    lists, built = image_neighbours_file(tmp_path / "lists.npz", src, tgt, 3)
    again, built_again = image_neighbours_file(tmp_path / "lists.npz", src, tgt, 3)
    assert built and not built_again
    assert lists.n_neighbours == again.n_neighbours == DEFAULT_NEIGHBOURS
    unit = src / np.linalg.norm(src, axis=1, keepdims=True)
    best = np.argsort(-(tgt @ unit.T), axis=1)[:, :DEFAULT_NEIGHBOURS]
    np.testing.assert_array_equal(again.ids, best)


def test_a_copy_of_the_own_image_ending_a_list_under_another_rounding_sends_the_query_to_the_exact_count():
    """Source pictures 0-3 are one picture under four ids (copies, tied whatever their rounded scores), 4 another.
    Target 0's list of 2 holds copies 1 and 2, the last read as 0.9999999 (an approximate score), not the own
    image's 1.0: ``expected`` ties need every copy, so the query is counted exactly (3 tied, none better), not from
    the list (2 tied)."""
    from backretrieval.image_index import ImageNeighbours, neighbour_counts
    from backretrieval.ranking import count_ranks
    from backretrieval.scorers import VectorScorer

    scorer = VectorScorer(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]]))
    lists = ImageNeighbours(np.array([[1, 2]]), np.array([[1.0, 0.9999999]], np.float32), 5, 2, "f")
    counts = neighbour_counts(lists, scorer, np.array([0]), np.array([0]), ties="expected")
    assert counts["gt"].tolist() == [0] and counts["ge"].tolist() == [3]
    exact = count_ranks(scorer, np.array([0]), np.array([0]), "expected")
    assert counts["gt"].tolist() == exact["gt"].tolist() and counts["ge"].tolist() == exact["ge"].tolist()


def test_an_npz_without_the_list_arrays_is_refused_naming_what_is_missing(tmp_path):
    """An .npz of something else (here: only ``ids``) is no neighbour file: the file and the missing arrays named."""
    rng = np.random.default_rng(5)
    _, si, _, ti = _world(rng, 50)
    path = tmp_path / "lists.npz"
    save_image_neighbours(path, image_neighbours(si, ti, 8))
    with np.load(path) as data:
        ids = data["ids"]
    other = tmp_path / "other.npz"
    np.savez(other, ids=ids)
    with pytest.raises(BackRetrievalError, match=rf"^{other}: not an image neighbour file \(no .*scores.* array\)$"):
        load_image_neighbours(other)


def test_image_ids_not_one_per_source_row_are_refused():
    rng = np.random.default_rng(6)
    st, si, tt, ti = _world(rng, 20)
    with pytest.raises(BackRetrievalError, match=r"^src_image_ids: expected 20 ids \(one per source text\), got shape "
                                                  r"\(19,\)$"):
        bkr_recall(st, si, tt, ti, (1,), src_image_ids=[f"i{i}" for i in range(19)])
