"""Image decode rate of a split's stored images: PIL (``decode_image``) against torchvision.io, same run.

    python bench/bench_decode.py data/synth/train [--images 2000] [--repeats 3]

Reads ``--images`` encoded images of the split's shards into memory and prints images/s (best of
``--repeats``, one thread) and the ratio to PIL's decode, for: PIL to a PIL image (the baseline
of the ratios), PIL to a uint8 tensor, torchvision ``decode_image`` one image at a time
(the loader's :func:`~globetrotter.data.views.decode_rgb`), ``decode_jpeg`` on the list (batched input),
and, on a GPU, ``decode_jpeg(list, device="cuda")`` (nvJPEG, synchronised). Also checks that
torchvision's pixels equal PIL's.
"""
from __future__ import annotations

import argparse
import itertools
import time
from typing import Callable

import numpy as np
import torch

from globetrotter.argtypes import positive_int
from globetrotter.errors import run_cli


def best_rate(fn: Callable[[], object], n: int, repeats: int, sync: bool = False) -> float:
    """Images/s of ``fn`` (which decodes ``n`` images), best of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("split", help="a split folder (manifest.json + shards)")
    p.add_argument("--images", type=positive_int, default=2000, help="images decoded per run (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="runs per path; the best is kept (default %(default)s)")
    args = p.parse_args()

    from torchvision.io import ImageReadMode, decode_jpeg

    from data_prep.shards import decode_image, iter_raw
    from globetrotter.data.views import decode_rgb

    torch.set_num_threads(1)
    raw = [(ext, data) for _, ext, data, _ in itertools.islice(iter_raw(args.split), args.images)]
    n, jpegs = len(raw), [torch.frombuffer(bytearray(d), dtype=torch.uint8) for e, d in raw if e == "jpg"]
    cases: list[tuple[str, Callable[[], object], bool]] = [
        ("PIL decode_image (PIL image)", lambda: [decode_image(d, e) for e, d in raw], False),
        ("PIL -> uint8 tensor", lambda: [torch.from_numpy(np.array(decode_image(d, e))).permute(2, 0, 1)
                                         for e, d in raw], False),
        ("torchvision decode_rgb, one by one", lambda: [decode_rgb(d) for _, d in raw], False),
    ]
    if len(jpegs) == n:
        cases.append(("torchvision decode_jpeg, list", lambda: decode_jpeg(jpegs, mode=ImageReadMode.RGB), False))
        if torch.cuda.is_available():
            decode_jpeg(jpegs[:8], mode=ImageReadMode.RGB, device="cuda")  # nvJPEG's start-up, not timed
            cases.append(("torchvision decode_jpeg, list, cuda",
                          lambda: decode_jpeg(jpegs, mode=ImageReadMode.RGB, device="cuda"), True))
    shape = tuple(decode_rgb(raw[0][1]).shape)
    same = all(torch.equal(decode_rgb(d), torch.from_numpy(np.array(decode_image(d, e))).permute(2, 0, 1))
               for e, d in raw[:50])
    print(f"{args.split}: {n} images, {shape[2]}x{shape[1]}, {sum(len(d) for _, d in raw) // n} bytes each, "
          f"1 thread; torchvision's pixels equal PIL's: {same}")
    base = None
    for name, fn, sync in cases:
        rate = best_rate(fn, n, args.repeats, sync)
        base = base or rate
        print(f"{name:38s} {rate:9.0f} images/s  {rate / base:5.2f}x")


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
