"""experiments/sentence_protocol.py: choices on val, test once, a table of rows and seeds that resumes from records."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_experiment

ROOT = Path(__file__).resolve().parents[1]


def test_the_protocol_table_chooses_on_val_scores_test_once_and_reuses_records(tiny_world, tiny_run, tmp_path):
    out = tmp_path / "table"
    argv = [sys.executable, str(ROOT / "experiments" / "sentence_protocol.py"), "--test", str(tiny_world / "test"),
            "--val", str(tiny_world / "val"), "--languages", "en,ru", "--n-groups", "12", "--row", "TF-IDF=tfidf",
            "--row", f"full={tiny_run}", "--ratio", "full/TF-IDF", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    table = (out / "table.md").read_text(encoding="utf-8")
    (record_path,) = out.glob("sentence-full-*-en-ru-val-chosen.json")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    choice = json.loads((out / record_path.name.replace("sentence-", "select-")).read_text(encoding="utf-8"))
    assert record["config"]["ranking"] == choice["details"]["chosen"] and record["dataset"]["split"] == "test"
    assert f"{100 * record['metrics']['sentence_translation']:.2f}" in table.splitlines()[3]
    assert table.splitlines()[4].startswith("| full ÷ TF-IDF |")
    assert (out / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    command = json.loads((out / "command.json").read_text(encoding="utf-8"))  # what traces the table to its inputs
    assert command["argv"] == argv[2:] and command["inputs"]["n_groups"] == 12
    assert command["inputs"]["reference"] == str(tiny_world / "train")
    (full,) = next(row["models"] for row in command["rows"] if row["label"] == "full")
    assert full["checkpoint"] == record["model"]["checkpoint"] and full["training_seed"] == 0
    assert command["ratio_intervals"]["seed"] == 0 and command["ratio_intervals"]["n_boot"] == 1000
    assert table.splitlines()[-1].startswith("Command (command.json") and "--row full=" in table.splitlines()[-1]
    tfidf = json.loads((out / "sentence-tf-idf-tfidf-en-ru-val-chosen.json").read_text(encoding="utf-8"))
    mine, theirs = record["details"]["per_group"], tfidf["details"]["per_group"]
    assert mine["ids"] == theirs["ids"] and len(mine["ids"]) == 12
    assert sum(mine["hits"]) / sum(mine["positives"]) == pytest.approx(record["metrics"]["sentence_translation"])
    ratio = sum(mine["hits"]) / max(sum(theirs["hits"]), 1)  # same positives: the same groups and languages
    line = next(x for x in table.splitlines() if x.startswith("- full ÷ TF-IDF, en,ru val-chosen: "))
    value, lo, hi = (float(v) for v in re.findall(r"inf|[\d.]+", line.split(": ", 1)[1]))
    assert value == pytest.approx(ratio, abs=0.005) and lo <= value <= hi
    before = {p: p.stat().st_mtime_ns for p in out.glob("*.json")}
    again = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0 and {p: p.stat().st_mtime_ns for p in out.glob("*.json")} == before
    bad = subprocess.run(argv[:-4] + ["--ratio", "full/nope", "--out", str(out)], capture_output=True, text=True)
    assert bad.returncode != 0 and "two labels of --row" in bad.stderr


def test_a_record_written_for_another_model_is_refused_not_put_in_the_table(tiny_world, tiny_run, tmp_path):
    out = tmp_path / "table"
    argv = [sys.executable, str(ROOT / "experiments" / "sentence_protocol.py"), "--test", str(tiny_world / "test"),
            "--val", str(tiny_world / "val"), "--languages", "en,ru", "--n-groups", "12", "--out", str(out)]
    assert subprocess.run(argv + ["--row", f"full={tiny_run}"], capture_output=True, cwd=ROOT).returncode == 0
    twin = tmp_path / "elsewhere" / Path(tiny_run).parent.name / Path(tiny_run).name  # the same record names
    shutil.copytree(tiny_run, twin)
    refused = subprocess.run(argv + ["--row", f"full={twin}"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and str(twin.resolve()) in refused.stderr and "another --out" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    grown = subprocess.run(argv + ["--row", f"full={tiny_run}", "--n-groups", "10"], capture_output=True, text=True,
                           cwd=ROOT)  # the last --n-groups wins: the same names, another setting
    assert grown.returncode == 2 and "n_groups 12, not 10" in grown.stderr


def _copied_run_and_its_table(tiny_world, tiny_run, tmp_path) -> tuple[Path, list[str]]:
    """A copy of the tiny run (under ``tmp_path/runs``) and the protocol command that tables it into
    ``tmp_path/table``."""
    run_dir = tmp_path / "runs" / Path(tiny_run).name
    shutil.copytree(tiny_run, run_dir)
    argv = [sys.executable, str(ROOT / "experiments" / "sentence_protocol.py"), "--test", str(tiny_world / "test"),
            "--val", str(tiny_world / "val"), "--languages", "en,ru", "--n-groups", "12", "--row", f"full={run_dir}",
            "--out", str(tmp_path / "table")]
    return run_dir, argv


def test_records_of_weights_the_run_no_longer_loads_are_refused(tiny_world, tiny_run, tmp_path):
    """A run that saved another checkpoint since (trained on, resumed) loads other weights: its records are not
    reused for the table."""
    from globetrotter.training.checkpoint import LATEST, resolve

    run_dir, argv = _copied_run_and_its_table(tiny_world, tiny_run, tmp_path)
    assert subprocess.run(argv, capture_output=True, cwd=ROOT).returncode == 0
    shutil.copytree(resolve(run_dir), run_dir / "checkpoints" / "step-00000009")
    (run_dir / "checkpoints" / LATEST).write_text("step-00000009")
    refused = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "step-00000009" in refused.stderr and "another --out" in refused.stderr


def test_records_of_a_checkpoint_rewritten_in_place_are_refused(tiny_world, tiny_run, tmp_path):
    """A run that saved another best/ keeps the checkpoint's path: its records were reused for the table, scores of
    weights the run no longer holds. The weights' sha256 is compared too."""
    from safetensors.torch import load_file, save_file

    from globetrotter.training.checkpoint import resolve

    run_dir, argv = _copied_run_and_its_table(tiny_world, tiny_run, tmp_path)
    assert subprocess.run(argv, capture_output=True, cwd=ROOT).returncode == 0
    weights = resolve(run_dir) / "model.safetensors"
    state = load_file(weights)
    name = next(iter(state))
    state[name] = state[name] + 0.5  # the same folder, other weights
    save_file(state, weights)
    refused = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2, refused.stderr
    assert "weights_sha256" in refused.stderr and "another --out" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_ratio_over_a_model_that_finds_nothing_reads_inf_not_a_huge_number():
    table = load_experiment("sentence_protocol").table
    figures = {"a": {"cosine": (5.0, "cosine", None), "val-chosen": (0.0, "cosine", None)},
               "b": {"cosine": (0.0, "cosine", None), "val-chosen": (0.0, "cosine", None)}}
    lines = table([("a", ["m"]), ("b", ["n"])], {k: [{"en,zh": v}] for k, v in figures.items()}, ["en,zh"], ["a/b"])
    assert lines.splitlines()[4] == "| a ÷ b | inf | n/a | |"


def test_each_language_set_shows_its_own_chosen_ranking():
    """With two --languages sets, the second set's choices were shown as the first set's."""
    table = load_experiment("sentence_protocol").table
    results = {"a": [{"en,de": {"cosine": (5.0, "cosine", None), "val-chosen": (6.0, "csls", None)},
                      "en,zh": {"cosine": (4.0, "cosine", None), "val-chosen": (7.0, "maxsim 2", None)}},
                     {"en,de": {"cosine": (5.5, "cosine", None), "val-chosen": (6.5, "maxsim 1", None)},
                      "en,zh": {"cosine": (4.5, "cosine", None), "val-chosen": (7.5, "cosine (cross head)", None)}}],
               "b": [{"en,de": {"cosine": (2.0, "cosine", None), "val-chosen": (3.0, "cosine", None)},
                      "en,zh": {"cosine": (1.0, "cosine", None), "val-chosen": (2.0, "csls", None)}}]}
    lines = table([("a", ["m0", "m1"]), ("b", ["n"])], results, ["en,de", "en,zh"], ["a/b"]).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[-2:] == ["en,de chosen ranking", "en,zh chosen ranking"]
    row_a = [c.strip() for c in lines[2].strip("|").split("|")]
    row_b = [c.strip() for c in lines[3].strip("|").split("|")]
    assert row_a[-2:] == ["csls / maxsim 1", "maxsim 2 / cosine (cross head)"]
    assert row_b[-2:] == ["cosine", "csls"]
    assert all(line.count("|") == lines[0].count("|") for line in lines[:5])


def test_the_oracle_column_chooses_by_translation_on_a_parallel_val_split_and_refuses_test(tiny_world, tiny_run,
                                                                                            tmp_path):
    from data_prep.shards import ShardWriter, iter_raw

    parallel_val = tmp_path / "val-parallel"  # a parallel split of other images: the grid's yardstick
    with ShardWriter(parallel_val, split="val", source="tiny", image_format="png") as writer:
        for key, _ext, data, meta in iter_raw(tiny_world / "test"):
            writer.write(f"v{key}", data, meta["caption"], meta["lang"], f"v{meta['image_id']}", f"v{meta['group']}")
    out = tmp_path / "table"
    argv = [sys.executable, str(ROOT / "experiments" / "sentence_protocol.py"), "--test", str(tiny_world / "test"),
            "--val", str(tiny_world / "val"), "--languages", "en,ru", "--n-groups", "12", "--row", "TF-IDF=tfidf",
            "--row", f"full={tiny_run}", "--ratio", "full/TF-IDF", "--oracle-val", str(parallel_val), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    (choice_path,) = out.glob("select-full-*-en-ru-oracle.json")
    choice = json.loads(choice_path.read_text(encoding="utf-8"))
    scores = [c["val_translation"] for c in choice["details"]["candidates"]]
    assert len(scores) == 20 and choice["config"]["oracle"] is True
    assert choice["details"]["chosen"] == choice["details"]["candidates"][scores.index(max(scores))]["ranking"]
    record = json.loads((out / choice_path.name.replace("select-", "sentence-")).read_text(encoding="utf-8"))
    assert record["config"]["ranking"] == choice["details"]["chosen"] and record["dataset"]["split"] == "test"
    table = (out / "table.md").read_text(encoding="utf-8").splitlines()
    assert table[0].endswith("en,ru oracle | chosen ranking | oracle's ranking |")
    assert f"{100 * record['metrics']['sentence_translation']:.2f}" in table[3].split(" | ")[3]
    assert all(line.count("|") == table[0].count("|") for line in table[:5])
    assert any(line.startswith("- full ÷ TF-IDF, en,ru oracle: ") for line in table)
    # one reference pool for every row and column: each choice is made with it and test scored with the choice's
    for path in out.glob("select-*.json"):
        chosen_with = json.loads(path.read_text(encoding="utf-8"))["config"]["reference"]
        scored = json.loads((out / path.name.replace("select-", "sentence-")).read_text(encoding="utf-8"))
        assert chosen_with == str(tiny_world / "train") and scored["config"]["reference"] in (None, chosen_with), path
    refused = subprocess.run([sys.executable, str(ROOT / "experiments" / "oracle_ranking.py"), "--model", str(tiny_run),
                              "--val", str(tiny_world / "test"), "--reference", str(tiny_world / "train"),
                              "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "a test split" in refused.stderr
    copy = tmp_path / "val-copy"
    shutil.copytree(tiny_world / "test", copy)  # test under a val name, its manifest too: its images give it away
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    (copy / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    for extra in (["--oracle-val", str(copy)], ["--val", str(copy)]):
        refused = subprocess.run(argv[:-4] + extra + ["--out", str(tmp_path / "y")], capture_output=True, text=True,
                                 cwd=ROOT)
        assert refused.returncode == 2 and "images of the test split" in refused.stderr, refused.stderr
    one_language = subprocess.run([sys.executable, str(ROOT / "experiments" / "oracle_ranking.py"), "--model", "tfidf",
                                   "--val", str(tiny_world / "val"), "--reference", str(tiny_world / "train"),
                                   "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=ROOT)
    assert one_language.returncode == 2 and "needs a parallel val split" in one_language.stderr
    assert len(one_language.stderr.strip().splitlines()) == 1
    on_test = subprocess.run(argv[:-4] + ["--oracle-val", str(tiny_world / "test"), "--out", str(out)],
                             capture_output=True, text=True, cwd=ROOT)
    assert on_test.returncode != 0 and "not the test split" in on_test.stderr


@pytest.fixture(scope="module")
def protocol():
    return load_experiment("sentence_protocol")


def protocol_argv(world: Path, out: Path, *extra: str) -> list[str]:
    return ["--test", str(world / "test"), "--val", str(world / "val"), "--languages", "en,ru", "--n-groups", "12",
            *extra, "--out", str(out)]


@pytest.mark.parametrize("extra, expected", [
    (["--row", "full"], "--row 'full': expected LABEL=MODEL"),
    (["--row", "full=,"], "--row 'full=,': expected LABEL=MODEL[,MODEL...] with at least one model"),
    (["--row", "a=tfidf", "--row", "a=tfidf"], "the label 'a' names another --row"),
    (["--row", "a=RUN,RUN"], "is listed twice"),
    (["--row", "a=tfidf", "--ratio", "a/nope"], "two labels of --row"),
    (["--row", "a=RUN", "--row", "b=RUN,tfidf", "--ratio", "a/b"], "expected b to hold one model or as many as a"),
    (["--row", "a=tfidf", "--row", "b=MISSING"], "--row b: "),
    (["--row", "a=tfidf", "--row", "b=WORLD"], "--row b: "),
    (["--row", "a=tfidf", "--languages", "en,xx"], "--languages en,xx: --test "),
    (["--row", "a=tfidf", "--languages", "en"], "--languages 'en': expected two or more"),
    (["--row", "a=tfidf", "--oracle-val", "MISSING"], "--oracle-val: "),
    (["--row", "a=tfidf", "--n-groups", "100000"], "--n-groups 100000: --test "),  # the table said 100000, scored fewer
])
def test_user_mistakes_are_one_line_errors_before_anything_is_written(protocol, tiny_world, tiny_run, tmp_path, capsys,
                                                                      extra, expected):
    swap = {"RUN": str(tiny_run), "MISSING": str(tmp_path / "nothing"), "WORLD": str(tiny_world / "train")}
    for word, path in swap.items():
        extra = [x.replace(word, path) for x in extra]
    out = tmp_path / "table"
    assert protocol.run_cli(protocol.main, protocol_argv(tiny_world, out, *extra)) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("extra, expected", [
    (["--n-groups", "0"], "--n-groups: expected a positive integer, got 0"),
    (["--out", "FILE"], "cannot create the output folder (a file of that name exists)"),
    (["--languages", "en,de,en"], "--languages: en given twice in 'en,de,en'"),
])
def test_bad_counts_and_an_out_that_is_a_file_are_usage_errors(protocol, tiny_world, tmp_path, capsys, extra,
                                                               expected):
    (tmp_path / "file").write_text("x")
    extra = [str(tmp_path / "file") if x == "FILE" else x for x in extra]
    with pytest.raises(SystemExit) as stop:
        protocol.run_cli(protocol.main, protocol_argv(tiny_world, tmp_path / "t", "--row", "a=tfidf") + extra)
    assert stop.value.code == 2 and expected in capsys.readouterr().err


def test_a_stale_record_of_a_later_row_stops_the_table_before_the_first_row_is_scored(protocol, tiny_world, tiny_run,
                                                                                      tmp_path, capsys):
    out = tmp_path / "table"
    out.mkdir()
    name = protocol.slug("full", str(tiny_run), "en,ru")
    stale = {"model": {"path": str(tmp_path / "another-run")}, "languages": ["en", "ru"], "dataset": {"path": "x"},
             "config": {"reference": str(tiny_world / "train")}}
    (out / f"select-{name}-cosine.json").write_text(json.dumps(stale), encoding="utf-8")
    argv = protocol_argv(tiny_world, out, "--row", "TF-IDF=tfidf", "--row", f"full={tiny_run}")
    assert protocol.run_cli(protocol.main, argv) == 2
    err = capsys.readouterr().err
    assert "another-run" in err and "another --out" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == [f"select-{name}-cosine.json"]  # TF-IDF not scored


def test_a_failing_evaluation_is_one_line_that_says_why(protocol, tiny_world, tiny_run, tmp_path, capsys):
    from globetrotter.training.checkpoint import resolve

    run_dir = tmp_path / "runs" / "broken"
    shutil.copytree(tiny_run, run_dir)
    for weights in resolve(run_dir).glob("*.safetensors"):
        weights.unlink()  # a checkpoint folder that resolves, whose weights are gone: only loading it finds out
    out = tmp_path / "table"
    assert protocol.run_cli(protocol.main, protocol_argv(tiny_world, out, "--row", f"full={run_dir}")) == 2
    err = capsys.readouterr().err
    assert "eval.py select --model" in err and "cannot load the weights" in err and ".log" in err
    assert len(err.strip().splitlines()) == 1
