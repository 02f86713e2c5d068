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
