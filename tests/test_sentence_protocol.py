"""experiments/sentence_protocol.py: choices on val, test once, a table of rows and seeds that resumes from records."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_experiment, write_repetitive_reference, write_thin_reference

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
    for path in out.glob("select-*-cosine.json"):  # the cosine column: the head only was chosen, no CSLS nor MaxSim
        config = json.loads(path.read_text(encoding="utf-8"))["config"]
        assert config["csls"] == [False] and config["maxsim"] == [0], (path.name, config)
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


def _seed(figures: dict) -> dict:
    """One model's figures in one language set: {column: (figure, ranking, per_group, chance)} from
    {column: (figure, per_group)}."""
    return {column: (figure, "cosine", per_group, None) for column, (figure, per_group) in figures.items()}


def test_each_figure_sits_under_its_own_language_set_and_column():
    """The cells follow the header: language set by language set, each set's columns in order."""
    table = load_experiment("sentence_protocol").table
    values = {("en,de", "cosine"): 1.0, ("en,de", "val-chosen"): 2.0, ("en,zh", "cosine"): 3.0,
              ("en,zh", "val-chosen"): 4.0}
    results = {"a": [{ls: _seed({c: (values[ls, c], None) for c in ("cosine", "val-chosen")})
                      for ls in ("en,de", "en,zh")}]}
    lines = table([("a", ["m"])], results, ["en,de", "en,zh"], []).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")][1:5]
    cells = [float(c) for c in lines[2].strip("|").split("|")[1:5]]
    assert cells == [values[tuple(h.split(" "))] for h in head]


def test_a_ratio_row_divides_each_seed_by_its_own_seed_or_by_the_one_model_below():
    """``--ratio top/bottom``: top's seed i over bottom's seed i, or over bottom's one model (a baseline), as
    check_ratios accepts them; with the paired intervals of the same pairs, each over the same groups only."""
    protocol = load_experiment("sentence_protocol")
    protocol.check_ratios(["full/base", "full/sup"], [("full", ["s0", "s1"]), ("base", ["t"]), ("sup", ["u0", "u1"])])
    groups = {"ids": ["g0", "g1", "g2", "g3"], "positives": [2, 2, 2, 2]}
    hits = {"s0": [2, 1, 1, 0], "s1": [2, 2, 1, 1], "t": [1, 1, 1, 0], "u0": [2, 0, 0, 0], "u1": [0, 1, 1, 1]}

    def model(name: str, ids: list[str] = groups["ids"]) -> dict:
        per_group = {**groups, "ids": ids, "hits": hits[name]}
        figure = 100 * sum(hits[name]) / sum(groups["positives"])
        return {"en,de": _seed({"cosine": (figure, per_group), "val-chosen": (figure, per_group)})}

    results = {"full": [model("s0"), model("s1")], "base": [model("t")], "sup": [model("u0"), model("u1")]}
    rows = [("full", ["s0", "s1"]), ("base", ["t"]), ("sup", ["u0", "u1"])]
    lines = protocol.table(rows, results, ["en,de"], ["full/base", "full/sup"]).splitlines()
    ratio = {line.split(" | ")[0]: line.split(" | ")[1] for line in lines if " ÷ " in line and line.startswith("|")}
    by_hand = {pair: sum(hits[pair[0]]) / sum(hits[pair[1]]) for pair in (("s0", "t"), ("s1", "t"), ("s0", "u0"),
                                                                          ("s1", "u1"))}
    assert ratio["| full ÷ base"] == f"{by_hand['s0', 't']:.2f} / {by_hand['s1', 't']:.2f}"
    assert ratio["| full ÷ sup"] == f"{by_hand['s0', 'u0']:.2f} / {by_hand['s1', 'u1']:.2f}"
    intervals = {line.split(": ")[0]: line.split(": ")[1] for line in lines if line.startswith("- ")}
    for name, pairs in (("base", (("s0", "t"), ("s1", "t"))), ("sup", (("s0", "u0"), ("s1", "u1")))):
        cells = intervals[f"- full ÷ {name}, en,de cosine"].split(" / ")
        assert [float(c.split(" [")[0]) for c in cells] == [round(by_hand[p], 2) for p in pairs]
    results["base"] = [model("t", ids=["g0", "g1", "g2", "g9"])]  # another group: no paired interval
    lines = protocol.table(rows, results, ["en,de"], ["full/base"]).splitlines()
    assert next(x for x in lines if x.startswith("- full ÷ base, en,de cosine: ")).endswith(
        "n/a (not the same groups) / n/a (not the same groups)")


def test_records_in_out_are_reused_only_for_their_split_and_reference(tmp_path):
    """A record is the table's figure only when it was written for this model, split and reference: each choice on
    the split it is made on (the oracle's on --oracle-val), each test record on --test with its choice's reference."""
    import argparse

    protocol = load_experiment("sentence_protocol")
    splits = {name: tmp_path / name for name in ("test", "val", "val-parallel", "train", "other")}
    args = argparse.Namespace(out=str(tmp_path / "out"), test=str(splits["test"]), val=str(splits["val"]),
                              oracle_val=str(splits["val-parallel"]), reference=str(splits["train"]), n_groups=12)
    out, ranking = tmp_path / "out", {"head": "cosine", "maxsim": 0.0, "csls": False, "csls_k": 10}
    out.mkdir()

    def record(kind: str, column: str, split: Path, **config) -> None:
        model = {"path": "tfidf", "checkpoint": None, "weights_sha256": None}
        body = {"model": model, "languages": ["en", "ru"], "dataset": {"path": str(split.resolve())},
                "config": {"reference": str(splits["train"]), **config}, "details": {"chosen": ranking}}
        (out / f"{kind}-t-{column}.json").write_text(json.dumps(body), encoding="utf-8")

    def test_records(split: Path = splits["test"], reference: Path = splits["train"]) -> None:
        for column in ("cosine", "val-chosen", "oracle"):
            record("sentence", column, split, n_groups=12, ranking=ranking,
                   ranking_record=str(out / f"select-t-{column}.json"), reference=str(reference))

    for column in ("cosine", "val-chosen"):
        record("select", column, splits["val"])
    record("select", "oracle", splits["val-parallel"])
    test_records()
    assert protocol.measure("tfidf", "t", "en,ru", args, score=False) == {}  # every record fits: nothing refused
    test_records(split=splits["other"])
    with pytest.raises(protocol.UserError, match="split .*other.*, not .*test"):
        protocol.measure("tfidf", "t", "en,ru", args, score=False)
    test_records(reference=splits["other"])
    with pytest.raises(protocol.UserError, match="scored with statistics from .*other"):
        protocol.measure("tfidf", "t", "en,ru", args, score=False)


def test_a_language_any_split_lacks_is_refused_naming_that_split(tiny_world, tmp_path):
    """Not only --test: a --val (or reference) split without captions in a code of a set is refused up front, named."""
    import numpy as np

    from data_prep.shard_writer import ShardWriter

    protocol = load_experiment("sentence_protocol")
    english = tmp_path / "val-en"
    with ShardWriter(english, split="val", source="unit", image_format="npy") as writer:
        for i in range(3):
            writer.write(f"k{i}", np.zeros(4, np.float32), f"caption {i}", "en", image_id=f"i{i}")
    splits = {"--test": str(tiny_world / "test"), "--val": str(english)}
    protocol.check_languages(["en,ru"], {"--test": splits["--test"]})
    with pytest.raises(protocol.UserError, match=f"--languages en,ru: --val {english} has no caption in ru"):
        protocol.check_languages(["en,ru"], splits)


def test_each_bar_of_the_figure_is_the_mean_over_the_rows_seeds(tmp_path, monkeypatch):
    """table.png: a bar per row and column at the mean of its seeds' figures (the dots are the seeds)."""
    from matplotlib.axes import Axes

    protocol = load_experiment("sentence_protocol")
    heights, bar = [], Axes.bar

    def recorded(ax, x, height, *args, **kwargs):
        heights.append(list(height))
        return bar(ax, x, height, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar", recorded)
    seeds = {"a": [(10.0, 30.0), (20.0, 60.0)], "b": [(5.0, 7.0)]}  # per seed: (cosine, val-chosen)
    results = {label: [{"en,de": _seed({"cosine": (c, None), "val-chosen": (v, None)})} for c, v in figures]
               for label, figures in seeds.items()}
    protocol.plot_table([("a", ["m0", "m1"]), ("b", ["n"])], results, ["en,de"], tmp_path / "table.png")
    assert heights == [[15.0, 5.0], [45.0, 7.0]]  # cosine bars, then val-chosen bars: a's mean, b's one seed


def test_the_oracle_column_chooses_by_translation_on_a_parallel_val_split_and_refuses_test(tiny_world, tiny_run,
                                                                                            tmp_path):
    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import iter_raw

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
    out.mkdir()
    with pytest.raises(protocol.UserError) as err:  # eval.py inside: its failure in one line, and where its log is
        protocol.run(["select", "--model", str(run_dir), "--reference", str(tiny_world / "train"), "--out", str(out)],
                     out / "full.log")
    assert "eval.py select --model" in str(err.value) and "cannot load the weights" in str(err.value)
    assert str(out / "full.log") in str(err.value) and "\n" not in str(err.value)
    # the table loads each run before any row is scored (the grid's MaxSim needs its tokenizer): refused there
    assert protocol.run_cli(protocol.main, protocol_argv(tiny_world, tmp_path / "table2", "--row",
                                                         f"full={run_dir}")) == 2
    err_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert err_line.startswith(f"error: --row full: {run_dir}: ") and "cannot load the weights" in err_line
    assert not (tmp_path / "table2").exists()


def test_a_val_split_that_is_a_test_split_is_refused_before_anything_is_written(protocol, tiny_world, tmp_path, capsys):
    """--val a test split of other images (its manifest says test): choices on it would be made on test."""
    other_test = tmp_path / "other" / "test"
    shutil.copytree(tiny_world / "val", other_test)  # val's images under a test folder and manifest
    manifest = json.loads((other_test / "manifest.json").read_text(encoding="utf-8"))
    (other_test / "manifest.json").write_text(json.dumps({**manifest, "split": "test"}), encoding="utf-8")
    argv = protocol_argv(tiny_world, tmp_path / "table", "--row", "a=tfidf")
    argv[argv.index("--val") + 1] = str(other_test)
    assert protocol.run_cli(protocol.main, argv) == 2
    err = capsys.readouterr().err
    assert f"--val {other_test}: a test split" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "table").exists()


def test_a_baseline_row_without_val_is_refused_naming_the_row_and_the_flag(protocol, tiny_world, tmp_path, capsys):
    argv = protocol_argv(tiny_world, tmp_path / "table", "--row", "TF-IDF=tfidf")
    del argv[argv.index("--val"):argv.index("--val") + 2]
    assert protocol.run_cli(protocol.main, argv) == 2
    assert capsys.readouterr().err == ("error: --row TF-IDF: a baseline has no run config to take the val split "
                                       "from; give --val SPLIT\n")
    assert not (tmp_path / "table").exists()


def test_a_ridge_row_on_a_split_that_is_not_there_is_refused_before_anything_is_fitted(protocol, tiny_world, tmp_path,
                                                                                       capsys):
    argv = protocol_argv(tiny_world, tmp_path / "table", "--row", f"ridge=ridge:{tmp_path / 'nothing'}")
    assert protocol.run_cli(protocol.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --row ridge: ") and str(tmp_path / "nothing") in err and err.count("\n") == 1, err
    assert not (tmp_path / "table").exists()


def test_two_models_of_a_row_that_would_share_their_records_are_refused(protocol, tiny_world, tiny_run, tmp_path,
                                                                        capsys):
    """Records are named by the row and the run folder's last two parts: two seeds' runs at a/runs/full and
    b/runs/full would overwrite each other's records, and one seed would be counted twice."""
    for parent in ("a", "b"):
        shutil.copytree(tiny_run, tmp_path / parent / "runs" / "full")
    first, second = tmp_path / "a" / "runs" / "full", tmp_path / "b" / "runs" / "full"
    argv = protocol_argv(tiny_world, tmp_path / "table", "--row", f"full={first},{second}")
    assert protocol.run_cli(protocol.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --row full: {second} and {first} would share the records full-runs-full-en-ru-*")
    assert err.count("\n") == 1 and not (tmp_path / "table").exists()


def test_an_oracle_val_split_that_is_not_parallel_is_one_line_naming_the_flag(protocol, tiny_world, tmp_path, capsys):
    """The tiny world's val split captions each image in one language: the oracle's refusal is said of --oracle-val."""
    argv = protocol_argv(tiny_world, tmp_path / "table", "--row", "TF-IDF=tfidf", "--oracle-val",
                         str(tiny_world / "val"))
    assert protocol.run_cli(protocol.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --oracle-val: ") and "needs a parallel val split" in err and err.count("\n") == 1
    assert not list((tmp_path / "table").glob("*oracle*.json")) and not (tmp_path / "table" / "table.md").exists()


def test_a_reference_split_with_fewer_captions_than_csls_k_is_refused_before_anything_is_scored(protocol, tiny_world,
                                                                                                tmp_path, capsys):
    """A --reference of 5 captions a language: `eval.py select`'s refusal named its --retrieval and --csls-k (no flags
    here), once the first column of the first row was scored."""
    thin = write_thin_reference(tmp_path / "thin", languages=("en", "ru"))
    out = tmp_path / "table"
    assert protocol.run_cli(protocol.main, protocol_argv(tiny_world, out, "--reference", str(thin),
                                                         "--row", "a=tfidf")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --reference {thin}: 5 en captions, fewer than the 10 neighbours"), err
    assert "csls-k" not in err and "--retrieval" not in err and err.count("\n") == 1
    assert not out.exists()


def test_a_reference_too_repetitive_for_maxsim_is_refused_before_anything_is_scored(protocol, tiny_world, tiny_run,
                                                                                   tmp_path, capsys):
    """12 captions a language, of 2 words each: `eval.py select`'s refusal named its --maxsim (no flag here), once the
    cosine column of the first row was scored."""
    reference = write_repetitive_reference(tmp_path / "reference")
    out = tmp_path / "table"
    assert protocol.run_cli(protocol.main, protocol_argv(tiny_world, out, "--reference", str(reference),
                                                         "--row", f"a={tiny_run}")) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: --row a: {tiny_run}: --reference {reference}: its en captions hold "), err
    assert "--maxsim" not in err and not out.exists()
