"""The user-error type shared by the data layer and the packages above it.

It lives here, at the bottom of the dependency graph, so that the shard reader can be
used by ``backretrieval`` without importing ``globetrotter``; ``globetrotter.errors``
re-exports it.
"""
from __future__ import annotations


class UserError(Exception):
    """An error the user can fix: the message says what, where, and what was expected."""
