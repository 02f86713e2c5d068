"""The evaluation and zero-shot libraries name what their caller typed: a refusal or warning of
``globetrotter.evaluation`` (its tasks and the modules they call) or of ``globetrotter.zeroshot`` (not their ``cli/``)
names no flag literally. It names a parameter through ``backretrieval.errors``' ``option()`` / ``given()`` /
``said()``, which give the flag (``--k 5``) inside ``cli_option_names()`` (every ``eval.py`` and
``globetrotter-zeroshot`` command runs in it) and the argument (``k=5``) to a Python caller."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted([*(ROOT / "globetrotter" / "evaluation").glob("*.py"),
                  *(ROOT / "globetrotter" / "evaluation" / "tasks").glob("*.py"),
                  *(ROOT / "globetrotter" / "zeroshot").glob("*.py")])
FLAG = re.compile(r"--[a-z]")
CHECKED = ("UserError", "warnings.warn", "warn")  # the calls whose text a caller reads


def _called(func: ast.expr) -> str:
    """``f`` or ``module.f`` of a call's function."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


def flag_literals(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: text`` of each string constant holding a flag (``--x``) inside a ``UserError(...)`` or
    ``warnings.warn(...)`` call, f-string parts included; the first argument of ``said()`` (the command line's own
    wording, said only under ``cli_option_names()``) is left out."""
    found = []
    for call in ast.walk(ast.parse(source, filename)):
        if not (isinstance(call, ast.Call) and _called(call.func) in CHECKED):
            continue
        cli_wording = {id(node) for said in ast.walk(call) if isinstance(said, ast.Call) and
                       _called(said.func) == "said" and said.args for node in ast.walk(said.args[0])}
        for node in ast.walk(call):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in cli_wording
                    and FLAG.search(node.value)):
                found.append((node.lineno, f"{filename}:{node.lineno}: {node.value!r}"))
    return [text for _, text in sorted(found)]


def test_the_checker_finds_a_flag_in_a_refusal_or_warning_and_passes_said_and_the_rest():
    bad = ('def f(k, w):\n'
           '    if k > 3:\n'
           '        raise UserError(f"{k}: lower --k or sample more groups")\n'
           '    warnings.warn("give --split", BackRetrievalWarning)\n'
           '    raise UserError(f"{said(f\'--d-model {w}\', f\'d_model={w}\')}: give more --layers")\n')
    assert flag_literals(bad, "m.py") == ["m.py:3: ': lower --k or sample more groups'", "m.py:4: 'give --split'",
                                          "m.py:5: ': give more --layers'"]
    good = ('def f(k, w):\n'
            '    # a comment may say --k\n'
            '    """and a docstring --k"""\n'
            '    note = "lower --k"  # no refusal: not checked\n'
            '    raise UserError(f"{given(\'k\', k)}: lower {option(\'k\')} ({said(\'--d-model\', \'d_model\')})")\n')
    assert flag_literals(good) == []


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_refusal_of_the_evaluation_or_zeroshot_library_names_a_flag_literally(path):
    found = flag_literals(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "name the parameter with option()/given()/said(): " + "; ".join(found)
