"""Figures of the evaluation (matplotlib, Agg backend, PNG).

Language-pair matrices are drawn with the languages sorted by family, as the paper's
Fig. 7 (sentence translation), Fig. 8 (word translation) and Fig. 9 (asymmetry A − Aᵀ).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# one chance line, one way to write a figure (exported: experiments/ and bench/ take it from here, Agg set)
from backretrieval.plots import chance_line, save_figure as save_figure  # noqa: E402

# ISO 639-1 (and Dari "prs") -> family, covering the paper's 52 languages and common others.
LANGUAGE_FAMILIES: dict[str, str] = {
    **dict.fromkeys(["en", "de", "nl", "af", "da", "no", "nb", "sv", "is"], "Germanic"),
    **dict.fromkeys(["fr", "es", "it", "pt", "ro", "ca", "gl"], "Romance"),
    **dict.fromkeys(["ru", "uk", "be", "pl", "cs", "sk", "sl", "hr", "bs", "sr", "bg", "mk"], "Slavic"),
    **dict.fromkeys(["lv", "lt"], "Baltic"),
    "el": "Hellenic",
    "sq": "Albanian",
    "hy": "Armenian",
    **dict.fromkeys(["hi", "ur", "bn", "pa", "mr", "gu", "ne"], "Indo-Aryan"),
    **dict.fromkeys(["fa", "prs", "ps", "ku"], "Iranian"),
    **dict.fromkeys(["fi", "et", "hu"], "Uralic"),
    **dict.fromkeys(["tr", "az", "kk", "uz"], "Turkic"),
    **dict.fromkeys(["ar", "he", "am", "mt"], "Semitic"),
    "ha": "Chadic",
    "so": "Cushitic",
    **dict.fromkeys(["sw", "zu", "xh"], "Bantu"),
    "ka": "Kartvelian",
    **dict.fromkeys(["ta", "te", "kn", "ml"], "Dravidian"),
    **dict.fromkeys(["zh", "yue"], "Sinitic"),
    "ja": "Japonic",
    "ko": "Koreanic",
    **dict.fromkeys(["th", "lo"], "Kra-Dai"),
    **dict.fromkeys(["vi", "km"], "Austroasiatic"),
    **dict.fromkeys(["id", "ms", "tl", "jv"], "Austronesian"),
}
FAMILY_ORDER = list(dict.fromkeys(LANGUAGE_FAMILIES.values()))


def family(lang: str) -> str:
    """Language family of an ISO code (region suffixes ignored); ``"Other"`` when unknown."""
    return LANGUAGE_FAMILIES.get(lang.split("-")[0].split("_")[0].lower(), "Other")


def sort_by_family(languages: Sequence[str]) -> list[str]:
    """Languages ordered by family (as Fig. 7), then by code; unknown families last."""
    def key(lang: str) -> tuple[int, str]:
        fam = family(lang)
        return (FAMILY_ORDER.index(fam) if fam in FAMILY_ORDER else len(FAMILY_ORDER), lang)

    return sorted(languages, key=key)


def cell_label(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals, a value that rounds to zero written without a sign (no "-0")."""
    text = f"{value:.{decimals}f}"
    return text.lstrip("-") if float(text) == 0 else text


def plot_language_matrix(
    matrix: np.ndarray,
    languages: Sequence[str],
    path: str | Path,
    title: str,
    diverging: bool = False,
    label: str = "%",
    scale: float = 100.0,
    floor: float = 10.0,
) -> Path:
    """Heat map of a (M, M) language-pair matrix of fractions (row = query/source, column =
    target), shown times ``scale`` (percent), languages re-ordered by family;
    ``diverging`` centres the colour map on 0 (for the asymmetry A − Aᵀ), on ±``floor`` (shown units, e.g.
    percentage points) or ±the largest |value|, whichever is larger, so that noise near 0 stays pale. Cells are
    labelled with one decimal when every value is below 20 (near chance, "1.4" not "1"), else none."""
    order = [list(languages).index(lang) for lang in sort_by_family(languages)]
    mat = np.asarray(matrix, dtype=float)[np.ix_(order, order)] * scale
    names = [languages[i] for i in order]
    size = max(4.0, 0.35 * len(names) + 2.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    largest = float(np.nanmax(np.abs(mat))) if np.isfinite(mat).any() else 0.0
    bound = max(largest, floor) or 1.0
    if diverging:
        im = ax.imshow(mat, cmap="RdBu_r", vmin=-bound, vmax=bound)
    else:
        im = ax.imshow(mat, cmap="viridis", vmin=0, vmax=scale)
    ax.set_xticks(range(len(names)), names, rotation=90)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("target language")
    ax.set_ylabel("query language")
    ax.set_title(title, fontsize=10 if "\n" in title else None)
    decimals = 1 if largest < 20 else 0
    if len(names) <= 12:
        for i in range(len(names)):
            for j in range(len(names)):
                if np.isfinite(mat[i, j]):
                    light = abs(mat[i, j]) < 0.5 * bound if diverging else mat[i, j] > 0.6 * scale
                    ax.text(j, i, cell_label(mat[i, j], decimals), ha="center", va="center", fontsize=7,
                            color="k" if light else "w")
    fig.colorbar(im, ax=ax, label=label)
    return save_figure(fig, path)


def plot_bars(values: dict[str, dict[str, float]], path: str | Path, title: str, ylabel: str,
              chance: dict[str, float] | None = None, xlabel: str = "") -> Path:
    """Grouped bar chart: ``values[group][series]`` (e.g. language -> recall@K); ``chance[series]`` (same units)
    is drawn as a dashed black line over each bar of the series, and the y-axis then reaches at least 4× the
    largest chance, so that bars at chance stay low rather than fill the plot."""
    groups = list(values)
    series = list(next(iter(values.values()))) if values else []
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(groups) * max(len(series), 1) / 2 + 3), 4))
    top = 0.0
    for s, name in enumerate(series):
        x = np.arange(len(groups)) + s * width
        heights = [values[g][name] for g in groups]
        ax.bar(x, heights, width, label=name)
        top = max([top, *[h for h in heights if np.isfinite(h)]])
        if chance and name in chance:
            chance_line(ax, chance[name], label="chance" if s == 0 else None, fmt="", spans=zip(x - width / 2,
                        x + width / 2), color="k", linewidth=1.2)
    if chance:
        ax.set_ylim(0, max(1.1 * top, 4 * max(chance.values())))
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_convergence(log: Sequence[dict], path: str | Path, title: str) -> Path:
    """Procrustes convergence: anchors and mean anchor cosine (pairwise) or objective (multi) per iteration."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    its = [e["iteration"] for e in log]
    if log and "objective" in log[0]:
        ax.plot(its, [e["objective"][-1] for e in log], marker="o")
        ax.set_ylabel("mean squared anchor distance")
    else:
        ax.plot(its, [e["mean_cosine"] for e in log], marker="o")
        ax.set_ylabel("mean anchor cosine")
    ax.set_xlabel("iteration")
    ax.set_title(title, fontsize=10 if "\n" in title else None)
    return save_figure(fig, path)


def plot_choice(rows: Sequence[dict], path: str | Path, title: str) -> Path:
    """An ``eval.py select`` record's candidates (``details.candidates``): each one's difference in mean val
    BackRetrieval from the chosen ranking with its paired 95% interval (``vs_chosen``), in candidate order; the
    candidates whose interval holds 0, which val cannot tell from the choice, in orange, the choice as a star at 0.
    The title gets the choice's own mean val BkR; the legend (only the kinds drawn) sits above the axes."""
    fig, ax = plt.subplots(figsize=(6.5, 0.28 * len(rows) + 2.0))
    drawn = {"tied": 0, "below": 0}
    choice = None
    for y, row in enumerate(rows):
        margin = row.get("vs_chosen")
        if margin is None:
            ax.plot(0, y, marker="*", markersize=12, color="tab:green", linestyle="none", label="the choice")
            choice = row
            continue
        tied = margin["lo"] <= 0 <= margin["hi"]
        drawn["tied" if tied else "below"] += 1
        ax.errorbar(margin["diff"], y, xerr=[[margin["diff"] - margin["lo"]], [margin["hi"] - margin["diff"]]],
                    fmt="o", markersize=4, capsize=2, color="tab:orange" if tied else "tab:gray")
    ax.axvline(0, color="k", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [row["label"] for row in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # top to bottom in candidate order
    if drawn["tied"]:
        ax.errorbar([], [], xerr=[], fmt="o", color="tab:orange", label=f"not told apart (interval holds 0): "
                                                                         f"{drawn['tied']}")
    if drawn["below"]:
        ax.errorbar([], [], xerr=[], fmt="o", color="tab:gray", label=f"below the choice beyond noise: "
                                                                       f"{drawn['below']}")
    entries = (choice is not None) + bool(drawn["tied"]) + bool(drawn["below"])
    ncol = entries if entries < 3 else 2  # three side by side would run past the figure's edge
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=max(ncol, 1), frameon=False,
              handletextpad=0.3, columnspacing=1.0)
    ax.set_xlabel("mean val BkR minus the choice's (paired 95% interval)")
    if choice is not None and choice.get("mean_bkr") is not None:
        title += f"\nthe choice: {choice['label']}, mean val BkR {choice['mean_bkr']:.4f}"
    ax.set_title(title, fontsize=10, pad=10 + 12 * -(-entries // max(ncol, 1)))  # above the legend's rows
    return save_figure(fig, path)
