"""``globetrotter-data``: make and look at datasets in the shard format.

Sub-commands are registered by the modules that implement them: each exposes
``register(subparsers)`` which adds its parser and sets ``func`` to a callable taking
the parsed ``argparse.Namespace`` and returning an exit code.
"""
from __future__ import annotations

import argparse
import importlib
from typing import Sequence

from globetrotter.errors import run_cli

# Modules that add sub-commands, in --help order. A module missing from an install
# (an optional part) is skipped.
COMMAND_MODULES = (
    "data_prep.synth.cli",
    "data_prep.tokenizer_cli",
    "data_prep.inspect",
    "data_prep.converters.cli",
    "data_prep.converters.more_captions",
    "globetrotter.data.feature_cache_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="globetrotter-data",
        description="Make datasets in the Globetrotter shard format (WebDataset tars + manifest.json): "
        "the built-in synthetic multilingual world, converters from public caption datasets, "
        "the shared BPE tokenizer, and inspection.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and name.startswith(err.name):
                continue
            raise
        module.register(sub)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point."""
    raise SystemExit(run_cli(_main, argv))


if __name__ == "__main__":
    main()
