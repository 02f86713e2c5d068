"""Other-language neighbour mining at scale: the inverted-file search against the exact one, same run.

    .venv/bin/python bench/bench_neighbours.py --sizes 100000,1000000 --dim 256

Generated image embeddings (clusters of "scenes" plus noise, one of nine languages per image). For each size it
times the approximate search over every image (``method="ivf"``) and the exact search for a random sample of
``--sample`` query images; the exact time for all images is that sample's time scaled by n / sample (its cost is
linear in the queries). Recall@k is measured on the sample: the share of its exact neighbours the approximate
search returned. Prints one row per size and the log-log slope of each method's time between the last two sizes.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from globetrotter.argtypes import comma_separated, positive_int  # noqa: E402
from globetrotter.data.neighbours import (DEFAULT_NPROBE, exact_neighbours_of, neighbour_recall,  # noqa: E402
                                          other_language_neighbours)
from globetrotter.errors import UserError, run_cli  # noqa: E402

LANGS = np.array(["en", "de", "fr", "es", "ru", "el", "ja", "zh", "ar"])


def embeddings(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scenes = rng.normal(size=(max(n // 50, 10), dim)).astype(np.float32)
    x = scenes[rng.integers(0, len(scenes), n)] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32)
    return x, LANGS[rng.integers(0, len(LANGS), n)]


def check_sizes(sizes: list[int], dim: int, k: int) -> None:
    """Refuse (:class:`UserError`) a size given twice, or one where some language has fewer than ``k`` images in
    the other languages (the generated languages are checked, before any timing)."""
    twice = sorted({n for n in sizes if sizes.count(n) > 1})
    if twice:
        raise UserError(f"--sizes: {', '.join(map(str, twice))} given twice; give distinct sizes (the slope is "
                        f"between two different sizes)")
    for n in sizes:
        langs = embeddings(n, dim)[1]
        for lang in LANGS:
            others = int((langs != lang).sum())
            if others < k:
                raise UserError(f"--sizes {n}: only {others} of its images are in languages other than {lang}, "
                                f"fewer than --k {k}; give a larger size or a smaller --k")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=comma_separated(positive_int), default=[100_000, 1_000_000], metavar="N,N",
                   help="generated images per run, distinct, comma-separated (default: 100000,1000000)")
    p.add_argument("--dim", type=positive_int, default=256, help="embedding width (default %(default)s)")
    p.add_argument("--k", type=positive_int, default=10, help="neighbours per image (default %(default)s)")
    p.add_argument("--nprobe", type=positive_int, default=DEFAULT_NPROBE,
                   help="inverted lists searched per query (default %(default)s, the training's)")
    p.add_argument("--sample", type=positive_int, default=2000, help="query images searched exactly (default 2000)")
    p.add_argument("--threads", type=positive_int, default=None, help="faiss threads (default: faiss's choice)")
    args = p.parse_args()
    check_sizes(args.sizes, args.dim, args.k)
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    rows = []
    print(f"nprobe {args.nprobe}, k {args.k}")
    print(f"{'n':>9} {'ivf s':>8} {'exact s (est.)':>15} {'speed-up':>9} {'recall@k':>9}")
    for n in args.sizes:
        x, langs = embeddings(n, args.dim)
        sample = np.sort(np.random.default_rng(1).choice(n, size=min(args.sample, n), replace=False))
        start = time.perf_counter()
        exact = exact_neighbours_of(x, langs, args.k, sample)
        exact_s = (time.perf_counter() - start) * n / len(sample)
        start = time.perf_counter()
        approx = other_language_neighbours(x, langs, args.k, method="ivf", nprobe=args.nprobe)
        ivf_s = time.perf_counter() - start
        recall = neighbour_recall(approx[sample], exact)
        rows.append((n, ivf_s, exact_s))
        print(f"{n:>9} {ivf_s:>8.1f} {exact_s:>15.1f} {exact_s / ivf_s:>8.1f}x {recall:>9.3f}", flush=True)
    if len(rows) > 1:
        (n0, a0, e0), (n1, a1, e1) = rows[-2], rows[-1]
        slope = lambda t0, t1: math.log(t1 / t0) / math.log(n1 / n0)  # noqa: E731
        print(f"log-log slope {n0} -> {n1}: ivf {slope(a0, a1):.2f}, exact {slope(e0, e1):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
