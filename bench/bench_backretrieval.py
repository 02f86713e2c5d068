r"""Benchmark BackRetrieval Recall@K against the naive reference, in the same run.

    nice -n 10 .venv/bin/python bench/bench_backretrieval.py                       # N = 1k, 10k
    nice -n 10 .venv/bin/python bench/bench_backretrieval.py --sizes 1000,10000,100000
    nice -n 10 .venv/bin/python bench/bench_backretrieval.py --sizes 10000,30000,100000 \
        --methods capped,approx-ivf,approx,lists                                  # the approximate modes
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_backretrieval.py --sizes 10000,100000 \
        --methods capped,lists-flat,lists                                         # fast vs exact image lists

Methods (all compute BkR Recall@1/5/10 on the same data):

* ``naive``  - the textbook implementation: float64 N x N text similarities, argmax,
  float64 N x N image similarities of each query's retrieved target, a full argsort per
  query and the position of the query's own image. Run only for N <= ``--naive-max``
  (its memory is about 3 N^2 x 8 bytes: 2.4 GB at N = 10k, 240 GB at 100k).
* ``exact``  - :func:`backretrieval.bkr_recall`, exact rank of every query
  (faiss top-1 text search; float32 tiles of image scores per distinct retrieved target).
* ``capped`` - the same with ``max_rank = max(K)``: identical Recall@K, ranks above 10
  censored; a row stops being scored once its queries have 10 better images.
* ``approx-ivf`` - ``ApproxConfig(index="ivf", pca_dim=0, candidates=16, image_side="exact")``: text
  candidates from a faiss IVF index over the full vectors (nprobe 32, 16 candidates re-scored
  exactly), the image side counted as in ``capped``.
* ``approx-count`` - ``ApproxConfig(image_side="exact")``: text candidates from 4-bit codes of 64
  principal directions, every target scanned (128 candidates re-scored exactly), image side as
  ``capped`` (the command line's ``--approximate --approx-image-side exact``).
* ``approx`` - ``approximate=True``: the same text side; the image side looked up in ``pq`` lists
  (below) built in the call for the distinct retrieved targets' images only: the ``lists`` row's
  Recall@K without a one-off for every target image.
* ``lists`` - ``approx`` with the image side looked up in image neighbour lists of every target image
  (:mod:`backretrieval.image_index`), built once with ``method="pq"``, the default of
  ``--approximate --image-index``: 256 source images per target image from 4-bit codes of 64
  principal directions, re-scored exactly, the best 32 kept.
* ``lists-flat`` - the same with exact lists (``method="flat"``: a full N x N x D faiss search).

The lists depend on the images only: their one-off build is printed apart ("one-off s"; with
``--image-cache DIR`` they are kept there and reused by later runs, else in a temporary
folder for the run), "seconds" is the cost per text model and "first s" the two together,
what the first model scored on an image set costs. When both list methods run, the ``lists``
row gives "list recall": the share of the exact lists' entries that its lists hold.

The approximate methods are printed with |dBkR@1| and |dBkR@10| against the exact recall of
the same N in the same run (``exact``, else ``capped``: both give the exact Recall@K), and
"same NN": the share of queries that retrieve the exact nearest caption, and with "x ref"
and "x ref 1st" the speed-up per model and for the first model against that reference's time.

Data: synthetic, with structure (not pure noise): source and target items are
*different* scenes (non-matching sets, as in the paper's protocol) with a 64-d latent;
texts (dim 512) and images (dim 2048) are noisy linear views of the latent.

Each (N, method) runs in a fresh subprocess so that its memory is its own, with ``--threads``
threads for faiss (``faiss.omp_set_num_threads``) and the BLAS alike (default 1). Time
is the wall clock of the metric call (data generation excluded). Memory is the growth of the
peak resident set size during the call (for ``lists``, their build included):
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after minus before (Linux, KiB), i.e. extra
memory beyond the inputs. Ratios are naive / method, from the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages, however installed

from globetrotter.argtypes import comma_separated, one_of, positive_int  # noqa: E402
from globetrotter.errors import run_cli  # noqa: E402

KS = (1, 5, 10)
METHODS = ["naive", "exact", "capped", "approx-ivf", "approx-count", "approx", "lists-flat", "lists"]  # run order
BenchData = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # (src_text, src_img, tgt_text, tgt_img)
APPROXIMATE = ("approx-ivf", "approx-count", "approx", "lists-flat", "lists")
LIST_METHODS = {"lists": "pq", "lists-flat": "flat"}  # bench method: image_neighbours method


def make_data(n: int, text_dim: int, image_dim: int, seed: int = 0, chunk: int = 8192) -> BenchData:
    """Source and target sets of n items each: (src_text, src_img, tgt_text, tgt_img), float32.

    Filled in row chunks so that generation leaves no large transient in the peak RSS.
    """
    rng = np.random.default_rng(seed)
    latent = 64
    to_text = rng.standard_normal((latent, text_dim), dtype=np.float32)
    to_image = rng.standard_normal((latent, image_dim), dtype=np.float32)

    def side() -> tuple[np.ndarray, np.ndarray]:
        text = np.empty((n, text_dim), dtype=np.float32)
        image = np.empty((n, image_dim), dtype=np.float32)
        for s in range(0, n, chunk):
            z = rng.standard_normal((min(chunk, n - s), latent), dtype=np.float32)
            text[s:s + chunk] = z @ to_text + 12.0 * rng.standard_normal((len(z), text_dim), dtype=np.float32)
            image[s:s + chunk] = z @ to_image + 12.0 * rng.standard_normal((len(z), image_dim), dtype=np.float32)
        return text, image

    src_text, src_img = side()  # source side, then target side: different scenes
    tgt_text, tgt_img = side()
    return src_text, src_img, tgt_text, tgt_img


def naive_bkr(src_text: np.ndarray, src_img: np.ndarray, tgt_text: np.ndarray, tgt_img: np.ndarray,
              ks: Sequence[int] = KS) -> tuple[np.ndarray, dict]:
    """The straightforward reference: float64 N x N matrices and a full sort per query."""

    def unit(x: np.ndarray) -> np.ndarray:
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


def lists_path(cache: str | None, n: int, image_dim: int, method: str) -> Path | None:
    """Where the ``cache`` keeps the image lists of one size and list method."""
    return Path(cache) / f"image_lists_{n}_{image_dim}_{method}.npz" if cache else None


def image_lists(data: BenchData, method: str, cache: str | None) -> tuple[object, float | None]:
    """Image neighbour lists of the bench data and their build seconds (None: read from ``cache``)."""
    from backretrieval.image_index import image_neighbours
    from backretrieval.image_index_file import load_image_neighbours, save_image_neighbours

    _, src_img, _, tgt_img = data
    path = lists_path(cache, len(src_img), src_img.shape[1], method)
    if path is not None and path.is_file():
        return load_image_neighbours(path), None
    start = time.perf_counter()
    lists = image_neighbours(src_img, tgt_img, method=method)
    seconds = time.perf_counter() - start
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_image_neighbours(path, lists)
    return lists, seconds


def metric_kwargs(method: str, lists: object) -> dict[str, Any]:
    """bkr_recall options of a method."""
    from backretrieval import ApproxConfig

    options: dict[str, dict[str, Any]] = {  # keyword arguments of several types
        "capped": {"max_rank": max(KS)},
        "approx-ivf": {"approximate": ApproxConfig(index="ivf", pca_dim=0, candidates=16, image_side="exact")},
        "approx-count": {"approximate": ApproxConfig(image_side="exact")},
        "approx": {"approximate": True},
        "lists": {"approximate": True, "image_neighbours": lists},
        "lists-flat": {"approximate": True, "image_neighbours": lists}}
    return options.get(method, {})


def worker(n: int, method: str, text_dim: int, image_dim: int, threads: int, cache: str | None) -> dict:
    """Run one method once; returns time, peak-RSS growth, the recalls, ranks and retrievals."""
    import faiss

    from backretrieval import bkr_recall

    faiss.omp_set_num_threads(threads)
    data = make_data(n, text_dim, image_dim)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # lists: their build included
    lists, one_off = image_lists(data, LIST_METHODS[method], cache) if method in LIST_METHODS else (None, None)
    start = time.perf_counter()
    retrieved = None
    if method == "naive":
        ranks, recall = naive_bkr(*data)
    else:
        res = bkr_recall(*data, ks=KS, **metric_kwargs(method, lists))
        ranks, recall, retrieved = res["ranks"], {k: res[f"bkr@{k}"] for k in KS}, res["retrieved"]
    seconds = time.perf_counter() - start
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"n": n, "method": method, "seconds": seconds, "one_off_seconds": one_off,
            "one_off": "cached" if method in LIST_METHODS and one_off is None else None,
            "peak_rss_growth_mib": grown / 1024, "recall": recall,
            "distinct_retrieved": None if retrieved is None else int(len(np.unique(retrieved))),
            "retrieved": None if retrieved is None else retrieved.tolist(),
            "ranks": ranks.tolist() if n <= 10_000 else None}


def run_isolated(n: int, method: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--sizes", str(n), "--text-dim", str(args.text_dim),
           "--image-dim", str(args.image_dim), "--threads", str(args.threads)]
    if args.image_cache:
        cmd += ["--image-cache", args.image_cache]
    threads = str(args.threads)  # set before numpy loads its BLAS
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:  # the worker's own last lines say why
        from globetrotter.errors import UserError

        said = " | ".join(proc.stderr.strip().splitlines()[-3:]) or "no output"
        raise UserError(f"the {method} worker at N={n} exited {proc.returncode}: {said}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def list_recall(n: int, args: argparse.Namespace) -> str:
    """Share of the exact (flat) lists' entries that the pq lists of size ``n`` hold, when both are in the cache."""
    from backretrieval.image_index_file import load_image_neighbours

    paths = [lists_path(args.image_cache, n, args.image_dim, m) for m in ("pq", "flat")]
    present = [p for p in paths if p is not None and p.is_file()]
    if len(present) < len(paths):
        return "-"
    pq, flat = (load_image_neighbours(p) for p in present)
    found = sum(len(np.intersect1d(a, b, assume_unique=True)) for a, b in zip(pq.ids, flat.ids))
    return f"{found / flat.ids.size:.4f}"


def compared(r: dict, results: dict) -> tuple[str, str, str, str, str, str]:
    """(ranks = naive, |dR@1|, |dR@10|, same NN, x ref, x ref first) of ``r`` against the reference runs of its N."""
    naive, ref = results.get("naive"), results.get("exact") or results.get("capped")
    same = d1 = d10 = nn = speed = speed_first = "-"
    if naive and r["method"] != "naive" and r["ranks"] is not None:
        a, b = np.asarray(naive["ranks"]), np.asarray(r["ranks"])
        if r["method"] != "exact":  # ranks above max(K) censored
            a = np.where(a > max(KS), max(KS) + 1, a)
        same = f"{np.mean(a == b):.4f}"
    if r["method"] in APPROXIMATE and ref:
        d1 = f"{abs(r['recall']['1'] - ref['recall']['1']):.4f}"
        d10 = f"{abs(r['recall']['10'] - ref['recall']['10']):.4f}"
        nn = f"{np.mean(np.asarray(r['retrieved']) == np.asarray(ref['retrieved'])):.3f}"
        speed = f"{ref['seconds'] / r['seconds']:.1f}"
        speed_first = f"{ref['seconds'] / (r['seconds'] + (r['one_off_seconds'] or 0.0)):.1f}"
    return same, d1, d10, nn, speed, speed_first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=comma_separated(positive_int), default=[1000, 10_000], metavar="N,N",
                        help="N values, comma-separated (default: 1000,10000)")
    parser.add_argument("--text-dim", type=positive_int, default=512,
                        help="width of the generated text embeddings (default %(default)s)")
    parser.add_argument("--image-dim", type=positive_int, default=2048,
                        help="width of the generated image embeddings (default %(default)s)")
    parser.add_argument("--naive-max", type=positive_int, default=10_000,
                        help="largest N for the naive reference (default %(default)s)")
    parser.add_argument("--methods", type=comma_separated(one_of(*METHODS)), default=METHODS, metavar="M,M",
                        help=f"what to run, comma-separated: {','.join(METHODS)} (default: all; they run in this "
                             "order)")
    parser.add_argument("--threads", type=positive_int, default=1, help="faiss and BLAS threads per run (default: 1)")
    parser.add_argument("--image-cache", metavar="DIR",
                        help="keep the list methods' image neighbour lists here and reuse them in later runs "
                             "(default: a temporary folder, the lists built in every run)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.sizes[0], args.worker, args.text_dim, args.image_dim, args.threads,
                                args.image_cache)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_bkr_lists_") as scratch:
        args.image_cache = args.image_cache or scratch  # the list recall compares the lists of two workers
        run_all(args)


def run_all(args: argparse.Namespace) -> None:
    print(f"BkR Recall@{KS}; text dim {args.text_dim}, image dim {args.image_dim}; {args.threads} thread(s); "
          "memory = peak RSS growth during the call (ru_maxrss delta); 'one-off s' = image lists, once per image set; "
          "'first s' = one-off + seconds; 'x ref' = exact/capped seconds over these")
    header = f"{'N':>7} {'method':>10} {'seconds':>9} {'one-off s':>9} {'first s':>8} {'peak MiB':>9} " \
             f"{'x naive time':>12} {'x naive mem':>11} {'R@1':>7} {'R@10':>7} {'distinct':>8} {'ranks = naive':>13} " \
             f"{'|dR@1|':>7} {'|dR@10|':>7} {'same NN':>7} {'x ref':>6} {'x ref 1st':>9} {'list recall':>11}"
    print(header)
    for n in args.sizes:
        results = {}
        for method in [m for m in METHODS if m in args.methods]:
            if method == "naive" and n > args.naive_max:
                continue
            results[method] = r = run_isolated(n, method, args)
            naive = results.get("naive")
            ratio_t = f"{naive['seconds'] / r['seconds']:.1f}" if naive and method != "naive" else "-"
            ratio_m = f"{naive['peak_rss_growth_mib'] / max(r['peak_rss_growth_mib'], 1e-3):.1f}" \
                if naive and method != "naive" else "-"
            one_off = r["one_off"] or (f"{r['one_off_seconds']:.1f}" if r["one_off_seconds"] is not None else "-")
            first = f"{r['seconds'] + r['one_off_seconds']:.1f}" if r["one_off_seconds"] is not None else "-"
            same, d1, d10, nn, speed, speed_first = compared(r, results)
            recall = list_recall(n, args) if method == "lists" else "-"
            print(f"{n:>7} {method:>10} {r['seconds']:>9.2f} {one_off:>9} {first:>8} {r['peak_rss_growth_mib']:>9.1f} "
                  f"{ratio_t:>12} {ratio_m:>11} {r['recall']['1']:>7.4f} {r['recall']['10']:>7.4f} "
                  f"{str(r['distinct_retrieved'] or '-'):>8} {same:>13} {d1:>7} {d10:>7} {nn:>7} {speed:>6} "
                  f"{speed_first:>9} {recall:>11}", flush=True)


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
