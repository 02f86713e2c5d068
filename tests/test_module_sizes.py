"""Small modules with one job: no module of ``backretrieval``, ``globetrotter`` or ``data_prep`` (nor ``train.py``,
``eval.py`` or a script of ``experiments/`` or ``bench/``, or a module beside them) is over 400 lines, and no
``eval.py`` sub-command module (``globetrotter/evaluation/cli/``) is over 200: past that, a module is split along its
seams, not trimmed. Tests are not held to it."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backretrieval", "globetrotter", "data_prep")
SCRIPT_FOLDERS = ("experiments", "bench")
MODULE_LIMIT = 400
SUBCOMMAND_LIMIT = 200
SUBCOMMANDS = ROOT / "globetrotter" / "evaluation" / "cli"


def line_count(path: Path) -> int:
    """Lines of a source file, as ``wc -l`` counts them."""
    return path.read_bytes().count(b"\n")


def oversized(paths: list[Path], limit: int, root: Path = ROOT) -> list[str]:
    """``path: N lines`` (relative to ``root``) for each file of ``paths`` over ``limit`` lines."""
    return [f"{path.relative_to(root)}: {n} lines" for path in paths if (n := line_count(path)) > limit]


def test_no_module_is_over_400_lines():
    modules = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    modules += [ROOT / "train.py", ROOT / "eval.py"]
    assert len(modules) > 100  # the walk finds the packages
    too_long = oversized(modules, MODULE_LIMIT)
    assert not too_long, f"modules over {MODULE_LIMIT} lines (split each along its seams):\n" + "\n".join(too_long)


def test_no_experiment_or_bench_script_is_over_400_lines():
    scripts = [path for folder in SCRIPT_FOLDERS for path in sorted((ROOT / folder).glob("*.py"))]
    assert len(scripts) > 20  # the walk finds the scripts
    too_long = oversized(scripts, MODULE_LIMIT)
    assert not too_long, (f"experiments/ and bench/ files over {MODULE_LIMIT} lines (split each along its seams, into "
                          "the script and a module beside it):\n" + "\n".join(too_long))


def test_no_eval_subcommand_module_is_over_200_lines():
    modules = sorted(SUBCOMMANDS.glob("*.py"))
    assert len(modules) > 5  # the sub-command modules are where this test looks
    too_long = oversized(modules, SUBCOMMAND_LIMIT)
    assert not too_long, (f"eval.py sub-command modules over {SUBCOMMAND_LIMIT} lines (library work belongs in "
                          "globetrotter/evaluation/):\n" + "\n".join(too_long))


def test_the_count_is_wc_minus_l_and_the_limit_is_inclusive(tmp_path):
    at_limit, over = tmp_path / "at.py", tmp_path / "over.py"
    at_limit.write_text("x = 1\n" * 3)
    over.write_text("x = 1\n" * 4)
    assert line_count(at_limit) == 3
    assert oversized([at_limit, over], 3, root=tmp_path) == ["over.py: 4 lines"]
