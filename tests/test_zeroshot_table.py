"""experiments/zeroshot_table.py: features move through a bundle unchanged; a row is trained, chosen on val, scored."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from conftest import load_experiment
from globetrotter.zeroshot.data import SplitFeatures

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _driver():
    return load_experiment("zeroshot_table")


def _split(rng, mix, n_images, langs, caps=2):
    images = np.abs(rng.normal(size=(n_images, 8))).astype(np.float32)
    rows = [(i, lang) for i in range(n_images) for lang in langs for _ in range(caps if lang == "en" else 1)]
    image_of = np.array([i for i, _ in rows])
    text = images[image_of] @ mix + 0.05 * rng.normal(size=(len(rows), 16)).astype(np.float32)
    return SplitFeatures(texts=[f"c{k}" for k in range(len(rows))], langs=np.array([lang for _, lang in rows], object),
                         groups=np.array([f"g{i}" for i in image_of], object), caption_image=image_of,
                         image_keys=[f"img{i}" for i in range(n_images)], text_features=text.astype(np.float32),
                         image_features=images)


def test_bundle_round_trip_and_one_row(tmp_path):
    z = _driver()
    rng = np.random.default_rng(0)
    mix = rng.normal(size=(8, 16)).astype(np.float32)
    splits = {"train": _split(rng, mix, 60, ["en"]), "val": _split(rng, mix, 20, ["en"]),
              "test": _split(rng, mix, 20, ["en", "de"], caps=1)}
    z.save_bundle(tmp_path / "b.npz", splits)
    back = z.load_bundle(tmp_path / "b.npz")
    assert back["test"].texts == splits["test"].texts and back["test"].image_keys == splits["test"].image_keys
    np.testing.assert_array_equal(back["test"].caption_image, splits["test"].caption_image)
    np.testing.assert_allclose(back["train"].text_features, splits["train"].text_features, atol=1e-2)
    z.ROWS = {"tiny": (None, ["adapter.hidden_dims=[32]", "optim.epochs=3", "optim.batch_size=16"]),
              "tiny, 1 caption": (None, ["adapter.hidden_dims=[32]", "optim.epochs=3", "optim.batch_size=16",
                                         "max_captions_per_image=1"])}
    assert z.main(["--bundle", str(tmp_path / "b.npz"), "--languages", "en,de", "--seeds", "0", "--device", "cpu",
                   "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "tiny-s0.json").read_text())
    assert record["n_captions"] == 120 and record["val_recall@10"] > 0
    assert record["inputs"]["seeds"] == [0] and "torch" in record["versions"]  # as the other experiments' records
    # the row is a function of its seed: measured again from the bundle, the same epoch kept and the same figures
    again = z.measure("tiny", 0, back, argparse.Namespace(device="cpu", languages=["en", "de"]))
    assert again["best_epoch"] == record["best_epoch"] and again["val_recall@10"] == record["val_recall@10"]
    assert json.loads(json.dumps(again["test"]["metrics"])) == record["test"]["metrics"]
    assert set(record["test"]["metrics"]) == {"en", "de"} and "intervals" in record["test"]
    one = json.loads((tmp_path / "out" / "tiny--1-caption-s0.json").read_text())
    assert one["n_captions"] == 60 and one["n_images"] == 60
    table = (tmp_path / "out" / "table.md").read_text()
    assert table.count("\n| tiny") == 2
    # the records are reused when the table is asked again, and refused when measured on other languages
    assert z.main(["--bundle", str(tmp_path / "b.npz"), "--languages", "en,de", "--seeds", "0", "--device", "cpu",
                   "--out", str(tmp_path / "out")]) == 0
    assert z.main(["--bundle", str(tmp_path / "b.npz"), "--languages", "en", "--seeds", "0", "--device", "cpu",
                   "--out", str(tmp_path / "out")]) == 2


def _tiny_en_table(tmp_path, n_test: int = 12):
    """The driver with one tiny row over a bundle of en splits (``n_test`` test images), and the command that
    measures it (seed 0)."""
    z = _driver()
    rng = np.random.default_rng(0)
    mix = rng.normal(size=(8, 16)).astype(np.float32)
    splits = {"train": _split(rng, mix, 30, ["en"]), "val": _split(rng, mix, 12, ["en"]),
              "test": _split(rng, mix, n_test, ["en"], caps=1)}
    z.save_bundle(tmp_path / "b.npz", splits)
    z.ROWS = {"tiny": (None, ["adapter.hidden_dims=[16]", "optim.epochs=1", "optim.batch_size=16"])}
    run = ["--bundle", str(tmp_path / "b.npz"), "--languages", "en", "--seeds", "0", "--device", "cpu",
           "--out", str(tmp_path / "out")]
    return z, rng, mix, splits, run


def test_a_test_split_with_fewer_images_than_the_largest_k_names_this_drivers_test_flag(tmp_path, capsys):
    """The table's K are fixed: a test split of no more images than the largest K is refused before any row trains,
    naming --test, not the library's "lower ks" (this driver has no such flag) after a row's training."""
    z, *_, run = _tiny_en_table(tmp_path, n_test=6)
    assert z.main(run) == 2
    err = capsys.readouterr().err
    assert "--test: 6 image(s)" in err and "give a test split with more images" in err and "ks" not in err
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written


def test_a_record_is_refused_once_its_data_or_its_row_config_changed(tmp_path, capsys):
    """Records were keyed on the resolved paths and languages only: a bundle (or split) rewritten in place, or a row
    whose overrides changed, reused the old figures in silence; refused now, naming what changed."""
    z, rng, mix, splits, run = _tiny_en_table(tmp_path)
    assert z.main(run) == 0 and z.main(run) == 0  # the same inputs: reused
    capsys.readouterr()
    z.ROWS = {"tiny": (None, ["adapter.hidden_dims=[16]", "optim.epochs=2", "optim.batch_size=16"])}
    assert z.main(run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tiny-s0.json was measured on other inputs: config_sha256 (recorded" in err
    z.ROWS = {"tiny": (None, ["adapter.hidden_dims=[16]", "optim.epochs=1", "optim.batch_size=16"])}
    splits["test"] = _split(rng, mix, 12, ["en"], caps=1)  # other features, the same file name
    z.save_bundle(tmp_path / "b.npz", splits)
    assert z.main(run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other inputs: bundle (recorded" in err and "config_sha256" not in err


def test_a_record_written_before_its_options_were_named_inputs_is_still_reused(tmp_path, capsys):
    """A row's record kept what it was measured on under ``inputs`` and its options under ``args``; every command's
    record now names its options ``inputs`` (what it was measured on: ``measured_on``). An old record still reads."""
    z, rng, mix, splits, run = _tiny_en_table(tmp_path)
    assert z.main(run) == 0
    path = tmp_path / "out" / "tiny-s0.json"
    record = json.loads(path.read_text())
    assert record["inputs"]["seeds"] == [0] and record["measured_on"]["langs"] == ["en"]
    old = {**{k: v for k, v in record.items() if k not in ("inputs", "measured_on")},
           "inputs": record["measured_on"], "args": record["inputs"]}
    path.write_text(json.dumps(old))
    capsys.readouterr()
    assert z.main(run) == 0 and "other inputs" not in capsys.readouterr().err  # reused, not refused as stale
    assert json.loads(path.read_text()) == old


def test_the_inputs_of_a_record_name_each_splits_manifest_checksum(tmp_path):
    from data_prep.shard_writer import ShardWriter

    z = _driver()

    def write(name, caption):
        with ShardWriter(tmp_path / name, split=name, source="unit", image_format="npy") as w:
            for i in range(3):
                w.write(f"{name}{i}", np.ones(4, np.float32), f"{caption} {i}", "en", f"img{i}", f"g{i}")

    for name in ("train", "val", "test"):
        write(name, "caption")
    args = argparse.Namespace(bundle=None, languages=["en"], **{n: str(tmp_path / n) for n in ("train", "val", "test")})
    before = z.measured_on(args)
    write("train", "another caption")  # rewritten in place: the same path
    after = z.measured_on(args)
    assert before["train"]["path"] == after["train"]["path"] and before["train"]["checksum"] != after["train"]["checksum"]
    assert z.stale_inputs(before, after).startswith("train (recorded {") and before["val"] == after["val"]


def test_a_record_with_a_key_the_current_inputs_lack_is_stale():
    z = _driver()
    assert z.stale_inputs({"langs": ["en"]}, {"langs": ["en"]}) is None
    assert z.stale_inputs({"langs": ["en"], "bundle": {"sha256": "x"}}, {"langs": ["en"]}) == \
        "bundle (recorded {'sha256': 'x'}, now None)"


def test_a_rows_val_figure_is_the_kept_epochs_not_the_last(tmp_path, monkeypatch):
    """The table's val column is the score of the epoch the row keeps (the best), not of the last epoch trained."""
    z, _, _, splits, _ = _tiny_en_table(tmp_path)
    z.ROWS = {"tiny": (None, ["adapter.hidden_dims=[8]", "optim.epochs=3"])}
    scores = iter([0.25, 0.75, 0.5])
    monkeypatch.setattr(z, "validation_recall", lambda *a, **k: lambda _adapter: next(scores))
    record = z.measure("tiny", 0, splits, argparse.Namespace(device="cpu", languages=["en"]))
    assert record["val_recall@10"] == 0.75 and record["best_epoch"] == 2


def test_bad_seeds_and_languages_are_usage_errors_naming_the_option(capsys):
    """--seeds a said "invalid <lambda> value"; a bad one of several is named."""
    z = _driver()
    for argv, message in ((["--seeds", "a"], "argument --seeds: invalid int value: 'a'"),
                          (["--seeds", "0,x"], "argument --seeds: invalid int value: 'x' (in '0,x')"),
                          (["--rows", "0,x"], "argument --rows: expected an integer >= 0, got 'x' (in '0,x')"),
                          (["--languages", "en,en"], "argument --languages: en given twice in 'en,en'")):
        with pytest.raises(SystemExit) as stop:
            z.main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err, err


def test_a_bad_device_or_bundle_path_is_a_usage_error(tmp_path, capsys):
    z = _driver()
    (tmp_path / "afile").write_text("")
    for argv in (["--device", "bogus"], ["--save-bundle", str(tmp_path / "afile" / "b.npz")],
                 ["--out", str(tmp_path / "afile" / "out")]):
        with pytest.raises(SystemExit) as stop:
            z.main(argv)
        assert stop.value.code == 2 and argv[0] in capsys.readouterr().err


def test_a_language_the_test_split_lacks_is_refused_before_any_feature_is_extracted(tmp_path, capsys, monkeypatch):
    from data_prep.shard_writer import ShardWriter

    z = _driver()
    for name in ("train", "val", "test"):
        with ShardWriter(tmp_path / name, split=name, source="unit", image_format="npy") as w:
            for i in range(3):
                w.write(f"{name}{i}", np.ones(4, np.float32), f"caption {i}", "en", f"img{i}", f"g{i}")

    def no_features(*_args, **_kwargs):
        raise AssertionError("features extracted before the languages were checked")

    monkeypatch.setattr(z, "image_extractor", no_features)
    monkeypatch.setattr(z, "load_split_features", no_features)
    assert z.main(["--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--test", str(tmp_path / "test"),
                   "--languages", "en,xx", "--seeds", "0", "--device", "cpu", "--out", str(tmp_path / "out"),
                   "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert "--test" in err and "xx" in err and err.count("\n") == 1


def test_a_val_that_is_the_train_split_is_refused_before_any_feature_is_extracted(tmp_path, capsys, monkeypatch):
    """--val of the --train split was accepted: each row's epoch was chosen on its training images."""
    from data_prep.shard_writer import ShardWriter

    z = _driver()
    for name in ("train", "test"):
        with ShardWriter(tmp_path / name, split=name, source="unit", image_format="npy") as w:
            for i in range(3):
                w.write(f"{name}{i}", np.ones(4, np.float32), f"caption {i}", "en", f"{name}-img{i}", f"g{i}")

    def no_features(*_args, **_kwargs):
        raise AssertionError("features extracted before --val was checked")

    monkeypatch.setattr(z, "image_extractor", no_features)
    monkeypatch.setattr(z, "load_split_features", no_features)
    assert z.main(["--train", str(tmp_path / "train"), "--val", str(tmp_path / "train"), "--test", str(tmp_path / "test"),
                   "--languages", "en", "--seeds", "0", "--device", "cpu", "--out", str(tmp_path / "out"),
                   "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert f"--val {tmp_path / 'train'}: is the --train split" in err and err.count("\n") == 1


def test_a_figure_a_record_holds_as_null_is_a_dash_in_the_table():
    """Records are strict JSON, so a NaN figure is read back as None; formatting it as a number was a TypeError."""
    zt = _driver()
    record = {"row": "adapter", "val_recall@10": None,
              "test": {"metrics": {"en": {"image_retrieval_recall@10": 0.5, "median_rank": None},
                                   "de": {"image_retrieval_recall@10": None, "median_rank": 3.0}}}}
    row = zt.table([record], ["en", "de"]).splitlines()[-1]
    assert row == "| adapter | – | 0.500 | – | – |"


def test_the_median_rank_column_names_the_first_of_languages_it_is_read_in():
    """--languages' first code gives the median rank; the header said "(en)" whatever it was."""
    zt = _driver()
    record = {"row": "adapter", "val_recall@10": 0.5,
              "test": {"metrics": {"de": {"image_retrieval_recall@10": 0.5, "median_rank": 2.0},
                                   "en": {"image_retrieval_recall@10": 0.25, "median_rank": 7.0}}}}
    header, _, row = zt.table([record], ["de", "en"]).splitlines()
    assert header.endswith("| median rank (de) |") and row.endswith("| 2 |")


def test_a_bundle_whose_test_split_lacks_a_language_is_refused_before_anything_is_written(tmp_path, capsys):
    z, _, _, _, run = _tiny_en_table(tmp_path)
    assert z.main([*run[:3], "en,de", *run[4:]]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --languages: {tmp_path / 'b.npz'}'s test split has no captions in de\n"
    assert not (tmp_path / "out").exists()


def test_rows_runs_only_the_numbered_rows_and_refuses_a_number_past_the_list(tmp_path, capsys):
    z, _, _, _, run = _tiny_en_table(tmp_path)
    z.ROWS = {label: (None, ["adapter.hidden_dims=[8]", "optim.epochs=1", "optim.batch_size=16"])
              for label in ("row a", "row b", "row c")}
    with pytest.raises(SystemExit) as stop:
        z.main([*run, "--rows", "1,3"])
    assert stop.value.code == 2
    assert "--rows 1,3: expected comma-separated row numbers 0-2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert z.main([*run, "--rows", "2,0"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == ["row-a-s0.json", "row-c-s0.json"]
    rows = [line.split(" | ")[0] for line in (tmp_path / "out" / "table.md").read_text().splitlines()[2:]]
    assert rows == ["| row c", "| row a"]  # in the order asked


def test_a_missing_bundle_is_a_usage_error_naming_save_bundle(tmp_path, capsys):
    z = _driver()
    with pytest.raises(SystemExit) as stop:
        z.main(["--bundle", str(tmp_path / "nope.npz"), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert f"--bundle {tmp_path / 'nope.npz'}: no such file (write one with --save-bundle)" in capsys.readouterr().err


def _three_splits(tmp_path, val_keys):
    """train/val/test shard folders (en, 3 images each) and their features as the stubbed extraction returns them."""
    from data_prep.shard_writer import ShardWriter

    rng = np.random.default_rng(1)
    mix = rng.normal(size=(8, 16)).astype(np.float32)
    features = {}
    for name in ("train", "val", "test"):
        with ShardWriter(tmp_path / name, split=name, source="unit", image_format="npy") as w:
            for i in range(3):
                w.write(f"{name}{i}", np.ones(4, np.float32), f"caption {i}", "en", f"{name}-img{i}", f"g{i}")
        features[str(tmp_path / name)] = _split(rng, mix, 3, ["en"])
    features[str(tmp_path / "val")].image_keys[:] = val_keys
    return features


def test_save_bundle_writes_the_splits_features_it_extracted_and_stops(tmp_path, capsys, monkeypatch):
    z = _driver()
    features = _three_splits(tmp_path, ["v0", "v1", "v2"])
    calls = []

    def load(split, _text, _extractor, langs, _cache, every_image=False, loaded=None):
        calls.append((split, list(langs), every_image))
        return features[split]

    monkeypatch.setattr(z, "image_extractor", lambda *a: "extractor")
    monkeypatch.setattr(z, "load_split_features", load)
    argv = ["--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--test", str(tmp_path / "test"),
            "--languages", "en", "--out", str(tmp_path / "out"), "--save-bundle", str(tmp_path / "b.npz")]
    assert z.main(argv) == 0
    # train on the config's train languages; val and test keep every image (a query for each)
    assert calls == [(str(tmp_path / "train"), ["en"], False), (str(tmp_path / "val"), ["en"], True),
                     (str(tmp_path / "test"), ["en"], True)]
    back = z.load_bundle(tmp_path / "b.npz")
    for name in ("train", "val", "test"):
        given = features[str(tmp_path / name)]
        assert back[name].texts == given.texts and back[name].image_keys == given.image_keys
        np.testing.assert_allclose(back[name].image_features, given.image_features, atol=1e-2)
    assert not (tmp_path / "out").exists() and capsys.readouterr().err == f"wrote {tmp_path / 'b.npz'}\n"


def test_a_val_split_sharing_an_image_with_train_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    z = _driver()
    features = _three_splits(tmp_path, ["v0", "img1", "v2"])  # one val image is a train image (img0-img2)
    monkeypatch.setattr(z, "image_extractor", lambda *a: "extractor")
    monkeypatch.setattr(z, "load_split_features", lambda split, *a, **k: features[split])
    argv = ["--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--test", str(tmp_path / "test"),
            "--languages", "en", "--out", str(tmp_path / "out"), "--save-bundle", str(tmp_path / "b.npz")]
    assert z.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--val {tmp_path / 'val'}" in err and "img1" in err, err
    assert not (tmp_path / "b.npz").exists() and not (tmp_path / "out").exists()
