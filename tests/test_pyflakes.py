"""No unused import, undefined name or unused variable: pyflakes reports nothing on the three packages, the experiment
drivers, the benchmarks and the entry points. (A split or a move that leaves an import behind fails here, not in a
reader's editor.) ``tests/`` is not checked: pytest fixtures imported from another test module read as unused."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api", reason="pyflakes is not installed (pip install -e .[dev])")
pyflakes_reporter = pytest.importorskip("pyflakes.reporter")

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("backretrieval", "globetrotter", "data_prep", "experiments", "bench", "train.py", "eval.py")


def pyflakes_messages(paths: list[str]) -> list[str]:
    """What pyflakes says of ``paths`` (files or folders, walked for ``*.py``): one line per message."""
    out, err = io.StringIO(), io.StringIO()
    pyflakes_api.checkRecursive(paths, pyflakes_reporter.Reporter(out, err))
    return [line for line in (out.getvalue() + err.getvalue()).splitlines() if line.strip()]


def test_pyflakes_finds_nothing():
    messages = pyflakes_messages([str(ROOT / name) for name in CHECKED])
    assert not messages, "pyflakes:\n" + "\n".join(messages)


def test_the_check_reports_an_unused_import_and_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return missing\n")
    (tmp_path / "good.py").write_text("import os\n\nprint(os.sep)\n")
    messages = pyflakes_messages([str(tmp_path)])
    assert len(messages) == 2 and all(str(bad) in m for m in messages)
    assert "'os' imported but unused" in messages[0] and "undefined name 'missing'" in messages[1]
