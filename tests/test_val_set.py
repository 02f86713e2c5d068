"""BackRetrieval over a non-parallel split: per language pair (the trainer's selection) and across languages (the
ranking choice of `eval.py select`, whose queries retrieve among every other language's captions at once)."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.evaluation.val_set import BackRetrievalSet


def test_across_languages_is_per_pair_for_two_languages_and_sees_offsets_between_targets(tiny_world):
    bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=None, seed=0, image_features="pixels", ks=(1, 5))
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(len(bkr.texts), len(bkr.texts)))

    def given(src, tgt):
        return scores[np.ix_(src, tgt)]

    two = BackRetrievalSet(tiny_world / "val", max_per_lang=None, seed=0, image_features="pixels", ks=(1, 5))
    two.keep_languages(sorted(set(two.langs.tolist()))[:2])
    sub = {i: j for j, i in enumerate(np.flatnonzero(np.isin(bkr.langs, two.langs)))}
    two_scores = scores[np.ix_(list(sub), list(sub))]
    per_pair, _ = two.evaluate(text_scores=lambda s, t: two_scores[np.ix_(s, t)])
    across, hits = two.evaluate_across_languages(lambda s, t: two_scores[np.ix_(s, t)])
    assert across == per_pair and len(hits["val/bkr@1"]) == len(two.texts)
    # a score offset for one target language changes nothing within a pair, but wins every query across languages
    boosted_lang = sorted(set(bkr.langs.tolist()))[0]
    boost = np.where(bkr.langs == boosted_lang, 100.0, 0.0)[None, :]
    plain, _ = bkr.evaluate(text_scores=given)
    shifted, _ = bkr.evaluate(text_scores=lambda s, t: (scores + boost)[np.ix_(s, t)])
    assert shifted == plain
    before, before_hits = bkr.evaluate_across_languages(given)
    # each query's best candidate given (as eval.py select finds it, a block of rows at a time): the same figures
    best = {lang: scores[np.ix_(src, tgt)].argmax(axis=1) for lang, src, tgt in bkr.language_blocks()}
    by_best, best_hits = bkr.evaluate_across_languages(retrieved=best)
    assert by_best == before and all(np.array_equal(best_hits[k], before_hits[k]) for k in before_hits)
    after, _ = bkr.evaluate_across_languages(lambda s, t: (scores + boost)[np.ix_(s, t)])
    assert after != before


def test_sampled_set_decodes_only_the_images_it_keeps(tiny_world, monkeypatch):
    import data_prep.shards as shards
    from data_prep.shards import iter_samples

    decoded = []
    real = shards.decode_image
    monkeypatch.setattr(shards, "decode_image", lambda data, fmt: decoded.append(fmt) or real(data, fmt))
    bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=3, seed=0, image_features="pixels")
    everything = list(iter_samples(tiny_world / "val", decode_images=False))
    langs = sorted({s.lang for s in everything})
    assert len(decoded) == len(bkr.texts) == 3 * len(langs) < len(everything)
    # the kept captions are the split's own, with their own images' ids, three per language
    truth = {(s.caption, s.lang, s.image_id) for s in everything}
    assert set(zip(bkr.texts, bkr.langs.tolist(), bkr.image_ids.tolist())) <= truth
    assert sorted(bkr.langs.tolist()) == sorted(langs * 3)


def test_g_from_a_feature_cache_reads_its_rows_and_decodes_no_picture(tiny_world, tmp_path, monkeypatch):
    import data_prep.shards as shards
    from globetrotter.data.feature_import import import_embeddings, split_image_ids
    from globetrotter.errors import UserError

    ids = split_image_ids(tiny_world / "val")
    vectors = np.random.default_rng(0).normal(size=(len(ids), 6)).astype(np.float32)
    np.save(tmp_path / "emb.npy", vectors[::-1])  # the source's own order, not the split's
    (tmp_path / "ids.txt").write_text("\n".join(ids[::-1]) + "\n")
    cache = tmp_path / "cache"
    import_embeddings(tiny_world / "val", tmp_path / "emb.npy", cache, "toy", ids=tmp_path / "ids.txt", progress=False)
    monkeypatch.setattr(shards, "decode_image", lambda data, fmt: pytest.fail("a picture was decoded"))
    for max_per_lang in (None, 3):
        bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=max_per_lang, seed=0, image_features=f"features:{cache}")
        monkeypatch.undo()
        pixels = BackRetrievalSet(tiny_world / "val", max_per_lang=max_per_lang, seed=0, image_features="pixels")
        monkeypatch.setattr(shards, "decode_image", lambda data, fmt: pytest.fail("a picture was decoded"))
        # the same captions as with any other g, each with its own image's row of the cache
        assert bkr.texts == pixels.texts and (bkr.image_ids == pixels.image_ids).all()
        assert (bkr.langs == pixels.langs).all() and bkr.image_feats.dtype == np.float32
        row = {image: r for r, image in enumerate(ids)}
        expected = vectors[[row[i] for i in bkr.image_ids]].astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(bkr.image_feats, expected)
    # a cache that lacks an image of the split: one line naming the first missing id and the count
    import_embeddings(tiny_world / "val", tmp_path / "emb.npy", cache, "toy", ids=tmp_path / "ids.txt", progress=False,
                      force=True)
    train_cache = tmp_path / "train-cache"
    train_ids = split_image_ids(tiny_world / "train")
    np.save(tmp_path / "train.npy", np.ones((len(train_ids), 6), np.float32))
    (tmp_path / "train.txt").write_text("\n".join(train_ids) + "\n")
    import_embeddings(tiny_world / "train", tmp_path / "train.npy", train_cache, "toy", ids=tmp_path / "train.txt",
                      progress=False)
    with pytest.raises(UserError, match=rf"missing from the feature cache \(first: '{ids[0]}'\)"):
        BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features=f"features:{train_cache}")
    with pytest.raises(UserError, match="give its folder as features:PATH"):  # a run's shorthand, without the run
        BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features="features")


def test_a_runs_own_cache_as_g_needs_one_and_unknown_g_is_refused(tiny_world, tmp_path):
    from globetrotter.config import load_train_config
    from globetrotter.errors import UserError
    from globetrotter.evaluation.val_set import image_features_of

    base = [f"data.root={tiny_world}", "val.image_features=features"]
    with pytest.raises(UserError, match="val.image_features=features reads the run's image-feature cache"):
        load_train_config(None, base)
    with pytest.raises(UserError, match="val.image_features='pixel'"):
        load_train_config(None, [f"data.root={tiny_world}", "val.image_features=pixel"])
    cfg = load_train_config(None, base + [f"data.features={tmp_path / 'cache'}", "model.image_backbone=imported",
                                          "model.image_pretrained=toy", "model.freeze_image_backbone=true",
                                          "loss.image=0"])
    with pytest.raises(UserError, match="no imported embeddings here"):  # nothing imported yet: says how
        image_features_of(cfg, "val")
    assert image_features_of(load_train_config(None, [f"data.root={tiny_world}"]), "val") == "pixels"


def test_the_trainers_validation_runs_gs_network_on_the_training_device(tiny_world, tmp_path, monkeypatch):
    import backretrieval.images as images
    from accelerate import PartialState
    from conftest import TINY
    from globetrotter.config import load_train_config
    from globetrotter.training import trainer, validation

    made = []

    class Extractor:  # stands for the timm network: records where it would run, gives fixed-width features
        def __init__(self, name, weights, *, device, **_):
            made.append(device)

        def check(self):  # the model and weights: nothing to check for the stand-in
            pass

        def extract(self, pictures, ids):
            return np.random.default_rng(0).normal(size=(len(pictures), 8)).astype(np.float32)

    monkeypatch.setattr(images, "ImageFeatureExtractor", Extractor)
    bkr = validation.Validator(load_train_config(None, [f"data.root={tiny_world}", "val.image_features=timm:resnet18"]),
                               device="meta").val
    assert made == ["meta"] and bkr.image_feats.shape == (len(bkr.texts), 8)

    class Stop(Exception):
        pass

    handed = []

    def stop(cfg, device):
        handed.append(device)
        raise Stop

    monkeypatch.setattr(validation, "Validator", stop)
    cfg = load_train_config(None, [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}",
                                   f"output_dir={tmp_path}", *TINY, "val.every=1"])
    with pytest.raises(Stop):
        trainer.train(cfg)
    assert handed == [str(PartialState().device)]


def test_a_val_set_too_small_for_k_says_which_ks_cannot_tell_models_apart(tiny_world):
    """With at most K images in a language, back-retrieval ranks them all: BkR@K is 1 for any model, and a
    checkpoint chosen by it is chosen by a tie (the trainer warns)."""
    from globetrotter.evaluation.val_set import BackRetrievalSet

    val = BackRetrievalSet(tiny_world / "val", None, 0, "pixels", (1, 5, 10, 100))
    per_language = {lang: len(set(val.image_ids[val.langs == lang].tolist())) for lang in set(val.langs.tolist())}
    smallest = min(per_language.values())
    assert set(val.saturated_ks()) == {k for k in (1, 5, 10, 100) if k >= smallest} and 100 in val.saturated_ks()
    assert 1 not in val.saturated_ks() and f"({smallest} images)" in val.saturated_ks()[100]
    line = val.saturation_warning()
    assert line.startswith("warning: val/bkr@") and "is 1 for any model" in line and str(tiny_world / "val") in line


def test_the_set_says_a_saturated_k_once_not_once_per_pair_and_call(tiny_world, capsys):
    """BackRetrieval warns for each call whose pool is not above K; the val set says it in one line of its own, so
    a run's validation and select print no Python warning per language pair."""
    import warnings

    from globetrotter.evaluation.val_set import BackRetrievalSet

    val = BackRetrievalSet(tiny_world / "val", None, 0, "pixels", (1, 100))
    emb = np.random.default_rng(0).standard_normal((len(val.texts), 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        metrics, _ = val.evaluate(emb)
        across, _ = val.evaluate_across_languages(lambda s, t: emb[s] @ emb[t].T)
    assert metrics["val/bkr@100"] == across["val/bkr@100"] == 1.0 and val.saturation_warning() is not None


def test_gs_cached_features_are_of_the_splits_pictures_not_of_an_earlier_conversion(tmp_path):
    """g's features are cached beside the split by image id: a split converted again (--overwrite) with other
    pictures of the same ids read the earlier pictures' features in silence."""
    import shutil

    from conftest import make_tiny_world

    g = "timm:resnet18:random"
    world = make_tiny_world(tmp_path / "world", n_train=8, n_val=16, n_test=2, size=32)
    first = BackRetrievalSet(world / "val", max_per_lang=None, image_features=g).image_feats
    assert (world / "val" / "bkr-image-features").is_dir()
    shutil.move(world / "val" / "bkr-image-features", tmp_path / "kept")  # the conversion again: other pictures
    shutil.rmtree(world)
    make_tiny_world(tmp_path / "world", n_train=8, n_val=16, n_test=2, size=48)
    shutil.move(tmp_path / "kept", world / "val" / "bkr-image-features")  # ... beside the split's other files
    again = BackRetrievalSet(world / "val", max_per_lang=None, image_features=g).image_feats
    shutil.rmtree(world / "val" / "bkr-image-features")
    fresh = BackRetrievalSet(world / "val", max_per_lang=None, image_features=g).image_feats
    np.testing.assert_array_equal(again, fresh)
    assert not np.allclose(first, fresh)


def test_an_image_that_does_not_decode_or_a_one_language_split_is_one_line(tiny_world, tmp_path):
    """Was: PIL's ``OSError: Truncated File Read`` traceback (train.py at its start, eval.py select, eval.py
    retrieval); and, for a val split of one language, ``BackRetrievalError: evaluate_pairs: need captions in at least
    2 languages`` after a run's first training steps (``text_sim: 0 columns`` in select)."""
    import shutil

    from conftest import truncate_image
    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import iter_samples, read_captions
    from globetrotter.errors import UserError
    from globetrotter.evaluation.tasks.retrieval import _encode_images

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    for split in ("val", "test"):
        first = read_captions(world / split)[0]
        shard = truncate_image(world / split, first["key"])
        expected = f"{shard}: sample '{first['key']}' has a .png image that does not decode ("
        with pytest.raises(UserError) as err:
            if split == "val":
                BackRetrievalSet(world / "val", max_per_lang=None, image_features="pixels")
            else:
                _encode_images(None, world / "test", {str(first["image_id"]): 0}, batch_size=4)
        assert str(err.value).startswith(expected) and "\n" not in str(err.value), err.value
    one = tmp_path / "one"
    with ShardWriter(one, split="val", source="tiny", image_format="png") as writer:
        for sample in iter_samples(tiny_world / "val"):
            if sample.lang == "en":
                writer.write(sample.key, sample.image, sample.caption, sample.lang, image_id=sample.image_id)
    with pytest.raises(UserError, match=r"one: captions in 1 language\(s\) \(en\); BackRetrieval needs two or more"):
        BackRetrievalSet(one, max_per_lang=3, image_features="pixels")


@pytest.mark.parametrize("max_per_lang", [None, 4])
@pytest.mark.parametrize("num_samples", [10, 40])
def test_a_val_split_whose_manifest_counts_another_number_of_samples_is_refused(tiny_world, tmp_path, max_per_lang,
                                                                               num_samples):
    """Was: read in silence (a manifest saying 40 over shards holding 32), or, every caption read, a numpy
    broadcasting traceback for one saying fewer (10: what its image rows are allocated for)."""
    import json
    import shutil

    from globetrotter.errors import UserError

    split = tmp_path / "val"
    shutil.copytree(tiny_world / "val", split)
    path = split / "manifest.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), num_samples=num_samples)))
    with pytest.raises(UserError, match=f"^{path}: num_samples is {num_samples} but the shards hold 32 samples "):
        BackRetrievalSet(split, max_per_lang=None, seed=0, image_features="pixels", ks=(1,))


@pytest.mark.parametrize("max_per_lang", [None, 3])
def test_a_val_split_of_image_features_is_refused_by_a_g_that_reads_pictures(tmp_path, max_per_lang):
    """Was: ``AttributeError: 'numpy.ndarray' object has no attribute 'convert'`` (found by mypy:
    ``decode_sample_image`` gives an array for an ``npy`` split); such a split's rows reach g only as a cache."""
    from data_prep.shard_writer import ShardWriter
    from globetrotter.errors import UserError

    with ShardWriter(tmp_path / "val", split="val", source="unit", image_format="npy") as writer:
        for i in range(12):
            writer.write(f"s{i}", np.full(4, i, np.float32), f"caption {i}", ["en", "de"][i % 2], f"img{i}")
    with pytest.raises(UserError) as err:
        BackRetrievalSet(tmp_path / "val", max_per_lang=max_per_lang, image_features="pixels")
    assert str(err.value).startswith(f"{tmp_path / 'val'}: its samples are precomputed image features (npy, 4 dims)")
    assert "BackRetrieval with image features 'pixels' reads pictures" in str(err.value)


def test_pixel_features_are_centred_unit_thumbnails():
    """g = pixels: each thumbnail less its mean, at unit length, so a picture and a uniformly brighter copy of it are
    the same image to g."""
    from PIL import Image

    from globetrotter.evaluation.val_set import pixel_features

    picture = np.random.default_rng(0).integers(0, 200, size=(16, 16, 3)).astype(np.uint8)
    features = pixel_features([Image.fromarray(picture), Image.fromarray(picture + 40)])
    assert features.shape == (2, 16 * 16 * 3)
    np.testing.assert_allclose(features.mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0, atol=1e-5)
    assert features[0] @ features[1] == pytest.approx(1.0, abs=1e-5)


def test_a_language_block_leaves_out_the_candidates_showing_an_image_of_its_queries():
    bkr = BackRetrievalSet.__new__(BackRetrievalSet)  # the captions' languages and images are all it reads
    bkr.langs = np.array(["en", "de", "en", "fr", "de", "fr"])
    bkr.image_ids = np.array(["a", "a", "b", "c", "d", "b"])
    blocks = {lang: (src.tolist(), tgt.tolist()) for lang, src, tgt in bkr.language_blocks()}
    # en shows a and b: of the other languages' rows 1 (a), 3 (c), 4 (d), 5 (b) only 3 and 4 are its candidates
    assert blocks == {"de": ([1, 4], [2, 3, 5]), "en": ([0, 2], [3, 4]), "fr": ([3, 5], [0, 1, 4])}


def test_a_k_equal_to_a_languages_image_count_is_saturated():
    """K images in a language: back-retrieval ranks all K within the top K, so BkR@K is already 1 for any model."""
    bkr = BackRetrievalSet.__new__(BackRetrievalSet)  # the captions' languages and images are all it reads
    bkr.langs = np.array(["en"] * 6 + ["de"] * 7)
    bkr.image_ids = np.array([f"e{i // 2}" for i in range(6)] + [f"d{i}" for i in range(7)])  # en: 3 images
    bkr.ks = (1, 3, 4)
    assert bkr.saturated_ks() == {3: "en (3 images)", 4: "en (3 images)"}


def test_across_languages_the_figure_is_the_mean_over_source_languages_not_over_queries():
    """Two en queries and four de queries: each language's BkR counts once, worked by hand. Every query retrieves
    the first candidate; from its image, back-retrieval finds the nearest source image."""
    bkr = BackRetrievalSet.__new__(BackRetrievalSet)
    bkr.langs = np.array(["en", "en", "de", "de", "de", "de"])
    bkr.image_ids = np.array(["e0", "e1", "d0", "d1", "d2", "d3"])
    bkr.ks = (1,)
    feats = np.array([[1, 0], [0, 1], [1, 0.1], [1, 0.2], [0.1, 1], [0.2, 1]], dtype=np.float32)
    bkr.image_feats = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    # en: both find d0, whose nearest en image is e0: 1 of 2; de: all find e0, whose nearest de image is d0: 1 of 4
    metrics, hits = bkr.evaluate_across_languages(retrieved={"en": np.zeros(2, np.int64), "de": np.zeros(4, np.int64)})
    assert hits["val/bkr@1"].tolist() == [1, 0, 0, 0, 1, 0]  # de's queries first, then en's
    assert metrics["val/bkr@1"] == pytest.approx((1 / 4 + 1 / 2) / 2)


def test_no_split_an_unknown_language_pair_or_two_score_sources_are_refused(tiny_world, tmp_path):
    from globetrotter.errors import UserError

    with pytest.raises(UserError, match=f"^{tmp_path}: no split here \\(expected manifest.json\\) for BackRetrieval$"):
        BackRetrievalSet(tmp_path, image_features="pixels")
    bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=None, image_features="pixels", ks=(1,))
    found, n = sorted(set(bkr.langs.tolist())), len(bkr.texts)
    assert "en" in found and "xx" not in found
    with pytest.raises(UserError, match=f"BackRetrieval needs captions in two of en,xx; the split has {','.join(found)}$"):
        bkr.keep_languages(["xx", "en"])  # only en of the two is in the split
    assert len(bkr.texts) == len(bkr.langs) == n  # the refusal kept every caption
    bkr.keep_languages(found[:2])
    assert sorted(set(bkr.langs.tolist())) == found[:2] and len(bkr.texts) < n
    with pytest.raises(ValueError, match="give one of text_scores and retrieved"):
        bkr.evaluate_across_languages()


def test_every_caption_of_an_image_gets_its_one_decoded_picture(tmp_path, monkeypatch):
    """max_per_lang=None reads every caption in one pass: an image captioned twice is decoded once and both
    captions score against that picture's features."""
    from PIL import Image

    import data_prep.shards as shards
    from data_prep.shard_writer import ShardWriter

    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255), (255, 0, 255)]
    with ShardWriter(tmp_path / "val", split="val", source="unit", image_format="png") as writer:
        for copy in range(2):  # each image's second caption comes after every first one
            for i, colour in enumerate(colours):
                writer.write(f"s{copy}{i}", Image.new("RGB", (8, 8), colour), f"caption {copy} of {i}",
                             "en" if i < 3 else "de", f"img{i}")
    decoded = []
    real = shards.decode_sample_image
    monkeypatch.setattr(shards, "decode_sample_image", lambda *a: decoded.append(a[-1]) or real(*a))
    bkr = BackRetrievalSet(tmp_path / "val", max_per_lang=None, image_features="pixels", ks=(1,))
    assert sorted(decoded) == sorted(f"s0{i}" for i in range(6))  # each picture once, at its first caption
    assert len(bkr.texts) == 12 and bkr.image_ids.tolist() == [f"img{i}" for i in range(6)] * 2
    feats = bkr.image_feats.astype(np.float64)
    np.testing.assert_array_equal(feats[:6], feats[6:])  # a second caption has its image's features
    assert all(not np.allclose(feats[i], feats[j]) for i in range(6) for j in range(i))


def test_a_manifest_counting_fewer_images_than_a_decoded_chunk_holds_is_refused(tiny_world, tmp_path, monkeypatch):
    """The rows are allocated for the manifest's num_samples: a chunk that overflows them (a split of more than
    one chunk of images) is refused with the manifest's one-line error, before anything is written past them."""
    import json
    import shutil

    from globetrotter.errors import UserError
    from globetrotter.evaluation import val_set

    monkeypatch.setattr(val_set, "_CHUNK", 4)
    split = tmp_path / "val"
    shutil.copytree(tiny_world / "val", split)
    path = split / "manifest.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), num_samples=6)))
    with pytest.raises(UserError, match=f"^{path}: num_samples is 6 but the shards hold 32 samples "):
        BackRetrievalSet(split, max_per_lang=None, seed=0, image_features="pixels", ks=(1,))


def test_a_test_split_that_is_not_there_is_not_scored_and_the_validator_call_is_its_metrics(tiny_world, tiny_run,
                                                                                            tmp_path):
    """val.test_groups > 0 scores sentence translation on the test split when it is there; a data.test_split with no
    split folder leaves the test figures out (validation still scores val), never a crash mid-run."""
    import shutil

    import globetrotter
    from globetrotter.config import load_train_config
    from globetrotter.training.validation import Validator

    root = tmp_path / "world"
    shutil.copytree(tiny_world / "val", root / "val")
    encoder = globetrotter.load(tiny_run)
    without = Validator(load_train_config(None, [f"data.root={root}", "val.test_groups=4"]))
    assert without.test_dir is None
    metrics = without(encoder)
    assert metrics == without.evaluate(encoder)[0] and "val/bkr@1" in metrics
    assert not [k for k in metrics if k.startswith("test/")]
    shutil.copytree(tiny_world / "test", root / "test")
    scored = Validator(load_train_config(None, [f"data.root={root}", "val.test_groups=4"]))(encoder)
    assert {k: v for k, v in scored.items() if k.startswith("val/")} == metrics
    assert 0 <= scored["test/sentence_translation"] <= 1 and scored["test/sentence_translation_chance"] > 0
