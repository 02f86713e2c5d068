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


def test_a_baseline_teacher_and_a_missing_ranking_record_are_named_by_this_scripts_flags(mine, mined, tmp_path,
                                                                                          capsys):
    """A baseline has no run to teach from (it was an AttributeError after loading it), and read_choice's refusal
    names --ranking as typed here, not the library's Python argument."""
    assert run_cli(mine.main, ["--teacher", "tfidf", "--ranking", "x.json", "--split", str(mined.split),
                               "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --teacher tfidf: a baseline;") and "model=" not in err
    assert mined("--ranking", str(tmp_path / "missing.json"))[0] == 2
    err = capsys.readouterr().err
    assert "missing.json: no such file (--ranking takes the JSON record" in err, err


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


# --- mine() end to end: a real split read and written, the teacher's two scores planted ---------------------------
# Images of three languages show four concepts (fr lacks concept 3). An image's first two captions name its concept,
# its third another one (a decoy, never scored at the default --captions-per-image 2). The text planted pairs
# images of one concept; the look (the cached features) pairs images of one look class, another matching. Text
# scores are large and offset, as a real scorer's may be: only the per-pair z-score puts them on the look's scale.
CONCEPTS = {"en": [0, 1, 2, 3], "de": [0, 1, 2, 3], "fr": [0, 1, 2]}
LOOK_SHIFT = {"en": 0, "de": 1, "fr": 2}  # the look class of a concept-k image of a language: (k + shift) % 4


def _concept_world(root):
    """The split (captions interleaved, a stale group and an extra field on some) and each image's (lang, concept)."""
    from PIL import Image

    from data_prep.shard_writer import ShardWriter

    images = {f"img{lang}{k}": (lang, k) for lang, ks in CONCEPTS.items() for k in ks}
    with ShardWriter(root / "train", split="train", source="tiny", image_format="png", maxcount=7) as w:
        for c in range(3):  # captions interleaved across images: an image's first ones are first in the split
            for n, (img, (lang, k)) in enumerate(images.items()):
                said = k if c < 2 else (k + 1) % 4
                w.write(f"{img}-{c}", Image.new("RGB", (4, 4), (20 * n, 10 * c, 5)), f"{lang} concept{said} take{c}",
                        lang, img, group="stale" if n == 0 else None,
                        extra={"meaning": f"m{n}-{c}"} if c == 1 else None)
    return root / "train", images


class _PlantedContext:
    """Stands in for ScoringContext: a caption's score with another is 50 + 40·[they name one concept] (a constant 50
    when ``flat``), + 60 when either starts with ``hub`` (a caption near every other one)."""
    seen: list[list[str]] = []
    flat, hub = False, None

    def __init__(self, encoder, captions, langs, pool):
        self.concept = np.array([int(c.split("concept")[1].split()[0]) for c in captions])
        self.near_all = np.array([self.hub is not None and c.startswith(self.hub) for c in captions])
        _PlantedContext.seen.append(list(captions))

    def scorer(self, ranking):
        scale = 0.0 if self.flat else 40.0
        return lambda rows: (50.0 + scale * (self.concept[rows][:, None] == self.concept[None, :])
                             + 60.0 * (self.near_all[rows][:, None] | self.near_all[None, :]))


class _PlantedCache:
    """Stands in for the feature cache: an image's features are the one-hot of its look class."""

    def __init__(self, images):
        self.ids = list(images)
        self.features = np.zeros((len(images), 1, 8), dtype=np.float32)
        for i, (lang, k) in enumerate(images.values()):
            self.features[i, 0, (k + LOOK_SHIFT[lang]) % 4] = 1.0

    def rows(self, image_ids, split_dir):
        return np.array([self.ids.index(i) for i in image_ids])


@pytest.fixture
def mined(mine, tmp_path, monkeypatch):
    """``run(*flags) -> (exit code, out folder)``: mine() on the concept world, the teacher's scores planted."""
    import types

    import globetrotter.data.feature_cache as feature_cache
    import globetrotter.evaluation.scoring as scoring
    import globetrotter.evaluation.tasks.common as common
    from backretrieval.records import json_text

    split, images = _concept_world(tmp_path)
    encoder = types.SimpleNamespace(cfg=types.SimpleNamespace(data=types.SimpleNamespace(features="cache")))
    monkeypatch.setattr(common, "resolve_model", lambda model: (encoder, {"path": "teacher", "checkpoint": None}))
    monkeypatch.setattr(scoring, "ScoringContext", _PlantedContext)
    monkeypatch.setattr(feature_cache, "load_feature_cache", lambda path: _PlantedCache(images))
    for name, value in (("seen", []), ("flat", False), ("hub", None)):
        monkeypatch.setattr(_PlantedContext, name, value)
    record = tmp_path / "select-teacher.json"
    record.write_text(json_text({"model": {"path": "teacher", "checkpoint": None}, "languages": None,
                                 "details": {"chosen": {"head": "text", "maxsim": 0.0, "csls": False, "csls_k": 10}},
                                 "config": {"reference": str(split), "reference_size": None}}), encoding="utf-8")

    def run(*flags: str, out: str = "mined"):
        return run_cli(mine.main, ["--teacher", "teacher", "--ranking", str(record), "--split", str(split),
                                   "--out", str(tmp_path / out), *flags]), tmp_path / out

    run.split, run.images = split, images
    return run


def _groups(out) -> list[set[str]]:
    """The output's groups, each the set of its images; a caption's group is its image's."""
    from data_prep.shards import iter_metas

    by_image: dict[str, set] = {}
    for m in iter_metas(out):
        by_image.setdefault(m["image_id"], set()).add(m["group"])
    assert all(len(g) == 1 for g in by_image.values())
    members: dict[str, set[str]] = {}
    for img, (g,) in by_image.items():
        if g is not None:
            members.setdefault(g, set()).add(img)
    return sorted(members.values(), key=sorted)


def _expected(key) -> list[set[str]]:
    """The images grouped by ``key(lang, concept)``, groups of one image left out."""
    found: dict[int, set[str]] = {}
    for lang, ks in CONCEPTS.items():
        for k in ks:
            found.setdefault(key(lang, k), set()).add(f"img{lang}{k}")
    return sorted((g for g in found.values() if len(g) > 1), key=sorted)


def test_mine_groups_the_planted_pairs_and_rewrites_nothing_else(mined):
    """--image-weight 0: the captions alone pair the images of one concept; concept 3 has no fr image, so en 3 and
    de 3 have no mutual fr neighbour. Every caption is written again with its key, image bytes, caption, language,
    image and extra fields; only ``group`` is set (a stale one replaced), one group per image's captions."""
    from data_prep.shards import iter_raw, read_manifest

    code, out = mined("--image-weight", "0")
    assert code == 0
    assert _groups(out) == _expected(lambda lang, k: k)
    def samples(split):
        return {key: (data, {k: v for k, v in meta.items() if k != "group"}) for key, _, data, meta in iter_raw(split)}

    assert samples(out) == samples(mined.split)
    mined_groups = read_manifest(out)["mined_groups"]
    assert mined_groups["pairs"] == {"de-en": 4, "de-fr": 3, "en-fr": 3}
    assert (mined_groups["grouped_images"], mined_groups["groups"], mined_groups["captions_per_image"]) == (11, 4, 2)


def test_mine_lets_a_weighted_look_outvote_larger_caption_scores(mined):
    """--image-weight 3: the look's matching wins although the raw caption scores are 40 times the cosines (both
    parts are z-scored per language pair before they are weighed)."""
    code, out = mined("--image-weight", "3")
    assert code == 0
    assert _groups(out) == _expected(lambda lang, k: (k + LOOK_SHIFT[lang]) % 4)


def test_mine_corrects_a_hub_image_by_csls(mined):
    """de 0's captions score 60 more with every caption: by the raw scores en 1-3 would each choose it (110 against
    their own concept's 90), and de 0 chooses en 0 alone. CSLS subtracts de 0's high radius: the concepts pair."""
    _PlantedContext.hub = "de concept0"
    code, out = mined("--image-weight", "0")
    assert code == 0
    assert _groups(out) == _expected(lambda lang, k: k)


def test_mine_scores_the_first_captions_per_image_of_each_image(mined):
    """--captions-per-image N: the scorer sees each image's first N captions in split order, images in id order."""
    for n in (1, 2, 3):
        assert mined("--captions-per-image", str(n), out=f"mined{n}")[0] == 0
        assert _PlantedContext.seen[-1] == [f"{lang} concept{k if c < 2 else (k + 1) % 4} take{c}"
                                            for img, (lang, k) in sorted(mined.images.items()) for c in range(n)]


def test_mine_writes_over_its_own_output_but_refuses_another_folder(mined, tmp_path, capsys):
    assert mined()[0] == 0
    assert mined("--image-weight", "0")[0] == 0  # an earlier output: written again
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    assert mined(out="notes")[0] == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and "not an earlier output" in err and "\n" not in err
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["keep.txt"]


def test_a_term_equal_for_every_pair_adds_nothing(mined):
    """Every caption score equal (a language pair's spread 0): the look alone pairs the images, where dividing by
    the zero spread made every score NaN."""
    _PlantedContext.flat = True
    code, out = mined("--captions-per-image", "1")
    assert code == 0
    assert _groups(out) == _expected(lambda lang, k: (k + LOOK_SHIFT[lang]) % 4)


def test_z_scored_makes_a_term_without_spread_zero(mine):
    """One value, or equal float32 values (whose mean rounds off them: a std of 3e-8, not 0), give zeros."""
    np.testing.assert_array_equal(mine.z_scored(np.array([[0.7]], dtype=np.float32)), [[0.0]])
    same = np.full((12, 12), 0.3, dtype=np.float32)
    np.testing.assert_array_equal(mine.z_scored(same), np.zeros_like(same))
    np.testing.assert_allclose(mine.z_scored(np.array([[1.0, 3.0], [1.0, 3.0]])), [[-1.0, 1.0], [-1.0, 1.0]])
