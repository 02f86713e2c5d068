"""Converters to the shard format: every layout on tiny fixtures written in its real format,
bad input reported with file and line and accounted for, splits following the Globetrotter
rule, and the real Flickr8k data (skipped when ../shared is absent)."""
from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from data_prep.cli import main as data_cli
from data_prep.converters import (
    ISO_639_1, ConvertOptions, ImageResolver, ImageSpec, assign_languages, convert, normalize_language,
    plan_splits, prepare_image, read_flickr8k,
)
from data_prep.converters.images import ImageError
from data_prep.converters.splits import ImageInfo
from data_prep.errors import UserError
from data_prep.shards import decode_image, encode_image, iter_raw, iter_samples, read_captions, read_manifest
from data_prep.split_rule import check_split_rule

# ------------------------------------------------------------------------------------------
# fixture builders


def make_jpeg(path: Path, size=(24, 16), color=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format="JPEG", quality=95)
    return path


def write_lines(path: Path, lines: list[str | bytes], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode("utf-8")) + b"\n" for ln in lines)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def cli(argv: list[str]) -> int:
    """Run ``globetrotter-data`` as the console script does; return its exit code."""
    with pytest.raises(SystemExit) as exit_info:
        data_cli([str(a) for a in argv])
    return exit_info.value.code


M30K_LANGS = ("en", "de", "fr", "cs")
SPLITS = {"train": [101, 102, 103, 104], "val": [105], "test_2016_flickr": [106, 107]}


def flickr8k_world(tmp_path: Path) -> dict:
    """Flickr8k-style images, Multi30K task 1 + 2, a Flickr8k-CN file and a TSV, with one of each bad input.

    Returns the paths and the expected facts, computed from what is written here.
    """
    images = tmp_path / "images"
    for pid in range(101, 110):
        make_jpeg(images / f"{pid}_a1b2c3.jpg", color=(pid, 10, 10))
    truncated = images / "108_a1b2c3.jpg"
    truncated.write_bytes(truncated.read_bytes()[:200])  # a truncated JPEG

    m30k = tmp_path / "multi30k"
    captions: dict[tuple[int, str], list[str]] = defaultdict(list)  # good captions written to files
    for split, ids in SPLITS.items():
        write_lines(m30k / "task1" / "image_splits" / f"{split}.txt", [f"{i}.jpg" for i in ids])
        write_lines(m30k / "task2" / "image_splits" / f"{split.replace('_flickr', '')}_images.txt",
                    [f"{i}.jpg" for i in ids])
        for lang in M30K_LANGS:
            if (split, lang) == ("val", "cs"):  # the val image has no cs caption: no val.cs file
                continue
            lines = [f"{lang} parallel {i}" for i in ids]
            write_lines(m30k / "task1" / "raw" / f"{split}.{lang}.gz", lines, gz=True)
            for i, text in zip(ids, lines):
                captions[(i, lang)].append(text)
        for k in (1, 2):
            for lang in ("en", "de"):
                write_lines(m30k / "task2" / "raw" / f"{split.replace('_flickr', '')}.{k}.{lang}.gz",
                            [f"{lang} independent {i} #{k}" for i in ids], gz=True)

    cn = tmp_path / "flickr8kzhc.caption.txt"
    cn_lines: list[str | bytes] = []
    for pid in range(101, 110):
        for k in range(2):
            cn_lines.append(f"{pid}_a1b2c3.jpg#zhc#{k} 中文描述{pid}之{k}")
            captions[(pid, "zh")].append(f"中文描述{pid}之{k}")
    bad = {
        "duplicate_key": "101_a1b2c3.jpg#zhc#0 重复的描述",
        "empty_caption": "102_a1b2c3.jpg#zhc#7    ",
        "missing_image": "999_ffffff.jpg#zhc#0 没有图片",
        "non_utf8": b"103_a1b2c3.jpg#zhc#8 \xff\xfe broken",
        "malformed_line": "this line has no image key",
    }
    bad_lines = {}
    for kind, line in bad.items():
        cn_lines.append(line)
        bad_lines[kind] = len(cn_lines)
    write_lines(cn, cn_lines)
    captions[(108, "zh")].clear()  # the truncated image cannot be written

    tsv = write_lines(tmp_path / "extra.tsv", ["image\tlang\tcaption", "109_a1b2c3.jpg\tdee\ttypo language"])
    return dict(images=images, m30k=m30k, cn=cn, tsv=tsv, captions=captions, bad_lines=bad_lines,
                truncated=truncated)


def samples_by_image(split_dir: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for meta in read_captions(split_dir):
        out[meta["image_id"]].append(meta)
    return out


# ------------------------------------------------------------------------------------------
# units


@pytest.mark.parametrize("code, expected", [
    ("de", "de"), ("DE", "de"), (" zh ", "zh"), ("fa-AF", "fa-AF"), ("fa_af", "fa-AF"), ("zh-hans", "zh-Hans"),
    ("es-419", "es-419"), ("jp", None), ("xx", None), ("eng", None), ("", None), ("d e", None), ("de-", None),
])
def test_language_codes_are_iso_639_1(code, expected):
    assert normalize_language(code) == expected


def test_iso_table_is_complete():
    assert len(ISO_639_1) == 183  # ISO 639-1 has 183 current two-letter codes
    assert {"en", "de", "fr", "cs", "zh", "ja", "ko", "tl", "sw"} <= set(ISO_639_1) and "jp" not in ISO_639_1


def test_assign_languages_gives_one_language_balanced():
    rng = np.random.default_rng(1)
    all_langs = ("en", "de", "zh")
    # 10 images only in zh (forced), 30 in all three: the best balance is 40/3 -> 13 or 14 each
    images = {f"z{i}": frozenset({"zh"}) for i in range(10)}
    images.update({f"a{i}": frozenset(all_langs) for i in range(30)})
    chosen = assign_languages(images, rng)
    assert set(chosen) == set(images)
    assert all(chosen[i] in images[i] for i in images)
    counts = Counter(chosen.values())
    assert max(counts.values()) - min(counts.values()) <= 1 and sum(counts.values()) == 40
    again = assign_languages(images, np.random.default_rng(1))
    assert again == chosen  # seeded


def test_plan_splits_by_fraction_and_by_source_hints():
    langs = ("en", "de")
    images = {f"c{i}": ImageInfo(frozenset(langs), "train") for i in range(80)}
    images.update({f"p{i}": ImageInfo(frozenset({"en"}), "test") for i in range(20)})
    plan = plan_splits(images, langs, test_fraction=0.1, val_fraction=0.2, assign=True, seed=3)
    split_counts = Counter(plan.split_of.values())
    assert split_counts == {"test": 10, "val": 20, "train": 70}
    assert all(images[i].langs == frozenset(langs) for i, s in plan.split_of.items() if s == "test")
    assert set(plan.lang_of) == {i for i, s in plan.split_of.items() if s != "test"}

    by_hint = plan_splits(images, langs)  # no fractions: the sources' splits
    assert sorted(by_hint.incomplete_test) == sorted(f"p{i}" for i in range(20))  # test images lacking 'de'
    assert Counter(by_hint.split_of.values()) == {"train": 80}


def test_plan_splits_gives_the_same_images_to_each_split_with_and_without_one_language_per_image():
    # a parallel val (the conversion without --assign-languages) must hold exactly the val images of the one-language
    # conversion, and the test images must not move: the oracle row reads that val beside the training's
    langs = ("en", "de", "fr")
    images = {f"c{i}": ImageInfo(frozenset(langs)) for i in range(60)}
    images.update({f"e{i}": ImageInfo(frozenset({"en"})) for i in range(15)})
    one = plan_splits(images, langs, test_fraction=0.1, val_fraction=0.25, assign=True, seed=5)
    every = plan_splits(images, langs, test_fraction=0.1, val_fraction=0.25, assign=False, seed=5)
    assert one.split_of == every.split_of and set(one.lang_of) and not every.lang_of


def test_plan_splits_from_split_files_puts_the_unnamed_images_in_train():
    langs = ("en", "de")
    images = {f"c{i}": ImageInfo(frozenset(langs), "test") for i in range(6)}  # the source's hints are overridden
    images["p0"] = ImageInfo(frozenset({"en"}))
    fixed = {"c0": "test", "c1": "test", "c2": "val", "p0": "test"}
    plan = plan_splits(images, langs, assign=True, fixed={i: fixed.get(i, "train") for i in images})
    assert plan.split_of == {"c0": "test", "c1": "test", "c2": "val", "c3": "train", "c4": "train", "c5": "train"}
    assert plan.incomplete_test == ["p0"]  # a test image lacking 'de' is left out, as with the sources' splits
    with pytest.raises(ValueError, match="exclusive"):
        plan_splits(images, langs, test_fraction=0.1, fixed={})


def test_assign_languages_breaks_ties_at_random_not_by_the_alphabet():
    """An image whose languages are all equally used takes one at random (seeded): the first language in sorted
    order must not win every tie, or the images left over by an uneven split all go to it."""
    image = {"i0": frozenset({"de", "en", "fr"})}
    chosen = {assign_languages(image, np.random.default_rng(seed))["i0"] for seed in range(30)}
    assert chosen == {"de", "en", "fr"}  # a fixed winner has chance 3 * (1/3)^30 under a fair draw


def test_plan_splits_rounds_the_fractions_and_warns_only_when_too_few_images_are_complete():
    langs = ("en", "de")
    ten = {f"c{i}": ImageInfo(frozenset(langs)) for i in range(10)}
    plan = plan_splits(ten, langs, test_fraction=0.19, val_fraction=0.29, seed=1)  # 1.9 -> 2 and 2.9 -> 3, not 1, 2
    assert Counter(plan.split_of.values()) == {"test": 2, "val": 3, "train": 5} and not plan.notes
    images = {f"c{i}": ImageInfo(frozenset(langs)) for i in range(4)}
    images.update({f"e{i}": ImageInfo(frozenset({"en"})) for i in range(6)})
    exact = plan_splits(images, langs, test_fraction=0.4)  # asks for 4 test images, and exactly 4 are complete
    assert Counter(exact.split_of.values())["test"] == 4 and not exact.notes
    short = plan_splits(images, langs, test_fraction=0.5)  # asks for 5: the 4 complete ones, with a note
    assert Counter(short.split_of.values())["test"] == 4
    assert len(short.notes) == 1 and "asks for 5 test images but only 4" in short.notes[0]


def test_plan_splits_sends_an_image_the_fixed_splits_do_not_name_to_train_whatever_its_source_says():
    images = {f"c{i}": ImageInfo(frozenset({"en", "de"}), hint) for i, hint in enumerate(("test", "val", "test"))}
    plan = plan_splits(images, ("en", "de"), fixed={"c0": "val"})  # c1, c2 named by no split file
    assert plan.split_of == {"c0": "val", "c1": "train", "c2": "train"}


@pytest.mark.parametrize("hints, expected", [(["train", "test", None], "test"), (["val", "train"], "val"),
                                             (["test", "val"], "test"), ([None, "train"], "train"), ([None], None)])
def test_an_image_the_sources_put_in_several_splits_goes_to_the_most_held_out(hints, expected):
    """A caption marked test and another of the same image marked train: the image is a test image (never a train
    image that test also shows)."""
    from data_prep.converters.splits import merge_hints

    assert merge_hints(hints) == expected


def test_split_files_count_the_distinct_images_each_names_and_the_images_named_by_none(tmp_path):
    from data_prep.converters.splits import NOT_CAPTIONED, SplitFile, assign_from_split_files

    lines = {"test": ["a.jpg", "a.jpg", "b.jpg", "nocap.jpg"], "train": ["c.jpg"]}
    files = [SplitFile(split, write_lines(tmp_path / f"{split}.txt", names)) for split, names in lines.items()]
    find = {"a.jpg": "a", "b.jpg": "b", "c.jpg": "c", "nocap.jpg": NOT_CAPTIONED}.get
    fixed = assign_from_split_files(files, find)
    assert fixed.split_of == {"a": "test", "b": "test", "c": "train"} and fixed.not_captioned == 1
    assert fixed.named == {str(files[0]): 2, str(files[1]): 1}  # a (twice) and b; nocap is no image of the dataset
    planned = {"a": "test", "b": "test", "c": "train", "d": "train"}  # d: named by no file
    line = fixed.describe(planned)
    assert f"{files[0]}: 2 image(s); {files[1]}: 1 image(s)" in line
    assert "; 1 image(s) named in no split file went to train" in line  # d, not c (the train file names it)


def test_resolver_matches_flickr_photo_ids_both_ways(tmp_path):
    f8k = make_jpeg(tmp_path / "a" / "1000268201_693b08cb0e.jpg")
    f30k = make_jpeg(tmp_path / "b" / "sub" / "36979.jpg")
    resolver = ImageResolver([tmp_path / "a", tmp_path / "b"])
    assert resolver.resolve(["1000268201.jpg"]) == f8k  # Flickr30k name -> Flickr8k file
    assert resolver.resolve(["36979_0123abcd.jpg"]) == f30k  # Flickr8k name -> Flickr30k file
    assert resolver.resolve(["sub/36979.jpg"]) == f30k  # relative path
    assert resolver.resolve(["1000268202.jpg"]) is None


def test_a_16_bit_png_is_converted_as_its_8_bit_picture_not_white(tmp_path):
    gradient = np.tile(np.linspace(0, 255, 64).astype(np.uint8), (32, 1))
    Image.fromarray(gradient).save(tmp_path / "eight.png")
    Image.fromarray(gradient.astype(np.uint16) * 257).save(tmp_path / "sixteen.png")  # Pillow opens it as I;16 or I
    assert Image.open(tmp_path / "sixteen.png").mode.startswith("I")
    read = [np.asarray(Image.open(io.BytesIO(prepare_image(tmp_path / name, ImageSpec(resize=16))[0])), np.float32)
            for name in ("eight.png", "sixteen.png")]
    assert np.abs(read[0] - read[1]).max() <= 2  # JPEG rounding; convert("RGB") made every pixel 255
    assert read[1].min() < 50
    sixteen = Image.open(tmp_path / "sixteen.png")
    for fmt in ("png", "jpg"):  # a shard written from a 16-bit picture reads back as the picture
        back = np.asarray(decode_image(encode_image(sixteen, fmt), fmt), np.float32)[..., 0]
        assert np.abs(back - gradient).max() <= 2, fmt

def test_prepare_image_resizes_and_catches_bad_files(tmp_path):
    src = make_jpeg(tmp_path / "wide.jpg", size=(80, 40))
    data, (h, w) = prepare_image(src, ImageSpec(resize=20))
    assert (h, w) == (20, 40) and Image.open(io.BytesIO(data)).size == (40, 20)
    data, (h, w) = prepare_image(src, ImageSpec(resize=20, mode="center-crop"))
    assert (h, w) == (20, 20) and Image.open(io.BytesIO(data)).size == (20, 20)
    assert prepare_image(src, ImageSpec(resize=100))[1] == (40, 80)  # never scaled up
    assert prepare_image(src, ImageSpec())[0] == src.read_bytes()  # no resize: original JPEG bytes
    png = tmp_path / "p.png"
    Image.new("RGBA", (30, 60), (1, 2, 3, 255)).save(png)
    assert Image.open(io.BytesIO(prepare_image(png, ImageSpec(resize=15))[0])).format == "JPEG"

    truncated = tmp_path / "t.jpg"
    truncated.write_bytes(src.read_bytes()[:150])
    not_image = write_lines(tmp_path / "n.jpg", ["hello"])
    for bad in (truncated, not_image, tmp_path / "absent.jpg"):
        with pytest.raises(ImageError):
            prepare_image(bad, ImageSpec(resize=20))
    with pytest.raises(ImageError, match="^not an image file Pillow can read$"):  # not Pillow's '<_io.BytesIO ...>'
        prepare_image(not_image, ImageSpec(resize=20))


def test_flickr8k_reader_parses_both_formats(tmp_path):
    token = write_lines(tmp_path / "Flickr8k.token.txt", ["1000_ab.jpg#0\tA dog runs .", "1000_ab.jpg#1\tA cat ."])
    cn = write_lines(tmp_path / "zh.txt", ["1000_ab#zhc#0 一只狗在跑。"])
    recs = list(read_flickr8k(token, "en")) + list(read_flickr8k(cn, "zh"))
    assert [(r.images[0], r.lang, r.text, r.line) for r in recs] == [
        ("1000_ab.jpg", "en", "A dog runs .", 1), ("1000_ab.jpg", "en", "A cat .", 2), ("1000_ab.jpg", "zh", "一只狗在跑。", 1)]


# ------------------------------------------------------------------------------------------
# end to end on fixtures in each real layout


def test_multi30k_and_flickr8k_cn_combined_with_every_bad_input(tmp_path, capsys):
    w = flickr8k_world(tmp_path)
    out = tmp_path / "out"
    argv = ["flickr8k", "--images", w["images"], "--multi30k", w["m30k"], "--multi30k-tasks", "1",
            "--flickr8k", f"{w['cn']}:zh", "--captions", w["tsv"], "--languages", "en,de,fr,cs,zh",
            "--assign-languages", "--parallel-train", "en,de,fr,cs", "--resize", "12", "--workers", "1",
            "--out", out, "--no-progress", "--show-issues", "10"]
    assert cli(argv) == 0
    printed = capsys.readouterr()
    err = printed.err
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))

    # every injected problem is reported with its file and line
    for kind, line in w["bad_lines"].items():
        assert f"{w['cn']}:{line}: {kind}" in err, kind
    assert f"{w['tsv']}:2: unknown_language" in err
    assert f"{w['truncated']}: unreadable_image" in err
    assert (f"warning: 1 caption line(s) of {w['cn']} are not UTF-8 and were skipped (their captions are lost): if a "
            f"file is in another encoding") in printed.out  # the advice, naming the file
    assert summary["skipped"] == {"duplicate_key": 1, "empty_caption": 1, "missing_image": 1, "non_utf8": 1,
                                  "malformed_line": 1, "unknown_language": 1, "unreadable_image": 2}

    # every record accounted for: records counted here from the fixture files
    n_task1 = sum(len(ids) for ids in SPLITS.values()) * 4 - 1  # no val.cs
    n_cn = 9 * 2 + len(w["bad_lines"])
    assert summary["records"] == n_task1 + n_cn + 1  # + the TSV row (the header is no record)
    assert summary["records"] == summary["written_total"] + summary["skipped_total"] + summary["unused_total"]
    assert summary["balanced"]

    # test = Multi30K's test_2016_flickr images, in all five languages, tied by group
    for split in ("train", "val", "test"):
        check_split_rule(out / split, split)
    test = samples_by_image(out / "test")
    assert sorted(test) == ["106_a1b2c3", "107_a1b2c3"]
    for image_id, metas in test.items():
        pid = int(image_id.split("_")[0])
        assert {m["group"] for m in metas} == {image_id}
        got = sorted((m["lang"], m["caption"]) for m in metas)
        assert got == sorted((lang, t) for lang in (*M30K_LANGS, "zh") for t in w["captions"][(pid, lang)])

    # train/val: one language per image, and all of that image's captions in that language
    unused_other = 0
    for split in ("train", "val"):
        for image_id, metas in samples_by_image(out / split).items():
            pid = int(image_id.split("_")[0])
            (lang,) = {m["lang"] for m in metas}
            assert sorted(m["caption"] for m in metas) == sorted(w["captions"][(pid, lang)])
            unused_other += sum(len(w["captions"][(pid, other)]) for other in (*M30K_LANGS, "zh") if other != lang)
    assert summary["unused"] == {"other_language_of_image": unused_other}
    assert read_manifest(out / "val")["image_size"] == [12, 18]  # 24x16 scaled to shorter side 12

    # train-parallel: the Multi30K train images with all four languages, tied by group
    par = samples_by_image(out / "train-parallel")
    assert sorted(par) == [f"{i}_a1b2c3" for i in SPLITS["train"]]
    assert all(sorted(m["lang"] for m in metas) == sorted(M30K_LANGS) for metas in par.values())

    # --strict turns skips into a failure; an existing dataset is not replaced silently
    assert cli(argv) == 2 and "--overwrite" in capsys.readouterr().err
    assert cli(argv + ["--overwrite", "--strict"]) == 1


def test_the_last_lines_say_what_was_skipped_why_and_where_and_every_manifest_records_it(tmp_path, capsys):
    """A conversion that skipped bad input exits 0 (``--strict`` is the failing mode): the file:line issues were
    printed to stderr before the summary, and scrolled away with a large source, while the summary at the end gave
    bare kind names and counts, and a split's manifest.json said nothing of what was lost. Now the summary names
    each kind's meaning and first file:line, the last line gives the total and the exit status, and every split's
    manifest records the counts."""
    w = flickr8k_world(tmp_path)
    out = tmp_path / "out"
    argv = ["flickr8k", "--images", w["images"], "--flickr8k", f"{w['cn']}:zh", "--assign-languages",
            "--workers", "1", "--out", out, "--no-progress"]
    assert cli(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    line = w["bad_lines"]["missing_image"]
    assert (f"  missing_image                1  image named by a caption not found in the image folders; first at "
            f"{w['cn']}:{line}") in printed
    assert any(row.startswith("  unreadable_image             2  image file unreadable") and
               row.endswith(f"(1 issue(s)); first at {w['truncated']}") for row in printed)
    assert printed[-1].startswith("note: 7 caption record(s) skipped as bad input (6 issue(s)")
    assert printed[-1].endswith("the exit status is 0 (--strict makes it 1)")
    written = [split for split in ("train", "val", "test") if (out / split).is_dir()]
    assert written, "no split folder written: the manifests' counts would go unchecked"
    for split in written:
        counts = read_manifest(out / split)["conversion"]
        assert counts["skipped"] == 7 and counts["skipped_by_kind"]["unreadable_image"] == 2
        assert counts["caption_records"] == counts["written"] + counts["skipped"] + counts["unused"]
    assert cli(argv + ["--overwrite", "--strict"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("--strict: 7 caption record(s) skipped as bad input") and err[-1].endswith("exit status 1")


def test_the_summary_names_every_caption_source_with_each_caption_files_sha256(tmp_path):
    """summary.json listed the split options but not the sources read (--captions FILE, --flickr8k FILE:LANG,
    --multi30k DIR and its tasks): a dataset could not be traced to its inputs, nor told from one converted from an
    edited caption file. The sources are listed as given, with the sha256 of each caption file."""
    import hashlib

    w = flickr8k_world(tmp_path)
    out = tmp_path / "out"
    assert cli(["flickr8k", "--images", w["images"], "--multi30k", w["m30k"], "--multi30k-tasks", "1,2",
                "--flickr8k", f"{w['cn']}:zh", "--captions", w["tsv"], "--all-to", "test", "--workers", "1",
                "--out", out, "--no-progress"]) == 0
    options = json.loads((out / "summary.json").read_text(encoding="utf-8"))["options"]
    assert options["multi30k"] == [str(w["m30k"])] and options["multi30k_tasks"] == [1, 2]
    assert options["flickr8k"] == [f"{w['cn']}:zh"] and options["captions"] == [str(w["tsv"])]
    assert options["caption_sha256"] == {str(f): hashlib.sha256(Path(f).read_bytes()).hexdigest()
                                         for f in (w["cn"], w["tsv"])}


def test_multi30k_task2_independent_captions_and_fractions(tmp_path):
    w = flickr8k_world(tmp_path)
    out = tmp_path / "out"
    argv = ["multi30k", "--images", w["images"], "--multi30k", w["m30k"], "--multi30k-tasks", "1,2",
            "--languages", "en,de", "--assign-languages", "--test-fraction", "0.3", "--val-fraction", "0.2",
            "--workers", "1", "--out", out, "--no-progress"]
    assert cli(argv) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # 7 Multi30K images; 0.3 * 7 -> 2 test images, 0.2 * 7 -> 1 val image
    assert summary["images"] == {"test": 2, "val": 1, "train": 4}
    for metas in samples_by_image(out / "test").values():
        # per language: the task 1 caption and the two independent task 2 captions, task 1 first
        for lang in ("en", "de"):
            caps = [m["caption"] for m in metas if m["lang"] == lang]
            assert len(caps) == 3 and "parallel" in caps[0] and all("independent" in c for c in caps[1:])
    assert summary["unused"]["language_not_requested"] == 7 * 2 - 1  # fr, cs lines (no val.cs)


def test_multi30k_caption_file_missing_a_middle_line_is_refused(tmp_path, capsys):
    """A line missing in the middle would shift every later caption onto the next image: the file is refused."""
    names = [f"{pid}.jpg" for pid in (101, 102, 103)]
    m30k = tmp_path / "multi30k"
    write_lines(m30k / "task1" / "image_splits" / "train.txt", names)
    for pid in (101, 102, 103):
        make_jpeg(tmp_path / "images" / f"{pid}_a1b2c3.jpg", color=(pid, 0, 0))
    write_lines(m30k / "task1" / "raw" / "train.en.gz", ["en 101", "en 102", "en 103"], gz=True)
    de = write_lines(m30k / "task1" / "raw" / "train.de.gz", ["de 101", "de 103"], gz=True)  # line 2 missing
    out = tmp_path / "out"
    assert cli(["multi30k", "--images", tmp_path / "images", "--multi30k", m30k, "--assign-languages",
                "--workers", "1", "--no-progress", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {de}: has 2 line(s) but ") and "lists 3 image(s)" in err
    assert not out.exists()


def test_a_caption_repeated_by_an_overlapping_source_is_kept_once(tmp_path):
    """Multi30K task 1's en caption is also among task 2's (up to case and punctuation): written once, counted."""
    m30k = tmp_path / "multi30k"
    write_lines(m30k / "task1" / "image_splits" / "train.txt", ["101.jpg", "102.jpg"])
    write_lines(m30k / "task2" / "image_splits" / "train_images.txt", ["101.jpg", "102.jpg"])
    for pid in (101, 102):
        make_jpeg(tmp_path / "images" / f"{pid}_a1b2c3.jpg", color=(pid, 0, 0))
    write_lines(m30k / "task1" / "raw" / "train.en.gz", ["A dog runs.", "A cat sits."], gz=True)
    write_lines(m30k / "task2" / "raw" / "train.1.en.gz", ["a dog runs .", "A cat sits."], gz=True)
    write_lines(m30k / "task2" / "raw" / "train.2.en.gz", ["A brown dog", "a cat sits"], gz=True)
    out = tmp_path / "out"
    assert cli(["multi30k", "--images", tmp_path / "images", "--multi30k", m30k, "--multi30k-tasks", "1,2",
                "--all-to", "train", "--workers", "1", "--no-progress", "--out", out]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["unused"] == {"caption_already_present": 3}
    assert summary["written"] == {"train": {"en": 3}} and summary["balanced"]
    t2 = m30k / "task2" / "raw"
    assert summary["notes"] == [f"3 caption(s) repeat a text their image already has in that language from "
                                f"another source file (case, punctuation and spacing ignored: overlapping sources) "
                                f"and were kept once (unused: caption_already_present); first: "
                                f"{t2 / 'train.1.en.gz'}:1 repeats "
                                f"{m30k / 'task1' / 'raw' / 'train.en.gz'}:1"]
    assert sorted((m["image_id"], m["caption"]) for m in read_captions(out / "train")) == [
        ("101_a1b2c3", "A brown dog"), ("101_a1b2c3", "A dog runs."), ("102_a1b2c3", "A cat sits.")]


def test_one_source_files_own_repeats_are_kept(tmp_path):
    """Flickr8k-CN holds an image's caption twice in places (two annotators, one sentence): the source's own repeats
    stay (the documented conversions keep their data); only a text another source file repeats is kept once."""
    make_jpeg(tmp_path / "images" / "101_a1b2c3.jpg")
    cn = write_lines(tmp_path / "zh.txt", ["101_a1b2c3.jpg#zhc#0 一只狗在跑。", "101_a1b2c3.jpg#zhc#1 一只狗在跑。",
                                           "101_a1b2c3.jpg#zhc#2 一只猫。"])
    token = write_lines(tmp_path / "Flickr8k.token.txt", ["101_a1b2c3.jpg#0\tA dog runs .",
                                                          "101_a1b2c3.jpg#1\tA dog runs ."])
    more = write_lines(tmp_path / "more.token.txt", ["101_a1b2c3.jpg#5\ta dog runs"])
    out = tmp_path / "out"
    assert cli(["flickr8k", "--images", tmp_path / "images", "--flickr8k", f"{cn}:zh", "--flickr8k", f"{token}:en",
                "--flickr8k", f"{more}:en", "--all-to", "train", "--workers", "1", "--no-progress", "--out", out]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["written"] == {"train": {"zh": 3, "en": 2}} and summary["unused"] == {"caption_already_present": 1}


def test_xtd10_layout_maps_jp_to_ja_and_reports_short_files(tmp_path, capsys):
    root = tmp_path / "xtd"
    names = ["COCO_train2014_000000061844.jpg", "COCO_train2014_000000061849.jpg", "COCO_train2014_000000061850.jpg"]
    write_lines(root / "XTD10" / "test_image_names.txt", names)
    for i, name in enumerate(names):
        make_jpeg(tmp_path / "coco" / "train2014" / name, color=(i * 50, 0, 0))
    write_lines(root / "MIC" / "test_1kcaptions_en.txt", ["a man", "a cat", "a bus"])
    write_lines(root / "MIC" / "test_1kcaptions_de.txt", ["ein Mann", "eine Katze", "ein Bus"])
    write_lines(root / "STAIR" / "test_1kcaptions_jp.txt", ["男性", "猫", "バス"])
    zh = write_lines(root / "XTD10" / "test_1kcaptions_zh.txt", ["一个男人", "一只猫"])  # one line short
    write_lines(root / "XTD10" / "test_1kcaptions_xx.txt", ["?", "?", "?"])  # not a language
    out = tmp_path / "out"
    argv = ["xtd10", "--xtd10", root, "--images", tmp_path / "coco", "--workers", "1", "--out", out, "--no-progress"]
    # a short file cannot be aligned: refused in one line, nothing written
    assert cli(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {zh}: has 2 line(s) but {root / 'XTD10' / 'test_image_names.txt'} lists 3 image(s); line i captions "
        f"image i only when the counts agree (a line missing or added anywhere shifts every later caption onto "
        f"another image): fix the file, or move it out of the folder; nothing written")
    assert not out.exists()
    write_lines(zh, ["一个男人", "一只猫", " "])  # the third image's zh caption is empty
    assert cli(argv + ["--strict"]) == 1
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"empty_caption": 1, "unknown_language": 3}
    # the third image has no zh caption: a source test image lacking a language is left out, and zh is named
    assert summary["unused"] == {"test_image_missing_language": 3}
    assert summary["notes"] == ["1 source test image(s) left out in every language, as they lack a caption in zh 1 "
                                "(images per language): --languages de,en,ja keeps them (or complete those languages' "
                                "captions)"]
    assert "warning: 1 source test image(s) left out in every language" in capsys.readouterr().out
    assert read_manifest(out / "test")["languages"] == {"de": 2, "en": 2, "ja": 2, "zh": 2}
    check_split_rule(out / "test", "test")
    assert not (out / "train").exists()
    test = samples_by_image(out / "test")
    assert sorted(test) == ["COCO_train2014_000000061844", "COCO_train2014_000000061849"]
    assert sorted(m["caption"] for m in test["COCO_train2014_000000061849"]) == sorted(
        ["a cat", "eine Katze", "猫", "一只猫"])


def test_globetrotter_layout(tmp_path):
    root = tmp_path / "gt"
    coco = root / "COCO" / "annotations"
    files = {  # (variant, lang, name) -> captions
        ("translated_independent", "de", "COCO_train2014_000000000001.txt"): ["ein Hund", "ein Hund rennt"],
        ("translated_independent", "fa-AF", "COCO_train2014_000000000002.txt"): ["سگ"],
        ("translated_independent", "ja", "COCO_val2014_000000000003.txt"): ["犬"],
    }
    for lang in ("en", "de", "fa-AF", "ja"):
        files[("translated_alllangs", lang, "COCO_val2014_000000000004.txt")] = [f"{lang} cat", f"{lang} cat 2"]
    for (variant, lang, name), caps in files.items():
        write_lines(coco / variant / lang / name, caps)
    write_lines(coco / "translated_independent" / "listing_train.txt",
                ["./de/COCO_train2014_000000000001.txt", "./fa-AF/COCO_train2014_000000000002.txt",
                 "./de/COCO_train2014_000000000009.txt"])  # the last caption file does not exist
    write_lines(coco / "translated_independent" / "listing_val.txt", ["./ja/COCO_val2014_000000000003.txt"])
    write_lines(coco / "translated_alllangs" / "listing_test.txt",
                [f"./{lang}/COCO_val2014_000000000004.txt" for lang in ("en", "de", "fa-AF", "ja")])
    for part, n in (("train", 1), ("train", 2), ("val", 3), ("val", 4)):
        make_jpeg(root / "COCO" / f"{part}2014" / f"COCO_{part}2014_{n:012d}.jpg")
    # Flickr30k and Conceptual Captions (a 9-digit number loses its first digit; a .png image)
    write_lines(root / "flickr30k" / "entities" / "translated_independent" / "de" / "36979.txt", ["zwei Hunde"])
    write_lines(root / "flickr30k" / "entities" / "translated_independent" / "listing_train.txt", ["./de/36979.txt"])
    make_jpeg(root / "flickr30k" / "images" / "36979.jpg")
    cc = root / "ConceptualCaptions" / "translated_independent"
    write_lines(cc / "ja" / "123456789.txt", ["写真"])
    write_lines(cc / "listing_train.txt", ["./ja/123456789.txt"])
    (root / "ConceptualCaptions" / "train").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "ConceptualCaptions" / "train" / "23456789.png")

    out = tmp_path / "out"
    assert cli(["globetrotter", "--globetrotter", root, "--assign-languages", "--workers", "1", "--out", out,
                "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {}
    assert summary["issues"]["missing_caption_file"]["count"] == 1
    train = {i: sorted((m["lang"], m["caption"]) for m in ms) for i, ms in samples_by_image(out / "train").items()}
    assert train == {"COCO_train2014_000000000001": [("de", "ein Hund"), ("de", "ein Hund rennt")],
                     "COCO_train2014_000000000002": [("fa-AF", "سگ")], "36979": [("de", "zwei Hunde")],
                     "23456789": [("ja", "写真")]}
    assert list(samples_by_image(out / "val")) == ["COCO_val2014_000000000003"]
    test = read_manifest(out / "test")
    assert test["languages"] == {"de": 2, "en": 2, "fa-AF": 2, "ja": 2}
    check_split_rule(out / "test", "test")


def test_folder_tsv_and_jsonl(tmp_path):
    photos = tmp_path / "photos"
    for name in ("a.jpg", "b.jpg", "c.jpg", "sub/d.jpg"):
        make_jpeg(photos / name)
    tsv = write_lines(tmp_path / "caps.tsv", [
        "image\tlang\tcaption\tsplit", "a.jpg\ten\ta red square\ttest", "a.jpg\tde\tein rotes Quadrat\ttest",
        "b.jpg\ten\tanother\ttrain", "b.jpg\ten\tanother\ttrain",  # duplicate row
        "c.jpg\ten\ttoo\tfew\tcolumns\textra", "c.jpg\tfr\tun carré\tholdout"])  # malformed, bad split
    jsonl = write_lines(tmp_path / "caps.jsonl", [
        json.dumps({"image": "sub/d.jpg", "lang": "de", "caption": "ein Bild"}),
        json.dumps({"image": "c.jpg", "lang": "DE", "caption": "noch ein Bild"}),
        "{not json", json.dumps({"image": "c.jpg", "caption": "no language"})])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--captions", jsonl, "--assign-languages",
                "--workers", "2", "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["records"] == 6 + 4
    assert summary["skipped"] == {"duplicate_key": 1, "malformed_line": 4}
    assert summary["written"] == {"test": {"de": 1, "en": 1}, "train": {"de": 2, "en": 1}}
    assert read_manifest(out / "train")["languages"] == {"de": 2, "en": 1}


def test_folder_images_with_long_file_names_are_converted(tmp_path):
    """Image ids are file stems: a stem of 88+ characters made keys too long for a tar name, and each caption was
    skipped as a "duplicate_key" (exit 0); ids now keep their start and end in a hash of the whole stem."""
    photos = tmp_path / "photos"
    names = [f"{'a very long photo name ' * 5}{i}.jpg" for i in range(2)]  # 116 characters, alike but for the end
    for name in names:
        make_jpeg(photos / name)
    tsv = write_lines(tmp_path / "caps.tsv", [f"{name}\t{lang}\tcaption {i}" for i, name in enumerate(names)
                                              for lang in ("en", "de")])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--all-to", "train", "--workers", "1", "--out", out,
                "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["written_total"] == 4 and summary["skipped_total"] == 0
    ids = {s.image_id for s in iter_samples(out / "train")}
    assert len(ids) == 2 and all(len(i) == 64 for i in ids)


def test_folder_layout_matches_by_path_or_file_name_only(tmp_path, capsys):
    """A caption naming a missing file is a missing image, never another file of the same stem or photo id."""
    photos = tmp_path / "photos"
    for name in ("100_1.jpg", "dog.png", "cat.jpg", "sub/bird.jpg"):
        make_jpeg(photos / name)
    tsv = write_lines(tmp_path / "caps.tsv", ["100.jpg\ten\tphoto 100 (missing)", "dog.jpg\ten\ta dog (missing)",
                                              "cat\ten\ta cat, no extension (missing)", "cat.jpg\ten\ta cat",
                                              "sub/bird.jpg\ten\ta bird", "bird.jpg\ten\tthe bird by file name"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--workers", "1", "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"missing_image": 3} and summary["written"] == {"train": {"en": 3}}
    missing = [(i["line"], i["message"]) for i in summary["issues"]["missing_image"]["examples"]]
    assert [line for line, _ in missing] == [1, 2, 3] and "'dog.jpg'" in missing[1][1]
    assert sorted(samples_by_image(out / "train")) == ["bird", "cat"]
    # the loose rules stay for the datasets whose names need them (Flickr8k-CN: a name without .jpg)
    cn = write_lines(tmp_path / "cn.txt", ["100_1#zhc#0 一张照片", "dog#zhc#0 一只狗"])
    report = convert([read_flickr8k(cn, "zh")], ConvertOptions(out_dir=tmp_path / "cn", image_roots=[photos],
                                                                 progress=False))
    assert report.total_written == 2 and not report.issues


def test_folder_finds_jfif_and_heic_photos_by_file_name(tmp_path):
    """A browser's .jfif JPEG and a phone's .heic under --images, named by file name, were "not found in the image
    folders" (the folders were searched for a shorter list of suffixes): the JPEG is now read, the HEIC (which Pillow
    cannot decode here) an unreadable image."""
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(photos / "dog.jfif", format="JPEG")
    (photos / "cat.heic").write_bytes(b"\x00\x00\x00\x18ftypheic" + bytes(16))
    tsv = write_lines(tmp_path / "caps.tsv", ["dog.jfif\ten\ta dog", "cat.heic\ten\ta cat"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--workers", "1", "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"unreadable_image": 1} and summary["written"] == {"train": {"en": 1}}, summary
    assert sorted(samples_by_image(out / "train")) == ["dog"]


def test_files_given_ids_ending_2_are_named_with_their_ids(tmp_path, capsys):
    """Two phone folders' IMG_0001.JPG became ids IMG_0001 and IMG_0001-2 in table order, and nothing said which file
    got which: a user keying imported embeddings by these ids could swap them. One warning and the summary say it."""
    photos = tmp_path / "photos"
    make_jpeg(photos / "100APPLE" / "IMG_0001.JPG", color=(200, 0, 0))
    make_jpeg(photos / "101APPLE" / "IMG_0001.JPG", color=(0, 0, 200))
    tsv = write_lines(tmp_path / "caps.tsv", ["101APPLE/IMG_0001.JPG\ten\ta blue one",
                                              "100APPLE/IMG_0001.JPG\ten\ta red one"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--workers", "1", "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["renamed_ids"] == {str(photos / "100APPLE" / "IMG_0001.JPG"): "IMG_0001-2"}, summary
    assert {s.image_id: s.caption for s in iter_samples(out / "train")} == {"IMG_0001": "a blue one",
                                                                           "IMG_0001-2": "a red one"}
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if "IMG_0001-2" in ln]
    assert len(warnings) == 1 and warnings[0].startswith("warning: 1 image file(s) share their id") and \
        f"{photos / '100APPLE' / 'IMG_0001.JPG'} is IMG_0001-2" in warnings[0], warnings


def test_folder_file_name_of_several_files_is_an_ambiguous_image(tmp_path):
    """same.jpg, with x/same.jpg and y/same.jpg under the folder, went to the first file, silently: now each such row
    is an ambiguous_image issue (skipped, counted); a path picks its file."""
    photos = tmp_path / "photos"
    for name, colour in (("x/same.jpg", (200, 0, 0)), ("y/same.jpg", (0, 200, 0)), ("z/other.jpg", (0, 0, 200))):
        make_jpeg(photos / name, color=colour)
    tsv = write_lines(tmp_path / "caps.tsv", ["same.jpg\ten\twhich one?", "other.jpg\ten\tthe blue one",
                                              "y/same.jpg\ten\tthe green one", "same.jpg\tde\twelches?"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", tsv, "--workers", "1", "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"ambiguous_image": 2} and summary["written"] == {"train": {"en": 2}}
    issues = summary["issues"]["ambiguous_image"]["examples"]
    assert [i["line"] for i in issues] == [1, 4]
    assert issues[0]["message"] == (f"image name 'same.jpg' fits several files under the image folders "
                                    f"({photos / 'x' / 'same.jpg'}, {photos / 'y' / 'same.jpg'}): give the path of "
                                    f"one, relative to its image folder")
    assert {image: [m["caption"] for m in metas] for image, metas in samples_by_image(out / "train").items()} == \
        {"other": ["the blue one"], "same": ["the green one"]}


def test_folder_duplicates_compare_normalised_path_language_and_caption(tmp_path):
    make_jpeg(tmp_path / "photos" / "my cat.jpg")
    tsv = write_lines(tmp_path / "caps.tsv", ["my cat.jpg\ten\ta  red cat", "./my cat.jpg\ten\ta red cat",
                                              "my cat.jpg\tEN\ta red cat ", "my cat.jpg\ten\ta red cat, again"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", tmp_path / "photos", "--captions", tsv, "--workers", "1", "--out", out,
                "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"duplicate_key": 2} and summary["written"] == {"train": {"en": 2}}
    assert [i["line"] for i in summary["issues"]["duplicate_key"]["examples"]] == [2, 3]


def test_folder_paths_are_normalised_before_files_are_matched(tmp_path):
    """'sub a/../sub a/pic 1.jpg' was a second image of the same file, so one picture trained in two languages."""
    make_jpeg(tmp_path / "photos" / "sub a" / "pic 1.jpg")
    absolute = tmp_path / "photos" / "sub a" / "pic 1.jpg"  # and by its absolute path: one file, one image too
    tsv = write_lines(tmp_path / "caps.tsv", ["sub a/pic 1.jpg\ten\ta picture", "sub a/../sub a/pic 1.jpg\tde\tein Bild",
                                              "./sub a/pic 1.jpg\tfr\tune image", f"{absolute}\tes\tuna imagen"])
    out = tmp_path / "out"
    assert cli(["folder", "--images", tmp_path / "photos", "--captions", tsv, "--assign-languages", "--workers", "1",
                "--out", out, "--no-progress"]) == 0
    train = samples_by_image(out / "train")
    assert list(train) == ["pic_1"] and len(train["pic_1"]) == 1
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["unused"] == {"other_language_of_image": 3} and summary["balanced"]


def test_folder_reads_gzipped_tables_and_split_values_in_any_case(tmp_path):
    make_jpeg(tmp_path / "photos" / "a.jpg")
    make_jpeg(tmp_path / "photos" / "b.jpg")
    jsonl = write_lines(tmp_path / "caps.jsonl.gz", [json.dumps({"image": "a.jpg", "lang": "en", "caption": "an a"}),
                                                     json.dumps({"image": "a.jpg", "lang": "de", "caption": "ein a",
                                                                 "split": "Test"})], gz=True)
    tsv = write_lines(tmp_path / "caps.tsv.gz", ["Image\tLang\tCaption\tSplit", "b.jpg\ten\ta b\tTRAIN",
                                                 "b.jpg\tde\tein b\ttrain ", "b.jpg\tfr\tun b\tholdout"], gz=True)
    out = tmp_path / "out"
    assert cli(["folder", "--images", tmp_path / "photos", "--captions", jsonl, "--captions", tsv, "--workers", "1",
                "--out", out, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"] == {"malformed_line": 1}  # 'holdout' only
    assert "'holdout'" in summary["issues"]["malformed_line"]["examples"][0]["message"]
    assert summary["written"] == {"test": {"de": 1, "en": 1}, "train": {"de": 1, "en": 1}}


def folder_world(tmp_path: Path, n: int = 10, langs=("en", "de", "fr")) -> tuple[Path, list[str]]:
    """``n`` photos and a caption table's rows, one caption per photo and language."""
    photos = tmp_path / "photos"
    for i in range(n):
        make_jpeg(photos / f"p{i}.jpg", color=(i * 20, 10, 10))
    return photos, [f"p{i}.jpg\t{lang}\tphoto {i} in {lang}" for i in range(n) for lang in langs]


def one_error_line(capsys) -> str:
    """The single ``error:`` line a command printed to stderr (asserting there is only that one)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_unreadable_images_that_unbalance_assigned_languages_are_named_with_the_counts_left(tmp_path, capsys):
    """--assign-languages balances before the images are decoded: two unreadable en-only images took en's slots and
    train came out de 4, en 2, fr 4 without a word. The summary now says so, with the images per language left."""
    photos, rows = folder_world(tmp_path)  # 10 images captioned in en, de and fr
    for name in ("bad0.jpg", "bad1.jpg"):
        (photos / name).write_bytes(b"not an image")
        rows.append(f"{name}\ten\ta broken photo {name}")
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", write_lines(tmp_path / "caps.tsv", rows),
                "--assign-languages", "--all-to", "train", "--workers", "1", "--no-progress", "--out", out]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["written"]["train"] == {"de": 4, "en": 2, "fr": 4} and summary["skipped"]["unreadable_image"] == 2
    note = [n for n in summary["notes"] if n.startswith("--assign-languages balanced")]
    assert note and "2 of them could not be read" in note[0] and "train de 4, en 2, fr 4;" in note[0], summary["notes"]
    assert "warning: --assign-languages balanced" in capsys.readouterr().out

def test_a_test_fraction_with_no_complete_image_is_a_one_line_error_naming_the_languages(tmp_path, capsys):
    """One fr-FR row among fr rows left no image captioned in all of de,en,fr,fr-FR: the test split the user asked
    for came out empty with exit 0 (even with --strict). Now exit 2, naming the languages some images lack."""
    photos, rows = folder_world(tmp_path)
    rows[2] = rows[2].replace("\tfr\t", "\tfr-FR\t")
    table = write_lines(tmp_path / "caps.tsv", rows)
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", table, "--assign-languages", "--test-fraction", "0.2",
                "--strict", "--workers", "1", "--no-progress", "--out", out]) == 2
    err = one_error_line(capsys)
    assert "asks for 2 test image(s), but none of the 10 image(s) has a caption in every language of de,en,fr,fr-FR" \
        in err and "images per language: fr-FR 1, fr 9 (of 10)" in err and "(--languages de,en)" in err, err
    assert not out.exists()
    with pytest.raises(UserError, match="rounds to 0 test images"):  # the other way a requested test split is empty
        plan_splits({f"c{i}": ImageInfo(frozenset({"en"})) for i in range(10)}, ["en"], test_fraction=0.01)


def test_a_requested_language_without_captions_is_a_one_line_error(tmp_path, capsys):
    photos, rows = folder_world(tmp_path)
    table = write_lines(tmp_path / "caps.tsv", rows)
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", table, "--languages", "en,de,it", "--assign-languages",
                "--workers", "1", "--no-progress", "--out", out]) == 2
    assert "--languages en,de,it: no usable caption in it (the usable captions are in de,en)" in one_error_line(capsys)
    assert not out.exists()


def test_a_region_subtag_beside_its_base_language_is_one_warning(tmp_path, capsys):
    """fr-FR stays a language of its own (languages.py), but one warning line names it beside fr, with counts."""
    photos, rows = folder_world(tmp_path)
    rows[2] = rows[2].replace("\tfr\t", "\tfr-FR\t")
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", write_lines(tmp_path / "caps.tsv", rows),
                "--assign-languages", "--workers", "1", "--no-progress", "--out", out]) == 0
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if "fr-FR" in ln and ln.startswith("warning:")]
    assert len(warnings) == 1 and "fr-FR (1 image(s)) beside fr (9 image(s))" in warnings[0], warnings
    assert "fr-FR" in json.loads((out / "summary.json").read_text(encoding="utf-8"))["options"]["languages_used"]


def test_a_split_column_with_a_split_option_is_a_one_line_error(tmp_path, capsys):
    """--test-fraction re-split a table whose split column already split it: images the user labelled test went to
    train, silently. Any split option beside a table's split labels is refused; without one the labels hold."""
    photos, rows = folder_world(tmp_path)
    split = {0: "test", 1: "test", 2: "val"}
    table = write_lines(tmp_path / "caps.tsv", [f"{row}\t{split.get(int(row[1]), 'train')}" for row in rows])
    out = tmp_path / "out"
    for option in (["--test-fraction", "0.2"], ["--val-fraction", "0.1"], ["--all-to", "train"]):
        assert cli(["folder", "--images", photos, "--captions", table, "--assign-languages", *option, "--workers",
                    "1", "--no-progress", "--out", out]) == 2, option
        err = one_error_line(capsys)
        assert f"{table}:1: the caption table's split column already splits the images (this row: test), and " \
               f"{option[0]} would re-split them" in err, err
        assert not out.exists()
    assert cli(["folder", "--images", photos, "--captions", table, "--assign-languages", "--workers", "1", "--no-progress",
                "--out", out]) == 0
    assert sorted(samples_by_image(out / "test")) == ["p0", "p1"] and sorted(samples_by_image(out / "val")) == ["p2"]


def test_an_image_labelled_with_two_splits_is_a_one_line_error(tmp_path, capsys):
    """A table labelling one image's rows train and test (splits drawn per row, not per image) put the image in test
    in silence, the most held-out label winning. Now exit 2 naming both rows; unlabelled rows beside a label stay."""
    photos, rows = folder_world(tmp_path)
    labelled = [f"{row}\t{'test' if row.startswith('p0.') else 'train'}" for row in rows]
    labelled[2] = labelled[2][:-len("test")] + "train"  # p0.jpg fr: line 3
    table = write_lines(tmp_path / "caps.tsv", labelled)
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--no-progress", "--out", out]) == 2
    err = one_error_line(capsys)
    assert f"{table}:3: image 'p0.jpg' is labelled train here but test at {table}:1: an image belongs to one " \
           f"split" in err, err
    assert not out.exists()
    jsonl = write_lines(tmp_path / "caps.jsonl", [json.dumps({"image": "p0.jpg", "lang": "en", "caption": "a"}),
                                                  json.dumps({"image": "p0.jpg", "lang": "de", "caption": "b",
                                                              "split": "test"})])
    assert cli(["folder", "--images", photos, "--captions", jsonl, "--workers", "1", "--no-progress", "--out", out]) == 0
    assert sorted(samples_by_image(out / "test")) == ["p0"]


def test_a_table_where_only_some_rows_carry_a_split_is_a_one_line_error(tmp_path, capsys):
    """A tab inside a caption of a 3-column table made a 4th field read as the split ('...<TAB>Test': image in test,
    caption cut), silently; a row missing its split field in a 4-column table was accepted too."""
    photos, rows = folder_world(tmp_path)
    tab = list(rows)
    tab[4] = tab[4] + "\tTest"  # line 5: a caption 'photo 1 in de<TAB>Test'
    missing = [f"{row}\ttrain" for row in rows]
    missing[6] = rows[6]  # line 7 lacks its split
    for lines, line, odd, usual in ((tab, 5, 4, 3), (["image\tlang\tcaption\tsplit", *missing], 8, 3, 4)):
        table = write_lines(tmp_path / "caps.tsv", lines)
        out = tmp_path / "out"
        assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--no-progress", "--out", out]) == 2
        err = one_error_line(capsys)
        assert f"caps.tsv:{line}: {odd} tab-separated columns, but {table}:1 has {usual}: only some rows carry " \
               f"a split column" in err and "a tab inside a caption or a missing split field" in err, err
        assert not out.exists()


def test_xtd10_skips_a_stray_caption_file_with_a_warning(tmp_path, capsys):
    root = tmp_path / "xtd"
    write_lines(root / "XTD10" / "test_image_names.txt", ["a.jpg"])
    make_jpeg(tmp_path / "coco" / "a.jpg")
    write_lines(root / "MIC" / "test_1kcaptions_en.txt", ["a red square"])
    write_lines(root / "MIC" / "test_1kcaptions_de.txt", ["ein rotes Quadrat"])
    write_lines(root / "MIC" / "test_1kcaptions_de.orig.txt", ["ein rotes Viereck"])  # an editor's backup
    out = tmp_path / "out"
    assert cli(["xtd10", "--xtd10", root, "--images", tmp_path / "coco", "--workers", "1", "--out", out,
                "--no-progress"]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "test_1kcaptions_de.orig.txt" in warnings[0] and "skipped" in warnings[0]
    assert read_manifest(out / "test")["languages"] == {"de": 1, "en": 1}


def test_out_that_is_a_file_is_a_one_line_error_before_anything_is_read(tmp_path, capsys, monkeypatch):
    make_jpeg(tmp_path / "photos" / "a.jpg")
    tsv = write_lines(tmp_path / "caps.tsv", ["a.jpg\ten\tan a"])
    (tmp_path / "file").write_text("mine")
    monkeypatch.setattr("data_prep.converters.pipeline.gather_images", lambda *a: pytest.fail("read before the check"))
    for out, message in ((tmp_path / "file", "exists and is not a folder"),
                         (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is a file, not a folder")):
        assert cli(["folder", "--images", tmp_path / "photos", "--captions", tsv, "--out", out, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --out {out}: ") and message in err[0], err
    assert (tmp_path / "file").read_text() == "mine"


def test_worker_pool_writes_the_same_shards_as_one_process(tmp_path):
    w = flickr8k_world(tmp_path)
    checksums = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        opts = ConvertOptions(out_dir=out, image_roots=[w["images"]], assign_languages=True, test_fraction=0.2,
                              seed=5, image=ImageSpec(resize=10), workers=workers, progress=False)
        report = convert([read_flickr8k(w["cn"], "zh")], opts)
        assert report.balance() == 0 and report.total_written > 0
        checksums.append({s: read_manifest(out / s)["checksum"] for s in ("train", "test")})
    assert checksums[0] == checksums[1]


def test_command_line_errors_are_one_line(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    cases = [
        (["flickr8k", "--flickr8k", f"{tmp_path}/none.txt:en", "--images", images, "--out", tmp_path / "o"], "not found"),
        (["flickr8k", "--flickr8k", f"{write_lines(tmp_path / 't.txt', ['x'])}:jp", "--images", images,
          "--out", tmp_path / "o"], "unknown language code 'jp'"),
        (["multi30k", "--images", images, "--out", tmp_path / "o"], "needs --multi30k"),
        # Multi30K alone given to the README's flickr8k command: the error named no command that reads it
        (["flickr8k", "--multi30k", images, "--images", images, "--out", tmp_path / "o"],
         "globetrotter-data flickr8k needs --flickr8k; for --multi30k alone run `globetrotter-data multi30k`"),
        # an empty caption file: the message named no file
        (["folder", "--images", images, "--captions", write_lines(tmp_path / "empty.jsonl", []), "--out",
          tmp_path / "o"], f"the caption sources ({tmp_path / 'empty.jsonl'}) hold no caption record"),
        # merged in silence, where every other command refuses a language given twice
        (["folder", "--images", images, "--captions", write_lines(tmp_path / "c.tsv", ["x"]), "--languages", "en,de,EN",
          "--out", tmp_path / "o"], "'EN' given twice in 'en,de,EN' (as en)"),
        (["xtd10", "--xtd10", images, "--images", images, "--out", tmp_path / "o"], "test_image_names.txt not found"),
        # a path of the wrong kind was reported as missing
        (["folder", "--images", write_lines(tmp_path / "f.txt", ["x"]), "--captions", tmp_path / "f.txt", "--out",
          tmp_path / "o"], "f.txt is a file, expected a folder"),
        (["folder", "--images", images, "--captions", images, "--out", tmp_path / "o"], "images is a folder, expected "
                                                                                      "a file"),
    ]
    for argv, message in cases:
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1]


def split_file_world(tmp_path: Path) -> dict:
    """Six Flickr8k-style images with en (token file) and zh (Flickr8k-CN) captions, and split lists."""
    images = tmp_path / "images"
    for pid in range(101, 107):
        make_jpeg(images / f"{pid}_a1b2c3.jpg", color=(pid, 10, 10))
    make_jpeg(images / "200_ffffff.jpg")  # an image file no caption names
    token = write_lines(tmp_path / "Flickr8k.token.txt",
                        [f"{pid}_a1b2c3.jpg#{k}\tan en caption of {pid}, #{k}" for pid in range(101, 107) for k in range(2)])
    cn = write_lines(tmp_path / "zh.txt", [f"{pid}_a1b2c3.jpg#zhc#0 中文描述{pid}" for pid in range(101, 107)])
    lists = {
        # Flickr8k-style names, a blank line and a comment; Multi30K-style photo id; an image id; an uncaptioned file
        "test": write_lines(tmp_path / "Flickr_8k.testImages.txt", ["101_a1b2c3.jpg", "", "# comment", "102_a1b2c3.jpg"]),
        "dev": write_lines(tmp_path / "Flickr_8k.devImages.txt", ["103.jpg", "104_a1b2c3", "200_ffffff.jpg"]),
    }
    base = ["flickr8k", "--images", images, "--flickr8k", f"{token}:en", "--flickr8k", f"{cn}:zh", "--no-progress",
            "--workers", "1"]
    return dict(images=images, lists=lists, base=base)


def test_split_files_send_named_images_to_their_split_and_the_rest_to_train(tmp_path, capsys):
    w = split_file_world(tmp_path)
    out = tmp_path / "out"
    argv = [*w["base"], "--assign-languages", "--split-file", f"test={w['lists']['test']}",
            "--split-file", f"dev={w['lists']['dev']}", "--out", out]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    split_of = {image: split for split in ("train", "val", "test") for image in samples_by_image(out / split)}
    assert split_of == {"101_a1b2c3": "test", "102_a1b2c3": "test", "103_a1b2c3": "val", "104_a1b2c3": "val",
                        "105_a1b2c3": "train", "106_a1b2c3": "train"}
    assert "2 image(s) named in no split file went to train" in printed
    assert "1 named image file(s) have no usable caption" in printed
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["balanced"] and summary["options"]["split_files"] == [f"test={w['lists']['test']}",
                                                                         f"val={w['lists']['dev']}"]
    assert any("went to train" in line for line in summary["split_sources"])
    for split in ("train", "val", "test"):
        check_split_rule(out / split, split)


def test_limit_images_says_how_many_images_each_split_file_named_it_left_out(tmp_path, capsys):
    """The split-file line counts the images a file names; --max-images dropping most of them went unsaid."""
    w = split_file_world(tmp_path)
    out = tmp_path / "out"
    assert cli([*w["base"], "--assign-languages", "--split-file", f"test={w['lists']['test']}",
                "--split-file", f"dev={w['lists']['dev']}", "--max-images", "2", "--out", out]) == 0
    printed = capsys.readouterr().out
    kept = {split: sorted(samples_by_image(out / split)) if (out / split).is_dir() else [] for split in ("val", "test")}
    lost = {"test": 2 - len(kept["test"]), "val": 2 - len(kept["val"])}  # each file names 2 captioned images
    assert sum(lost.values()) >= 2  # 2 of 6 images kept: at least 2 of the 4 named ones left out
    per_split = ", ".join(f"{s} {lost[s]} of 2" for s in ("val", "test") if lost[s])
    note = (f"--max-images 2 left out {sum(lost.values())} of the 4 image(s) the split files name ({per_split}): "
            "those splits hold fewer images than their files name")
    assert f"warning: {note}" in printed
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["balanced"] and any(n.startswith(note) for n in summary["notes"])
    # no limit, or one that drops no named image: no such warning
    assert cli([*w["base"], "--assign-languages", "--split-file", f"test={w['lists']['test']}",
                "--max-images", "6", "--out", tmp_path / "all"]) == 0
    assert "--max-images" not in capsys.readouterr().out


def test_a_split_folder_pins_another_conversion_to_the_same_images(tmp_path, capsys):
    """An English-only dataset whose val and test hold exactly the images of a first dataset's val and test."""
    w = split_file_world(tmp_path)
    first = tmp_path / "first"
    assert cli([*w["base"], "--assign-languages", "--split-file", f"test={w['lists']['test']}",
                "--split-file", f"dev={w['lists']['dev']}", "--out", first]) == 0
    second = tmp_path / "second"
    assert cli([*w["base"], "--languages", "en", "--split-file", f"test={first / 'test'}", "--split-file",
                f"val={first / 'val'}", "--out", second]) == 0
    capsys.readouterr()
    for split in ("val", "test"):
        assert sorted(samples_by_image(second / split)) == sorted(samples_by_image(first / split))
    assert sorted(samples_by_image(second / "train")) == ["105_a1b2c3", "106_a1b2c3"]
    assert cli([*w["base"], "--split-file", f"test={tmp_path}", "--out", tmp_path / "x"]) == 2
    assert "split folder with manifest.json) not found" in capsys.readouterr().err


def test_all_to_sends_the_whole_dataset_to_one_split(tmp_path, capsys):
    w = split_file_world(tmp_path)
    out = tmp_path / "out"
    assert cli([*w["base"], "--all-to", "test", "--out", out]) == 0
    assert "every image goes to test" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["test"]
    assert len(samples_by_image(out / "test")) == 6
    check_split_rule(out / "test", "test")
    # to train (a new language's folder, docs/training.md): no warning that there is no test split, as asked
    assert cli([*w["base"], "--all-to", "train", "--out", tmp_path / "train-only"]) == 0
    printed = capsys.readouterr()
    assert "every image goes to train" in printed.out and "no test split" not in printed.out + printed.err


def test_bad_split_files_are_one_line_errors_and_write_nothing(tmp_path, capsys):
    w = split_file_world(tmp_path)
    unknown = write_lines(tmp_path / "unknown.txt", ["101_a1b2c3.jpg", "999.jpg", "no_such_image.jpg"])
    test, dev = w["lists"]["test"], w["lists"]["dev"]
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(b"".join(b"%d.jpg\n" % i for i in range(5000)))[:500])
    latin1 = write_lines(tmp_path / "latin1.txt", ["101_a1b2c3.jpg", b"caf\xe9.jpg"])
    cases = [
        (["--split-file", f"test={unknown}"], ["2 name(s) match no image", f"test={unknown}: 2 of 3 line(s)",
                                               f"{unknown}:2 '999.jpg'", f"{unknown}:3 'no_such_image.jpg'"]),
        (["--split-file", f"test={test}", "--split-file", f"val={test}"],
         ["2 image(s) are named in split files of two splits", f"101_a1b2c3 (test at {test}:1, val at {test}:1)"]),
        (["--all-to", "test", "--test-fraction", "0.1"], ["--all-to and --test-fraction are exclusive"]),
        (["--split-file", f"test={test}", "--val-fraction", "0.1"], ["--split-file and --val-fraction are exclusive"]),
        (["--split-file", f"test={dev}", "--all-to", "val"], ["--split-file and --all-to are exclusive"]),
        (["--split-file", f"tst={test}"], ["unknown split 'tst'"]),
        (["--split-file", f"test={tmp_path / 'none.txt'}"], ["split file (or split folder with manifest.json) not found"]),
        (["--split-file", f"test={write_lines(tmp_path / 'empty.txt', ['', '# nothing'])}"], ["names no image"]),
        (["--all-to", "everything"], ["unknown split 'everything'"]),
        (["--split-file", str(test)], [f"expected SPLIT=FILE (e.g. test=Flickr_8k.testImages.txt), got '{test}'"]),
        (["--split-file", f"={test}"], ["expected SPLIT=FILE"]),
        (["--split-file", f"test={latin1}"],
         [f"{latin1}:2: split file line is not UTF-8 (invalid UTF-8 byte 0xe9 at column 4)"]),
        (["--split-file", f"test={cut}"], [f"{cut}: cannot read the split file ("]),
    ]
    for extra, messages in cases:
        out = tmp_path / "out"
        assert cli([*w["base"], *extra, "--out", out]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert all(m in err[-1] for m in messages), (extra, err[-1])
        assert not out.exists(), extra  # nothing written half-way


def test_flickr8k_help_example_is_the_documented_command():
    """`globetrotter-data flickr8k --help` shows the command of docs/data.md, option for option (one source; its
    data paths as FLICKR8K/ placeholders)."""
    from data_prep.converters.cli import _COMMANDS, FLICKR8K_5LANG_COMMAND, with_placeholders

    text = (Path(__file__).resolve().parents[1] / "docs" / "data.md").read_text(encoding="utf-8")
    joined = " ".join(text.replace("\\\n", " ").split())
    assert ".venv/bin/" + " ".join(FLICKR8K_5LANG_COMMAND.split()) in joined
    shown = _COMMANDS["flickr8k"]["example"]
    assert shown == with_placeholders(FLICKR8K_5LANG_COMMAND) and "../shared" not in shown


def test_nothing_usable_is_one_line_saying_why_and_leaves_nothing(tmp_path, capsys):
    """No usable record, every record left out, or every image unreadable: exit 2, one line naming the cause with an
    example (for images not found: a name of the table and file names the folder holds), and no --out left."""
    photos = tmp_path / "photos"
    make_jpeg(photos / "IMG_0001.jpg")
    make_jpeg(photos / "IMG_0002.jpg")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.jpg").write_bytes(b"not a jpeg at all" * 8)
    ids = write_lines(tmp_path / "ids.tsv", ["img1\ten\ta cat", "img2\ten\ta dog"])
    mixed = write_lines(tmp_path / "c.tsv", ["IMG_0001.jpg\tqq\tbad language", "b.jpg\ten\tno such image"])
    apart = write_lines(tmp_path / "apart.tsv", ["IMG_0001.jpg\ten\ta cat", "IMG_0002.jpg\tde\tein Hund"])
    bad = write_lines(tmp_path / "bad.tsv", ["a.jpg\ten\tunreadable"])
    for images, table, extra, message in (
        (photos, ids, [], f"none of the 2 caption record(s) is usable (2 missing_image); e.g. {ids}:1: missing_image: "
                          "image 'img1' not found in the image folders (by path or file name); the image folders "
                          "hold e.g. 'IMG_0001.jpg', 'IMG_0002.jpg'; nothing written"),
        (photos, mixed, [], f"(1 unknown_language, 1 missing_image); e.g. {mixed}:1: unknown_language"),
        (photos, apart, ["--all-to", "test"], "2 test_image_missing_language); a test image needs a caption in each "
                                              "of de,en; nothing written"),
        (tmp_path / "broken", bad, [], f"none of the 1 image(s) could be written (1 unreadable_image); "
                                       f"e.g. {tmp_path / 'broken' / 'a.jpg'}: unreadable_image"),
    ):
        out = tmp_path / "new" / "o"
        assert cli(["folder", "--images", images, "--captions", table, "--out", out, "--workers", "1", "--no-progress",
                    *extra]) == 2, table
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: nothing to convert: ") and message in err[0], err
        assert not (tmp_path / "new").exists(), table  # not even the folders above --out


def test_overwrite_keeps_the_old_dataset_until_the_new_one_is_complete(tmp_path, capsys, monkeypatch):
    """--overwrite replaces a dataset only once the new one is written and checked: a conversion that writes
    nothing, or one interrupted while it writes, leaves the old dataset as it was and no staging folder."""
    photos = tmp_path / "photos"
    make_jpeg(photos / "a.jpg")
    make_jpeg(photos / "b.jpg", color=(10, 200, 10))
    good = write_lines(tmp_path / "good.tsv", ["a.jpg\ten\ta red square", "b.jpg\ten\ta green square"])
    out = tmp_path / "out"
    argv = ["folder", "--images", photos, "--captions", good, "--all-to", "train", "--out", out, "--workers", "1",
            "--no-progress"]
    assert cli(argv) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "c.jpg").write_bytes(b"not a jpeg at all" * 8)
    bad = write_lines(tmp_path / "bad.tsv", ["c.jpg\ten\tunreadable"])
    assert cli(["folder", "--images", tmp_path / "broken", "--captions", bad, "--all-to", "train", "--out", out,
                "--workers", "1", "--no-progress", "--overwrite"]) == 2
    assert "none of the 1 image(s) could be written" in capsys.readouterr().err

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("data_prep.shard_writer.ShardWriter.close", interrupted)
    assert cli(argv + ["--overwrite"]) == 130  # Ctrl-C while the shards are being written
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_second_conversion_into_the_same_out_meanwhile_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """Two conversions into one --out at once shared its staging folder: one crashed with a FileNotFoundError
    traceback and the other stopped on an "unreadable shard" (or both reported success over mixed data). The second
    is now refused in one line naming --out while the first runs, and the first completes."""
    from data_prep.converters import pipeline

    photos, rows = folder_world(tmp_path, n=4)
    out = tmp_path / "out"
    argv = ["folder", "--images", photos, "--captions", write_lines(tmp_path / "caps.tsv", rows), "--assign-languages",
            "--all-to", "train", "--out", out, "--workers", "1", "--no-progress"]
    write, second = pipeline.write_shards, []

    def racing(*args, **kwargs):
        if not second:  # a second command starts while the first writes its shards
            second.append(None)
            second[:] = [cli(argv), capsys.readouterr().err]
        return write(*args, **kwargs)

    monkeypatch.setattr(pipeline, "write_shards", racing)
    assert cli(argv) == 0
    code, err = second
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: --out {out}: another command is writing there now"), err
    assert read_manifest(out / "train")["num_samples"] == 4 and check_split_rule(out / "train")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.tsv", "out", "photos"]  # no lock file left


# ------------------------------------------------------------------------------------------
# the real data


@pytest.mark.realdata
def test_real_official_split_files_work_directly(flickr8k_dir, tmp_path, capsys):
    """Flickr8k's own split list (names with their hash) and Multi30K's (Flickr photo ids) as they are shipped."""
    flickr8k_list = flickr8k_dir / "flickr8k" / "Flickr_8k.trainImages.txt"
    multi30k_list = flickr8k_dir / "multi30k" / "task1" / "image_splits" / "test_2016_flickr.txt"
    out = tmp_path / "all-test"
    argv = ["flickr8k", "--images", flickr8k_dir / "images", "--flickr8k",
            f"{flickr8k_dir / 'flickr8k' / 'Flickr8k.token.txt'}:en", "--split-file", f"test={flickr8k_list}",
            "--max-images", "20", "--resize", "32", "--workers", "1", "--out", out, "--no-progress"]
    assert cli(argv) == 0
    assert f"test={flickr8k_list}: 6000 image(s)" in capsys.readouterr().out  # every name of the list found
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["images"] == {"test": 20}
    # the Multi30K test list names images of Flickr8k's train list: each of its 173 names is found, and clashes
    argv = ["multi30k", "--images", flickr8k_dir / "images", "--multi30k", flickr8k_dir / "multi30k",
            "--split-file", f"test={multi30k_list}", "--split-file", f"val={flickr8k_list}",
            "--out", tmp_path / "clash", "--no-progress"]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "173 image(s) are named in split files of two splits" in err[-1]
    assert not (tmp_path / "clash").exists()


@pytest.mark.realdata
def test_real_flickr8k_converts_to_five_languages(flickr8k_dir, tmp_path):
    out = tmp_path / "flickr8k"
    argv = ["flickr8k", "--images", flickr8k_dir / "images", "--multi30k", flickr8k_dir / "multi30k",
            "--flickr8k", f"{flickr8k_dir / 'flickr8kcn' / 'flickr8kzhc.caption.txt'}:zh",
            "--languages", "en,de,fr,cs,zh", "--assign-languages", "--test-fraction", "0.1", "--val-fraction", "0.05",
            "--resize", "64", "--max-images", "200", "--workers", "1", "--out", out, "--no-progress"]
    assert cli(argv) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # records: every line of the Multi30K task 1 caption files plus every Flickr8k-CN line
    n_lines = sum(1 for p in (flickr8k_dir / "multi30k" / "task1" / "raw").glob("*.gz")
                  for _ in gzip.open(p, "rb"))
    n_lines += sum(1 for _ in open(flickr8k_dir / "flickr8kcn" / "flickr8kzhc.caption.txt", "rb"))
    assert summary["records"] == n_lines and summary["balanced"] and summary["skipped_total"] == 0
    assert summary["images"] == {"train": 170, "val": 10, "test": 20}
    assert set(read_manifest(out / "test")["languages"]) == {"en", "de", "fr", "cs", "zh"}
    assert set(read_manifest(out / "train")["languages"]) == {"en", "de", "fr", "cs", "zh"}
    for split in ("train", "val", "test"):
        check_split_rule(out / split, split)
    _, _, data, _ = next(iter_raw(out / "test"))
    assert min(Image.open(io.BytesIO(data)).size) == 64


def test_summary_json_names_the_installed_versions(tmp_path):
    """A conversion's summary.json said no version: which code made a split could not be told. It now holds the
    installed distribution's version (importlib.metadata: data_prep ships in it), numpy's and Python's."""
    import importlib.metadata
    import platform

    from data_prep.converters.report import ConversionReport

    ConversionReport().write_json(tmp_path / "summary.json")
    written = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert written["versions"] == {"globetrotter": importlib.metadata.version("globetrotter"),
                                   "numpy": np.__version__, "python": platform.python_version()}


def test_only_a_key_clash_is_filed_as_a_duplicate_key(tmp_path, monkeypatch):
    """The converter filed every ValueError of ShardWriter.write as a skipped `duplicate_key`; the writer also refuses
    a caption, language, image id or group that no reader would read, which is a converter's bug: it stops the run."""
    from data_prep.shard_writer import ShardWriter

    w = flickr8k_world(tmp_path)
    real = ShardWriter.write

    def refusing(self, key, image, caption, lang, image_id, group=None, extra=None):
        if lang == "de":
            raise ValueError(f"group {group!r} of key {key!r} must be a non-empty string or None")
        return real(self, key, image, caption, lang, image_id, group, extra)

    monkeypatch.setattr(ShardWriter, "write", refusing)
    with pytest.raises(ValueError, match="must be a non-empty string"):
        cli(["flickr8k", "--images", w["images"], "--multi30k", w["m30k"], "--multi30k-tasks", "1",
             "--flickr8k", f"{w['cn']}:zh", "--languages", "en,de,zh", "--resize", "12", "--workers", "1",
             "--out", tmp_path / "out", "--no-progress"])


# ------------------------------------------------------------------------------------------
# what each reader and the pipeline decide, one rule per test (small inputs written here)


def _convert_summary(tmp_path: Path, argv: list, out_name: str = "out") -> tuple[Path, dict]:
    """Run one conversion (exit 0 expected) and return its output folder and summary."""
    out = tmp_path / out_name
    assert cli([*argv, "--workers", "1", "--no-progress", "--out", out]) == 0
    return out, json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_line(tmp_path):
    from data_prep.converters.common import read_text_lines

    path = tmp_path / "bom.tsv"
    path.write_bytes("\ufeffimage\tlang\tcaption\r\na.jpg\ten\ta dog\r\n".encode("utf-8"))
    assert [line.text for line in read_text_lines(path)] == ["image\tlang\tcaption", "a.jpg\ten\ta dog"]


def test_a_gzip_cut_short_is_reported_at_the_first_line_it_could_not_read(tmp_path):
    from data_prep.converters.common import read_lines_or_issue

    path = tmp_path / "cut.en.gz"
    path.write_bytes(gzip.compress(b"".join(b"caption number %d\n" % i for i in range(2000)))[:600])
    lines, issue = read_lines_or_issue(path)
    assert issue is not None and issue.kind == "unreadable_file" and issue.records == 0
    assert 0 < len(lines) < 2000 and issue.line == len(lines) + 1  # the lines read, then where it stopped


def test_a_caption_file_longer_than_its_split_file_is_refused(tmp_path, capsys):
    """An added line shifts captions onto other images as a missing one does: refused, nothing written."""
    m30k = tmp_path / "multi30k"
    write_lines(m30k / "task1" / "image_splits" / "train.txt", ["101.jpg", "102.jpg"])
    make_jpeg(tmp_path / "images" / "101.jpg")
    make_jpeg(tmp_path / "images" / "102.jpg")
    write_lines(m30k / "task1" / "raw" / "train.en", ["en 101", "en 102"])
    de = write_lines(m30k / "task1" / "raw" / "train.de", ["de 101", "de extra", "de 102"])
    out = tmp_path / "out"
    assert cli(["multi30k", "--images", tmp_path / "images", "--multi30k", m30k, "--workers", "1", "--no-progress",
                "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {de}: has 3 line(s) but ") and "lists 2 image(s)" in err
    assert not out.exists()


def test_a_blank_split_file_line_skips_exactly_the_captions_aligned_to_it(tmp_path):
    """Lines 2 and 4 (the last) of the split file are blank: each caption file loses its caption on those lines (one
    record each, filed against the split file's line), every other line keeps its own image, and every record is
    accounted for."""
    m30k = tmp_path / "multi30k"
    split_file = write_lines(m30k / "task1" / "image_splits" / "train.txt", ["101.jpg", "  ", "103.jpg", ""])
    for pid in (101, 103):
        make_jpeg(tmp_path / "images" / f"{pid}.jpg", color=(pid, 0, 0))
    for lang in ("en", "de"):
        write_lines(m30k / "task1" / "raw" / f"train.{lang}", [f"{lang} 101", f"{lang} blank", f"{lang} 103", "x"])
    out, summary = _convert_summary(tmp_path, ["multi30k", "--images", tmp_path / "images", "--multi30k", m30k,
                                               "--all-to", "test"])
    assert summary["skipped"] == {"malformed_line": 4} and summary["balanced"] and summary["records"] == 8
    issues = summary["issues"]["malformed_line"]["examples"]
    assert [(i["file"], i["line"], i["records"]) for i in issues] == [(str(split_file), 2, 2), (str(split_file), 4, 2)]
    assert sorted((m["image_id"], m["caption"]) for m in read_captions(out / "test")) == [
        ("101", "de 101"), ("101", "en 101"), ("103", "de 103"), ("103", "en 103")]


def test_flickr8k_cn_variants_of_one_caption_index_are_not_duplicates(tmp_path):
    """zhc (crowd) and zhb (machine) captions #0 of one image are two captions; the same line twice is one."""
    make_jpeg(tmp_path / "images" / "101_a1b2c3.jpg")
    zhc = write_lines(tmp_path / "flickr8kzhc.caption.txt", ["101_a1b2c3#zhc#0 一只狗在跑。"])
    zhb = write_lines(tmp_path / "flickr8kzhb.caption.txt", ["101_a1b2c3#zhb#0 一条狗在奔跑",
                                                             "101_a1b2c3#zhb#0 一条狗在奔跑"])
    out, summary = _convert_summary(tmp_path, ["flickr8k", "--images", tmp_path / "images", "--flickr8k", f"{zhc}:zh",
                                               "--flickr8k", f"{zhb}:zh", "--all-to", "train"])
    assert summary["written"] == {"train": {"zh": 2}} and summary["skipped"] == {"duplicate_key": 1}


def test_multi30k_root_may_be_the_repository_holding_data(tmp_path):
    from data_prep.converters.multi30k import find_task_dir

    (tmp_path / "multi30k" / "data" / "task2" / "image_splits").mkdir(parents=True)
    assert find_task_dir(tmp_path / "multi30k", 2) == tmp_path / "multi30k" / "data" / "task2"
    assert find_task_dir(tmp_path / "multi30k", 1) is None


def test_caption_whitespace_is_collapsed_and_keys_count_per_image_and_language(tmp_path):
    """Stored text has runs of whitespace as one space; keys are <image id>-<lang>-<n>, n counting the image's
    captions in that language only."""
    make_jpeg(tmp_path / "images" / "101_a1b2c3.jpg")
    en = write_lines(tmp_path / "Flickr8k.token.txt", ["101_a1b2c3.jpg#0\tA  dog \t runs", "101_a1b2c3.jpg#1\tA cat"])
    zh = write_lines(tmp_path / "zh.txt", ["101_a1b2c3#zhc#0 一只狗"])
    out, _ = _convert_summary(tmp_path, ["flickr8k", "--images", tmp_path / "images", "--flickr8k", f"{en}:en",
                                         "--flickr8k", f"{zh}:zh", "--all-to", "test"])
    assert sorted((m["key"], m["caption"]) for m in read_captions(out / "test")) == [
        ("101_a1b2c3-en-0", "A dog runs"), ("101_a1b2c3-en-1", "A cat"), ("101_a1b2c3-zh-0", "一只狗")]


def test_an_image_id_keeps_up_to_64_characters_and_a_longer_one_stays_64_and_distinct():
    from data_prep.converters.pipeline import MAX_ID, safe_id

    assert safe_id("a" * MAX_ID) == "a" * MAX_ID
    longer = [safe_id("a" * (MAX_ID + 1)), safe_id("a" * (MAX_ID + 2))]
    assert all(len(i) == MAX_ID and i.startswith("a" * 50) for i in longer) and longer[0] != longer[1]


def test_train_parallel_holds_train_images_only_and_images_count_each_image_once(tmp_path):
    """--parallel-train copies train images (never val's) in every language; summary images count train/val/test
    images, each once; an unreadable train image costs its one train caption (its copies are not records)."""
    images = tmp_path / "images"
    ids = list(range(101, 111))
    for pid in ids:
        make_jpeg(images / f"{pid}.jpg", color=(pid, 0, 0))
    (images / "110.jpg").write_bytes((images / "110.jpg").read_bytes()[:200])  # truncated, a train image
    tables = []
    for lang in ("en", "de"):
        tables += ["--captions", write_lines(tmp_path / f"{lang}.tsv", [f"{p}.jpg\t{lang}\t{lang} {p}" for p in ids])]
    val = write_lines(tmp_path / "val.txt", ["101.jpg", "102.jpg", "103.jpg"])
    test = write_lines(tmp_path / "test.txt", ["104.jpg", "105.jpg"])
    out, summary = _convert_summary(tmp_path, ["folder", "--images", images, *tables, "--assign-languages",
                                               "--split-file", f"val={val}", "--split-file", f"test={test}",
                                               "--parallel-train", "en,de"])
    split_ids = {s: {m["image_id"] for m in read_captions(out / s)}
                 for s in ("train", "val", "test", "train-parallel")}
    assert split_ids["train"] == split_ids["train-parallel"] == {"106", "107", "108", "109"}
    assert summary["images"] == {"train": 4, "val": 3, "test": 2}
    assert summary["skipped"] == {"unreadable_image": 1} and summary["balanced"]


def test_test_and_val_fractions_may_sum_to_exactly_one(tmp_path):
    assert ConvertOptions(tmp_path, test_fraction=0.5, val_fraction=0.5).split_options() == [
        "--test-fraction", "--val-fraction"]
    with pytest.raises(UserError, match="must not exceed 1"):
        ConvertOptions(tmp_path, test_fraction=0.6, val_fraction=0.5)


def test_center_crop_keeps_the_middle_of_the_picture(tmp_path):
    """Three 20-pixel bands, red | green | blue: the centre 20 x 20 square is the green band."""
    bands = np.zeros((20, 60, 3), np.uint8)
    bands[:, :20, 0] = bands[:, 20:40, 1] = bands[:, 40:, 2] = 255
    Image.fromarray(bands).save(tmp_path / "bands.png")
    data, size = prepare_image(tmp_path / "bands.png", ImageSpec(resize=20, mode="center-crop"))
    pixels = np.asarray(Image.open(io.BytesIO(data)), np.float32)
    assert size == (20, 20) and pixels[2:-2, 2:-2].mean(axis=(0, 1)).argmax() == 1  # green


def test_an_exif_rotated_photo_is_stored_upright(tmp_path):
    """A 40 x 20 JPEG whose EXIF orientation 6 says 'rotate 90 degrees' is a 20 x 40 picture."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (40, 20), (200, 30, 30)).save(tmp_path / "rotated.jpg", exif=exif.tobytes())
    data, (height, width) = prepare_image(tmp_path / "rotated.jpg", ImageSpec())
    assert (height, width) == (40, 20) and Image.open(io.BytesIO(data)).size == (20, 40)


def test_resolver_prefers_the_file_named_over_one_of_the_same_stem(tmp_path):
    jpg, png = make_jpeg(tmp_path / "a.jpg"), tmp_path / "a.png"
    Image.new("RGB", (8, 8)).save(png)
    resolver = ImageResolver([tmp_path])
    assert resolver.resolve(["a.png"]) == png and resolver.resolve(["a.jpg"]) == jpg


def test_a_table_without_images_folder_finds_images_beside_it(tmp_path):
    """No --images: a bare file name is read relative to the caption table's folder."""
    make_jpeg(tmp_path / "data" / "dog.jpg")
    table = write_lines(tmp_path / "data" / "caps.tsv", ["dog.jpg\ten\ta dog"])
    _, summary = _convert_summary(tmp_path, ["folder", "--captions", table])
    assert summary["written"] == {"train": {"en": 1}} and summary["skipped"] == {}


def test_conceptual_captions_numbers_of_eight_digits_keep_every_digit():
    from data_prep.converters.globetrotter_layout import image_candidates

    assert image_candidates("conceptual", "12345678.txt")[0] == "ConceptualCaptions/train/12345678.jpg"
    assert image_candidates("conceptual", "912345678.txt")[0] == "ConceptualCaptions/train/12345678.jpg"
    assert image_candidates("conceptual", "1234.txt")[0] == "ConceptualCaptions/train/00001234.jpg"


def test_strict_fails_on_bad_input_that_costs_no_caption(tmp_path, capsys):
    """A Globetrotter listing line naming a missing caption file costs no caption record, but it is bad input:
    --strict exits 1."""
    listing = tmp_path / "gt" / "flickr30k" / "entities" / "translated_independent"
    write_lines(listing / "de" / "36979.txt", ["zwei Hunde"])
    write_lines(listing / "listing_train.txt", ["./de/36979.txt", "./de/404.txt"])
    make_jpeg(tmp_path / "gt" / "flickr30k" / "images" / "36979.jpg")
    argv = ["globetrotter", "--globetrotter", tmp_path / "gt", "--workers", "1", "--no-progress"]
    assert cli([*argv, "--out", tmp_path / "out"]) == 0
    assert cli([*argv, "--out", tmp_path / "strict", "--strict"]) == 1
    assert "missing_caption_file" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--flickr8k", "Flickr8k.token.txt"], "--flickr8k: expected FILE:LANG (e.g. Flickr8k.token.txt:en), got "
                                           "'Flickr8k.token.txt'"),
    (["--multi30k-tasks", "3"], "--multi30k-tasks: expected 1, 2 or 1,2, got '3'"),
    (["--multi30k-tasks", "one"], "--multi30k-tasks: expected 1, 2 or 1,2, got 'one'"),
    (["--test-fraction", "half"], "--test-fraction: expected a fraction in [0, 1], got 'half'"),
    (["--val-fraction", "1.5"], "--val-fraction: expected a fraction in [0, 1], got '1.5'"),
    (["--resize", "0"], "--resize must be a positive number of pixels, got 0"),
    (["--jpeg-quality", "101"], "--jpeg-quality must be in 1..100, got 101"),
    (["--shard-size", "0"], "--shard-size must be positive, got 0"),
    (["--max-images", "0"], "--max-images must be positive, got 0"),
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    # issues[:-2] printed all but the last two and a wrong "... and -2 more"
    (["--show-issues", "-2"], "--show-issues: expected an integer >= 0, got '-2'"),
    (["--show-issues", "two"], "--show-issues: expected an integer >= 0, got 'two'"),
    (["--parallel-train", "en,ja"], "--parallel-train en,ja must be a subset of the languages kept (de,en,fr)"),
])
def test_a_bad_option_value_is_one_line_naming_the_flag_and_what_it_expects(tmp_path, capsys, extra, message):
    photos, rows = folder_world(tmp_path, n=3)
    table = write_lines(tmp_path / "caps.tsv", rows)
    out = tmp_path / "out"
    assert cli(["folder", "--images", photos, "--captions", table, "--workers", "1", "--no-progress", "--out", out,
                *extra]) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
    assert not out.exists()


def test_a_dataset_with_photos_needs_images_in_one_line(tmp_path, capsys):
    table = write_lines(tmp_path / "Flickr8k.token.txt", ["101.jpg#0\ta dog"])
    assert cli(["flickr8k", "--flickr8k", f"{table}:en", "--out", tmp_path / "o", "--no-progress"]) == 2
    assert one_error_line(capsys) == ("error: --images DIR is required with --multi30k, --flickr8k and --xtd10 (the "
                                      "folder of the photos)")
    assert not (tmp_path / "o").exists()


def test_conversion_options_given_in_python_are_checked_as_the_flags_are(tmp_path):
    """The Python API (ConvertOptions, ImageSpec) refuses what the command line refuses before parsing."""
    from data_prep.converters.images import ImageSpec
    from data_prep.converters.options import ConvertOptions

    with pytest.raises(UserError, match=r"^--test-fraction must be in \[0, 1\], got 1.5$"):
        ConvertOptions(out_dir=tmp_path, test_fraction=1.5)
    with pytest.raises(UserError, match=r"^--val-fraction must be in \[0, 1\], got -0.1$"):
        ConvertOptions(out_dir=tmp_path, val_fraction=-0.1)
    with pytest.raises(UserError, match=r"^--all-to: .*'holdout'"):
        ConvertOptions(out_dir=tmp_path, all_to="holdout")
    assert ConvertOptions(out_dir=tmp_path, all_to="test").all_to == "test"
    with pytest.raises(ValueError, match="resize mode must be one of"):
        ImageSpec(64, "stretch")
    with pytest.raises(ValueError, match="resize must be a positive number of pixels, got 0"):
        ImageSpec(0)


def test_globetrotter_layout_reports_each_bad_listing_line_and_caption_line_where_it_is(tmp_path):
    """A listing's non-UTF-8, blank and malformed lines and a caption file's non-UTF-8 line are issues naming file
    and line (the good lines around them read on); a root without any listing is one line naming the expected one."""
    from data_prep.converters.globetrotter_layout import read_globetrotter
    from data_prep.converters.report import Issue

    with pytest.raises(UserError, match=rf"^{tmp_path}: no Globetrotter listing found \(expected e.g. {tmp_path}/COCO/"
                                        r"annotations/translated_independent/listing_train.txt\)$"):
        read_globetrotter(tmp_path)
    ind = tmp_path / "COCO" / "annotations" / "translated_independent"
    write_lines(ind / "de" / "COCO_train2014_000000000001.txt", ["ein Hund", b"\xff kaputt", "ein Hund rennt"])
    listing = write_lines(ind / "listing_train.txt", [
        b"./de/\xff.txt", "", "./de/COCO_train2014_noNumber.txt", "./de/COCO_train2014_000000000002.jpg",
        "COCO_train2014_000000000003.txt", "./de/COCO_train2014_000000000001.txt"])
    records = list(read_globetrotter(tmp_path))
    issues = [(r.kind, r.file, r.line) for r in records if isinstance(r, Issue)]
    caption_file = str(ind / "de" / "COCO_train2014_000000000001.txt")
    assert issues == [("non_utf8", str(listing), 1), ("malformed_line", str(listing), 3),
                      ("malformed_line", str(listing), 4), ("malformed_line", str(listing), 5),
                      ("non_utf8", caption_file, 2)]
    captions = [(r.text, r.line, r.images) for r in records if not isinstance(r, Issue)]
    assert captions == [(text, line, ("COCO/train2014/COCO_train2014_000000000001.jpg",))
                        for text, line in (("ein Hund", 1), ("ein Hund rennt", 3))]


def test_globetrotter_layout_reports_a_listing_or_caption_file_that_stops_reading(tmp_path, monkeypatch):
    """An I/O error part-way (a failing disk, a cut network mount) is an unreadable_file issue naming the file; the
    lines read before it are kept."""
    from data_prep.converters import common
    from data_prep.converters.globetrotter_layout import read_globetrotter
    from data_prep.converters.report import Issue

    ind = tmp_path / "COCO" / "annotations" / "translated_independent"
    good = write_lines(ind / "de" / "COCO_train2014_000000000001.txt", ["ein Hund"])
    bad = write_lines(ind / "ja" / "COCO_train2014_000000000002.txt", ["犬"])
    listing = write_lines(ind / "listing_train.txt", ["./de/COCO_train2014_000000000001.txt",
                                                      "./ja/COCO_train2014_000000000002.txt"])
    opened = common.open_binary

    def failing_on(broken: Path):
        def open_binary(path):
            if Path(path) == broken:
                raise OSError(5, "Input/output error")
            return opened(path)
        return open_binary

    monkeypatch.setattr(common, "open_binary", failing_on(bad))
    records = list(read_globetrotter(tmp_path))
    assert [(r.kind, r.file) for r in records if isinstance(r, Issue)] == [("unreadable_file", str(bad))]
    assert [(r.text, r.file) for r in records if not isinstance(r, Issue)] == [("ein Hund", str(good))]
    monkeypatch.setattr(common, "open_binary", failing_on(listing))
    assert [(r.kind, r.file) for r in read_globetrotter(tmp_path)] == [("unreadable_file", str(listing))]


def test_aligned_files_skip_exactly_the_lines_a_bad_byte_spoils(tmp_path):
    """A non-UTF-8 image name costs the captions aligned to it (one per caption file), a non-UTF-8 caption only
    itself; every other line keeps its image."""
    from data_prep.converters.common import AlignedFile, Caption, read_aligned

    names = write_lines(tmp_path / "names.txt", ["a.jpg", b"\xffb.jpg", "c.jpg"])
    en = write_lines(tmp_path / "en.txt", ["a en", "b en", b"c \xfe en"])
    de = write_lines(tmp_path / "de.txt", ["a de", "b de", "c de"])
    records = list(read_aligned(names, [AlignedFile(en, "en"), AlignedFile(de, "de")], "test", "test"))
    issues = [(r.kind, r.file, r.line, r.records) for r in records if not isinstance(r, Caption)]
    assert issues == [("non_utf8", str(names), 2, 2), ("non_utf8", str(en), 3, 1)]
    assert [(r.images, r.lang, r.text) for r in records if isinstance(r, Caption)] == [
        (("a.jpg",), "en", "a en"), (("a.jpg",), "de", "a de"), (("c.jpg",), "de", "c de")]


def test_aligned_files_cut_short_keep_the_lines_read_and_pair_no_caption_past_the_last_name(tmp_path):
    """A split file that stops reading part-way (a gzip cut short) pairs only the captions of the names read, and
    is not refused for its count; a caption file cut short is an unreadable_file issue, its lines read kept."""
    from data_prep.converters.common import AlignedFile, Caption, read_aligned

    n = 2000
    whole = gzip.compress(b"".join(b"img%04d.jpg\n" % i for i in range(n)))
    names = tmp_path / "names.txt.gz"
    names.write_bytes(whole[:len(whole) // 2])
    en = write_lines(tmp_path / "en.txt", [f"caption {i}" for i in range(n)])
    records = list(read_aligned(names, [AlignedFile(en, "en")], "test", "test"))
    (issue,) = [r for r in records if not isinstance(r, Caption)]
    read = issue.line - 1  # the names read before it stopped
    assert issue.kind == "unreadable_file" and issue.file == str(names) and 0 < read < n
    captions = [r for r in records if isinstance(r, Caption)]
    assert [(r.images[0], r.text) for r in captions] == [(f"img{i:04d}.jpg", f"caption {i}") for i in range(read)]

    names = write_lines(tmp_path / "all.txt", [f"img{i:04d}.jpg" for i in range(n)])
    whole = gzip.compress(b"".join(b"caption %d\n" % i for i in range(n)))
    de = tmp_path / "de.txt.gz"
    de.write_bytes(whole[:len(whole) // 2])
    records = list(read_aligned(names, [AlignedFile(de, "de")], "test", "test"))
    (issue,) = [r for r in records if not isinstance(r, Caption)]
    assert issue.kind == "unreadable_file" and issue.file == str(de)
    assert [r.text for r in records if isinstance(r, Caption)] == [f"caption {i}" for i in range(issue.line - 1)]


def test_the_max_images_note_is_only_for_images_a_split_file_named():
    """--all-to names every image (nothing to say); images left out that no split file named cost no split file."""
    from data_prep.converters.common import split_from_name
    from data_prep.converters.splits import FixedSplits

    assert FixedSplits(split_of={"a": "test"}, all_to="test").limit_note(["a"], 1) is None
    assert FixedSplits(split_of={"a": "test"}).limit_note(["b", "c"], 1) is None
    assert FixedSplits(split_of={"a": "test", "b": "val"}).limit_note(["a", "c"], 1).startswith(
        "--max-images 1 left out 1 of the 2 image(s) the split files name (test 1 of 1)")
    assert [split_from_name(n) for n in ("train2014", "dev", "Val_images", "test_2016", "holdout")] == [
        "train", "val", "val", "test", None]


def test_the_image_index_skips_other_files_and_answers_same_name_and_examples_on_its_own(tmp_path):
    """same_name and some_names build the folder index themselves (no resolve before them); a file that is no
    image (notes.txt) is in neither."""
    from data_prep.converters.images import ImageResolver

    make_jpeg(tmp_path / "a" / "cat.jpg")
    make_jpeg(tmp_path / "b" / "cat.jpg")
    Image.new("RGB", (4, 4)).save(tmp_path / "dog.png")
    (tmp_path / "notes.txt").write_text("not an image")
    assert ImageResolver([tmp_path]).same_name(["x/cat.jpg"]) == [tmp_path / "a" / "cat.jpg", tmp_path / "b" / "cat.jpg"]
    assert ImageResolver([tmp_path]).same_name(["dog.png"]) == []
    assert ImageResolver([tmp_path]).some_names(5) == ["dog.png", "cat.jpg"]  # the root's files, then a/, b/


def test_reader_folders_that_are_missing_or_lack_a_task_or_caption_file_are_one_line(tmp_path):
    from data_prep.converters.multi30k import find_task_dir, read_multi30k
    from data_prep.converters.xtd10 import read_xtd10

    with pytest.raises(UserError, match=rf"^{tmp_path / 'none'}: Multi30K folder not found$"):
        read_multi30k(tmp_path / "none")
    (tmp_path / "task1" / "image_splits").mkdir(parents=True)
    assert find_task_dir(tmp_path / "task1", 1) == tmp_path / "task1"  # the task's own folder given as the root
    assert find_task_dir(tmp_path / "task1", 2) is None
    with pytest.raises(UserError, match=re.escape(f"{tmp_path}: no Multi30K task 2 folder (expected {tmp_path}/task2/"
                                                  f"image_splits/ and {tmp_path}/task2/raw/)")):
        read_multi30k(tmp_path, tasks=[1, 2])
    write_lines(tmp_path / "xtd" / "test_image_names.txt", ["a.jpg"])
    with pytest.raises(UserError, match=re.escape(f"{tmp_path / 'xtd'}: no test_1kcaptions_<lang>.txt file found")):
        read_xtd10(tmp_path / "xtd")


def test_caption_tables_skip_blank_lines_and_report_bad_bytes_bad_rows_and_files_cut_short(tmp_path):
    """Flickr8k token files and folder tables: a blank line is no record; a non-UTF-8 line, a JSONL line that is no
    object, and a gzip cut short are issues naming file and line; the rows around them are read."""
    from data_prep.converters.common import Caption
    from data_prep.converters.flickr8k import read_flickr8k
    from data_prep.converters.folder import read_caption_table

    def kinds(records):
        return [(r.kind, r.line) for r in records if not isinstance(r, Caption)]

    def texts(records):
        return [r.text for r in records if isinstance(r, Caption)]

    token = write_lines(tmp_path / "token.txt", ["1.jpg#0 a dog", "", "2.jpg#0 a cat"])
    assert kinds(read_flickr8k(token, "en")) == [] and texts(read_flickr8k(token, "en")) == ["a dog", "a cat"]
    jsonl = write_lines(tmp_path / "caps.jsonl", [json.dumps({"image": "1.jpg", "lang": "en", "caption": "one"}), "",
                                                  json.dumps(["2.jpg", "en", "two"]), b'{"image": "\xff"}',
                                                  json.dumps({"image": "3.jpg", "lang": "en", "caption": "three"})])
    records = list(read_caption_table(jsonl))
    assert kinds(records) == [("malformed_line", 3), ("non_utf8", 4)] and texts(records) == ["one", "three"]
    assert [r.message for r in records if not isinstance(r, Caption)][0] == "expected a JSON object"
    rows = b"".join(b"%d.jpg#0 caption %d\n" % (i, i) for i in range(3000))
    for path, read in ((tmp_path / "cut.token.txt.gz", lambda p: read_flickr8k(p, "en")),
                       (tmp_path / "cut.tsv.gz", read_caption_table)):
        data = rows if read is not read_caption_table else rows.replace(b"#0 ", b"\ten\t")
        path.write_bytes(gzip.compress(data)[:700])
        records = list(read(path))
        (issue,) = [r for r in records if not isinstance(r, Caption)]
        assert issue.kind == "unreadable_file" and issue.file == str(path) and records[-1] is issue
        assert texts(records) == [f"caption {i}" for i in range(issue.line - 1)]


def test_a_language_list_skips_empty_items_and_names_an_unknown_code_or_an_empty_list():
    from data_prep.converters.languages import parse_language_list

    assert parse_language_list("en,,DE, ") == ["en", "de"]
    with pytest.raises(ValueError, match=r"^unknown language code 'xx' \(expected ISO 639-1, e.g. en, de, zh, or "
                                         r"fa-AF\)$"):
        parse_language_list("en,xx")
    with pytest.raises(ValueError, match="^empty language list$"):
        parse_language_list(" , ")


def test_issues_beyond_the_examples_shown_are_counted_and_unknown_kinds_refused():
    from data_prep.converters.report import ConversionReport, Issue

    report = ConversionReport()
    for line in (1, 2, 3):
        report.add(Issue("empty_caption", "caps.tsv", line, "empty"))
    text = report.format_issues(max_examples=1)
    assert text.splitlines()[1:] == ["  caps.tsv:1: empty_caption: empty", "  ... and 2 more"]
    assert "more" not in report.format_issues(max_examples=3)
    assert report.format_issues(max_examples=0).splitlines()[1:] == ["  ... and 3 more"]
    with pytest.raises(ValueError, match=r"^max_examples must be >= 0, got -1$"):  # it printed "... and 4 more"
        report.format_issues(max_examples=-1)
    with pytest.raises(ValueError, match="unknown issue kind 'typo'"):
        Issue("typo", "caps.tsv", 1, "x")
    with pytest.raises(ValueError, match="unknown reason 'typo'"):
        report.leave_out("typo")


def test_a_key_clash_in_the_writer_skips_that_caption_as_a_duplicate_and_counts_it_once(tmp_path, monkeypatch):
    """A clash the writer meets (never expected: keys are made distinct) costs the caption in its split, filed once as
    duplicate_key (not again for its train-parallel copy), and the run goes on with every record accounted for."""
    from data_prep.shard_writer import DuplicateKey, ShardWriter

    photos, rows = folder_world(tmp_path, n=4, langs=("en", "de"))
    table = write_lines(tmp_path / "caps.tsv", rows)
    real = ShardWriter.write
    clashed = []

    def clashing(self, key, image, caption, lang, image_id, group=None, extra=None):
        if caption == "photo 0 in en":
            clashed.append(self.split)
            raise DuplicateKey(f"duplicate key {key!r}")
        return real(self, key, image, caption, lang, image_id, group, extra)

    monkeypatch.setattr(ShardWriter, "write", clashing)
    out, summary = _convert_summary(tmp_path, ["folder", "--images", photos, "--captions", table, "--all-to", "train",
                                               "--parallel-train", "en,de"])
    assert sorted(clashed) == ["train", "train-parallel"]
    assert summary["skipped"] == {"duplicate_key": 1} and summary["issues"]["duplicate_key"]["count"] == 1
    assert summary["written"]["train"] == {"de": 4, "en": 3} and summary["balanced"]
    assert "photo 0 in en" not in {m["caption"] for m in read_captions(out / "train")}


def test_versions_say_none_for_a_checkout_never_pip_installed(monkeypatch):
    import importlib.metadata
    import platform

    from data_prep.versions import versions

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert versions() == {"globetrotter": None, "numpy": np.__version__, "python": platform.python_version()}


@pytest.mark.parametrize("command", ["multi30k", "xtd10", "folder"])
def test_the_help_says_a_caption_file_of_another_line_count_is_refused_not_skipped(command, capsys):
    """The description listed "caption file shorter than its split file" among the bad input reported and skipped;
    such a file is refused in one line, nothing written (test_multi30k_caption_file_missing_a_middle_line_is_refused),
    and only a file cut short (unreadable part-way) is reported and skipped."""
    assert cli([command, "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "shorter than its split file" not in shown
    assert "caption file cut short" in shown
    assert "line count differs from its split file's is refused (exit 2, nothing written)" in shown
