"""``zeroshot`` command line: train the XTD10 adapter, evaluate it per language, tag images,
and run the BackRetrieval Triplet/TripletXL case study.

Each sub-command is a small module that adds its arguments, calls the library (:mod:`globetrotter.zeroshot`)
and prints a summary; each writes one JSON record (``--help`` explains every option and metric):

- ``train``      train the text->image adapter on one language's captions of a split (:mod:`.train`);
- ``retrieval``  text->image Recall@1/5/10 in every language of a test split, Tables 2/3 (:mod:`.retrieval`);
- ``tag``        zero-shot multilingual image tagging, section 3.3.2, eqs. 3-5 (:mod:`.tag`);
- ``tag-eval``   tagging Precision@K on held-out captions against a frequency baseline (:mod:`.tag_eval`);
- ``triplet``    Triplet/TripletXL adapters over JSONL documents, judged by BackRetrieval (:mod:`.triplet`).
"""
from __future__ import annotations

import argparse
from typing import Sequence

from backretrieval.errors import BackRetrievalError, cli_option_names
from globetrotter.errors import UserError, run_cli

from . import retrieval, tag, tag_eval, train, triplet
from .common import common_options, formatter

COMMANDS = (train, retrieval, tag, tag_eval, triplet)


def build_parser(prog: str = "globetrotter-zeroshot") -> argparse.ArgumentParser:
    """The ``globetrotter-zeroshot`` parser (``prog``: the name its usage lines show), every sub-command with the
    common options."""
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=formatter,
        description="The XTD10 zero-shot system (Aggarwal et al. 2020): an adapter from frozen multilingual "
        "sentence embeddings into a frozen image-feature space, trained on one language and used in all; "
        "multilingual image tagging; and the BackRetrieval paper's Triplet/TripletXL case study.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parent = common_options()
    for module in COMMANDS:
        module.register(sub, parent)
    return parser


def run_command(argv: Sequence[str] | None, prog: str = "globetrotter-zeroshot") -> int:
    """Parse ``argv`` as the command line of ``prog`` and run its command; the exit code, a user error raised (for
    :func:`~globetrotter.errors.run_cli`, and ``eval.py tag``/``zeroshot``, which forward to it)."""
    args = build_parser(prog).parse_args(argv)
    from globetrotter.texts_cut import texts_cut_once
    from globetrotter.threads import configure_threads

    configure_threads(workers=0, requested=args.threads)  # --threads, else this process's share of the cores
    try:
        # run_cli prints the metric's warnings (a K not below a pair's images) as one 'warning:' line each; texts cut
        # by a globetrotter:RUN text encoder are one line for the command, not one per language or split encoded; the
        # library's refusals name the flags typed (--ks 5), not its Python arguments (ks=5)
        with texts_cut_once(), cli_option_names():
            return args.func(args)
    except BackRetrievalError as err:  # the metric package's one-line user errors
        raise UserError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``globetrotter-zeroshot COMMAND ...``; returns the exit code (2 with one line for a user error)."""
    return run_cli(run_command, argv)
