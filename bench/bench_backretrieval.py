"""Benchmark BackRetrieval Recall@K against the naive reference, in the same run.

    nice -n 10 .venv/bin/python bench/bench_backretrieval.py                       # N = 1k, 10k
    nice -n 10 .venv/bin/python bench/bench_backretrieval.py --sizes 1000 10000 100000

Methods (all compute BkR Recall@1/5/10 on the same data):

* ``naive``  - the textbook implementation: float64 N x N text similarities, argmax,
  float64 N x N image similarities of each query's retrieved target, a full argsort per
  query and the position of the query's own image. Run only for N <= ``--naive-max``
  (its memory is about 3 N^2 x 8 bytes: 2.4 GB at N = 10k, 240 GB at 100k).
* ``exact``  - :func:`backretrieval.bkr_recall`, exact rank of every query
  (faiss top-1 text search; float32 tiles of image scores per distinct retrieved target).
* ``capped`` - the same with ``max_rank = max(K)``: identical Recall@K, ranks above 10
  censored; a row stops being scored once its queries have 10 better images.
* ``approx`` - ``approximate=True``: the text search through a faiss IVF index (nprobe 32,
  16 candidates re-scored exactly), the image side counted as in ``capped``. Printed with
  |dBkR@1| and |dBkR@10| against the exact recall of the same N in the same run
  (``exact``, else ``capped``: both give the exact Recall@K).

Data: synthetic, with structure (not pure noise): source and target items are
*different* scenes (non-matching sets, as in the paper's protocol) with a 64-d latent;
texts (dim 512) and images (dim 2048) are noisy linear views of the latent.

Each (N, method) runs in a fresh subprocess so that its memory is its own. Time is the
wall clock of the metric call (data generation excluded). Memory is the growth of the
peak resident set size during the call: ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
after minus before (Linux, KiB), i.e. extra memory beyond the inputs. Ratios are
naive / method, from the same run.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages, however installed

KS = (1, 5, 10)


def make_data(n: int, text_dim: int, image_dim: int, seed: int = 0, chunk: int = 8192) -> tuple[np.ndarray, ...]:
    """Source and target sets of n items each: (src_text, src_img, tgt_text, tgt_img), float32.

    Filled in row chunks so that generation leaves no large transient in the peak RSS.
    """
    rng = np.random.default_rng(seed)
    latent = 64
    to_text = rng.standard_normal((latent, text_dim), dtype=np.float32)
    to_image = rng.standard_normal((latent, image_dim), dtype=np.float32)
    out = []
    for _ in range(2):  # source side, then target side: different scenes
        text = np.empty((n, text_dim), dtype=np.float32)
        image = np.empty((n, image_dim), dtype=np.float32)
        for s in range(0, n, chunk):
            z = rng.standard_normal((min(chunk, n - s), latent), dtype=np.float32)
            text[s:s + chunk] = z @ to_text + 12.0 * rng.standard_normal((len(z), text_dim), dtype=np.float32)
            image[s:s + chunk] = z @ to_image + 12.0 * rng.standard_normal((len(z), image_dim), dtype=np.float32)
        out += [text, image]
    return tuple(out)


def naive_bkr(src_text, src_img, tgt_text, tgt_img, ks=KS) -> tuple[np.ndarray, dict]:
    """The straightforward reference: float64 N x N matrices and a full sort per query."""

    def unit(x):
        x = x.astype(np.float64)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    text_sim = unit(src_text) @ unit(tgt_text).T
    retrieved = text_sim.argmax(axis=1)
    del text_sim
    image_sim = unit(tgt_img)[retrieved] @ unit(src_img).T  # row q: g(I_T*(q), every source image)
    order = np.argsort(-image_sim, axis=1)
    del image_sim
    ranks = 1 + np.argmax(order == np.arange(len(order))[:, None], axis=1)
    return ranks, {k: float(np.mean(ranks <= k)) for k in ks}


def worker(n: int, method: str, text_dim: int, image_dim: int) -> dict:
    """Run one method once; returns time, peak-RSS growth and the recalls (plus ranks path)."""
    from backretrieval import bkr_recall

    data = make_data(n, text_dim, image_dim)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if method == "naive":
        ranks, recall = naive_bkr(*data)
        distinct = None
    else:
        res = bkr_recall(*data, ks=KS, max_rank=max(KS) if method == "capped" else None,
                         approximate=method == "approx")
        ranks, recall = res["ranks"], {k: res[f"bkr@{k}"] for k in KS}
        distinct = int(len(np.unique(res["retrieved"])))
    seconds = time.perf_counter() - start
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"n": n, "method": method, "seconds": seconds, "peak_rss_growth_mib": grown / 1024,
            "recall": recall, "distinct_retrieved": distinct, "ranks": ranks.tolist() if n <= 10_000 else None}


def run_isolated(n: int, method: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--sizes", str(n),
           "--text-dim", str(args.text_dim), "--image-dim", str(args.image_dim)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000], help="N values (default: 1000 10000)")
    parser.add_argument("--text-dim", type=int, default=512)
    parser.add_argument("--image-dim", type=int, default=2048)
    parser.add_argument("--naive-max", type=int, default=10_000, help="largest N for the naive reference")
    methods = ["naive", "exact", "capped", "approx"]
    parser.add_argument("--methods", nargs="+", default=methods, choices=methods, help="what to run (default: all)")
    parser.add_argument("--worker", choices=methods, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.sizes[0], args.worker, args.text_dim, args.image_dim)))
        return
    print(f"BkR Recall@{KS}; text dim {args.text_dim}, image dim {args.image_dim}; "
          "memory = peak RSS growth during the call (ru_maxrss delta)")
    header = f"{'N':>7} {'method':>7} {'seconds':>9} {'peak MiB':>9} {'x naive time':>12} {'x naive mem':>11} " \
             f"{'R@1':>7} {'R@10':>7} {'distinct':>8} {'ranks = naive':>13} {'|dR@1|':>7} {'|dR@10|':>7}"
    print(header)
    for n in args.sizes:
        results = {}
        for method in args.methods:
            if method == "naive" and n > args.naive_max:
                continue
            results[method] = r = run_isolated(n, method, args)
            naive = results.get("naive")
            ratio_t = f"{naive['seconds'] / r['seconds']:.1f}" if naive and method != "naive" else "-"
            ratio_m = f"{naive['peak_rss_growth_mib'] / max(r['peak_rss_growth_mib'], 1e-3):.1f}" \
                if naive and method != "naive" else "-"
            same = "-"
            if naive and method != "naive" and r["ranks"] is not None:
                a, b = np.asarray(naive["ranks"]), np.asarray(r["ranks"])
                if method in ("capped", "approx"):  # ranks above max(K) censored
                    a = np.where(a > max(KS), max(KS) + 1, a)
                same = f"{np.mean(a == b):.4f}"
            ref = results.get("exact") or results.get("capped")
            d1 = d10 = "-"
            if method == "approx" and ref:
                d1 = f"{abs(r['recall']['1'] - ref['recall']['1']):.4f}"
                d10 = f"{abs(r['recall']['10'] - ref['recall']['10']):.4f}"
            print(f"{n:>7} {method:>7} {r['seconds']:>9.2f} {r['peak_rss_growth_mib']:>9.1f} {ratio_t:>12} "
                  f"{ratio_m:>11} {r['recall']['1']:>7.4f} {r['recall']['10']:>7.4f} "
                  f"{str(r['distinct_retrieved'] or '-'):>8} {same:>13} {d1:>7} {d10:>7}", flush=True)


if __name__ == "__main__":
    main()
