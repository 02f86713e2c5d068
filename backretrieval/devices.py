"""The one check of a torch device (``--device`` of every tool, and ``device=`` of the Python API): a device this
machine lacks is one line before any work, not torch's traceback from the first tensor moved."""
from __future__ import annotations

import argparse
from typing import Callable

from .errors import BackRetrievalError


def check_device(device: object, error: Callable[[str], Exception] = BackRetrievalError) -> str:
    """``device`` (a string or a ``torch.device``; ``None`` is torch's default, ``cpu``) as the string torch reads,
    when this machine has it; else ``error`` with one line ``device: VALUE: why`` (``VALUE: why`` for
    :class:`argparse.ArgumentTypeError`, whose message argparse starts with the flag): a typo such as ``gpu``,
    ``cuda`` without a GPU, ``cuda:3`` with one, ``mps`` off a Mac. torch is imported only for a device other than
    ``cpu``."""
    text = "cpu" if device is None else str(device)
    why = None if text == "cpu" else _lacking(text)
    if why is None:
        return text
    flagged = isinstance(error, type) and issubclass(error, argparse.ArgumentTypeError)  # argparse names --device
    raise error(why if flagged else f"device: {why}")


def _lacking(text: str) -> str | None:
    """Why this machine has no torch device ``text`` (``VALUE: why``), or None when it has it."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        return f"expected a torch device (cpu, cuda, cuda:1, mps, ...), got {text!r}"
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            return f"{text}: torch sees no CUDA device on this machine (use cpu)"
        if device.index is not None and device.index >= count:
            return f"{text}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            return f"{text}: MPS is not available on this machine (use cpu)"
    elif device.type != "cpu":  # xpu, hpu, meta (no data), ...: torch.<type>.is_available() where torch has one
        backend = getattr(torch, device.type, None)
        available = getattr(backend, "is_available", None)
        if not callable(available) or not available():
            return f"{text}: torch has no usable {device.type} device on this machine (use cpu)"
    return None


def torch_device(text: str) -> str:
    """argparse type: a torch device this machine has (:func:`check_device`), so a typo or a GPU that is not there is
    a one-line usage error (exit 2) before any work, not a traceback after it."""
    return check_device(text, argparse.ArgumentTypeError)
