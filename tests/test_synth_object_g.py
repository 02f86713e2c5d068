"""experiments/synth_object_g.py: a synthetic split copied with each image replaced by its scene's object vector."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import load_experiment
from data_prep.shards import decode_image, iter_raw, read_manifest
from data_prep.synth import SynthConfig, generate
from data_prep.synth.scene import BACKGROUNDS, COLOURS, SHAPES
from globetrotter.errors import UserError


@pytest.fixture(scope="module")
def objects():
    return load_experiment("synth_object_g")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    generate(SynthConfig(train_images=18, val_images=9, test_images=12, parallel_train_images=0, workers=1,
                         chunk_size=10, seed=3), root, progress=False)
    return root


def test_the_copy_keeps_every_caption_and_its_vectors_name_what_the_captions_say(objects, world, tmp_path):
    manifest = objects.write_object_split(world / "test", tmp_path / "objects")
    original = list(iter_raw(world / "test"))
    copied = list(iter_raw(tmp_path / "objects"))
    assert manifest["image_format"] == "npy" and manifest["num_samples"] == len(original) == len(copied)
    assert [(key, meta) for key, _, _, meta in copied] == [(key, meta) for key, _, _, meta in original]
    vectors = {}
    for key, ext, data, meta in copied:
        v = np.asarray(decode_image(data, ext))
        vectors.setdefault(meta["group"], []).append(v)
        assert v.shape == (objects.DIM,)
        # every shape, colour, size and background a caption names is in its slots (module docstring's layout:
        # shape | shape x colour | shape x size | colour | background at 0.5)
        n_shapes, n_colours = len(SHAPES), len(COLOURS)
        shape_size = n_shapes + n_shapes * n_colours
        colour_slot = shape_size + 2 * n_shapes
        background = colour_slot + n_colours
        for mention in meta["meaning"].split("; "):
            if mention.startswith("on "):
                assert v[background + BACKGROUNDS.index(mention[3:])] == 0.5
                continue
            words = mention.split()
            shape = next(w for w in words if w in SHAPES)
            s = SHAPES.index(shape)
            assert v[s] >= 1
            colour = next((w for w in words if w in COLOURS), None)
            if colour is not None:
                c = list(COLOURS).index(colour)
                assert v[n_shapes + n_colours * s + c] >= 1 and v[colour_slot + c] >= 1
            size = next((w for w in words if w in ("small", "large")), None)
            if size is not None:
                assert v[shape_size + 2 * s + (size == "large")] >= 1
    # the captions of one scene share its vector; scenes differ
    assert all(np.array_equal(vs[0], v) for vs in vectors.values() for v in vs)
    assert len({vs[0].tobytes() for vs in vectors.values()}) > 1
    assert read_manifest(tmp_path / "objects")["languages"] == read_manifest(world / "test")["languages"]


def test_a_split_outside_a_synthetic_world_is_refused_in_one_line(objects, world, tmp_path, capsys):
    (tmp_path / "lonely").mkdir()
    for path in (world / "test").iterdir():
        (tmp_path / "lonely" / path.name).write_bytes(path.read_bytes())
    assert objects.main(["--split", str(tmp_path / "lonely"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "world.yaml" in err and "\n" not in err


def test_the_meaning_model_puts_translations_together_and_reads_by_caption(objects, world, tmp_path):
    assert objects.main(["--split", str(world / "test"), "--out", str(tmp_path / "objects")]) == 0
    rows = np.load(tmp_path / "objects" / "meaning.npy")
    texts = json.loads((tmp_path / "objects" / "meaning.npy.texts.json").read_text(encoding="utf-8"))
    metas = [meta for _, _, _, meta in iter_raw(world / "test")]
    assert texts == [m["caption"] for m in metas] and rows.shape[0] == len(metas)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-5)
    same = [(i, j) for i in range(len(metas)) for j in range(len(metas)) if metas[i]["group"] == metas[j]["group"]]
    assert all(np.allclose(rows[i], rows[j]) for i, j in same)  # the captions of one scene are translations
    other = [(i, j) for i in range(len(metas)) for j in range(len(metas)) if metas[i]["meaning"] != metas[j]["meaning"]]
    assert all(rows[i] @ rows[j] < 1 - 1e-4 for i, j in other)


def test_the_cache_is_a_g_for_the_split_itself_keyed_by_image_id(objects, world, tmp_path, capsys):
    from globetrotter.evaluation.val_set import BackRetrievalSet

    assert objects.main(["--split", str(world / "val"), "--cache", str(tmp_path / "cache")]) == 0
    assert "features:" in capsys.readouterr().out and not (tmp_path / "copy").exists()
    val = BackRetrievalSet(world / "val", max_per_lang=None, image_features=f"features:{tmp_path / 'cache'}")
    world_cfg = objects.load_config(objects.SynthConfig, world / "world.yaml")
    expected = np.stack([objects.object_vector(objects.scene_of(world_cfg, i)) for i in val.image_ids])
    assert val.image_feats.shape == expected.shape and np.allclose(val.image_feats, expected)
    assert len(set(val.image_ids.tolist())) > 1


def test_neither_a_copy_nor_a_cache_asked_for_is_a_usage_error(objects, world):
    with pytest.raises(SystemExit) as exit_info:
        objects.main(["--split", str(world / "val")])
    assert exit_info.value.code == 2


def _copy_split(src, dst):
    dst.mkdir(parents=True)
    for path in src.iterdir():
        (dst / path.name).write_bytes(path.read_bytes())
    return dst


@pytest.mark.parametrize("where", ["itself", "inside", "holding", "other data"])
def test_an_out_that_would_delete_or_mix_with_data_is_refused_before_anything_is_written(objects, world, tmp_path,
                                                                                         capsys, where):
    root = tmp_path / "world"
    (root).mkdir()
    (root / "world.yaml").write_bytes((world / "world.yaml").read_bytes())
    split = _copy_split(world / "val", root / "val")
    other = _copy_split(world / "test", tmp_path / "elsewhere")
    out = {"itself": split, "inside": split / "objects", "holding": root, "other data": other}[where]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert objects.main(["--split", str(split), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and "\n" not in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (split / "objects").exists()


def test_an_earlier_copy_is_written_over(objects, world, tmp_path):
    out = tmp_path / "objects"
    assert objects.main(["--split", str(world / "test"), "--out", str(out)]) == 0
    first = read_manifest(out)
    assert objects.main(["--split", str(world / "test"), "--out", str(out)]) == 0
    assert read_manifest(out)["checksum"] == first["checksum"]


def test_a_cache_in_the_copys_folder_is_refused_before_the_copy_is_written(objects, world, tmp_path, capsys):
    out = tmp_path / "objects"
    assert objects.main(["--split", str(world / "test"), "--out", str(out), "--cache", str(out)]) == 2
    assert "--cache" in capsys.readouterr().err and not out.exists()


def test_the_colour_slot_counts_every_kind_of_that_colour(objects):
    """Two kinds of one colour (a red circle and a large red star) on stripes: 2 in the red slot, 1 in each shape's
    slots, 0.5 on the background (worked by hand from the module's slot layout)."""
    from types import SimpleNamespace

    kinds = (SimpleNamespace(shape="circle", colour="red", size="small"),
             SimpleNamespace(shape="star", colour="red", size="large"))
    v = objects.object_vector(SimpleNamespace(kinds=kinds, background=SimpleNamespace(kind="striped")))
    n_shapes, n_colours = len(SHAPES), len(COLOURS)
    circle, star, red = SHAPES.index("circle"), SHAPES.index("star"), list(COLOURS).index("red")
    expected = np.zeros(objects.DIM, np.float32)
    for s, large in ((circle, 0), (star, 1)):
        expected[s] = 1
        expected[n_shapes + n_colours * s + red] = 1
        expected[n_shapes + n_shapes * n_colours + 2 * s + large] = 1
    colour = n_shapes + n_shapes * n_colours + 2 * n_shapes
    expected[colour + red] = 2
    expected[colour + n_colours + BACKGROUNDS.index("striped")] = 0.5
    np.testing.assert_array_equal(v, expected)


def test_the_meaning_model_tells_apart_meanings_of_the_same_words_paired_otherwise(objects, tmp_path):
    """'large red circle; small blue square' and 'small red circle; large blue square' hold the same words: only the
    word pairs of the meaning tell them apart."""
    from data_prep.shard_writer import ShardWriter

    meanings = ["large red circle; small blue square", "small red circle; large blue square"]
    with ShardWriter(tmp_path / "split", split="test", source="unit", image_format="npy") as w:
        for i, meaning in enumerate(meanings):
            w.write(f"k{i}", np.zeros(3, np.float32), f"caption {i}", "en", f"test-{i}", f"g{i}", {"meaning": meaning})
    rows = np.load(objects.write_meaning_embeddings(tmp_path / "split", tmp_path / "meaning.npy"))
    assert rows[0] @ rows[1] < 1 - 1e-4


def test_a_scene_id_of_a_hyphenated_split_is_drawn_from_that_split(objects, world):
    """``train-parallel-4`` is scene 4 of split train-parallel (not split ``train``, index ``parallel-4``)."""
    from data_prep.synth.world import SPLIT_IDS, draw_scene

    cfg = objects.load_config(objects.SynthConfig, world / "world.yaml")
    assert objects.scene_of(cfg, "train-parallel-4") == draw_scene(cfg, SPLIT_IDS["train-parallel"], 4)[0]
    assert objects.scene_of(cfg, "train-parallel-4") != objects.scene_of(cfg, "train-4")


@pytest.mark.parametrize("image_id", ["img-4", "train-x", "train4", "train-"])
def test_an_image_id_that_is_no_scene_of_the_world_is_refused_naming_the_form(objects, world, image_id):
    cfg = objects.load_config(objects.SynthConfig, world / "world.yaml")
    with pytest.raises(UserError) as err:
        objects.scene_of(cfg, image_id)
    assert str(err.value) == f"image id {image_id!r}: not a synthetic scene id (<split>-<index>)"


def test_a_caption_without_a_meaning_is_refused_naming_the_split_and_nothing_is_written(objects, tmp_path):
    from data_prep.shard_writer import ShardWriter

    with ShardWriter(tmp_path / "split", split="test", source="unit", image_format="npy") as w:
        w.write("k0", np.zeros(3, np.float32), "a red circle", "en", "test-0", "g0", {"meaning": "red circle"})
        w.write("k1", np.zeros(3, np.float32), "a photo", "en", "test-1", "g1")
    with pytest.raises(UserError) as err:
        objects.write_meaning_embeddings(tmp_path / "split", tmp_path / "meaning.npy")
    assert str(err.value) == f"{tmp_path / 'split'}: caption 'a photo' has no 'meaning' (not a synthetic split)"
    assert list(tmp_path.iterdir()) == [tmp_path / "split"]
