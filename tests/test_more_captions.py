"""``globetrotter-data more-captions``: more captions per train image in its own language only.

A tiny Flickr8k/Multi30K world (the converter tests' fixture) is converted with one
language per train image, then enriched from Multi30K task 2, the Flickr8k-CN file and a
TSV holding every kind of caption the command must sort: new ones, near-duplicates,
other languages, val/test images, unknown images and bad lines.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from PIL import Image

from data_prep.converters.more_captions import same_text
from data_prep.errors import UserError
from globetrotter.config import load_train_config
from globetrotter.training.prepare import check_eval_splits
from data_prep.checksums import content_checksum
from data_prep.shards import iter_raw, read_captions, read_manifest
from data_prep.split_rule import check_split_rule
from test_converters import cli, flickr8k_world, write_lines  # tests/ is on sys.path (rootless conftest)


def convert_world(tmp_path: Path) -> tuple[dict, Path]:
    w = flickr8k_world(tmp_path)
    data = tmp_path / "data"
    assert cli(["flickr8k", "--images", w["images"], "--multi30k", w["m30k"], "--flickr8k", f"{w['cn']}:zh",
                "--languages", "en,de,fr,cs,zh", "--assign-languages", "--parallel-train", "en,de,fr,cs",
                "--workers", "1", "--out", data, "--no-progress"]) == 0
    (data / "tokenizer.json").write_text("{}", encoding="utf-8")
    return w, data


def by_image(split_dir: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for meta in read_captions(split_dir):
        out[meta["image_id"]].append(meta)
    return out


def image_bytes(split_dir: Path) -> dict[str, set[bytes]]:
    out: dict[str, set[bytes]] = defaultdict(set)
    for _key, _ext, data, meta in iter_raw(split_dir):
        out[meta["image_id"]].add(data)
    return out


def extra_table(tmp_path: Path, data: Path) -> tuple[Path, dict[str, list[str]], Counter]:
    """A TSV with, per train image, a new caption, a near-duplicate and another language's caption, plus noise.

    Returns the file, the new captions expected per image, and the unused reasons it adds.
    """
    train = by_image(data / "train")
    rows, expected, unused = ["image\tlang\tcaption"], defaultdict(list), Counter()
    for image_id, metas in sorted(train.items()):
        lang, photo = metas[0]["lang"], image_id.split("_")[0]
        new = f"{lang} extra caption for {photo}"
        rows.append(f"{photo}.jpg\t{lang}\t{new}")  # matched by Flickr photo id
        expected[image_id].append(new)
        rows.append(f"{image_id}.jpg\t{lang}\t  {metas[0]['caption'].upper()} !  ")  # same words: counted once
        rows.append(f"{image_id}.jpg\t{lang}\t{new.replace('extra', 'EXTRA')}.")
        unused["caption_already_present"] += 2
        other = "fr" if lang != "fr" else "de"
        rows.append(f"{image_id}.jpg\t{other}\tanother language for {photo}")
        unused["other_language_of_image"] += 1
    test_image = sorted(by_image(data / "test"))[0]
    rows.append(f"{test_image}.jpg\ten\ta test image stays as it is")
    unused["image_in_other_split"] += 1
    rows.append("555_abcdef.jpg\ten\tan image that is in no split")
    unused["image_not_in_dataset"] += 1
    rows.append("101.jpg\tqq\tunknown language code")  # skipped: bad input
    return write_lines(tmp_path / "extra.tsv", rows), expected, unused


def test_more_captions_adds_only_in_each_images_language(tmp_path, capsys):
    w, data = convert_world(tmp_path)
    tsv, expected_tsv, tsv_unused = extra_table(tmp_path, data)
    before = by_image(data / "train")
    lang_of = {i: metas[0]["lang"] for i, metas in before.items()}
    out = tmp_path / "more"
    argv = ["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "1,2",
            "--flickr8k", f"{w['cn']}:zh", "--captions", tsv, "--out", out, "--no-progress"]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "before" in printed and "after" in printed and "(ok)" in printed

    after = by_image(out / "train")
    assert set(after) == set(before)  # same images, no new ones
    # expected captions per image, from the fixture's sources: Multi30K task 2 has two
    # independent en and de captions per image; task 1 and Flickr8k-CN captions are there already
    for image_id, metas in after.items():
        lang, photo = lang_of[image_id], int(image_id.split("_")[0])
        assert {m["lang"] for m in metas} == {lang}  # never another language
        old = [m["caption"] for m in before[image_id]]
        new = [m["caption"] for m in metas]
        assert new[: len(old)] == old  # every original caption kept, first
        task2 = [f"{lang} independent {photo} #{k}" for k in (1, 2)] if lang in ("en", "de") and photo <= 107 else []
        assert sorted(new[len(old):]) == sorted(task2 + expected_tsv[image_id])
        assert len({same_text(c) for c in new[len(old):]}) == len(new) - len(old)  # no duplicates added
    check_split_rule(out / "train", "train")

    # counts: manifest = before + added; every source record accounted for
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    manifest = read_manifest(out / "train")
    added = Counter(m["lang"] for i, metas in after.items() for m in metas[len(before[i]):])
    orig = Counter(m["lang"] for metas in before.values() for m in metas)
    assert manifest["languages"] == dict(orig + added) == summary["splits"]["train"]["after"]
    assert summary["written"]["train"] == dict(added) and summary["balanced"]
    assert set(summary["options"]["caption_sha256"]) == {str(f) for f, _ in
                                                         (a.rsplit(":", 1) for a in summary["options"]["flickr8k"])} | \
        set(summary["options"]["captions"])  # each caption file read, with its sha256
    assert "xtd10" not in summary["options"] and "globetrotter" not in summary["options"]  # only the sources given
    assert summary["splits"]["train"]["before"] == dict(orig)
    assert manifest["num_samples"] == sum(orig.values()) + sum(added.values())
    assert manifest["more_captions"]["original_checksum"] == read_manifest(data / "train")["checksum"]
    assert manifest["checksum"] == content_checksum(out / "train", manifest["shards"])
    assert manifest["source"].endswith("+more-captions") and manifest["one_language_per_image"] is True
    for reason, n in tsv_unused.items():
        assert summary["unused"][reason] >= n
    assert summary["skipped"]["unknown_language"] == 1
    assert summary["unused"]["image_in_other_split"] > tsv_unused["image_in_other_split"]  # val/test captions
    n_records = sum(1 for p in (w["m30k"]).rglob("*.gz") for _ in gzip.open(p, "rb"))
    n_records += sum(1 for ln in w["cn"].read_bytes().splitlines() if ln.strip())
    n_records += len(tsv.read_text(encoding="utf-8").splitlines()) - 1
    assert summary["records"] == n_records

    # image payload copied as is; keys stay unique; original keys kept
    old_bytes, new_bytes = image_bytes(data / "train"), image_bytes(out / "train")
    assert new_bytes == old_bytes and all(len(v) == 1 for v in new_bytes.values())
    keys = [m["key"] for metas in after.values() for m in metas]
    assert len(keys) == len(set(keys)) and {m["key"] for ms in before.values() for m in ms} <= set(keys)

    # the other parts are the originals: symlinks, same checksums, rules still hold
    for name in ("val", "test", "train-parallel", "tokenizer.json"):
        assert (out / name).is_symlink() and (out / name).resolve() == (data / name).resolve()
    for split in ("val", "test", "train-parallel"):
        assert read_manifest(out / split)["checksum"] == read_manifest(data / split)["checksum"]
    check_split_rule(out / "test", "test")
    check_split_rule(out / "val", "val")
    # the original dataset is untouched
    assert by_image(data / "train") == before


def test_the_note_on_the_original_feature_cache_says_whether_it_serves(tmp_path, capsys):
    """A train split converted again with --overwrite keeps its feature cache folder; more-captions said that old
    cache "serves the new one (same image ids and bytes)", and the first training run then refused it. The line now
    says so only for a cache built from these images, and names the rebuild otherwise (also for a folder that holds
    no readable cache.json, which training refuses as no cache)."""
    w, data = convert_world(tmp_path)
    cache = data / "train" / "features"
    cache.mkdir()
    argv = ["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "1,2",
            "--out", tmp_path / "more", "--no-progress", "--overwrite"]
    for built, serves in [(read_manifest(data / "train")["checksum"], True), ("sha256:" + "0" * 64, False)]:
        (cache / "cache.json").write_text(json.dumps({"split_checksum": built}), encoding="utf-8")
        assert cli(argv) == 0
        printed = capsys.readouterr().out
        assert ("the feature cache of the original train split serves the new one" in printed) is serves
        assert (f"training refuses it; rebuild it with globetrotter-data features build {data / 'train'}"
                in printed) is not serves
    for record in [None, "{not json", "[]"]:  # no cache.json, a garbled one, one that is no object: no cache at all
        (cache / "cache.json").unlink(missing_ok=True)
        if record is not None:
            (cache / "cache.json").write_text(record, encoding="utf-8")
        assert cli(argv) == 0
        printed = capsys.readouterr().out
        assert "serves the new one" not in printed
        assert (f"note: {cache} holds no readable cache.json, so it is no feature cache: training refuses it; "
                f"rebuild it with globetrotter-data features build {data / 'train'}") in printed


def test_a_linked_split_rewritten_since_is_refused(tmp_path, capsys):
    """Re-converting the original with --overwrite changes the linked val/test: readers refuse them."""
    w, data = convert_world(tmp_path)
    out = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "2", "--out", out,
                "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["linked_checksums"] == {name: read_manifest(data / name)["checksum"]
                                           for name in ("test", "train-parallel", "val")}
    read_manifest(out / "test")  # unchanged: fine
    assert cli(["multi30k", "--images", w["images"], "--multi30k", w["m30k"], "--languages", "en,de",
                "--assign-languages", "--test-fraction", "0.4", "--workers", "1", "--out", data, "--overwrite",
                "--no-progress"]) == 0
    capsys.readouterr()
    with pytest.raises(UserError, match=rf"^{out / 'test'}: links to .*rewritten since more-captions wrote "
                                        rf".*run more-captions again to rebuild {out}$"):
        read_manifest(out / "test")
    assert cli(["inspect", out / "test"]) == 2
    assert "run more-captions again" in capsys.readouterr().err
    cfg = load_train_config(None, [f"data.root={out}", "val.every=10"])
    with pytest.raises(UserError, match=rf"^{out / 'val'}: links to .*run more-captions again"):
        check_eval_splits(cfg)  # training refuses it before any data work
    read_manifest(data / "test")  # the original itself is fine


def test_val_too_copy_and_overwrite(tmp_path):
    w, data = convert_world(tmp_path)
    out = tmp_path / "more"
    val_before = by_image(data / "val")
    rows = [f"{i}.jpg\t{metas[0]['lang']}\tone more for val" for i, metas in val_before.items()]
    tsv = write_lines(tmp_path / "val.tsv", rows + [f"{i}.jpg\tzh\tnot its language" for i in val_before])
    argv = ["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "2", "--captions", tsv,
            "--splits", "train,val", "--copy", "--out", out, "--no-progress"]
    assert cli(argv) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    val_after = by_image(out / "val")
    assert set(val_after) == set(val_before)
    assert sum(summary["splits"]["val"]["added"].values()) == len(val_before)
    for image_id, metas in val_after.items():
        assert {m["lang"] for m in metas} == {val_before[image_id][0]["lang"]}
        assert [m["caption"] for m in metas] == [m["caption"] for m in val_before[image_id]] + ["one more for val"]
    check_split_rule(out / "val", "val")
    for name in ("test", "train-parallel", "tokenizer.json"):
        assert (out / name).exists() and not (out / name).is_symlink()
    assert read_manifest(out / "test")["checksum"] == read_manifest(data / "test")["checksum"]
    assert summary["reused"] == {"test": "copied", "tokenizer.json": "copied", "train-parallel": "copied"}

    # an earlier more-captions output is replaced with --overwrite (and kept without it)
    assert cli(argv) == 2
    assert cli(argv[:-3] + ["--out", out, "--overwrite", "--no-progress"]) == 0
    assert not (out / "val").is_symlink()
    assert not list(tmp_path.glob(".more.partial-*"))


def test_a_second_run_into_the_same_out_meanwhile_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """Two more-captions runs into one --out at once both reported success, the last one's dataset replacing the
    first's under it; the second is now refused in one line naming --out while the first runs."""
    import data_prep.converters.more_captions as command

    w, data = convert_world(tmp_path)
    capsys.readouterr()
    out = tmp_path / "more"
    argv = ["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "2", "--out", out, "--no-progress"]
    write, second = command.write_dataset, []

    def racing(*args, **kwargs):
        if not second:  # a second command starts as the first writes
            second.append(None)
            second[:] = [cli(argv), capsys.readouterr().err]
        return write(*args, **kwargs)

    monkeypatch.setattr(command, "write_dataset", racing)
    assert cli(argv) == 0
    code, err = second
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: --out {out}: another command is writing"), err
    check_split_rule(out / "train", "train")
    assert not list(tmp_path.glob(".more*"))  # neither a staging folder nor the lock file is left


def test_train_parallel_gets_the_same_captions_in_each_of_its_images_languages(tmp_path, capsys):
    """--splits train,train-parallel: each image of the twins' split gains the captions the sources have in the
    languages it already has there, tied to its group; train comes out as a train-only run writes it, and a
    caption added to both splits counts once, with one copy."""
    w, data = convert_world(tmp_path)
    src = ["--multi30k", w["m30k"], "--multi30k-tasks", "1,2", "--flickr8k", f"{w['cn']}:zh"]
    assert cli(["more-captions", "--data", data, *src, "--out", tmp_path / "train-only", "--no-progress"]) == 0
    out = tmp_path / "both"
    assert cli(["more-captions", "--data", data, *src, "--splits", "train,train-parallel", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert "(ok)" in printed and "copied into a second split" in printed
    assert read_manifest(out / "train")["checksum"] == read_manifest(tmp_path / "train-only" / "train")["checksum"]
    assert not (out / "train-parallel").is_symlink() and (out / "val").is_symlink()

    before, after = by_image(data / "train-parallel"), by_image(out / "train-parallel")
    assert set(after) == set(before) and before
    for image_id, metas in after.items():
        old, photo = before[image_id], int(image_id.split("_")[0])
        langs = {m["lang"] for m in old}
        assert len(langs) > 1 and {m["lang"] for m in metas} == langs  # never a language the image lacked
        assert {m["group"] for m in metas} == {old[0]["group"]} and old[0]["group"] is not None
        assert [m["caption"] for m in metas[:len(old)]] == [m["caption"] for m in old]
        task2 = [f"{lang} independent {photo} #{k}" for lang in ("en", "de") if lang in langs for k in (1, 2)]
        assert sorted(m["caption"] for m in metas[len(old):]) == sorted(task2)

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    added = {name: sum(summary["splits"][name]["added"].values()) for name in ("train", "train-parallel")}
    assert added["train-parallel"] == sum(len(after[i]) - len(before[i]) for i in after) > added["train"] > 0
    copies = sum(n for langs in summary["extra_views"].values() for n in langs.values())
    train_images_in_parallel = set(by_image(data / "train")) & set(before)
    assert copies == sum(len(ms) - len(by_image(data / "train")[i]) for i, ms in by_image(out / "train").items()
                         if i in train_images_in_parallel) > 0
    assert summary["written_total"] + copies == added["train"] + added["train-parallel"] and summary["balanced"]


def test_a_stem_two_converted_files_shared_matches_neither(tmp_path, capsys):
    """cat.jpg and cat.png became ids cat and cat-2; the shards keep no file names, so a caption for either is
    left out (counted, with a warning), never added to the other image."""
    photos = tmp_path / "photos"
    for name, colour in (("cat.jpg", "red"), ("cat.png", "blue"), ("dog.jpg", "white")):
        photos.mkdir(exist_ok=True)
        Image.new("RGB", (24, 16), colour).save(photos / name)
    table = write_lines(tmp_path / "caps.tsv", ["cat.jpg\ten\ta red cat", "cat.png\ten\ta blue cat",
                                                "dog.jpg\ten\ta white dog"])
    data = tmp_path / "data"
    assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--out", data, "--no-progress"]) == 0
    assert sorted(by_image(data / "train")) == ["cat", "cat-2", "dog"]
    more = write_lines(tmp_path / "more.tsv", ["cat.png\ten\tanother blue cat", "cat-2.jpg\ten\tblue again",
                                               "cat.jpg\ten\tanother red cat", "dog.jpg\ten\tanother dog"])
    out = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--captions", more, "--out", out, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "3 caption(s) not added: their image name fits several images" in printed and "more.tsv:1" in printed
    after = by_image(out / "train")
    assert [m["caption"] for m in after["cat"]] == ["a red cat"]
    assert [m["caption"] for m in after["cat-2"]] == ["a blue cat"]
    assert [m["caption"] for m in after["dog"]] == ["a white dog", "another dog"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["unused"] == {"ambiguous_image_name": 3} and summary["balanced"]


def test_bad_input_is_a_one_line_error(tmp_path, capsys):
    w, data = convert_world(tmp_path)
    src = ["--multi30k", w["m30k"], "--multi30k-tasks", "2"]
    no_train = tmp_path / "no-train"
    no_train.mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    only_train = tmp_path / "only-train"
    only_train.mkdir()
    (only_train / "train").symlink_to(data / "train")
    bad_tsv, empty_tsv = tmp_path / "bad.tsv", tmp_path / "empty.tsv"  # was: written, a copy of --data, exit 0
    bad_tsv.write_text("one column\nfoo,bar,baz\n", encoding="utf-8")
    empty_tsv.write_text("", encoding="utf-8")
    mixed = tmp_path / "mixed"  # converted without --assign-languages: images in several languages
    assert cli(["multi30k", "--images", w["images"], "--multi30k", w["m30k"], "--workers", "1", "--out", mixed,
                "--no-progress"]) == 0
    cases = [
        (["--data", no_train, *src, "--out", tmp_path / "o1"], f"--data {no_train}: no train/manifest.json"),
        (["--data", data / "train", *src, "--out", tmp_path / "o1"], "is a split folder itself"),
        (["--data", only_train, *src, "--splits", "train,val", "--out", tmp_path / "o1"],
         f"--splits names val, but --data {only_train} has no val/ split"),
        (["--data", data, "--captions", bad_tsv, "--out", tmp_path / "o1"], "none of the 2 caption record(s)"),
        (["--data", data, "--flickr8k", f"{bad_tsv}:en", "--out", tmp_path / "o1"], f"first: {bad_tsv}:1"),
        (["--data", data, "--captions", empty_tsv, "--out", tmp_path / "o1"], "no caption record read"),
        (["--data", data, *src, "--out", tmp_path / "taken"], "pass --overwrite"),
        (["--data", data, *src, "--out", tmp_path / "taken", "--overwrite"], "not a dataset written by more-captions"),
        (["--data", data, *src, "--out", data / "more"], "outside --data"),
        (["--data", data, "--out", tmp_path / "o2"], "needs at least one source"),
        (["--data", mixed, *src, "--out", tmp_path / "o3"], "one language per image"),
        (["--data", data, *src, "--splits", "test", "--out", tmp_path / "o4"], "test stays as it is"),
        (["--data", data, *src, "--splits", "train,parallel", "--out", tmp_path / "o4"], "'train,parallel'"),
        (["--data", tmp_path / "absent", *src, "--out", tmp_path / "o5"], "folder not found"),
        # issues[:-1] printed all but the last one and a wrong "... and -1 more"
        (["--data", data, *src, "--show-issues", "-1", "--out", tmp_path / "o5"],
         "--show-issues: expected an integer >= 0, got '-1'"),
    ]
    for argv, message in cases:
        assert cli(["more-captions", *argv, "--no-progress"]) == 2, message
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1]
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 6))
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_help_explains_why(capsys):
    assert cli(["more-captions", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "no parallel text" in text and "exactly one language" in text and "--out" in text
    # the splits --splits names are rewritten, not linked (it said val/ and train-parallel/ were symlinks, always)
    assert "val/ and train-parallel/ unless named in --splits" in text
    assert "val/, test/, train-parallel/ and tokenizer.json are symlinks" not in text


def test_captions_help_says_how_a_rows_image_is_matched(tmp_path, capsys):
    """more-captions matches a --captions row's image by stem (the shards keep no file names) and ignores its split
    column; its --help said the converters' rule (no stem match)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (24, 16), "white").save(photos / "dog.jpg")
    data = tmp_path / "data"
    table = write_lines(tmp_path / "caps.tsv", ["dog.jpg\ten\ta white dog"])
    assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--out", data, "--no-progress"]) == 0
    more = write_lines(tmp_path / "more.tsv", ["dog.png\ten\tanother dog\ttest"])
    assert cli(["more-captions", "--data", data, "--captions", more, "--out", tmp_path / "more", "--no-progress"]) == 0
    assert [m["caption"] for m in by_image(tmp_path / "more" / "train")["dog"]] == ["a white dog", "another dog"]
    capsys.readouterr()
    assert cli(["more-captions", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--captions FILE caption table")
    captions = text[start:text.index("--images DIR", start)]
    assert "no stem" not in captions and "file stem" in captions and "split column is ignored" in captions


@pytest.mark.realdata
def test_real_flickr8k_gets_more_captions(flickr8k_dir, tmp_path):
    data = tmp_path / "f8k"
    assert cli(["flickr8k", "--images", flickr8k_dir / "images", "--multi30k", flickr8k_dir / "multi30k",
                "--flickr8k", f"{flickr8k_dir / 'flickr8kcn' / 'flickr8kzhc.caption.txt'}:zh",
                "--languages", "en,de,fr,cs,zh", "--assign-languages", "--test-fraction", "0.1", "--val-fraction", "0.25",
                "--resize", "32", "--max-images", "200", "--workers", "1", "--out", data, "--no-progress"]) == 0
    out = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--multi30k", flickr8k_dir / "multi30k", "--multi30k-tasks", "1,2",
                "--flickr8k", f"{flickr8k_dir / 'flickr8k' / 'Flickr8k.token.txt'}:en",
                "--flickr8k", f"{flickr8k_dir / 'flickr8kcn' / 'flickr8kzhc.caption.txt'}:zh",
                "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    train = summary["splits"]["train"]
    assert summary["balanced"] and summary["skipped_total"] == 0
    # en and de images get about five captions each (Multi30K task 2 / Flickr8k, duplicates dropped)
    assert set(train["added"]) <= {"en", "de"} and train["after"]["fr"] == train["before"]["fr"]
    for lang in ("en", "de"):
        assert train["after"][lang] >= 4 * train["before"][lang]
    check_split_rule(out / "train", "train")
    assert read_manifest(out / "test")["checksum"] == read_manifest(data / "test")["checksum"]


def test_an_image_converted_before_long_ids_were_shortened_still_gets_its_captions(tmp_path, monkeypatch):
    """Image ids keep 64 characters now; a dataset converted before holds the whole sanitised stem of a long name."""
    import data_prep.converters.pipeline as pipeline

    photos = tmp_path / "photos"
    photos.mkdir()
    name = "a holiday photo " * 5 + ".jpg"  # a stem of 80 characters, spaces among them
    Image.new("RGB", (24, 16), "red").save(photos / name)
    data, out = tmp_path / "data", tmp_path / "more"
    monkeypatch.setattr(pipeline, "MAX_ID", 1000)  # the ids of before
    table = write_lines(tmp_path / "caps.tsv", [f"{name}\ten\ta red photo"])
    assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--out", data, "--no-progress"]) == 0
    monkeypatch.undo()
    (old_id,) = by_image(data / "train")
    assert len(old_id) > 64
    more = write_lines(tmp_path / "more.tsv", [f"{name}\ten\tanother red photo"])
    assert cli(["more-captions", "--data", data, "--captions", more, "--out", out, "--no-progress"]) == 0
    assert [m["caption"] for m in by_image(out / "train")[old_id]] == ["a red photo", "another red photo"]


def test_matcher_finds_an_image_by_its_exact_name_and_refuses_a_photo_id_two_images_share():
    """Photos 1000_ab and 1000_cd share the Flickr photo id 1000: a caption naming 1000.jpg fits both (ambiguous),
    one naming 1000_ab.jpg names one; a long name finds the shortened id its conversion gave it."""
    from data_prep.converters.more_captions.gather import AMBIGUOUS, Matcher
    from data_prep.converters.pipeline import safe_id

    long_stem = "a holiday photo of a beach in the evening, with two dogs and a red ball"
    matcher = Matcher({"1000_ab": ["train"], "1000_cd": ["train"], "2000_ef": ["val"], safe_id(long_stem): ["train"]})
    assert matcher.match(["1000.jpg"]) == AMBIGUOUS
    assert matcher.match(["1000_ab.jpg"]) == "1000_ab" and matcher.match(["x/1000_cd.png"]) == "1000_cd"
    assert matcher.match(["2000.jpg"]) == "2000_ef" and matcher.match(["3000.jpg"]) is None
    assert matcher.match([long_stem + ".jpg"]) == safe_id(long_stem) != long_stem


def test_sources_whose_captions_are_all_unused_write_the_dataset_unchanged(tmp_path, capsys):
    """Captions of images the dataset lacks are unused, not bad input: no error, the train split as it was."""
    _, data = convert_world(tmp_path)
    table = write_lines(tmp_path / "other.tsv", ["555_abcdef.jpg\ten\tnot in the dataset", "556.jpg\tde\tnor this"])
    out = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--captions", table, "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["unused"] == {"image_not_in_dataset": 2} and summary["written_total"] == 0
    assert read_manifest(out / "train")["num_samples"] == read_manifest(data / "train")["num_samples"]


def test_a_caption_train_parallel_holds_already_is_unused_as_already_present(tmp_path):
    """--splits train,train-parallel: a caption of a train image in another of its parallel languages, with a text
    train-parallel holds already, is new nowhere: unused as caption_already_present (not as another language)."""
    _, data = convert_world(tmp_path)
    parallel = by_image(data / "train-parallel")
    train = by_image(data / "train")
    image_id = sorted(set(parallel) & set(train))[0]
    own = train[image_id][0]["lang"]
    other = next(m for m in parallel[image_id] if m["lang"] != own)
    table = write_lines(tmp_path / "again.tsv", [f"{image_id}.jpg\t{other['lang']}\t{other['caption']}"])
    out = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--captions", table, "--splits", "train,train-parallel",
                "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["unused"] == {"caption_already_present": 1} and summary["balanced"]


def test_the_table_of_a_parallel_split_counts_images_once_in_its_total():
    """train-parallel shows an image in several languages: the total row's images are the images, not the sum of
    the images per language, and its per-image figure divides by them."""
    from data_prep.converters.more_captions.gather import EnrichedSplit
    from data_prep.converters.more_captions.summary import format_table

    state = EnrichedSplit("train-parallel", {})
    for image_id in ("a", "b"):
        for lang in ("en", "de"):
            state.langs_of[image_id].add(lang)
            state.before[lang] += 1
    total = format_table(state)[-1].split()
    assert total == ["total", "2", "4", "0", "4", "2.00"]


def test_option_errors_come_before_anything_is_read_and_images_is_said_to_be_unused(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    tsv = write_lines(tmp_path / "c.tsv", ["1.jpg\ten\ta caption"])
    (tmp_path / "file").write_text("x")
    base = ["more-captions", "--data", data, "--captions", tsv, "--no-progress"]
    for extra, message in ((["--shard-size", "0", "--out", tmp_path / "o"], "--shard-size must be positive, got 0"),
                           (["--out", tmp_path / "file"], f"--out {tmp_path / 'file'}: exists and is not a folder")):
        assert cli([*base, *extra]) == 2
        assert capsys.readouterr().err.strip() == f"error: {message}"
    assert cli([*base, "--images", data, "--out", tmp_path / "o"]) == 2  # data holds no split: refused after the note
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "note: --images is not used: image bytes are copied from the shards of --data"
    assert err[-1].startswith(f"error: --data {data}: no train/manifest.json")
    assert not (tmp_path / "o").exists()


def test_a_failed_run_leaves_neither_out_nor_its_staging_folder_and_a_stale_one_is_cleared(tmp_path, capsys):
    """A staging folder left by a killed run (same pid) is cleared, not mixed in; an error while writing (a sample
    whose image is not of the manifest's format) removes the staging folder and leaves --out unmade."""
    import os

    w, data = convert_world(tmp_path)
    out = tmp_path / "more"
    stale = tmp_path / f".more.partial-{os.getpid()}"
    (stale / "train").mkdir(parents=True)
    (stale / "train" / "junk.tar").write_text("from a killed run")
    argv = ["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "2", "--out", out,
            "--no-progress"]
    assert cli(argv) == 0
    assert not stale.exists() and not (out / "train" / "junk.tar").exists()
    manifest_path = data / "train" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest_path.write_text(json.dumps(dict(manifest, image_format="png")), encoding="utf-8")
    out2 = tmp_path / "more2"
    assert cli([*argv[:-3], "--out", out2, "--no-progress"]) == 2
    key = read_captions(data / "train")[0]["key"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {data / 'train'}: sample '{key}' has a .jpg image but the manifest says png")
    assert not out2.exists() and not list(tmp_path.glob(".more2.partial-*"))
