"""``backretrieval`` command line: score embedding files, evaluate a shard dataset, run the protocol.

Each command writes one JSON record (and PNG plots where it makes sense) so results can
be collected into tables; ``--help`` of each command explains the metric.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np

from .errors import BackRetrievalError, run_cli
from .ranking import TIES

METRIC_HELP = """\
BackRetrieval (Fain, Twomey & Bollegala, SIGIR 2021) judges a cross-lingual text model f
without parallel text, using images as the pivot. For each source-language caption T_S^q
with image I_S^q:
  1-2. retrieve the nearest target-language caption T_T* by cosine of f (ties: lowest index);
  3.   rank all source images by the image similarity g(I_T*, I_S) (cosine of CNN features);
  4.   rank_q = rank of the query's own image I_S^q (1 = best).
BkR Recall@K = share of queries with rank_q <= K. Images shared by several source captions
are ranked once. Ties in g follow --ties: pessimistic (tied images count as above,
default), optimistic (they do not), expected (expectation over random tie orders).
XLR Recall@K is the ground-truth cross-lingual retrieval metric (rank of the true
translation among all target captions), computable only with parallel data; CORR is the
paper's baseline: Spearman between text and image cosine distances over source x target
pairs. A good BkR tracks XLR across models (the paper reports Pearson ~0.98).

Every figure comes with a bootstrap 95% interval over queries (--bootstrap replicates of
the per-query hits; 0 turns it off); --retrieval csls retrieves by CSLS instead of the
cosine (hub captions penalised) and the record reports the hubness of the retrieval
(skewness of the k-occurrence, share of queries landing on the top 1% hubs);
--approximate finds the text neighbours with a compressed faiss index (exact re-scoring) and
the retrieved targets' best source images likewise (compressed codes re-scored exactly; better
images counted only up to K): for large N; --image-index FILE keeps each target image's
best source images (computed once per image set: with --approximate from compressed codes
re-scored exactly, else exact) so that step 4 is a lookup for every model scored on the
same images.
"""


MODEL_SPECS = (
    "Model specs: npy:PATH (rows looked up by text in a PATH.texts.json list; without it, one row per caption of "
    "the split, in shard order) | use | st:MODEL | random:DIM[:SEED] | "
    "noisy:STD[:SEED]:SPEC | globetrotter:CKPT_DIR | any PREFIX:ARG of the 'backretrieval.embedders' entry "
    "points; prefix NAME= to label a model (e.g. USE-M=use)."
)


def _describe(*paragraphs: str) -> str:
    return METRIC_HELP + "".join("\n" + textwrap.fill(p, 88) + "\n" for p in paragraphs)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def _load_npy(path: str, what: str, check_finite: bool = True) -> np.ndarray:
    """A .npy file as a read-only memmap; one-line errors name the file (missing, unreadable, NaN rows)."""
    p = Path(path)
    if not p.is_file():
        raise BackRetrievalError(f"{p}: {what} file not found")
    try:
        array = np.load(p, mmap_mode="r")
    except (ValueError, OSError) as err:
        raise BackRetrievalError(f"{p}: {what} is not a readable .npy file ({err})") from None
    if check_finite and array.dtype.kind == "f" and array.ndim == 2:
        bad = [s + np.flatnonzero(~np.isfinite(np.asarray(array[s:s + 8192])).all(axis=1))
               for s in range(0, len(array), 8192)]
        bad = np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)
        if len(bad):
            raise BackRetrievalError(f"{p}: {what} has {len(bad)} of {len(array)} rows with NaN or inf "
                                     f"(first: row {int(bad[0])})")
    return array


def _same_rows(items: Sequence[tuple[str, np.ndarray]], what: str) -> None:
    """One-line error when arrays that must be row-aligned differ in length, naming the files."""
    counts = {path: len(array) for path, array in items}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{path} has {n}" for path, n in counts.items())
        raise BackRetrievalError(f"row counts differ ({what}): {listed}")


def _enough_for_k(path: str, n: int, ks: Sequence[int], what: str) -> None:
    if n < max(ks):
        raise BackRetrievalError(f"{path}: {n} {what}, fewer than the largest K ({max(ks)}): Recall@{max(ks)} "
                                 "would be 1 for any model; lower --ks or use more data")


def _clean(obj):
    """JSON-ready copy: arrays to lists, numpy scalars to Python, NaN/inf to null."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _write_json(record: dict, out: str | Path | None) -> None:
    text = json.dumps(_clean(record), indent=2, ensure_ascii=False)
    if out is None or str(out) == "-":
        print(text)
        return
    _write_file(out, lambda path: path.write_text(text + "\n", encoding="utf-8"), "the JSON record")
    print(f"wrote {out}", file=sys.stderr)


def _save_npy(path: str | Path, array: np.ndarray, what: str) -> None:
    _write_file(path, lambda p: np.save(p, array), what)


def _write_file(path: str | Path, write, what: str) -> None:
    """``write(path)`` after creating its folder; an OS error becomes a one-line user error."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as err:
        raise BackRetrievalError(f"{path}: cannot write {what} ({err.strerror or err})") from None


def _add_metric_options(p: argparse.ArgumentParser, full_ranks: bool = False) -> None:
    p.add_argument("--ks", type=int, nargs="+", default=[1, 5, 10], metavar="K",
                   help="the K of Recall@K, several at once (default: 1 5 10; the paper uses 10)")
    p.add_argument("--ties", choices=TIES, default="pessimistic",
                   help="how images (or texts, for XLR) with exactly equal scores rank (default: pessimistic)")
    p.add_argument("--max-rank", type=int, metavar="N", default=None,
                   help="stop counting a query's rank above N (reported as N+1): same Recall@K for K <= N, much faster "
                        "for weak models (default: " + ("exact ranks" if full_ranks else "the largest K") + ")")


def _add_beyond_paper_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", type=int, default=1000, metavar="B",
                   help="bootstrap replicates over queries for the intervals (default: 1000; 0: no intervals)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default: 0.95)")
    p.add_argument("--retrieval", choices=("cosine", "csls"), default="cosine",
                   help="text retrieval criterion: cosine (the paper) or CSLS, which penalises hub captions "
                        "(Conneau et al. 2018; default: cosine)")
    p.add_argument("--csls-k", type=int, default=10, metavar="K", help="CSLS neighbourhood size (default: 10)")
    p.add_argument("--approximate", action="store_true",
                   help="for large N: text neighbours from a compressed faiss index (candidates re-scored exactly), "
                        "and the retrieved targets' best source images from compressed image codes (re-scored "
                        "exactly); better images counted only up to the largest K (ranks above it censored)")
    p.add_argument("--ann", choices=("pq", "ivf"), default="pq",
                   help="with --approximate: the candidate index: pq (64 principal directions, 4-bit codes, every "
                        "target scanned) or ivf (k-means cells, --nprobe of them visited) (default: pq)")
    p.add_argument("--candidates", type=int, default=128, metavar="C",
                   help="with --approximate: text candidates per query re-scored exactly (default: 128)")
    p.add_argument("--approx-image-side", choices=("pq", "exact"), default="pq",
                   help="with --approximate and no --image-index: step 4 from compressed-code image lists of the "
                        "retrieved targets (pq) or the exact count of better images up to the largest K (exact: "
                        "slower) (default: pq)")
    p.add_argument("--nprobe", type=int, default=32,
                   help="with --approximate --ann ivf: cells visited per query (more: slower, closer to exact; "
                        "default: 32)")


def _add_image_index_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image-index", metavar="NPZ",
                   help="image neighbour lists: read from NPZ when it exists, else computed (see "
                        "--image-index-method) and written there. Step 4 becomes a lookup (ranks above the largest "
                        "K censored); the lists depend only on the images, so reuse the file for every text model "
                        "scored on them")
    p.add_argument("--image-index-method", choices=("pq", "flat"),
                   help="how a new --image-index file is built: pq (256 candidates per target image from 4-bit codes "
                        "of 64 principal directions, re-scored exactly: fast, approximate) or flat (exact faiss "
                        "search, one N_t x N_s pass over the full features) (default: pq with --approximate, "
                        "else flat)")


def _approx(args: argparse.Namespace):
    from .approximate import ApproxConfig

    if not args.approximate:
        return False
    return ApproxConfig(index=args.ann, nprobe=args.nprobe, candidates=args.candidates, seed=args.seed,
                        image_side=args.approx_image_side)


def _image_index(args: argparse.Namespace, src_img, tgt_img, src_image_ids=None):
    """``--image-index``: the lists read from the file, or computed and written there (None without it).

    Whether they belong to these images is checked by ``bkr_recall``, which names the file.
    """
    from dataclasses import replace

    from .image_index import DEFAULT_NEIGHBOURS, image_neighbours, load_image_neighbours, save_image_neighbours

    if not getattr(args, "image_index", None):
        return None
    if src_img is None:
        raise BackRetrievalError("--image-index needs --src-img and --tgt-img (image features), not --image-sim")
    path = Path(args.image_index)
    if path.exists():
        lists = load_image_neighbours(path)
        if lists.method != "flat" and not args.approximate:
            print(f"note: {path} holds approximate ({lists.method}) image lists: step 4 is approximate",
                  file=sys.stderr)
        return lists
    method = args.image_index_method or ("pq" if args.approximate else "flat")
    lists = image_neighbours(src_img, tgt_img, max(DEFAULT_NEIGHBOURS, max(args.ks)), src_image_ids=src_image_ids,
                             method=method, seed=args.seed)
    _write_file(path, lambda p: save_image_neighbours(p, lists), "--image-index")
    print(f"wrote {path} ({lists.n_targets} x {lists.n_neighbours} image neighbours, {method})", file=sys.stderr)
    return replace(lists, origin=str(path))


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image-model", default="resnet50", metavar="G",
                   help="the image similarity g: a timm model whose pooled last-layer features define it (default: "
                        "resnet50, as in the paper); thumbnail:SIZE (the image's SIZE x SIZE pixels, flattened: a "
                        "degraded g); random[:SEED] (a Gaussian vector per image: the null g, BkR at chance)")
    p.add_argument("--image-weights", default=None, metavar="W",
                   help="image model weights: a local .pth/.safetensors file; 'package' (offline EfficientNet-Lite0, "
                        "use with --image-model efficientnet_lite0); 'hub' (download, needs --online); 'random' "
                        "(a randomly initialised CNN). Not needed when the split stores npy features, nor for "
                        "thumbnail/random g")
    p.add_argument("--online", action="store_true",
                   help="allow downloads (timm hub weights, sentence-transformers models); off by default")
    p.add_argument("--batch-size", type=int, default=32, help="image batch size for feature extraction (default: 32)")
    p.add_argument("--device", default="cpu", help="torch device for the image model (default: cpu)")
    default_cache = os.environ.get("BACKRETRIEVAL_CACHE", str(Path.home() / ".cache" / "backretrieval"))
    p.add_argument("--cache-dir", default=default_cache,
                   help="image-feature cache, keyed by model, weights and image set "
                        "(default: $BACKRETRIEVAL_CACHE or ~/.cache/backretrieval)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backretrieval", description=METRIC_HELP, formatter_class=_formatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("score", help="BkR/XLR/CORR from embedding files (.npy)", formatter_class=_formatter,
                       description=_describe("Scores precomputed embeddings: row i of --src-text describes row i of "
                                             "--src-img (likewise for the target side)."))
    p.add_argument("--src-text", required=True, metavar="NPY", help="(Ns, d) source-language text embeddings")
    p.add_argument("--tgt-text", required=True, metavar="NPY", help="(Nt, d) target-language text embeddings")
    p.add_argument("--src-img", metavar="NPY", help="(Ns, D) image features of the source captions' images")
    p.add_argument("--tgt-img", metavar="NPY", help="(Nt, D) image features of the target captions' images")
    p.add_argument("--image-sim", metavar="NPY",
                   help="(Nt, Ns) precomputed image similarity g(I_T, I_S), instead of --src-img/--tgt-img")
    p.add_argument("--src-image-ids", metavar="TXT",
                   help="one image id per line for the source rows; rows sharing an id are one picture, ranked once")
    p.add_argument("--xlr-tgt-text", metavar="NPY",
                   help="parallel ground truth: target-language embeddings of the source rows' translations (for XLR)")
    p.add_argument("--xlr-gt", metavar="NPY",
                   help="int index per source row into --xlr-tgt-text (default: row i is the translation of row i)")
    p.add_argument("--corr-pairs", type=int, default=1_000_000, help="pairs sampled for CORR (default: 1000000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the CORR pair sample (default: 0)")
    p.add_argument("--ranks-out", metavar="NPY", help="also save the per-query BkR ranks")
    p.add_argument("--hits-out", metavar="NPY",
                   help="also save the per-query BkR hits, one column per K (for 'compare --hits')")
    p.add_argument("--out", metavar="JSON", help="write the JSON record here (default: print it)")
    _add_metric_options(p, full_ranks=True)
    _add_beyond_paper_options(p)
    _add_image_index_option(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("compare", help="does model A beat model B on the same data? (McNemar, paired bootstrap)",
                       formatter_class=_formatter, description=_describe(
                           "Compares two text models on the same queries: BkR@K (and XLR@K with parallel "
                           "embeddings) of A and B, their difference with a paired-bootstrap interval, McNemar's "
                           "exact test on the queries where exactly one model hits, and the p-value. The verdict "
                           "is A, B or tie (no difference at --alpha; the larger p-value of the tests run). Give "
                           "either embeddings (--a-src-text ... with the shared image files) or two hit files "
                           "written by 'score --hits-out' on the same data (--hits A.npy B.npy)."))
    p.add_argument("--a-src-text", metavar="NPY", help="model A: (Ns, d) source-language text embeddings")
    p.add_argument("--a-tgt-text", metavar="NPY", help="model A: (Nt, d) target-language text embeddings")
    p.add_argument("--b-src-text", metavar="NPY", help="model B: (Ns, d') source-language text embeddings")
    p.add_argument("--b-tgt-text", metavar="NPY", help="model B: (Nt, d') target-language text embeddings")
    p.add_argument("--src-img", metavar="NPY", help="(Ns, D) image features of the source captions' images")
    p.add_argument("--tgt-img", metavar="NPY", help="(Nt, D) image features of the target captions' images")
    p.add_argument("--a-xlr-tgt-text", metavar="NPY", help="model A: embeddings of the source rows' translations (XLR)")
    p.add_argument("--b-xlr-tgt-text", metavar="NPY", help="model B: embeddings of the source rows' translations (XLR)")
    p.add_argument("--hits", nargs=2, metavar=("A_NPY", "B_NPY"),
                   help="instead of embeddings: per-query hits of A and B ('score --hits-out'), compared at --ks")
    p.add_argument("--names", nargs=2, default=["A", "B"], metavar=("A", "B"), help="labels of the two models")
    p.add_argument("--tests", nargs="+", choices=("mcnemar", "bootstrap"), default=["mcnemar", "bootstrap"],
                   help="paired tests to run (default: both)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict (default: 0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of the candidate index (default: 0)")
    p.add_argument("--out", metavar="JSON", help="write the JSON record here (default: print it)")
    _add_metric_options(p, full_ranks=True)
    _add_beyond_paper_options(p)
    _add_image_index_option(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("eval", help="BkR for every language pair of a shard split, one or more models",
                       formatter_class=_formatter, description=_describe(
                           "Evaluates each model spec on every ordered language pair of a split folder written by "
                           "globetrotter-data (texts, langs, image_ids; XLR too where 'group' ties translations). "
                           "Languages that share images are split into non-matching halves. Writes results.json, a "
                           "heat map per model and metric, and a box plot over pairs (paper Fig. 3).", MODEL_SPECS))
    p.add_argument("--data", required=True, metavar="SPLIT_DIR", help="split folder (manifest.json + .tar shards)")
    p.add_argument("--model", action="append", required=True, metavar="SPEC", help="text model spec (repeatable)")
    p.add_argument("--langs", nargs="+", metavar="LANG", help="only these languages (default: all in the split)")
    p.add_argument("--max-per-lang", type=int, metavar="N", help="at most N source and N target captions per pair")
    p.add_argument("--seed", type=int, default=0, help="seed of the non-matching split and subsampling (default: 0)")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="where results.json and the PNGs go")
    _add_metric_options(p)
    _add_beyond_paper_options(p)
    _add_model_options(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("correlate", help="the paper's protocol: BkR vs XLR over models (Table 1, Fig. 2)",
                       formatter_class=_formatter, description=_describe(
                           "Protocol (paper 3.1): per seed, sample N source items and a disjoint (non-matching) set "
                           "of N target items of a parallel split; compute BkR and CORR on them and XLR on the source "
                           "items' own translations; then Pearson and Spearman of BkR vs XLR (and CORR vs XLR) over "
                           "the models, mean +- std over seeds. Writes protocol.json, table.md (Table 1) and a "
                           "scatter per pair (Fig. 2).", MODEL_SPECS))
    p.add_argument("--data", required=True, metavar="SPLIT_DIR",
                   help="a parallel split folder (captions tied by 'group')")
    p.add_argument("--models", nargs="+", default=[], metavar="SPEC", help="text model specs ([NAME=]SPEC), at least 2")
    p.add_argument("--models-file", metavar="TXT", help="more specs, one per line ('#' comments allowed)")
    p.add_argument("--pairs", nargs="+", metavar="SRC-TGT",
                   help="language pairs, e.g. en-de de-en (default: all ordered pairs)")
    p.add_argument("--n", type=int, metavar="N",
                   help="items per side and seed (default: min(10000, items // 2); paper: 10000)")
    p.add_argument("--seeds", type=int, default=25, help="number of seeds (default: 25, as in the paper)")
    p.add_argument("--corr-pairs", type=int, default=1_000_000, help="pairs sampled for CORR (default: 1000000)")
    p.add_argument("--report-k", type=int,
                   help="K used for the table and scatter (default: 10 if in --ks, else the largest)")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="where protocol.json, table.md and PNGs go")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="B",
                   help="bootstrap replicates over queries: per seed and model, an interval for every BkR / XLR / "
                        "CORR figure in protocol.json (default: 1000; 0: none)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default: 0.95)")
    p.add_argument("--retrieval", choices=("cosine", "csls"), default="cosine",
                   help="text retrieval for BkR step 2 and XLR ranks: cosine (the paper) or CSLS (default: cosine)")
    _add_metric_options(p)
    _add_model_options(p)
    p.set_defaults(func=cmd_correlate)
    return parser


def parse_model_specs(specs: Sequence[str]) -> dict[str, str]:
    """``[NAME=]SPEC`` strings -> {label: spec}; the label defaults to the spec itself."""
    out: dict[str, str] = {}
    for raw in specs:
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        name, eq, spec = raw.partition("=")
        if not eq or ":" in name:
            name, spec = raw, raw
        if name in out:
            raise BackRetrievalError(f"model {name!r} given twice")
        out[name] = spec
    return out


def _image_side(args: argparse.Namespace, n_src: int, n_tgt: int, src_path: str, tgt_path: str):
    """(src_img, tgt_img, image_sim) from --src-img/--tgt-img or --image-sim, row counts checked."""
    if getattr(args, "image_sim", None):
        if args.src_img or args.tgt_img:
            raise BackRetrievalError("give either --image-sim or --src-img/--tgt-img, not both")
        image_sim = _load_npy(args.image_sim, "--image-sim")
        if image_sim.shape != (n_tgt, n_src):
            raise BackRetrievalError(f"{args.image_sim}: --image-sim has shape {image_sim.shape}, expected "
                                     f"({n_tgt}, {n_src}) = ({tgt_path} rows, {src_path} rows)")
        return None, None, image_sim
    if args.src_img and args.tgt_img:
        src_img, tgt_img = _load_npy(args.src_img, "--src-img"), _load_npy(args.tgt_img, "--tgt-img")
        _same_rows([(src_path, np.empty(n_src)), (args.src_img, src_img)], "source texts vs images")
        _same_rows([(tgt_path, np.empty(n_tgt)), (args.tgt_img, tgt_img)], "target texts vs images")
        return src_img, tgt_img, None
    raise BackRetrievalError("the image side is missing: give --src-img and --tgt-img, or --image-sim")


def _src_image_ids(args: argparse.Namespace, n_src: int) -> list[str] | None:
    if not getattr(args, "src_image_ids", None):
        return None
    path = Path(args.src_image_ids)
    if not path.is_file():
        raise BackRetrievalError(f"{path}: --src-image-ids file not found")
    ids = path.read_text(encoding="utf-8").splitlines()
    if len(ids) != n_src:
        raise BackRetrievalError(f"{path}: {len(ids)} image ids, expected {n_src} (one per --src-text row)")
    return ids


def _metric_kwargs(args: argparse.Namespace) -> dict:
    return {"ties": args.ties, "max_rank": args.max_rank, "retrieval": args.retrieval, "csls_k": args.csls_k,
            "approximate": _approx(args)}


def _intervals(result: dict, args: argparse.Namespace) -> dict:
    from .uncertainty import recall_intervals

    return recall_intervals(result, args.bootstrap, args.level, args.seed) if args.bootstrap > 0 else {}


def _print_summary(metrics: dict, intervals: dict) -> None:
    parts = []
    for name, value in metrics.items():
        ci = intervals.get(name)
        parts.append(f"{name}={value:.4f}" + (f" [{ci['lo']:.4f}, {ci['hi']:.4f}]" if ci else ""))
    print(", ".join(parts), file=sys.stderr)


def cmd_score(args: argparse.Namespace) -> int:
    from .metric import bkr_recall, corr_terms, xlr_recall
    from .uncertainty import corr_interval

    src_text, tgt_text = _load_npy(args.src_text, "--src-text"), _load_npy(args.tgt_text, "--tgt-text")
    src_img, tgt_img, image_sim = _image_side(args, len(src_text), len(tgt_text), args.src_text, args.tgt_text)
    ids = _src_image_ids(args, len(src_text))
    n_images = len(set(ids)) if ids is not None else len(src_text)
    _enough_for_k(args.src_img or args.image_sim, n_images, args.ks, "distinct source images")
    lists = _image_index(args, src_img, tgt_img, ids)
    bkr = bkr_recall(src_text, src_img, tgt_text, tgt_img, args.ks, src_image_ids=ids, image_sim=image_sim,
                     image_neighbours=lists, **_metric_kwargs(args))
    metrics = {f"bkr@{k}": bkr[f"bkr@{k}"] for k in args.ks}
    intervals = _intervals(bkr, args)
    if src_img is not None:
        terms = corr_terms(src_text, src_img, tgt_text, tgt_img, max_pairs=args.corr_pairs, seed=args.seed)
        ci = corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], len(src_text),
                           max(args.bootstrap, 1), args.level, args.seed)
        metrics["corr"] = ci["value"]
        if args.bootstrap > 0:
            intervals["corr"] = ci
    if args.xlr_tgt_text:
        gt = _load_npy(args.xlr_gt, "--xlr-gt") if args.xlr_gt else None
        xlr_tgt = _load_npy(args.xlr_tgt_text, "--xlr-tgt-text")
        if gt is None:
            _same_rows([(args.src_text, src_text), (args.xlr_tgt_text, xlr_tgt)], "XLR needs one translation per row")
        _enough_for_k(args.xlr_tgt_text, len(xlr_tgt), args.ks, "target texts for XLR")
        xlr = xlr_recall(src_text, xlr_tgt, args.ks, gt=gt, **_metric_kwargs(args))
        metrics.update({f"xlr@{k}": xlr[f"xlr@{k}"] for k in args.ks})
        intervals.update(_intervals(xlr, args))
    if args.ranks_out:
        _save_npy(args.ranks_out, bkr["ranks"], "--ranks-out")
    if args.hits_out:
        _save_npy(args.hits_out, np.stack([bkr["hits"][k] for k in args.ks], axis=1), "--hits-out")
    record = {"task": "backretrieval.score", "inputs": {k: v for k, v in vars(args).items() if k != "func"},
              "n_queries": bkr["n_queries"], "n_images": bkr["n_images"], "ties": args.ties,
              "retrieval": args.retrieval, "approximate": args.approximate,
              "image_neighbours": bkr["image_neighbours"], "metrics": metrics,
              "intervals": {"level": args.level, "replicates": args.bootstrap, **intervals} if intervals else None,
              "hubness": bkr["hubness"]}
    _write_json(record, args.out)
    _print_summary(metrics, intervals)
    return 0


def _compare_hits_files(args: argparse.Namespace) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    a_path, b_path = args.hits
    a, b = _load_npy(a_path, "hits of A"), _load_npy(b_path, "hits of B")
    a, b = (np.asarray(x, dtype=np.float64).reshape(len(x), -1) for x in (a, b))
    _same_rows([(a_path, a), (b_path, b)], "the same queries are needed for a paired comparison")
    if a.shape[1] != len(args.ks) or b.shape[1] != len(args.ks):
        raise BackRetrievalError(f"{a_path}, {b_path}: {a.shape[1]} and {b.shape[1]} hit columns, expected one per "
                                 f"--ks value ({args.ks}), as 'score --hits-out' writes them")
    return {f"bkr@{k}": (a[:, i], b[:, i]) for i, k in enumerate(args.ks)}


def _compare_embeddings(args: argparse.Namespace) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict]:
    from .metric import bkr_recall, xlr_recall

    needed = {"--a-src-text": args.a_src_text, "--a-tgt-text": args.a_tgt_text,
              "--b-src-text": args.b_src_text, "--b-tgt-text": args.b_tgt_text}
    missing = [flag for flag, value in needed.items() if not value]
    if missing:
        raise BackRetrievalError(f"compare needs {', '.join(missing)} (or --hits A.npy B.npy)")
    texts = {flag: _load_npy(path, flag) for flag, path in needed.items()}
    _same_rows([(args.a_src_text, texts["--a-src-text"]), (args.b_src_text, texts["--b-src-text"])], "source texts")
    _same_rows([(args.a_tgt_text, texts["--a-tgt-text"]), (args.b_tgt_text, texts["--b-tgt-text"])], "target texts")
    n_src, n_tgt = len(texts["--a-src-text"]), len(texts["--a-tgt-text"])
    src_img, tgt_img, _ = _image_side(args, n_src, n_tgt, args.a_src_text, args.a_tgt_text)
    _enough_for_k(args.src_img, n_src, args.ks, "source images")
    lists = _image_index(args, src_img, tgt_img)  # one set of lists for both models
    hits: dict[str, list] = {}
    hubness = {}
    for side in ("a", "b"):
        res = bkr_recall(texts[f"--{side}-src-text"], src_img, texts[f"--{side}-tgt-text"], tgt_img, args.ks,
                         image_neighbours=lists, **_metric_kwargs(args))
        hubness[side] = res["hubness"]
        for k in args.ks:
            hits.setdefault(f"bkr@{k}", []).append(res["hits"][k])
    if args.a_xlr_tgt_text or args.b_xlr_tgt_text:
        if not (args.a_xlr_tgt_text and args.b_xlr_tgt_text):
            raise BackRetrievalError("XLR comparison needs both --a-xlr-tgt-text and --b-xlr-tgt-text")
        for side, path in (("a", args.a_xlr_tgt_text), ("b", args.b_xlr_tgt_text)):
            par = _load_npy(path, f"--{side}-xlr-tgt-text")
            _same_rows([(getattr(args, f"{side}_src_text"), texts[f"--{side}-src-text"]), (path, par)],
                       "XLR needs one translation per source row")
            res = xlr_recall(texts[f"--{side}-src-text"], par, args.ks, **_metric_kwargs(args))
            for k in args.ks:
                hits.setdefault(f"xlr@{k}", []).append(res["hits"][k])
    return {m: (h[0], h[1]) for m, h in hits.items()}, hubness


def cmd_compare(args: argparse.Namespace) -> int:
    from .uncertainty import compare_hits

    if not 0 < args.alpha < 1:
        raise BackRetrievalError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.bootstrap < 1 and "bootstrap" in args.tests:
        raise BackRetrievalError("--bootstrap must be >= 1 for the paired bootstrap test")
    hubness = None
    if args.hits:
        per_metric = _compare_hits_files(args)
    else:
        per_metric, hubness = _compare_embeddings(args)
    name_a, name_b = args.names
    results = {}
    for metric, (a, b) in per_metric.items():
        res = compare_hits(a, b, args.tests, args.alpha, max(args.bootstrap, 1), args.level, args.seed)
        res["verdict"] = {"A": name_a, "B": name_b}.get(res["verdict"], "tie")
        results[metric] = res
        verdict = res["verdict"] if res["verdict"] != "tie" else "no significant difference"
        print(f"{metric}: {name_a} {res['a']:.4f} vs {name_b} {res['b']:.4f} (diff {res['diff']:+.4f}); "
              f"p = {res['p_value']:.4g} -> {verdict}", file=sys.stderr)
    record = {"task": "backretrieval.compare", "inputs": {k: v for k, v in vars(args).items() if k != "func"},
              "models": {"A": name_a, "B": name_b}, "alpha": args.alpha, "tests": args.tests,
              "retrieval": args.retrieval, "approximate": args.approximate, "comparisons": results,
              "hubness": hubness}
    _write_json(record, args.out)
    return 0


def _extractor(args: argparse.Namespace):
    """The g of --image-model/--image-weights (a bad spec fails here, before any data is read)."""
    from .images import image_feature_extractor

    return image_feature_extractor(args.image_model, args.image_weights, online=args.online,
                                   batch_size=args.batch_size, device=args.device, cache_dir=args.cache_dir,
                                   progress=not args.no_progress)


def _image_label(args: argparse.Namespace, data) -> str | None:
    """How g is named in the JSON records: MODEL:WEIGHTS for a CNN, the spec for thumbnail/random g."""
    if args.image_model.partition(":")[0] in ("thumbnail", "random"):
        return args.image_model
    return None if data.image_format == "npy" else f"{args.image_model}:{args.image_weights}"


def _embed_all(spec: str, texts: Sequence[str], args: argparse.Namespace, cache: dict) -> tuple[str, np.ndarray]:
    """Embed the distinct texts once; returns (embedder name, one row per input text).

    A positional embedder (``npy:`` without a texts sidecar) gets every text, in order.
    """
    from .embedders import embed_texts, is_positional, load_embedder

    embedder = load_embedder(spec, online=args.online, progress=not args.no_progress, cache=cache)
    if is_positional(embedder):  # its rows are the split's captions in shard order: do not sort or dedupe
        return embedder.name, embed_texts(embedder, [str(t) for t in texts])
    distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    return embedder.name, embed_texts(embedder, [str(t) for t in distinct])[inverse.reshape(-1)]


def cmd_eval(args: argparse.Namespace) -> int:
    from .data import image_features, load_split
    from .pairs import evaluate_pairs
    from .plots import pair_boxplot, pair_heatmap

    models = parse_model_specs(args.model)
    extractor = _extractor(args)
    data = load_split(args.data, args.langs)
    feats = image_features(data, extractor)[data.image_index]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = data.groups if data.has_groups else None
    image_model = _image_label(args, data)
    results, record = {}, {"task": "backretrieval.eval", "data": str(data.split_dir), "checksum": data.checksum,
                           "image_model": image_model,
                           "ks": args.ks, "ties": args.ties, "seed": args.seed, "max_per_lang": args.max_per_lang,
                           "max_rank": args.max_rank or max(args.ks), "retrieval": args.retrieval,
                           "approximate": args.approximate, "bootstrap": args.bootstrap, "level": args.level,
                           "models": {}}
    embedders: dict = {}
    for label, spec in models.items():
        name, emb = _embed_all(spec, data.texts, args, embedders)
        res = evaluate_pairs(emb, data.langs, feats, data.image_ids, args.ks, groups=groups,
                             max_per_lang=args.max_per_lang, seed=args.seed, ties=args.ties,
                             max_rank=args.max_rank or max(args.ks), bootstrap=args.bootstrap, level=args.level,
                             retrieval=args.retrieval, csls_k=args.csls_k, approximate=_approx(args))
        results[label] = res
        record["models"][label] = {"spec": spec, "embedder": name, "langs": res["langs"], "mean": res["mean"],
                                   "pairs": res["pairs"], "matrix": {m: v for m, v in res["matrix"].items()}}
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
        for metric in res["matrix"]:
            if metric.startswith(("bkr", "xlr")):
                png = out_dir / f"heatmap_{safe}_{metric.replace('@', '')}.png"
                pair_heatmap(res, metric, png, title=f"{label}: {metric}")
        print(f"{label}: " + ", ".join(f"{m}={v:.4f}" for m, v in res["mean"].items()), file=sys.stderr)
    k = max(args.ks)
    pair_boxplot(results, f"bkr@{k}", out_dir / f"boxplot_bkr{k}.png")
    _write_json(record, out_dir / "results.json")
    return 0


def cmd_correlate(args: argparse.Namespace) -> int:
    from .data import aligned_pair, image_features, load_split
    from .plots import scatter_bkr_vs_xlr
    from .protocol import format_table, run_protocol

    specs = list(args.models)
    if args.models_file:
        path = Path(args.models_file)
        if not path.is_file():
            raise BackRetrievalError(f"{path}: --models-file not found")
        specs += path.read_text(encoding="utf-8").splitlines()
    models = parse_model_specs(specs)
    if len(models) < 2:
        raise BackRetrievalError(f"correlate needs at least 2 model specs (got {len(models)}); 3 or more make sense")
    report_k = args.report_k or (10 if 10 in args.ks else max(args.ks))
    if report_k not in args.ks:
        raise BackRetrievalError(f"--report-k {report_k} is not one of --ks {args.ks}")
    pairs = []
    for raw in args.pairs or []:
        src, dash, tgt = raw.partition("-")
        if not dash or not src or not tgt or src == tgt:
            raise BackRetrievalError(f"--pairs: expected SRC-TGT with two different languages, got {raw!r}")
        pairs.append((src, tgt))
    langs = sorted({lang for pair in pairs for lang in pair}) or None
    extractor = _extractor(args)
    data = load_split(args.data, langs)
    if not pairs:
        names = sorted(set(data.langs.tolist()))
        pairs = [(a, b) for a in names for b in names if a != b]
    feats = image_features(data, extractor)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    embedders: dict = {}
    embedded = {label: _embed_all(spec, data.texts, args, embedders) for label, spec in models.items()}
    record = {"task": "backretrieval.correlate", "data": str(data.split_dir), "checksum": data.checksum,
              "image_model": _image_label(args, data),
              "models": {label: {"spec": models[label], "embedder": embedded[label][0]} for label in models},
              "ks": args.ks, "ties": args.ties, "retrieval": args.retrieval, "bootstrap": args.bootstrap,
              "level": args.level, "pairs": {}}
    table_rows = {}
    for src_lang, tgt_lang in pairs:
        src_rows, tgt_rows, image_idx = aligned_pair(data, src_lang, tgt_lang)
        n = args.n or min(10_000, len(image_idx) // 2)
        per_model = {label: (emb[src_rows], emb[tgt_rows]) for label, (_, emb) in embedded.items()}
        res = run_protocol(per_model, feats[image_idx], n=n, seeds=args.seeds, ks=args.ks, ties=args.ties,
                           max_rank=args.max_rank or max(args.ks), corr_pairs=args.corr_pairs,
                           progress=not args.no_progress, bootstrap=args.bootstrap, level=args.level,
                           retrieval=args.retrieval)
        label = f"{src_lang}->{tgt_lang}"
        record["pairs"][label] = res
        table_rows[label] = res["correlation"]
        scatter_bkr_vs_xlr(res, report_k, out_dir / f"scatter_{src_lang}-{tgt_lang}.png",
                           title=f"{label}: BkR vs XLR (seed {res['seeds'][0]}, N={res['n']})")
        c = res["correlation"][f"@{report_k}"]
        print(f"{label}: Pearson BkR {c['pearson']['bkr']['mean']:.3f}, CORR {c['pearson']['corr']['mean']:.3f}; "
              f"Spearman BkR {c['spearman']['bkr']['mean']:.3f}, CORR {c['spearman']['corr']['mean']:.3f}",
              file=sys.stderr)
    table = format_table(table_rows, report_k)
    (out_dir / "table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    _write_json(record, out_dir / "protocol.json")
    return 0


def _main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``backretrieval``; user errors print one line and exit with code 2."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
