"""Printed next commands name the interpreter as the user types it (globetrotter.shell)."""
from __future__ import annotations

import sys

from globetrotter.shell import python_command


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
    import json
    import shlex

    from globetrotter.training.report import print_summary

    monkeypatch.chdir(tmp_path)
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
