"""The data layer's sub-commands of ``globetrotter-data``, and the parser that holds them.

Sub-commands are registered by the modules that implement them: each exposes
``register(subparsers)`` which adds its parser(s) and sets ``func`` to a callable taking
the parsed ``argparse.Namespace`` and returning an exit code.

The ``globetrotter-data`` console script is :mod:`globetrotter.data_cli`: it builds this parser with
:data:`COMMANDS` and the sub-commands that need ``globetrotter`` (``tokenizer``, ``features``), since
``data_prep`` imports nothing from ``globetrotter`` (docs/design.md section 2). ``python -m data_prep.cli``
offers the data layer's sub-commands alone.

A module whose import fails is never skipped in silence: each sub-command it declares is still listed, its
``--help`` line says ``UNAVAILABLE`` with the import error, and running it is a one-line error naming the
sub-command, the module and the import error (exit code 2).
"""
from __future__ import annotations

import argparse
import importlib
from typing import NoReturn, Sequence

from .errors import UserError, missing_dependency, run_cli

# (module, the sub-commands its register() adds), in --help order. The names are declared so that a module that
# fails to import can still be reported under them (tests/test_data_cli.py checks they match).
COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("data_prep.synth.cli", ("synth",)),
    ("data_prep.inspect", ("inspect",)),
    ("data_prep.converters.cli", ("multi30k", "flickr8k", "globetrotter", "xtd10", "folder")),
    ("data_prep.converters.more_captions", ("more-captions",)),
)

DESCRIPTION = ("Make datasets in the Globetrotter shard format (WebDataset tars + manifest.json): "
               "the built-in synthetic multilingual world, converters from public caption datasets, "
               "more same-language captions per image (more-captions), and inspection.")
"""The data layer's sub-commands (:data:`COMMANDS`); ``globetrotter-data`` describes its own, with ``tokenizer`` and
``features`` (:data:`globetrotter.data_cli.DESCRIPTION`)."""


def _unavailable(sub: argparse._SubParsersAction, name: str, module: str, err: ImportError) -> None:
    """A stand-in for sub-command ``name`` of a module that failed to import: listed in --help as unavailable;
    running it (with any arguments, ``--help`` included) is a one-line error with the import error."""
    reason = f"importing {module} failed: {type(err).__name__}: {err}"
    missing = missing_dependency(err)  # a third-party package not installed: name the install command
    if missing is not None:
        reason += f" ({missing})"
    # no options (no prefix character a user types), so that every argument, --help too, reaches `fail`
    p = sub.add_parser(name, add_help=False, prefix_chars="\0", help=f"UNAVAILABLE ({reason})",
                       description=f"UNAVAILABLE: {reason}")
    p.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)

    def fail(args: argparse.Namespace) -> int:
        raise UserError(f"globetrotter-data {name}: unavailable: {reason}")

    p.set_defaults(func=fail)


def build_parser(commands: Sequence[tuple[str, Sequence[str]]] = COMMANDS, prog: str = "python -m data_prep.cli",
                 description: str | None = None) -> argparse.ArgumentParser:
    """The parser with the sub-commands of ``commands`` ((module, sub-command names) pairs, in --help order)."""
    if description is None:
        description = DESCRIPTION + " The data layer's sub-commands only: globetrotter-data adds tokenizer and features."
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name, names in commands:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:  # reported under each of its sub-commands, never dropped
            for name in names:
                _unavailable(sub, name, module_name, err)
            continue
        module.register(sub)
    return parser


def fold_overrides(parsed: argparse.Namespace, extras: list[str]) -> list[str]:
    """Add the ``KEY=VALUE`` arguments argparse left over to a sub-command's ``overrides`` (those written after an
    option, ``SPLIT --config FILE key=value``, as train.py takes them); returns what is still unrecognised."""
    overrides = getattr(parsed, "overrides", None)
    if extras and isinstance(overrides, list) and all("=" in e and not e.startswith("-") for e in extras):
        overrides += extras
        return []
    return extras


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` with ``parser`` and run the chosen sub-command; a user error is one line, exit code 2."""
    def _main(args: Sequence[str] | None) -> int:
        parsed, extras = parser.parse_known_args(args)
        extras = fold_overrides(parsed, extras)
        if extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed.func(parsed)

    return run_cli(_main, argv)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """``python -m data_prep.cli``: the data layer's sub-commands only (``globetrotter-data`` has them all); never
    returns: exits with the command's exit code."""
    raise SystemExit(run(build_parser(), argv))


if __name__ == "__main__":
    main()
