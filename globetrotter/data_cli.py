"""``globetrotter-data``: make and look at datasets in the shard format.

The console script. It builds :mod:`data_prep.cli`'s parser with the data layer's sub-commands and adds, in
their --help places, the sub-commands that need ``globetrotter``: ``tokenizer`` (the shared BPE,
:mod:`globetrotter.tokenizer_cli`) and ``features`` (the frozen backbone's feature cache,
:mod:`globetrotter.data.feature_cache_cli`). The dependency runs one way (docs/design.md section 2):
``globetrotter -> data_prep``, never back.

A sub-command whose module fails to import is listed as ``UNAVAILABLE`` in ``--help`` with the import error,
and running it is a one-line error naming it (:func:`data_prep.cli.build_parser`).
"""
from __future__ import annotations

import argparse
from typing import NoReturn, Sequence

from data_prep import cli as data_cli

# (module, its sub-commands): the data layer's, with the globetrotter-side ones in their --help places.
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    data_cli.COMMANDS[0],  # synth
    ("globetrotter.tokenizer_cli", ("tokenizer",)),
    *data_cli.COMMANDS[1:],  # inspect, the converters, more-captions
    ("globetrotter.data.feature_cache_cli", ("features",)),
)

DESCRIPTION = ("Make datasets in the Globetrotter shard format (WebDataset tars + manifest.json): "
               "the built-in synthetic multilingual world, the shared BPE tokenizer, converters from public caption "
               "datasets, more same-language captions per image (more-captions), inspection, and the image-feature "
               "caches of a split (features: build, import, concat, finetune).")


def build_parser() -> argparse.ArgumentParser:
    """The ``globetrotter-data`` parser: the data layer's sub-commands, ``tokenizer`` and ``features`` among them."""
    return data_cli.build_parser(COMMANDS, prog="globetrotter-data", description=DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point; never returns: exits with the command's exit code."""
    raise SystemExit(data_cli.run(build_parser(), argv))


if __name__ == "__main__":
    main()
