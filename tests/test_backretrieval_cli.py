"""The ``backretrieval`` command: score / eval / correlate on small data made on the fly."""
from __future__ import annotations

import json
import numpy as np
import pytest
from PIL import Image

from backretrieval import bkr_recall, evaluate_pairs, xlr_recall
from backretrieval.cli import main, parse_model_specs
from data_prep.shards import ShardWriter

LANGS = ("de", "en", "fr")


@pytest.fixture(scope="module")
def parallel_split(tmp_path_factory):
    """A test-like split: 80 images captioned in 3 languages (tied by group), npy image features,
    and a 'good' text model stored as npy embeddings looked up by caption text."""
    root = tmp_path_factory.mktemp("br_cli")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((80, 12))
    feats = z @ rng.standard_normal((12, 24)) + 0.5 * rng.standard_normal((80, 24))
    texts, emb = [], []
    with ShardWriter(root / "test", split="test", source="unit", image_format="npy", maxcount=100) as w:
        for i in range(80):
            for lang in LANGS:
                caption = f"{lang} caption of picture {i}"
                w.write(f"s{i}_{lang}", feats[i].astype(np.float32), caption, lang, image_id=f"img{i}", group=f"g{i}")
                texts.append(caption)
                emb.append(z[i] + 0.3 * rng.standard_normal(12))
    np.save(root / "good.npy", np.asarray(emb, np.float32))
    (root / "good.npy.texts.json").write_text(json.dumps(texts))
    return root, feats, texts, np.asarray(emb, np.float32)


def test_help_of_every_command_explains_the_metric(capsys):
    for cmd in ([], ["score"], ["eval"], ["correlate"], ["compare"]):
        with pytest.raises(SystemExit) as exc:
            main(cmd + ["--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "BackRetrieval" in out and "Recall@K" in out and "XLR" in out and "CORR" in out


def test_score_on_embedding_files_matches_the_api(tmp_path, capsys):
    rng = np.random.default_rng(1)
    arrays = {"st": rng.standard_normal((40, 8)), "tt": rng.standard_normal((30, 8)),
              "si": rng.standard_normal((40, 16)), "ti": rng.standard_normal((30, 16)),
              "par": rng.standard_normal((40, 8))}
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr.astype(np.float32))
    code = main(["score", "--src-text", str(tmp_path / "st.npy"), "--tgt-text", str(tmp_path / "tt.npy"),
                 "--src-img", str(tmp_path / "si.npy"), "--tgt-img", str(tmp_path / "ti.npy"),
                 "--xlr-tgt-text", str(tmp_path / "par.npy"), "--ks", "1", "10", "--out", str(tmp_path / "r.json"),
                 "--ranks-out", str(tmp_path / "ranks.npy")])
    assert code == 0
    rec = json.loads((tmp_path / "r.json").read_text())
    ref = bkr_recall(arrays["st"], arrays["si"], arrays["tt"], arrays["ti"], (1, 10))
    assert rec["metrics"]["bkr@10"] == pytest.approx(ref["bkr@10"])
    assert rec["metrics"]["xlr@1"] == pytest.approx(xlr_recall(arrays["st"], arrays["par"], (1,))["xlr@1"])
    assert -1 <= rec["metrics"]["corr"] <= 1
    np.testing.assert_array_equal(np.load(tmp_path / "ranks.npy"), ref["ranks"])


def test_user_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.zeros((3, 4), np.float32))
    code = main(["score", "--src-text", str(tmp_path / "missing.npy"), "--tgt-text", str(tmp_path / "a.npy"),
                 "--image-sim", str(tmp_path / "a.npy")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and "missing.npy" in err and err.count("\n") == 1
    code = main(["score", "--src-text", str(tmp_path / "a.npy"), "--tgt-text", str(tmp_path / "a.npy")])
    assert code == 2 and "image side is missing" in capsys.readouterr().err
    code = main(["eval", "--data", str(tmp_path / "nosplit"), "--model", "random:4", "--out-dir", str(tmp_path / "o")])
    assert code == 2 and "nosplit" in capsys.readouterr().err
    code = main(["correlate", "--data", str(tmp_path), "--models", "random:4", "--out-dir", str(tmp_path / "o")])
    assert code == 2 and "at least 2 model specs" in capsys.readouterr().err


def test_eval_writes_pair_matrices_and_plots(parallel_split, tmp_path, capsys):
    root, feats, texts, emb = parallel_split
    out = tmp_path / "eval"
    code = main(["eval", "--data", str(root / "test"), "--model", f"good=npy:{root / 'good.npy'}",
                 "--model", "random:12",
                 "--ks", "1", "5", "--max-per-lang", "30", "--out-dir", str(out), "--no-progress"])
    assert code == 0
    rec = json.loads((out / "results.json").read_text())
    assert set(rec["models"]) == {"good", "random:12"}
    good = rec["models"]["good"]
    assert good["langs"] == list(LANGS) and good["matrix"]["bkr@5"][0][0] is None  # NaN diagonal -> null
    # same numbers as the API on the same rows (shard order = write order)
    langs = [t.split()[0] for t in texts]
    ids = [f"img{i // 3}" for i in range(len(texts))]
    groups = [f"g{i // 3}" for i in range(len(texts))]
    ref = evaluate_pairs(emb, langs, feats[np.arange(len(texts)) // 3], ids, (1, 5), groups=groups, max_per_lang=30)
    assert good["pairs"]["en->fr"]["bkr@5"] == pytest.approx(ref["pairs"]["en->fr"]["bkr@5"])
    assert good["mean"]["xlr@1"] > 0.9 > rec["models"]["random:12"]["mean"]["xlr@5"]
    pngs = {p.name for p in out.glob("*.png")}
    assert "boxplot_bkr5.png" in pngs and "heatmap_good_bkr5.png" in pngs and "heatmap_random_12_xlr1.png" in pngs


def test_correlate_runs_the_protocol_over_model_specs(parallel_split, tmp_path, capsys):
    root, *_ = parallel_split
    models_file = tmp_path / "models.txt"
    models_file.write_text(f"# graded copies of one model\nnoisy=noisy:2.0:npy:{root / 'good.npy'}\nrandom:12\n")
    out = tmp_path / "corr"
    code = main(["correlate", "--data", str(root / "test"), "--models", f"good=npy:{root / 'good.npy'}",
                 "--models-file", str(models_file), "--pairs", "en-de", "--n", "30", "--seeds", "3",
                 "--ks", "1", "10", "--out-dir", str(out), "--no-progress"])
    assert code == 0
    rec = json.loads((out / "protocol.json").read_text())
    res = rec["pairs"]["en->de"]
    assert list(res["models"]) == ["good", "noisy", "random:12"] and res["n"] == 30 and len(res["seeds"]) == 3
    xlr = [res["models"][m]["mean"]["xlr@10"] for m in res["models"]]
    assert xlr[0] > xlr[1] > xlr[2]
    assert -1 <= res["correlation"]["@10"]["pearson"]["bkr"]["mean"] <= 1
    assert "en->de" in (out / "table.md").read_text() and (out / "scatter_en-de.png").is_file()


def test_eval_extracts_image_features_from_jpeg_shards_with_cache(tmp_path, capsys):
    rng = np.random.default_rng(2)
    split = tmp_path / "val"
    with ShardWriter(split, split="val", source="unit", image_format="jpg") as w:
        for i in range(6):
            pixels = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
            w.write(f"k{i}", Image.fromarray(pixels), f"caption {i}", LANGS[i % 2], image_id=f"img{i}")
    args = ["eval", "--data", str(split), "--model", "random:8", "--image-model", "test_efficientnet",
            "--image-weights", "random", "--cache-dir", str(tmp_path / "cache"), "--ks", "1",
            "--out-dir", str(tmp_path / "out"), "--no-progress"]
    assert main(args) == 0
    assert len(list((tmp_path / "cache").glob("test_efficientnet-*.npy"))) == 1
    first = json.loads((tmp_path / "out" / "results.json").read_text())
    assert main(args) == 0  # second run reads the cache
    assert json.loads((tmp_path / "out" / "results.json").read_text())["models"] == first["models"]


def test_parse_model_specs_labels():
    assert parse_model_specs(["use", "USE-M=use", "npy:/a=b.npy", "# comment", ""]) == {
        "use": "use", "USE-M": "use", "npy:/a=b.npy": "npy:/a=b.npy"}


def test_package_imports_nothing_from_globetrotter_and_data_prep_only_lazily():
    import ast
    from pathlib import Path

    import backretrieval

    for path in Path(backretrieval.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                roots = {n.split(".")[0] for n in names}
                assert "globetrotter" not in roots, f"{path.name}:{node.lineno} imports globetrotter"
                if "data_prep" in roots:
                    assert id(node) not in top_level, f"{path.name}:{node.lineno} imports data_prep at module level"



def test_reading_shards_does_not_load_globetrotter_at_run_time():
    """The static check above cannot see transitive imports: the shard reader it uses must not pull globetrotter."""
    import subprocess
    import sys

    code = ("import sys, backretrieval, backretrieval.cli, backretrieval.data, data_prep.shards; "
            "leaked = sorted(m for m in sys.modules if m.split('.')[0] == 'globetrotter'); "
            "assert not leaked, leaked")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

def test_eval_npy_without_sidecar_takes_rows_in_shard_order(parallel_split, tmp_path, capsys):
    # without PATH.texts.json, row i is the split's caption i; the texts must not be sorted or deduplicated first
    root, _, _, emb = parallel_split
    np.save(tmp_path / "plain.npy", emb)
    out = tmp_path / "eval"
    code = main(["eval", "--data", str(root / "test"), "--model", f"plain=npy:{tmp_path / 'plain.npy'}",
                 "--model", f"good=npy:{root / 'good.npy'}", "--ks", "1", "5", "--max-per-lang", "30",
                 "--out-dir", str(out), "--no-progress"])
    assert code == 0
    rec = json.loads((out / "results.json").read_text())
    assert rec["models"]["plain"]["pairs"] == rec["models"]["good"]["pairs"]
    assert rec["models"]["plain"]["mean"]["xlr@1"] > 0.9


def test_output_paths_are_created_or_reported_in_one_line(tmp_path, capsys):
    rng = np.random.default_rng(3)
    for name in ("st", "tt", "si", "ti"):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((6, 4)).astype(np.float32))
    base = ["score"] + [a for n, flag in (("st", "--src-text"), ("tt", "--tgt-text"), ("si", "--src-img"),
                                         ("ti", "--tgt-img")) for a in (flag, str(tmp_path / f"{n}.npy"))]
    assert main(base + ["--ks", "1", "5", "--ranks-out", str(tmp_path / "new" / "ranks.npy"), "--out", "-"]) == 0
    assert np.load(tmp_path / "new" / "ranks.npy").shape == (6,)
    (tmp_path / "file").write_text("not a folder")
    capsys.readouterr()
    code = main(base + ["--ks", "1", "5", "--out", str(tmp_path / "file" / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and "r.json" in err and err.count("\n") == 1


def test_unknown_language_is_named(parallel_split, tmp_path, capsys):
    root, *_ = parallel_split
    code = main(["eval", "--data", str(root / "test"), "--model", "random:4", "--langs", "en", "xx",
                 "--out-dir", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "['xx']" in err and "'de', 'en', 'fr'" in err


def _score_files(tmp_path, rng, n=60, noise=0.3, prefix=""):
    """A world of n source / n target items; a text model of quality ``noise``; files written to tmp_path."""
    z_s, z_t = rng.standard_normal((n, 6)), rng.standard_normal((n, 6))
    w_t, w_i = rng.standard_normal((6, 8)), rng.standard_normal((6, 12))
    arrays = {"si": z_s @ w_i + 0.2 * rng.standard_normal((n, 12)),
              "ti": z_t @ w_i + 0.2 * rng.standard_normal((n, 12)),
              f"{prefix}st": z_s @ w_t + noise * rng.standard_normal((n, 8)),
              f"{prefix}tt": z_t @ w_t + noise * rng.standard_normal((n, 8))}
    paths = {}
    for name, arr in arrays.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], arr.astype(np.float32))
    return paths, (z_s, z_t, w_t, w_i)


def test_score_reports_intervals_hubness_csls_and_approximate(tmp_path, capsys):
    rng = np.random.default_rng(11)
    p, _ = _score_files(tmp_path, rng)
    base = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
            "--xlr-tgt-text", p["st"], "--ks", "1", "10"]
    assert main(base + ["--out", str(tmp_path / "r.json"), "--hits-out", str(tmp_path / "hits.npy")]) == 0
    rec = json.loads((tmp_path / "r.json").read_text())
    for metric in ("bkr@1", "bkr@10", "xlr@10", "corr"):
        ci = rec["intervals"][metric]
        assert ci["lo"] <= rec["metrics"][metric] <= ci["hi"] and ci["value"] == pytest.approx(rec["metrics"][metric])
    assert rec["intervals"]["level"] == 0.95 and set(rec["hubness"]) >= {"skewness", "hub_share"}
    assert "bkr@10=" in capsys.readouterr().err
    hits = np.load(tmp_path / "hits.npy")
    assert hits.shape == (60, 2) and hits[:, 1].mean() == pytest.approx(rec["metrics"]["bkr@10"])
    code = main(base + ["--retrieval", "csls", "--approximate", "--bootstrap", "0", "--out", str(tmp_path / "c.json")])
    assert code == 0
    rec = json.loads((tmp_path / "c.json").read_text())
    assert rec["retrieval"] == "csls" and rec["approximate"] is True and rec["intervals"] is None


def test_compare_detects_a_better_model_and_not_itself(tmp_path, capsys):
    rng = np.random.default_rng(12)
    p, (z_s, z_t, w_t, _) = _score_files(tmp_path, rng, n=300, noise=0.05)
    bad_s = z_s @ w_t + 3.0 * rng.standard_normal((300, 8))  # a much noisier text model of the same captions
    bad_t = z_t @ w_t + 3.0 * rng.standard_normal((300, 8))
    np.save(tmp_path / "bs.npy", bad_s.astype(np.float32))
    np.save(tmp_path / "bt.npy", bad_t.astype(np.float32))
    imgs = ["--src-img", p["si"], "--tgt-img", p["ti"]]
    code = main(["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", str(tmp_path / "bs.npy"),
                 "--b-tgt-text", str(tmp_path / "bt.npy"), *imgs, "--names", "good", "noisy", "--ks", "10",
                 "--out", str(tmp_path / "cmp.json")])
    assert code == 0
    res = good_vs_noisy = json.loads((tmp_path / "cmp.json").read_text())["comparisons"]["bkr@10"]
    assert res["verdict"] == "good" and res["p_value"] < 0.01 and res["mcnemar"]["b"] > res["mcnemar"]["c"]
    assert "p = " in capsys.readouterr().err
    code = main(["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["st"],
                 "--b-tgt-text", p["tt"], *imgs, "--ks", "10", "--out", str(tmp_path / "same.json")])
    res = json.loads((tmp_path / "same.json").read_text())["comparisons"]["bkr@10"]
    assert code == 0 and res["verdict"] == "tie" and res["p_value"] == 1.0
    # from hit files written by score
    for name, (s, t) in {"a": (p["st"], p["tt"]), "b": (str(tmp_path / "bs.npy"), str(tmp_path / "bt.npy"))}.items():
        assert main(["score", "--src-text", s, "--tgt-text", t, *imgs, "--ks", "1", "10", "--bootstrap", "0",
                     "--hits-out", str(tmp_path / f"h{name}.npy"), "--out", str(tmp_path / f"s{name}.json")]) == 0
    code = main(["compare", "--hits", str(tmp_path / "ha.npy"), str(tmp_path / "hb.npy"), "--ks", "1", "10",
                 "--out", str(tmp_path / "fromhits.json")])
    rec = json.loads((tmp_path / "fromhits.json").read_text())["comparisons"]
    assert code == 0 and rec["bkr@10"]["verdict"] == "A"
    assert rec["bkr@10"]["diff"] == pytest.approx(good_vs_noisy["diff"])  # the same hits as from the embeddings


def test_bad_input_of_score_and_compare_names_files_and_counts(tmp_path, capsys):
    rng = np.random.default_rng(13)
    p, _ = _score_files(tmp_path, rng, n=30)
    short = str(tmp_path / "short.npy")
    np.save(short, rng.standard_normal((25, 12)).astype(np.float32))
    nan = str(tmp_path / "nan.npy")
    arr = rng.standard_normal((30, 8)).astype(np.float32)
    arr[[4, 9]] = np.nan
    np.save(nan, arr)
    cases = [
        (["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", short, "--tgt-img", p["ti"]],
         ["short.npy has 25", "st.npy has 30"]),
        (["score", "--src-text", nan, "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"]],
         ["nan.npy", "2 of 30 rows", "row 4"]),
        (["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
          "--ks", "50"], ["si.npy", "30 distinct source images", "largest K (50)"]),
        (["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", short, "--b-tgt-text", p["tt"],
          "--src-img", p["si"], "--tgt-img", p["ti"]], ["short.npy has 25", "st.npy has 30"]),
        (["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", nan, "--b-tgt-text", p["tt"],
          "--src-img", p["si"], "--tgt-img", p["ti"]], ["nan.npy", "NaN"]),
        (["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["st"], "--b-tgt-text",
          p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "40"], ["30 source images", "(40)"]),
        (["compare", "--a-src-text", p["st"], "--src-img", p["si"], "--tgt-img", p["ti"]], ["--a-tgt-text"]),
    ]
    for argv, expected in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (argv, err)
        assert all(e in err for e in expected), (expected, err)


def test_image_model_takes_thumbnail_and_random_g_and_bad_specs_fail_first(parallel_split, tmp_path, capsys):
    root, *_ = parallel_split
    base = ["correlate", "--models", f"good=npy:{root / 'good.npy'}", "random:12", "--pairs", "en-de", "--n", "30",
            "--seeds", "2", "--ks", "1", "10", "--out-dir", str(tmp_path / "o"), "--no-progress"]
    for spec, match in (("thumbnail:x", "thumbnail:SIZE"), ("random:a", "random:SEED")):
        code = main(base + ["--data", str(tmp_path / "nosplit"), "--image-model", spec])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and match in err and "nosplit" not in err  # before reading data
    code = main(base + ["--data", str(root / "test"), "--image-model", "thumbnail:16"])
    assert code == 2 and "needs pixels" in capsys.readouterr().err  # this split stores features, no pixels
    bkr = {}
    for g in ([], ["--image-model", "random:1"]):  # the stored features, then the null g replacing them
        assert main(base + ["--data", str(root / "test")] + g) == 0
        rec = json.loads((tmp_path / "o" / "protocol.json").read_text())
        bkr[rec["image_model"]] = rec["pairs"]["en->de"]["models"]["good"]["mean"]["bkr@10"]
    assert set(bkr) == {None, "random:1"} and bkr[None] > bkr["random:1"] + 0.3  # chance: 10 / 30


def test_image_index_is_written_once_reused_and_refused_for_other_images(tmp_path, capsys):
    rng = np.random.default_rng(14)
    p, _ = _score_files(tmp_path, rng, n=60)
    lists = str(tmp_path / "lists.npz")
    base = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
            "--ks", "1", "10", "--bootstrap", "0"]
    assert main(base + ["--max-rank", "10", "--out", str(tmp_path / "exact.json")]) == 0
    for side in ("pq", "exact"):  # without lists, --approximate builds them for the retrieved targets (or counts)
        assert main(base + ["--approximate", "--approx-image-side", side, "--out", str(tmp_path / f"{side}.json")]) == 0
    pq, counted = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("pq", "exact"))
    assert pq["metrics"] == counted["metrics"]  # 60 images: the lists hold every better image
    assert main(base + ["--image-index", lists, "--out", str(tmp_path / "built.json")]) == 0
    assert f"wrote {lists} (60 x 32 image neighbours, flat)" in capsys.readouterr().err
    written = (tmp_path / "lists.npz").stat().st_mtime_ns
    assert main(base + ["--image-index", lists, "--approximate", "--out", str(tmp_path / "reused.json")]) == 0
    assert "image neighbours" not in capsys.readouterr().err and (tmp_path / "lists.npz").stat().st_mtime_ns == written
    exact, built, reused = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("exact", "built", "reused"))
    assert built["metrics"] == exact["metrics"] == reused["metrics"] == pq["metrics"]
    assert built["image_neighbours"] == "flat"
    fast = str(tmp_path / "fast.npz")  # with --approximate a new file is built from PQ codes unless told otherwise
    assert main(base + ["--image-index", fast, "--approximate", "--out", str(tmp_path / "fast.json")]) == 0
    assert f"wrote {fast} (60 x 32 image neighbours, pq)" in capsys.readouterr().err
    assert json.loads((tmp_path / "fast.json").read_text())["image_neighbours"] == "pq"
    assert main(base + ["--image-index", fast, "--out", str(tmp_path / "fast_exact.json")]) == 0
    assert "fast.npz holds approximate (pq) image lists" in capsys.readouterr().err
    told = str(tmp_path / "told.npz")
    assert main(base + ["--image-index", told, "--approximate", "--image-index-method", "flat",
                        "--out", str(tmp_path / "told.json")]) == 0
    assert json.loads((tmp_path / "told.json").read_text())["image_neighbours"] == "flat"
    ab = ["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["st"], "--b-tgt-text",
          p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "10", "--bootstrap", "10",
          "--image-index", lists]
    assert main(ab + ["--out", str(tmp_path / "c.json")]) == 0  # both models through the same lists
    assert "no significant difference" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    q, _ = _score_files(tmp_path / "other", np.random.default_rng(15), n=50)  # other images: 50 of them
    wide = str(tmp_path / "wide.npy")
    np.save(wide, rng.standard_normal((60, 20)).astype(np.float32))
    cases = [
        (["score", "--src-text", q["st"], "--tgt-text", q["tt"], "--src-img", q["si"], "--tgt-img", q["ti"],
          "--image-index", lists], ["lists.npz", "60 target and 60 source images of dim 12", "50 target and 50"]),
        (["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", wide, "--tgt-img", wide,
          "--image-index", lists], ["lists.npz", "of dim 12", "of dim 20"]),
        (base + ["--image-index", lists, "--ks", "40"], ["lists.npz", "32 neighbours", "largest K (40)"]),
        (base + ["--image-index", p["st"]], ["st.npy", "not an image neighbour file"]),
    ]
    for argv, expected in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (argv, err)
        assert all(e in err for e in expected), (expected, err)
