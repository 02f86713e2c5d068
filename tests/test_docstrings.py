"""Short docstrings on public functions, as the project's style asks: every public module-level function and class
of ``backretrieval``, ``globetrotter`` and ``data_prep``, and every public method and property of a public class, has
one. Read from the source with :mod:`ast` (nothing is imported). Not asked for: names starting with ``_`` (dunder
methods and ``__init__`` included), functions nested in functions, classes nested in classes, ``@overload`` stubs."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backretrieval", "globetrotter", "data_prep")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _asked_for(node: ast.stmt) -> bool:
    """A public definition that is no ``@overload`` stub."""
    if not isinstance(node, DEFINITIONS) or node.name.startswith("_"):
        return False
    return not any((d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) == "overload"
                   for d in node.decorator_list)


def missing_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, name) of each definition of ``source`` that should have a docstring and has none (``Class.method``)."""
    missing = []
    for node in filter(_asked_for, ast.parse(source).body):
        if ast.get_docstring(node) is None:
            missing.append((node.lineno, node.name))
        if isinstance(node, ast.ClassDef):
            missing += [(sub.lineno, f"{node.name}.{sub.name}") for sub in node.body
                        if _asked_for(sub) and not isinstance(sub, ast.ClassDef) and ast.get_docstring(sub) is None]
    return missing


def test_every_public_function_class_and_method_has_a_docstring():
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100  # the walk finds the packages
    missing = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files
               for line, name in missing_docstrings(path.read_text(encoding="utf-8"))]
    assert not missing, "public definitions without a docstring (add a short one):\n" + "\n".join(missing)


def test_the_check_sees_each_kind_of_definition_and_skips_the_exclusions():
    source = '''
def public(): pass
async def public_async(): pass
def _private(): pass
@overload
def stub(x: int) -> int: ...
@typing.overload
def stub(x: str) -> str: ...
def stub(x):
    """Documented."""
    def nested(): pass
class Public:
    def method(self): pass
    @property
    def prop(self): pass
    def __init__(self): pass
    def __len__(self): pass
    def _helper(self): pass
    class Inner: pass
class _Private:
    def method(self): pass
'''
    assert missing_docstrings(source) == [(2, "public"), (3, "public_async"), (12, "Public"), (13, "Public.method"),
                                          (15, "Public.prop")]
