"""The versions a data_prep record is written with (a conversion's summary.json, a synthetic world's world.yaml)."""
from __future__ import annotations

import importlib.metadata
import platform

import numpy as np

DISTRIBUTION = "globetrotter"  # pyproject.toml's project name: data_prep ships in it (it imports no globetrotter)


def versions() -> dict:
    """``{"globetrotter", "numpy", "python"}``: the installed distribution's version (None when running from a
    checkout that was never pip-installed), numpy's and Python's."""
    try:
        package = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        package = None
    return {"globetrotter": package, "numpy": np.__version__, "python": platform.python_version()}
