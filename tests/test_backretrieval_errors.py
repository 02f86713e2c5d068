"""backretrieval.errors: how a command ends (run_cli) and how warnings are printed (one_line_warnings)."""
from __future__ import annotations

import warnings

import pytest

from backretrieval.errors import BackRetrievalError, BackRetrievalWarning, one_line_warnings, run_cli


def test_run_cli_turns_an_error_into_code_2_and_ctrl_c_into_130(capsys):
    def fails(argv):
        raise BackRetrievalError("x.npy: expected 3 rows, got 2")

    def interrupted(argv):
        raise KeyboardInterrupt

    assert run_cli(fails, []) == 2 and capsys.readouterr().err == "error: x.npy: expected 3 rows, got 2\n"
    assert run_cli(interrupted, []) == 130 and capsys.readouterr().err == "interrupted\n"  # no traceback
    assert run_cli(lambda argv: None, []) == 0


def test_only_backretrieval_warnings_are_made_one_line(capsys):
    """Other warnings (a library's) go to the handler that was there before, unchanged (Python's form)."""
    with pytest.warns(RuntimeWarning, match="^theirs$"), one_line_warnings():
        warnings.warn("ours", BackRetrievalWarning)
        warnings.warn("ours", BackRetrievalWarning)  # said once
        warnings.warn("theirs", RuntimeWarning)
    assert capsys.readouterr().err == "warning: ours\n"
