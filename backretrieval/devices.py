"""The ``--device`` value of the command-line tools, checked when the command line is read."""
from __future__ import annotations

import argparse


def torch_device(text: str) -> str:
    """argparse type: a torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ...), so a typo or a
    GPU that is not there is a one-line usage error (exit 2) before any work, not a traceback after it. torch is
    imported only for a device other than ``cpu``."""
    if text == "cpu":
        return text
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a torch device (cpu, cuda, cuda:1, mps, ...), got {text!r}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text}: torch sees no CUDA device on this machine (use cpu)")
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(f"{text}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise argparse.ArgumentTypeError(f"{text}: MPS is not available on this machine (use cpu)")
    elif device.type != "cpu":  # xpu, hpu, meta (no data), ...: torch.<type>.is_available() where torch has one
        backend = getattr(torch, device.type, None)
        available = getattr(backend, "is_available", None)
        if not callable(available) or not available():
            raise argparse.ArgumentTypeError(f"{text}: torch has no usable {device.type} device on this machine "
                                             f"(use cpu)")
    return text
