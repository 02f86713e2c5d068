"""Figures of the paper: BkR vs XLR scatter (Fig. 2), per-pair box plot (Fig. 3), pair heat maps.

All functions write a PNG with matplotlib's Agg backend and return the path.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use: scoring needs no matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Lay ``fig`` out, write it to ``path`` (PNG; parent folders made), close it and return the path."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def chance_line(ax: Axes, value: float | None, label: str | None = "chance", fmt: str = "{:.3g}",
                spans: Iterable[tuple[float, float]] | None = None, **style: Any) -> Line2D | LineCollection | None:
    """A dashed grey horizontal line at ``value`` (the score a random ranking gets), labelled in the legend as
    ``label`` and its value (``fmt``; no legend entry when ``label`` is None); across the axes, or only over the
    ``spans`` ((x0, x1) pairs in data units, e.g. the bars of one series). Nothing when ``value`` is None or not
    finite. Returns the artist or None."""
    if value is None or not np.isfinite(value):
        return None
    style = {"color": "0.3", "linestyle": "--", "linewidth": 1.0, "zorder": 3, **style}
    text = None if label is None else f"{label} {fmt.format(value)}".strip()
    if spans is None:
        return ax.axhline(value, label=text, **style)
    x0, x1 = zip(*spans)
    style["colors"], style["linestyles"] = style.pop("color"), style.pop("linestyle")
    return ax.hlines([value] * len(x0), x0, x1, label=text, **style)  # type: ignore[arg-type]  # None: no legend entry


def point_labels(xs: Sequence[float], ys: Sequence[float], names: Sequence[str]) -> list[tuple[float, float, str]]:
    """One label per distinct point: the ``names`` of the points at the same (x, y) joined by commas, so that
    models that score alike share one label instead of printing over each other."""
    at: dict[tuple[float, float], list[str]] = {}
    for x, y, name in zip(xs, ys, names):
        at.setdefault((round(float(x), 9), round(float(y), 9)), []).append(name)
    return [(x, y, ",".join(group)) for (x, y), group in at.items()]


def scatter_bkr_vs_xlr(protocol_result: dict, k: int, path: str | Path, seed_index: int = 0, title: str = "") -> Path:
    """Paper Fig. 2: one point per model, x = XLR@K, y = BkR@K (left) and CORR (right), one seed. With more than
    five models each point is labelled with its model's number, listed with the names in a key on the right;
    models at the same point share one label."""
    plt = pyplot()
    names = list(protocol_result["models"])
    recs = [protocol_result["models"][m]["per_seed"][seed_index] for m in names]
    xlr = [r[f"xlr@{k}"] for r in recs]
    numbered = len(names) > 5
    if numbered:
        fig, axes = plt.subplots(1, 3, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 1, 0.3]})
        key = axes[2]
        key.axis("off")
        handles = [key.plot([], [], linestyle="none")[0] for _ in names]
        key.legend(handles, [f"{i}  {name}" for i, name in enumerate(names, 1)], loc="center left", fontsize=7,
                   handlelength=0, handletextpad=0, frameon=False, title="models", title_fontsize=8)
    else:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    tags = [str(i) for i in range(1, len(names) + 1)] if numbered else names
    corr = protocol_result.get("correlation", {}).get(f"@{k}")
    panels = ((axes[0], f"bkr@{k}", f"BackRetrieval R@{k}"), (axes[1], "corr", "CORR (Spearman of distances)"))
    for ax, key_name, label in panels:
        ys = [r[key_name] for r in recs]
        ax.scatter(xlr, ys, s=30)
        for x, y, text in point_labels(xlr, ys, tags):
            ax.annotate(text, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"ground truth XLR R@{k}")
        ax.set_ylabel(label)
        if corr:
            which = "bkr" if key_name.startswith("bkr") else "corr"
            ax.set_title(f"Pearson {corr['pearson'][which]['per_seed'][seed_index]:.2f}, "
                         f"Spearman {corr['spearman'][which]['per_seed'][seed_index]:.2f}", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"BkR vs XLR (seed {protocol_result['seeds'][seed_index]}, N={protocol_result['n']})")
    return save_figure(fig, path)


def metric_name(metric: str) -> str:
    """A record's metric key as a figure names it: ``bkr@10`` -> ``BkR R@10``, ``xlr@5`` -> ``XLR R@5``
    (ground truth), ``corr`` -> ``CORR``."""
    kind, _, k = metric.partition("@")
    return {"bkr": f"BkR R@{k}", "xlr": f"XLR R@{k} (ground truth)"}.get(kind, metric.upper()) if k else metric.upper()


def pair_chance(entry: Mapping, metric: str) -> float | None:
    """The recall at chance of one :func:`backretrieval.evaluate_pairs` pair: ``K / n_src`` for BkR@K (a random f
    retrieves a random target, whose image ranks the query's own image uniformly among the source images; images
    shared by several captions make it a little higher), ``K / n_xlr`` for XLR@K; None for other metrics or an
    empty side."""
    kind, _, k = metric.partition("@")
    n = entry.get({"bkr": "n_src", "xlr": "n_xlr"}.get(kind, ""), 0)
    return min(1.0, int(k) / n) if k and n else None


def mean_chance(pairs: Sequence[Mapping], metric: str) -> float | None:
    """:func:`pair_chance` averaged over ``pairs`` that have one (None if none has)."""
    values = [c for c in (pair_chance(p, metric) for p in pairs) if c is not None]
    return float(np.mean(values)) if values else None


def describe_pairs(pairs: Sequence[Mapping], metric: str, g: str | None = None) -> str:
    """``N=… captions per side, g=…, chance ≈ …`` for a figure's title: the range of the pairs' source sizes (``n_xlr``
    for XLR), the image model ``g`` when given, and :func:`mean_chance`."""
    key = "n_xlr" if metric.startswith("xlr") else "n_src"
    sizes = sorted({int(p[key]) for p in pairs if p.get(key)})
    parts = [f"N={sizes[0]}" if len(sizes) == 1 else f"N={sizes[0]}–{sizes[-1]}"] if sizes else []
    if g is not None:
        parts.append(f"g={g}")
    chance = mean_chance(pairs, metric)
    if chance is not None:
        parts.append(f"chance ≈ {chance:.3g}")
    return ", ".join(parts)


def pair_heatmap(result: dict, metric: str, path: str | Path, title: str = "", g: str | None = None) -> Path:
    """Heat map of an :func:`backretrieval.evaluate_pairs` matrix (rows: source, columns: target). Recall metrics
    (``bkr@K``, ``xlr@K``) are coloured on a fixed 0–1 scale, so that two models' maps compare; the title says N,
    ``g`` (the image model, when given) and the chance level; cell labels are dark on light cells."""
    plt = pyplot()
    langs, mat = result["langs"], np.asarray(result["matrix"][metric], dtype=float)
    size = max(4.0, 0.6 * len(langs) + 1.6)  # two languages: room for the title and the colour bar
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    recall = metric.startswith(("bkr@", "xlr@"))
    top = float(np.nanmax(np.abs(mat))) if np.isfinite(mat).any() else 1.0
    lo, hi = (0.0, 1.0) if recall else (-max(1e-9, top), max(1e-9, top))
    cmap = plt.get_cmap("viridis" if recall else "RdBu_r")
    im = ax.imshow(mat, cmap=cmap, vmin=lo, vmax=hi)
    ax.set_xticks(range(len(langs)), langs)
    ax.set_yticks(range(len(langs)), langs)
    ax.set_xlabel("target language")
    ax.set_ylabel("source language")
    if len(langs) <= 12:
        for i in range(len(langs)):
            for j in range(len(langs)):
                if np.isfinite(mat[i, j]):
                    r, gr, b, _ = cmap((mat[i, j] - lo) / (hi - lo))
                    light = 0.299 * r + 0.587 * gr + 0.114 * b > 0.5  # perceived brightness of the cell
                    ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=7, color="k" if light else "w")
    fig.colorbar(im, ax=ax, label=metric_name(metric))
    about = describe_pairs(list(result.get("pairs", {}).values()), metric, g)
    ax.set_title((title or metric_name(metric)) + (f"\n{about}" if about else ""), fontsize=10)
    return save_figure(fig, path)


def pair_boxplot(per_model: Mapping[str, dict], metric: str, path: str | Path, annotate: Sequence[str] = (),
                 g: str | None = None) -> Path:
    """Paper Fig. 3: per model, a box of its per-language-pair scores (one point per pair), with the chance level
    as a dashed line and N, ``g`` (the image model, when given) and chance in the title.

    ``per_model[name]`` is an :func:`backretrieval.evaluate_pairs` result; pairs named in
    ``annotate`` (e.g. ``"en->ar"``) are labelled.
    """
    plt = pyplot()
    names = list(per_model)
    data = [[p[metric] for p in per_model[m]["pairs"].values() if metric in p] for m in names]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 + 1.2 * len(names)), 4))
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right", fontsize=8)
    rng = np.random.default_rng(0)
    for i, m in enumerate(names, start=1):
        pairs = [(k, p[metric]) for k, p in per_model[m]["pairs"].items() if metric in p]
        xs = i + rng.uniform(-0.12, 0.12, len(pairs))
        ax.scatter(xs, [v for _, v in pairs], s=10, alpha=0.7)
        for x, (label, v) in zip(xs, pairs):
            if label in annotate:
                ax.annotate(label, (x, v), fontsize=7, xytext=(4, 0), textcoords="offset points")
    every = [p for m in names for p in per_model[m]["pairs"].values() if metric in p]
    if chance_line(ax, mean_chance(every, metric)) is not None:
        ax.legend(fontsize=7)
    ax.set_ylabel(metric_name(metric))
    about = describe_pairs(every, metric, g)
    ax.set_title(f"{metric_name(metric)} per language pair" + (f"\n{about}" if about else ""), fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)
