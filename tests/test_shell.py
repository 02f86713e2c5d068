"""Printed next commands name the interpreter as the user types it (globetrotter.shell)."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from globetrotter.shell import program_command, program_name, python_command


def test_interpreter_below_the_working_directory_is_relative(tmp_path, monkeypatch):
    exe = tmp_path / ".venv" / "bin" / "python"
    monkeypatch.setattr(sys, "executable", str(exe))
    monkeypatch.chdir(tmp_path)
    assert python_command() == ".venv/bin/python"


def test_interpreter_elsewhere_is_absolute(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    monkeypatch.chdir(tmp_path)
    assert python_command() == "/usr/bin/python3"


def test_printed_commands_quote_paths_with_spaces(tmp_path, monkeypatch, capsys):
    """The end-of-run summary printed `--model runs/my run`: pasted, the shell split it in two. Paths that need it are
    quoted now (the interpreter's too); plain ones are printed as they are."""
    from globetrotter.training.report import print_summary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setattr(sys, "executable", "/opt/my python/bin/python")
    test = tmp_path / "my data" / "test"
    test.mkdir(parents=True)
    (test / "manifest.json").write_text(json.dumps({"languages": {"en": 1}}))
    print_summary({"run_dir": "runs/my run", "metrics": {}}, test)
    select_line, sentence_line = capsys.readouterr().out.splitlines()[-2:]
    select = shlex.split(select_line.split(": ", 1)[1])
    sentence = shlex.split(sentence_line.split(": ", 1)[1])
    assert select[:5] == ["/opt/my python/bin/python", "eval.py", "select", "--model", "runs/my run"]
    assert sentence[3:7] == ["--model", "runs/my run", "--split", str(test)]
    assert len(sentence) == 9 and sentence[7] == "--ranking"
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    print_summary({"run_dir": "runs/plain", "metrics": {}}, test)
    assert "eval.py select --model runs/plain\n" in capsys.readouterr().out


def _install(root, *scripts):
    """A virtual environment's bin/ under ``root``: its interpreter and the console scripts ``scripts``."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", *scripts):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _summary_commands(tmp_path, capsys) -> tuple[list[str], list[str]]:
    """The two commands (select, then sentence) that the end-of-run summary prints, split as the shell would."""
    from globetrotter.training.report import print_summary

    test = tmp_path / "data" / "test"
    test.mkdir(parents=True, exist_ok=True)
    (test / "manifest.json").write_text(json.dumps({"languages": {"en": 1}}))
    print_summary({"run_dir": "runs/r", "metrics": {}}, test)
    select_line, sentence_line = capsys.readouterr().out.splitlines()[-2:]
    return shlex.split(select_line.split(": ", 1)[1]), shlex.split(sentence_line.split(": ", 1)[1])


@pytest.mark.parametrize("script", ["train.py", "eval.py", "./train.py", "/home/me/globetrotter/eval.py"])
def test_commands_printed_by_the_repository_scripts_keep_their_form(script, tmp_path, monkeypatch, capsys):
    """`python train.py` and `python eval.py` print `PYTHON eval.py ...` (the README's and the docs' form)."""
    bin_dir = _install(tmp_path, "globetrotter-eval", "globetrotter-train")  # installed too: the script still wins
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setattr(sys, "argv", [script, "--config", "c.yaml"])
    monkeypatch.chdir(tmp_path)
    assert program_command("eval") == ".venv/bin/python eval.py"
    assert program_command("train") == ".venv/bin/python train.py"
    assert (program_name("eval"), program_name("train")) == ("eval.py", "train.py")
    select, sentence = _summary_commands(tmp_path, capsys)
    assert select[:4] == [".venv/bin/python", "eval.py", "select", "--model"]
    assert sentence[:4] == [".venv/bin/python", "eval.py", "sentence", "--model"]


def test_commands_printed_by_an_installed_console_script_name_the_console_scripts(tmp_path, monkeypatch, capsys):
    """An installed project has no eval.py: `globetrotter-train` printed `python eval.py select ...`. It names the
    console script beside the interpreter now, spelled as the interpreter would be (relative below the working
    folder, else absolute), or the bare name when none is there."""
    bin_dir = _install(tmp_path, "globetrotter-eval", "globetrotter-train")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "globetrotter-train"), "--config", "c.yaml"])
    monkeypatch.chdir(tmp_path)
    select, sentence = _summary_commands(tmp_path, capsys)
    assert select[:4] == [".venv/bin/globetrotter-eval", "select", "--model", "runs/r"]
    assert sentence[:4] == [".venv/bin/globetrotter-eval", "sentence", "--model", "runs/r"]
    assert program_name("eval") == "globetrotter-eval" and program_name("train") == "globetrotter-train"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert program_command("eval") == str(bin_dir / "globetrotter-eval")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bare" / "python"))  # no script beside it: as on PATH
    assert program_command("train") == "globetrotter-train"
    # python -m globetrotter.training.cli (accelerate launch -m ...): argv[0] is the module's file
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "site-packages" / "globetrotter" / "training" / "cli.py")])
    assert program_command("eval") == "globetrotter-eval"


def test_the_training_command_line_is_named_as_it_was_started(tmp_path, monkeypatch):
    """Its usage line said `train.py` whatever ran it; `globetrotter-train` (and `python -m`) is named so now."""
    from globetrotter.training.cli import build_parser

    monkeypatch.setattr(sys, "argv", ["train.py"])
    parser = build_parser()
    assert parser.prog == "train.py" and "`accelerate launch train.py ...`" in parser.description
    assert "`train.py adapt.from=RUN" in parser.epilog and "`eval.py select`" in parser.description \
        and "`eval.py sentence --ranking RECORD`" in parser.description
    for started in (tmp_path / "bin" / "globetrotter-train", tmp_path / "globetrotter" / "training" / "cli.py"):
        monkeypatch.setattr(sys, "argv", [str(started)])
        parser = build_parser()
        assert parser.prog == "globetrotter-train", started
        assert parser.format_usage().startswith("usage: globetrotter-train ")
        assert "`accelerate launch -m globetrotter.training.cli ...`" in parser.description
        assert "`globetrotter-train adapt.from=RUN" in parser.epilog
        assert "`globetrotter-eval sentence --ranking RECORD`" in parser.description


def test_the_next_round_of_a_backbone_finetune_names_the_training_command(tmp_path, monkeypatch, capsys):
    """`globetrotter-data features finetune` said `next round: train.py with ...`, a script an install lacks."""
    from globetrotter import threads
    from globetrotter.data import feature_cache_cli
    from globetrotter.training import backbone_finetune

    bin_dir = _install(tmp_path, "globetrotter-train")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "globetrotter-data"), "features", "finetune"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(threads, "configure_threads", lambda *a, **k: None)
    two = SimpleNamespace(model=SimpleNamespace(image_pretrained="round2/backbone.safetensors"),
                          data=SimpleNamespace(features="round2/features"))
    monkeypatch.setattr(backbone_finetune, "finetune_backbone", lambda *a, **k: two)
    args = SimpleNamespace(epochs=1, lr=1e-3, seed=0, split_dir="data/train", from_run="runs/one", out="round2",
                           workers=0, device="cpu", no_progress=False)
    assert feature_cache_cli._finetune(args) == 0
    line = capsys.readouterr().out.strip()
    assert line == ("next round: .venv/bin/globetrotter-train --config runs/one/config.yaml run_name=one-round-two "
                    "model.image_pretrained=round2/backbone.safetensors data.features=round2/features")
    # a command as it stands (it said "with runs/one's config and overrides ...", which run as written was refused:
    # runs/one already holds a run): the run's own config, a run of its own, the new backbone and cache
    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    (tmp_path / "runs" / "one").mkdir(parents=True)
    recipe = Path(__file__).resolve().parents[1] / "configs" / "flickr8k.yaml"  # a run whose backbone is frozen
    save_config(load_train_config(recipe, ["run_name=one"]), tmp_path / "runs" / "one" / "config.yaml")
    command = shlex.split(line.removeprefix("next round: "))
    assert command[1] == "--config"
    cfg = load_train_config(command[2], command[3:])
    assert (cfg.run_name, cfg.model.image_pretrained, cfg.data.features) == (
        "one-round-two", "round2/backbone.safetensors", "round2/features")
