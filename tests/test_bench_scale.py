"""bench/bench_scale.py's bookkeeping (stages stubbed, so no corpus is generated or timed): scale.json after each
stage, data of other settings refused, a stage's missing inputs named, --threads/--train-steps passed and recorded."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, load_bench

from globetrotter.errors import run_cli


@pytest.fixture
def scale(monkeypatch):
    """bench_scale with its stages stubbed: each records its call and leaves the output the next stage reads."""
    module = load_bench("bench_scale")
    calls: list[tuple] = []
    outputs = {"shards": "train/manifest.json", "import": "cache/cache.json", "tokenizer": "tokenizer.json"}

    def run_stage(name: str, work: Path, n: int, *extra) -> dict:
        calls.append((name, n, extra[1:] if name in ("train", "validation") else ()))
        if name == "fail":
            raise KeyboardInterrupt
        if name in outputs:
            (work / outputs[name]).parent.mkdir(parents=True, exist_ok=True)
            (work / outputs[name]).write_text("{}")
        return {"seconds": 1.0, "rss_mb": 1.0, "rss_total_mb": 1.0}

    monkeypatch.setattr(module, "run_stage", run_stage)
    monkeypatch.setattr(module, "make_pool", lambda size, dim, seed=0: {"size": size})
    monkeypatch.setattr(module, "prepare_embeddings", lambda work, n, pool, seed=0: (work / "embeddings.npy").touch())
    monkeypatch.chdir(REPO)  # the quickstart config is read from configs/
    module.calls = calls
    return module


def run(module, monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["bench/bench_scale.py", *argv])
    code = run_cli(lambda _argv: module.main())
    return code, capsys.readouterr().err


def test_scale_json_is_written_after_each_stage(scale, tmp_path, monkeypatch, capsys):
    out = tmp_path / "scale"
    real = scale.run_stage
    monkeypatch.setattr(scale, "run_stage", lambda name, *a: real("fail" if name == "tokenizer" else name, *a))
    code, _ = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", "5", "--dim", "4",
                  "--stages", "shards,tokenizer", "--out", str(out))
    assert code == 130  # interrupted in the second stage
    saved = json.loads((out / "scale.json").read_text())
    assert list(saved["results"]["50"]) == ["shards"]
    assert saved["settings"] == {"dim": 4, "pool": 5, "seed": 0}


def test_threads_steps_and_command_are_recorded(scale, tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "scale")
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", "5", "--dim", "4", "--threads", "1",
                    "--train-steps", "3", "--stages", "shards,tokenizer,import,train", "--out", out)
    assert code == 0, err
    assert ("train", 50, (1, 3)) in scale.calls
    run_record = json.loads((Path(out) / "scale.json").read_text())["runs"][-1]
    assert run_record["threads"] == 1 and run_record["train_steps"] == 3
    assert "--train-steps 3" in run_record["command"]


@pytest.mark.parametrize("flag, value", [("--dim", "8"), ("--pool", "6")])
def test_other_settings_in_the_same_folder_are_refused(scale, tmp_path, monkeypatch, capsys, flag, value):
    out = tmp_path / "scale"
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", "5", "--dim", "4",
                    "--stages", "shards,import", "--out", str(out))
    assert code == 0, err
    before = (out / "scale.json").read_text()
    settings = {"--dim": "4", "--pool": "5", flag: value}
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", settings["--pool"], "--dim",
                    settings["--dim"], "--stages", "index", "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert str(out) in err and f"{flag} " in err and value in err
    assert (out / "scale.json").read_text() == before  # the earlier figures kept
    (out / "scale.json").unlink()  # the size's own record refuses too
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", settings["--pool"], "--dim",
                    settings["--dim"], "--stages", "index", "--out", str(out))
    assert code == 2 and str(out / "n50") in err and f"{flag} " in err


def test_a_stage_without_its_inputs_names_the_stages_to_run_first(scale, tmp_path, monkeypatch, capsys):
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--pool", "5", "--dim", "4",
                    "--stages", "neighbours", "--out", str(tmp_path / "scale"))
    assert code == 2 and "--stages shards,import,neighbours" in err
    assert scale.calls == []


def test_an_out_that_cannot_be_made_is_one_line(scale, tmp_path, monkeypatch, capsys):
    def refuse(self, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)  # as /proc/x does for root, whom os.access lets through
    code, err = run(scale, monkeypatch, capsys, "--sizes", "50", "--stages", "index", "--out", str(tmp_path / "x"))
    assert code == 2 and err.startswith("error: --out ") and err.count("\n") == 1


@pytest.mark.parametrize("size, stages, says", [
    ("1", "shards,tokenizer,import,validation", "one language"),
    ("13", "shards,import,neighbours", "the neighbours stage mines 10"),
])
def test_a_size_too_small_for_a_stage_is_one_line_before_anything_runs(scale, tmp_path, monkeypatch, capsys, size,
                                                                        stages, says):
    out = tmp_path / "scale"
    code, err = run(scale, monkeypatch, capsys, "--sizes", f"50,{size}", "--pool", "5", "--dim", "4",
                    "--stages", stages, "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --sizes {size}: ") and says in err and "give sizes of at least" in err
    assert scale.calls == [] and not out.exists()  # refused before a stage ran (it failed after 3 stages)
    code, err = run(scale, monkeypatch, capsys, "--sizes", "14", "--pool", "5", "--dim", "4",
                    "--stages", stages, "--out", str(out))
    assert code == 0, err  # the smallest size every stage accepts


def test_a_stage_measured_at_two_sizes_gets_its_slope_though_a_later_run_skipped_it(scale, tmp_path, monkeypatch,
                                                                                      capsys):
    """The docstring's promise: a stage with two sizes or more in the folder gets its slope and its scale.png line,
    even when a later run added a size without it (it was dropped unless measured at every size in the folder)."""
    out = str(tmp_path / "scale")
    for sizes, stages in (("50,60", "shards,import"), ("70", "shards")):
        monkeypatch.setattr(sys, "argv", ["bench/bench_scale.py", "--sizes", sizes, "--pool", "5", "--dim", "4",
                                          "--stages", stages, "--out", out])
        capsys.readouterr()  # the later run's output alone
        assert run_cli(lambda _argv: scale.main()) == 0
    slopes = capsys.readouterr().out.split("log-log slope", 1)[1].splitlines()
    assert any(line.split() == ["import", "50->60:", "0.00"] for line in slopes), slopes
    assert any(line.split() == ["shards", "50->60:", "0.00", "60->70:", "0.00"] for line in slopes), slopes
    assert (Path(out) / "scale.png").is_file()


def test_a_stage_process_prints_a_cut_text_notice_as_the_commands_one_warning_line(monkeypatch, capsys):
    """Each stage runs in a process of its own, outside main's run_cli: the validation stage's TextsCut notice was
    Python's raw form (``.../file.py:NN: TextsCut: ...`` and a source line); now the commands' one line."""
    from globetrotter.texts_cut import warn_cut

    module = load_bench("scale_stages")

    def validation() -> dict:
        warn_cut(["a long caption"], ["a long caption", "short"], 4)
        return {"seconds": 1.0}

    monkeypatch.setattr(module, "stage_validation", validation)
    assert module._child("validation", ())["seconds"] == 1.0
    err = capsys.readouterr().err
    assert err == ("warning: 1 of 2 text(s) are longer than data.max_length=4 tokens and were cut to it, as in "
                   "training: the tokens past it do not change their embeddings\n"), err
