"""User-facing errors of the standalone metric package: one line, exit code 2, no traceback.

``backretrieval`` imports nothing from ``globetrotter``, so it carries its own small
equivalent of ``globetrotter.errors``. Mistakes a user can fix (a missing file, a shape
mismatch, an unknown model spec) raise :class:`BackRetrievalError`; bugs raise ordinary
exceptions and keep their traceback.
"""
from __future__ import annotations

import sys
from typing import Callable, Sequence


class BackRetrievalError(ValueError):
    """An error the user can fix: the message says what, where, and what was expected."""


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; print a :class:`BackRetrievalError` as one line and return exit code 2."""
    try:
        code = main(argv)
    except BackRetrievalError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)
