"""Draw what bounds the full model on the photos: translation against how well the image vectors agree.

    cd /path/to/repo && .venv/bin/python experiments/plot_image_vectors.py \\
        --table docs/figures/image-vectors.csv --out docs/figures/image-vectors.png

The table holds the measured figures of docs/results.md ("What bounds the full model: its image features"), one
row per set of image vectors: ``label,kind,agreement,full,matched_twin,paper_twin`` (``#`` lines are comments;
``kind`` is ``blend``, vectors that read captions and so are a yardstick, or ``method``; empty cells where a model
was not trained). The figure draws the full model and the images-matched twin along the blends, the methods as
labelled points, and the two targets of the project (half the paper-setting twin, 0.8 of the images-matched one)
at the level of the twins on the shipped vectors, the first row of kind ``method`` with both twins.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Sequence, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.plots import save_figure  # noqa: E402  (sets the Agg backend)
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox

COLUMNS = ("label", "kind", "agreement", "full", "matched_twin", "paper_twin")
KINDS = ("blend", "method")
Curve = tuple[Sequence[float], Sequence[float]]  # a polyline: its xs and ys (data units)
Point = tuple[float, float]


class Row(NamedTuple):
    """One set of image vectors: its screen agreement and the translation (%) each model reached on it."""

    label: str
    kind: str
    agreement: float
    full: float
    matched_twin: float | None
    paper_twin: float | None


def _number(text: str, where: str, column: str) -> float:
    if not text.strip():
        raise UserError(f"{where}: column {column!r} is empty, expected a number")
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{where}: column {column!r} is {text!r}, expected a number") from None


def _optional_number(text: str, where: str, column: str) -> float | None:
    """:func:`_number`, None for an empty cell (a model that was not trained)."""
    return _number(text, where, column) if text.strip() else None


def read_table(path: str | Path) -> list[Row]:
    """The rows of a CSV with the header ``label,kind,agreement,full,matched_twin,paper_twin``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file (expected a CSV of {','.join(COLUMNS)})")
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise UserError(f"{path}: no rows (expected the header {','.join(COLUMNS)}, then one row per set of vectors)")
    header_line, header = lines[0]
    if tuple(c.strip() for c in next(csv.reader([header]))) != COLUMNS:
        raise UserError(f"{path}:{header_line}: header {header!r}, expected {','.join(COLUMNS)}")
    rows = []
    for number, line in lines[1:]:
        cells = next(csv.reader([line]))
        where = f"{path}:{number}"
        if len(cells) != len(COLUMNS):
            raise UserError(f"{where}: {len(cells)} cells, expected {len(COLUMNS)} ({','.join(COLUMNS)})")
        label, kind = cells[0].strip(), cells[1].strip()
        if kind not in KINDS:
            raise UserError(f"{where}: kind {kind!r}, expected one of {', '.join(KINDS)}")
        agreement, full = (_number(text, where, column) for text, column in zip(cells[2:4], COLUMNS[2:4]))
        matched_twin, paper_twin = (_optional_number(text, where, column)
                                    for text, column in zip(cells[4:], COLUMNS[4:]))
        rows.append(Row(label, kind, agreement, full, matched_twin, paper_twin))
    if _shipped_twins(rows) is None:
        raise UserError(f"{path}: no row of kind 'method' with both twins, which the targets are drawn from")
    return rows


def _shipped_twins(rows: list[Row]) -> tuple[float, float] | None:
    """``(matched_twin, paper_twin)`` of the shipped vectors' row: the first of kind ``method`` with both twins."""
    return next(((r.matched_twin, r.paper_twin) for r in rows if r.kind == "method" and r.matched_twin is not None
                 and r.paper_twin is not None), None)


def targets(rows: list[Row]) -> dict[str, float]:
    """The project's two targets in this measure: half the paper-setting twin and 0.8 of the images-matched twin,
    both trained on the shipped vectors (:func:`_shipped_twins`)."""
    twins = _shipped_twins(rows)
    if twins is None:  # read_table refuses such a table
        raise UserError("no row of kind 'method' with both twins, which the targets are drawn from")
    matched_twin, paper_twin = twins
    return {"half the paper-setting twin": 0.5 * paper_twin, "0.8 x the images-matched twin": 0.8 * matched_twin}


def _label_line(ax: Axes, text: str, level: float, curves: Sequence[Curve], points: Sequence[Point]) -> None:
    """Write ``text`` along the horizontal line at ``level``: above it at the left edge, else above it at the right
    edge, else below it (left, then right), the first place where no curve (``(xs, ys)`` polylines) and no point
    crosses the text; the last one tried when every place is crossed."""
    renderer = cast("FigureCanvasAgg", ax.figure.canvas).get_renderer()  # the Agg backend, set on import
    (x0, x1) = ax.get_xlim()
    for va in ("bottom", "top"):
        for x, ha in ((x0, "left"), (x1, "right")):
            label = ax.text(x, level, text, ha=ha, va=va, fontsize=7, color="tab:green")
            box = label.get_window_extent(renderer).transformed(ax.transData.inverted())
            if not _crosses(box, curves, points):
                return
            label.remove()
    ax.text(x1, level, text, ha="right", va="top", fontsize=7, color="tab:green")


def _crosses(box: Bbox, curves: Sequence[Curve], points: Sequence[Point]) -> bool:
    """Whether a polyline of ``curves`` or a point of ``points`` (data units) passes through ``box``."""
    import numpy as np

    if any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1 for x, y in points):
        return True
    for xs, ys in curves:
        if len(xs) < 2:
            continue
        inside = np.linspace(max(box.x0, min(xs)), min(box.x1, max(xs)), 200)
        if len(inside) and inside[0] <= inside[-1]:
            y = np.interp(inside, xs, ys)
            if ((y >= box.y0) & (y <= box.y1)).any():
                return True
    return False


def plot(rows: list[Row], out: str | Path) -> Path:
    """Draw the figure into ``out`` (PNG) and return its path."""
    blends = sorted((r for r in rows if r.kind == "blend"), key=lambda r: r.agreement)
    methods = [r for r in rows if r.kind == "method"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    if blends:
        ax.plot([r.agreement for r in blends], [r.full for r in blends], "o-", color="tab:blue",
                label="full model, blends with what people said")
        twin = [(r.agreement, r.matched_twin) for r in blends if r.matched_twin is not None]
        ax.plot([x for x, _ in twin], [y for _, y in twin], "s--", color="tab:gray",
                label="images-matched twin, the same blends")
    ax.scatter([r.agreement for r in methods], [r.full for r in methods], marker="D", color="tab:red", zorder=3,
               label="full model, image vectors a method can build")
    for r in methods:
        ax.annotate(r.label, (r.agreement, r.full), textcoords="offset points", xytext=(6, -3), fontsize=7)
    curves = [([r.agreement for r in blends], [r.full for r in blends]),
              ([x for x, _ in twin], [y for _, y in twin])] if blends else []
    points = [(r.agreement, r.full) for r in methods]
    for text, level in targets(rows).items():
        ax.axhline(level, color="tab:green", lw=0.8, ls=":")
        _label_line(ax, f" target: {text} ({level:.1f}%) ", level, curves, points)
    ax.set_xlabel("agreement@10 of the image vectors (screen of 800 held-out train images)")
    ax.set_ylabel("sentence translation, parallel val (%)")
    ax.set_title("Flickr8k: the full model follows its image vectors", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, 0.87))
    ax.grid(alpha=0.3)
    return save_figure(fig, out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default="docs/figures/image-vectors.csv",
                    help="the CSV of measured figures (default: %(default)s)")
    ap.add_argument("--out", default="docs/figures/image-vectors.png", help="the PNG to write (default: %(default)s)")
    args = ap.parse_args(argv)
    print(f"wrote {plot(read_table(args.table), args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
