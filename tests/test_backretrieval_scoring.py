"""The library side of ``backretrieval score`` and ``compare``: backretrieval.score / backretrieval.compare."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backretrieval import BackRetrievalError, bkr_recall, compare, corr_score, score, xlr_recall
from backretrieval.errors import cli_option_names


def _world(rng: np.random.Generator, n: int = 60, noise: float = 0.3) -> dict[str, np.ndarray]:
    """n source / n target items of a latent world: image features and a text model of quality ``noise``."""
    z_s, z_t = rng.standard_normal((n, 6)), rng.standard_normal((n, 6))
    w_t, w_i = rng.standard_normal((6, 8)), rng.standard_normal((6, 12))
    return {"src_img": z_s @ w_i + 0.2 * rng.standard_normal((n, 12)),
            "tgt_img": z_t @ w_i + 0.2 * rng.standard_normal((n, 12)),
            "src_text": z_s @ w_t + noise * rng.standard_normal((n, 8)),
            "tgt_text": z_t @ w_t + noise * rng.standard_normal((n, 8)),
            "z_s": z_s, "z_t": z_t, "w_t": w_t}


def _files(tmp_path, arrays: dict[str, np.ndarray]) -> dict[str, str]:
    paths = {}
    for name, arr in arrays.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], np.asarray(arr, np.float32))
    return paths


def _inputs(w: dict) -> dict:
    return {k: w[k] for k in ("src_img", "tgt_img")}


def test_score_is_the_metric_functions_with_intervals_and_a_record():
    w = _world(np.random.default_rng(1))
    res = score(w["src_text"], w["tgt_text"], **_inputs(w), xlr_tgt_text=w["src_text"], ks=(1, 10), bootstrap=200)
    ref = bkr_recall(w["src_text"], w["src_img"], w["tgt_text"], w["tgt_img"], (1, 10))
    assert res.metrics["bkr@10"] == pytest.approx(ref["bkr@10"]) and res.metrics["bkr@1"] == pytest.approx(ref["bkr@1"])
    assert res.metrics["xlr@1"] == pytest.approx(xlr_recall(w["src_text"], w["src_text"], (1,))["xlr@1"])
    assert list(res.metrics) == ["bkr@1", "bkr@10", "corr", "xlr@1", "xlr@10"]
    assert res.metrics["corr"] == pytest.approx(corr_score(w["src_text"], w["src_img"], w["tgt_text"], w["tgt_img"]))
    np.testing.assert_array_equal(res.ranks, ref["ranks"])
    assert res.hits_matrix().shape == (60, 2) and res.hits_matrix()[:, 1].mean() == pytest.approx(ref["bkr@10"])
    for metric, value in res.metrics.items():
        ci = res.intervals[metric]
        assert ci["lo"] <= value <= ci["hi"] and ci["value"] == pytest.approx(value)
    record = res.to_record({"ks": [1, 10]})
    assert list(record) == ["task", "inputs", "n_queries", "n_images", "ties", "retrieval", "approximate",
                            "image_neighbours", "metrics", "intervals", "hubness"]
    assert record["task"] == "backretrieval.score" and record["inputs"] == {"ks": [1, 10]}
    assert record["intervals"]["level"] == 0.95 and record["intervals"]["replicates"] == 200
    assert set(record["hubness"]) >= {"skewness", "hub_share"} and record["n_queries"] == 60
    json.dumps(record, allow_nan=False)  # JSON-ready: no numpy types, no NaN


def test_score_takes_paths_like_arrays_image_ids_and_a_similarity_matrix(tmp_path):
    w = _world(np.random.default_rng(2))
    p = _files(tmp_path, w)
    from_arrays = score(w["src_text"], w["tgt_text"], **_inputs(w), ks=(1, 5), bootstrap=0)
    from_files = score(p["src_text"], p["tgt_text"], src_img=p["src_img"], tgt_img=p["tgt_img"], ks=(1, 5),
                       bootstrap=0)
    assert from_files.metrics == pytest.approx(from_arrays.metrics)
    assert from_files.intervals == {} and from_files.to_record()["intervals"] is None
    ids = [f"i{j // 2}" for j in range(60)]  # two source rows per picture: 30 distinct images
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    pictures = {"src_img": w["src_img"][np.arange(60) // 2 * 2], "tgt_img": w["tgt_img"]}  # one picture's features
    by_list = score(w["src_text"], w["tgt_text"], **pictures, src_image_ids=ids, ks=(1, 5), bootstrap=0)
    by_file = score(w["src_text"], w["tgt_text"], **pictures, src_image_ids=tmp_path / "ids.txt", ks=(1, 5),
                    bootstrap=0)
    assert by_list.n_images == by_file.n_images == 30 and by_list.metrics == by_file.metrics
    with pytest.raises(BackRetrievalError, match="src_image_ids: rows 0 and 1 share the image id 'i0' but their "
                                                 "image features differ; rows sharing an id must be one picture"):
        score(w["src_text"], w["tgt_text"], **_inputs(w), src_image_ids=ids, ks=(1, 5), bootstrap=0)
    for text, line in (("\n".join(ids[:30] + [""] + ids[31:]) + "\n", 31), ("\n".join(ids) + "\n\n", 61)):
        (tmp_path / "blank.txt").write_text(text)
        with pytest.raises(BackRetrievalError, match=f"blank.txt: line {line} is blank; expected one image id per "
                                                     "src_text row, 60 in all"):
            score(w["src_text"], w["tgt_text"], **pictures, src_image_ids=tmp_path / "blank.txt", ks=(1, 5))
    unit = [x / np.linalg.norm(x, axis=1, keepdims=True) for x in (w["src_img"], w["tgt_img"])]
    by_sim = score(w["src_text"], w["tgt_text"], image_sim=unit[1] @ unit[0].T, ks=(1, 5), bootstrap=0)
    assert by_sim.metrics == pytest.approx({k: v for k, v in from_arrays.metrics.items() if k != "corr"})


def test_score_retrieval_options_reach_the_metric_and_the_record():
    w = _world(np.random.default_rng(3))
    cosine = score(w["src_text"], w["tgt_text"], **_inputs(w), xlr_tgt_text=w["src_text"], ks=(1, 10), bootstrap=0)
    csls = score(w["src_text"], w["tgt_text"], **_inputs(w), xlr_tgt_text=w["src_text"], ks=(1, 10), bootstrap=0,
                 retrieval="csls", approximate=True)
    ref = bkr_recall(w["src_text"], w["src_img"], w["tgt_text"], w["tgt_img"], (1, 10), retrieval="csls",
                     approximate=True)
    assert csls.metrics["bkr@10"] == pytest.approx(ref["bkr@10"]) and csls.hubness == ref["hubness"]
    assert cosine.hubness != csls.hubness
    record = csls.to_record()
    assert record["retrieval"] == "csls" and record["approximate"] is True
    assert cosine.to_record()["approximate"] is False


def test_image_index_file_is_built_once_reused_and_refused_for_other_images(tmp_path):
    w = _world(np.random.default_rng(14))
    lists = tmp_path / "lists.npz"
    run = dict(ks=(1, 10), bootstrap=0)
    exact = score(w["src_text"], w["tgt_text"], **_inputs(w), max_rank=10, **run)
    built = score(w["src_text"], w["tgt_text"], **_inputs(w), image_index=lists, **run)
    assert built.image_lists.built and built.image_lists.lists.method == "flat" and built.image_neighbours == "flat"
    assert built.image_lists.lists.origin == str(lists) and built.image_lists.lists.ids.shape == (60, 32)
    written = lists.stat().st_mtime_ns
    reused = score(w["src_text"], w["tgt_text"], **_inputs(w), image_index=lists, approximate=True, **run)
    assert not reused.image_lists.built and lists.stat().st_mtime_ns == written
    assert exact.metrics == built.metrics == reused.metrics  # 60 images: the lists hold every better image
    fast = score(w["src_text"], w["tgt_text"], **_inputs(w), image_index=tmp_path / "fast.npz", approximate=True,
                 **run)
    told = score(w["src_text"], w["tgt_text"], **_inputs(w), image_index=tmp_path / "told.npz", approximate=True,
                 image_index_method="flat", **run)
    assert fast.image_neighbours == "pq" and told.image_neighbours == "flat"
    other = _world(np.random.default_rng(15), n=50)
    with pytest.raises(BackRetrievalError, match="lists.npz.*60 target and 60 source images of dim 12"):
        score(other["src_text"], other["tgt_text"], **_inputs(other), image_index=lists, **run)
    with pytest.raises(BackRetrievalError, match="lists.npz.*32 neighbours.*largest K \\(40\\)"):
        score(w["src_text"], w["tgt_text"], **_inputs(w), image_index=lists, ks=(40,), bootstrap=0)
    sim = w["tgt_img"] @ w["src_img"].T
    with pytest.raises(BackRetrievalError, match="image_index needs src_img and tgt_img"):
        score(w["src_text"], w["tgt_text"], image_sim=sim, image_index=lists, **run)


def test_bad_inputs_name_files_counts_and_parameters(tmp_path):
    rng = np.random.default_rng(13)
    w = _world(rng, n=30)
    p = _files(tmp_path, {**w, "short": rng.standard_normal((25, 12))})
    nan = rng.standard_normal((30, 8))
    nan[[4, 9]] = np.nan
    p.update(_files(tmp_path, {"nan": nan}))
    texts = (p["src_text"], p["tgt_text"])
    cases = [
        (lambda: score(*texts, src_img=p["short"], tgt_img=p["tgt_img"]), ["short.npy has 25", "src_text.npy has 30"]),
        (lambda: score(p["nan"], p["tgt_text"], src_img=p["src_img"], tgt_img=p["tgt_img"]),
         ["nan.npy: src_text has 2 of 30 rows with NaN", "row 4"]),
        (lambda: score(*texts, src_img=p["src_img"], tgt_img=p["tgt_img"], ks=(50,)),
         ["src_img.npy: 30 distinct source images", "largest K (50)", "lower ks"]),
        (lambda: score(str(tmp_path / "missing.npy"), p["tgt_text"], src_img=p["src_img"], tgt_img=p["tgt_img"]),
         ["missing.npy: src_text file not found"]),
        (lambda: score(*texts), ["the image side is missing: give src_img and tgt_img, or image_sim"]),
        (lambda: score(*texts, src_img=p["src_img"], tgt_img=p["tgt_img"], image_sim=p["src_img"]),
         ["give either image_sim or src_img/tgt_img, not both"]),
        (lambda: score(*texts, src_img=p["src_img"], tgt_img=p["tgt_img"], src_image_ids=["a"] * 3),
         ["src_image_ids: 3 image ids, expected 30 (one per src_text row)"]),
        (lambda: score(w["src_text"], w["tgt_text"], src_img=w["src_img"][:25], tgt_img=w["tgt_img"]),
         ["row counts differ (source texts vs images): src_text has 30, src_img has 25"]),
    ]
    for call, expected in cases:
        with pytest.raises(BackRetrievalError) as err:
            call()
        assert "\n" not in str(err.value) and all(e in str(err.value) for e in expected), (expected, str(err.value))
    with cli_option_names(), pytest.raises(BackRetrievalError, match="give --src-img and --tgt-img, or --image-sim"):
        score(*texts)


def test_compare_detects_a_better_model_and_not_itself():
    rng = np.random.default_rng(12)
    w = _world(rng, n=300, noise=0.05)
    bad = {side: w[f"z_{side[0]}"] @ w["w_t"] + 3.0 * rng.standard_normal((300, 8)) for side in ("src", "tgt")}
    good_vs_bad = compare(w["src_text"], w["tgt_text"], bad["src"], bad["tgt"], **_inputs(w), names=("good", "noisy"),
                          ks=(1, 10), bootstrap=200)
    res = good_vs_bad.comparisons["bkr@10"]
    assert res["verdict"] == "good" and res["p_value"] < 0.01 and res["mcnemar"]["b"] > res["mcnemar"]["c"]
    assert set(good_vs_bad.hubness) == {"a", "b"} and list(good_vs_bad.comparisons) == ["bkr@1", "bkr@10"]
    record = good_vs_bad.to_record()
    assert record["models"] == {"A": "good", "B": "noisy"} and record["tests"] == ["mcnemar", "bootstrap"]
    assert record["comparisons"]["bkr@10"]["verdict"] == "good"
    same = compare(w["src_text"], w["tgt_text"], w["src_text"], w["tgt_text"], **_inputs(w), ks=(10,), bootstrap=50)
    assert same.comparisons["bkr@10"]["verdict"] == "tie" and same.comparisons["bkr@10"]["p_value"] == 1.0
    # the same hits given directly (as 'score --hits-out' writes them) give the same comparison
    hits = [score(s, t, **_inputs(w), ks=(1, 10), bootstrap=0).hits_matrix()
            for s, t in ((w["src_text"], w["tgt_text"]), (bad["src"], bad["tgt"]))]
    from_hits = compare(hits=hits, ks=(1, 10), bootstrap=200)
    assert from_hits.hubness is None and from_hits.comparisons["bkr@10"]["verdict"] == "A"
    assert from_hits.comparisons["bkr@10"]["diff"] == pytest.approx(res["diff"])
    with_xlr = compare(w["src_text"], w["tgt_text"], bad["src"], bad["tgt"], **_inputs(w),
                       a_xlr_tgt_text=w["src_text"], b_xlr_tgt_text=bad["src"], ks=(1,), bootstrap=50)
    assert list(with_xlr.comparisons) == ["bkr@1", "xlr@1"] and with_xlr.comparisons["xlr@1"]["diff"] == 0


def test_compare_ranks_a_picture_once_as_score_does(tmp_path):
    """With source image ids (rows sharing an id are one picture), compare's figures are score's of each model;
    without them they are not (the check can tell)."""
    rng = np.random.default_rng(5)
    w = _world(rng, n=80, noise=0.3)
    ids = [f"img{i // 2}" for i in range(80)]  # two captions of every source picture
    w["src_img"] = w["src_img"][np.arange(80) // 2 * 2]  # ... and its features on both rows
    bad = {side: w[f"z_{side[0]}"] @ w["w_t"] + 2.0 * rng.standard_normal((80, 8)) for side in ("src", "tgt")}
    pairs = ((w["src_text"], w["tgt_text"]), (bad["src"], bad["tgt"]))
    grouped = [score(s, t, **_inputs(w), src_image_ids=ids, ks=(1, 5), bootstrap=0).metrics["bkr@5"] for s, t in pairs]
    plain = [score(s, t, **_inputs(w), ks=(1, 5), bootstrap=0).metrics["bkr@5"] for s, t in pairs]
    assert grouped != plain
    id_file = tmp_path / "ids.txt"
    id_file.write_text("\n".join(ids) + "\n", encoding="utf-8")
    res = compare(*pairs[0], *pairs[1], **_inputs(w), src_image_ids=str(id_file), ks=(1, 5), bootstrap=50)
    assert (res.comparisons["bkr@5"]["a"], res.comparisons["bkr@5"]["b"]) == pytest.approx(tuple(grouped))
    with pytest.raises(BackRetrievalError, match="79 image ids, expected 80"):
        compare(*pairs[0], *pairs[1], **_inputs(w), src_image_ids=ids[:-1], ks=(1, 5), bootstrap=50)


def test_compare_errors_are_one_line_and_name_the_inputs(tmp_path):
    w = _world(np.random.default_rng(16), n=30)
    p = _files(tmp_path, {"a": np.ones((30, 2)), "b": np.ones((30, 2))})
    cases = [
        (dict(hits=(p["a"], p["b"]), alpha=2.0), "alpha must be in (0, 1), got 2.0"),
        (dict(hits=(p["a"], p["b"]), bootstrap=0), "bootstrap must be >= 1 for the paired bootstrap test"),
        (dict(hits=(p["a"], p["b"]), ks=(10,)), "a.npy, " + p["b"] + ": 2 and 2 hit columns, expected one per ks"),
        (dict(a_src_text=w["src_text"], **_inputs(w)), "compare needs a_tgt_text, b_src_text, b_tgt_text (or hits)"),
        (dict(a_src_text=w["src_text"], a_tgt_text=w["tgt_text"], b_src_text=w["src_text"][:25],
              b_tgt_text=w["tgt_text"], **_inputs(w)), "row counts differ (source texts): a_src_text has 30, "
                                                        "b_src_text has 25"),
        (dict(a_src_text=w["src_text"], a_tgt_text=w["tgt_text"], b_src_text=w["src_text"], b_tgt_text=w["tgt_text"],
              a_xlr_tgt_text=w["src_text"], **_inputs(w)), "XLR comparison needs both a_xlr_tgt_text and b_xlr"),
        (dict(a_src_text=w["src_text"], a_tgt_text=w["tgt_text"], b_src_text=w["src_text"], b_tgt_text=w["tgt_text"],
              **_inputs(w), ks=(40,)), "src_img: 30 distinct source images, not more than the largest K (40)"),
    ]
    for kwargs, expected in cases:
        with pytest.raises(BackRetrievalError) as err:
            compare(**kwargs)
        assert expected in str(err.value) and "\n" not in str(err.value), (expected, str(err.value))
    with cli_option_names(), pytest.raises(BackRetrievalError, match=r"\(or --hits A.npy B.npy\)"):
        compare(a_src_text=w["src_text"], **_inputs(w))


def test_pictures_on_both_sides_are_warned_about_as_they_inflate_bkr(tmp_path, capsys):
    """A user scoring captions of the same photos in two languages (parallel data) got BkR@10 0.99 against 0.35 on
    different photos, without a word: the target caption of the query's own picture is found like a translation."""
    from backretrieval import BackRetrievalWarning
    from backretrieval.cli import main

    w = _world(np.random.default_rng(21), n=60)
    same = {"src_img": w["src_img"], "tgt_img": w["src_img"]}  # the same pictures, captioned in both languages
    with pytest.warns(BackRetrievalWarning, match="60 of 60 target rows show a picture of the source side"):
        score(w["src_text"], w["src_text"] + 0.01, **same, ks=(1, 5), bootstrap=0)
    with pytest.warns(BackRetrievalWarning, match="60 of 60 target rows"):
        compare(w["src_text"], w["src_text"], w["tgt_text"], w["tgt_text"], **same, ks=(1, 5), bootstrap=50)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # different pictures: no warning
        score(w["src_text"], w["tgt_text"], **_inputs(w), ks=(1, 5), bootstrap=0)
    p = _files(tmp_path, {"st": w["src_text"], "tt": w["src_text"], "img": w["src_img"]})
    assert main(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["img"], "--tgt-img", p["img"],
                 "--ks", "1,5", "--bootstrap", "0"]) == 0
    err = capsys.readouterr().err
    assert "warning: 60 of 60 target rows show a picture of the source side" in err


# --------------------------------------------------------------------------- mutation audit: gaps closed
def test_score_refuses_fewer_distinct_images_than_the_largest_k():
    """12 source rows of 3 pictures (ids): Recall@5 is 1 for any model, an error (not judged by the 12 rows)."""
    w = _world(np.random.default_rng(11), n=12)
    pictures = w["src_img"][:3]
    src_img = pictures[np.arange(12) % 3]
    with pytest.raises(BackRetrievalError, match="3 distinct source images, not more than the largest K"):
        score(w["src_text"], w["tgt_text"], src_img=src_img, tgt_img=w["tgt_img"],
              src_image_ids=[f"p{i % 3}" for i in range(12)], ks=(5,), bootstrap=0, progress=False)


def test_hits_matrix_columns_follow_the_ks_as_given(tmp_path):
    """``--ks 5,1``: column j of the hits (and of the file) is the j-th K given, as the K written beside it say."""
    w = _world(np.random.default_rng(12))
    res = score(w["src_text"], w["tgt_text"], **_inputs(w), ks=(5, 1), bootstrap=0, progress=False)
    assert res.hits[5].mean() > res.hits[1].mean()  # the two columns differ
    np.testing.assert_array_equal(res.hits_matrix(), np.stack([res.hits[5], res.hits[1]], axis=1))
    path = res.save_hits(tmp_path / "hits")
    np.testing.assert_array_equal(np.load(path)[:, 0], res.hits[5])
    assert json.loads(path.with_name(path.name + ".ks.json").read_text()) == [5, 1]


def test_every_interval_is_the_bootstrap_of_its_hits_with_the_seed_given():
    """``seed`` fixes the bootstrap: each Recall@K interval is recall_interval of that metric's hits with it."""
    from backretrieval import recall_interval

    rng = np.random.default_rng(13)
    w = _world(rng)
    translations = w["src_text"] + 1.5 * rng.standard_normal(w["src_text"].shape)  # XLR between 0 and 1
    res = score(w["src_text"], w["tgt_text"], **_inputs(w), xlr_tgt_text=translations, ks=(1, 5), bootstrap=50,
                seed=3, progress=False)
    xlr = xlr_recall(w["src_text"], translations, (1, 5))
    assert 0 < xlr["xlr@1"] < 1
    for k in (1, 5):
        assert res.intervals[f"bkr@{k}"] == recall_interval(res.hits[k], 50, 0.95, seed=3)
        assert res.intervals[f"xlr@{k}"] == recall_interval(xlr["hits"][k], 50, 0.95, seed=3)


def test_a_similarity_file_of_the_wrong_shape_is_refused_naming_file_and_shape(tmp_path):
    """image_sim is (targets, sources): a file of the transposed or another shape names itself and the shape
    expected from the text rows, before any figure."""
    w = _world(np.random.default_rng(17), n=30)
    p = _files(tmp_path, {"sim": np.ones((30, 20)), "src_text": w["src_text"], "tgt_text": w["tgt_text"]})
    with pytest.raises(BackRetrievalError, match=r"sim.npy: image_sim has shape \(30, 20\), expected \(30, 30\) = "
                                                 r"\(.*tgt_text.npy rows, .*src_text.npy rows\)$"):
        score(p["src_text"], p["tgt_text"], image_sim=p["sim"], bootstrap=0, progress=False)


def test_hits_with_nan_are_refused_naming_the_side(tmp_path):
    """A file's NaN rows are named when it is read; hits given as arrays are checked as the files are."""
    good = np.ones((30, 2))
    bad = good.copy()
    bad[3, 1] = np.nan
    p = _files(tmp_path, {"a": good, "b": bad})
    with pytest.raises(BackRetrievalError, match=r"b.npy: hits of B has 1 of 30 rows with NaN or inf \(first: row 3\)"):
        compare(hits=(p["a"], p["b"]))
    with pytest.raises(BackRetrievalError, match=r"^hits of B has 1 of 30 rows with NaN or inf \(first: row 3\)$"):
        compare(hits=(good, bad), ks=(1, 5))  # the side named once (it said "hits of B: hits of B ...") and the row
    from backretrieval.files import load_matrix
    with pytest.raises(BackRetrievalError, match=r"^image_sim must be a 2-D array \(rows x dim\), got shape \(3,\)$"):
        load_matrix(np.ones(3), "image_sim")  # an array is named by what it is, once; a file by its path


def test_unreadable_empty_or_mismatched_inputs_are_refused_naming_the_file(tmp_path):
    """A .npy file cut short (a copy interrupted), one of 0 rows, a target of another width, a ground truth of the
    wrong length, an ids file that is not there: one line naming the file (or option) and what was expected."""
    w = _world(np.random.default_rng(18), n=30)
    p = _files(tmp_path, {"cut": w["src_text"], "empty": np.zeros((0, 8)), "wide": np.ones((30, 9))})
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:len(data) - 100])
    images = {"src_img": w["src_img"], "tgt_img": w["tgt_img"], "progress": False}
    cases = [
        (lambda: score(p["cut"], w["tgt_text"], **images), r"cut.npy: src_text is not a readable .npy file \(.+\)$"),
        (lambda: score(p["empty"], w["tgt_text"], **images), r"empty.npy: src_text is empty \(0 rows\)$"),
        (lambda: score(w["src_text"], p["wide"], **images),
         r"^dimensions differ \(source vs target text embeddings\): src_text has 8, .*wide.npy has 9$"),
        (lambda: score(w["src_text"], w["tgt_text"], xlr_tgt_text=w["tgt_text"], xlr_gt=np.arange(29), **images),
         r"^xlr_gt: expected 30 target indices \(one per source row\), got shape \(29,\)$"),
        (lambda: score(w["src_text"], w["tgt_text"], src_image_ids=str(tmp_path / "ids.txt"), **images),
         r"ids.txt: src_image_ids file not found$"),
    ]
    for call, message in cases:
        with pytest.raises(BackRetrievalError, match=message):
            call()


def test_a_hits_file_whose_recorded_ks_are_not_json_is_refused_naming_the_record(tmp_path):
    from backretrieval.outputs import save_hits

    for name in ("a", "b"):
        save_hits(tmp_path / f"{name}.npy", np.ones((30, 2)), (1, 5), "hits")
    (tmp_path / "b.npy.ks.json").write_text("[1, 5", encoding="utf-8")  # cut short
    with pytest.raises(BackRetrievalError, match=r"b.npy.ks.json: not a readable JSON list of K \(.+\)$"):
        compare(hits=(str(tmp_path / "a.npy"), str(tmp_path / "b.npy")))
