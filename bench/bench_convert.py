"""Conversion throughput (images/s) with resizing: one process vs. a pool on all cores.

Converts the Flickr8k data (Multi30K task 1 en/de/fr/cs + Flickr8k-CN zh, the five-language
dataset of docs/data.md) found in $GLOBETROTTER_SHARED/data/flickr8k (default: ../shared beside
the repository; set the variable to read your copy) with ``--resize``, once with one worker (the
baseline, measured in the same run) and once per requested worker count, and prints
images/s of the image phase (decode + resize + JPEG encode + shard write), the end-to-end
wall time, and the speed-up over the baseline. Without that folder it generates
``--synthetic`` random photos-like JPEGs instead; a folder that lacks images/, multi30k/ or
flickr8kcn/flickr8kzhc.caption.txt is a one-line error naming them.

The images of that folder are 224x224, so the default ``--resize 160`` makes every image go
through decode, resize and re-encode; ``--resize 224`` measures the pass-through path
(the original JPEG bytes are kept when no resizing is needed).

    nice -n 10 .venv/bin/python bench/bench_convert.py --max-images 1000
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data_prep.converters import ConvertOptions, ImageSpec, convert, read_flickr8k, read_multi30k  # noqa: E402
from globetrotter.argtypes import comma_separated, int_at_least, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402

TEST_FRACTION = 0.1  # of the converted images, as the converter's --test-fraction
MIN_IMAGES = 6  # round(TEST_FRACTION * n) >= 1: the test split is not empty
SHARED = Path(os.environ.get("GLOBETROTTER_SHARED", REPO.parent / "shared")) / "data" / "flickr8k"


def synthetic_source(folder: Path, n: int, size: tuple[int, int] = (500, 375)) -> list:
    """Write ``n`` noisy JPEGs of ``size`` and a Flickr8k-style token file; return its reader."""
    rng = np.random.default_rng(0)
    images = folder / "images"
    images.mkdir(parents=True)
    lines = []
    base = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    for i in range(n):
        arr = np.kron(np.roll(base, i, axis=1), np.ones((8, 8, 1), dtype=np.uint8))
        arr = np.clip(arr.astype(np.int16) + rng.integers(-20, 20, arr.shape), 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(images / f"{1000 + i}_abcdef.jpg", quality=90)
        lines += [f"{1000 + i}_abcdef.jpg#{k}\tcaption {i} {k}" for k in range(5)]
    (folder / "tokens.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [images, lambda: [read_flickr8k(folder / "tokens.txt", "en")]]


def shared_source(shared: Path) -> tuple[Path, Callable[[], list]]:
    """The image folder and the caption readers of the Flickr8k folder ``shared`` (Multi30K task 1 and Flickr8k-CN):
    a folder that lacks one of them is a one-line error naming what is missing, before any timing (a missing
    Flickr8k-CN file was reported as "--languages ...: no usable caption in zh", a flag the benchmark's user never typed;
    an empty image folder only after every caption record was read)."""
    images, multi30k = shared / "images", shared / "multi30k"
    cn = shared / "flickr8kcn" / "flickr8kzhc.caption.txt"
    missing = [str(path.relative_to(shared)) + ("/" if path.suffix == "" else "")
               for path, exists in ((images, images.is_dir() and any(images.iterdir())), (multi30k, multi30k.is_dir()),
                                    (cn, cn.is_file())) if not exists]
    if missing:
        raise UserError(f"{shared}: the Flickr8k folder lacks {', '.join(missing)} (it needs images/ with the photos, "
                        f"multi30k/ and flickr8kcn/flickr8kzhc.caption.txt); set GLOBETROTTER_SHARED to the folder "
                        f"that holds a complete data/flickr8k/, or pass --synthetic")
    return images, lambda: [read_multi30k(multi30k, (1,)), read_flickr8k(cn, "zh")]


def run_once(images: Path, sources: Callable[[], list], workers: int, args: argparse.Namespace, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    opts = ConvertOptions(out_dir=out, image_roots=[images], languages=args.languages, assign_languages=True,
                          test_fraction=TEST_FRACTION, val_fraction=0.05, limit_images=args.max_images, seed=0,
                          image=ImageSpec(args.resize, "shorter", 90), workers=workers, progress=False)
    t0 = time.perf_counter()
    report = convert(sources(), opts)
    wall = time.perf_counter() - t0
    assert report.balance() == 0
    return dict(images=report.timing["images"], image_s=report.timing["image_seconds"],
                ips=report.timing["images_per_s"], wall=wall, samples=report.total_written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-images", default=1000,
                        type=int_at_least(MIN_IMAGES, f"{TEST_FRACTION:.0%} of them make the test split"),
                        help=f"images converted per run, at least {MIN_IMAGES} (default %(default)s)")
    parser.add_argument("--resize", type=positive_int, default=160, help="shorter side in pixels (default 160)")
    parser.add_argument("--workers", type=comma_separated(positive_int), default=str(len(os.sched_getaffinity(0))),
                        help="comma-separated worker counts to compare with 1, each at least 1 (default: the number "
                             "of cores this process may use)")
    parser.add_argument("--repeats", type=positive_int, default=2, help="runs per setting; the best is kept (default 2)")
    parser.add_argument("--synthetic", action="store_true",
                        help="use generated 500x375 JPEGs even if the Flickr8k folder ($GLOBETROTTER_SHARED/data/flickr8k, "
                             "default ../shared/data/flickr8k beside the repository) exists")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_convert_"))
    try:
        if SHARED.is_dir() and not args.synthetic:
            images, sources = shared_source(SHARED)
            args.languages = ["en", "de", "fr", "cs", "zh"]
            data = f"shared Flickr8k ({images}, 224x224 JPEG)"
        else:
            images, sources = synthetic_source(tmp / "synthetic", args.max_images)
            args.languages = None
            data = "synthetic 500x375 JPEG"
        counts = [1] + [w for w in args.workers if w != 1]
        print(f"data: {data}; {args.max_images} images, --resize {args.resize}; cores: {os.cpu_count()}")
        print(f"{'workers':>8} {'images':>7} {'images/s':>9} {'image s':>8} {'wall s':>7} {'samples':>8} {'speed-up':>9}")
        base = None
        for workers in counts:
            best = max((run_once(images, sources, workers, args, tmp / "out") for _ in range(args.repeats)),
                       key=lambda r: r["ips"])
            base = base or best["ips"]
            print(f"{workers:>8} {best['images']:>7.0f} {best['ips']:>9.1f} {best['image_s']:>8.2f} "
                  f"{best['wall']:>7.2f} {best['samples']:>8} {best['ips'] / base:>8.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
