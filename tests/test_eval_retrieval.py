"""Text↔image retrieval Recall@K with CLIP_benchmark names, on hand-built embeddings."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.evaluation.procrustes import normalize_rows
from globetrotter.evaluation.retrieval import retrieval_per_language, retrieval_recall


def test_aligned_captions_and_images_give_recall_one():
    rng = np.random.default_rng(0)
    images = normalize_rows(rng.normal(size=(40, 16)))
    target = np.repeat(np.arange(40), 2)  # two captions per image
    text = images[target] + 0.01 * rng.normal(size=(80, 16))
    res = retrieval_recall(text, images, target)
    assert all(res[f"image_retrieval_recall@{k}"] == 1.0 for k in (1, 5, 10))
    assert all(res[f"text_retrieval_recall@{k}"] == 1.0 for k in (1, 5, 10))
    assert res["chance_image_retrieval_recall@10"] == pytest.approx(10 / 40)


def test_hand_computed_recall_both_directions():
    images = np.eye(3, dtype=np.float32)
    # caption 0 -> image 0 (hit@1); caption 1 (of image 1) is nearest image 2, then image 1
    text = np.array([[1, 0, 0], [0, 0.6, 0.8], [0, 0, 1]], dtype=np.float32)
    target = np.array([0, 1, 2])
    res = retrieval_recall(text, images, target, ks=(1, 2))
    assert res["image_retrieval_recall@1"] == pytest.approx(2 / 3)
    assert res["image_retrieval_recall@2"] == 1.0
    # image 2's nearest caption is caption 2 (1.0 > 0.8); image 1's nearest is caption 1 (0.6): all hit
    assert res["text_retrieval_recall@1"] == 1.0


def test_hand_computed_image_to_text_misses_over_the_images_with_a_caption():
    images = np.eye(4, dtype=np.float32)  # image 3 has no caption: it is no image->text query
    text = np.array([[1, 0, 0, 0], [0, 0.6, 0.8, 0], [0, 0.7, np.sqrt(0.51), 0]], dtype=np.float32)
    res = retrieval_recall(text, images, np.array([0, 1, 2]), ks=(1, 2))
    # image 1: caption 2 (0.7) before its own caption 1 (0.6); image 2: caption 1 (0.8) before caption 2 (0.71)
    assert res["text_retrieval_recall@1"] == pytest.approx(1 / 3)
    assert res["text_retrieval_recall@2"] == 1.0
    # caption 1 finds image 2 first (0.8 > 0.6); captions 0 and 2 their own images
    assert res["image_retrieval_recall@1"] == pytest.approx(2 / 3) and res["image_retrieval_recall@2"] == 1.0
    assert res["chance_image_retrieval_recall@1"] == pytest.approx(1 / 4)
    # image->text chance is over the 3 captioned images and the 3 captions: one caption each, 1 (or 2) of 3 drawn
    assert res["chance_text_retrieval_recall@1"] == pytest.approx(1 / 3)
    assert res["chance_text_retrieval_recall@2"] == pytest.approx(2 / 3)


def test_recall_refuses_captions_without_one_image_each_and_no_captions():
    images = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="^2 captions but 3 image indices$"):
        retrieval_recall(images[:2], images, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="^no captions to evaluate$"):
        retrieval_recall(np.zeros((0, 3), np.float32), images, np.array([], dtype=np.int64))


def test_image_to_text_chance_is_measured_by_captions_drawn_at_random():
    """On a split where few images are captioned in a language (each image in one language), image->text ranks
    only that language's captions: its chance is far above K / images (the command printed 1.7% for ~15%)."""
    rng = np.random.default_rng(3)
    images = rng.normal(size=(600, 8))
    target = np.repeat(rng.choice(600, 67, replace=False), rng.integers(1, 4, 67))  # 67 images, 1-3 captions
    res = retrieval_recall(rng.normal(size=(len(target), 8)), images, target, ks=(10,))
    chance = res["chance_text_retrieval_recall@10"]
    assert chance > 5 * res["chance_image_retrieval_recall@10"]
    draws = [np.mean([np.isin(np.flatnonzero(target == i), rng.choice(len(target), 10, replace=False)).any()
                      for i in np.unique(target)]) for _ in range(300)]  # K captions drawn at random
    assert np.mean(draws) == pytest.approx(chance, abs=0.01)


def test_random_embeddings_are_near_chance_and_per_language_means():
    rng = np.random.default_rng(1)
    images = rng.normal(size=(200, 32))
    text = rng.normal(size=(400, 32))
    target = np.tile(np.arange(200), 2)
    langs = np.repeat(["de", "en"], 200)
    res = retrieval_per_language(text, langs, images, target)
    assert set(res["per_language"]) == {"de", "en"}
    assert res["mean"]["image_retrieval_recall@10"] == pytest.approx(0.05, abs=0.03)
    assert res["mean"]["image_retrieval_recall@1"] == pytest.approx(
        np.mean([m["image_retrieval_recall@1"] for m in res["per_language"].values()]))
