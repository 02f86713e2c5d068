"""The linear image-pivot baseline of `eval.py sentence` (--model ridge:TRAIN_SPLIT)."""
from __future__ import annotations

import json
import sys
import shutil
from pathlib import Path

import numpy as np
import pytest

from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.errors import UserError
from globetrotter.evaluation import cli
from globetrotter.evaluation.pivot_ridge import PivotRidgeEncoder
from test_adapt import ColourPool
from test_feature_cache import small_spec


def eval_main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    return exit_info.value.code


@pytest.fixture(scope="module")
def train_split(tiny_world, tmp_path_factory) -> Path:
    """A copy of the tiny world's train split (the shared one keeps no cache) with a cache whose features
    name the square's colour, as a trained CNN's would."""
    split = tmp_path_factory.mktemp("ridge") / "train"
    shutil.copytree(tiny_world / "train", split)
    build_feature_cache(split, small_spec(), split / "features", ColourPool(), workers=0, progress=False)
    return split


def test_captions_of_disjoint_scripts_meet_through_their_predicted_images(tiny_world, train_split, tmp_path):
    """en/ru/el/ja share no character, so the TF-IDF floor is at chance; the per-language ridge maps to the image
    features find the translations (the captions name the colour, and so do the features). Three test groups
    share each colour, so a perfect model ranks 9 equal candidates for 3 places: 1/3 is the ceiling."""
    out = tmp_path / "eval"
    common = ["sentence", "--split", str(tiny_world / "test"), "--n-groups", "12", "--out", str(out)]
    assert eval_main(common + ["--model", f"ridge:{train_split}", "--name", "ridge"]) == 0
    assert eval_main(common + ["--model", "tfidf", "--name", "tfidf"]) == 0
    ridge = json.loads((out / "sentence-ridge.json").read_text())
    tfidf = json.loads((out / "sentence-tfidf.json").read_text())
    acc, floor = ridge["metrics"]["sentence_translation"], tfidf["metrics"]["sentence_translation"]
    chance = ridge["metrics"]["chance"]
    assert acc > 0.3 and acc > 3 * max(floor, chance), (acc, floor, chance)
    assert ridge["details"]["ridge"]["captions_per_language"] == {"el": 24, "en": 24, "ja": 24, "ru": 24}


def test_ridge_embeddings_are_unit_vectors_per_language_and_need_languages(tiny_world, train_split):
    enc = PivotRidgeEncoder(train_split)
    emb = enc.encode_text(["red a square", "красный квадрат"], langs=["en", "ru"])
    assert emb.shape == (2, 16) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert emb[0] @ emb[1] > 0.9, "the same colour in two languages predicts the same image"
    blue = enc.encode_text(["blue a square"], langs="en")[0]
    assert emb[0] @ blue < emb[0] @ emb[1]
    with pytest.raises(UserError, match="language"):
        enc.encode_text(["red a square"])


def test_the_fitted_ridge_embeds_no_image_and_is_no_trained_model(train_split, tmp_path):
    """A loaded ridge object is refused by the commands that need a trained model, as its spec ridge:SPLIT is."""
    from PIL import Image

    from globetrotter.evaluation.tasks.checks import require_trained

    enc = PivotRidgeEncoder(train_split)
    with pytest.raises(UserError, match="^model=ridge: is a text baseline fitted through images; it does not embed"):
        enc.encode_image([Image.new("RGB", (8, 8))])
    with pytest.raises(UserError) as by_object:
        require_trained(enc, "word")
    with pytest.raises(UserError) as by_spec:
        require_trained(f"ridge:{train_split}", "word")
    assert str(by_object.value) == str(by_spec.value)
    assert "model=ridge is a baseline" in str(by_object.value) and "word needs a trained run folder" in str(by_spec.value)
    with pytest.raises(UserError, match=r"\['xx'\]"):
        enc.encode_text(["red a square"], langs=["xx"])


def test_ridge_bad_input_is_one_line_exit_2(tiny_world, train_split, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["eval.py"])  # messages name the command as it was started
    split = ["--split", str(tiny_world / "test"), "--out", str(tmp_path)]
    assert eval_main(["sentence", "--model", f"ridge:{tmp_path / 'nowhere'}", *split]) == 2
    assert "no split here" in capsys.readouterr().err
    assert eval_main(["sentence", "--model", f"ridge:{tiny_world / 'val'}", *split]) == 2  # no feature cache
    assert "no feature cache" in capsys.readouterr().err
    assert eval_main(["cluster", "--model", f"ridge:{train_split}", *split]) == 2
    assert "baseline of `eval.py sentence` and `select` only" in capsys.readouterr().err


def test_a_more_captions_split_without_a_cache_reads_its_origins(train_split, tmp_path):
    """`globetrotter-data more-captions` keeps image ids and records the split it was made from; the baseline
    fitted on it finds that split's cache, as README's `ridge:outputs/flickr8k-more/train` needs."""
    more = tmp_path / "more" / "train"
    shutil.copytree(train_split, more, ignore=shutil.ignore_patterns("features"))
    manifest = json.loads((more / "manifest.json").read_text())
    (more / "manifest.json").write_text(json.dumps({**manifest, "more_captions": {"from": str(train_split)}}))
    enc = PivotRidgeEncoder(more)
    assert enc.features == train_split / "features"
    np.testing.assert_allclose(enc.encode_text(["red a square"], langs="en"),
                               PivotRidgeEncoder(train_split).encode_text(["red a square"], langs="en"), atol=1e-6)
    (more / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="no feature cache"):
        PivotRidgeEncoder(more)


def test_the_ridge_targets_are_the_whole_images_not_an_augmented_view(train_split):
    """Each caption's target is its image's whole-image row of the cache (row 0, the evaluation view), L2-normalised;
    the centre is their mean over the train captions. The augmented views (colour jitter) differ from it."""
    from data_prep.shards import read_captions
    from globetrotter.data.feature_cache import load_feature_cache

    cache = load_feature_cache(train_split / "features")
    rows = cache.rows([str(m["image_id"]) for m in read_captions(train_split)], train_split)
    features = np.asarray(cache.features[rows], dtype=np.float64)
    unit = features / np.linalg.norm(features, axis=2, keepdims=True)
    assert not np.allclose(unit[:, 0].mean(0), unit[:, -1].mean(0), atol=1e-3)  # the views tell apart
    np.testing.assert_allclose(PivotRidgeEncoder(train_split).centre, unit[:, 0].mean(0), atol=1e-5)
