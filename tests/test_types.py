"""The standalone metric package and the data layer type-check: ``mypy backretrieval`` and ``mypy data_prep`` (the
settings and per-module overrides of pyproject.toml's ``[tool.mypy]``) report no error. backretrieval's type hints
are part of its API (users import it as a library, with any embedding model), so a hint that says something untrue
fails here, not in a user's checker; data_prep's readers and writers are what every command's files go through.
The backretrieval run checks the data_prep modules it imports too (not reporting them), so the data_prep run after
it finds most of them in ``.mypy_cache``."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e .[dev])")
@pytest.mark.parametrize("package", ["backretrieval", "data_prep"])
def test_package_type_checks_with_mypy(package: str):
    done = subprocess.run([sys.executable, "-m", "mypy", package], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"mypy {package} (rc {done.returncode}):\n{done.stdout}{done.stderr}"
