"""User-facing errors: one line, exit code 2, no traceback.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`. Both are defined in
:mod:`data_prep.errors`, at the bottom of the dependency graph, and re-exported here.
"""
from __future__ import annotations

from data_prep.errors import UserError, run_cli

__all__ = ["UserError", "run_cli"]
