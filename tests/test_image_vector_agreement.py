"""experiments/image_vector_agreement.py: the screen of image vectors against a reference of what people said."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from conftest import load_experiment
from globetrotter.data.feature_cache import FEATURES, IMAGE_IDS, SPEC, imported_spec
from globetrotter.errors import UserError


@pytest.fixture(scope="module")
def agree():
    return load_experiment("image_vector_agreement")


def clustered(n=300, topics=6, dim=16, seed=0):
    """Ids and unit reference vectors of n images, each near one of ``topics`` directions, and the topic of each."""
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, topics, n)
    ref = rng.normal(size=(topics, dim))[topic] + 0.3 * rng.normal(size=(n, dim))
    return [f"img{i}" for i in range(n)], ref / np.linalg.norm(ref, axis=1, keepdims=True), topic


def write_cache(path, ids, vectors):
    """A feature cache folder as ``features import`` writes one (whole image only)."""
    path.mkdir(parents=True)
    np.save(path / FEATURES, np.asarray(vectors, dtype=np.float16)[:, None])
    (path / IMAGE_IDS).write_text(json.dumps(ids))
    (path / SPEC).write_text(json.dumps({"spec": asdict(imported_spec(path.name))}))
    return path


def test_the_reference_itself_reaches_the_ceiling_and_noise_stays_at_chance(agree):
    ids, ref, _ = clustered()
    noise = np.random.default_rng(1).normal(size=ref.shape)
    report = agree.screen((ids, ref), {"same": (ids, ref), "noise": (ids, noise)}, held_out=200, k=5,
                          strengths=(1.0,))
    same, rand = report["caches"]["same"], report["caches"]["noise"]
    assert same["agreement@5"] == pytest.approx(report["ceiling"], abs=0.02)
    assert same["pair_r"] > 0.9
    assert report["ceiling"] > report["chance"] + 0.3
    assert abs(rand["agreement@5"] - report["chance"]) < 0.1
    assert rand["ridge"]["strength"] == 1.0


def test_a_ridge_recovers_a_linearly_hidden_reference(agree):
    """Vectors that are a random linear mix of the reference plus nuisance directions order images badly as they are;
    the ridge fit to the reference on the other images lifts them to near the ceiling."""
    ids, ref, _ = clustered(n=400)
    rng = np.random.default_rng(2)
    mixed = np.hstack([ref, 4.0 * rng.normal(size=(len(ids), 40))]) @ rng.normal(size=(56, 56))
    strengths = (1000.0, 10.0, 100.0)  # the best (10 here) neither first nor last
    report = agree.screen((ids, ref), {"mixed": (ids, mixed)}, held_out=150, k=5, strengths=strengths)
    row = report["caches"]["mixed"]
    assert row["ridge"]["agreement@5"] > row["agreement@5"] + 0.1
    assert row["ridge"]["pair_r"] > row["pair_r"]
    assert row["ridge"]["agreement@5"] == pytest.approx(report["ceiling"], abs=0.05)
    # the figure reported is that of the best strength, each read alone
    alone = {s: agree.screen((ids, ref), {"mixed": (ids, mixed)}, held_out=150, k=5, strengths=(s,))
             ["caches"]["mixed"]["ridge"] for s in strengths}
    best = max(alone, key=lambda s: alone[s]["agreement@5"])
    assert len({fit["agreement@5"] for fit in alone.values()}) == len(strengths)  # the choice matters
    assert row["ridge"] == pytest.approx(alone[best])


def test_images_are_matched_by_id_not_by_row(agree):
    ids, ref, _ = clustered()
    order = np.random.default_rng(3).permutation(len(ids))
    shuffled = ([ids[i] for i in order], ref[order])
    a = agree.screen((ids, ref), {"c": (ids, ref)}, held_out=100, k=5)["caches"]["c"]
    b = agree.screen((ids, ref), {"c": shuffled}, held_out=100, k=5)["caches"]["c"]
    assert a["agreement@5"] == pytest.approx(b["agreement@5"])


def test_caches_without_shared_images_or_too_few_are_refused(agree):
    ids, ref, _ = clustered(n=50)
    with pytest.raises(UserError, match="cache other: none of its image ids are in the reference"):
        agree.screen((ids, ref), {"other": ([f"x{i}" for i in range(50)], ref)}, held_out=10)
    with pytest.raises(UserError, match="50 images shared .* too few for --held-out-images 45"):
        agree.screen((ids, ref), {"c": (ids, ref)}, held_out=45, k=10)


def test_a_screen_whose_pair_r_is_undefined_is_refused_not_printed_as_nan(agree, tmp_path, capsys):
    """A cache of one vector for every image, a reference of one, or a single held-out pair made pair_r NaN: printed
    'pair r nan' (after numpy's warnings) and null in the JSON, with no word of why."""
    ids, ref, _ = clustered(n=60)
    reference = write_cache(tmp_path / "described", ids, ref)
    constant = write_cache(tmp_path / "constant", ids, np.ones((60, 8)))
    assert agree.main(["--reference", str(reference), "--cache", str(constant), "--held-out-images", "20", "--k", "3",
                       "--out", str(tmp_path / "report.json")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == ("error: --cache constant: its vectors of the 20 held-out images are all the "
                                         "same; expected vectors that tell images apart (check how the cache was built "
                                         "or imported)")
    assert not (tmp_path / "report.json").exists()
    with pytest.raises(UserError, match=r"^--reference: every pair of the 20 held-out images has one cosine \(1\); "):
        agree.screen((ids, np.ones((60, 8))), {"c": (ids, ref)}, held_out=20, k=3, strengths=(1.0,))
    with pytest.raises(UserError, match=r"^--held-out-images 2: 1 pair\(s\) of held-out images to correlate; pair_r "
                                        r"needs at least 2$"):
        agree.screen((ids, ref), {"c": (ids, ref)}, held_out=2, k=1, strengths=(1.0,))


def test_command_line_reads_caches_and_writes_its_report(agree, tmp_path, capsys):
    ids, ref, topic = clustered(n=200)
    reference = write_cache(tmp_path / "described", ids, ref)
    onehot = write_cache(tmp_path / "topics", ids, np.eye(6)[topic])
    out = tmp_path / "report" / "agreement.json"
    assert agree.main(["--reference", str(reference), "--cache", str(onehot), "--held-out-images", "100", "--k", "5",
                       "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["inputs"]["cache"] == {"topics": str(onehot)}
    assert report["versions"]["globetrotter"] and "torch" in report["versions"]  # as eval.py's records name them
    assert report["caches"]["topics"]["agreement@5"] > report["chance"] + 0.3  # the topic alone orders the images
    assert "topics: agreement@5" in capsys.readouterr().out
    assert agree.main(["--reference", str(tmp_path / "nowhere"), "--cache", str(onehot)]) == 2
    assert "no feature cache here" in capsys.readouterr().err


def test_across_languages_an_image_is_matched_only_with_images_of_other_languages(agree):
    """Vectors that know the reference for language a's images and nothing for b's order a's images among themselves
    well, so the plain screen reads them far above chance; across languages every pair has a noise side, and only
    vectors that know both languages reach the cross-language ceiling."""
    ids, ref, _ = clustered()
    langs = {i: "ab"[n % 2] for n, i in enumerate(ids)}
    noise = np.random.default_rng(3).normal(size=ref.shape)
    half = np.where(np.array([langs[i] == "a" for i in ids])[:, None], ref, noise)
    caches = {"half": (ids, half), "same": (ids, ref)}
    plain = agree.screen((ids, ref), caches, held_out=200, k=5, strengths=(1.0,))
    across = agree.screen((ids, ref), caches, held_out=200, k=5, strengths=(1.0,), languages=langs)
    assert plain["caches"]["half"]["agreement@5"] > plain["chance"] + 0.3
    assert across["caches"]["half"]["agreement@5"] < plain["caches"]["half"]["agreement@5"] - 0.2
    assert across["caches"]["same"]["agreement@5"] == pytest.approx(across["ceiling"], abs=0.02)
    assert across["ceiling"] > across["caches"]["half"]["agreement@5"] + 0.5


def test_across_languages_needs_k_images_of_other_languages(agree):
    ids, ref, _ = clustered(n=60)
    langs = {i: ("a" if n < 57 else "b") for n, i in enumerate(ids)}  # 3 images of b: an a image has at most 3
    with pytest.raises(UserError, match="k=5: needs 0 < k <= "):
        agree.screen((ids, ref), {"same": (ids, ref)}, held_out=40, k=5, strengths=(1.0,), languages=langs)


@pytest.mark.parametrize("bad", [["--seed", "-1"], ["--ridge", "10,-5"], ["--out", "AFILE/report.json"]])
def test_bad_options_are_usage_errors_before_the_screen_runs(agree, tmp_path, capsys, bad):
    ids, ref, _ = clustered(n=60)
    reference = write_cache(tmp_path / "described", ids, ref)
    (tmp_path / "afile").write_text("")
    bad = [b.replace("AFILE", str(tmp_path / "afile")) for b in bad]
    with pytest.raises(SystemExit) as exit_:
        agree.main(["--reference", str(reference), "--cache", str(reference), "--held-out-images", "20", "--k", "3",
                    *bad])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and bad[0] in err and "Traceback" not in err


def test_a_copy_of_the_reference_falls_below_the_ceiling_by_its_shared_direction(agree):
    """The cache is read centred, the reference as it is (module docstring): a copy of a reference whose rows share
    a mean direction orders images a little differently from the reference's own cosine."""
    ids, ref, _ = clustered(n=300)
    shifted = ref + 1.5 * np.random.default_rng(4).normal(size=ref.shape[1])
    shifted /= np.linalg.norm(shifted, axis=1, keepdims=True)
    report = agree.screen((ids, shifted), {"copy": (ids, shifted)}, held_out=200, k=5, strengths=(1.0,))
    assert report["caches"]["copy"]["agreement@5"] < report["ceiling"]
    assert report["caches"]["copy"]["pair_r"] < 0.99


def test_chance_is_the_mean_reference_cosine_of_distinct_held_out_pairs(agree):
    """Chance counts no image with itself, and across languages only pairs of two languages (each pair summed
    here by hand over the same draw)."""
    ids, ref, _ = clustered(n=120)
    held = np.flatnonzero(agree.held_out_mask(len(ids), 60, 0))
    lang = np.arange(len(ids)) % 2
    report = agree.screen((ids, ref), {"same": (ids, ref)}, held_out=60, k=3, strengths=(1.0,))
    across = agree.screen((ids, ref), {"same": (ids, ref)}, held_out=60, k=3, strengths=(1.0,),
                          languages={i: "ab"[n % 2] for n, i in enumerate(ids)})
    for got, pair in ((report, lambda i, j: i != j), (across, lambda i, j: lang[i] != lang[j])):
        cosines = [ref[i] @ ref[j] for i in held for j in held if pair(i, j)]
        assert got["chance"] == pytest.approx(np.mean(cosines))


def test_the_reference_is_read_as_cosines_whatever_its_rows_lengths(agree):
    """The reference's figures are cosines: scaling its rows (a mean of caption embeddings is not of unit length)
    changes no figure."""
    ids, ref, _ = clustered(n=200)
    scaled = ref * np.random.default_rng(5).uniform(0.2, 5.0, size=(len(ids), 1))
    cache = {"c": (ids, ref + 0.5 * np.random.default_rng(6).normal(size=ref.shape))}
    plain = agree.screen((ids, ref), cache, held_out=80, k=5, strengths=(1.0,))
    again = agree.screen((ids, scaled), cache, held_out=80, k=5, strengths=(1.0,))

    def figures(report):
        row = report["caches"]["c"]
        return [report["chance"], report["ceiling"], row["agreement@5"], row["pair_r"], row["ridge"]["agreement@5"]]

    assert figures(again) == pytest.approx(figures(plain))


def test_the_ridge_is_fitted_on_the_other_images_never_the_held_out_ones(agree):
    """Noise vectors with more dimensions than held-out images: a ridge fitted on the held-out images would
    interpolate their reference and read near the ceiling; fitted on the others it predicts nothing of them."""
    ids, ref, _ = clustered(n=300)
    noise = np.random.default_rng(7).normal(size=(len(ids), 400))
    report = agree.screen((ids, ref), {"noise": (ids, noise)}, held_out=100, k=5, strengths=(1.0,))
    assert report["caches"]["noise"]["ridge"]["agreement@5"] < report["chance"] + 0.15
    assert report["ceiling"] > report["chance"] + 0.3  # the test would tell a leak apart


def test_pair_r_across_languages_correlates_only_pairs_of_two_languages(agree):
    """agreement's pair_r is the correlation of the two cosines over the allowed pairs only, each pair once."""
    rng = np.random.default_rng(8)
    vectors, ref = rng.normal(size=(12, 4)), rng.normal(size=(12, 4))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    lang = np.arange(12) % 3
    allowed = lang[:, None] != lang[None, :]
    unit = vectors - vectors.mean(0)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    pairs = [(i, j) for i in range(12) for j in range(i + 1, 12) if lang[i] != lang[j]]
    expected = np.corrcoef([unit[i] @ unit[j] for i, j in pairs], [ref[i] @ ref[j] for i, j in pairs])[0, 1]
    assert agree.agreement(vectors, ref @ ref.T, k=2, allowed=allowed)["pair_r"] == pytest.approx(expected)


def test_a_caches_rows_are_read_under_their_own_ids(agree, tmp_path):
    """whole_image_rows pairs each id with the row the cache stores it in (ids that sort otherwise than the rows)."""
    ids = ["img10", "img2", "img1", "img33"]
    vectors = np.arange(len(ids) * 3, dtype=np.float32).reshape(len(ids), 3)
    got_ids, got = agree.whole_image_rows(write_cache(tmp_path / "c", ids, vectors))
    assert {i: tuple(v) for i, v in zip(got_ids, got)} == {i: tuple(v) for i, v in zip(ids, vectors)}


def test_the_screened_images_keep_the_references_order(agree):
    """The held-out draw is over the screened images in the reference's order (finetune_backbone.py draws the same)."""
    reference = ["z", "b", "y", "a", "c"]
    assert agree.screened_images(reference, {"c": ["a", "b", "c", "y", "z"]}) == reference
    assert agree.screened_images(reference, {"c": ["c", "a", "z"]}, {"z": "en", "a": "de", "b": "en"}) == ["z", "a"]
    # a cache whose reference images no caption of the --across-languages split shows: said so, not "not in it"
    with pytest.raises(UserError, match=r"^cache c: none of its image ids are in the reference and captioned in the "
                                        r"--across-languages split$"):
        agree.screened_images(reference, {"c": ["y", "c"]}, {"z": "en", "a": "de"})
    with pytest.raises(UserError, match=r"^cache c: none of its image ids are in the reference$"):
        agree.screened_images(reference, {"c": ["q"]}, {"z": "en", "a": "de"})


def test_an_image_is_never_its_own_neighbour_even_where_allowed_says_so(agree):
    """agreement's neighbours are each image's nearest *others*: an ``allowed`` holding the diagonal changes nothing."""
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    ref_sim = np.array([[1.0, 0.2, 0.0, 0.0], [0.2, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.4], [0.0, 0.0, 0.4, 1.0]])
    # centred, 0 and 1 point one way and 2 and 3 the other: each one's nearest other is its partner
    got = agree.agreement(vectors, ref_sim, k=1, allowed=np.ones((4, 4), dtype=bool))
    assert got["agreement@1"] == pytest.approx((0.2 + 0.2 + 0.4 + 0.4) / 4)


def test_the_whole_image_row_is_read_from_a_cache_with_augmented_views(agree, tmp_path):
    """A built cache holds the whole image (row 0) and its augmented views: the screen reads the whole image."""
    ids = ["a", "b", "c"]
    views = np.random.default_rng(9).normal(size=(3, 3, 4)).astype(np.float16)
    path = write_cache(tmp_path / "built", ids, views[:, 0])
    np.save(path / FEATURES, views)
    (path / SPEC).write_text(json.dumps({"spec": asdict(replace(imported_spec(path.name), views=2))}))
    _, rows = agree.whole_image_rows(path)
    np.testing.assert_array_equal(rows, views[:, 0].astype(np.float32))


def test_the_command_line_reads_each_images_language_from_the_across_languages_split(agree, tmp_path):
    """--across-languages SPLIT: the languages come from the split's captions, keyed by image id, so the report is
    the screen's across those languages (not the plain screen)."""
    from data_prep.shard_writer import ShardWriter

    ids, ref, topic = clustered(n=80)
    langs = {i: ("en", "de")[n % 2] for n, i in enumerate(ids)}
    with ShardWriter(tmp_path / "split", split="train", source="unit", image_format="npy") as w:
        for n, i in enumerate(ids):
            w.write(f"k{n}", np.zeros(3, np.float32), f"caption {n}", langs[i], i, f"g{n}")
    reference = write_cache(tmp_path / "described", ids, ref)
    onehot = write_cache(tmp_path / "topics", ids, np.eye(6)[topic])
    out = tmp_path / "agreement.json"
    assert agree.main(["--reference", str(reference), "--cache", str(onehot), "--held-out-images", "60", "--k", "3",
                       "--ridge", "1", "--across-languages", str(tmp_path / "split"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    read = agree.whole_image_rows(onehot)
    expected = agree.screen(agree.whole_image_rows(reference), {"topics": read}, 60, 3, 0, (1.0,), langs)
    plain = agree.screen(agree.whole_image_rows(reference), {"topics": read}, 60, 3, 0, (1.0,))
    assert report["chance"] == pytest.approx(expected["chance"]) and report["chance"] != pytest.approx(plain["chance"])
    assert report["caches"]["topics"]["agreement@3"] == pytest.approx(expected["caches"]["topics"]["agreement@3"])
