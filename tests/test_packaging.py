"""The project as installed from its wheel, used from another folder: each console script's module runs under
``python -m`` (as ``accelerate launch -m`` starts one)."""
from __future__ import annotations

import os
import re
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


UNSHIPPED = ("data", "runs", "outputs", "eval_out", ".venv", ".git", "build", "dist")


def _build(kind: str, tmp_path: Path, version: str | None = None) -> tuple[Path, str]:
    """Build the ``kind`` (sdist or wheel) of a copy of the checkout (so that the build's egg-info lands in the copy,
    not beside the packages), with a run's leftovers planted in it (and ``version`` as globetrotter.__version__);
    the archive, and what the build printed."""
    import shutil

    src = tmp_path / "src"
    bytecode = shutil.ignore_patterns("__pycache__", "*.egg-info")

    def ignore(folder: str, names: list[str]) -> set[str]:  # a run's folders at the top only (globetrotter/data is ours)
        return set(bytecode(folder, names)) | (set(names) & set(UNSHIPPED) if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, src, ignore=ignore)
    for leftover in ("data/synth/manifest.json", "runs/quickstart/config.yaml", "outputs/x.json", "eval_out/r.json",
                     "tests/__pycache__/test_x.cpython-311.pyc", "globetrotter/__pycache__/shell.cpython-311.pyc"):
        (src / leftover).parent.mkdir(parents=True, exist_ok=True)
        (src / leftover).write_text("{}\n")
    if version is not None:
        init = src / "globetrotter" / "__init__.py"
        init.write_text(re.sub(r'(?m)^__version__ = "[^"]*"', f'__version__ = "{version}"', init.read_text()))
    out = tmp_path / "dist"
    code = (f"import sys; from setuptools import build_meta as b; name = b.build_{kind}({str(out)!r}); "
            "print('imported:', sorted({'globetrotter', 'torch'} & set(sys.modules))); print(name)")
    done = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported: []" in done.stdout, done.stdout[-2000:]  # the version is read from the source, not imported
    return out / done.stdout.strip().splitlines()[-1], done.stdout + done.stderr


def test_the_sdist_is_the_full_source_release(tmp_path):
    """The sdist held the packages, the README and tests/test_*.py only: no tests/conftest.py (so its tests could not
    run), tests/scripts/, configs/ (train.py's default config), docs/, train.py, eval.py, bench/ or experiments/.
    MANIFEST.in adds them, and no run's data, outputs or bytecode."""
    import tarfile

    sdist, _ = _build("sdist", tmp_path)
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for shipped in ("train.py", "eval.py", "README.md", "pyproject.toml", "MANIFEST.in", "tests/conftest.py",
                    "tests/scripts/global_loss.py", "tests/test_packaging.py", "configs/quickstart.yaml",
                    "configs/zeroshot/xtd10.yaml", "docs/training.md", "docs/figures/image-vectors.png",
                    "bench/bench_train.py", "experiments/sentence_protocol.py", "globetrotter/shell.py",
                    "globetrotter/data/feature_cache.py",
                    "data_prep/synth/lexicons/en.yaml", "backretrieval/cli/__main__.py"):
        assert shipped in names, shipped
    assert not [n for n in names if n.split("/")[0] in UNSHIPPED or "__pycache__" in n or n.endswith(".pyc")], names


def test_the_wheel_holds_the_three_packages_only(tmp_path):
    """configs, docs, tests, bench and experiments stay out of the wheel (they are no packages of its)."""
    import zipfile

    wheel, _ = _build("wheel", tmp_path)
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    tops = {name.split("/")[0] for name in names}
    assert "globetrotter/data/feature_cache.py" in names and "data_prep/synth/lexicons/en.yaml" in names
    assert {t for t in tops if not t.endswith(".dist-info")} == {"globetrotter", "backretrieval", "data_prep"}, tops
    # PEP 561: without the marker a user's type checker ignores the packages' hints (tests/test_types.py keeps them true)
    assert {f"{package}/py.typed" for package in ("globetrotter", "backretrieval", "data_prep")} <= set(names)


def test_the_version_is_written_once_and_the_license_is_an_spdx_expression(tmp_path):
    """The version was written twice (pyproject.toml and globetrotter/__init__.py), and `license = { text = "MIT" }`
    made setuptools warn of its deprecation (by 2027-02). The build reads globetrotter.__version__ (without importing
    globetrotter or torch), and the metadata has License-Expression: MIT with the LICENSE file, with no warning."""
    import zipfile

    wheel, printed = _build("wheel", tmp_path, version="9.8.7")
    assert wheel.name == "globetrotter-9.8.7-py3-none-any.whl"
    assert "SetuptoolsDeprecationWarning" not in printed and "project.license" not in printed, printed[-3000:]
    with zipfile.ZipFile(wheel) as whl:
        metadata = whl.read("globetrotter-9.8.7.dist-info/METADATA").decode()
        assert whl.read("globetrotter-9.8.7.dist-info/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert "\nVersion: 9.8.7\n" in metadata and "\nLicense-Expression: MIT\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    assert "Copyright (c) 2026 The globetrotter authors" in (ROOT / "LICENSE").read_text()
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
