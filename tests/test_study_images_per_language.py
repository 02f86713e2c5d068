"""experiments/study_images_per_language.py: its options are checked before any run is trained."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import load_experiment


@pytest.fixture(scope="module")
def curve():
    return load_experiment("study_images_per_language")


@pytest.mark.parametrize("bad", [["--seeds", "-1"], ["--seeds", "0,-1"], ["--shares", "0.5,x"], ["--n-groups", "0"],
                                 ["--n-groups", "-5"], ["--languages", "en,de,en"], ["--out", "AFILE/out"]])
def test_bad_counts_and_an_unwritable_out_dir_are_usage_errors(curve, tmp_path, capsys, bad):
    (tmp_path / "afile").write_text("")
    argv = ["--out", str(tmp_path / "out"), *[b.replace("AFILE", str(tmp_path / "afile")) for b in bad]]
    with pytest.raises(SystemExit) as exit_:
        curve.main(argv)
    assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_given_run_is_placed_at_the_images_of_its_own_config_not_the_model_config(curve, tiny_world, tmp_path,
                                                                                     monkeypatch):
    """One run given for two --model labels sits at one x: the run's own split, not each label's config (the same
    run was placed at 1333 and 1500 images per language)."""
    import json

    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    def config(path, split):
        save_config(load_train_config(None, [f"data.root={tiny_world}", f"data.train_split={split}", "data.synth=null"]),
                    path)
        return path

    full = config(tmp_path / "full.yaml", "train")   # each image captioned in one language
    sup = config(tmp_path / "sup.yaml", "test")      # parallel: every image in every language
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config(run_dir / "config.yaml", "train")
    (run_dir / "result.json").write_text("{}")
    monkeypatch.setattr(curve, "translation", lambda *args: 0.02)
    out = tmp_path / "out"
    curve.main(["--model", f"full={full}", f"sup={sup}", "--shares", "1", "--seeds", "0",
                "--run", f"full:1:0={run_dir}", f"sup:1:0={run_dir}", "--out", str(out)])
    written = json.loads((out / "curve.json").read_text())
    rows = written["rows"]
    assert [r["model"] for r in rows] == ["full", "sup"]
    assert written["inputs"]["seeds"] == [0] and "torch" in written["versions"]  # as eval.py's records name them
    assert rows[0]["images_per_language"] == rows[1]["images_per_language"] == curve.images_per_language(full)
    assert curve.images_per_language(sup) != rows[1]["images_per_language"]  # the test would tell the bug apart


def test_a_finished_run_of_another_config_is_refused_not_put_in_the_curve(curve, tiny_world, tmp_path, monkeypatch,
                                                                          capsys):
    """A run folder the study trains (runs-dir/prefix-label-shSHARE-sSEED) was reused whatever config it was trained
    with: a run of an edited --model config, or of an earlier study's settings, stood in the curve. It is now reused
    only when its config.yaml is the one the study would train; else one line names what differs."""
    import json

    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    model = tmp_path / "full.yaml"
    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), model)
    runs = tmp_path / "runs"
    run_dir = runs / "curve-full-sh0.5-s1"
    run_dir.mkdir(parents=True)
    # as train.py saves it: the model config with the study's seed, share and run folder
    save_config(load_train_config(model, ["seed=1", "data.train_image_share=0.5", "run_name=curve-full-sh0.5-s1",
                                          f"output_dir={runs}", "steps=7"]), run_dir / "config.yaml")
    (run_dir / "result.json").write_text("{}")
    monkeypatch.setattr(curve, "translation", lambda *args: 0.02)
    monkeypatch.setattr(curve, "run", lambda *args: pytest.fail("trained or evaluated a run"))
    argv = ["--model", f"full={model}", "--shares", "0.5", "--seeds", "1", "--runs-dir", str(runs),
            "--out", str(tmp_path / "out")]
    curve.main(argv)  # the same config (steps aside, a run's own setting): reused
    assert [r["run"] for r in json.loads((tmp_path / "out" / "curve.json").read_text())["rows"]] == [str(run_dir)]
    save_config(load_train_config(model, ["loss.cloze=0.25"]), model)  # the model's config edited since
    with pytest.raises(SystemExit) as stop:
        curve.main(argv[:-1] + [str(tmp_path / "out2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {run_dir}: a finished run of another config than {model} seed=1 "
                             f"data.train_image_share=0.5 (loss.cloze: 1.0 -> 0.25)"), err
    assert not (tmp_path / "out2" / "curve.json").exists()


def test_relative_runs_and_out_folders_are_the_working_folders_not_the_repos(curve, tiny_world, tmp_path,
                                                                            monkeypatch):
    """train.py runs in the repo while the study looked for --runs-dir in the working folder: run from elsewhere, a
    relative --runs-dir was trained into the repo's folder and never found. train.py (stubbed here, as it runs: in the
    repo) now gets the working folder's runs folder as an absolute path, and the study finds the run there."""
    import json

    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    model = tmp_path / "full.yaml"
    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), model)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    trained = []

    def train_py(cmd, log):  # as train.py would write its run: output_dir/run_name, relative to the repo
        settings = dict(arg.split("=", 1) for arg in cmd if "=" in arg)
        assert Path(settings["output_dir"]).is_absolute(), cmd  # else it would write into the repo
        run_dir = curve.ROOT / settings["output_dir"] / settings["run_name"]
        run_dir.mkdir(parents=True)
        save_config(load_train_config(model, [a for a in cmd if a.startswith(("seed=", "data.train_image_share="))]),
                    run_dir / "config.yaml")
        (run_dir / "result.json").write_text("{}")
        trained.append(run_dir)

    monkeypatch.setattr(curve, "run", train_py)
    monkeypatch.setattr(curve, "translation", lambda *args: 0.02)
    curve.main(["--model", f"full={model}", "--shares", "1", "--seeds", "0", "--runs-dir", "runs", "--out", "out"])
    assert trained == [work / "runs" / "curve-full-sh1-s0"]
    rows = json.loads((work / "out" / "curve.json").read_text())["rows"]
    assert [r["run"] for r in rows] == [str(work / "runs" / "curve-full-sh1-s0")]


def test_a_relative_config_and_split_are_one_file_for_the_study_and_for_train_py_and_eval_py(curve, tiny_world,
                                                                                          tmp_path, monkeypatch,
                                                                                          capsys):
    """The --model config and --split were read by the study relative to the working folder and by train.py / eval.py
    (run in the repo) relative to the repo: from another folder, a repo config such as configs/flickr8k.yaml was "not
    found" by the study although train.py found it, and a working folder's config or split was found by the study
    alone. Each is now one absolute path, the working folder's when it is there, else the repo's, for both."""
    import json

    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    work = tmp_path / "work"
    (work / "test-split").mkdir(parents=True)
    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), work / "mine.yaml")
    monkeypatch.chdir(work)
    runs = tmp_path / "runs"
    # a finished run of the repo's config, as train.py saved it: reused, its config compared with the repo's file
    repo_run = runs / "curve-repo-sh1-s0"
    repo_run.mkdir(parents=True)
    save_config(load_train_config(curve.ROOT / "configs" / "flickr8k.yaml", ["seed=0", "data.train_image_share=1"]),
                repo_run / "config.yaml")
    (repo_run / "result.json").write_text("{}")
    trained, scored = [], []

    def train_py(cmd, log):  # as train.py reads its --config: in the repo
        config = curve.ROOT / cmd[cmd.index("--config") + 1]
        assert config.resolve() == (work / "mine.yaml").resolve(), cmd
        settings = dict(arg.split("=", 1) for arg in cmd if "=" in arg)
        run_dir = Path(settings["output_dir"]) / settings["run_name"]
        run_dir.mkdir(parents=True)
        save_config(load_train_config(config, ["seed=0"]), run_dir / "config.yaml")
        (run_dir / "result.json").write_text("{}")
        trained.append(run_dir.name)

    def translation(run_dir, args, name, logs):  # as eval.py reads --split: in the repo
        scored.append(curve.ROOT / args.split)
        return 0.02

    monkeypatch.setattr(curve, "run", train_py)
    monkeypatch.setattr(curve, "translation", translation)
    monkeypatch.setattr(curve, "run_images_per_language", lambda *args: 10.0)  # the repo config's data is not here
    curve.main(["--model", "repo=configs/flickr8k.yaml", "mine=mine.yaml", "--shares", "1", "--seeds", "0",
                "--runs-dir", str(runs), "--split", "test-split", "--out", "out"])
    assert trained == ["curve-mine-sh1-s0"]  # the repo's run reused: its config is the repo's file
    assert scored == [work / "test-split"] * 2
    rows = json.loads((work / "out" / "curve.json").read_text())["rows"]
    assert [r["run"] for r in rows] == [str(repo_run), str(runs / "curve-mine-sh1-s0")]
    # a config in neither folder: one line before any training
    with pytest.raises(SystemExit) as stop:
        curve.main(["--model", "a=mine.yaml", "b=nowhere.yaml", "--shares", "1", "--seeds", "1", "--runs-dir",
                    str(runs), "--out", "out2"])
    assert stop.value.code == 2 and trained == ["curve-mine-sh1-s0"]
    assert capsys.readouterr().err.strip() == ("error: --model b=nowhere.yaml: config file not found (in the working "
                                               f"folder {work} or the repo)")


def test_a_runs_relative_data_root_is_counted_in_the_repo_where_train_py_read_it(curve, tiny_world, tmp_path,
                                                                                 monkeypatch):
    """A run's config.yaml holds data.root as train.py was given it, relative to the repo it ran in; the study counted
    its images per language in the working folder's data.root instead (another dataset there, or none). It now reads
    it in the repo (here a stand-in repo whose data/tiny is the tiny world), as train.py and eval.py do."""
    import json

    from conftest import make_tiny_world
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "tiny").symlink_to(tiny_world)
    monkeypatch.setattr(curve, "ROOT", repo)
    work = tmp_path / "work"
    make_tiny_world(work / "data" / "tiny", n_train=40, n_val=4, n_test=2)  # another dataset at the same path here
    run_dir = work / "run"
    run_dir.mkdir()
    save_config(load_train_config(None, ["data.root=data/tiny", "data.synth=null"]), run_dir / "config.yaml")
    assert "root: data/tiny" in (run_dir / "config.yaml").read_text()  # relative, as train.py saves it
    (run_dir / "result.json").write_text("{}")
    model = tmp_path / "full.yaml"
    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), model)
    monkeypatch.setattr(curve, "translation", lambda *args: 0.02)
    monkeypatch.chdir(work)
    curve.main(["--model", f"full={model}", "--shares", "1", "--seeds", "0", "--run", "full:1:0=run",
                "--out", "out"])
    [row] = json.loads((work / "out" / "curve.json").read_text())["rows"]
    assert row["images_per_language"] == curve.images_per_language(model)  # the tiny world's count
    here = load_train_config(None, [f"data.root={work / 'data' / 'tiny'}", "data.synth=null"])
    save_config(here, tmp_path / "here.yaml")
    assert curve.images_per_language(tmp_path / "here.yaml") != row["images_per_language"]  # tells the bug apart


def test_eval_py_is_given_the_languages_as_one_comma_separated_value(curve, tmp_path, monkeypatch):
    """--languages is read (and checked) as a list; eval.py select and sentence get it back as one value."""
    import json

    args = curve.build_parser().parse_args(["--out", str(tmp_path), "--languages", "en,de"])
    commands = []

    def eval_py(cmd, log):
        commands.append(cmd)
        if cmd[2] == "sentence":
            (tmp_path / "eval" / "sentence-x.json").write_text(json.dumps({"metrics": {"sentence_translation": 0.5}}))

    (tmp_path / "eval").mkdir()
    monkeypatch.setattr(curve, "run", eval_py)
    assert curve.translation(tmp_path / "run", args, "x", tmp_path) == 0.5
    assert [cmd[2] for cmd in commands] == ["select", "sentence"]
    assert all(cmd[cmd.index("--languages") + 1] == "en,de" for cmd in commands)


def test_the_table_gives_each_share_its_seed_mean_and_the_first_model_over_the_second(curve):
    rows = [{"model": m, "share": s, "seed": seed, "images_per_language": 10 * s, "translation": t}
            for m, s, seed, t in [("full", 0.5, 1, 0.30), ("full", 0.5, 0, 0.10), ("sup", 0.5, 0, 0.40),
                                  ("sup", 0.5, 1, 0.40), ("full", 1.0, 0, 0.50), ("sup", 1.0, 0, 0.25)]]
    lines = curve.table(rows, ["full", "sup"], [0.5, 1.0]).splitlines()
    assert "| full | 0.5 | 5 | 10.00% / 30.00% | 20.00% |" in lines  # seeds in order, their mean
    assert "| sup | 0.5 | 5 | 40.00% / 40.00% | 40.00% |" in lines
    assert "| 0.5 | 0.500 |" in lines and "| 1 | 2.000 |" in lines  # full / sup of the means: 0.2 / 0.4, 0.5 / 0.25


def test_images_per_language_counts_the_distinct_images_of_each_language(curve, tmp_path):
    """Counted from the split's captions: the mean over languages of the distinct images captioned in each (here
    languages of unequal counts)."""
    from collections import defaultdict

    from conftest import make_tiny_world
    from data_prep.shards import read_captions
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    world = make_tiny_world(tmp_path / "world", n_train=40, n_val=4, n_test=2)
    config = tmp_path / "full.yaml"
    save_config(load_train_config(None, [f"data.root={world}", "data.synth=null"]), config)
    images = defaultdict(set)
    for meta in read_captions(world / "train"):
        images[meta["lang"]].add(str(meta["image_id"]))
    sizes = [len(v) for v in images.values()]
    assert len(set(sizes)) > 1  # a mean over languages tells apart any one language's count
    assert curve.images_per_language(config) == pytest.approx(np.mean(sizes))


def test_a_finished_run_of_another_share_is_refused(curve, tiny_world, tmp_path):
    """The share is the study's axis: a run trained at share 0.5 is not reused where the study trains share 1."""
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config
    from globetrotter.errors import UserError

    model = tmp_path / "full.yaml"
    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), model)
    run_dir = tmp_path / "curve-full-sh1-s0"
    run_dir.mkdir()
    save_config(load_train_config(model, ["seed=0", "data.train_image_share=0.5"]), run_dir / "config.yaml")
    curve.refuse_other_run(run_dir, str(model), 0.5, 0)  # its own share: reused
    with pytest.raises(UserError, match=r"data.train_image_share: 0.5 -> 1"):
        curve.refuse_other_run(run_dir, str(model), 1.0, 0)


def _model_config(tiny_world, path):
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    save_config(load_train_config(None, [f"data.root={tiny_world}", "data.synth=null"]), path)
    return path


@pytest.mark.parametrize("model, run, message", [
    ("full", None, "error: --model: expected KEY=VALUE, got 'full'"),
    ("MODEL", "full:one:0=RUN", "error: --run: expected LABEL:SHARE:SEED=DIR, got 'full:one:0'"),
    ("MODEL", "full:1:0", "error: --run: expected KEY=VALUE, got 'full:1:0'"),
    ("MODEL", "full:1:0=RUN", "error: --run full:1:0=RUN: no result.json (not a finished run)"),
])
def test_a_bad_model_or_run_item_stops_with_one_line_before_anything_is_trained(curve, tiny_world, tmp_path,
                                                                                monkeypatch, model, run, message):
    model_path = _model_config(tiny_world, tmp_path / "full.yaml")
    (tmp_path / "run").mkdir()  # a folder, but no finished run in it
    monkeypatch.setattr(curve, "run", lambda *args: pytest.fail("trained or evaluated a run"))
    argv = ["--model", model.replace("MODEL", f"full={model_path}"), "--shares", "1", "--seeds", "0",
            "--out", str(tmp_path / "out")]
    if run is not None:
        argv += ["--run", run.replace("RUN", str(tmp_path / "run"))]
    with pytest.raises(SystemExit) as stop:
        curve.main(argv)
    assert stop.value.code == message.replace("RUN", str(tmp_path / "run"))
    assert not (tmp_path / "out" / "curve.json").exists()


def test_a_given_run_without_its_config_is_refused_naming_the_folder(curve, tiny_world, tmp_path, monkeypatch, capsys):
    model_path = _model_config(tiny_world, tmp_path / "full.yaml")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "result.json").write_text("{}")
    monkeypatch.setattr(curve, "translation", lambda *args: pytest.fail("scored a run it cannot place"))
    with pytest.raises(SystemExit) as stop:
        curve.main(["--model", f"full={model_path}", "--shares", "1", "--seeds", "0", "--run", f"full:1:0={run_dir}",
                    "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (f"error: {run_dir}: no config.yaml (expected a run folder trained by "
                                       "train.py)\n")
    assert not (tmp_path / "out" / "curve.json").exists()


@pytest.mark.parametrize("script, last", [("print('loading'); print('bad split'); raise SystemExit(3)", "bad split"),
                                          ("raise SystemExit(4)", "(no output)")])
def test_a_failing_command_stops_the_study_with_its_exit_code_log_and_last_line(curve, tmp_path, script, last):
    import sys

    log = tmp_path / "step.log"
    with pytest.raises(SystemExit) as stop:
        curve.run([sys.executable, "-c", script], log)
    code = 3 if "3" in script else 4
    assert stop.value.code == f"error: {sys.executable} -c {script} ... failed (exit {code}; {log}): {last}"
    curve.run([sys.executable, "-c", "print('fine')"], log)  # a command that succeeds: its output in the log
    assert log.read_text().strip() == "fine"


def test_the_table_leaves_out_a_model_and_share_without_runs_and_its_ratio(curve):
    """A share only one model has runs of (an interrupted study) gets that model's row and no ratio line."""
    rows = [{"model": m, "share": s, "seed": 0, "images_per_language": 100 * s, "translation": t}
            for m, s, t in [("full", 0.5, 0.2), ("sup", 0.5, 0.4), ("full", 1.0, 0.6)]]
    lines = curve.table(rows, ["full", "sup"], [0.5, 1.0]).splitlines()
    assert [line.split(" | ")[:2] for line in lines if line.startswith(("| full", "| sup"))] == \
        [["| full", "0.5"], ["| full", "1"], ["| sup", "0.5"]]
    assert lines[-1] == "| 0.5 | 0.500 |" and not any(line.startswith("| 1 |") for line in lines)
