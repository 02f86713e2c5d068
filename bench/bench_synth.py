"""Benchmark the synthetic world: generation rate (images/s) with one worker and with all
cores, and the shard read rate (samples/s decoded with ``iter_samples``).

    .venv/bin/python bench/bench_synth.py                 # 20,000 64x64 scenes
    .venv/bin/python bench/bench_synth.py --images 5000   # quicker

The baseline is the single-process run measured in the same invocation; the parallel
run is reported as a speed-up over it.
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from data_prep.shards import iter_samples
from data_prep.synth import SynthConfig, generate
from globetrotter.argtypes import positive_int
from globetrotter.errors import run_cli


def _cpu_seconds() -> float:
    """User+system CPU time of this process and its reaped children (the worker pool)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def generation_rate(images: int, image_size: int, workers: int, out: Path, image_format: str) -> tuple[float, float]:
    """Wall-clock images/s of a full ``generate`` (render, caption, encode, write) of ``images``
    train scenes, and CPU milliseconds per image (all processes; robust to a busy machine)."""
    cfg = SynthConfig(train_images=images, val_images=1, test_images=1, image_size=image_size,
                      workers=workers, image_format=image_format)
    cpu = _cpu_seconds()
    summary = generate(cfg, out, progress=False)
    return (images + 2) / summary["seconds"], 1000 * (_cpu_seconds() - cpu) / (images + 2)


def read_rate(split_dir: Path) -> tuple[float, int]:
    """Samples/s decoded (image + json) by ``iter_samples`` over one split."""
    start = time.perf_counter()
    n = sum(1 for _ in iter_samples(split_dir))
    return n / (time.perf_counter() - start), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=20000, help="train scenes to generate per run (default 20000)")
    parser.add_argument("--image-size", type=positive_int, default=64, help="image side in pixels (default 64)")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                        help="processes of the parallel run, at least 1 (default: the machine's cores)")
    parser.add_argument("--image-format", choices=("jpg", "png"), default="jpg",
                        help="encoding of the generated images (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_synth_") as tmp:
        print(f"{args.images} scenes of {args.image_size}x{args.image_size}, {args.image_format}, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        single, cpu1 = generation_rate(args.images, args.image_size, 1, Path(tmp) / "w1", args.image_format)
        print(f"generation, 1 worker        : {single:8.0f} images/s  ({args.images / single:.1f} s; "
              f"{cpu1:.2f} CPU-ms/image)")
        parallel, cpun = generation_rate(args.images, args.image_size, args.workers, Path(tmp) / "wn",
                                         args.image_format)
        print(f"generation, {args.workers:>2} workers      : {parallel:8.0f} images/s  "
              f"({args.images / parallel:.1f} s; {cpun:.2f} CPU-ms/image; {parallel / single:.2f}x the 1-worker run)")
        rate, n = read_rate(Path(tmp) / "wn" / "train")
        print(f"shard read (iter_samples)   : {rate:8.0f} samples/s decoded ({n} samples, {args.image_format}; "
              f"{rate / parallel:.1f}x the {args.workers}-worker generation)")


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
