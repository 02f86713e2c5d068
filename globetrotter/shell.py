"""Commands printed for the user to run next, spelled as they would type them."""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

REPOSITORY_SCRIPTS = ("train.py", "eval.py")
"""The repository's entry scripts (``python train.py``, ``python eval.py``); an installed project has the console
scripts ``globetrotter-train`` and ``globetrotter-eval`` instead."""


def _as_typed(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute; quoted for the shell."""
    try:
        return shlex.quote(str(path.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(path))


def python_command() -> str:
    """This process's interpreter as typed from the working directory: relative when it lies below it (the
    project's ``.venv/bin/python``, so the printed command works in a fresh shell), else its absolute path; quoted for the
    shell where it needs it (a space)."""
    return _as_typed(Path(sys.executable))


def started_from_repository() -> bool:
    """Whether this process was started as one of the repository's scripts (``sys.argv[0]`` is ``train.py`` or
    ``eval.py``), not as a console script, ``python -m``, or a library call."""
    argv = getattr(sys, "argv", None) or [""]
    return Path(argv[0] or "").name in REPOSITORY_SCRIPTS


def program_name(program: str) -> str:
    """The project's ``program`` (``"train"`` or ``"eval"``) as named in a message: ``eval.py`` when this process was
    started as a repository script (:func:`started_from_repository`), else the console script ``globetrotter-eval``."""
    return f"{program}.py" if started_from_repository() else f"globetrotter-{program}"


def program_command(program: str) -> str:
    """The command that runs the project's ``program`` (``"train"`` or ``"eval"``), spelled the way this process was
    started: ``{python_command()} eval.py`` from the repository's scripts; otherwise the console script
    ``globetrotter-eval``: the one beside the interpreter (relative to the working directory when below it, as
    :func:`python_command`), else the bare name (found on PATH)."""
    if started_from_repository():
        return f"{python_command()} {program}.py"
    script = f"globetrotter-{program}"
    beside = shutil.which(script, path=str(Path(sys.executable).parent))  # the install's own (.exe on Windows)
    return _as_typed(Path(beside)) if beside else script
