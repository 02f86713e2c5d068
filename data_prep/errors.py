"""The user-error type shared by the data layer and the packages above it, and the CLI wrapper that prints it.

It lives here, at the bottom of the dependency graph (docs/design.md section 2: ``globetrotter -> data_prep``),
so that the data layer's commands report user errors without importing ``globetrotter``;
``globetrotter.errors`` re-exports both names.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`.
"""
from __future__ import annotations

import sys
from typing import Callable, Sequence

__all__ = ["UserError", "run_cli"]


class UserError(Exception):
    """An error the user can fix: the message says what, where, and what was expected."""


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; print a :class:`UserError` as one line and return exit code 2."""
    try:
        code = main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)
