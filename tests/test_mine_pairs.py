"""experiments/mine_pairs.py: pseudo-translation groups mined from a model's scores, one image per language."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import load_experiment
from globetrotter.errors import run_cli


@pytest.fixture(scope="module")
def mine():
    return load_experiment("mine_pairs")


def test_mutual_pairs_keep_only_neighbours_that_choose_each_other(mine):
    scores = np.array([[0.9, 0.1, 0.2],
                       [0.8, 0.7, 0.1],   # row 1's best is column 0, whose best is row 0: not mutual
                       [0.1, 0.2, 0.3]])
    assert [(r, c) for r, c, _ in mine.mutual_pairs(scores)] == [(0, 0), (2, 2)]


def test_csls_demotes_a_hub_column(mine):
    scores = np.array([[0.8, 0.2, 0.3, 0.1],
                       [0.8, 0.3, 0.1, 0.2],
                       [0.8, 0.1, 0.2, 0.1],
                       [0.8, 0.2, 0.1, 0.75],   # near the hub and near its own column 3
                       [0.8, 0.1, 0.3, 0.2]])   # column 0 is near every row: a hub
    assert scores[3].argmax() == 0
    corrected = mine.csls(scores, k=2)
    assert corrected[3].argmax() == 3
    np.testing.assert_allclose(mine.csls(scores.T, k=2), corrected.T)  # rows and columns play one part


def test_groups_join_best_edges_first_and_never_two_images_of_one_language(mine):
    lang = np.array(["en", "de", "fr", "en", "de"], dtype=object)
    # listed worst-first in part: taken in this order, (3, 1) would claim de 1 before the better (0, 1)
    edges = [(1, 2, 1.0), (3, 1, 2.0), (0, 1, 3.0), (3, 4, 0.5)]
    group = mine.group_images(edges, lang)
    assert group[0] == group[1] == group[2]          # en 0 – de 1 – fr 2
    assert group[3] != group[1]                       # (3, 1) would put en 0 and en 3 together
    assert group[3] == group[4] and group[3] >= 0
    for g in set(group.tolist()):
        members = lang[group == g]
        assert len(members) == len(set(members))


def test_an_image_without_a_kept_pair_has_no_group(mine):
    group = mine.group_images([(0, 1, 1.0)], np.array(["en", "de", "fr"], dtype=object))
    assert group[2] == -1 and group[0] == group[1] >= 0


def test_image_scores_average_the_caption_scores_of_two_images(mine):
    """Float32 as the scorer's scores (an [images, images] matrix: float64 would double it), equal to the float64
    means up to float32 rounding."""
    rng = np.random.default_rng(1)
    caption_scores = rng.normal(size=(5, 5))
    caption_image = np.array([0, 0, 1, 2, 2])
    out = mine.image_scores(lambda rows: caption_scores[rows], caption_image, 3, chunk=2)
    expected = np.array([[caption_scores[np.ix_(caption_image == a, caption_image == b)].mean() for b in range(3)]
                         for a in range(3)])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_a_missing_teacher_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "experiments" / "mine_pairs.py"), "--teacher",
                          str(tmp_path / "nope"), "--ranking", "x.json", "--split", str(tmp_path / "split"), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "nope" in out.stderr and "model not found" in out.stderr


@pytest.mark.parametrize("where", ["split", "other split"])
def test_an_out_holding_data_is_refused_before_the_teacher_is_read(mine, tmp_path, capsys, where):
    split, other = tmp_path / "train", tmp_path / "val"
    for folder in (split, other):
        folder.mkdir()
        (folder / "manifest.json").write_text('{"source": "converted"}')
        (folder / f"{folder.name}-000000.tar").write_bytes(b"shard")
    out = split if where == "split" else other
    assert run_cli(mine.main, ["--teacher", str(tmp_path / "nope"), "--ranking", "x.json", "--split", str(split),
                               "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and "\n" not in err and "nope" not in err
    assert (out / f"{out.name}-000000.tar").read_bytes() == b"shard"


@pytest.mark.parametrize("option", ["--captions-per-image", "--csls-k", "--image-weight"])
def test_a_negative_count_or_weight_is_a_usage_error(mine, tmp_path, option):
    with pytest.raises(SystemExit) as exit_:
        mine.main(["--teacher", "t", "--ranking", "r", "--split", "s", "--out", str(tmp_path / "o"), option, "-5"])
    assert exit_.value.code == 2


def test_csls_is_twice_the_score_less_both_radii_even_when_k_exceeds_a_side(mine):
    """Hand formula, each radius the mean of the row's / column's k best (all of them when k is larger than that
    side): a 2 x 4 matrix with k = 3 takes 3 of a row's 4 but both of a column's 2."""
    scores = np.array([[0.9, 0.1, 0.5, 0.3],
                       [0.2, 0.8, 0.4, 0.6]])
    r_row = np.array([np.mean([0.9, 0.5, 0.3]), np.mean([0.8, 0.6, 0.4])])
    r_col = scores.mean(0)  # a column has 2 scores, fewer than k
    np.testing.assert_allclose(mine.csls(scores, k=3), 2 * scores - r_row[:, None] - r_col[None, :])


def test_groups_take_the_best_edge_when_two_claim_one_image(mine):
    """en 0 and en 2 both pair with de 1: the better pair (2, 1) wins, whatever order the edges come in."""
    lang = np.array(["en", "de", "en"], dtype=object)
    for edges in ([(0, 1, 1.0), (2, 1, 2.0)], [(2, 1, 2.0), (0, 1, 1.0)]):
        group = mine.group_images(edges, lang)
        assert group[1] == group[2] >= 0 and group[0] == -1


def test_a_group_refuses_a_language_held_by_any_member_not_only_its_first(mine):
    """en 0 – de 1 and fr 2 – de 3 are groups; joining them by (1, 2) would put de 1 and de 3 together."""
    lang = np.array(["en", "de", "fr", "de"], dtype=object)
    group = mine.group_images([(0, 1, 3.0), (2, 3, 2.0), (1, 2, 1.0)], lang)
    assert group[0] == group[1] and group[2] == group[3] and group[0] != group[2]


def test_a_mutual_pair_carries_its_own_score(mine):
    """The score that orders the edges in :func:`group_images` is the pair's cell, row then column."""
    scores = np.array([[0.1, 0.9, 0.3],
                       [0.6, 0.2, 0.4]])
    assert mine.mutual_pairs(scores) == [(0, 1, 0.9), (1, 0, 0.6)]
