"""Round two (``globetrotter-data features finetune``, globetrotter/training/backbone_finetune.py) on the tiny world: the
backbone fine-tuned to a frozen-backbone run's reading of each image's captions, cached, and trained on again."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from conftest import TINY, run_data_cli, strict_json
from data_prep.shards import read_captions
from globetrotter.config import load_train_config
from globetrotter.data.augment import eval_transform
from globetrotter.data.feature_cache import load_feature_cache
from globetrotter.data.feature_cache_build import unique_images
from globetrotter.errors import UserError
from globetrotter.evaluation.models import encode_texts, load_model
from globetrotter.models.image import create_image_backbone
from globetrotter.training.backbone_finetune import FEATURES, RECORD, TARGETS, WEIGHTS, mean_embeddings, own_captions
from globetrotter.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NARROW = {"channels": [16, 32, 64, 128], "stem_width": 16}  # TINY's ResNet-18


@pytest.fixture(scope="module")
def round_one(tiny_world, tmp_path_factory):
    """A run trained 2 steps on a frozen backbone's feature cache (its weights in a file), as configs/flickr8k.yaml."""
    root = tmp_path_factory.mktemp("round_one")
    torch.manual_seed(0)
    weights = root / "start.safetensors"
    save_file(create_image_backbone("resnet18", None, **NARROW).state_dict(), str(weights))
    cfg = load_train_config(None, [f"data.root={tiny_world}", f"data.tokenizer={root / 'tokenizer.json'}",
                                   f"output_dir={root}", *TINY, "steps=2", f"data.features={root / 'features'}",
                                   "data.feature_views=2", "model.freeze_image_backbone=true",
                                   f"model.image_pretrained={weights}"])
    train(cfg)
    return cfg.run_dir, weights


def test_mean_embeddings_averages_each_images_unit_caption_vectors():
    table = {"a": [3.0, 0.0], "b": [0.0, 1.0], "c": [0.0, -2.0]}
    out = mean_embeddings([["a", "b"], ["c"]], lambda texts: np.array([table[t] for t in texts]))
    np.testing.assert_allclose(out, [[2 ** -0.5, 2 ** -0.5], [0.0, -1.0]], atol=1e-6)


def test_own_captions_groups_by_image_and_names_an_image_without_any():
    metas = [{"image_id": 7, "caption": "a dog", "lang": "en"}, {"image_id": "8", "caption": "ein Hund", "lang": "de"},
             {"image_id": 7, "caption": "a brown dog", "lang": "en"}]
    assert own_captions(["8", "7"], metas) == [[("ein Hund", "de")], [("a dog", "en"), ("a brown dog", "en")]]
    with pytest.raises(UserError, match="image 9: no caption of it"):
        own_captions(["7", "9"], metas)


def test_round_two_fine_tunes_the_backbone_to_the_runs_readings_and_trains_on_its_cache(round_one, tiny_world,
                                                                                       tmp_path, capsys):
    run, start_weights = round_one
    split, out = tiny_world / "train", tmp_path / "round-two"
    argv = ["features", "finetune", str(split), "--from-run", str(run), "--out", str(out), "--epochs", "2",
            "--workers", "0"]
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 0, stderr[-2000:]
    assert f"model.image_pretrained={out / WEIGHTS} data.features={out / FEATURES}" in stdout
    assert ", 2 epochs at " in stdout
    # the targets: each image's mean cross-head embedding of its own captions under the run
    targets = load_feature_cache(out / TARGETS)
    metas = read_captions(split)
    image = str(metas[0]["image_id"])
    mine = [m for m in metas if str(m["image_id"]) == image]
    emb = encode_texts(load_model(str(run)), [m["caption"] for m in mine], [m["lang"] for m in mine], "cross")
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(targets.features[targets.row_of[image], 0], dtype=np.float32),
                               emb.mean(0) / np.linalg.norm(emb.mean(0)), atol=2e-3)  # stored as float16
    # the weights moved from the run's start, and the cache is theirs: its whole-image row is the tuned backbone's
    tuned, start = load_file(str(out / WEIGHTS)), load_file(str(start_weights))
    assert tuned.keys() == start.keys() and not torch.equal(tuned["conv1.weight"], start["conv1.weight"])
    record = json.loads((out / RECORD).read_text())
    assert len(record["losses"]) == 2 and all(np.isfinite(record["losses"]))
    assert record["versions"]["globetrotter"] and "torch" in record["versions"]  # as eval.py's records name them
    cache = load_feature_cache(out / FEATURES)
    image_id, _ext, data = next(unique_images(split))
    backbone = create_image_backbone("resnet18", str(out / WEIGHTS), **NARROW).eval()
    with torch.inference_mode():
        again = backbone(eval_transform(32)(Image.open(io.BytesIO(data)).convert("RGB"))[None])[0].numpy()
    np.testing.assert_allclose(np.asarray(cache.features[cache.row_of[image_id], 0], dtype=np.float32), again,
                               rtol=1e-2, atol=1e-2)
    assert cache.views == 2 and len(cache.row_of) == len({str(m["image_id"]) for m in metas})
    # round two: the run's config on the printed overrides trains (the cache matches what it expects)
    two = load_train_config(run / "config.yaml", [f"model.image_pretrained={out / WEIGHTS}",
                                                  f"data.features={out / FEATURES}", f"output_dir={tmp_path}",
                                                  "run_name=round-two", "steps=1"])
    assert train(two)["step"] == 1
    # again: nothing is redone; other settings into the same folder are refused in one line
    code, stdout, _ = run_data_cli(argv, capsys)
    assert code == 0 and "up to date" in stdout and "fine-tuning" not in stdout
    assert torch.equal(load_file(str(out / WEIGHTS))["conv1.weight"], tuned["conv1.weight"])
    code, _, stderr = run_data_cli(argv[:-4] + ["--epochs", "3", "--workers", "0"], capsys)
    assert code == 2 and "holds a fine-tune of other settings" in stderr and "'epochs': 2" in stderr


def test_the_readings_are_of_the_captions_of_the_runs_own_train_split(round_one, tiny_world, tmp_path, monkeypatch):
    """A run trained on ``data.train_split=mine`` (no split named train beside it) is read on mine's captions."""
    import shutil

    from globetrotter.training import backbone_finetune

    run, _ = round_one
    shutil.copytree(tiny_world / "train", tmp_path / "mine")
    cfg = load_train_config(run / "config.yaml", [f"data.root={tmp_path}", "data.train_split=mine"])
    monkeypatch.setattr(backbone_finetune, "run_config", lambda _run: cfg)
    metas = read_captions(tmp_path / "mine")
    ids = sorted({str(m["image_id"]) for m in metas})[:3]
    pairs = [[(m["caption"], m["lang"]) for m in metas if str(m["image_id"]) == i] for i in ids]
    encoder = load_model(str(run))
    expected = mean_embeddings(pairs, lambda flat: encode_texts(encoder, [c for c, _ in flat],
                                                                [lang for _, lang in flat], "cross"))
    np.testing.assert_allclose(backbone_finetune.model_readings(run, ids), expected, atol=1e-5)


def test_round_two_names_the_weights_it_read_and_refuses_a_run_that_saved_others_since(round_one, tiny_world,
                                                                                       tmp_path, capsys):
    """The record named the run folder only: after the run saved other weights (a new best/, same path) a rerun said
    "up to date" over readings of the old ones, and targets/cache.json named a temporary file that changed every run.
    The record now holds the checkpoint and its weights' sha256, and the targets name the checkpoint they read."""
    import shutil

    from globetrotter.evaluation.models import weights_sha256
    from globetrotter.training.checkpoint import resolve

    run = tmp_path / "run"
    shutil.copytree(round_one[0], run)
    out = tmp_path / "round-two"
    argv = ["features", "finetune", str(tiny_world / "train"), "--from-run", str(run), "--out", str(out),
            "--epochs", "1", "--workers", "0"]
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 0, stderr[-2000:]
    assert ", 1 epoch at " in stdout  # it said "1 epochs"
    checkpoint = str(resolve(run).resolve())
    record = json.loads((out / RECORD).read_text())
    assert record["checkpoint"] == checkpoint and record["weights_sha256"] == weights_sha256(checkpoint)
    source = json.loads((out / TARGETS / "cache.json").read_text())["imported"]["source"]
    assert source == f"readings of {checkpoint}"
    weights = resolve(run) / "model.safetensors"
    state = load_file(str(weights))
    name = next(iter(state))
    state[name] = state[name] + 0.5  # the run saved other weights under the same checkpoint path
    save_file(state, str(weights))
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 2 and "up to date" not in stdout and len(stderr.strip().splitlines()) == 1, stderr
    assert "holds a fine-tune of other settings (weights_sha256: " in stderr and "choose another folder" in stderr
    record.pop("checkpoint"), record.pop("weights_sha256")  # a fine-tune made before the record held them
    (out / RECORD).write_text(json.dumps(record))
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "does not record checkpoint, weights_sha256 (made by an older version)" in stderr


def test_a_diverged_epochs_nan_loss_is_null_in_the_record_which_a_rerun_still_reads(round_one, tiny_world, tmp_path,
                                                                                     capsys, monkeypatch):
    """finetune.json held each epoch's loss as Python writes a NaN (a bare NaN), which strict JSON readers refuse."""
    from globetrotter.training import backbone_finetune

    real = backbone_finetune.fine_tune

    def diverged(*args, **kwargs):
        backbone, head, losses = real(*args, **kwargs)
        return backbone, head, [float("nan")] * len(losses)

    monkeypatch.setattr(backbone_finetune, "fine_tune", diverged)
    out = tmp_path / "round-two"
    argv = ["features", "finetune", str(tiny_world / "train"), "--from-run", str(round_one[0]), "--out", str(out),
            "--epochs", "1", "--workers", "0"]
    code, _, stderr = run_data_cli(argv, capsys)
    assert code == 0, stderr[-2000:]
    assert strict_json((out / RECORD).read_text())["losses"] == [None]
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 0 and "up to date" in stdout, stderr[-2000:]


def test_round_two_no_progress_hides_its_bars_as_features_import_does(round_one, tiny_world, tmp_path, capsys):
    """`features finetune --no-progress` was "unrecognized arguments", while its siblings (import, concat) take it."""
    argv = ["features", "finetune", str(tiny_world / "train"), "--from-run", str(round_one[0]), "--out",
            str(tmp_path / "round-two"), "--epochs", "1", "--workers", "0", "--no-progress"]
    code, stdout, stderr = run_data_cli(argv, capsys)
    assert code == 0 and "next round: " in stdout, stderr[-2000:]
    assert not any(bar in stderr for bar in ("import targets.npy", "fine-tune", "features train")), stderr[-2000:]


def test_round_two_refuses_what_it_cannot_fine_tune_in_one_line(round_one, tiny_run, tiny_world, tmp_path, capsys):
    from globetrotter.config_io import save_config

    run, _ = round_one
    split = str(tiny_world / "train")
    imported = tmp_path / "imported-run"
    imported.mkdir()
    on_vectors = [f"data.root={tiny_world}", "data.features=auto", "model.image_backbone=imported", "loss.image=0",
                  "model.image_pretrained=clip", "model.freeze_image_backbone=true"]
    save_config(load_train_config(None, on_vectors), imported / "config.yaml")
    cases = [
        (["--from-run", str(tmp_path)], "no config.yaml (expected a trained run folder)"),
        (["--from-run", str(tiny_run)], "model.freeze_image_backbone=false"),  # a backbone trained from pixels
        (["--from-run", str(run), "--out", str(tiny_world)], "holds no fine-tune"),  # a folder of other things
        (["--from-run", str(imported)], "trained on imported image vectors (model.image_backbone=imported): there is "
                                        "no backbone to fine-tune"),
    ]
    for extra, message in cases:
        if "--out" not in extra:
            extra = [*extra, "--out", str(tmp_path / "out")]
        code, _, stderr = run_data_cli(["features", "finetune", split, *extra], capsys)
        assert code == 2 and message in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1
    for lr in ("-1", "0", "inf", "nan"):  # was: AdamW's traceback after the readings, or NaN weights
        code, _, stderr = run_data_cli(["features", "finetune", split, "--from-run", str(run), "--out",
                                        str(tmp_path / "out"), "--lr", lr], capsys)
        assert code == 2 and "argument --lr: expected a finite number > 0" in stderr
    code, _, stderr = run_data_cli(["features", "finetune", split, "--from-run", str(run), "--out",
                                    str(tmp_path / "out"), "--lr", "3e-4x"], capsys)
    assert code == 2 and "argument --lr: expected a number > 0, got '3e-4x'" in stderr
    assert not (tmp_path / "out").exists()


def test_round_two_refuses_a_split_smaller_than_one_batch_before_writing_anything(round_one, tmp_path, capsys):
    """Was: "24 images and 24 targets: need as many of each, at least one batch (32)", after targets/ was written."""
    from conftest import make_tiny_world

    run, _ = round_one
    split = make_tiny_world(tmp_path / "small", n_train=24, n_val=4, n_test=2) / "train"
    out = tmp_path / "out"
    code, stdout, stderr = run_data_cli(["features", "finetune", str(split), "--from-run", str(run), "--out", str(out)],
                                        capsys)
    assert code == 2 and stderr.strip().splitlines() == [
        f"error: {split} has 24 images, fewer than one batch of 32: fine-tuning the backbone needs at least 32"]
    assert not out.exists()  # no targets/ left behind


def test_round_two_from_a_run_folder_that_does_not_exist_says_not_found(tmp_path):
    from globetrotter.training.backbone_finetune import run_config

    with pytest.raises(UserError, match=rf"^{tmp_path / 'absent'}: run folder not found \(expected a trained run"):
        run_config(tmp_path / "absent")


def test_the_fine_tune_targets_are_the_readings_less_their_mean_at_unit_length():
    """The cosine loss's goal: what tells images apart (each reading less the readings' mean), not the direction all
    readings share (a model's captions all lean one way)."""
    from globetrotter.training.backbone_finetune import unit_centred_targets

    readings = np.array([[5.0, 1.0], [5.0, 3.0], [8.0, 2.0]])  # mean (6, 2)
    expected = np.array([[-1.0, -1.0], [-1.0, 1.0], [2.0, 0.0]])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(unit_centred_targets(readings).numpy(), expected, atol=1e-6)


def test_a_fine_tune_interrupted_before_its_weights_or_its_record_is_done_again(tmp_path):
    """--out holding this fine-tune's record but no weights (or only the weights' partial .tmp and the readings, no
    record) is unfinished: done again, not taken as done and not refused as another folder."""
    from backretrieval.records import json_text
    from globetrotter.training.backbone_finetune import _settled

    record = {"run": "r", "split": "s", "settings": {"epochs": 1}}
    (tmp_path / TARGETS).mkdir()
    (tmp_path / f"{WEIGHTS}.tmp").write_bytes(b"partial")
    assert _settled(tmp_path, record) is False  # no record yet: the leftovers of an interrupted run
    (tmp_path / RECORD).write_text(json_text({**record, "losses": [0.5]}))
    assert _settled(tmp_path, record) is False  # recorded, the weights never renamed into place
    (tmp_path / WEIGHTS).write_bytes(b"weights")
    assert _settled(tmp_path, record) is True


def test_the_fine_tunes_learning_rate_warms_up_over_a_tenth_of_the_steps_then_decays_to_zero(monkeypatch):
    """The lr each step ran at: a linear ramp from lr / w to lr over the first w = tenth of the steps, then a
    half cosine down towards 0; the head at head_lr on the same schedule."""
    import math

    from globetrotter.training.backbone_finetune import FinetuneSettings, fine_tune

    class Backbone(torch.nn.Module):
        num_features = 3

        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x.mean((2, 3)))

    seen = []
    step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        seen.append([group["lr"] for group in self.param_groups])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    images = []
    for i in range(8):
        buffer = io.BytesIO()
        Image.new("RGB", (4, 4), (30 * i, 255 - 30 * i, 7 * i)).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    settings = FinetuneSettings(epochs=5, batch_size=2, lr=0.1, head_lr=0.5)  # 20 steps: 2 of warm-up
    fine_tune(Backbone(), images, np.random.default_rng(0).normal(size=(8, 3)), eval_transform(4), settings,
              workers=0, progress=False)
    assert len(seen) == 20
    factors = [1 / 2, 2 / 2] + [0.5 * (1 + math.cos(math.pi * k / 18)) for k in range(18)]
    for (lr, head_lr), factor in zip(seen, factors):
        assert lr == pytest.approx(0.1 * factor) and head_lr == pytest.approx(0.5 * factor)
