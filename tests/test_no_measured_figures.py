"""Results live in docs/: no argparse help text (help, description, epilog) and no config comment carries a
measured figure such as a percentage, an "N×" ratio or "Nx faster". Numbers that are not measurements
(a confidence level, a definition, a setting) are named in ``ALLOWED``."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

FIGURE = re.compile(r"\d(?:[.,]\d+)?\s?(?:%|×)|\d(?:\.\d+)?x\b")
ALLOWED = (
    "95%",    # the bootstrap intervals' level
    "top 1%",  # the definition of a hub (backretrieval.hubness.HUB_SHARE)
    "~50%",   # the correspondence test's chance
    "0.01x",  # configs/adapt.yaml: the learning-rate scale of configs/flickr8k.yaml
    "9x the scenes",  # configs/supervised-paper.yaml: the data set's size, not a measurement
    "target of 10x",  # bench/bench_feature_cache.py: the bar the benchmark checks
    "at least 2x",    # bench/bench_train.py: likewise
)
SOURCES = ["globetrotter", "backretrieval", "data_prep", "experiments", "bench"]
KEYWORDS = {"help", "description", "epilog"}


def _strings(node: ast.AST) -> list[str]:
    """Every string constant inside ``node`` (literal parts of f-strings and concatenations included)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _help_texts(path: Path) -> list[str]:
    """The help, description and epilog texts ``path`` gives argparse, with the module constants they name and
    the module docstring where they read ``__doc__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
    texts = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg not in KEYWORDS:
                continue
            texts += _strings(kw.value)
            for name in ast.walk(kw.value):
                if isinstance(name, ast.Name) and name.id in constants:
                    texts += _strings(constants[name.id])
                if isinstance(name, ast.Name) and name.id == "__doc__":
                    texts.append(ast.get_docstring(tree) or "")
    return texts


def _figures(text: str) -> list[str]:
    """The figure-like spans of ``text`` (with 20 characters either side) that no ``ALLOWED`` phrase covers."""
    covered = [(m.start(), m.end()) for a in ALLOWED for m in re.finditer(re.escape(a), text)]
    return [text[max(0, m.start() - 20): m.end() + 20].replace("\n", " ") for m in FIGURE.finditer(text)
            if not any(lo <= m.start() and m.end() <= hi for lo, hi in covered)]


def test_no_help_text_carries_a_measured_figure():
    files = [REPO / "train.py", REPO / "eval.py"]
    for top in SOURCES:
        files += sorted((REPO / top).rglob("*.py"))
    bad = [f"{path.relative_to(REPO)}: ...{span}..." for path in files for text in _help_texts(path)
           for span in _figures(text)]
    assert not bad, "measured figures in --help texts (move them to docs/):\n" + "\n".join(bad)


def test_no_config_comment_carries_a_measured_figure():
    bad = []
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "#" not in line:
                continue
            comment = line[line.index("#"):]
            bad += [f"{path.relative_to(REPO)}:{number}: ...{span}..." for span in _figures(comment)]
    assert not bad, "measured figures in config comments (move them to docs/):\n" + "\n".join(bad)


def test_the_check_sees_a_figure_in_a_help_text_and_a_comment(tmp_path):
    """The two checks above would fail on a percentage, a "×" ratio or an "x faster" in either place."""
    source = tmp_path / "cli.py"
    source.write_text('HELP = "pairs (about 1.8× faster)"\n'
                      'p.add_argument("--k", help="K (default 10; 34.25% on Flickr8k)")\n'
                      'p.add_argument("--w", help=HELP)\n'
                      'p.add_argument("--level", help="interval level (default: 95%% intervals)")\n')
    spans = [span for text in _help_texts(source) for span in _figures(text)]
    assert len(spans) == 2 and any("34.25%" in s for s in spans) and any("1.8×" in s for s in spans)
    assert _figures("# 3x faster than pixels")
