"""Strict JSON text for the files data_prep writes (manifests, per-caption metadata, conversion summaries): a NaN or
±inf written as null, never Python's bare ``NaN``/``Infinity`` that other JSON readers refuse. (globetrotter and
backretrieval write theirs with :func:`backretrieval.records.json_text`; data_prep imports neither.)"""
from __future__ import annotations

import json
import math
from typing import Any, Callable


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) in its dicts, lists and tuples replaced by None."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(obj: Any, default: Callable[[Any], Any] | None = None, **options: Any) -> str:
    """The text of ``obj`` as strict JSON (:func:`finite`); ``default`` (as :func:`json.dumps` takes it) converts
    what JSON cannot hold, its result made finite too; ``options`` are :func:`json.dumps`'s (``indent``, ...)."""
    ready = None if default is None else (lambda o: finite(default(o)))
    return json.dumps(finite(obj), default=ready, allow_nan=False, **options)
