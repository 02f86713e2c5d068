"""The bench scripts' bad arguments: one-line errors with exit 2, checked before any timing (in-process, no data)."""
from __future__ import annotations

import argparse
import re
import sys

import pytest
from conftest import REPO, load_bench
from test_docs_commands import scripts

from globetrotter.errors import run_cli


def exit_code(module, argv: list[str], monkeypatch) -> int:
    """``module.main()`` as its ``__main__`` runs it: run_cli's code, or argparse's exit code."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    try:
        return run_cli(lambda _argv: module.main())
    except SystemExit as stop:
        return stop.code


CASES = [
    ("bench_eval", ["--skip", "sentence,index,late,translate", "--vocab", "100"], "--pairs 5000"),
    ("bench_eval", ["--skip", "sentence,word,late,translate", "--index-n", "50", "--distinct", "10"],
     "--queries 1000"),
    ("bench_neighbours", ["--sizes", "500,500", "--dim", "4"], "500 given twice"),
    ("bench_neighbours", ["--sizes", "3", "--dim", "4"], "--k 10"),
    ("bench_zeroshot", ["--skip", "features,training", "--gallery", "5"], "--gallery"),
    ("bench_zeroshot", ["--skip", "features,training", "--gallery", "0"], "--gallery"),
    ("bench_zeroshot", ["--skip", "features,training", "--gallery", "abc"], "--gallery"),
    ("bench_convert", ["--workers", "abc", "--max-images", "6", "--synthetic"], "--workers"),
    ("bench_convert", ["--workers", "0", "--max-images", "6", "--synthetic", "--repeats", "1"], "--workers"),
    ("bench_convert", ["--max-images", "5", "--synthetic", "--repeats", "1", "--workers", "1"], "--max-images"),
    ("bench_feature_cache", ["--config", "configs/quickstart.yaml"], "data.features"),
]


@pytest.mark.parametrize("script, argv, named", CASES, ids=[f"{c[0]}-{'-'.join(c[1][-2:])}" for c in CASES])
def test_bad_arguments_are_one_line_before_any_timing(script, argv, named, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert exit_code(load_bench(script), argv, monkeypatch) == 2
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert "error:" in last and named in last and "Traceback" not in err
    assert "np.str_" not in err and "test-fraction" not in err  # the benchmark's own words, not a library's
    assert "1.00x" not in out  # no baseline row measured


def test_convert_names_what_an_incomplete_flickr8k_folder_lacks_before_any_timing(tmp_path, monkeypatch, capsys):
    """The benchmark's default source, $GLOBETROTTER_SHARED/data/flickr8k, was checked only as a folder: without its
    Flickr8k-CN file the conversion stopped on "--languages en,de,fr,cs,zh: no usable caption in zh" (a flag nobody
    typed), with an empty image folder after reading every caption. Each missing part is named now, up front."""
    module = load_bench("bench_convert")
    shared = tmp_path / "data" / "flickr8k"
    (shared / "images").mkdir(parents=True)
    (shared / "multi30k").mkdir()
    monkeypatch.setattr(module, "SHARED", shared)
    assert exit_code(module, ["--max-images", "6", "--repeats", "1", "--workers", "1"], monkeypatch) == 2
    out, err = capsys.readouterr()
    assert err.strip() == (f"error: {shared}: the Flickr8k folder lacks images/, flickr8kcn/flickr8kzhc.caption.txt "
                           "(it needs images/ with the photos, multi30k/ and flickr8kcn/flickr8kzhc.caption.txt); set "
                           "GLOBETROTTER_SHARED to the folder that holds a complete data/flickr8k/, or pass --synthetic")
    assert out == ""  # nothing measured, not even the data line


def test_ridge_cv_refuses_to_compare_one_thread_with_itself(monkeypatch, capsys):
    module = load_bench("bench_ridge_cv")
    calls = []
    monkeypatch.setattr(module, "start", lambda cfg, threads: calls.append(threads))
    monkeypatch.chdir(REPO)
    assert exit_code(module, ["--threads", "1"], monkeypatch) == 2
    assert "--threads" in capsys.readouterr().err and calls == []


def test_scale_projection_refuses_a_model_without_images_before_any_count(tmp_path, monkeypatch, capsys):
    """A text-only config printed its pixel row, then ended in AttributeError ('NoneType' has no attribute
    'num_features') counting the features path of a model with no image backbone."""
    module = load_bench("scale_projection")
    config = tmp_path / "text-only.yaml"
    config.write_text(f"_base_: {REPO / 'configs' / 'globetrotter-paper.yaml'}\n"
                      "loss: {text: 0.0, image: 0.0, cross: 0.0, cloze: 1.0}\n", encoding="utf-8")
    counted = []
    monkeypatch.setattr(module, "step_flops", lambda *a: counted.append(a[-1]) or 1e9)
    assert exit_code(module, ["--config", str(config)], monkeypatch) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"error: --config {config}: its model reads no images (loss.image and "
                                        "loss.cross are 0, no transitive loss.text); this projection counts the two "
                                        "image paths of a model that does"]
    assert counted == [] and "pixels" not in out


def test_scale_projection_counts_a_model_with_token_ngrams_without_its_tokenizer(monkeypatch, capsys):
    """configs/quickstart.yaml (model.token_ngrams, as every recipe but the paper's) ended in ValueError ('pass
    tokenizer='): the model was built without the tokenizer its n-gram rows read. It is counted without those rows
    (lookups and sums, which the FLOP counter does not count anyway), and says so."""
    module = load_bench("scale_projection")
    assert exit_code(module, ["--config", str(REPO / "configs" / "quickstart.yaml"), "--batch", "2", "--tokens", "8"],
                     monkeypatch) == 0
    out = capsys.readouterr().out
    assert "model.token_ngrams: counted without the n-gram rows" in out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line.startswith(("pixels", "cached"))}
    pixels, features = (float(rows[k][-3]) for k in ("pixels, trainable backbone", "cached / imported features"))
    assert pixels > features > 0  # the backbone's FLOPs are in the pixel path only


def test_neighbours_nprobe_reaches_the_search(monkeypatch, capsys):
    module = load_bench("bench_neighbours")
    seen = []
    real = module.other_language_neighbours
    monkeypatch.setattr(module, "other_language_neighbours",
                        lambda *a, **k: seen.append(k["nprobe"]) or real(*a, **k))
    assert exit_code(module, ["--sizes", "300,600", "--dim", "4", "--sample", "20", "--nprobe", "32"],
                     monkeypatch) == 0
    assert seen == [32, 32] and "nprobe 32" in capsys.readouterr().out


BENCH_SCRIPTS = [path.removeprefix("bench/") for path in scripts("bench")]


@pytest.mark.parametrize("script", BENCH_SCRIPTS)
def test_help_names_every_option_and_keeps_the_examples(script):
    from test_docs_commands import parser_for

    parser = parser_for(f"bench/{script}")
    bare = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
            if not a.help and not isinstance(a, argparse._HelpAction)]
    assert bare == [], f"{script}: options without help text"
    text = parser.format_help()
    assert not re.search(r"\S {4,}--\w", text), f"{script}: a \\ continuation joined into a run of spaces"
    last = " ".join(load_bench(script[:-3]).__doc__.strip().split("\n\n")[-1].split())
    assert last in " ".join(text.split()), f"{script}: --help cuts the description short"
