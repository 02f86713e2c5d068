"""``backretrieval compare``: does model A beat model B on the same data? (:func:`backretrieval.compare`)."""
from __future__ import annotations

import argparse
import sys

from ..comparison import compare
from ..uncertainty import TESTS
from ..outputs import writable_file
from .common import (APPROXIMATE_HELP, IMAGE_INDEX_HELP, add_command, add_embedding_metric_options, comma_separated,
                     emit_json, inputs, integer_at_least, metric_options, one_of, record_rank_cap, report_image_lists)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``compare`` sub-command."""
    p = add_command(sub, "compare", "does model A beat model B on the same data? (McNemar, paired bootstrap)",
                    "Compares two text models on the same queries: BkR@K (and XLR@K with parallel embeddings) of A "
                    "and B, their difference with a paired-bootstrap interval, McNemar's exact test on the queries "
                    "where exactly one model hits, and the p-value. The verdict is A, B or tie (no difference at "
                    "--alpha; the larger p-value of the tests run). Give either embeddings (--a-src-text ... with "
                    "the shared image files) or two hit files written by 'score --hits-out' on the same data "
                    "(--hits A.npy B.npy).", APPROXIMATE_HELP, IMAGE_INDEX_HELP)
    p.add_argument("--a-src-text", metavar="NPY", help="model A: (Ns, d) source-language text embeddings")
    p.add_argument("--a-tgt-text", metavar="NPY", help="model A: (Nt, d) target-language text embeddings")
    p.add_argument("--b-src-text", metavar="NPY", help="model B: (Ns, d') source-language text embeddings")
    p.add_argument("--b-tgt-text", metavar="NPY", help="model B: (Nt, d') target-language text embeddings")
    p.add_argument("--src-img", metavar="NPY", help="(Ns, D) image features of the source captions' images")
    p.add_argument("--tgt-img", metavar="NPY", help="(Nt, D) image features of the target captions' images")
    p.add_argument("--src-image-ids", metavar="TXT",
                   help="one image id per line for the source rows; rows sharing an id are one picture, ranked once")
    p.add_argument("--a-xlr-tgt-text", metavar="NPY", help="model A: embeddings of the source rows' translations (XLR)")
    p.add_argument("--b-xlr-tgt-text", metavar="NPY", help="model B: embeddings of the source rows' translations (XLR)")
    p.add_argument("--hits", nargs=2, metavar=("A_NPY", "B_NPY"),
                   help="instead of embeddings: per-query hits of A and B ('score --hits-out'), compared at the K "
                        "recorded beside them (NPY.ks.json; files without it: at --ks)")
    p.add_argument("--names", nargs=2, default=["A", "B"], metavar=("A", "B"),
                   help="labels of the two models (default: A B)")
    p.add_argument("--tests", type=comma_separated(one_of(*TESTS)), default=list(TESTS), metavar="TEST,TEST",
                   help=f"paired tests to run, comma-separated: {', '.join(TESTS)} (default: {','.join(TESTS)})")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict (default: 0.05)")
    p.add_argument("--seed", type=integer_at_least(0), default=0,
                   help="seed of the bootstrap and of the approximate indexes (--approximate's text index and image "
                        "lists, a new --image-index file's pq lists) (default: 0)")
    add_embedding_metric_options(p, hits=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``compare`` with the parsed options: the JSON record to ``--out`` (else stdout), each metric's verdict on
    stderr; exit code 0."""
    if args.out is not None and str(args.out) != "-":  # before scoring two models: a refusal then costs nothing
        writable_file(args.out, "the JSON record")
    result = compare(args.a_src_text, args.a_tgt_text, args.b_src_text, args.b_tgt_text, src_img=args.src_img,
                     tgt_img=args.tgt_img, src_image_ids=args.src_image_ids, a_xlr_tgt_text=args.a_xlr_tgt_text, b_xlr_tgt_text=args.b_xlr_tgt_text,
                     hits=args.hits, names=args.names, tests=args.tests, alpha=args.alpha,
                     image_index=args.image_index, image_index_method=args.image_index_method,
                     progress=not args.no_progress, **metric_options(args))
    report_image_lists(result.image_lists, args.approximate)
    args.ks = list(result.ks)  # the record lists the K compared (with --hits: the files')
    record_rank_cap(args)
    emit_json(result.to_record(inputs(args)), args.out)
    sys.stdout.flush()  # the verdicts last, below a record printed on stdout (as score prints its figures)
    name_a, name_b = result.names
    for metric, res in result.comparisons.items():
        verdict = res["verdict"] if res["verdict"] != "tie" else "no significant difference"
        print(f"{metric}: {name_a} {res['a']:.4f} vs {name_b} {res['b']:.4f} (diff {res['diff']:+.4f}); "
              f"p = {res['p_value']:.4g} -> {verdict}", file=sys.stderr)
    return 0
