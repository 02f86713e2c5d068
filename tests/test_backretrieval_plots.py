"""What each BackRetrieval figure draws, and from which numbers: the series on each axis, the labels, the colour
scale, the chance level and the title's N. The figure is caught before it is written (``save_figure``) and its
artists are read back, against values the test sets by hand."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from backretrieval import plots


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions would write, in order, left open for reading."""
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi=120: figures.append(fig) or path)
    yield figures
    for fig in figures:
        plots.pyplot().close(fig)


def protocol(n_models: int) -> dict:
    """A correlate pair result: model m has XLR@5 = m/10, BkR@5 = 1 - m/10 and CORR = m/20 at seed 1 (other values at
    seed 0), and seed-dependent correlation figures."""
    models = {f"m{m}": {"per_seed": [{"xlr@5": 0.9, "bkr@5": 0.9, "corr": 0.9},
                                     {"xlr@5": m / 10, "bkr@5": 1 - m / 10, "corr": m / 20}]}
              for m in range(n_models)}
    figure = {"mean": 0.0, "per_seed": [0.11, 0.22]}
    correlation = {"@5": {"pearson": {"bkr": {**figure, "per_seed": [0.11, -0.31]},
                                      "corr": {**figure, "per_seed": [0.12, 0.42]}},
                          "spearman": {"bkr": {**figure, "per_seed": [0.13, -0.53]},
                                       "corr": {**figure, "per_seed": [0.14, 0.64]}}}}
    return {"models": models, "correlation": correlation, "seeds": [7, 8], "n": 30}


def test_the_scatter_draws_bkr_and_corr_against_xlr_of_the_seed_asked_with_that_seeds_correlations(drawn):
    plots.scatter_bkr_vs_xlr(protocol(3), 5, "unused.png", seed_index=1)
    bkr_ax, corr_ax = drawn[0].axes
    xlr = [m / 10 for m in range(3)]
    np.testing.assert_allclose(bkr_ax.collections[0].get_offsets(), np.c_[xlr, [1 - x for x in xlr]])
    np.testing.assert_allclose(corr_ax.collections[0].get_offsets(), np.c_[xlr, [m / 20 for m in range(3)]])
    assert bkr_ax.get_xlabel() == corr_ax.get_xlabel() == "ground truth XLR R@5"
    assert bkr_ax.get_ylabel() == "BackRetrieval R@5" and corr_ax.get_ylabel().startswith("CORR")
    assert bkr_ax.get_title() == "Pearson -0.31, Spearman -0.53"  # seed 1's figures, BkR's on BkR's panel
    assert corr_ax.get_title() == "Pearson 0.42, Spearman 0.64"
    assert [t.get_text() for t in bkr_ax.texts] == ["m0", "m1", "m2"]
    assert drawn[0].get_suptitle() == "BkR vs XLR (seed 8, N=30)"


@pytest.mark.parametrize("n_models, numbered", [(5, False), (6, True)])
def test_more_than_five_models_are_numbered_with_a_key(drawn, n_models, numbered):
    plots.scatter_bkr_vs_xlr(protocol(n_models), 5, "unused.png", seed_index=1)
    axes = drawn[0].axes
    assert len(axes) == (3 if numbered else 2)
    tags = [t.get_text() for t in axes[0].texts]
    assert tags == ([str(i) for i in range(1, n_models + 1)] if numbered else [f"m{m}" for m in range(n_models)])
    if numbered:
        assert [t.get_text() for t in axes[2].get_legend().get_texts()] == [f"{i}  m{i - 1}" for i in range(1, 7)]


def test_point_labels_merge_only_points_at_the_same_place():
    labels = plots.point_labels([0.5, 0.5, 0.5, 0.2], [0.1, 0.1, 0.3, 0.1], ["a", "b", "c", "d"])
    assert sorted(labels) == sorted([(0.5, 0.1, "a,b"), (0.5, 0.3, "c"), (0.2, 0.1, "d")])


def test_chance_is_k_over_the_ranked_side_capped_at_one_and_averaged_over_pairs():
    pair = {"n_src": 20, "n_tgt": 50, "n_xlr": 40}
    assert plots.pair_chance(pair, "bkr@5") == 5 / 20  # BkR ranks the source images
    assert plots.pair_chance(pair, "xlr@5") == 5 / 40  # XLR ranks the translations
    assert plots.pair_chance(pair, "bkr@50") == 1.0  # a recall is at most 1
    assert plots.pair_chance(pair, "corr") is None and plots.pair_chance({"n_src": 0}, "bkr@5") is None
    assert plots.mean_chance([pair, {"n_src": 10}], "bkr@5") == pytest.approx((0.25 + 0.5) / 2)
    assert plots.mean_chance([{"n_src": 0}], "bkr@5") is None


def test_a_title_gives_the_range_of_the_ranked_sides_sizes():
    pairs = [{"n_src": 30, "n_xlr": 12}, {"n_src": 10, "n_xlr": 12}, {"n_src": 20, "n_xlr": 12}]
    assert plots.describe_pairs(pairs, "bkr@5", g="g0") == f"N=10–30, g=g0, chance ≈ {np.mean([5/30, 5/10, 5/20]):.3g}"
    assert plots.describe_pairs(pairs, "xlr@6") == "N=12, chance ≈ 0.5"


def test_the_heat_map_puts_each_pair_in_its_cell_on_a_fixed_recall_scale(drawn):
    """Rows are source languages and columns targets; recall is coloured on 0-1 (two models' maps compare); a dark
    cell (viridis' low end) gets white text, a light one (its yellow high end) black text."""
    result = {"langs": ["en", "de", "fr"],
              "matrix": {"bkr@5": [[np.nan, 0.05, 0.10], [0.95, np.nan, 0.20], [0.30, 0.40, np.nan]]},
              "pairs": {"en->de": {"n_src": 10}, "de->en": {"n_src": 20}}}
    plots.pair_heatmap(result, "bkr@5", "unused.png")
    ax = drawn[0].axes[0]
    assert ax.images[0].get_clim() == (0.0, 1.0)
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
    assert {rc: t.get_text() for rc, t in cells.items()} == {
        (0, 1): "0.05", (0, 2): "0.10", (1, 0): "0.95", (1, 2): "0.20", (2, 0): "0.30", (2, 1): "0.40"}
    assert cells[(0, 1)].get_color() == "w" and cells[(1, 0)].get_color() == "k"
    assert [t.get_text() for t in ax.get_xticklabels()] == [t.get_text() for t in ax.get_yticklabels()] == result["langs"]
    assert ax.get_xlabel() == "target language" and ax.get_ylabel() == "source language"
    assert ax.get_title().endswith(f"N=10–20, chance ≈ {np.mean([5/10, 5/20]):.3g}")


def test_the_box_plot_has_one_box_per_model_under_its_name_and_the_chance_of_every_pair(drawn):
    per_model = {"A": {"pairs": {"en->de": {"bkr@5": 0.6, "n_src": 10}, "de->en": {"bkr@5": 0.8, "n_src": 10}}},
                 "B": {"pairs": {"en->de": {"bkr@5": 0.2, "n_src": 50}}}}
    plots.pair_boxplot(per_model, "bkr@5", "unused.png", annotate=["de->en"])
    ax = drawn[0].axes[0]
    ticks = dict(zip([t.get_text() for t in ax.get_xticklabels()], ax.get_xticks()))
    points = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    for name, xy in zip(["A", "B"], points):  # each model's points sit on its own tick, at its own scores
        assert np.all(np.abs(xy[:, 0] - ticks[name]) <= 0.12)
        assert sorted(xy[:, 1]) == sorted(p["bkr@5"] for p in per_model[name]["pairs"].values())
    median_colour = matplotlib.rcParams["boxplot.medianprops.color"]  # how matplotlib tells a median line
    medians = [line.get_ydata()[0] for line in ax.lines if line.get_color() == median_colour]
    assert sorted(medians) == [0.2, 0.7]
    chance = np.mean([5 / 10, 5 / 10, 5 / 50])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"chance {chance:.3g}"]
    assert [t.get_text() for t in ax.texts] == ["de->en"]
