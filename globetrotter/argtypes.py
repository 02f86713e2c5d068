"""argparse value types shared by the command-line tools: bad values become usage errors (exit 2). Lists are one
comma-separated token (``--ks 1,5,10``, ``--languages en,de``), read by backretrieval's parsers, re-exported here."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from backretrieval.cli.common import comma_separated, language_codes, one_of  # lists: one parser
from backretrieval.data import language_code  # one code (--to): as language_codes reads each
from backretrieval.devices import torch_device  # --device: one definition for every tool
from backretrieval.errors import BackRetrievalError
from backretrieval.outputs import writable_dir, writable_file

__all__ = ["comma_separated", "distinct_names", "int_at_least", "language_code", "language_codes", "named_path",
           "non_negative_float", "non_negative_int", "one_of", "output_file", "output_folder", "positive_float",
           "positive_int", "torch_device"]


def _integer_at_least(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def int_at_least(minimum: int, what: str = "") -> Callable[[str], int]:
    """argparse type: an integer >= ``minimum`` (``what`` says why, in the error)."""
    expected = f"an integer >= {minimum}" + (f" ({what})" if what else "")
    return lambda text: _integer_at_least(text, minimum, expected)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a count, a k), so 0 or -1 is a usage error, not a traceback."""
    return _integer_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (a count that may be zero)."""
    return _integer_at_least(text, 0, "an integer >= 0")


def output_folder(text: str) -> str:
    """argparse type: a folder to write into, existing or not (made later); one that could not be (a file of that
    name or in the way of its parents, a folder not writable) is a usage error before any work, not after."""
    return _writable(writable_dir, text, "the output folder")


def output_file(text: str) -> str:
    """argparse type: a file to write (a JSON record), made later; a path that could not be written (a folder, a
    file in the way of its folder, a folder not writable) is a usage error before any work, not after."""
    return _writable(writable_file, text, "the output file")


def _writable(check: Callable[[str, str], object], text: str, what: str) -> str:
    try:
        check(text, what)
    except BackRetrievalError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _finite_float(text: str, minimum: float, inclusive: bool) -> float:
    """``text`` as a finite number above ``minimum`` (or equal to it, ``inclusive``); else a usage error."""
    bound = f"{'>=' if inclusive else '>'} {minimum:g}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
    if not ((value >= minimum if inclusive else value > minimum) and value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a learning rate)."""
    return _finite_float(text, 0.0, inclusive=False)


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (a weight)."""
    return _finite_float(text, 0.0, inclusive=True)


def distinct_names(pairs: list[tuple[str, str]], flag: str, what: str = "",
                   remedy: str = "name each one with NAME=") -> dict[str, str]:
    """The ``(name, value)`` pairs of a repeatable ``flag`` as ``{name: value}``; a name given twice (two
    ``DIR``s with one last part need ``NAME=``) is a one-line :class:`~globetrotter.errors.UserError`
    naming it (as ``what``, e.g. "language", when given) and saying what to do (``remedy``)."""
    from globetrotter.errors import UserError

    out: dict[str, str] = {}
    for name, value in pairs:
        if name in out:
            kind = f"{what} " if what else ""
            raise UserError(f"{flag}: {kind}{name!r} given twice ({out[name]} and {value}); {remedy}")
        out[name] = value
    return out


def named_path(value: str) -> tuple[str, str]:
    """argparse type: ``NAME=PATH`` or ``PATH`` (named by its last part) -> ``(name, path)``."""
    name, sep, path = value.partition("=")
    if not sep:
        return Path(value).name or value, value
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH or PATH, got {value!r}")
    return name, path
