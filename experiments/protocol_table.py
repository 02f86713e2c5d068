"""The table of ``experiments/sentence_protocol.py``: ``table.md`` (each row's figures, the chosen rankings, the
``--ratio`` rows and their paired-bootstrap intervals) and ``table.png`` (the same figures as bars)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

BASE_COLUMNS = ("cosine", "val-chosen")
# results[row label][seed][language set][column]: (figure %, the ranking's label, per-group hits or None[, chance %])
Results = Mapping[str, Sequence[Mapping[str, Mapping[str, tuple]]]]


def table(rows: list[tuple[str, list[str]]], results: Results, language_sets: Sequence[str], ratios: Sequence[str],
          cols: Sequence[str] = BASE_COLUMNS) -> str:
    """``table.md``: per row, each seed's figure in every language set and column, then the ranking each seed chose
    (``val-chosen``, and ``oracle`` when a column) in every language set (its own choice: one column per set when
    there are several), then the ``ratios`` rows and their intervals."""
    chosen = [c for c in ("val-chosen", "oracle") if c in cols]
    names = {"val-chosen": "chosen ranking", "oracle": "oracle's ranking"}
    several = len(language_sets) > 1
    ranking_columns = [(column, ls) for column in chosen for ls in language_sets]
    lines = ["| model | " + " | ".join(f"{ls} {c}" for ls in language_sets for c in cols) + " | "
             + " | ".join(f"{ls} {names[c]}" if several else names[c] for c, ls in ranking_columns) + " |",
             "|---|" + "---|" * (len(cols) * len(language_sets) + len(ranking_columns))]
    for label, models in rows:
        cells = []
        for ls in language_sets:
            for column in cols:
                cells.append(" / ".join(f"{results[label][i][ls][column][0]:.2f}" for i in range(len(models))))
        for column, ls in ranking_columns:
            cells.append(" / ".join(results[label][i][ls][column][1] for i in range(len(models))))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for ratio in ratios:  # seed by seed; a one-model row (a baseline) divides every seed
        top, bottom = ratio.split("/")
        below, cells = results[bottom], []
        for ls in language_sets:
            for column in cols:
                pairs = [(results[top][i][ls][column][0], below[min(i, len(below) - 1)][ls][column][0])
                         for i in range(len(results[top]))]
                cells.append(" / ".join(f"{a / b:.2f}" if b else ("inf" if a else "n/a") for a, b in pairs))
        lines.append(f"| {top} ÷ {bottom} | " + " | ".join(cells) + " |" + " |" * len(ranking_columns))
    return "\n".join(lines) + "\n" + ratio_intervals(results, language_sets, ratios, cols)


def ratio_intervals(results: Results, language_sets: Sequence[str], ratios: Sequence[str],
                    cols: Sequence[str] = BASE_COLUMNS) -> str:
    """Each ``--ratio`` cell again with its 95% interval: a paired bootstrap over the test groups (both models'
    records of the same groups, resampled together; :func:`globetrotter.evaluation.sentence.ratio_interval`)."""
    from globetrotter.evaluation.sentence import ratio_interval

    lines = []
    for ratio in ratios:
        top, bottom = ratio.split("/")
        for ls in language_sets:
            for column in cols:
                cells = []
                for i in range(len(results[top])):
                    a = results[top][i][ls][column][2]
                    b = results[bottom][min(i, len(results[bottom]) - 1)][ls][column][2]
                    if a is None or b is None or a["ids"] != b["ids"]:
                        cells.append("n/a (" + ("a record without per-group hits" if a is None or b is None
                                                else "not the same groups") + ")")
                        continue
                    r = ratio_interval((np.asarray(a["hits"]), np.asarray(a["positives"])),
                                       (np.asarray(b["hits"]), np.asarray(b["positives"])))
                    cells.append(f"{r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]")
                lines.append(f"- {top} ÷ {bottom}, {ls} {column}: " + " / ".join(cells))
    if not lines:
        return ""
    return "\n95% intervals of the ratios (paired bootstrap over the test groups):\n\n" + "\n".join(lines) + "\n"


def plot_table(rows: list[tuple[str, list[str]]], results: Results, language_sets: Sequence[str], path: Path,
               cols: Sequence[str] = BASE_COLUMNS) -> Path:
    """``table.png``: per language set, each row's figure in every column as a bar (mean over its seeds) with a dot
    per seed, so rows, columns and the spread between seeds read at a glance; the panels share the y-axis, and each
    draws the chance level of its records (a figure's optional fourth entry, in percent) as a dashed line."""
    from backretrieval.plots import chance_line
    from globetrotter.evaluation.plots import save_figure  # sets the Agg backend, before pyplot

    import matplotlib.pyplot as plt

    width = 0.8 / len(cols)
    panel = max(4.0, 0.35 * len(rows) * len(cols) + 1.5)
    fig, axes = plt.subplots(1, len(language_sets), figsize=(panel * len(language_sets), 4), squeeze=False,
                             sharey=True)
    for p, (ax, ls) in enumerate(zip(axes[0], language_sets)):
        chances: set[float] = set()
        for c, column in enumerate(cols):
            x = np.arange(len(rows)) + (c - (len(cols) - 1) / 2) * width
            figures = [[results[label][i][ls][column] for i in range(len(models))] for label, models in rows]
            seeds = [[f[0] for f in v] for v in figures]
            chances.update(round(f[3], 6) for v in figures for f in v if len(f) > 3 and f[3] is not None)
            ax.bar(x, [np.mean(v) for v in seeds], width, label=column, alpha=0.8)
            for xi, v in zip(x, seeds):
                ax.plot([xi] * len(v), v, "k.", markersize=4)
        for chance in sorted(chances):  # one level when every record of the panel scored as many groups
            chance_line(ax, chance, fmt="{:.2g}%")
        ax.set_xticks(np.arange(len(rows)), [label for label, _ in rows], rotation=20, ha="right")
        if p == 0:
            ax.set_ylabel("sentence translation, %")
        ax.set_title(ls.replace(",", "/"))
        ax.legend(fontsize=7)
    return save_figure(fig, path)
