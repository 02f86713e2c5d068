"""``backretrieval eval``: BkR for every language pair of a split, one or more models
(:func:`backretrieval.evaluate_split`)."""
from __future__ import annotations

import argparse
import sys

from ..embedders import parse_model_specs
from ..evaluate import evaluate_split, plot_name
from ..outputs import make_dir
from .common import (APPROXIMATE_HELP, MODEL_SPECS, add_beyond_paper_options, add_command, add_metric_options,
                     add_model_options, command_line_specs, emit_json, extractor, inputs, integer_at_least,
                     language_codes, metric_options, replace_plots, writable_outputs)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``eval`` sub-command."""
    p = add_command(sub, "eval", "BkR for every language pair of a shard split, one or more models",
                    "Evaluates each model spec on every ordered language pair of a split folder written by "
                    "globetrotter-data (texts, langs, image_ids; XLR too where 'group' ties translations). "
                    "Languages that share images are split into non-matching halves. Writes results.json, a heat "
                    "map per model and metric, and a box plot over pairs (paper Fig. 3).",
                    APPROXIMATE_HELP, MODEL_SPECS)
    p.add_argument("--data", required=True, metavar="SPLIT_DIR", help="split folder (manifest.json + .tar shards)")
    p.add_argument("--model", action="append", required=True, metavar="SPEC", help="text model spec (repeatable)")
    p.add_argument("--languages", type=language_codes, metavar="CODES",
                   help="comma-separated languages to use, e.g. en,de,fr (default: all in the split)")
    p.add_argument("--max-per-language", type=integer_at_least(1), metavar="N",
                   help="at most N source and N target captions per pair (default: all)")
    p.add_argument("--seed", type=integer_at_least(0), default=0,
                   help="seed of the non-matching split and subsampling (default: 0)")
    p.add_argument("--out", dest="out_dir", required=True, metavar="DIR", help="where results.json and the PNGs go")
    add_metric_options(p)
    add_beyond_paper_options(p, image_index=False)  # eval takes no --image-index
    add_model_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``eval`` with the parsed options: results.json and the plots into ``--out``, each model's means on stderr;
    exit code 0."""
    specs = command_line_specs(args.model, "--model")
    labels = parse_model_specs(specs, what="--model")
    # before any work: a refusal then costs nothing (XLR's heat maps depend on the split's groups, unread yet)
    writable_outputs(args.out_dir, ["results.json", f"boxplot_bkr{max(args.ks)}.png",
                                    *(f"heatmap_{plot_name(label)}_bkr{k}.png" for label in labels for k in args.ks)])
    result = evaluate_split(args.data, specs, extractor=extractor(args), languages=args.languages,
                            max_per_lang=args.max_per_language, online=args.online, progress=not args.no_progress,
                            **metric_options(args))
    out_dir = make_dir(args.out_dir, "--out")
    replace_plots(out_dir, result.save_plots(out_dir), ("heatmap_*.png", "boxplot_bkr*.png"))
    for label, res in result.results.items():
        print(f"{label}: " + ", ".join(f"{m}={v:.4f}" for m, v in res["mean"].items()), file=sys.stderr)
    emit_json(result.to_record(inputs(args)), out_dir / "results.json")
    return 0
