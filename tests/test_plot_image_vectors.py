"""experiments/plot_image_vectors.py: the figure of what bounds the full model, from the table of measured figures."""
from __future__ import annotations

import pytest

from conftest import REPO, load_experiment
from globetrotter.errors import UserError

HEADER = "label,kind,agreement,full,matched_twin,paper_twin"


@pytest.fixture(scope="module")
def fig():
    return load_experiment("plot_image_vectors")


def write(tmp_path, *rows, header=HEADER):
    path = tmp_path / "t.csv"
    path.write_text("\n".join(["# a comment", header, *rows]) + "\n")
    return path


def test_the_shipped_table_reads_and_draws(fig, tmp_path):
    rows = fig.read_table(REPO / "docs" / "figures" / "image-vectors.csv")
    assert {r.kind for r in rows} == {"blend", "method"}
    out = tmp_path / "f.png"
    assert fig.main(["--table", str(REPO / "docs" / "figures" / "image-vectors.csv"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_targets_come_from_the_first_method_row_with_both_twins(fig, tmp_path):
    rows = fig.read_table(write(tmp_path, "a,blend,0.4,30,70,", "b,method,0.45,35,,", "c,method,0.4,34,60,90",
                                "d,method,0.5,40,50,50"))
    assert [r.matched_twin for r in rows] == [70.0, None, 60.0, 50.0]
    assert fig.targets(rows) == {"half the paper-setting twin": 45.0, "0.8 x the images-matched twin": 48.0}


@pytest.mark.parametrize("rows, header, message", [
    (["a,method,0.4,34,60,90", "b,oracle,0.5,40,,"], HEADER, "t.csv:4: kind 'oracle'"),
    (["a,method,0.4,,60,90"], HEADER, "t.csv:3: column 'full' is empty"),
    (["a,method,0.4,x,60,90"], HEADER, "t.csv:3: column 'full' is 'x'"),
    (["a,method,0.4,34,60"], HEADER, "t.csv:3: 5 cells, expected 6"),
    (["a,method,0.4,34,60,90"], "label,kind,agreement,full", "t.csv:2: header"),
    (["a,method,0.4,34,,90"], HEADER, "no row of kind 'method' with both twins"),
])
def test_bad_rows_name_the_file_line_and_what_was_expected(fig, tmp_path, rows, header, message):
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("(", r"\(")):
        fig.read_table(write(tmp_path, *rows, header=header))


def test_a_missing_table_is_one_line_exit_2(fig, tmp_path, capsys):
    assert fig.run_cli(fig.main, ["--table", str(tmp_path / "none.csv"), "--out", str(tmp_path / "f.png")]) == 2
    assert "none.csv: no such file" in capsys.readouterr().err
    assert not (tmp_path / "f.png").exists()


def test_a_method_row_with_one_twin_is_not_the_shipped_one(fig, tmp_path):
    """The targets need both twins: a first method row with only the images-matched twin is passed over."""
    rows = fig.read_table(write(tmp_path, "a,method,0.4,34,60,", "  # an indented comment", "b,method,0.5,40,50,80"))
    assert fig.targets(rows) == {"half the paper-setting twin": 40.0, "0.8 x the images-matched twin": 40.0}


def test_an_empty_agreement_is_refused_like_an_empty_full(fig, tmp_path):
    with pytest.raises(UserError, match=r"t\.csv:3: column 'agreement' is empty, expected a number"):
        fig.read_table(write(tmp_path, "a,method,,34,60,90"))


def test_the_blends_are_drawn_in_order_of_agreement(fig, tmp_path, monkeypatch):
    """Rows listed in any order: the blend curve runs left to right, each point at its own row's figures."""
    drawn = {}
    monkeypatch.setattr(fig, "save_figure", lambda figure, out: drawn.setdefault("fig", figure) and out)
    rows = fig.read_table(write(tmp_path, "b,blend,0.6,30,20,", "a,blend,0.2,50,40,", "c,blend,0.4,40,,",
                                "m,method,0.5,35,60,90"))
    fig.plot(rows, tmp_path / "f.png")
    full = drawn["fig"].axes[0].lines[0]
    assert list(full.get_xdata()) == [0.2, 0.4, 0.6] and list(full.get_ydata()) == [50.0, 40.0, 30.0]
    fig.plt.close(drawn["fig"])


def test_a_table_of_comments_only_has_no_rows_and_says_what_it_expected(fig, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("# measured later\n\n   \n")
    with pytest.raises(UserError, match=rf"^{path}: no rows \(expected the header {HEADER}, then one row per set"):
        fig.read_table(path)


def test_a_box_is_crossed_by_a_point_in_it_or_a_polyline_through_it_not_by_a_lone_point_or_one_beside_it(fig):
    from matplotlib.transforms import Bbox

    box = Bbox.from_extents(1.0, 10.0, 2.0, 20.0)  # x 1-2, y 10-20
    assert fig._crosses(box, [], [(1.5, 15.0)])
    assert not fig._crosses(box, [], [(2.5, 15.0)])
    assert not fig._crosses(box, [([1.5], [15.0])], [])  # one point is no polyline: points are given apart
    assert fig._crosses(box, [([0.0, 3.0], [0.0, 30.0])], [])  # the segment passes (1.5, 15)
    assert not fig._crosses(box, [([0.0, 3.0], [30.0, 60.0])], [])  # above the box all along
    assert not fig._crosses(box, [([3.0, 4.0], [15.0, 15.0])], [])  # at the box's height, to its right


def _label(fig, points):
    figure, ax = fig.plt.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 100)
    fig._label_line(ax, "target", 50.0, [], points)
    (text,) = ax.texts
    placed = (text.get_position()[0], text.get_ha(), text.get_va())
    fig.plt.close(figure)
    return placed


def test_a_target_label_goes_to_the_first_place_no_point_crosses_else_the_last_tried(fig, monkeypatch):
    assert _label(fig, []) == (0, "left", "bottom")  # above the line at the left edge
    assert _label(fig, [(0.1, 51.0)]) == (10, "right", "bottom")  # a point there: above at the right edge
    assert _label(fig, [(0.1, 51.0), (9.9, 51.0)]) == (0, "left", "top")  # both above taken: below, left
    monkeypatch.setattr(fig, "_crosses", lambda *a: True)  # every place crossed: the last tried, below at the right
    assert _label(fig, []) == (10, "right", "top")
