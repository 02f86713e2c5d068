"""JSON records: JSON-ready values, their strict JSON text, and the versions a record is written with."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np


def json_ready(obj: Any) -> Any:
    """JSON-ready copy: arrays to lists, numpy scalars to Python, NaN/inf to null, paths to strings."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def json_text(obj: object, default: Callable[[Any], object] | None = None, **options: Any) -> str:
    """The text of ``obj`` as strict JSON, as every record, summary, settings or state file is written: through
    :func:`json_ready` (NaN and ±inf as null, never Python's bare ``NaN``/``Infinity`` that other JSON readers
    refuse). ``default`` (as :func:`json.dumps` takes it) converts what json_ready leaves alone, its result made
    JSON-ready too; ``options`` are :func:`json.dumps`'s (``indent``, ``ensure_ascii``, ...)."""
    ready = None if default is None else (lambda o: json_ready(default(o)))
    return json.dumps(json_ready(obj), default=ready, allow_nan=False, **options)


DISTRIBUTION = "globetrotter"  # pyproject.toml's project name: backretrieval ships in it (it imports no globetrotter)


def versions() -> dict:
    """The versions a record is written with: ``{"globetrotter", "numpy", "python"}``, the installed distribution's
    (None when running from a checkout that was never pip-installed), numpy's and Python's."""
    import importlib.metadata
    import platform

    try:
        package = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        package = None
    return {"globetrotter": package, "numpy": np.__version__, "python": platform.python_version()}


def dump_json(record: dict) -> str:
    """The text of a JSON record as the command line writes it (printed or in a file), with the :func:`versions` it
    was made with."""
    return json_text({**record, "versions": versions()}, indent=2, ensure_ascii=False)
