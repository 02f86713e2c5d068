"""``backretrieval`` command line: score embedding files, compare two models, evaluate a shard split, run the
paper's protocol.

A thin layer over the library: each sub-command (one module here) adds its arguments, calls
its library function (:func:`backretrieval.score`, :func:`backretrieval.compare`,
:func:`backretrieval.evaluate_split`, :func:`backretrieval.correlate_split`), prints a summary
and writes one JSON record (and PNG plots where they make sense) so results can be collected
into tables; ``--help`` of each command explains the metric.
"""
from __future__ import annotations

import argparse
from typing import Sequence

from ..embedders import parse_model_specs
from ..errors import cli_option_names, one_line_warnings, run_cli
from . import compare, correlate, score
from . import eval as evaluate
from .common import METRIC_HELP, formatter

COMMANDS = (score, compare, evaluate, correlate)

__all__ = ["build_parser", "main", "parse_model_specs"]


def build_parser() -> argparse.ArgumentParser:
    """The ``backretrieval`` argument parser: the sub-commands ``score``, ``compare``, ``eval`` and ``correlate``."""
    parser = argparse.ArgumentParser(prog="backretrieval", description=METRIC_HELP, formatter_class=formatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with cli_option_names(), one_line_warnings():  # library messages name the flags (--src-img), not src_img
        return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point ``backretrieval``; user errors print one line and exit with code 2."""
    return run_cli(_main, argv)
