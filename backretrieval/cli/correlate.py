"""``backretrieval correlate``: the paper's protocol, BkR vs XLR over models
(:func:`backretrieval.correlate_split`)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import BackRetrievalError
from ..evaluate import correlate_split, language_pairs
from ..hubness import DEFAULT_CSLS_K
from ..files import read_text_lines
from ..outputs import make_dir, write_file
from .common import (MODEL_SPECS, add_command, add_interval_options, add_metric_options, add_model_options,
                     comma_separated, command_line_specs, emit_json, extractor, inputs, integer_at_least, replace_plots,
                     resolve_dependent_options, writable_outputs)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``correlate`` sub-command."""
    p = add_command(sub, "correlate", "the paper's protocol: BkR vs XLR over models (Table 1, Fig. 2)",
                    "Protocol (paper 3.1): per seed, sample N source items and a disjoint (non-matching) set of N "
                    "target items of a parallel split; compute BkR and CORR on them and XLR on the source items' own "
                    "translations; then Pearson and Spearman of BkR vs XLR (and CORR vs XLR) over the models, mean "
                    "+- std over seeds. Writes protocol.json, table.md (Table 1) and a scatter per pair (Fig. 2).",
                    MODEL_SPECS)
    p.add_argument("--data", required=True, metavar="SPLIT_DIR",
                   help="a parallel split folder (captions tied by 'group')")
    p.add_argument("--models", nargs="+", default=[], metavar="SPEC", help="text model specs ([NAME=]SPEC), at least 2")
    p.add_argument("--models-file", metavar="TXT", help="more specs, one per line ('#' comments allowed)")
    p.add_argument("--pairs", type=comma_separated(str), metavar="SRC-TGT,SRC-TGT",
                   help="language pairs, comma-separated, e.g. en-de,de-en (default: all ordered pairs)")
    p.add_argument("--n", type=int, metavar="N",
                   help="items per side and seed (default: min(10000, items // 2); paper: 10000)")
    p.add_argument("--n-seeds", dest="seeds", type=integer_at_least(1), default=25, metavar="N",
                   help="number of seeds (default: 25, as in the paper)")
    p.add_argument("--corr-pairs", type=integer_at_least(1), default=1_000_000, help="pairs sampled for CORR (default: 1000000)")
    p.add_argument("--report-k", type=int,
                   help="K used for the table and scatter (default: 10 if in --ks, else the largest)")
    p.add_argument("--out", dest="out_dir", required=True, metavar="DIR",
                   help="where protocol.json, table.md and PNGs go")
    add_interval_options(p, "bootstrap replicates over queries: per seed and model, an interval for every BkR / "
                            "XLR / CORR figure in protocol.json (default: 1000; 0: none)")
    p.add_argument("--retrieval", choices=("cosine", "csls"), default="cosine",
                   help="text retrieval for BkR step 2 and XLR ranks: cosine (the paper) or CSLS with a "
                        f"neighbourhood of k = {DEFAULT_CSLS_K} (fixed here; score and eval take --csls-k) "
                        "(default: cosine)")
    add_metric_options(p)
    add_model_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``correlate`` with the parsed options: protocol.json, table.md and the scatters into ``--out``, the table on
    stdout; exit code 0."""
    resolve_dependent_options(args)
    specs = command_line_specs(args.models, "--models")
    if args.models_file:
        path = Path(args.models_file)
        if not path.exists():
            raise BackRetrievalError(f"{path}: --models-file not found")
        specs += read_text_lines(path, "--models-file")
    report_k = args.report_k if args.report_k is not None else (10 if 10 in args.ks else max(args.ks))
    args.report_k = report_k  # the record's inputs list the K the table and scatters show
    if report_k not in args.ks:
        raise BackRetrievalError(f"--report-k {report_k} is not one of --ks {','.join(map(str, args.ks))}")
    # before any work: a refusal then costs nothing (without --pairs, the scatters' names wait for the split)
    writable_outputs(args.out_dir, ["protocol.json", "table.md",
                                    *(f"scatter_{src}-{tgt}.png" for src, tgt in language_pairs(args.pairs or []))])
    result = correlate_split(args.data, specs, extractor=extractor(args), pairs=args.pairs, n=args.n,
                             seeds=args.seeds, ks=args.ks, ties=args.ties, max_rank=args.max_rank,
                             corr_pairs=args.corr_pairs, retrieval=args.retrieval, bootstrap=args.bootstrap,
                             level=args.level, online=args.online, progress=not args.no_progress)
    out_dir = make_dir(args.out_dir, "--out")
    replace_plots(out_dir, result.save_plots(out_dir, report_k), ("scatter_*.png",))
    for label, res in result.pairs.items():
        c = res["correlation"][f"@{report_k}"]
        print(f"{label}: Pearson BkR {c['pearson']['bkr']['mean']:.3f}, CORR {c['pearson']['corr']['mean']:.3f}; "
              f"Spearman BkR {c['spearman']['bkr']['mean']:.3f}, CORR {c['spearman']['corr']['mean']:.3f}",
              file=sys.stderr)
        undefined = max(len(e["per_seed"]) - e["defined"] for kind in c.values() for e in kind.values())
        if undefined:
            print(f"{label}: the correlation is undefined in up to {undefined} of {args.seeds} seed(s) (a metric "
                  "equal for every model: the models are too few or too alike at this --n); left out of the means",
                  file=sys.stderr)
    table = result.table(report_k)
    write_file(out_dir / "table.md", lambda p: p.write_text(table + "\n", encoding="utf-8"), "table.md")
    print(table)
    emit_json(result.to_record(inputs(args)), out_dir / "protocol.json")
    return 0
