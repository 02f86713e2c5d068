"""The shard format: write/read round-trip, manifest, checksum, split rule, bad input."""
from __future__ import annotations

import io
import json
import re
import tarfile

import numpy as np
import pytest
from PIL import Image

from data_prep.checksums import file_sha256
from data_prep.shard_writer import ShardWriter
from data_prep.shards import check_manifest_counts, iter_samples, read_captions, read_manifest
from data_prep.split_rule import check_split_rule, images_in_several_languages
from globetrotter.errors import UserError


def image(seed: int, size: int = 16) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8))


def write_split(path, rows, split="train", fmt="png", maxcount=3):
    with ShardWriter(path, split=split, source="test", image_format=fmt, maxcount=maxcount) as w:
        for key, seed, caption, lang, image_id, group in rows:
            w.write(key, image(seed), caption, lang, image_id, group)
    return read_manifest(path)


ROWS = [
    ("a0", 0, "a red circle", "en", "img0", None),
    ("a1", 1, "ein blauer Kreis", "de", "img1", None),
    ("a2", 2, "красный квадрат", "ru", "img2", None),
    ("a3", 3, "赤い丸", "ja", "img3", None),
    ("a4", 4, "دائرة حمراء", "ar", "img4", None),
]


def test_round_trip_keeps_every_field_and_pixel(tmp_path):
    manifest = write_split(tmp_path / "train", ROWS)
    assert manifest["num_samples"] == 5 and len(manifest["shards"]) == 2  # maxcount 3
    assert manifest["languages"] == {"ar": 1, "de": 1, "en": 1, "ja": 1, "ru": 1}
    assert manifest["image_size"] == [16, 16] and manifest["checksum"].startswith("sha256:")
    samples = list(iter_samples(tmp_path / "train"))
    assert [s.key for s in samples] == [r[0] for r in ROWS]
    for s, (key, seed, caption, lang, image_id, group) in zip(samples, ROWS):
        assert (s.caption, s.lang, s.image_id, s.group) == (caption, lang, image_id, group)
        assert np.array_equal(np.asarray(s.image), np.asarray(image(seed)))  # png is lossless


def test_same_content_gives_same_checksum(tmp_path):
    a = write_split(tmp_path / "a", ROWS)
    b = write_split(tmp_path / "b", ROWS)
    c = write_split(tmp_path / "c", ROWS[:4])
    assert a["checksum"] == b["checksum"] != c["checksum"]


def test_feature_vectors_round_trip(tmp_path):
    with ShardWriter(tmp_path / "f", split="train", source="t", image_format="npy") as w:
        w.write("k0", np.arange(8, dtype=np.float32), "x", "en", "i0")
    assert read_manifest(tmp_path / "f")["feature_dim"] == [8]
    (s,) = iter_samples(tmp_path / "f")
    assert np.array_equal(s.image, np.arange(8, dtype=np.float32))


def test_duplicate_key_is_refused(tmp_path):
    with ShardWriter(tmp_path / "d", split="train", source="t") as w:
        w.write("k", image(0), "x", "en", "i0")
        with pytest.raises(ValueError, match="duplicate key"):
            w.write("k", image(1), "y", "en", "i1")


def test_a_key_too_long_for_a_tar_name_is_refused_before_anything_is_written(tmp_path):
    """A 96-character key: its .png fitted the 100 bytes of a USTAR name and its .json did not, so the picture was
    in the shard, the manifest counted no sample for it, and every later read said "incomplete sample"."""
    with ShardWriter(tmp_path / "k", split="train", source="t") as w:
        with pytest.raises(ValueError, match=r"too long: with its extension a shard member name takes 101 bytes, and "
                                             r"a tar \(USTAR\) name holds at most 100"):
            w.write("k" * 96, image(0), "x", "en", "i0")
        w.write("é" * 45, image(1), "y", "en", "i1")  # 90 UTF-8 bytes + ".json": fits
    assert [s.key for s in iter_samples(tmp_path / "k")] == ["é" * 45]


def test_encoded_bytes_record_their_image_size(tmp_path):
    """The synthetic world writes encoded bytes: its manifests said image_size null."""
    buf = io.BytesIO()
    image(0, size=24).save(buf, format="PNG")
    with ShardWriter(tmp_path / "b", split="train", source="t") as w:
        w.write("k0", buf.getvalue(), "x", "en", "i0")
    assert read_manifest(tmp_path / "b")["image_size"] == [24, 24]


def test_split_rule(tmp_path):
    write_split(tmp_path / "ok", ROWS)
    check_split_rule(tmp_path / "ok")
    bad = ROWS + [("a5", 5, "a blue circle", "en", "img1", None)]  # img1 already in German
    write_split(tmp_path / "bad", bad)
    with pytest.raises(UserError, match="more than one language"):
        check_split_rule(tmp_path / "bad")
    test_rows = [("t0", 0, "a", "en", "i0", "g0"), ("t1", 0, "b", "de", "i0", "g0"), ("t2", 1, "c", "en", "i1", "g1")]
    write_split(tmp_path / "test", test_rows, split="test")
    with pytest.raises(UserError, match="group 'g1' must have a caption in each of"):
        check_split_rule(tmp_path / "test")


def test_bad_input_gives_one_line_user_errors(tmp_path):
    with pytest.raises(UserError, match="split directory not found"):
        read_manifest(tmp_path / "nothing")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UserError, match=r"a-file: a file \(expected a folder with manifest.json"):
        read_manifest(tmp_path / "a-file")
    write_split(tmp_path / "s", ROWS)
    (tmp_path / "s" / "train-000001.tar").write_bytes(b"not a tar at all" * 10)
    with pytest.raises(UserError, match="train-000001.tar: unreadable shard"):
        list(read_captions(tmp_path / "s"))
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(dict(manifest, num_samples=0, shards=[])))
    with pytest.raises(UserError, match="split is empty"):
        read_manifest(tmp_path / "s")
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(dict(manifest, num_samples=0)))  # shards, yet 0 samples
    with pytest.raises(UserError, match="split is empty"):
        read_manifest(tmp_path / "s")
    (tmp_path / "s" / "manifest.json").write_text("{oops")
    with pytest.raises(UserError, match="malformed manifest"):
        read_manifest(tmp_path / "s")
    world = tmp_path / "world"  # a dataset root given where a split is expected: its splits are named
    write_split(world / "train", ROWS)
    write_split(world / "test", ROWS)
    with pytest.raises(UserError, match=rf"manifest not found \({world} holds the splits test, train: name one of "
                                        rf"them, e.g. {world / 'test'}\)"):
        read_manifest(world)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"manifest not found \(is .*empty a split folder written by globetrotter-data"):
        read_manifest(tmp_path / "empty")


def test_a_manifest_of_wrong_types_is_one_line_naming_the_key(tmp_path):
    """Was: a list manifest read as one lacking 'shards'; a string 'shards' as shards named by its characters ("s/t:
    shard listed in manifest.json is missing"); a non-integer count or a list of languages read on."""
    write_split(tmp_path / "s", ROWS)
    path = tmp_path / "s" / "manifest.json"
    manifest = json.loads(path.read_text())
    for value, expected in (([1, 2], "manifest is a JSON list, expected an object"),
                            (dict(manifest, shards=manifest["shards"][0]), "manifest key 'shards' is \"train-"),
                            (dict(manifest, shards=[1]), "manifest key 'shards' is [1], expected a list of shard"),
                            (dict(manifest, num_samples="many"), "manifest key 'num_samples' is \"many\", expected a"),
                            (dict(manifest, languages=["en"]), "manifest key 'languages' is [\"en\"], expected an object")):
        path.write_text(json.dumps(value))
        with pytest.raises(UserError) as err:
            read_manifest(tmp_path / "s")
        assert str(err.value).startswith(f"{path}: {expected}"), err.value


def write_raw_split(path, meta, image_bytes: bytes, key: str = "k0") -> None:
    """A one-sample split written by hand (as another tool might): ``key.jpg`` + ``key.json`` as given."""
    path.mkdir(parents=True)
    with tarfile.open(path / "train-000000.tar", "w") as tar:
        for name, data in ((f"{key}.jpg", image_bytes), (f"{key}.json", json.dumps(meta).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (path / "manifest.json").write_text(json.dumps({"split": "train", "shards": ["train-000000.tar"],
                                                    "num_samples": 1, "languages": {"en": 1}}))


def test_a_malformed_sample_is_a_one_line_error_naming_shard_and_key(tmp_path):
    buf = io.BytesIO()
    image(0).save(buf, format="JPEG")
    jpeg = buf.getvalue()
    shard = "train-000000.tar"
    for name, meta, data, message in (
        ("nolang", {"caption": "x", "image_id": "a"}, jpeg, "lacks valid field(s) lang"),
        ("noid", {"caption": "x", "lang": "en", "image_id": None}, jpeg, "lacks valid field(s) image_id"),
        ("emptylang", {"caption": "x", "lang": " ", "image_id": "a"}, jpeg, "lacks valid field(s) lang"),
        ("list", ["x", "en"], jpeg, "json is a list"),
        ("badimg", {"caption": "x", "lang": "en", "image_id": "a", "group": None}, b"not a jpeg", "does not decode"),
    ):
        write_raw_split(tmp_path / name, meta, data)
        with pytest.raises(UserError) as err:
            list(iter_samples(tmp_path / name))
        text = str(err.value)
        assert "\n" not in text and f"{tmp_path / name / shard}: sample 'k0'" in text and message in text, text
        if name != "badimg":  # the fields are checked wherever samples are read, images decoded or not
            with pytest.raises(UserError, match=re.escape(message)):
                read_captions(tmp_path / name)
    assert [s.key for s in iter_samples(tmp_path / "badimg", decode_images=False)] == ["k0"]


@pytest.mark.parametrize("field, value, found", [("image_id", 7, "image_id 7"), ("image_id", ["a"], "image_id ['a']"),
                                                  ("group", 3, "group 3"), ("group", ["g0", "g1"], "group ['g0', 'g1']"),
                                                  ("caption", 5, "caption 5"),
                                                  *[(f, v, f"{f} {v!r}") for f in ("image_id", "group", "lang")
                                                    for v in ("", "  ")]])
def test_a_field_of_another_type_than_the_format_s_is_one_line_naming_shard_and_sample(tmp_path, field, value, found):
    """An image id or group that is a number or a list (docs/data.md: strings; group may be null) was read in
    silence (7 and "7" one image to the readers that take str() of it, two to the others), or was a TypeError
    traceback (a list group in the split rule's check); an image id "" made every such sample one image, a group ""
    put unrelated captions in one group. Each is refused where samples are read and never written."""
    buf = io.BytesIO()
    image(0).save(buf, format="JPEG")
    good = {"caption": "a red circle", "lang": "en", "image_id": "a", "group": "g"}
    meta = {**good, field: value}
    write_raw_split(tmp_path / "s", meta, buf.getvalue())
    for read in (read_captions, lambda d: list(iter_samples(d)), lambda d: check_split_rule(d, "test")):
        with pytest.raises(UserError) as err:
            read(tmp_path / "s")
        assert str(err.value) == (f"{tmp_path / 's' / 'train-000000.tar'}: sample 'k0' json lacks valid field(s) "
                                  f"{field} ({found}; expected strings caption, lang (a language code) and image_id, "
                                  f"and group a string or null, none empty)")
    write_raw_split(tmp_path / "null", {**good, "group": None}, buf.getvalue())
    assert read_captions(tmp_path / "null")[0]["group"] is None
    with ShardWriter(tmp_path / "w", split="test", source="test") as w:  # nor does ShardWriter write one
        with pytest.raises(ValueError, match=re.escape(f"{found} of key 'k' must be a non-empty string")):
            w.write("k", image(0), **meta)
    assert json.loads((tmp_path / "w" / "manifest.json").read_text())["num_samples"] == 0


def test_the_writer_refuses_an_empty_caption_and_extra_fields_that_override_the_sample_s(tmp_path):
    """Readers refuse an empty caption (check_meta), so the writer does not write one; ``extra`` cannot slip in an
    image id (or caption, lang, group) the arguments' checks never saw."""
    with ShardWriter(tmp_path / "w", split="train", source="test") as w:
        with pytest.raises(ValueError, match=re.escape("caption ' ' of key 'k' must be a non-empty string")):
            w.write("k", image(0), " ", "en", "a")
        with pytest.raises(ValueError, match=re.escape("extra of key 'k' sets image_id, group: the sample's own")):
            w.write("k", image(0), "a red circle", "en", "a", extra={"group": "", "image_id": 7, "meaning": "x"})
        w.write("k", image(0), "a red circle", "en", "a", extra={"meaning": "x"})
    assert [(m["key"], m["image_id"], m["meaning"]) for m in read_captions(tmp_path / "w")] == [("k", "a", "x")]


def test_split_rule_covers_adapt_and_parallel_train_splits_and_says_when_there_is_none(tmp_path):
    image = Image.new("RGB", (8, 8))

    def split(name: str, rows: list[tuple[str, str, str | None]]):
        with ShardWriter(tmp_path / name, split=name, source="t", image_format="png") as writer:
            for i, (lang, image_id, group) in enumerate(rows):
                writer.write(f"k{i}", image, f"caption {i}", lang, image_id=image_id, group=group)
        return tmp_path / name

    with pytest.raises(UserError, match="in more than one language in a adapt split"):
        check_split_rule(split("adapt", [("zh", "a", None), ("ar", "a", None)]))
    with pytest.raises(UserError, match="train-parallel group 'g1' must have a caption in each of"):
        check_split_rule(split("train-parallel", [("en", "a", "g0"), ("de", "a", "g0"), ("en", "b", "g1")]))
    assert check_split_rule(split("val", [("en", "a", None), ("de", "b", None)])) == "one language per image"
    assert check_split_rule(split("extra", [("en", "a", None), ("de", "a", None)])) is None


def test_images_in_several_languages_names_each_with_all_its_languages_sorted_in_order_of_first_appearance():
    metas = [{"image_id": "b", "lang": "fr"}, {"image_id": "a", "lang": "ru"}, {"image_id": "c", "lang": "en"},
             {"image_id": "a", "lang": "en"}, {"image_id": "b", "lang": "de"}, {"image_id": "a", "lang": "ja"},
             {"image_id": "b", "lang": "fr"}, {"image_id": "a", "lang": "de"}, {"image_id": 7, "lang": "en"},
             {"image_id": "7", "lang": "de"}]  # an id 7 and "7" are one image
    found = images_in_several_languages(iter(metas))  # a stream, read once
    assert list(found.items()) == [("b", ["de", "fr"]), ("a", ["de", "en", "ja", "ru"]), ("7", ["de", "en"])]
    assert images_in_several_languages([{"image_id": "a", "lang": "en"}, {"image_id": "a", "lang": "en"}]) == {}


def test_the_split_rule_checked_is_the_kind_asked_for_not_the_manifest_s(tmp_path):
    write_split(tmp_path / "s", ROWS)  # a train split: one language per image, no groups
    assert check_split_rule(tmp_path / "s") == "one language per image"
    with pytest.raises(UserError, match="test sample 'a0' has no group"):
        check_split_rule(tmp_path / "s", "test")


def test_file_sha256_reads_the_whole_file_whatever_its_block(tmp_path):
    import hashlib

    data = bytes(range(256)) * 5
    (tmp_path / "f").write_bytes(data)
    assert file_sha256(tmp_path / "f", block=7) == file_sha256(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_a_shard_that_is_no_tar_or_is_truncated_is_one_line_naming_it(tmp_path):
    write_split(tmp_path / "s", ROWS)
    shard = tmp_path / "s" / "train-000000.tar"
    whole = shard.read_bytes()
    for data, message in ((np.random.default_rng(0).bytes(3000), "not a tar archive, or truncated"),
                          (b"", "not a tar archive, or truncated"),
                          (whole[:1500], "truncated or not a tar archive: unexpected end of data")):
        shard.write_bytes(data)
        with pytest.raises(UserError) as err:
            read_captions(tmp_path / "s")
        text = str(err.value)
        assert "\n" not in text and text.startswith(f"{shard}: unreadable shard (") and message in text, text


def test_manifest_counts_are_checked_against_the_shards(tmp_path):
    write_split(tmp_path / "s", ROWS)
    assert check_manifest_counts(tmp_path / "s") == "5 samples, 5 language(s)"
    path = tmp_path / "s" / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps(dict(manifest, num_samples=7)))
    with pytest.raises(UserError, match=re.escape(f"{path}: num_samples is 7 but the shards hold 5 samples")):
        check_manifest_counts(tmp_path / "s")
    path.write_text(json.dumps(dict(manifest, languages={**manifest["languages"], "en": 2, "fr": 1})))
    with pytest.raises(UserError, match=re.escape("(en 2 recorded, 1 found; fr 1 recorded, 0 found)")):
        check_manifest_counts(tmp_path / "s")


@pytest.mark.parametrize("change, message", [
    ({"num_samples": 7}, "num_samples is 7 but the shards hold 5 samples"),
    ({"num_samples": 4}, "num_samples is 4 but the shards hold 5 samples"),
    ({"languages": {"en": 2, "de": 1, "ru": 1, "ja": 1}}, "(ar 0 recorded, 1 found; en 2 recorded, 1 found)"),
])
def test_every_reader_of_a_whole_split_refuses_a_manifest_its_shards_do_not_hold(tmp_path, change, message):
    """Was: only ``inspect --check`` compared the manifest's counts with the shards; every other reader (eval.py,
    backretrieval, training's start, conversions) read a split whose manifest says another count in silence. A
    reader that reads every sample refuses it once the last is read; one that stops early reads on unchecked."""
    from data_prep.shards import iter_metas, iter_raw

    write_split(tmp_path / "s", ROWS)
    path = tmp_path / "s" / "manifest.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), **change)))
    for read in (read_captions, lambda d: list(iter_metas(d)), lambda d: list(iter_samples(d)), check_split_rule,
                 lambda d: list(iter_raw(d, on_bad=lambda err: None))):
        with pytest.raises(UserError) as err:
            read(tmp_path / "s")
        assert str(err.value).startswith(f"{path}: ") and message in str(err.value) and "\n" not in str(err.value)
    assert next(iter_samples(tmp_path / "s")).key == "a0"  # a reader that stops early: nothing counted
    assert len(read_captions(tmp_path / "s", check_counts=False)) == 5  # inspect's look, --check comparing


def test_a_split_with_a_bad_sample_read_on_by_its_reader_is_not_counted_against_its_manifest(tmp_path):
    """The training loader skips and counts bad samples (``on_bad``): a shard cut short holds fewer samples than
    the manifest says, which is the loader's bad-sample count to judge, not a manifest that is wrong."""
    from data_prep.shards import iter_raw

    write_split(tmp_path / "s", ROWS)
    (tmp_path / "s" / "train-000001.tar").write_bytes(b"")
    errors = []
    assert [key for key, *_ in iter_raw(tmp_path / "s", on_bad=errors.append)] == ["a0", "a1", "a2"]
    assert len(errors) == 1 and "unreadable shard" in str(errors[0])


@pytest.mark.parametrize("caption", ["", "  \t"])
def test_every_reader_refuses_an_empty_caption_naming_shard_and_sample(tmp_path, caption):
    """A blank caption was read silently by training, eval.py and backretrieval (only ``inspect --check`` refused
    it): it is a caption of nothing, embedded as one, and counted in every figure."""
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG")
    write_raw_split(tmp_path / "blank", {"caption": caption, "lang": "en", "image_id": "a"}, buf.getvalue())
    with pytest.raises(UserError) as err:
        read_captions(tmp_path / "blank")
    assert str(err.value) == (f"{tmp_path / 'blank' / 'train-000000.tar'}: sample 'k0' has an empty caption "
                              f"(expected the text of the image's caption; write the split again without it)")


def test_a_uint8_array_is_written_as_the_image_it_is_and_its_height_and_width_recorded(tmp_path):
    """A HxWx3 uint8 array (the writer's documented input, besides PIL and bytes) is encoded as that picture, and the
    manifest's image_size is its [height, width], not the array's first two dims of another layout."""
    pixels = np.random.default_rng(0).integers(0, 255, (6, 10, 3), dtype=np.uint8)
    with ShardWriter(tmp_path / "s", split="train", source="t", image_format="png") as w:
        w.write("k0", pixels, "a", "en", "i0")
    assert read_manifest(tmp_path / "s")["image_size"] == [6, 10]
    (sample,) = iter_samples(tmp_path / "s")
    assert np.array_equal(np.asarray(sample.image), pixels)  # png: lossless


def test_the_writer_refuses_an_unknown_format_and_a_key_with_a_dot_or_slash_writing_nothing(tmp_path):
    from data_prep.shards import IMAGE_EXTS, encode_image

    with pytest.raises(ValueError, match=re.escape(f"image_format must be one of {IMAGE_EXTS}, got 'gif'")):
        ShardWriter(tmp_path / "gif", split="train", source="t", image_format="gif")
    with pytest.raises(ValueError, match="unknown image format 'gif'"):
        encode_image(image(0), "gif")
    with ShardWriter(tmp_path / "s", split="train", source="t", image_format="png") as w:
        for key in ("a.b", "a/b"):
            with pytest.raises(ValueError, match=re.escape(f"key {key!r} must not contain '.' or '/'")):
                w.write(key, image(0), "a", "en", "i0")
        assert not list((tmp_path / "s").glob("*.tar"))  # refused before a shard was opened
        w.write("ok", image(0), "a", "en", "i0")
    assert [s.key for s in iter_samples(tmp_path / "s")] == ["ok"]


def test_a_manifest_lacking_a_key_or_listing_a_missing_shard_is_one_line_naming_it(tmp_path):
    write_split(tmp_path / "s", ROWS)
    path = tmp_path / "s" / "manifest.json"
    manifest = json.loads(path.read_text())
    for key in ("shards", "num_samples", "languages"):
        path.write_text(json.dumps({k: v for k, v in manifest.items() if k != key}))
        with pytest.raises(UserError) as err:
            read_manifest(tmp_path / "s")
        assert str(err.value) == f"{path}: manifest lacks key '{key}'"
    path.write_text(json.dumps(manifest))
    (tmp_path / "s" / "train-000001.tar").unlink()
    with pytest.raises(UserError) as err:
        read_manifest(tmp_path / "s")
    assert str(err.value) == f"{tmp_path / 's' / 'train-000001.tar'}: shard listed in manifest.json is missing"


def test_shards_read_as_given_skip_folders_and_hand_bad_samples_on_or_raise_them(tmp_path):
    """``iter_raw`` with ``shards``: a folder member of a tar (another tool's tar) is no sample; a sample whose json
    lacks a field is handed to ``on_bad`` and the next read, or raised without it; a shard that cannot be opened at all
    (a folder) is one line naming it."""
    from data_prep.shards import iter_raw

    buf = io.BytesIO()
    image(0).save(buf, format="PNG")
    shard = tmp_path / "x.tar"
    with tarfile.open(shard, "w") as tar:
        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, data in (("sub/bad.png", buf.getvalue()), ("sub/bad.json", json.dumps({"caption": "x"}).encode()),
                           ("sub/ok.png", buf.getvalue()),
                           ("sub/ok.json", json.dumps({"caption": "x", "lang": "en", "image_id": "i"}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    errors = []
    assert [key for key, *_ in iter_raw(tmp_path, shards=[str(shard)], on_bad=errors.append)] == ["ok"]
    assert len(errors) == 1 and f"{shard}: sample 'bad'" in str(errors[0]) and "lacks valid field(s)" in str(errors[0])
    with pytest.raises(UserError, match=re.escape(f"{shard}: sample 'bad'")):
        list(iter_raw(tmp_path, shards=[str(shard)]))
    (tmp_path / "dir.tar").mkdir()
    with pytest.raises(UserError) as err:
        list(iter_raw(tmp_path, shards=[str(tmp_path / "dir.tar")]))
    assert str(err.value).startswith(f"{tmp_path / 'dir.tar'}: unreadable shard (") and "\n" not in str(err.value)


def test_a_new_split_folder_may_be_absent_empty_or_an_earlier_output_and_nothing_else(tmp_path):
    from data_prep.shard_writer import check_new_split_folder

    own = lambda manifest: manifest.get("source") == "mine"  # noqa: E731
    check_new_split_folder(tmp_path / "absent", [], own)
    (tmp_path / "empty").mkdir()
    check_new_split_folder(tmp_path / "empty", [], own)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=re.escape(f"--out {tmp_path / 'file'}: exists and is not a folder")):
        check_new_split_folder(tmp_path / "file", [], own)
    for name, manifest in (("garbled", "{oops"), ("other", json.dumps({"source": "theirs"})),
                           ("nomanifest", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / ("manifest.json" if manifest else "notes.txt")).write_text(manifest or "x")
        with pytest.raises(UserError, match="exists, is not empty and is not an earlier output of this command"):
            check_new_split_folder(tmp_path / name, [], own)
        assert len(list((tmp_path / name).iterdir())) == 1  # nothing cleared
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "manifest.json").write_text(json.dumps({"source": "mine"}))
    check_new_split_folder(tmp_path / "mine", [], own)
