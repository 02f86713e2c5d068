"""User-facing errors of the standalone metric package: one line, exit code 2, no traceback.

``backretrieval`` imports nothing from ``globetrotter``, so it carries its own small
equivalent of ``globetrotter.errors``. Mistakes a user can fix (a missing file, a shape
mismatch, an unknown model spec) raise :class:`BackRetrievalError`; bugs raise ordinary
exceptions and keep their traceback.

The library functions name their inputs in messages through :func:`option`: the parameter
name (``src_img``) when called from Python, the flag (``--src-img``) inside the command line
(:func:`cli_option_names`), so one check serves both.
"""
from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Sequence, TextIO

_CLI_NAMES: ContextVar[bool] = ContextVar("backretrieval_cli_names", default=False)
# the parameters whose flag is spelled otherwise: the flags follow the project's other commands (--languages,
# --max-per-language)
_FLAG_OF = {"langs": "languages", "max_per_lang": "max_per_language"}


def install_hint(extras: str = "") -> str:
    """How a message says to install an optional extra: ``pip install "globetrotter[EXTRAS]" (from a clone:
    pip install -e ".[EXTRAS]")``, for an installed project and a clone alike (the twin of
    ``data_prep.errors.install_hint``, which this package does not import)."""
    spec = f"[{extras}]" if extras else ""
    return f'pip install "globetrotter{spec}" (from a clone: pip install -e ".{spec}")'


class BackRetrievalError(ValueError):
    """An error the user can fix: the message says what, where, and what was expected."""


class BackRetrievalWarning(UserWarning):
    """Something the user should know about a result that is still computed (a model scored on a language it does
    not declare, K not below the pool, a hits file without its K); the command line prints it as one ``warning:``
    line."""


def option(name: str, metavar: str = "") -> str:
    """How a message names the input ``name`` (a parameter name): as is, or as a flag under the CLI.

    ``metavar`` follows the flag only (``option("hits", "A.npy B.npy")`` is ``--hits A.npy B.npy``
    on the command line, ``hits`` in Python).
    """
    if not _CLI_NAMES.get():
        return name
    return "--" + _FLAG_OF.get(name, name).replace("_", "-") + (f" {metavar}" if metavar else "")


def given(name: str, value: object) -> str:
    """How a message names the value given for input ``name``: ``--name VALUE`` under the CLI, ``name=VALUE`` in
    Python (``name`` a parameter name, spelled as a flag as :func:`option` spells it)."""
    return f"{option(name)} {value}" if naming_flags() else f"{name}={value}"


def said(cli: str, python: str) -> str:
    """``cli`` inside :func:`cli_option_names`, ``python`` otherwise: for a message whose two wordings differ more
    than :func:`option` and :func:`given` say."""
    return cli if naming_flags() else python


def naming_flags() -> bool:
    """True inside :func:`cli_option_names`: messages then name command-line flags, not Python parameters."""
    return _CLI_NAMES.get()


@contextmanager
def cli_option_names(on: bool = True) -> Iterator[None]:
    """Within this block, :func:`option` names inputs by their command-line flags; ``on=False``: by their parameter
    names again (a call whose parameters are no flag of the command running it: another program's command line)."""
    token = _CLI_NAMES.set(on)
    try:
        yield
    finally:
        _CLI_NAMES.reset(token)


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within this block, every :class:`BackRetrievalWarning` is printed as one ``warning: ...`` line on stderr
    (not Python's two-line form with the source line, nor once per place only), each message once (the same line
    from every model of a command, texts cut by each of two checkpoints say, is said once)."""
    with warnings.catch_warnings():  # restores the filters and showwarning on leaving
        warnings.simplefilter("always", BackRetrievalWarning)
        show, said = warnings.showwarning, set()

        def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, BackRetrievalWarning):
                if str(message) not in said:
                    said.add(str(message))
                    print(f"warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; print a :class:`BackRetrievalError`, or a path of the wrong kind, as one line and return
    exit code 2."""
    try:
        code = main(argv)
    except BackRetrievalError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError) as err:  # a path's wrong kind
        print(f"error: {err.filename or 'a path'}: {(err.strerror or type(err).__name__).lower()} (a path this "
              f"command was given or writes under; give another)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)
