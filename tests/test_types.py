"""The three packages type-check: ``mypy backretrieval``, ``mypy data_prep`` and ``mypy globetrotter`` (the settings
and per-module overrides of pyproject.toml's ``[tool.mypy]``) report no error. backretrieval's type hints are part of
its API (users import it as a library, with any embedding model), so a hint that says something untrue fails here,
not in a user's checker; data_prep's readers and writers are what every command's files go through; globetrotter's
are the method's. The experiment drivers and the benchmarks are checked alike (``mypy experiments``, ``mypy bench``:
folders without ``__init__.py``: each file a top-level module, its folder on the path, as the drivers import one
another), so a value of the wrong type they hand the packages fails here, not in a long run. Each run after the
first finds most of what it imports in ``.mypy_cache``."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e .[dev])")
@pytest.mark.parametrize("folder", ["backretrieval", "data_prep", "globetrotter", "experiments", "bench"])
def test_type_checks_with_mypy(folder: str):
    done = subprocess.run([sys.executable, "-m", "mypy", folder], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"mypy {folder} (rc {done.returncode}):\n{done.stdout}{done.stderr}"


def test_a_type_checker_sees_every_lazy_name_of_backretrieval_as_its_submodule_defines_it():
    """``import backretrieval`` loads its names on first use (``__getattr__``), which a type checker reads as
    ``object``: a ``TYPE_CHECKING`` block imports each one from the submodule that ``_EXPORTS`` names, so that a
    user's checker sees ``bkr_recall``'s signature. The block and ``_EXPORTS`` must name the same things."""
    import ast

    import backretrieval

    tree = ast.parse((ROOT / "backretrieval" / "__init__.py").read_text(encoding="utf-8"))
    block = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert len(block) == 1
    seen = {(node.module, alias.name) for node in block[0].body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == {(module, name) for module, names in backretrieval._EXPORTS.items() for name in names}
    assert backretrieval.__all__ == sorted(backretrieval._MODULE_OF)  # a literal list: a checker reads no computed one


# every package whose __init__ names its public API in __all__
PUBLIC_PACKAGES = sorted(".".join(init.parent.relative_to(ROOT).parts)
                         for package in ("backretrieval", "data_prep", "globetrotter")
                         for init in (ROOT / package).rglob("__init__.py") if "__all__" in init.read_text("utf-8"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e .[dev])")
def test_a_strict_type_checker_accepts_every_public_name_imported_from_its_package(tmp_path: Path):
    """``mypy --strict`` (as a user's project may run it) does not let ``from backretrieval import bkr_recall``
    through unless the package exports the name: ``__all__`` as a literal, or ``import X as X``. Each package's
    ``__all__`` (read at run time) is imported by name in a user's file, under ``--no-implicit-reexport``."""
    import importlib

    assert {"backretrieval", "globetrotter", "globetrotter.evaluation"} <= set(PUBLIC_PACKAGES)
    lines = [f"from {package} import {name} as _{index}_{name}"
             for index, package in enumerate(PUBLIC_PACKAGES)
             for name in importlib.import_module(package).__all__]
    user = tmp_path / "user_code.py"
    user.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-implicit-reexport", str(user)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"mypy --no-implicit-reexport (rc {done.returncode}):\n{done.stdout}{done.stderr}"
