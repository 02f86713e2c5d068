"""User-facing errors: one line, exit code 2, no traceback.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`, which prints a :class:`Notice` (a warning
for the user) as one ``warning: ...`` line. All three are defined in
:mod:`data_prep.errors`, at the bottom of the dependency graph, and re-exported here.
"""
from __future__ import annotations

from data_prep.errors import Notice, UserError, run_cli

__all__ = ["Notice", "UserError", "run_cli"]
