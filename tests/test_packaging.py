"""The project as installed from its wheel, used from another folder: each console script's module runs under
``python -m`` (as ``accelerate launch -m`` starts one)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SCRIPTS = PYPROJECT["project"]["scripts"]


def _python_m(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m module args`` from ``cwd`` (not the repository), with this checkout's packages."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_console_scripts_module_runs_its_command_under_python_m(script, tmp_path):
    """`python -m globetrotter.training.cli --config X` imported the module and exited 0 having done nothing (no
    `__main__` guard), so `accelerate launch -m globetrotter.training.cli ...` trained nothing; `python -m
    globetrotter.evaluation.cli` (a package) had no `__main__`. Each runs its command now: --help prints the usage
    (named as the console script: the training command's said `train.py`), an unknown option is a usage error."""
    module = SCRIPTS[script].split(":")[0]
    shown = _python_m(module, "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith(f"usage: {script} "), shown.stdout[:300]  # not `train.py`, nor `cli.py`
    refused = _python_m(module, "--no-such-option", cwd=tmp_path)
    assert refused.returncode == 2, (refused.stdout[-1000:], refused.stderr[-2000:])
    assert "usage:" in refused.stderr and script in refused.stderr, refused.stderr[-2000:]
