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
