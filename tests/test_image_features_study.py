"""experiments/study_image_features.py: the oracle image vectors leave out the caption Multi30K translated."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from conftest import load_experiment
from data_prep.converters.flickr8k import read_flickr8k
from data_prep.converters.multi30k import read_multi30k
from globetrotter.errors import UserError


@pytest.fixture(scope="module")
def study():
    return load_experiment("study_image_features")


@pytest.fixture
def sources(tmp_path):
    """A Flickr8k token file (two photos, three captions each) and a Multi30K task-1 folder whose English caption of
    photo 111 is a near copy of one of its Flickr8k captions (punctuation and case differ); photo 222 has none."""
    token = tmp_path / "Flickr8k.token.txt"
    token.write_text(
        "111_aaa.jpg#0\tA dog runs on the grass .\n"
        "111_aaa.jpg#1\tA brown dog is running through a T-shirt shop .\n"
        "111_aaa.jpg#2\tThe animal plays outside .\n"
        "222_bbb.jpg#0\tTwo children swim in a pool .\n"
        "222_bbb.jpg#1\tKids in the water .\n"
        "222_bbb.jpg#2\tA swimming pool with two kids .\n", encoding="utf-8")
    task = tmp_path / "multi30k" / "task1"
    (task / "image_splits").mkdir(parents=True)
    (task / "raw").mkdir()
    (task / "image_splits" / "train.txt").write_text("111.jpg\n333.jpg\n", encoding="utf-8")
    for lang, lines in {"en": ["a brown dog is running through a tshirt shop", "A cat sleeps ."],
                        "de": ["Ein brauner Hund rennt durch einen T-Shirt-Laden.", "Eine Katze schläft."]}.items():
        with gzip.open(task / "raw" / f"train.{lang}.gz", "wt", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return token, tmp_path / "multi30k"


def test_the_translated_caption_is_left_out_and_the_others_kept(study, sources):
    token, multi30k = sources
    kept = study.described_captions(["111_aaa", "222_bbb"], read_flickr8k(token, "en"), read_multi30k(multi30k, (1,)))
    assert kept[0] == ["A dog runs on the grass .", "The animal plays outside ."]
    assert len(kept[1]) == 3  # no Multi30K caption of photo 222: all kept
    # "T-shirt" and "tshirt" are one word, so the near copy's word set is the Multi30K caption's: Jaccard 1, which only
    # an overlap threshold of 1 lets through
    loose = study.described_captions(["111_aaa"], read_flickr8k(token, "en"), read_multi30k(multi30k, (1,)), overlap=1.0)
    assert len(loose[0]) == 3


def test_an_image_left_without_a_caption_is_named(study, sources, tmp_path):
    token, multi30k = sources
    with pytest.raises(UserError, match="image 444_ccc: no English Flickr8k caption left"):
        study.described_captions(["111_aaa", "444_ccc"], read_flickr8k(token, "en"), read_multi30k(multi30k, (1,)))


def test_from_model_writes_each_images_mean_caption_embedding_under_the_run(study, tiny_run, tiny_world, tmp_path):
    from data_prep.shards import read_captions
    from globetrotter.data.feature_cache import load_feature_cache
    from globetrotter.evaluation.models import encode_texts, load_model

    split = tiny_world / "train"
    assert study.main(["--split", str(split), "--from-model", str(tiny_run), "--out", str(tmp_path)]) == 0
    cache = load_feature_cache(tmp_path / f"self-{tiny_run.name}")
    metas = read_captions(split)
    image = str(metas[0]["image_id"])
    mine = [m for m in metas if str(m["image_id"]) == image]
    emb = encode_texts(load_model(str(tiny_run)), [m["caption"] for m in mine], [m["lang"] for m in mine], "cross")
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    expected = emb.mean(0) / np.linalg.norm(emb.mean(0))
    got = np.asarray(cache.features[cache.row_of[image], 0], dtype=np.float32)
    np.testing.assert_allclose(got, expected, atol=2e-3)  # stored as float16
    assert len(cache.row_of) == len({str(m["image_id"]) for m in metas})


def test_from_model_refuses_a_folder_that_is_not_a_run(study, tiny_world, tmp_path, capsys):
    assert study.main(["--split", str(tiny_world / "train"), "--from-model", str(tmp_path), "--out",
                       str(tmp_path / "out")]) == 2
    assert "no config.yaml (expected a trained run folder)" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["--flickr8k", "--multi30k"])
def test_a_caption_source_that_is_not_there_is_named_before_anything_is_read(study, sources, tiny_world, tmp_path,
                                                                             capsys, missing):
    """The sources' defaults are paths relative to the current folder. A missing Flickr8k file read as no caption
    and stopped the study on "no English Flickr8k caption left (of 0)" after the control's cache was written."""
    token, multi30k = sources
    given = {"--flickr8k": token, "--multi30k": multi30k, missing: tmp_path / "nowhere"}
    out = tmp_path / "out"
    argv = ["--split", str(tiny_world / "train"), "--out", str(out)]
    assert study.main(argv + [str(a) for flag, path in given.items() for a in (flag, path)]) == 2
    kind = "file" if missing == "--flickr8k" else "folder"
    assert capsys.readouterr().err.startswith(f"error: {missing} {tmp_path / 'nowhere'}: no such {kind} (from ")
    assert not out.exists()


def test_blend_gives_the_oracle_its_share_of_every_cosine(study):
    rng = np.random.default_rng(0)
    oracle, control = rng.normal(size=(20, 5)), rng.normal(size=(20, 7))

    def cosines(x):
        x = x - x.mean(axis=0)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return x @ x.T

    for share in (0.1, 0.5, 0.9):
        out = study.blend(oracle, control, share)
        assert out.shape == (20, 12) and out.dtype == np.float32
        np.testing.assert_allclose(out @ out.T, share * cosines(oracle) + (1 - share) * cosines(control), atol=1e-5)
    for share in (0.0, 1.0, 1.5):
        with pytest.raises(UserError, match=f"--blend {share:g}: the oracle's share must be between 0 and 1"):
            study.blend(oracle, control, share)


def test_own_captions_are_each_images_own_words_and_share_nothing_across_scripts(study, tiny_world, tmp_path):
    """The tiny world's languages write in disjoint scripts: two images of different languages share no n-gram, so
    their vectors are orthogonal; two images captioned alike have one vector; another colour in one language is near
    (the word for "square"), not the same."""
    from data_prep.shards import read_captions
    from globetrotter.data.feature_cache import load_feature_cache

    split = tiny_world / "train"
    assert study.main(["--split", str(split), "--own-captions", str(split), "--out", str(tmp_path)]) == 0
    cache = load_feature_cache(tmp_path / "own-captions")
    caption = {str(m["image_id"]): (m["caption"], m["lang"]) for m in read_captions(split)}
    assert sorted(cache.row_of) == sorted(caption)
    images = sorted(caption)
    v = np.asarray(cache.features[[cache.row_of[i] for i in images], 0], dtype=np.float32)
    cos = v @ v.T / np.outer(np.linalg.norm(v, axis=1), np.linalg.norm(v, axis=1))
    text = np.array([caption[i][0] for i in images])
    lang = np.array([caption[i][1] for i in images])
    same_text, same_lang = text[:, None] == text[None, :], lang[:, None] == lang[None, :]
    assert len(set(lang)) == 4 and (same_lang & ~same_text).any()
    np.testing.assert_allclose(cos[same_text], 1.0, atol=2e-3)  # stored as float16
    assert np.abs(cos[~same_lang]).max() < 2e-3
    assert 0.05 < cos[same_lang & ~same_text].max() < 0.95


def test_only_an_english_multi30k_caption_marks_a_flickr8k_caption_as_translated(study, sources, tmp_path):
    """The left-out caption is the one Multi30K's English caption copies; a caption of another language (here one
    that happens to spell the same words) marks nothing."""
    token, _ = sources
    task = tmp_path / "other" / "task1"
    (task / "image_splits").mkdir(parents=True)
    (task / "raw").mkdir()
    (task / "image_splits" / "train.txt").write_text("111.jpg\n", encoding="utf-8")
    for lang, line in {"en": "A cat sleeps .", "de": "a dog runs on the grass"}.items():
        with gzip.open(task / "raw" / f"train.{lang}.gz", "wt", encoding="utf-8") as fh:
            fh.write(line + "\n")
    kept = study.described_captions(["111_aaa"], read_flickr8k(token, "en"), read_multi30k(tmp_path / "other", (1,)))
    assert len(kept[0]) == 3


@pytest.mark.parametrize("bad", [["--overlap", "1.5"], ["--overlap", "0"], ["--threads", "0"], ["--threads", "-2"]])
def test_an_overlap_outside_0_1_or_threads_below_one_is_a_usage_error(study, bad, capsys):
    """A Jaccard overlap is in (0, 1) (1 would leave every translated caption in); the encoder needs a thread."""
    with pytest.raises(SystemExit) as stop:
        study.main(bad)
    assert stop.value.code == 2 and f"argument {bad[0]}: " in capsys.readouterr().err


def _flickr_split(tmp_path):
    """A split of the two photos of ``sources`` (one caption each) and its one-row-per-image control cache."""
    from data_prep.shard_writer import ShardWriter

    split = tmp_path / "split"
    with ShardWriter(split, split="train", source="unit", image_format="npy") as w:
        for i, image in enumerate(("111_aaa", "222_bbb")):
            w.write(f"k{i}", np.ones(4, np.float32), f"caption {i}", "en", image, f"g{i}")
    return split


class _WordCounts:
    """A stand-in sentence encoder: each text's counts of a few words (deterministic, offline)."""

    WORDS = ("dog", "grass", "animal", "children", "kids", "pool", "water", "brown", "the", "a")

    def __init__(self, threads: int = 2) -> None:
        pass

    def encode(self, texts):
        return np.array([[t.lower().split().count(w) + 0.1 for w in self.WORDS] for t in texts], np.float32)


def test_the_study_writes_the_control_the_described_vectors_and_their_blend_from_the_caches(study, sources, tmp_path,
                                                                                            monkeypatch, capsys):
    """The control is the feature cache as it is; each image's oracle vector is the mean of its kept captions'
    unit embeddings (photo 111's translated caption left out); a blend is made of those two caches as written."""
    import backretrieval.text_models
    from globetrotter.data.feature_cache import load_feature_cache

    token, multi30k = sources
    split, ids = _flickr_split(tmp_path), ["111_aaa", "222_bbb"]
    control = np.random.default_rng(0).normal(size=(2, 6)).astype(np.float32)
    cache = study.write_cache(split, control, ids, "control", tmp_path / "caches")
    monkeypatch.setattr(backretrieval.text_models, "USEEmbedder", _WordCounts)
    out = tmp_path / "out"
    assert study.main(["--split", str(split), "--cache", str(cache), "--flickr8k", str(token), "--multi30k",
                       str(multi30k), "--blend", "0.25", "--out", str(out)]) == 0

    def rows(name):
        c = load_feature_cache(out / name)
        return np.asarray(c.features[c.rows(ids, split), 0], dtype=np.float32)

    np.testing.assert_allclose(rows("efficientnet"), control, atol=1e-2)  # float16 storage
    kept = [["A dog runs on the grass .", "The animal plays outside ."],
            ["Two children swim in a pool .", "Kids in the water .", "A swimming pool with two kids ."]]
    for got, captions in zip(rows("described"), kept):
        emb = _WordCounts().encode(captions)
        mean = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).mean(0)
        np.testing.assert_allclose(got, mean / np.linalg.norm(mean), atol=2e-3)
    np.testing.assert_allclose(rows("blend-0.25"), study.blend(rows("described"), rows("efficientnet"), 0.25),
                               atol=2e-3)
    printed = capsys.readouterr().out
    assert "2 images; English captions per image after leaving out the translated one: 2.50" in printed
    assert all(f"run_name={name}-sS" in printed for name in ("efficientnet", "described", "blend-0.25"))


def test_a_blend_share_outside_0_1_is_refused_before_any_cache_is_written(study, sources, tmp_path, capsys):
    token, multi30k = sources
    out = tmp_path / "out"
    assert study.main(["--split", str(tmp_path / "nowhere"), "--flickr8k", str(token), "--multi30k", str(multi30k),
                       "--blend", "0.5", "--blend", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == "error: --blend 1: the oracle's share must be between 0 and 1 (exclusive)\n"
    assert not out.exists()
