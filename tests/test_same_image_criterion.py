"""experiments/same_image_criterion.py: the same-image ranking criterion, on a tiny val split captioned twice."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from conftest import COLOURS, WORDS, load_experiment, write_repetitive_reference, write_thin_reference
from data_prep.shard_writer import ShardWriter
from globetrotter.errors import UserError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def criterion():
    return load_experiment("same_image_criterion")


@pytest.fixture(scope="module")
def twice_val(tmp_path_factory):
    """60 val images captioned twice in en (two word orders) and once in ru: ru is too thin for the criterion."""
    root = tmp_path_factory.mktemp("twice")
    names = list(COLOURS)
    with ShardWriter(root / "val", split="val", source="unit", image_format="png") as w:
        for i in range(60):
            colour = names[i % len(names)]
            img = Image.new("RGB", (16, 16), COLOURS[colour])
            en = WORDS["en"]
            w.write(f"v{i}-a", img, f"{en[colour]} {en['_']} {i}", "en", f"twice{i}")
            w.write(f"v{i}-b", img, f"{en['_']} {en[colour]} {i}", "en", f"twice{i}")
            if i < 10:
                w.write(f"v{i}-ru", img, f"{WORDS['ru'][colour]} {WORDS['ru']['_']}", "ru", f"twice{i}")
    with ShardWriter(root / "train", split="train", source="unit", image_format="png") as w:  # numbers in its text
        for i in range(60):
            w.write(f"t{i}", Image.new("RGB", (16, 16), COLOURS[names[i % 4]]), f"picture {i} of {60 + i}", "en",
                    f"train{i}")
    return root / "val"


def test_reciprocal_rank_of_the_own_candidate_with_ties_counting_half(criterion):
    scores = np.array([[0.9, 0.1, 0.2],    # own candidate first
                       [0.5, 0.4, 0.3],    # one candidate above
                       [0.7, 0.7, 0.7]])   # tied with both others: one candidate above on average
    np.testing.assert_allclose(criterion.reciprocal_ranks(scores), [1.0, 0.5, 0.5])


def test_pairs_come_from_one_image_and_thin_languages_are_left_out_or_refused(criterion, twice_val):
    pairs = criterion.caption_pairs(str(twice_val), None, n_images=20, seed=0)
    assert list(pairs) == ["en"] and len(pairs["en"]) == 20
    for first, second in pairs["en"]:
        assert first != second and first.split()[-1] == second.split()[-1]  # the image's number ends both captions
    assert pairs == criterion.caption_pairs(str(twice_val), None, n_images=20, seed=0)
    assert pairs != criterion.caption_pairs(str(twice_val), None, n_images=20, seed=1)
    with pytest.raises(UserError, match=r"--languages ru: .* has 0 images captioned twice"):
        criterion.caption_pairs(str(twice_val), ["en", "ru"], n_images=20, seed=0)


def test_the_grid_is_scored_and_compared_with_an_oracle_record(criterion, twice_val, tiny_world, tiny_run, tmp_path,
                                                              capsys):
    out = tmp_path / "out"
    assert criterion.main(["--model", str(tiny_run), "--val", str(twice_val),
                           "--reference", str(tiny_world / "train"), "--out", str(out)]) == 0
    (path,) = out.glob("same-image-*.json")
    record = json.loads(path.read_text())
    rows = record["details"]["candidates"]
    assert len(rows) == 20 and record["languages"] == ["en"]
    assert all(0 < row["criterion"] <= 1 and row["criterion"] == row["per_language"]["en"] for row in rows)
    best = max(rows, key=lambda row: row["criterion"])
    assert record["metrics"]["chosen"] == best["label"] and record["details"]["chosen"] == best["ranking"]
    assert record["config"]["reference"] == str(tiny_world / "train")

    # with an oracle record: what the choice translates is the oracle's figure for the chosen label
    oracle = tmp_path / "oracle.json"
    translation = {row["label"]: i / 100 for i, row in enumerate(rows)}
    oracle.write_text(json.dumps({"config": {"oracle": True}, "details": {"candidates": [
        {"label": label, "val_translation": value} for label, value in translation.items()]}}))
    assert criterion.main(["--model", str(tiny_run), "--val", str(twice_val), "--reference", str(tiny_world / "train"),
                           "--oracle", str(oracle), "--out", str(out)]) == 0
    metrics = json.loads(path.read_text())["metrics"]
    assert metrics["chosen_translation"] == translation[metrics["chosen"]]
    assert metrics["oracle_translation"] == max(translation.values()) and -1 <= metrics["spearman"] <= 1
    assert "Spearman with parallel-val translation" in capsys.readouterr().out


def test_spearman_and_choice_against_the_oracle(criterion, tmp_path):
    rows = [{"label": "a", "criterion": 0.1}, {"label": "b", "criterion": 0.3}, {"label": "c", "criterion": 0.2}]
    oracle = tmp_path / "oracle.json"
    oracle.write_text(json.dumps({"config": {"oracle": True}, "details": {"candidates": [
        {"label": "a", "val_translation": 0.5}, {"label": "b", "val_translation": 0.4},
        {"label": "c", "val_translation": 0.6}]}}))
    got = criterion.against_oracle(rows, str(oracle))
    # ranks 1, 3, 2 against 2, 1, 3: 1 - 6 * (1 + 4 + 1) / (3 * 8)
    assert got["spearman"] == pytest.approx(-0.5)
    assert got["chosen_translation"] == 0.4 and got["oracle_translation"] == 0.6
    with pytest.raises(UserError, match="has no ranking 'd'"):
        criterion.against_oracle(rows + [{"label": "d", "criterion": 0.0}], str(oracle))


def test_bad_input_is_a_one_line_error(criterion, twice_val, tiny_world, tiny_run, tmp_path, capsys):
    base = ["--model", str(tiny_run), "--reference", str(tiny_world / "train"), "--out", str(tmp_path)]
    assert criterion.main(base + ["--val", str(tiny_world / "test")]) == 2
    assert "a test split" in capsys.readouterr().err
    assert criterion.main(base + ["--val", str(tiny_world / "val")]) == 2  # one caption per image
    assert "no language has 50 images captioned twice" in capsys.readouterr().err
    not_oracle = tmp_path / "select.json"
    not_oracle.write_text(json.dumps({"config": {}, "details": {"candidates": []}}))
    assert criterion.main(base + ["--val", str(twice_val), "--oracle", str(not_oracle)]) == 2
    assert "not an oracle record" in capsys.readouterr().err
    assert criterion.main(base + ["--val", str(twice_val), "--oracle", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    assert criterion.main(base + ["--val", str(twice_val), "--oracle", "a", "--oracle", "b"]) == 2
    assert "--oracle given 2 times for 1 --model" in capsys.readouterr().err
    # the library's refusals name this script's flags (--reference), not the Python arguments (reference=)
    assert criterion.main([*base, "--val", str(twice_val), "--reference", str(twice_val)]) == 2
    assert f"error: --reference {twice_val} is the evaluated split" in capsys.readouterr().err
    assert criterion.main([*base, "--val", str(twice_val), "--reference-size", "3"]) == 2
    assert "error: --reference-size 3: the grid's CSLS rankings take 10 neighbours" in capsys.readouterr().err


def test_a_model_that_matches_words_finds_the_own_caption_far_above_chance(criterion, twice_val):
    # the two captions of an image share its number; TF-IDF, fitted on reference captions with numbers, sees it
    pairs = criterion.caption_pairs(str(twice_val), ["en"], n_images=60, seed=0)
    pools = criterion.reference_pools(str(twice_val.parent / "train"), ["en"])
    _, rows = criterion.score_grid("tfidf", pairs, pools)
    chance = np.mean(1 / np.arange(1, 61))  # a random order of 60 candidates
    assert [row["label"] for row in rows] == ["cosine", "csls"]
    assert all(row["criterion"] > 5 * chance for row in rows)
    shuffled = {"en": [(a, b) for (a, _), (_, b) in zip(pairs["en"], pairs["en"][1:] + pairs["en"][:1])]}
    _, wrong = criterion.score_grid("tfidf", shuffled, pools)
    assert all(row["criterion"] < 2 * chance for row in wrong)  # a mismatched second caption is not found


@pytest.mark.parametrize("bad", [["--n-images", "-5"], ["--reference-size", "0"], ["--seed", "-1"]])
def test_negative_or_zero_sizes_are_usage_errors(criterion, tmp_path, capsys, bad):
    with pytest.raises(SystemExit) as exit_:
        criterion.main(["--model", str(tmp_path / "run"), "--val", str(tmp_path / "val"), "--reference",
                        str(tmp_path / "train"), "--out", str(tmp_path / "out"), *bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert bad[0] in err and "--retrieval" not in err


def test_an_image_is_captioned_twice_by_two_different_captions_its_first_two(criterion, tmp_path):
    """Exactly MIN_IMAGES images with two different captions (some with a third) are enough; an image whose one
    caption is written twice is not captioned twice; a pair is the image's first and second captions in split order."""
    n = criterion.MIN_IMAGES
    with ShardWriter(tmp_path / "val", split="val", source="unit", image_format="png") as w:
        for i in range(n + 5):
            img = Image.new("RGB", (8, 8), COLOURS[list(COLOURS)[i % len(COLOURS)]])
            texts = [f"first {i}", f"second {i}"] + ([f"third {i}"] if i % 3 == 0 else [])
            for j, text in enumerate(texts if i < n else [f"only {i}", f"only {i}"]):
                w.write(f"v{i}-{j}", img, text, "en", f"image{i}")
    pairs = criterion.caption_pairs(str(tmp_path / "val"), ["en"], n_images=n + 5, seed=0)
    assert sorted(pairs["en"]) == sorted((f"first {i}", f"second {i}") for i in range(n))


def test_the_criterion_is_the_mean_over_languages_of_their_reciprocal_ranks(criterion, twice_val, tmp_path):
    pairs = criterion.caption_pairs(str(twice_val), ["en"], n_images=60, seed=0)["en"]
    shuffled = [(a, b) for (a, _), (_, b) in zip(pairs, pairs[1:] + pairs[:1])]  # a language whose match is lost
    with ShardWriter(tmp_path / "train", split="train", source="unit", image_format="png") as w:
        for i in range(60):
            for lang in ("en", "de"):  # numbers in its text, as twice_val's reference
                w.write(f"t{i}-{lang}", Image.new("RGB", (8, 8)), f"picture {i} of {60 + i}", lang, f"train{i}")
    pools = criterion.reference_pools(str(tmp_path / "train"), ["en", "de"])
    _, rows = criterion.score_grid("tfidf", {"en": pairs, "de": shuffled}, pools)
    for row in rows:
        en, de = row["per_language"]["en"], row["per_language"]["de"]
        assert en > 2 * de and row["criterion"] == pytest.approx((en + de) / 2)


def test_each_languages_statistics_come_from_its_own_reference_captions(criterion, tmp_path):
    with ShardWriter(tmp_path / "train", split="train", source="unit", image_format="png") as w:
        for i in range(6):
            w.write(f"t{i}-en", Image.new("RGB", (8, 8)), f"english {i}", "en", f"train{i}")
            w.write(f"t{i}-de", Image.new("RGB", (8, 8)), f"deutsch {i}", "de", f"train{i}")
    pools = criterion.reference_pools(str(tmp_path / "train"), ["en", "de"])
    for lang, word in (("en", "english"), ("de", "deutsch")):
        assert sorted(pools[lang].captions) == [f"{word} {i}" for i in range(6)]
        assert set(pools[lang].langs.tolist()) == {lang}


def test_a_val_split_showing_test_images_is_refused_before_any_model_is_scored(criterion, tiny_world, tmp_path,
                                                                               capsys):
    """--test: a copy of the test split under a val manifest passes as val by its name; its images give it away."""
    import shutil

    val = tmp_path / "val"
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    out = tmp_path / "out"
    assert criterion.main(["--model", str(tmp_path / "no-run"), "--val", str(val), "--reference",
                           str(tiny_world / "train"), "--test", str(tiny_world / "test"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--val {val}: shows " in err and f"images of the test split {tiny_world / 'test'}" in err
    assert "no-run" not in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_reference_split_with_fewer_captions_than_csls_k_is_refused_in_this_scripts_flags(criterion, twice_val,
                                                                                          tmp_path, capsys):
    """A --reference of 5 en captions: the scoring's refusal named eval.py's --retrieval and --csls-k (no flags
    here), after a model was loaded and scored."""
    thin = write_thin_reference(tmp_path / "thin", languages=("en",))
    argv = ["--model", "tfidf", "--val", str(twice_val), "--reference", str(thin),
            "--out", str(tmp_path / "out")]
    assert criterion.main(argv) == 2
    printed = capsys.readouterr()
    err = printed.err
    assert err.startswith(f"error: --reference {thin}: 5 en captions, fewer than the 10 neighbours"), err
    assert "csls-k" not in err and "--retrieval" not in err and err.count("\n") == 1
    assert printed.out == "" and not (tmp_path / "out").exists()  # no ranking scored


def test_a_reference_too_repetitive_for_maxsim_is_refused_in_this_scripts_flags_before_any_ranking(
        criterion, twice_val, tiny_run, tmp_path, capsys):
    """12 en captions of 2 words each: the scoring's refusal named eval.py's --maxsim (no flag here), once the grid's
    cosine and CSLS rankings were scored."""
    reference = write_repetitive_reference(tmp_path / "reference", languages=("en",))
    argv = ["--model", str(tiny_run), "--val", str(twice_val), "--reference", str(reference),
            "--out", str(tmp_path / "out")]
    assert criterion.main(argv) == 2
    printed = capsys.readouterr()
    err = printed.err.strip().splitlines()[-1]  # after the loading note of a run without a best checkpoint
    assert err.startswith(f"error: --reference {reference}: its en captions hold "), printed.err
    assert "--maxsim" not in printed.err
    assert "same image: " not in printed.out and not (tmp_path / "out").exists()


def test_every_model_is_checked_before_any_record_is_written(criterion, twice_val, tiny_world, tiny_run, tmp_path,
                                                             capsys):
    """With several --model, each was checked only when its turn came: the first model's record was written, and
    only then a later run folder that cannot load, a reference too thin for its MaxSim rankings or an oracle record that
    is none was refused."""
    from globetrotter.evaluation.tasks.common import resolve_model
    from globetrotter.evaluation.tasks.select import model_candidates

    out = tmp_path / "out"
    repetitive = write_repetitive_reference(tmp_path / "repetitive", languages=("en",))
    not_oracle = tmp_path / "select.json"
    not_oracle.write_text(json.dumps({"config": {}, "details": {"candidates": []}}))
    oracle = tmp_path / "oracle.json"  # every ranking of tfidf's grid and tiny_run's
    oracle.write_text(json.dumps({"config": {"oracle": True}, "details": {"candidates": [
        {"label": r.label, "val_translation": 0.5} for m in ("tfidf", str(tiny_run))
        for r in model_candidates(m, resolve_model(m)[0])]}}))
    missing = tmp_path / "missing-run"
    for models, reference, oracles, said in (
            (["tfidf", str(missing)], tiny_world / "train", [], f"{missing}: model not found"),
            (["tfidf", str(tiny_run)], repetitive, [], f"--model {tiny_run}: --reference {repetitive}: its en captions"),
            (["tfidf", str(tiny_run)], tiny_world / "train", [oracle, not_oracle],
             f"--model {tiny_run}: --oracle {not_oracle}: not an oracle record")):
        argv = [arg for model in models for arg in ("--model", model)]
        argv += [arg for path in oracles for arg in ("--oracle", str(path))]
        assert criterion.main([*argv, "--val", str(twice_val), "--reference", str(reference), "--out", str(out)]) == 2
        printed = capsys.readouterr()
        assert printed.err.strip().splitlines()[-1].startswith(f"error: {said}"), printed.err
        assert "same image: " not in printed.out and not out.exists()  # nothing scored, no record written


def test_two_models_of_one_record_name_are_refused_before_any_is_scored(criterion, twice_val, tiny_world, tiny_run,
                                                                        tmp_path, capsys):
    """The same run given twice (or two runs whose folders end alike) wrote same-image-NAME.json twice: the second
    overwrote the first in silence."""
    out = tmp_path / "out"
    for first, second, name in (("tfidf", "tfidf", "tfidf"), (str(tiny_run), f"{tiny_run}/", None)):
        argv = ["--model", first, "--model", second, "--val", str(twice_val), "--reference", str(tiny_world / "train"),
                "--out", str(out)]
        assert criterion.main(argv) == 2
        printed = capsys.readouterr()
        err = printed.err.strip().splitlines()  # after the runs' loading notes
        assert err[-1].startswith(f"error: --model {first} and --model {second} would share the "
                                                   f"record same-image-{name or ''}"), printed.err
        assert "same image: " not in printed.out and not out.exists()
