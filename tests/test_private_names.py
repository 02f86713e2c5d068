"""No private name crosses a module boundary: no module of ``backretrieval``, ``globetrotter`` or ``data_prep`` takes
a name starting with ``_`` from another module (``from .x import _y``, ``from pkg.x import _y``, ``from . import _y``,
at module level or inside a function). A name another module needs is part of its package's internal API and is
spelled without the underscore in the module that defines it. Read from the source with :mod:`ast` (nothing is
imported). Not asked for: ``__dunder__`` names, private module paths (``from ._impl import name``), ``tests/``,
``experiments/`` and ``bench/``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backretrieval", "globetrotter", "data_prep")


def _private(name: str) -> bool:
    """A leading-underscore name that is no ``__dunder__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(source: str) -> list[tuple[int, str]]:
    """(line, ``from MODULE import NAME``) of each private name ``source`` imports from another module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [(node.lineno, f"from {module} import {alias.name}") for alias in node.names
                      if _private(alias.name)]
    return sorted(found)


def test_no_module_imports_a_private_name_from_another():
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100  # the walk finds the packages
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in files
             for line, what in private_imports(path.read_text(encoding="utf-8"))]
    assert not found, ("private names imported from another module (drop the underscore, or give a clearer public "
                       "name, where the name is defined, and update its users):\n" + "\n".join(found))


def test_the_check_sees_each_form_of_import_and_skips_the_exclusions():
    source = '''
from __future__ import annotations
from .bkr_steps import _retrieve, count_better_images
from backretrieval.image_inputs import open_image as _open, _decoded as decoded
from . import _helpers
from ..pipeline import (
    safe_id,
    _KEY_UNSAFE,
)
from ._impl import public
from .version import __version__
import _thread
def load():
    from backretrieval.image_weights import _file_digest
    return _file_digest
'''
    assert private_imports(source) == [(3, "from .bkr_steps import _retrieve"),
                                       (4, "from backretrieval.image_inputs import _decoded"),
                                       (5, "from . import _helpers"), (6, "from ..pipeline import _KEY_UNSAFE"),
                                       (14, "from backretrieval.image_weights import _file_digest")]
