"""``globetrotter-eval`` / ``python eval.py``: evaluate and use a trained model.

Each sub-command is a small module that adds its arguments, calls the library (:mod:`..tasks` and the metric
modules), prints a short summary and writes one JSON record (dataset, model, task, metrics, languages, config) to
``--out/<task>-<model>.json``, appended to ``--out/results.jsonl`` (to collect a table across runs), with its plots
(PNG) beside it. ``translate`` and ``translate-word`` print translations instead.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from globetrotter.errors import run_cli
from globetrotter.shell import program_name

from . import cluster, correspondence, generate, retrieval, select, sentence, translate, translate_word, word

COMMANDS = (sentence, select, word, retrieval, cluster, correspondence, generate, translate, translate_word)
ZEROSHOT_COMMANDS = ("tag", "zeroshot")


def build_parser() -> argparse.ArgumentParser:
    """The ``eval.py`` / ``globetrotter-eval`` parser: every evaluation sub-command, and ``tag`` and ``zeroshot``
    listed for ``--help`` (the zeroshot command line runs them)."""
    parser = argparse.ArgumentParser(
        prog=program_name("eval"),  # as started: eval.py from the repository, else the console script
        description="Evaluate and use a trained Globetrotter model: translation by retrieval (sentences, words) with "
        "the ranking chosen on val, word ground truth, Procrustes refinement, cross-lingual image retrieval, "
        "clustering, sentence correspondence transfer, translation by generation. Each evaluation writes one JSON "
        "record (with its PNG plots) into --out; build-dictionary writes its lexicon files into --dictionary-out, "
        "and translate and translate-word print their translations.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)  # each with its own common options (common.common_options: their help per command)
    for name, helptext in (("tag", "multilingual image tagging (XTD10 paper 3.3.2, eqs. 3-5)"),
                           ("zeroshot", "the XTD10 zero-shot system: train/retrieval/tag/tag-eval/triplet")):
        # forwarded whole to globetrotter.zeroshot.cli (see _main); listed here for --help
        sub.add_parser(name, help=f"{helptext}; `{program_name('eval')} {name} --help` for options", add_help=False)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ZEROSHOT_COMMANDS:  # `eval.py tag ...` = `globetrotter-zeroshot tag ...`
        from globetrotter.zeroshot.cli import run_command as zeroshot_main

        # usage lines and errors name the command typed: `eval.py tag`, `globetrotter-eval zeroshot train`
        prog = program_name("eval")
        return zeroshot_main(argv, prog) if argv[0] == "tag" else zeroshot_main(argv[1:], f"{prog} zeroshot")
    args = build_parser().parse_args(argv)
    from backretrieval.errors import cli_option_names
    from globetrotter.texts_cut import texts_cut_once
    from globetrotter.threads import configure_threads

    configure_threads(workers=0)  # no data workers: this process's share of the cores (OMP_NUM_THREADS wins)
    # texts cut to the model's length: one line for the command, not one per encoding; the library's refusals name
    # the flags typed (--k 5), not its Python arguments (k=5)
    with texts_cut_once(), cli_option_names():
        return args.func(args)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``globetrotter-eval``; ``python eval.py``); never returns: exits with the
    command's exit code."""
    raise SystemExit(run_cli(_main, argv))
