"""User-facing errors: one line, exit code 2, no traceback.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`, which prints a :class:`Notice` (a warning
for the user), and a :class:`~backretrieval.errors.BackRetrievalWarning` of the metric the commands call (K not
below the pool, texts cut), as one ``warning: ...`` line. :class:`Notice` and :class:`UserError` are defined in
:mod:`data_prep.errors`, at the bottom of the dependency graph, and re-exported here.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, Sequence

from backretrieval.errors import BackRetrievalWarning
from data_prep.errors import Notice, UserError
from data_prep.errors import run_cli as _run_cli
from data_prep.errors import warning_lines

__all__ = ["Notice", "UserError", "cli_warning_lines", "error_line", "run_cli"]


def error_line(err: BaseException) -> str:
    """``err`` in one line: its type and the first line of its message (for a user error that says why a file failed)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0][:200] if lines else 'no detail'}"


_ONE_LINE = (Notice, BackRetrievalWarning)  # the warnings a command line prints as one ``warning: ...`` line


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """:func:`data_prep.errors.run_cli`, a :class:`~backretrieval.errors.BackRetrievalWarning` one line too (it was
    Python's two lines with a source line of the package)."""
    return _run_cli(main, argv, one_line_warnings=_ONE_LINE)


def cli_warning_lines() -> AbstractContextManager[None]:
    """The warnings of :func:`run_cli` as its one ``warning: ...`` lines, within a block: for a process a command
    starts (a stage measured in its own process), outside the command's own :func:`run_cli`."""
    return warning_lines(_ONE_LINE)
