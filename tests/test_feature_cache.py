"""The image-feature cache and the batches read from it (docs/design.md section 10), on the tiny world."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import PartialState
from safetensors.torch import load_file

import globetrotter
from conftest import run_data_cli
from data_prep.shards import iter_samples, read_captions
from globetrotter.config import load_train_config
from globetrotter.data.augment import eval_transform
from globetrotter.data.feature_batches import FeatureBatches
from globetrotter.data.feature_cache import CacheSpec, load_feature_cache, spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.data.neighbours import other_language_neighbours
from globetrotter.errors import UserError
from globetrotter.models.image import create_image_backbone
from globetrotter.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from globetrotter.training import checkpoint as ckpt
from globetrotter.training.trainer import train

REPO = Path(__file__).resolve().parents[1]
SMALL = {"channels": [8, 16, 16, 16], "stem_width": 8}


def small_spec(**kw) -> CacheSpec:
    base = dict(backbone="resnet18", weights="random", weights_sha256="", image_size=32, views=3, crop_scale_min=0.5,
                colour_jitter=0.4, hue_jitter=0.0, grayscale=0.0, hflip=True, seed=0)
    return CacheSpec(**{**base, **kw})


def small_backbone() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_image_backbone("resnet18", None, **SMALL)


@pytest.fixture(scope="module")
def cache_dir(tiny_world, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cache") / "features"
    build_feature_cache(tiny_world / "train", small_spec(), out, small_backbone(), batch_images=8, workers=0, progress=False)
    return out


@pytest.fixture(scope="module")
def tokenizer(tiny_world, tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    captions = [m["caption"] for split in ("train", "test") for m in read_captions(tiny_world / split)]
    save_tokenizer(train_tokenizer(captions, 300), path)
    return load_tokenizer(path)


def test_cache_holds_the_whole_image_then_distinct_augmented_views(tiny_world, cache_dir):
    cache = load_feature_cache(cache_dir, small_spec())
    samples = {s.image_id: s.image for s in iter_samples(tiny_world / "train")}
    assert cache.features.shape[:2] == (len(samples), 4) and cache.features.dtype == np.float16
    image_id = next(iter(samples))
    with torch.inference_mode():
        direct = small_backbone().eval()(eval_transform(32)(samples[image_id])[None])[0].numpy()
    row = cache.features[cache.row_of[image_id]].astype(np.float32)
    np.testing.assert_allclose(row[0], direct, rtol=2e-2, atol=2e-2)  # the view encode_image sees, in float16
    assert not np.allclose(row[1], row[2]) and not np.allclose(row[1], row[0])


def test_cache_is_the_same_for_any_worker_count(tiny_world, cache_dir, tmp_path):
    other = tmp_path / "features"
    build_feature_cache(tiny_world / "train", small_spec(), other, small_backbone(), batch_images=5, workers=1, progress=False)
    a, b = load_feature_cache(cache_dir), load_feature_cache(other)
    assert a.row_of == b.row_of
    np.testing.assert_array_equal(a.features, b.features)


def pixel_pool() -> torch.nn.Module:
    """A backbone whose output is the image itself, 4x4 average-pooled: features that tell images and views apart."""
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten())


def test_each_images_row_is_its_own_evaluation_view_then_its_augmented_views(tiny_world, tmp_path):
    """Row [i, 0] of image id i is that image through the evaluation transform (not an augmented view, not another
    image's row): checked for every image against the backbone applied to the image directly."""
    out = tmp_path / "features"
    build_feature_cache(tiny_world / "train", small_spec(views=2), out, pixel_pool(), batch_images=8, workers=0,
                        progress=False)
    cache = load_feature_cache(out, small_spec(views=2))
    samples = {s.image_id: s.image for s in iter_samples(tiny_world / "train")}
    ids = list(samples)
    with torch.inference_mode():
        direct = pixel_pool()(torch.stack([eval_transform(32)(samples[i]) for i in ids])).numpy()
    assert len({tuple(np.round(d, 1)) for d in direct}) == len(ids)  # the images differ far beyond float16's error
    rows = cache.features[cache.rows(ids, tiny_world / "train")].astype(np.float32)
    np.testing.assert_allclose(rows[:, 0], direct, atol=1e-2)
    assert not np.allclose(rows[:, 1], direct, atol=1e-2)  # the views come after the whole image


def test_augmented_views_are_drawn_per_image_so_two_copies_of_a_picture_get_other_views(tiny_world):
    """The views' generator is seeded by (seed, image index): the same picture at two places of a split gets the
    same whole-image row but other crops and jitter, and the same ones at every read."""
    from globetrotter.data.feature_cache_build import _Views, unique_samples

    _, ext, data, shard, key = next(unique_samples(tiny_world / "train"))
    views = _Views([data, data], small_spec(), [ext, ext], [(shard, key)] * 2)
    (a, _), (b, _) = views[0], views[1]
    torch.testing.assert_close(a[0], b[0])
    assert not torch.allclose(a[1:], b[1:])
    torch.testing.assert_close(views[1][0], b)


def test_max_images_caps_the_cache_at_that_many_first_images(tiny_world, tmp_path):
    from globetrotter.data.feature_import import split_image_ids

    out = tmp_path / "features"
    record = build_feature_cache(tiny_world / "train", small_spec(views=0), out, pixel_pool(), workers=0,
                                 progress=False, max_images=3)
    cache = load_feature_cache(out)
    assert record["images"] == 3 and cache.features.shape[0] == 3
    assert list(cache.row_of) == split_image_ids(tiny_world / "train")[:3]


def test_a_features_file_with_other_views_than_its_record_is_refused(tiny_world, tmp_path):
    out = tmp_path / "features"
    build_feature_cache(tiny_world / "train", small_spec(views=0), out, pixel_pool(), workers=0, progress=False)
    record = json.loads((out / "cache.json").read_text())
    record["spec"]["views"] = 2
    (out / "cache.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"shape \(\d+, 1, 48\), but cache.json records 2 views"):
        load_feature_cache(out)


def test_a_cache_built_for_other_settings_is_refused_naming_both(cache_dir):
    with pytest.raises(UserError, match=r"views=3 vs 4.*image_size=32 vs 64|image_size=32 vs 64.*views=3 vs 4"):
        load_feature_cache(cache_dir, small_spec(views=4, image_size=64))
    with pytest.raises(UserError, match="backbone='resnet18' vs 'efficientnet_lite0'"):
        load_feature_cache(cache_dir, small_spec(backbone="efficientnet_lite0"))


def _rewrite_manifest(split_dir: Path, **changes) -> None:
    manifest = json.loads((split_dir / "manifest.json").read_text())
    manifest.update(changes)
    (split_dir / "manifest.json").write_text(json.dumps(manifest))


def test_a_cache_read_for_its_own_rewritten_split_is_refused_naming_both_checksums(tiny_world, cache_dir, tmp_path):
    import shutil

    built = json.loads((cache_dir / "cache.json").read_text())["split_checksum"]
    assert built and built == json.loads((tiny_world / "train" / "manifest.json").read_text())["checksum"]
    assert load_feature_cache(cache_dir, small_spec(), tiny_world / "train").row_of  # its own split, unchanged
    # its own split by the folder it sits in (<split>/features), the checksum the same: accepted; rewritten: refused
    world = tmp_path / "world"
    shutil.copytree(tiny_world / "train", world / "train")
    shutil.copytree(cache_dir, world / "train" / "features")
    load_feature_cache(world / "train" / "features", small_spec(), world / "train")
    _rewrite_manifest(world / "train", checksum="sha256:rewritten")
    with pytest.raises(UserError) as err:
        load_feature_cache(world / "train" / "features", small_spec(), world / "train")
    assert "\n" not in str(err.value) and f"with checksum {built}, but the split's manifest now says sha256:rewritten" \
        in str(err.value) and "--overwrite" in str(err.value)
    # the way out rebuilds this very cache (rewrite_hint), not <split>/features of a command that cannot run
    assert f"features build {world / 'train'} --out {world / 'train' / 'features'} --overwrite (with the settings" \
        in str(err.value)
    # its own split by the folder recorded at build time, the cache elsewhere
    other = tmp_path / "elsewhere" / "features"
    build_feature_cache(world / "train", small_spec(), other, small_backbone(), workers=0, progress=False)
    _rewrite_manifest(world / "train", checksum="sha256:again")
    with pytest.raises(UserError, match=r"built from .*train with checksum sha256:rewritten, but the split's manifest "
                                        r"now says sha256:again"):
        load_feature_cache(other, small_spec(), world / "train")
    assert load_feature_cache(other, small_spec()).row_of  # read for no split: nothing to compare


def test_a_cache_was_built_from_a_split_or_the_split_its_more_captions_copy_took_its_images_from(
        tiny_world, cache_dir, tmp_path):
    import shutil

    from globetrotter.data.feature_cache import built_from_split

    built = json.loads((cache_dir / "cache.json").read_text())["split_checksum"]
    copy = tmp_path / "copy"
    shutil.copytree(tiny_world / "train", copy)
    assert built_from_split(cache_dir, copy)  # the very images: the same checksum
    _rewrite_manifest(copy, checksum="sha256:more-captions", more_captions={"original_checksum": built})
    assert built_from_split(cache_dir, copy)  # a more-captions copy of the cache's split: its images
    _rewrite_manifest(copy, more_captions={"original_checksum": "sha256:another"})
    assert not built_from_split(cache_dir, copy)
    assert not built_from_split(tmp_path, copy)  # no cache there


def test_a_cache_serves_a_more_captions_copy_and_other_splits_by_image_id(tmp_path, tokenizer):
    """The documented use (configs/flickr8k.yaml): the cache of the converted train split serves the more-captions
    copy of it (another checksum, the same image bytes) and the parallel split of the supervised twin."""
    from test_converters import cli
    from test_more_captions import convert_world

    w, data = convert_world(tmp_path)
    more = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "1,2", "--out", more,
                "--no-progress"]) == 0
    cache_path = data / "train" / "features"
    build_feature_cache(data / "train", small_spec(), cache_path, small_backbone(), workers=0, progress=False)
    built = json.loads((cache_path / "cache.json").read_text())["split_checksum"]
    manifest = json.loads((more / "train" / "manifest.json").read_text())
    assert manifest["checksum"] != built and manifest["more_captions"]["original_checksum"] == built
    cache = load_feature_cache(cache_path, small_spec(), more / "train")
    assert len(FeatureBatches(more / "train", cache, tokenizer, 4, 16).ids) > len(read_captions(data / "train"))
    # the parallel split (no record of where its images come from): served by image id
    load_feature_cache(cache_path, small_spec(), data / "train-parallel")
    # a more-captions copy of another version of the split: refused naming both checksums
    _rewrite_manifest(more / "train", more_captions={**manifest["more_captions"], "original_checksum": "sha256:older"})
    with pytest.raises(UserError, match=rf"built from a split with checksum {built}, but .*more/train copied its images "
                                        rf"from one with checksum sha256:older"):
        load_feature_cache(cache_path, small_spec(), more / "train")


def test_pairs_draw_any_caption_of_a_language_and_keep_the_sequence_of_groups(tmp_path, tokenizer):
    """Pairs batching over the more-captions copy of train-parallel (the twins' split with as many captions per image
    and language as the full model's): the train cache serves it by image id, each step pairs the same groups and
    languages as on the original split, and a side is any of the group's captions in its language."""
    from test_converters import cli
    from test_more_captions import convert_world

    w, data = convert_world(tmp_path)
    more = tmp_path / "more"
    assert cli(["more-captions", "--data", data, "--multi30k", w["m30k"], "--multi30k-tasks", "1,2", "--splits",
                "train,train-parallel", "--out", more, "--no-progress"]) == 0
    cache_path = data / "train" / "features"
    build_feature_cache(data / "train", small_spec(), cache_path, small_backbone(), workers=0, progress=False)
    cache = load_feature_cache(cache_path, small_spec(), more / "train-parallel")
    original = FeatureBatches(data / "train-parallel", cache, tokenizer, 4, 16, seed=1, batching="pairs")
    enriched = FeatureBatches(more / "train-parallel", cache, tokenizer, 4, 16, seed=1, batching="pairs")
    metas = {name: read_captions(split) for name, split in (("original", data / "train-parallel"),
                                                            ("enriched", more / "train-parallel"))}
    drawn = Counter()
    for step in range(60):
        a = [metas["original"][i] for i in original.global_indices(step)]
        b = [metas["enriched"][i] for i in enriched.global_indices(step)]
        assert [(m["group"], m["lang"]) for m in a] == [(m["group"], m["lang"]) for m in b]
        assert all(x["group"] == y["group"] and x["lang"] != y["lang"] for x, y in zip(b[0::2], b[1::2]))
        drawn.update(m["caption"].split()[1] for m in b if m["lang"] in ("en", "de"))
    assert drawn["parallel"] and drawn["independent"] > drawn["parallel"]  # 1 of 3 en/de captions is task 1's


def test_images_missing_from_the_cache_are_named_with_their_count(tiny_world, cache_dir, tokenizer):
    """A cache of another split (a config's data.features path kept for a new dataset) names the split it was built
    from and where the read split's own cache goes, not only 'build it again'."""
    cache = load_feature_cache(cache_dir)
    n_test_images = len({m["image_id"] for m in read_captions(tiny_world / "test")})
    with pytest.raises(UserError, match=rf"{n_test_images} image\(s\) of .*test are missing .*first: 'img\d+'") as err:
        FeatureBatches(tiny_world / "test", cache, tokenizer, 8, 16)
    message = str(err.value)
    assert f"built from another split, {(tiny_world / 'train').resolve()}" in message
    assert f"features build {tiny_world / 'test'} ... writes {tiny_world / 'test' / 'features'}" in message
    assert "data.features=auto" in message and len(message.splitlines()) == 1


@pytest.mark.parametrize("batching, batch, with_cache, message", [
    ("neighbours", 8, False, "data.batching=neighbours mines visual neighbours: it needs images"),
    ("neighbours", 7, True, "data.batching=neighbours needs an even batch size, got 7"),
    ("pairs", 7, True, "data.batching=pairs needs an even batch size, got 7"),
    ("groups", 8, True, "data.batching must be random, neighbours or pairs, got 'groups'"),
])
def test_a_batching_that_cannot_be_made_is_one_line(tiny_world, cache_dir, tokenizer, batching, batch, with_cache,
                                                    message):
    """Neighbour batches pair each image with a visual neighbour in another language (an image and its neighbour:
    an even batch, and images to mine), translation pairs fill a batch two by two."""
    cache = load_feature_cache(cache_dir) if with_cache else None
    with pytest.raises(UserError, match=f"^{message}"):
        FeatureBatches(tiny_world / "train", cache, tokenizer, batch, 16, batching=batching)


def test_batches_are_a_function_of_the_step_and_split_over_processes(tiny_world, cache_dir, tokenizer):
    cache = load_feature_cache(cache_dir)
    one = FeatureBatches(tiny_world / "train", cache, tokenizer, 16, 16, seed=3)
    resumed = iter(FeatureBatches(tiny_world / "train", cache, tokenizer, 16, 16, seed=3, start_step=5))
    for key, value in next(resumed).items():
        assert (value == one.batch(5)[key]) if isinstance(value, list) else torch.equal(value, one.batch(5)[key])
    halves = [FeatureBatches(tiny_world / "train", cache, tokenizer, 8, 16, seed=3, rank=r, world=2).batch(7) for r in (0, 1)]
    torch.testing.assert_close(torch.cat([h["view1"] for h in halves]), one.batch(7)["view1"])
    assert not torch.equal(one.batch(7)["view1"], one.batch(8)["view1"])
    # one epoch of random batches visits every caption once
    seen = np.concatenate([one.global_indices(s) for s in range(len(one.ids) // 16)])
    assert len(set(seen.tolist())) == len(seen)
    # the two views of a sample are two different augmented views (1..views) of its own image, never the whole image
    # (view 0, what encode_image sees), and every augmented view is drawn. The tiny world's plain squares often give
    # equal views, so the cache here is planted: each image's rows random and distinct, as a photo's would be.
    from globetrotter.data.feature_cache import FeatureCache

    metas = read_captions(tiny_world / "train")
    ids = sorted({m["image_id"] for m in metas})
    planted = FeatureCache(Path("planted"), np.random.default_rng(0).normal(size=(len(ids), 4, 8)).astype(np.float16),
                           {i: r for r, i in enumerate(ids)}, small_spec(views=3))
    stream = FeatureBatches(tiny_world / "train", planted, tokenizer, 16, 16, seed=3)
    drawn = set()
    for step in range(4):
        batch = stream.batch(step)
        for caption, v1, v2 in zip(stream.global_indices(step), batch["view1"], batch["view2"]):
            own = planted.features[ids.index(metas[caption]["image_id"])].astype(np.float32)  # [1 + views, 8]
            (a,) = [v for v in range(4) if np.array_equal(own[v], v1.numpy())]
            (b,) = [v for v in range(4) if np.array_equal(own[v], v2.numpy())]
            assert a != b and 0 not in (a, b), (a, b)
            drawn |= {a, b}
    assert drawn == {1, 2, 3}


def test_a_batch_holds_each_captions_whole_token_sequence(tiny_world, tokenizer):
    """The batch is cut to its longest caption, never shorter: each row's real tokens are the caption's encoding."""
    stream = FeatureBatches(tiny_world / "train", None, tokenizer, 8, 16, seed=1)
    metas = read_captions(tiny_world / "train")
    for step in range(3):
        batch = stream.batch(step)
        for row, ids, mask in zip(stream.global_indices(step), batch["input_ids"], batch["attention_mask"]):
            own = tokenizer.encode(metas[row]["caption"]).ids[:16]
            assert ids[mask.bool()].tolist() == own
        lengths = [len(tokenizer.encode(metas[row]["caption"]).ids[:16]) for row in stream.global_indices(step)]
        assert batch["input_ids"].shape[1] == max(lengths)
    assert len(set(lengths)) > 1  # captions of different lengths share the batch


def test_each_epoch_of_random_batches_is_a_fresh_permutation_of_every_caption(tiny_world, tokenizer):
    stream = FeatureBatches(tiny_world / "train", None, tokenizer, 4, 16, seed=3)
    n = len(stream.ids)
    order = np.concatenate([stream.global_indices(s) for s in range(-(-2 * n // 4))])
    first, second = order[:n], order[n:2 * n]
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(n))
    assert not np.array_equal(first, second)  # reshuffled, not the first epoch again


@pytest.mark.parametrize("views", [2, 3])
def test_both_views_are_any_two_distinct_augmented_views(tiny_world, tokenizer, views):
    """Every augmented view (1..views) is drawn as the first view and as the second, never the whole image (view 0),
    and a sample's two views differ; with two views a sample gets both (not its whole-image row twice)."""
    from globetrotter.data.feature_cache import FeatureCache

    metas = read_captions(tiny_world / "train")
    ids = sorted({m["image_id"] for m in metas})
    rng = np.random.default_rng(1)
    planted = FeatureCache(Path("planted"), rng.normal(size=(len(ids), views + 1, 8)).astype(np.float16),
                           {i: r for r, i in enumerate(ids)}, small_spec(views=views))
    stream = FeatureBatches(tiny_world / "train", planted, tokenizer, 16, 16, seed=5)
    first, second = set(), set()
    for step in range(6):
        batch = stream.batch(step)
        for caption, v1, v2 in zip(stream.global_indices(step), batch["view1"], batch["view2"]):
            own = planted.features[ids.index(metas[caption]["image_id"])].astype(np.float32)
            (a,) = [v for v in range(views + 1) if np.array_equal(own[v], v1.numpy())]
            (b,) = [v for v in range(views + 1) if np.array_equal(own[v], v2.numpy())]
            assert a != b and 0 not in (a, b)
            first.add(a)
            second.add(b)
    assert first == second == set(range(1, views + 1))


def test_neighbour_batches_draw_any_of_the_k_neighbours_not_only_the_nearest(tiny_world, tokenizer):
    from globetrotter.data.feature_cache import FeatureCache

    metas = read_captions(tiny_world / "train")
    ids = sorted({m["image_id"] for m in metas})
    feats = np.random.default_rng(2).normal(size=(len(ids), 3, 8)).astype(np.float16)
    cache = FeatureCache(Path("planted"), feats, {i: r for r, i in enumerate(ids)}, small_spec(views=2))
    k = 3
    stream = FeatureBatches(tiny_world / "train", cache, tokenizer, 16, 16, batching="neighbours", neighbours_k=k)
    ranks = set()
    for step in range(8):
        index = stream.global_indices(step)
        for a, m in zip(index[0::2], index[1::2]):
            ranks.add(stream.neighbours[stream.image_of[a]].tolist().index(stream.image_of[m]))
    assert ranks == set(range(k))


def test_neighbour_batches_pair_each_anchor_with_a_visual_neighbour_in_another_language(tiny_world, tokenizer):
    from globetrotter.data.feature_cache import FeatureCache

    metas = read_captions(tiny_world / "train")
    ids = sorted({m["image_id"] for m in metas})
    colour_of_image = {m["image_id"]: _colour_of(m["caption"]) for m in metas}
    colours = sorted(set(colour_of_image.values()))
    # planted features: an image looks like the colour its caption names, plus noise
    rng = np.random.default_rng(0)
    feats = rng.normal(scale=0.3, size=(len(ids), 3, 8)).astype(np.float16)
    for r, i in enumerate(ids):
        feats[r, :, colours.index(colour_of_image[i])] += 3
    cache = FeatureCache(Path("planted"), feats, {i: r for r, i in enumerate(ids)}, small_spec(views=2))
    batch = 16
    stream = FeatureBatches(tiny_world / "train", cache, tokenizer, batch, 16, batching="neighbours", neighbours_k=3)
    index = stream.global_indices(4)
    anchors, mates = index[0::2], index[1::2]
    assert len(index) == batch and len(anchors) == len(mates) == batch // 2  # the batch is anchor/mate pairs
    assert len(stream.batch(4)["input_ids"]) == batch
    for a, m in zip(anchors, mates):
        assert metas[a]["lang"] != metas[m]["lang"]
        assert stream.image_of[m] in stream.neighbours[stream.image_of[a]]
        assert _colour_of(metas[a]["caption"]) == _colour_of(metas[m]["caption"])


def _colour_of(caption: str) -> str:
    from conftest import WORDS

    for words in WORDS.values():
        for colour, word in words.items():
            if colour != "_" and caption.startswith(word):
                return colour
    return ""


def test_pair_batches_hold_two_languages_of_one_group(tiny_world, tokenizer):
    stream = FeatureBatches(tiny_world / "test", None, tokenizer, 8, 16, batching="pairs")
    metas = read_captions(tiny_world / "test")
    index = stream.global_indices(2)
    for a, b in zip(index[0::2], index[1::2]):
        assert metas[a]["group"] == metas[b]["group"] and metas[a]["lang"] != metas[b]["lang"]
    assert "view1" not in stream.batch(0)


def test_pair_groups_leave_out_groups_captioned_in_one_language_only():
    """A group with captions in one language (the others left out by data.train_languages) cannot give a pair of two
    languages: it is not a member; slots are (group, language), each with its captions in order."""
    from globetrotter.data.feature_batches import pair_groups

    groups = ["a", "a", "b", "b", "a", None, "c"]
    langs = ["en", "de", "en", "en", "en", "fr", "de"]
    members, slots = pair_groups(groups, langs, "split")
    named = [[slots[s] for s in group] for group in members]
    assert named == [[[0, 4], [1]]]  # only a: en (captions 0, 4) and de (caption 1)
    with pytest.raises(UserError, match="split: data.batching=pairs needs groups captioned in two or more languages"):
        pair_groups(["a", "a", "b"], ["en", "en", "de"], "split")


def test_a_translation_pair_never_joins_two_captions_of_one_language():
    """Two English captions of group g then a German one: the pair is (the later English caption, the German one);
    a caption without a group is dropped, a group never completed yields nothing."""
    from globetrotter.data.pipeline import pair_by_group

    samples = [(0, {"group": "g", "lang": "en"}), (1, {"group": "g", "lang": "en"}), (2, {"lang": "en"}),
               (3, {"group": "h", "lang": "de"}), (4, {"group": "g", "lang": "de"})]
    assert [(a[0], b[0]) for a, b in pair_by_group(iter(samples))] == [(1, 4)]


def test_pairing_forgets_the_oldest_waiting_caption_beyond_max_pending():
    """With room for two waiting captions, the third group's caption pushes out the first's (the oldest): its German
    caption then finds no partner and waits, while the third group pairs."""
    from globetrotter.data.pipeline import pair_by_group

    samples = [(0, {"group": "a", "lang": "en"}), (1, {"group": "b", "lang": "en"}), (2, {"group": "c", "lang": "en"}),
               (3, {"group": "a", "lang": "de"}), (4, {"group": "c", "lang": "de"})]
    assert [(a[0], b[0]) for a, b in pair_by_group(iter(samples), max_pending=2)] == [(2, 4)]
    assert [(a[0], b[0]) for a, b in pair_by_group(iter(samples), max_pending=3)] == [(0, 3), (2, 4)]


def test_streamed_pairs_mix_the_language_pairs_of_each_group():
    """Shards list a group's captions in one fixed language order; the pixel path's pairs must not follow it (it
    used to: en-de and fr-cs only, every time)."""
    import random
    from collections import Counter

    from globetrotter.data.pipeline import pairs_order

    langs = ["en", "de", "fr", "cs"]
    samples = [{"meta": {"group": g, "lang": lang}} for g in range(400) for lang in langs]
    flat = [s["meta"] for s in pairs_order(iter(samples), random.Random(0), buffer=200)]
    pairs = list(zip(flat[0::2], flat[1::2]))
    assert len(pairs) > 600
    assert all(a["group"] == b["group"] and a["lang"] != b["lang"] for a, b in pairs)
    share = Counter(frozenset((a["lang"], b["lang"])) for a, b in pairs)
    assert len(share) == 6 and min(share.values()) > 0.08 * len(pairs), share


def test_other_language_neighbours_match_a_brute_force_search():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 8)).astype(np.float32)
    langs = np.array(list("abc") * 20)
    found = other_language_neighbours(x, langs, 4)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    sim = unit @ unit.T
    sim[langs[:, None] == langs[None, :]] = -np.inf
    np.testing.assert_array_equal(found, np.argsort(-sim, axis=1)[:, :4])


def test_neighbour_recall_is_the_share_of_exact_neighbours_found_and_bad_arguments_are_refused():
    from globetrotter.data.neighbours import neighbour_recall

    exact, approx = np.array([[1, 2], [3, 4]]), np.array([[2, 5], [4, 3]])
    assert neighbour_recall(approx, exact) == 3 / 4  # order within a row does not matter
    with pytest.raises(ValueError, match=r"shapes differ: \(2, 1\) vs \(2, 2\)"):
        neighbour_recall(approx[:, :1], exact)
    x = np.ones((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"langs must have one entry per image \(4\), got shape \(3,\)"):
        other_language_neighbours(x, np.array(list("abc")), 1)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        other_language_neighbours(x, np.array(list("abab")), 0)


def test_inverted_file_neighbours_keep_other_languages_and_most_exact_neighbours():
    from globetrotter.data.neighbours import neighbour_recall

    rng = np.random.default_rng(0)
    scenes = rng.normal(size=(80, 16))
    x = (scenes[rng.integers(0, 80, 6000)] + 0.5 * rng.normal(size=(6000, 16))).astype(np.float32)
    langs = rng.choice(list("abcd"), 6000)
    exact = other_language_neighbours(x, langs, 5, method="exact")
    approx = other_language_neighbours(x, langs, 5, method="ivf", nprobe=8)
    assert (langs[approx] != langs[:, None]).all() and (approx >= 0).all()
    assert 0.9 <= neighbour_recall(approx, exact) < 1.0  # approximate, and close
    assert neighbour_recall(exact, exact) == 1.0
    np.testing.assert_array_equal(other_language_neighbours(x, langs, 5, method="auto"), exact)  # small: exact
    # with every list probed the inverted file is exact up to ties and the float16 rounding of its rows
    assert neighbour_recall(other_language_neighbours(x, langs, 5, method="ivf", nprobe=10_000), exact) > 0.995
    with pytest.raises(ValueError, match="unknown neighbour search"):
        other_language_neighbours(x, langs, 5, method="hnsw")


def test_k_may_equal_the_images_of_the_other_languages_but_not_exceed_them():
    """Three images in a, two in b: k=2 lists all of b for each a image (a's whole pool), in similarity order."""
    x = np.array([[1, 0], [0.8, 0.6], [0, 1], [0.6, 0.8], [1, 0.1]], dtype=np.float32)
    langs = np.array(["a", "b", "a", "b", "a"])
    found = other_language_neighbours(x, langs, 2)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    sim = unit @ unit.T
    sim[langs[:, None] == langs[None, :]] = -np.inf
    np.testing.assert_array_equal(found, np.argsort(-sim, axis=1, kind="stable")[:, :2])
    with pytest.raises(UserError, match=r"only 2 images are captioned in a language other than 'a', fewer than "
                                        r"data.neighbours_k=3"):
        other_language_neighbours(x, langs, 3)


def test_inverted_file_widens_the_search_when_the_probed_lists_hold_only_the_query_language():
    """Languages in far apart clusters: an inverted list holds one language, so probing one list finds no other-language
    image; those queries are searched again over every list and still get k other-language neighbours."""
    rng = np.random.default_rng(0)
    which = np.arange(512) % 4
    x = (10 * np.eye(8)[which] + 0.1 * rng.normal(size=(512, 8))).astype(np.float32)
    langs = np.where(which < 2, "a", "b")
    found = other_language_neighbours(x, langs, 3, method="ivf", nprobe=1)
    assert (found >= 0).all() and (langs[found] != langs[:, None]).all()
    from globetrotter.data.neighbours import neighbour_recall

    assert neighbour_recall(found, other_language_neighbours(x, langs, 3, method="exact")) > 0.95


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A small ResNet's weights in a file: the frozen backbone of the training tests."""
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("weights") / "small.safetensors"
    save_file(small_backbone().state_dict(), str(path))
    return path


def frozen_backbone(weights: Path, features: str | Path = "auto") -> list[str]:
    """Config overrides that train on the small backbone (its ``weights`` file) frozen, read from the feature cache
    ``features`` (built by the first run that needs it)."""
    return [f"data.features={features}", "data.feature_views=2", "model.freeze_image_backbone=true",
            f"model.image_pretrained={weights}", f"model.image_backbone_args.channels={SMALL['channels']}",
            f"model.image_backbone_args.stem_width={SMALL['stem_width']}"]


def _cfg(world: Path, out: Path, weights: Path, *extra: str):
    from conftest import TINY

    return load_train_config(None, [f"data.root={world}", f"data.tokenizer={out / 'tokenizer.json'}", f"output_dir={out}",
                                    *TINY, *frozen_backbone(weights), *extra])


def test_training_from_cached_features_builds_the_cache_and_gives_a_model_that_encodes_images(tiny_world, tmp_path, weights):
    import shutil

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    # one thread in both runs: the automatic count follows the machine's load, and another count sums in another order
    cfg = _cfg(world, tmp_path, weights, "steps=3", "checkpoint_every=3", "data.batching=neighbours", "data.neighbours_k=2",
               "threads=1")
    result = train(cfg)
    assert (world / "train" / "features" / "cache.json").is_file()
    assert spec_from_config(cfg) == load_feature_cache(world / "train" / "features").spec
    assert result["step"] == 3
    # the same run again finds the cache: it trains bit for bit as the run that built it (the views and the
    # backbone's init drew on the random state before the run was seeded)
    again = _cfg(world, tmp_path / "again", weights, "steps=3", "checkpoint_every=3", "data.batching=neighbours",
                 "data.neighbours_k=2", "threads=1")
    train(again)
    built, found = (load_file(ckpt.checkpoint_root(c.run_dir) / ckpt.step_name(3) / "model.safetensors") for c in (cfg, again))
    assert built.keys() == found.keys() and all(torch.equal(built[k], found[k]) for k in built)
    enc = globetrotter.load(cfg.run_dir)
    from PIL import Image

    assert enc.encode_image([Image.new("RGB", (40, 30), (200, 10, 10))]).shape == (1, 16)
    # another view count: refused, one line, exit 2, naming the cache and the setting
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), f"data.root={world}", f"output_dir={tmp_path}",
                           f"data.tokenizer={tmp_path / 'tokenizer.json'}", "data.vocab_size=300", "steps=1",
                           "data.workers=0", "data.synth=null",
                           "data.features=auto", "data.feature_views=3", "model.freeze_image_backbone=true",
                           f"model.image_pretrained={weights}",
                           "data.image_size=32", "model.image_backbone_args.channels=[8,16,16,16]",
                           "model.image_backbone_args.stem_width=8", "model.d_model=32", "model.layers=1", "model.heads=2",
                           "model.ffn=64", "batch_size=8", "val.every=0"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "views=2 vs 3" in last and "features" in last


def test_features_need_a_frozen_backbone_and_neighbours_need_features(tiny_world, tmp_path, weights):
    with pytest.raises(UserError, match="freeze_image_backbone"):
        _cfg(tiny_world, tmp_path, weights, "model.freeze_image_backbone=false")
    with pytest.raises(UserError, match="image_pretrained"):
        _cfg(tiny_world, tmp_path, weights, "model.image_pretrained=null")
    with pytest.raises(UserError, match="neighbours needs data.features"):
        _cfg(tiny_world, tmp_path, weights, "data.features=null", "data.batching=neighbours")


def test_features_cli_builds_then_reports_up_to_date_and_refuses_other_settings(tiny_world, tmp_path, weights, capsys):
    out = tmp_path / "cache"
    base = ["features", "build", str(tiny_world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
            "model.image_backbone_args.stem_width=8", "--out", str(out), "--workers", "0", "--image-model", "resnet18",
            "--image-weights", str(weights), "--image-size", "32", "--views", "2"]

    def run(argv: list[str]) -> tuple[int, str, str]:
        return run_data_cli(argv, capsys)

    code, stdout, stderr = run(base)
    assert code == 0, stderr[-2000:]
    assert "wrote" in stdout and json.loads((out / "cache.json").read_text())["spec"]["views"] == 2
    code, stdout, _ = run(base + ["--json"])  # --json was ignored when the cache was up to date
    assert code == 0 and "up to date" in stdout
    assert json.loads(stdout[stdout.index("{"):]) == json.loads((out / "cache.json").read_text())
    code, _, stderr = run(base[:-1] + ["3"])
    assert code == 2 and stderr.strip().splitlines()[-1].startswith("error:")
    assert "views=2 vs 3" in stderr.strip().splitlines()[-1]
    # the command's own way out, not training's (was: "rebuild it or point data.features elsewhere")
    assert stderr.strip().splitlines()[-1].endswith("); rebuild it with --overwrite, or build into another --out")


def test_features_build_no_progress_hides_the_bar_as_features_import_does(tiny_world, tmp_path, weights, capsys):
    """`features build --no-progress` was "unrecognized arguments", while its siblings (import, concat) take it."""
    base = ["features", "build", str(tiny_world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
            "model.image_backbone_args.stem_width=8", "--out", str(tmp_path / "cache"), "--workers", "0",
            "--image-model", "resnet18", "--image-weights", str(weights), "--image-size", "32", "--views", "0"]
    code, _, stderr = run_data_cli(base, capsys)
    assert code == 0 and "features train" in stderr, stderr[-2000:]  # the bar, on a stderr that is no terminal
    code, stdout, stderr = run_data_cli([*base, "--overwrite", "--no-progress"], capsys)
    assert code == 0 and "wrote" in stdout and "features train" not in stderr, stderr[-2000:]


def test_features_build_into_another_splits_cache_is_refused_and_a_killed_writes_tmp_is_removed(
        tiny_world, tmp_path, weights, capsys):
    out = tmp_path / "cache"
    base = ["features", "build", str(tiny_world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
            "model.image_backbone_args.stem_width=8", "--out", str(out), "--workers", "0", "--image-model", "resnet18",
            "--image-weights", str(weights), "--image-size", "32", "--views", "2"]
    code, _, stderr = run_data_cli(base, capsys)
    assert code == 0, stderr[-2000:]
    # the test split's images are not in the train split's cache: not "up to date"
    code, stdout, stderr = run_data_cli([base[0], base[1], str(tiny_world / "test"), *base[3:]], capsys)
    assert code == 2 and "up to date" not in stdout
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out}: ") and f"image(s) of {tiny_world / 'test'} are missing from this feature " \
        f"cache (first: " in last and f"an --out of its own, e.g. {tiny_world / 'test' / 'features'}" in last
    # a killed build's <out>.tmp is removed by the next build, and said so
    tmp = out.with_name("cache.tmp")
    tmp.mkdir()
    (tmp / "features.npy").write_bytes(b"partial")
    code, stdout, _ = run_data_cli(base, capsys)
    assert code == 0 and "up to date" in stdout and f"removed {tmp}, left by an interrupted cache write" in stdout
    assert not tmp.exists()


def test_a_build_inside_a_run_gives_the_backbone_the_cores_and_hands_back_the_runs_threads(tiny_world, tmp_path, weights,
                                                                                         monkeypatch):
    import shutil

    import globetrotter.data.feature_cache_build as feature_cache_build
    import globetrotter.threads as threads
    from globetrotter.data.feature_cache_build import ensure_feature_cache

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    monkeypatch.setattr(threads, "load_average", lambda: 0.0)
    seen = []
    real = feature_cache_build.build_feature_cache

    def build(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(feature_cache_build, "build_feature_cache", build)
    cfg = _cfg(world, tmp_path, weights, "data.workers=1")
    assert threads.choose_threads(cfg.data.workers).threads == 2  # the run's share beside its data worker
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        lines = []
        ensure_feature_cache(cfg, "train", lines.append)
        assert seen == [4] and torch.get_num_threads() == 2  # the build had the cores; the run has its share again
        assert "torch threads: 4" in lines[0]
    finally:
        torch.set_num_threads(before)


def test_a_run_builds_its_missing_cache_on_the_training_device(tiny_world, tmp_path, weights, monkeypatch):
    import shutil

    import globetrotter.data.feature_cache_build as feature_cache_build
    from globetrotter.training import trainer
    from globetrotter.training.prepare import ensure_data

    class Stop(Exception):
        pass

    handed = []

    def stop(cfg, log, device):
        handed.append(device)
        raise Stop

    monkeypatch.setattr(trainer, "ensure_data", stop)
    with pytest.raises(Stop):
        trainer.train(_cfg(tiny_world, tmp_path, weights))
    assert handed == [PartialState().device]  # the trainer hands its device to the data it prepares

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    seen, real = [], feature_cache_build.build_feature_cache

    def build(*args, device, **kwargs):  # a CPU machine has no second device: record it, build on the CPU
        seen.append(device)
        return real(*args, device="cpu", **kwargs)

    monkeypatch.setattr(feature_cache_build, "build_feature_cache", build)
    lines = []
    ensure_data(_cfg(world, tmp_path, weights), lines.append, device=torch.device("meta"))
    assert seen == ["meta"] and any("on meta)" in line for line in lines)
    record = json.loads((world / "train" / "features" / "cache.json").read_text())
    assert record["device"] == "cpu"  # the cache says where it was built


def test_features_cli_gives_the_backbone_the_cores_beside_its_decoding_worker(tiny_world, tmp_path, weights, capsys,
                                                                              monkeypatch):
    import globetrotter.threads as threads

    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "load_average", lambda: 0.0)
    code, stdout, stderr = run_data_cli(
        ["features", "build", str(tiny_world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
         "model.image_backbone_args.stem_width=8", "--out", str(tmp_path / "cache"), "--workers", "1", "--image-model",
         "resnet18", "--image-weights", str(weights), "--image-size", "32", "--views", "2"], capsys)
    assert code == 0, stderr[-2000:]
    assert "torch threads: 2 " in stdout  # the one-thread share of (1 + 1 worker) would leave a core idle


def test_an_image_that_does_not_decode_stops_a_build_in_one_line_naming_its_shard_and_sample(tiny_world, tmp_path,
                                                                                             weights, capsys):
    """Was: ``OSError: image file is truncated``, a traceback from the loader's worker (exit 1), in features build
    and in a run building its missing cache."""
    import shutil

    from conftest import truncate_image
    from globetrotter.data.feature_cache_build import ensure_feature_cache

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    key = read_captions(world / "train")[50]["key"]
    shard = truncate_image(world / "train", key)
    out = tmp_path / "cache"
    code, _, stderr = run_data_cli(
        ["features", "build", str(world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
         "model.image_backbone_args.stem_width=8", "--out", str(out), "--workers", "1", "--image-model", "resnet18",
         "--image-weights", str(weights), "--image-size", "32", "--views", "2"], capsys)
    last = stderr.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert last.startswith(f"error: {shard}: sample '{key}' has a .png image that does not decode ("), last
    assert not out.exists() and not out.with_name("cache.tmp").exists()  # nothing written
    with pytest.raises(UserError) as err:  # a run's own build (data.workers=0: decoded in this process)
        ensure_feature_cache(_cfg(world, tmp_path, weights), "train", lambda line: None)
    assert str(err.value).startswith(f"{shard}: sample '{key}' has a .png image that does not decode (")
    assert not (world / "train" / "features").exists()


def test_features_build_without_weights_warns_that_they_are_random(tiny_world, tmp_path, weights, capsys):
    """Was: a randomly initialised backbone's cache, said only by cache.json's "weights": "random"."""
    base = ["features", "build", str(tiny_world / "train"), "model.image_backbone_args.channels=[8,16,16,16]",
            "model.image_backbone_args.stem_width=8", "--workers", "0", "--image-model", "resnet18", "--image-size", "32",
            "--views", "0"]
    code, _, stderr = run_data_cli(base + ["--out", str(tmp_path / "random")], capsys)
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert code == 0 and json.loads((tmp_path / "random" / "cache.json").read_text())["spec"]["weights"] == "random"
    assert len(warnings) == 1 and "randomly initialised resnet18" in warnings[0], stderr[-2000:]
    assert "--image-weights package" in warnings[0] and "--image-weights FILE" in warnings[0]
    code, _, stderr = run_data_cli(base + ["--out", str(tmp_path / "file"), "--image-weights", str(weights)], capsys)
    assert code == 0 and "warning:" not in stderr


def test_features_build_refuses_a_folder_that_is_no_split_before_it_sets_threads_or_loads_a_backbone(tmp_path, capsys):
    code, stdout, stderr = run_data_cli(["features", "build", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and stdout == ""  # no threads line, no backbone
    assert stderr.strip() == f"error: {tmp_path / 'nowhere'}: split directory not found (expected a folder with " \
                             f"manifest.json and .tar shards)"


def test_features_build_without_a_config_asks_for_the_image_size_first(tiny_world, tmp_path, capsys):
    """Without --config the sizes would be the built-in defaults (64 px), which no ImageNet recipe trains with."""
    out = tmp_path / "cache"
    argv = ["features", "build", str(tiny_world / "train"), "--image-model", "resnet18", "--out", str(out)]
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 2 and stdout == "" and not out.exists()
    assert stderr.strip() == (f"error: features build {tiny_world / 'train'}: no --config and no --image-size; give the "
                              f"training config that will read the cache (--config), or the side of the views in "
                              f"pixels (--image-size, e.g. 224 for an ImageNet backbone): the built-in default is 64")


def test_no_image_asked_for_is_refused_before_any_work(tiny_world, tmp_path):
    """Was: ``max_images=0`` ran an empty loop and ended in ``'NoneType' object has no attribute 'flush'``."""
    out = tmp_path / "features"
    with pytest.raises(ValueError, match="max_images must be >= 1 or None, got 0"):
        build_feature_cache(tiny_world / "train", small_spec(), out, small_backbone(), workers=0, progress=False,
                            max_images=0)
    assert not out.exists()
