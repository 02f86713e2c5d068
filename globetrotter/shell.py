"""Commands printed for the user to run next, spelled as they would type them."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path


def python_command() -> str:
    """This process's interpreter as typed from the working directory: relative when it lies below it (the
    project's ``.venv/bin/python``, so the printed command works in a fresh shell), else its absolute path; quoted for the
    shell where it needs it (a space)."""
    exe = Path(sys.executable)
    try:
        return shlex.quote(str(exe.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(exe))
