"""The standalone metric package type-checks: ``mypy backretrieval`` (the settings and per-module overrides of
pyproject.toml's ``[tool.mypy]``) reports no error. Its type hints are part of its API (users import it as a
library, with any embedding model), so a hint that says something untrue fails here, not in a user's checker."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed (pip install -e .[dev])")
def test_backretrieval_type_checks_with_mypy():
    done = subprocess.run([sys.executable, "-m", "mypy", "backretrieval"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"mypy backretrieval (rc {done.returncode}):\n{done.stdout}{done.stderr}"
