"""``backretrieval score``: BkR / XLR / CORR of one model from embedding files (:func:`backretrieval.score`)."""
from __future__ import annotations

import argparse
import sys

from ..outputs import npy_path, save_npy, writable_file
from ..scoring import score
from .common import (APPROXIMATE_HELP, IMAGE_INDEX_HELP, add_command, add_embedding_metric_options, emit_json, inputs,
                     integer_at_least, metric_options, record_rank_cap, report_image_lists)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``score`` sub-command."""
    p = add_command(sub, "score", "BkR/XLR/CORR from embedding files (.npy)",
                    "Scores precomputed embeddings: row i of --src-text describes row i of --src-img (likewise for "
                    "the target side).", APPROXIMATE_HELP, IMAGE_INDEX_HELP)
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
    p.add_argument("--corr-pairs", type=integer_at_least(1), default=None,
                   help="pairs sampled for CORR, with --src-img/--tgt-img (default: 1000000)")
    p.add_argument("--seed", type=integer_at_least(0), default=0,
                   help="seed of the CORR pair sample, of the bootstrap replicates, and of the approximate indexes "
                        "(--approximate's text index and image lists, a new --image-index file's pq lists) "
                        "(default: 0)")
    p.add_argument("--ranks-out", metavar="NPY", help="also save the per-query BkR ranks (.npy appended if missing)")
    p.add_argument("--hits-out", metavar="NPY",
                   help="also save the per-query BkR hits, one column per K, for 'compare --hits' (.npy appended "
                        "if missing; the K are written beside it, NPY.ks.json)")
    add_embedding_metric_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``score`` with the parsed options: the JSON record to ``--out`` (else stdout), the figures on stderr; exit
    code 0."""
    options = metric_options(args)
    outputs = ((args.ranks_out and npy_path(args.ranks_out), "--ranks-out"),
               (args.hits_out and npy_path(args.hits_out), "--hits-out"),
               (args.out if str(args.out) != "-" else None, "the JSON record"))
    for path, what in outputs:  # a refused output fails before scoring, and before another one is written
        if path:
            writable_file(path, what)
    result = score(args.src_text, args.tgt_text, src_img=args.src_img, tgt_img=args.tgt_img,
                   image_sim=args.image_sim, src_image_ids=args.src_image_ids, xlr_tgt_text=args.xlr_tgt_text,
                   xlr_gt=args.xlr_gt, corr_pairs=args.corr_pairs, image_index=args.image_index,
                   image_index_method=args.image_index_method, progress=not args.no_progress, **options)
    report_image_lists(result.image_lists, args.approximate)
    record_rank_cap(args)
    if args.ranks_out:  # the record names the file written (np.save's .npy suffix included)
        args.ranks_out = str(save_npy(args.ranks_out, result.ranks, "--ranks-out"))
    if args.hits_out:
        args.hits_out = str(result.save_hits(args.hits_out, "--hits-out"))
    emit_json(result.to_record(inputs(args)), args.out)
    sys.stdout.flush()  # the figures last, below a record printed on stdout
    parts = []
    for name, value in result.metrics.items():
        ci = result.intervals.get(name)
        parts.append(f"{name}={value:.4f}" + (f" [{ci['lo']:.4f}, {ci['hi']:.4f}]" if ci else ""))
    print(", ".join(parts), file=sys.stderr)
    return 0
