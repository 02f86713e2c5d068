"""The import graph of ``globetrotter``, ``backretrieval`` and ``data_prep``: no cycles, one direction.

docs/design.md section 2: ``train.py/eval.py -> globetrotter -> data_prep`` and ``globetrotter -> backretrieval``;
``data_prep`` imports neither ``globetrotter`` nor ``backretrieval``, and ``backretrieval`` imports neither
``globetrotter`` nor ``data_prep``.

The graph is read from the source with :mod:`ast` (nothing is imported): every ``import`` and ``from ... import``
statement of a module, at module level and inside functions, classes, ``try`` blocks and conditionals, relative
imports resolved against the module's package. The rules of an edge:

- a module is a ``.py`` file; a package is its ``__init__.py``. An edge to a package is an edge to its
  ``__init__.py`` and nothing else;
- ``import a.b.c`` and ``from a.b import c`` (``a.b.c`` a module) are one edge each, to ``a.b.c``: the parent
  packages' ``__init__`` files that Python runs on the way are NOT counted (else every submodule would import its
  own package, and every package whose ``__init__`` imports a submodule would be a cycle). ``from a.b import name``
  with ``name`` not a module is an edge to ``a.b`` (its ``__init__``): a submodule taking a name from its own
  package's ``__init__`` while that ``__init__`` imports the submodule IS a cycle, and is reported;
- imports under ``if TYPE_CHECKING:`` never run: they count for the direction rules (a type is a dependency) but not
  for cycles;
- imports of anything outside the three packages are ignored. Imports by name at run time
  (``importlib.import_module(NAME)``, entry points) are not seen.
"""
from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("globetrotter", "backretrieval", "data_prep")

# What each package must not import (any module of it, at any level, TYPE_CHECKING included).
FORBIDDEN = {
    "data_prep": ("globetrotter", "backretrieval"),
    "backretrieval": ("globetrotter", "data_prep"),
}

# Allowed exceptions (a stale entry fails the test too). (importer, imported): a direction edge that is allowed.
ALLOWED_DIRECTION: set[tuple[str, str]] = {
    # backretrieval's eval/correlate commands read the project's shard format with the data layer's reader, imported
    # lazily inside backretrieval.data (`from data_prep import shards`, `from data_prep.errors import UserError`),
    # and a --languages code as the converters write a split's (`normalize_language`); the metric and its other
    # modules import neither.
    ("backretrieval.data", "data_prep.shards"),
    ("backretrieval.data", "data_prep.errors"),
    ("backretrieval.data", "data_prep.converters.languages"),
}
# Cycles whose every module is listed here are allowed (none).
ALLOWED_CYCLE_MODULES: set[str] = set()


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line}{', TYPE_CHECKING' if self.type_only else ''})"


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root`` (``pkg/__init__.py`` is
    ``pkg``)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """(node, under TYPE_CHECKING) of every import statement of ``tree``, at any depth."""
    def walk(node: ast.AST, type_only: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, type_only
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), type_only)
            else:
                yield from walk(child, type_only)
    yield from walk(tree, False)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of the graph that ``name`` (a dotted name) is or lies in; None outside the graph."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> tuple[dict[str, Path], list[Edge]]:
    """The modules of ``packages`` and every import edge between them (rules in the module docstring)."""
    modules = module_files(root, packages)
    edges = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in _imports(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    up = node.level - 1
                    if up > len(base) - 1:
                        raise AssertionError(f"{path}:{node.lineno}: relative import beyond the top-level package")
                    base = base[:len(base) - up]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module
                for alias in node.names:
                    full = f"{prefix}.{alias.name}"
                    targets.append(full if alias.name != "*" and full in modules else prefix)
            for target in targets:
                known = _known(target, modules)
                if known is not None and known != name:
                    edges.append(Edge(name, known, node.lineno, type_only))
    return modules, list(dict.fromkeys(edges))  # one edge per (importer, imported, line)


def cycles(modules, edges: list[Edge]) -> list[list[str]]:
    """One cycle (a module list, first module repeated at the end) per strongly connected component of more than one
    module, over the edges that run at import or call time (TYPE_CHECKING edges left out)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for e in edges:
        if not e.type_only:
            graph[e.importer].add(e.imported)
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [shortest_cycle(graph, component) for component in components]


def shortest_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first): [start, ..., start]."""
    start = min(component)
    previous, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in its component {sorted(component)}")


def direction_violations(edges: list[Edge], forbidden=FORBIDDEN) -> list[Edge]:
    out = []
    for e in edges:
        top_from, top_to = e.importer.split(".")[0], e.imported.split(".")[0]
        if top_to in forbidden.get(top_from, ()):
            out.append(e)
    return out


def describe(cycle: list[str], edges: list[Edge]) -> str:
    lines = {(e.importer, e.imported): e.line for e in edges if not e.type_only}
    return " -> ".join(f"{a} (line {lines[(a, b)]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"



# ----------------------------------------------------------------------------- the project
MODULES, EDGES = import_graph(ROOT)


def test_the_graph_covers_every_package_and_sees_function_level_imports():
    for package in PACKAGES:
        assert package in MODULES and any(m.startswith(package + ".") for m in MODULES)
    # pipeline.py picks the feature-cache batches inside a function: the edge is there
    assert any(e.importer == "globetrotter.data.pipeline" and e.imported == "globetrotter.data.feature_batches"
               for e in EDGES)


def test_no_import_cycles():
    found = [c for c in cycles(MODULES, EDGES) if not set(c) <= ALLOWED_CYCLE_MODULES]
    for cycle in found:
        print("import cycle:", describe(cycle, EDGES))
    assert not found, "import cycles:\n  " + "\n  ".join(describe(c, EDGES) for c in found)


def test_data_prep_and_backretrieval_import_neither_package_above_them():
    found = [e for e in direction_violations(EDGES) if (e.importer, e.imported) not in ALLOWED_DIRECTION]
    for edge in found:
        print("wrong direction:", edge)
    assert not found, (f"imports against the dependency direction {FORBIDDEN} (docs/design.md section 2):\n  "
                       + "\n  ".join(map(str, found)))


def test_the_allow_lists_hold_no_stale_entry():
    seen = {(e.importer, e.imported) for e in direction_violations(EDGES)}
    stale = sorted(ALLOWED_DIRECTION - seen)
    assert not stale, f"ALLOWED_DIRECTION entries that no longer occur: {stale}: remove them"
    in_cycles = {m for c in cycles(MODULES, EDGES) for m in c}
    stale = sorted(ALLOWED_CYCLE_MODULES - in_cycles)
    assert not stale, f"ALLOWED_CYCLE_MODULES entries in no cycle any more: {stale}: remove them"


# ----------------------------------------------------------------------------- the checker itself
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_the_checker_finds_a_planted_cycle_through_a_function_level_import(tmp_path):
    root = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import g\n\ndef f():\n    return g()\n",
        "pkg/b.py": "def g():\n    from pkg.sub import c\n    return c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "try:\n    from .. import a\nexcept ImportError:\n    a = None\n",
        "pkg/alone.py": "import os\nimport pkg.a\n",
    })
    modules, edges = import_graph(root, ("pkg",))
    assert set(modules) == {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c", "pkg.alone"}
    assert cycles(modules, edges) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    assert "pkg.a (line 1) -> pkg.b (line 2) -> pkg.sub.c (line 2) -> pkg.a" in describe(
        cycles(modules, edges)[0], edges)


def test_the_package_init_rule_and_type_checking_imports(tmp_path):
    root = _write(tmp_path, {
        # a package __init__ importing its submodules, which import each other's modules: no cycle
        "ok/__init__.py": "from .x import X\nfrom .y import Y\n",
        "ok/x.py": "from ok import y\nX = 1\n",  # `y` is a module: an edge to ok.y, not to ok/__init__
        "ok/y.py": "import ok.z\nY = 2\n",  # the parents' __init__ run on the way are not edges
        "ok/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import X\n",
        # a submodule taking a name from its own package's __init__, which imports it: a cycle
        "bad/__init__.py": "from .x import X\nNAME = 1\n",
        "bad/x.py": "from bad import NAME\nX = NAME\n",
    })
    modules, edges = import_graph(root, ("ok", "bad"))
    assert ("ok.x", "ok.y") in {(e.importer, e.imported) for e in edges}
    assert [e for e in edges if e.importer == "ok.z"][0].type_only
    assert cycles(modules, edges) == [["bad", "bad.x", "bad"]]


def test_the_checker_finds_an_import_against_the_direction(tmp_path):
    root = _write(tmp_path, {
        "data_prep/__init__.py": "",
        "data_prep/io.py": "def f():\n    from globetrotter.errors import UserError\n    return UserError\n",
        "globetrotter/__init__.py": "",
        "globetrotter/errors.py": "from data_prep.io import f\n",  # the allowed direction
        "backretrieval/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import globetrotter\n",
    })
    modules, edges = import_graph(root)
    assert sorted(str(e) for e in direction_violations(edges)) == [
        "backretrieval -> globetrotter (line 3, TYPE_CHECKING)", "data_prep.io -> globetrotter.errors (line 2)"]
    assert cycles(modules, edges) == [["data_prep.io", "globetrotter.errors", "data_prep.io"]]
