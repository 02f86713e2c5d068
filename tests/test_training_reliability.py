"""Reliability of training runs: a killed run resumes exactly, bad shards are skipped, a failed
checkpoint write keeps the previous checkpoint."""
from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from globetrotter.config_io import save_config
from globetrotter.data.pipeline import make_train_loader
from globetrotter.data.stream import StreamPosition
from globetrotter.errors import UserError
from globetrotter.tokenizer import load_tokenizer
from globetrotter.training import checkpoint as ckpt
from globetrotter.training.trainer import train

from test_training import REPO, tiny_cfg  # tests/ is on sys.path (rootless conftest dir)


def _tokenizer(world: Path, out: Path):
    from globetrotter.tokenizer import train_tokenizer_on_split

    path = out / "tokenizer.json"
    if not path.is_file():  # with its provenance record, as a run trains it
        train_tokenizer_on_split(world / "train", path, 300)
    return load_tokenizer(path)


def _batches(world: Path, tok, n: int, workers: int, position: StreamPosition | None = None, start: int = 0,
             batching: str = "random") -> list[dict]:
    from globetrotter.data.augment import simclr_transform
    from globetrotter.data.views import CpuViews

    loader = make_train_loader(str(world / "train"), tok, 8, 16, CpuViews(simclr_transform(32)), shuffle_buffer=50,
                               workers=workers, seed=3, batching=batching, position=position, start_step=start)
    it = iter(loader)
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_resumed_from_a_position_continues_the_same_batches(tiny_world, tmp_path, workers):
    """Batches k.. of a stream restarted from the position after k batches equal the uninterrupted ones."""
    tok = _tokenizer(tiny_world, tmp_path)
    full = _batches(tiny_world, tok, 7, workers)
    position = StreamPosition(max(1, workers))
    for batch in full[:3]:
        position.consume(dict(batch), max_bad=0)
    assert sum(position.cursors) == 3 * 8 and all(c > 0 for c in position.cursors)
    resumed = _batches(tiny_world, tok, 4, workers, position=position, start=3)
    for a, b in zip(full[3:], resumed):
        assert a["stream/worker"] == b["stream/worker"] and a["stream/cursor"] == b["stream/cursor"]
        assert torch.equal(a["input_ids"], b["input_ids"])
        assert torch.equal(a["view1"], b["view1"]) and torch.equal(a["view2"], b["view2"])  # same augmentations
    assert not torch.equal(full[3]["view1"], full[4]["view1"])


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_killed_run_resumes_bit_for_bit(tiny_world, tmp_path, workers):
    """SIGKILL a real training process after a checkpoint, resume it: the same final weights as an uninterrupted run."""
    steps, every = 24, 8
    cfg = tiny_cfg(tiny_world, tmp_path, f"steps={steps}", f"checkpoint_every={every}", f"data.workers={workers}",
                   "keep_checkpoints=5")
    config = tmp_path / "tiny.yaml"
    save_config(cfg, config)
    logs = [tmp_path / "full.log", tmp_path / "killed.log", tmp_path / "resumed.log"]

    def run(name: str, log: Path, *extra: str) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        return subprocess.Popen([sys.executable, "train.py", "--config", str(config), f"run_name={name}", *extra],
                                cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def finish(proc: subprocess.Popen, log: Path) -> None:
        assert proc.wait(300) == 0, log.read_text()[-3000:]

    finish(run("full", logs[0]), logs[0])
    killed = run("killed", logs[1])
    latest = ckpt.checkpoint_root(tmp_path / "killed") / ckpt.LATEST
    deadline = time.monotonic() + 240
    while not latest.is_file() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(30) == -signal.SIGKILL, "the run ended before it could be killed: " + logs[1].read_text()[-2000:]
    start = int(latest.read_text().strip().split("-")[1])
    assert 0 < start < steps
    finish(run("killed", logs[2], "--resume", "latest"), logs[2])
    assert f"at step {start}" in logs[2].read_text()

    final = ckpt.step_name(steps)
    a = load_file(ckpt.checkpoint_root(tmp_path / "full") / final / "model.safetensors")
    b = load_file(ckpt.checkpoint_root(tmp_path / "killed") / final / "model.safetensors")
    assert a.keys() == b.keys()
    diff = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert diff == 0.0, f"resumed from step {start}: max |dw| = {diff}"


def _rewrite_shard(path: Path, corrupt_first_image: bool, truncate: bool) -> None:
    """Replace the first sample's image bytes with garbage and/or cut the shard in half."""
    members = []
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            members.append((m, tar.extractfile(m).read()))
    if corrupt_first_image:
        first = next(i for i, (m, _) in enumerate(members) if m.name.endswith(".png"))
        members[first] = (members[first][0], b"this is not a png")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for m, data in members:
            m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    data = buf.getvalue()
    path.write_bytes(data[: len(data) // 2] if truncate else data)


def _broken_world(tiny_world: Path, dest: Path, corrupt_images: bool, truncate: int) -> Path:
    """A copy of the tiny world, with a corrupt image in every train shard (``corrupt_images``) and
    train shard number ``truncate`` cut in half."""
    shutil.copytree(tiny_world, dest)
    shards = sorted((dest / "train").glob("*.tar"))
    assert len(shards) >= 2
    for i, shard in enumerate(shards):
        _rewrite_shard(shard, corrupt_first_image=corrupt_images, truncate=i == truncate)
    return dest


def _scalars(run_dir: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = []
    for events in (run_dir / "tensorboard").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            values += [e.value for e in acc.Scalars(tag)]
    return values


@pytest.mark.parametrize("workers", [0, 1])
def test_bad_samples_are_skipped_counted_and_limited(tiny_world, tmp_path, workers):
    """A corrupt image and a truncated shard met mid-run: skipped, counted (TensorBoard, result.json); too many
    stop the run with a one-line error naming the shard. (Tokenizers from the intact world: the shards broke later.)"""
    for run in ("ok", "strict"):
        (tmp_path / run).mkdir()
        _tokenizer(tiny_world, tmp_path / run)
    bad_world = _broken_world(tiny_world, tmp_path / "bad_world", corrupt_images=True, truncate=0)
    cfg = tiny_cfg(bad_world, tmp_path / "ok", "steps=6", "checkpoint_every=6", f"data.workers={workers}")
    result = train(cfg)
    assert result["step"] == 6 and (ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(6)).is_dir()
    saved = json.loads((cfg.run_dir / "result.json").read_text())
    # 3 corrupt images and the truncated shard's broken tail, each counted once though met again and again
    assert 2 <= saved["bad_samples"] == result["bad_samples"] <= 5
    logged = _scalars(cfg.run_dir, "data/bad_samples")
    assert logged and logged[-1] == saved["bad_samples"] and logged == sorted(logged)

    # only train-000001.tar is broken (truncated): the run stops at its first bad sample and names it
    one_bad = _broken_world(tiny_world, tmp_path / "one_bad", corrupt_images=False, truncate=1)
    strict = tiny_cfg(one_bad, tmp_path / "strict", "steps=40", f"data.workers={workers}", "data.max_bad_samples=0")
    with pytest.raises(UserError, match=r"train-000001\.tar: 1 distinct bad samples skipped .*data\.max_bad_samples=0") as err:
        train(strict)
    assert "\n" not in str(err.value)


def test_a_train_split_whose_manifest_counts_another_number_of_samples_is_refused_at_the_start(tiny_world, tmp_path):
    """The stream draws shards with replacement and never counts a split; the start reads every caption's json
    (the one-language check), where a manifest that does not describe its shards is now refused in one line
    (it trained in silence), before a tokenizer or model is built."""
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    path = world / "train" / "manifest.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), num_samples=95)))
    with pytest.raises(UserError, match=f"^{path}: num_samples is 95 but the shards hold 96 samples "):
        train(tiny_cfg(world, tmp_path / "run", "steps=2"))
    assert not (tmp_path / "run" / "tokenizer.json").exists()


def test_a_run_folder_holds_one_run(tiny_world, tmp_path):
    """A fresh run refuses a folder that holds one; a resume refuses a changed config and a finished run, before
    writing anything; steps and the other RUN_KEYS may change."""
    from globetrotter.training.resume import RUN_KEYS

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    train(cfg)
    config, result = (cfg.run_dir / name for name in ("config.yaml", "result.json"))
    before = config.read_text(), result.read_text()
    with pytest.raises(UserError, match=r"already holds a run \(step-00000002\); continue it with resume=latest"):
        train(tiny_cfg(tiny_world, tmp_path, "steps=2", "val.every=0", "seed=3"))
    with pytest.raises(UserError, match=r"the config differs from the checkpoint's \(seed: 0 -> 7\)"):
        train(tiny_cfg(tiny_world, tmp_path, "steps=4", "val.every=0", "seed=7"), resume="latest")
    with pytest.raises(UserError, match=r"model\.d_model: 32 -> 64, model\.ffn: 64 -> 128"):
        train(tiny_cfg(tiny_world, tmp_path, "steps=4", "val.every=0", "model.d_model=64", "model.ffn=128"),
              resume="latest")
    with pytest.raises(UserError, match="already trained to step 2 of steps=2; raise steps"):
        train(cfg, resume="latest")
    assert (config.read_text(), result.read_text()) == before  # nothing rewritten
    assert {"steps", "log_every", "data.workers"} <= RUN_KEYS
    longer = train(tiny_cfg(tiny_world, tmp_path, "steps=3", "checkpoint_every=2", "val.every=0", "log_every=1"),
                   resume="latest")
    assert longer["step"] == 3 and (ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(3)).is_dir()


def test_a_run_that_stopped_before_its_first_checkpoint_is_run_again_by_the_same_command(tiny_world, tmp_path,
                                                                                         monkeypatch):
    """A run that stopped after training began, before its first checkpoint (its data stream failed at step 3), left
    config.yaml and tensorboard/ and nothing a reader takes for a model. The same command trained into the folder
    again, but TensorBoard drew the failed try's steps under the new run's (1, 2, 1, 2, 3, 4); --resume latest said
    the run folder was not a run folder, not what to do."""
    import globetrotter

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=4", "log_every=1", "val.every=0")
    consume, calls = StreamPosition.consume, []

    def stops_at_step_3(self, batch, max_bad):
        calls.append(1)
        if len(calls) == 3:
            raise UserError("train-000001.tar: no readable sample in 50 shard reads in a row")
        return consume(self, batch, max_bad)

    monkeypatch.setattr(StreamPosition, "consume", stops_at_step_3)
    with pytest.raises(UserError, match="no readable sample"):
        train(cfg)
    assert sorted(p.name for p in cfg.run_dir.iterdir()) == ["config.yaml", "tensorboard"]
    with pytest.raises(UserError, match=r"no checkpoint found \(a run there stopped before its first checkpoint: "
                                        r"nothing to load\); to train it again, give the \S+ command that started it, "
                                        r"without --resume$"):
        globetrotter.load(cfg.run_dir)
    with pytest.raises(UserError, match=r"no checkpoint found to resume \(a run there stopped before its first "
                                        r"checkpoint.*call train without resume=latest$") as err:
        train(cfg, resume="latest")
    assert "\n" not in str(err.value)
    monkeypatch.setattr(StreamPosition, "consume", consume)  # the cause fixed
    assert train(cfg)["checkpoints"]["latest"] == 4
    assert _steps(cfg.run_dir, "loss/image") == [1, 2, 3, 4]


def test_resume_refusals_name_the_argument_from_python_and_the_flag_from_train_py(tmp_path, capsys):
    """train(cfg, resume=...) is Python API: its refusals name resume=latest there, and --resume latest from train.py
    (whose flag it is), for a folder with nothing to resume and for a fresh run into a folder holding one."""
    from globetrotter.config import load_train_config
    from globetrotter.errors import run_cli
    from globetrotter.training import cli

    where = [f"output_dir={tmp_path}", "run_name=empty"]  # nothing ran there
    with pytest.raises(UserError) as err:
        train(load_train_config(None, where), resume="latest")
    assert str(err.value).endswith("to run it again, call train without resume=latest") and "--" not in str(err.value)
    assert run_cli(cli._main, ["--resume", "latest", *where]) == 2
    assert capsys.readouterr().err.strip().endswith("to run it again, give the same command without --resume latest")
    held = ckpt.checkpoint_root(tmp_path / "used") / ckpt.step_name(2)  # a run's checkpoint: its state is enough
    held.mkdir(parents=True)
    (held / ckpt.STATE).write_text(json.dumps({"step": 2}))
    used = [f"output_dir={tmp_path}", "run_name=used"]
    with pytest.raises(UserError, match=r"already holds a run \(step-00000002\); continue it with resume=latest, or "):
        train(load_train_config(None, used))
    assert run_cli(cli._main, used) == 2
    assert "already holds a run (step-00000002); continue it with --resume latest, or " in capsys.readouterr().err


def _steps(run_dir: Path, tag: str) -> list[int]:
    """The steps TensorBoard shows for ``tag`` in a run folder's one TensorBoard run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (folder,) = {p.parent for p in (run_dir / "tensorboard").rglob("events.out.tfevents.*")}
    events = EventAccumulator(str(folder))
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


@pytest.mark.parametrize("workers", [0, 1])
def test_shards_with_no_readable_sample_stop_the_run_in_one_line(tiny_world, tmp_path, workers):
    """Every train shard truncated before its first sample: the stream would draw them again and again and never
    fill a batch (one distinct bad sample per shard stays under data.max_bad_samples); it stops and says so."""
    (tmp_path / "run").mkdir()
    _tokenizer(tiny_world, tmp_path / "run")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_world, broken)
    for shard in (broken / "train").glob("*.tar"):
        shard.write_bytes(shard.read_bytes()[:300])  # less than one tar header
    cfg = tiny_cfg(broken, tmp_path / "run", "steps=4", f"data.workers={workers}")
    with pytest.raises(UserError, match=r"train-00000\d\.tar: no readable sample in 50 shard reads in a row") as err:
        train(cfg)
    assert "\n" not in str(err.value)


def test_a_split_whose_every_image_fails_to_decode_stops_the_run_in_one_line(tiny_world, tmp_path, monkeypatch):
    """Every image undecodable (a codec this machine lacks): its 96 distinct bad samples stay under
    data.max_bad_samples and every shard reads, so the stream met the same bad samples again and again and the run
    hung without a batch; it stops after a long run of unusable samples, naming the shard and the last error."""
    import globetrotter.data.stream as stream

    def undecodable(data):
        raise ValueError("cannot identify image file")

    monkeypatch.setattr(stream, "decode_rgb", undecodable)
    (tmp_path / "run").mkdir()
    _tokenizer(tiny_world, tmp_path / "run")
    cfg = tiny_cfg(tiny_world, tmp_path / "run", "steps=2", "data.workers=0")

    class Hung(BaseException):  # not an Exception: the stream skips those as bad samples
        pass

    def hung(signum, frame):
        raise Hung("the run hung on a split whose every image fails to decode")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(UserError, match=r"train-00000\d\.tar: no usable sample in 1000 in a row \(96 distinct "
                                            r"bad samples, the last: ValueError: cannot identify image file\)") as err:
            train(cfg)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "\n" not in str(err.value)


WRITE_FAILURES = {"save_state": "No space left on device", "rename": "Permission denied",
                  "zip_writer": "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos",
                  "safetensors": "SafetensorError: Error while serializing: I/O error: File too large (os error 27)"}


@pytest.mark.parametrize("failure", list(WRITE_FAILURES))
def test_failed_checkpoint_write_keeps_the_previous_one(tiny_world, tmp_path, monkeypatch, capsys, failure):
    """Disk full while writing step 4 (or no permission to rename it into place): step 2 and `latest` stay,
    the partial folder goes, one line says so, and the run goes on to write step 6. A full disk under torch's zip
    writer (RuntimeError) or safetensors (SafetensorError) was a traceback that left step-4.tmp."""
    import accelerate.utils.other as accelerate_io
    from accelerate import Accelerator
    from safetensors import SafetensorError

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=6", "checkpoint_every=2", "keep_checkpoints=5")
    root = ckpt.checkpoint_root(cfg.run_dir)
    failing, seen = ckpt.step_name(4), {}
    real_save, real_replace = Accelerator.save_state, os.replace

    def save_state(self, output_dir=None, **kw):
        if Path(output_dir).name.startswith(ckpt.step_name(6)):  # what the failure left behind
            seen["latest"] = (root / ckpt.LATEST).read_text().strip()
            seen["dirs"] = sorted(p.name for p in root.iterdir())
        out = real_save(self, output_dir, **kw)
        if failure == "save_state" and Path(output_dir).name == failing + ".tmp":
            raise OSError(errno.ENOSPC, "No space left on device", output_dir)
        return out

    def replace(src, dst, *a, **kw):
        if failure == "rename" and Path(src).name == failing + ".tmp":
            raise PermissionError(errno.EACCES, "Permission denied", str(dst))
        return real_replace(src, dst, *a, **kw)

    real_torch_save, real_safe_save = torch.save, accelerate_io.safe_save_file

    def torch_save(obj, f, *a, **kw):  # torch's zip writer on a full disk: part of the file, then RuntimeError
        if failure == "zip_writer" and Path(f).parent.name == failing + ".tmp":
            Path(f).write_bytes(b"PK\x03\x04")
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 1024 vs 912")
        return real_torch_save(obj, f, *a, **kw)

    def safe_save(tensors, filename, *a, **kw):
        if failure == "safetensors" and Path(filename).parent.name == failing + ".tmp":
            Path(filename).write_bytes(b"\0" * 8)
            raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")
        return real_safe_save(tensors, filename, *a, **kw)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    monkeypatch.setattr(ckpt.os, "replace", replace)
    monkeypatch.setattr(torch, "save", torch_save)
    monkeypatch.setattr(accelerate_io, "safe_save_file", safe_save)
    result = train(cfg)
    assert result["step"] == 6
    assert seen["latest"] == ckpt.step_name(2)
    assert seen["dirs"] == [ckpt.LATEST, ckpt.step_name(2)]  # no step-4, no .tmp, no .old
    assert ckpt.read_state(root / ckpt.step_name(2))["step"] == 2
    assert (root / ckpt.LATEST).read_text().strip() == ckpt.step_name(6)  # retried at the next checkpoint
    lines = [line for line in capsys.readouterr().out.splitlines() if "not written" in line]
    reason = WRITE_FAILURES[failure]
    assert len(lines) == 1 and reason in lines[0] and f"latest checkpoint kept: {ckpt.step_name(2)}" in lines[0]


def test_pairs_batching_is_checked_before_streaming_and_a_sample_without_caption_is_a_bad_sample(tiny_world, tmp_path):
    """Pairs on a split without translation groups, or with an odd batch, are refused at once (the stream would wait
    for a pair forever); a sample whose json lacks its caption is skipped and counted, not a crash."""
    tok = _tokenizer(tiny_world, tmp_path)
    with pytest.raises(UserError, match="pairs needs groups captioned in two or more languages"):
        make_train_loader(str(tiny_world / "train"), tok, 4, 16, None, workers=0, batching="pairs")
    with pytest.raises(UserError, match="pairs needs an even batch size per process, got 3"):
        make_train_loader(str(tiny_world / "test"), tok, 3, 16, None, workers=0, batching="pairs")
    make_train_loader(str(tiny_world / "test"), tok, 4, 16, None, workers=0, batching="pairs")  # groups: fine
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    shard = sorted((world / "train").glob("*.tar"))[0]
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(shard, "w") as tar:
        for member, data in members:
            if member.name.endswith(".json") and members.index((member, data)) < 2:
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "caption"}).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    loader = make_train_loader(str(world / "train"), tok, 4, 16, None, workers=0, max_bad=5)
    batches = [batch for _, batch in zip(range(30), loader)]
    assert sum(len(b["input_ids"]) for b in batches) == 120
    assert [name for b in batches for name in b["stream/bad"]] == [f"{shard.name}/train-00000"]


def test_resume_latest_takes_a_best_checkpoint_written_after_the_last_step_checkpoint(tiny_world, tmp_path):
    """A run killed after a validation but before its next step checkpoint may hold only ``best/``: `--resume latest`
    said 'no checkpoint found' while a fresh start said to resume with --resume latest. The furthest checkpoint is
    taken now."""
    from globetrotter.training.cli import main as train_py

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=4", "val.every=2")
    config = tmp_path / "tiny.yaml"
    save_config(cfg, config)
    train(cfg)
    root = ckpt.checkpoint_root(cfg.run_dir)
    shutil.rmtree(root / ckpt.step_name(2))  # as killed between best/ and the step checkpoint
    (root / ckpt.LATEST).unlink()
    (cfg.run_dir / "result.json").unlink()
    assert ckpt.read_state(root / "best")["step"] == 2
    with pytest.raises(SystemExit) as done:  # train.py as a user runs it (it reads the run's settings first)
        train_py(["--config", str(config), "--resume", "latest", "steps=4"])
    assert done.value.code == 0 and (root / ckpt.step_name(4)).is_dir()
    assert json.loads((cfg.run_dir / "result.json").read_text())["step"] == 4


def test_a_run_continued_from_another_runs_checkpoint_keeps_the_best_it_can_load(tiny_world, tmp_path, capsys):
    """Continued into a new folder, a run restored the source run's best (step and value) but not its best/ folder:
    it reported a best checkpoint that `globetrotter.load` could not find (it loaded the latest). The best is now
    chosen among the new run's own validations."""
    import globetrotter

    source = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=2", "run_name=source")
    train(source)
    fork = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=2", "run_name=fork")
    result = train(fork, resume=str(ckpt.checkpoint_root(source.run_dir) / ckpt.step_name(2)))
    best = ckpt.checkpoint_root(fork.run_dir) / "best"
    assert best.is_dir() and result["best"]["step"] == ckpt.read_state(best)["step"] == 4
    assert "another run's checkpoint: its best (step 2) stays in that run" in capsys.readouterr().out
    assert globetrotter.load(fork.run_dir).checkpoint == best
    # the latest pointer asked for by name: loaded without a note that the run has no best (it has one)
    assert globetrotter.load(best.parent / ckpt.LATEST).checkpoint.name == ckpt.step_name(4)
    assert "no best checkpoint" not in capsys.readouterr().err


def test_a_resume_with_a_changed_config_is_refused_before_any_data_is_made(tiny_world, tmp_path, monkeypatch):
    """The comparison with the checkpoint's config came after the data was prepared: a changed data.root generated a
    synthetic world (or built a feature cache) before the one-line refusal. Keys the data completes are compared
    after it, as before."""
    import globetrotter.training.trainer as trainer_module

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    train(cfg)

    def no_data(*_args, **_kwargs):
        raise AssertionError("data was prepared before the changed config was refused")

    monkeypatch.setattr(trainer_module, "ensure_data", no_data)
    with pytest.raises(UserError, match=r"the config differs from the checkpoint's \(data\.root: "):
        train(tiny_cfg(tmp_path / "other-root", tmp_path, "steps=4", "val.every=0"), resume=str(
            ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(2)))


def test_a_resumed_run_hides_what_the_interrupted_one_logged_after_its_checkpoint(tiny_world, tmp_path):
    """Steps logged between the last checkpoint and the kill were logged again by the resumed run: TensorBoard drew
    them twice (steps 3, 4, 3, 4). The resumed run's writer purges them (purge_step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "log_every=1", "val.every=0")
    train(cfg)
    root = ckpt.checkpoint_root(cfg.run_dir)
    shutil.rmtree(root / ckpt.step_name(4))  # as killed after step 4 was logged, before its checkpoint
    (root / ckpt.LATEST).write_text(ckpt.step_name(2))
    (cfg.run_dir / "result.json").unlink()
    train(cfg, resume="latest")
    (folder,) = {p.parent for p in (cfg.run_dir / "tensorboard").rglob("events.out.tfevents.*")}
    events = EventAccumulator(str(folder))
    events.Reload()
    assert [e.step for e in events.Scalars("loss/image")] == [1, 2, 3, 4]


def test_the_logged_learning_rate_is_the_one_each_step_trained_with(tiny_world, tmp_path):
    """lr was read after the scheduler stepped: each logged rate was the next step's (the last one logged 0)."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "log_every=1", "val.every=0", "optim.warmup_steps=4",
                   "optim.lr=1e-3")
    train(cfg)
    assert _scalars(cfg.run_dir, "lr") == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])  # warm-up: (k + 1) / 4

def test_a_resume_with_another_number_of_processes_restarts_every_stream_and_says_so(tmp_path):
    """2 -> 1 processes: rank 0 went on with its own stream (rank 1's half of the data dropped) and 1 -> 2: rank 1
    started fresh beside rank 0's continued stream, each with no logged line, though the docs promise one."""
    from dataclasses import asdict

    from globetrotter.data.stream import StreamPosition
    from globetrotter.training.checkpoint import write_stream_position
    from globetrotter.training.resume import resume_position

    two = tmp_path / "two"
    two.mkdir()
    for rank in (0, 1):
        write_stream_position(two, rank, asdict(StreamPosition(1, [640 * (rank + 1)])))
    lines: list[str] = []
    assert resume_position(two, 0, 1, lines.append, processes=1) is None
    assert len(lines) == 1 and "saved by 2 process(es), 1 now" in lines[0] and "not exact" in lines[0]
    assert resume_position(two, 1, 1, lines.append, processes=2).cursors == [1280]  # the same count: continued
    one = tmp_path / "one"
    one.mkdir()
    write_stream_position(one, 0, asdict(StreamPosition(1, [3040])))
    assert [resume_position(one, rank, 1, lines.append, processes=2) for rank in (0, 1)] == [None, None]
    assert "saved by 1 process(es), 2 now" in lines[-1]


def test_a_resume_without_a_stream_position_or_with_other_workers_restarts_the_stream_and_says_so(tmp_path):
    """A checkpoint with no data_stream file (an older one) and one saved with 2 data workers read with 1 (0 reads
    as 1: the loading is in the process) cannot continue the stream: None, and one line saying it is not exact."""
    from dataclasses import asdict

    from globetrotter.training.checkpoint import write_stream_position
    from globetrotter.training.resume import resume_position

    lines: list[str] = []
    assert resume_position(tmp_path, 0, 1, lines.append) is None
    assert len(lines) == 1 and "no data stream position for process 0" in lines[0] and "not exact" in lines[0]
    write_stream_position(tmp_path, 0, asdict(StreamPosition(2, [64, 96])))
    assert resume_position(tmp_path, 0, 1, lines.append) is None
    assert "saved with 2 data workers, data.workers=1 now" in lines[-1] and "not exact" in lines[-1]
    assert resume_position(tmp_path, 0, 2, lines.append).cursors == [64, 96] and len(lines) == 2
    write_stream_position(tmp_path, 0, asdict(StreamPosition(1, [64])))
    assert resume_position(tmp_path, 0, 0, lines.append).cursors == [64] and len(lines) == 2


def test_a_run_whose_final_checkpoint_was_not_written_says_so_and_exits_non_zero(tiny_world, tmp_path, monkeypatch,
                                                                                 capsys):
    """The final checkpoint (and best/ at the same step) failing to write: the run exited 0 with the normal summary
    and result.json claimed step 4. It now records the checkpoints that are there (latest and best: step 2), names
    the last one in a final line and exits with UNSAVED."""
    from globetrotter.training import cli

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=2")
    config = tmp_path / "tiny.yaml"
    save_config(cfg, config)
    real_replace = os.replace

    def replace(src, dst, *a, **kw):  # step 4's checkpoint and best/ cannot be renamed into place
        if Path(src).name in (ckpt.step_name(4) + ".tmp", "best.tmp") and ckpt.read_state(Path(src))["step"] == 4:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(SystemExit) as done:
        cli.main(["--config", str(config)])
    assert done.value.code != 0 and done.value.code == cli.UNSAVED
    result = json.loads((cfg.run_dir / "result.json").read_text())
    assert result["checkpoints"] == {"latest": 2, "best": 2} and result["best"]["step"] == 2
    out, err = capsys.readouterr()
    assert "best checkpoint: step 2 " in out
    last = err.strip().splitlines()[-1]
    assert last == (f"error: {cfg.run_dir}: the final checkpoint (step 4) was not written; the last checkpoint is "
                    f"step 2 ({ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(2)}): free disk space, then "
                    f"continue the run with the same command and --resume latest")


def test_a_run_that_wrote_no_checkpoint_at_all_says_to_run_it_again(tmp_path, capsys, monkeypatch):
    """Every checkpoint write failed (a full disk from the start): there is nothing to resume, and the line says so;
    a final checkpoint that was written is no error."""
    from globetrotter.training import cli

    monkeypatch.setenv("RANK", "0")
    assert cli._unsaved_final_checkpoint({"run_dir": str(tmp_path), "step": 4, "checkpoints": {}}) == cli.UNSAVED
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path}: the final checkpoint (step 4) was not written; "
                                               "no checkpoint was written: free disk space and run it again")
    assert cli._unsaved_final_checkpoint({"run_dir": str(tmp_path), "step": 4, "checkpoints": {"latest": 4}}) == 0
    monkeypatch.setenv("RANK", "1")  # the other processes: the exit code alone, the line is the first process's
    assert cli._unsaved_final_checkpoint({"run_dir": str(tmp_path), "step": 4, "checkpoints": {}}) == cli.UNSAVED
    cli._say_where_to_resume(tmp_path)
    assert tuple(capsys.readouterr()) == ("", "")


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
def test_a_second_run_into_a_run_folder_in_use_is_refused_and_readers_are_not(tiny_world, tmp_path):
    """Two train.py into one run folder at once mixed their checkpoints in silence. The running one holds the folder's
    lock (flock, gone when it dies): the second is a one-line error naming the folder before it writes anything;
    globetrotter.load (eval.py) takes no lock, and the lock goes with the run that held it."""
    import fcntl

    import globetrotter

    LOCK = ".train.lock"  # globetrotter.training.resume.LOCK
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    train(cfg)
    before = sorted((p.relative_to(cfg.run_dir), p.stat().st_mtime_ns) for p in cfg.run_dir.rglob("*"))
    with open(cfg.run_dir / LOCK, "a") as running:  # as the running train.py holds it
        fcntl.flock(running, fcntl.LOCK_EX | fcntl.LOCK_NB)
        longer = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=0")
        refused = rf"^{cfg.run_dir}: another training run is running in this run folder"
        with pytest.raises(UserError, match=refused) as err:
            train(longer, resume="latest")
        assert "\n" not in str(err.value)
        assert globetrotter.load(cfg.run_dir).checkpoint.name == ckpt.step_name(2)  # a reader is not refused
    assert sorted((p.relative_to(cfg.run_dir), p.stat().st_mtime_ns) for p in cfg.run_dir.rglob("*")) == before
    assert train(longer, resume="latest")["step"] == 4  # released: the run goes on


@pytest.mark.parametrize("damaged, message", [
    ("model.safetensors", "cannot load the checkpoint: model.safetensors is damaged"),
    ("optimizer.bin", "cannot load the checkpoint: optimizer.bin is damaged"),
    ("custom_checkpoint_0.pkl", "cannot load the checkpoint: custom_checkpoint_0.pkl is damaged"),
    ("data_stream_0.json", "data_stream_0.json: cannot read the data stream position"),
])
def test_a_resume_from_a_damaged_checkpoint_is_one_line_and_writes_nothing(tiny_world, tmp_path, damaged, message):
    """A truncated weights, optimizer or scheduler file (or an empty stream position) made --resume a traceback, and
    the run's config.yaml had been rewritten first. One line names the file; config.yaml is as it was."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    train(cfg)
    path = ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(2) / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if path.suffix != ".json" else b"")
    config = (cfg.run_dir / "config.yaml").read_text()
    with pytest.raises(UserError, match=message) as err:
        train(tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=0"), resume="latest")
    assert "\n" not in str(err.value)
    assert (cfg.run_dir / "config.yaml").read_text() == config  # steps=2: not rewritten by a resume that never began
    if damaged != "data_stream_0.json":  # the run's only checkpoint: the message names no folder that is not there
        assert str(err.value).endswith("the run holds no other checkpoint to resume from")


def test_a_resume_from_a_damaged_checkpoint_names_the_run_s_other_checkpoints(tiny_world, tmp_path):
    """The remedy said ``--resume RUN/checkpoints/step-N``: no folder has that name (they are step-NNNNNNNN). It names
    the run's other step folders, and the latest of them as the command to give."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=4", "checkpoint_every=2", "val.every=0", "keep_checkpoints=3")
    train(cfg)
    root = ckpt.checkpoint_root(cfg.run_dir)
    path = root / ckpt.step_name(4) / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError) as err:
        train(tiny_cfg(tiny_world, tmp_path, "steps=6", "checkpoint_every=2", "val.every=0"), resume="latest")
    assert str(err.value).endswith(f"({ckpt.step_name(2)}: resume={root / ckpt.step_name(2)})")  # train()'s argument


def test_a_resume_whose_rng_states_are_damaged_says_it_is_not_exact(tiny_world, tmp_path, capsys):
    """A truncated random_states_0.pkl: Accelerate went on without the RNG states, saying so at info level only, and
    the resume was silently not exact."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    train(cfg)
    path = ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(2) / "random_states_0.pkl"
    path.write_bytes(path.read_bytes()[:100])
    capsys.readouterr()
    train(tiny_cfg(tiny_world, tmp_path, "steps=3", "checkpoint_every=2", "val.every=0"), resume="latest")
    lines = [line for line in capsys.readouterr().out.splitlines() if "RNG states" in line]
    assert len(lines) == 1 and lines[0].startswith(f"{path}: cannot restore the RNG states (")
    assert lines[0].endswith("so this resume is not exact")


def test_a_best_checkpoint_left_as_best_old_by_a_stopped_publish_is_loaded_and_put_back(tiny_world, tmp_path,
                                                                                         capsys):
    """Killed between the two renames of a best/ publish (best -> best.old, best.tmp -> best): best/ was lost, later
    messages said no validation chose one. Loading reads best.old and says so; a resume puts it back."""
    import globetrotter

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=2")
    train(cfg)
    root = ckpt.checkpoint_root(cfg.run_dir)
    os.replace(root / "best", root / "best.old")
    capsys.readouterr()
    assert globetrotter.load(cfg.run_dir).checkpoint == root / "best.old"
    assert "no validation chose one" not in capsys.readouterr().err
    train(tiny_cfg(tiny_world, tmp_path, "steps=3", "checkpoint_every=2", "val.every=2"), resume="latest")
    assert f"{root / 'best'}: put back from best.old" in capsys.readouterr().out
    assert (root / "best" / ckpt.STATE).is_file() and not (root / "best.old").exists()


def test_loading_says_what_is_wrong_with_an_incomplete_best_or_a_checkpoint_pruned_meanwhile(tiny_run, tmp_path,
                                                                                              monkeypatch, capsys):
    """best/ without its trainer_state.json was reported as 'no validation chose one'; a checkpoint pruned by a running
    training while it loaded as 'the checkpoint is incomplete'; an emptied config.yaml as a size mismatch."""
    import shutil as sh

    import globetrotter
    import globetrotter.encoder as encoder_module

    run = sh.copytree(tiny_run, tmp_path / "run")
    root = ckpt.checkpoint_root(run)
    latest = ckpt.resolve(run, prefer_best=False)
    sh.copytree(latest, root / "best")
    (root / "best" / ckpt.STATE).unlink()
    capsys.readouterr()
    assert globetrotter.load(run).checkpoint == latest
    assert f"best/ is incomplete (no {ckpt.STATE} in {root / 'best'}); loading the latest" in capsys.readouterr().err
    (root / "best" / "config.yaml").write_text("")
    (root / "best" / ckpt.STATE).write_text(json.dumps({"step": 2}))
    with pytest.raises(UserError, match=rf"^{root / 'best' / 'config.yaml'}: the config file is empty \(no key\)"):
        globetrotter.load(run)
    real = encoder_module.load_model

    def pruned_meanwhile(model, filename, **kw):
        sh.rmtree(Path(filename).parent)
        return real(model, filename, **kw)

    monkeypatch.setattr(encoder_module, "load_model", pruned_meanwhile)
    with pytest.raises(UserError, match=rf"^{latest}: the checkpoint was removed while it was being loaded \(pruned"):
        globetrotter.load(root / ckpt.LATEST)


def test_an_empty_config_file_is_refused_naming_it(tiny_world, tmp_path, capsys):
    """`train.py --config RUN/config.yaml --resume latest` with an emptied config.yaml read it as the defaults and
    looked for the default run's checkpoints ('runs/globetrotter: no checkpoint found')."""
    from globetrotter.training.cli import main as train_py

    empty = tmp_path / "config.yaml"
    empty.write_text("# emptied\n")
    with pytest.raises(SystemExit) as done:
        train_py(["--config", str(empty), "--resume", "latest"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == (f"error: {empty}: the config file is empty (no key); expected a YAML "
                                               f"mapping of training keys")


def test_a_fresh_run_refuses_a_folder_of_files_no_run_wrote(tiny_world, tmp_path):
    """A fresh run into a folder holding a user's config.yaml and result.json (no checkpoints/) overwrote them. It is
    refused now, naming them, and leaves the folder as it was; a folder a run left before its first checkpoint (its
    own config.yaml, tensorboard/) is trained into as before."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "val.every=0")
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / "config.yaml").write_text("steps: 5\n")
    (cfg.run_dir / "result.json").write_text('{"mine": 1}')
    with pytest.raises(UserError, match=rf"^{cfg.run_dir}: holds files no run wrote \(config.yaml, result.json\); a "
                                        rf"run would overwrite them") as err:
        train(cfg)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in cfg.run_dir.iterdir()) == ["config.yaml", "result.json"]
    assert (cfg.run_dir / "config.yaml").read_text() == "steps: 5\n"
    shutil.rmtree(cfg.run_dir)
    (cfg.run_dir / "tensorboard").mkdir(parents=True)  # as left by a run stopped before its first checkpoint
    save_config(cfg, cfg.run_dir / "config.yaml")
    assert train(cfg)["checkpoints"]["latest"] == 2


@pytest.mark.parametrize("name, text", [("config.yaml", "steps: [1,\n"), ("config.yaml", "- a list\n"),
                                        ("result.json", "[1, 2]"), ("result.json", "{not json")])
def test_an_unreadable_config_or_result_in_a_fresh_runs_folder_is_a_users_file_and_kept(tmp_path, name, text):
    """A config.yaml or result.json that is not a run's (malformed, or not a mapping) names no run of the folder:
    the fresh run refuses to write over it."""
    from globetrotter.training.resume import refuse_foreign_files

    cfg = tiny_cfg(tmp_path / "world", tmp_path, "steps=2")
    cfg.run_dir.mkdir(parents=True)
    (cfg.run_dir / name).write_text(text)
    with pytest.raises(UserError, match=rf"^{cfg.run_dir}: holds files no run wrote \({name}\)"):
        refuse_foreign_files(cfg)
    assert (cfg.run_dir / name).read_text() == text


def test_undefined_alpha_statistics_are_left_out_of_tensorboard_and_said_once(tiny_world, tmp_path, capsys):
    """A batch without a pair with α > 0 made alpha/cross_language_share 0/0: a NaN point at every such step,
    which breaks TensorBoard's plots. It is left out (the other scalars plotted) and one line says why."""
    import math

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=3", "log_every=1", "val.every=0")
    train(cfg)
    positive = _scalars(cfg.run_dir, "alpha/positive_fraction")
    assert len(positive) == 3 and 0.0 in positive  # the case: at least one step had no pair with α > 0
    share = _scalars(cfg.run_dir, "alpha/cross_language_share")
    assert len(share) == sum(p > 0 for p in positive) and not any(map(math.isnan, share))
    said = [line for line in capsys.readouterr().out.splitlines() if "alpha/cross_language_share" in line]
    assert len(said) == 1 and "no pair with α > 0 in the batch" in said[0] and "not plotted" in said[0]


def test_a_non_finite_loss_or_gradient_norm_is_plotted_as_it_is():
    """Only undefined statistics are left out: a NaN loss or gradient norm is divergence and stays visible."""
    from globetrotter.training.logs import Scalars

    written, lines = [], []

    class Tracker:
        def log(self, values, step):
            written.append((step, values))

    scalars = Scalars(Tracker(), lines.append)
    nan = float("nan")
    scalars({"loss/text": nan, "grad_norm": float("inf"), "alpha/recall": nan, "alpha/mean": 0.5}, 1)
    scalars({"alpha/recall": nan}, 2)
    (step, values), (_, second) = written
    assert set(values) == {"loss/text", "grad_norm", "alpha/mean"} and second == {}
    assert len(lines) == 1 and "alpha/recall (no true translation pair in the batch)" in lines[0]


def _checkpoint(root: Path, name: str, step: int) -> Path:
    """A checkpoint folder as far as finding and pruning read it: its trainer state."""
    (root / name).mkdir(parents=True)
    (root / name / ckpt.STATE).write_text(json.dumps({"step": step}))
    return root / name


def test_pruning_keeps_the_newest_step_checkpoints_and_never_best(tmp_path):
    for step in (3, 9, 10, 12, 100):  # names sort as numbers across a digit boundary
        _checkpoint(tmp_path, ckpt.step_name(step), step)
    _checkpoint(tmp_path, "best", 3)
    ckpt.prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", ckpt.step_name(12), ckpt.step_name(100)]
    ckpt.prune(tmp_path, 5)  # fewer than keep: nothing goes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", ckpt.step_name(12), ckpt.step_name(100)]


def test_resume_latest_takes_the_furthest_of_latest_and_best_and_latest_on_a_tie(tmp_path):
    root = ckpt.checkpoint_root(tmp_path / "run")
    _checkpoint(root, ckpt.step_name(4), 4)
    ckpt.mark_latest(root, ckpt.step_name(4))
    _checkpoint(root, "best", 2)
    assert ckpt.furthest(tmp_path / "run") == root / ckpt.step_name(4)  # an earlier best/ is not resumed
    assert ckpt.saved_steps(tmp_path / "run") == {"latest": 4, "best": 2}
    (root / "best" / ckpt.STATE).write_text(json.dumps({"step": 6}))
    assert ckpt.furthest(tmp_path / "run") == root / "best"  # validated after the last step checkpoint
    (root / "best" / ckpt.STATE).write_text(json.dumps({"step": 4}))
    assert ckpt.furthest(tmp_path / "run") == root / ckpt.step_name(4)
    # readers of a run folder take best/, a resume or the latest pointer the latest
    assert ckpt.resolve(tmp_path / "run") == root / "best"
    assert ckpt.resolve(tmp_path / "run", prefer_best=False) == root / ckpt.step_name(4)
    assert ckpt.resolve(root / ckpt.LATEST) == root / ckpt.step_name(4)


def test_a_resume_compares_every_key_but_the_run_keys_and_the_skipped_sections(tmp_path):
    from globetrotter.training.resume import config_changes

    saved = tiny_cfg(tmp_path / "world", tmp_path, "steps=4", "data.max_length=16")
    save_config(saved, tmp_path / "config.yaml")
    same = tiny_cfg(tmp_path / "world", tmp_path, "steps=8", "data.max_length=16")  # steps: how, not what
    assert config_changes(tmp_path / "config.yaml", same) is None
    longer = tiny_cfg(tmp_path / "world", tmp_path, "steps=4", "data.max_length=24")
    assert config_changes(tmp_path / "config.yaml", longer) == "data.max_length: 16 -> 24"
    assert config_changes(tmp_path / "config.yaml", longer, skip=("data",)) is None  # a section: every key under it
    assert config_changes(tmp_path / "config.yaml", longer, skip=("data.max",)) == "data.max_length: 16 -> 24"
    assert config_changes(tmp_path / "nowhere.yaml", longer) is None  # a checkpoint saved without its config


def test_a_resume_keeps_the_runs_own_nested_settings_unless_the_command_names_them(tmp_path):
    """keep_run_settings: the checkpoint's val.every and data.workers (keys under a section) and steps come back
    when the command line does not set them; one it names stays; a checkpoint saved without its config changes
    nothing (and newly_ignored finds nothing to warn about)."""
    from globetrotter.training.resume import keep_run_settings, newly_ignored

    source = tmp_path / "ck"
    source.mkdir()
    (source / ckpt.STATE).write_text(json.dumps({"step": 1}))
    now = tiny_cfg(tmp_path / "world", tmp_path, "steps=4", "val.every=0", "data.workers=0")
    lines: list[str] = []
    assert keep_run_settings(now, str(source), {}, lines.append) is now and lines == []
    assert newly_ignored(source, now) == set()
    save_config(tiny_cfg(tmp_path / "world", tmp_path, "steps=3", "val.every=7", "data.workers=2"),
                source / "config.yaml")
    kept = keep_run_settings(now, str(source), {"data": {"workers": 0}}, lines.append)
    assert (kept.steps, kept.val.every, kept.data.workers) == (3, 7, 0)
    assert len(lines) == 1 and "steps=3, val.every=7" in lines[0] and "workers" not in lines[0]


def test_cloze_mask_seeds_differ_between_processes_and_steps_and_are_pure():
    """Each process draws its own cloze masks at each step (two processes with one seed would mask alike); a pure
    function of (seed, rank, step), so a resume needs nothing restored."""
    from globetrotter.training.resume import mask_seed

    seeds = {mask_seed(3, rank, step) for rank in range(4) for step in range(50)}
    assert len(seeds) == 200
    assert mask_seed(3, 1, 7) == mask_seed(3, 1, 7) != mask_seed(4, 1, 7)


class _OneProcess:
    """What :func:`ckpt.write` asks of an Accelerator, for one process: its state is a trainer state file."""

    is_main_process, num_processes = True, 1

    def __init__(self, step: int) -> None:
        self.step = step

    def save_state(self, folder: str, safe_serialization: bool = True) -> None:
        Path(folder).mkdir(parents=True)
        (Path(folder) / ckpt.STATE).write_text(json.dumps({"step": self.step}))

    def wait_for_everyone(self) -> None:
        pass


def test_writing_best_leaves_latest_naming_the_last_step_checkpoint(tmp_path):
    fill = lambda folder, main: None  # noqa: E731
    assert ckpt.write(_OneProcess(2), tmp_path, ckpt.step_name(2), fill, latest=True, keep=1)
    assert ckpt.write(_OneProcess(3), tmp_path, "best", fill, latest=False, keep=1)
    assert (tmp_path / ckpt.LATEST).read_text().strip() == ckpt.step_name(2)
    assert ckpt.resolve(tmp_path, prefer_best=False) == tmp_path / ckpt.step_name(2)
    assert ckpt.read_state(tmp_path / "best")["step"] == 3 and (tmp_path / ckpt.step_name(2)).is_dir()


# ----------------------------------------------------------------------------- the stream itself, on shards made here


def _png(value: int) -> bytes:
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _shard(path: Path, bad: tuple[str, ...] = ()) -> str:
    """Six samples s0..s5 whose image is one grey level (10 i); the samples ``bad`` hold bytes that are no image."""
    import webdataset as wds

    with wds.TarWriter(str(path)) as writer:
        for i in range(6):
            writer.write({"__key__": f"s{i}", "png": b"no image" if f"s{i}" in bad else _png(10 * i),
                          "json": json.dumps({"caption": f"c{i}", "lang": "en", "image_id": f"s{i}"}).encode()})
    return str(path)


def _stream(urls: list[str], position: StreamPosition | None = None, max_bad: int = 100):
    """Batches of two: each sample's grey level and the seed its views were made with (shards in order, unshuffled)."""
    from globetrotter.data.stream import ResumableStream

    return ResumableStream(urls, lambda items: {"grey": [float(t["grey"]) for t, _ in items],
                                                "seed": [int(t["seed"]) for t, _ in items]}, 2,
                           lambda image, seed: {"grey": image.float().mean(), "seed": torch.tensor(seed)},
                           lambda samples, rng: samples, seed=5, position=position or StreamPosition(), max_bad=max_bad)


def test_a_resumed_stream_meets_and_counts_the_bad_samples_the_uninterrupted_one_does(tmp_path):
    """Resumed after batch 1 (cursor 2, nothing bad yet), the stream goes on with the very batches of the uninterrupted
    one, and reports the bad image s3 (sample 3) in the same batch: a resume does not stop counting bad samples."""
    urls = [_shard(tmp_path / "a.tar", bad=("s3",))]
    it = iter(_stream(urls))
    full = [next(it) for _ in range(5)]
    assert [b["grey"] for b in full[:3]] == [[0, 10], [20, 40], [50, 0]]  # s3 skipped
    assert [b["stream/bad"] for b in full] == [[], ["a.tar/s3"], [], [], []]  # once, though the shard is read again
    position = StreamPosition()
    position.consume(dict(full[0]), max_bad=100)
    it = iter(_stream(urls, position))
    assert [next(it) for _ in range(4)] == full[1:]
    with pytest.raises(UserError, match=r"a\.tar: 1 distinct bad samples skipped .*max_bad_samples=0"):
        for batch in _stream(urls, StreamPosition(**position.to_dict()), max_bad=0):
            StreamPosition(**position.to_dict()).consume(batch, max_bad=0)


def test_exactly_max_bad_samples_are_tolerated_and_one_more_stops_the_stream(tmp_path):
    urls = [_shard(tmp_path / "a.tar", bad=("s1", "s3"))]
    it = iter(_stream(urls, max_bad=2))
    batches = [next(it) for _ in range(4)]  # two bad samples, max_bad=2: the stream goes on
    assert sum(len(b["stream/bad"]) for b in batches) == 2 and not any(b["stream/stop"] for b in batches)
    assert [b["grey"] for b in batches[:2]] == [[0, 20], [40, 50]]
    stopped = list(_stream(urls, max_bad=1))  # the second bad sample is one too many: a marker batch, then the end
    assert stopped[-1]["stream/stop"] is True and not any(b["stream/stop"] for b in stopped[:-1])


def test_each_sample_of_a_stream_has_its_own_augmentation_seed(tmp_path):
    """Views are seeded per sample (run seed, rank, worker, sample index): the same image met again, or two samples
    of one worker, never share the seed of their crops."""
    it = iter(_stream([_shard(tmp_path / "a.tar")]))
    seeds = [s for _ in range(6) for s in next(it)["seed"]]
    assert len(set(seeds)) == len(seeds) == 12


def test_a_bad_sample_two_workers_report_is_counted_once():
    """Workers read the same shards, so each meets (and reports) the same bad sample: the position counts it once."""
    from globetrotter.data.stream import BAD, BAD_SHARD, CURSOR, STOP, WORKER

    position = StreamPosition(workers=2)
    for worker, bad in ((0, ["a.tar/s3"]), (1, ["a.tar/s3", "b.tar/s1"]), (0, ["b.tar/s1"])):
        position.consume({WORKER: worker, CURSOR: 4, BAD: bad, BAD_SHARD: "b.tar", STOP: False}, max_bad=5)
    assert position.bad == ["a.tar/s3", "b.tar/s1"] and position.bad_total == 2


def test_an_unwritten_final_checkpoint_whose_step_best_holds_names_best(tmp_path, capsys):
    """Validated at the last step, best/ holds the final weights although the step checkpoint was not written: the
    line names best/ (not an older step checkpoint to resume from) and the run still exits with UNSAVED."""
    from globetrotter.training import cli
    from globetrotter.training.checkpoint import checkpoint_root

    result = {"run_dir": str(tmp_path), "step": 4, "checkpoints": {"latest": 2, "best": 4}}
    assert cli._unsaved_final_checkpoint(result) == cli.UNSAVED
    err = capsys.readouterr().err
    assert f"{checkpoint_root(str(tmp_path)) / 'best'} holds the weights of step 4" in err
    assert "the last checkpoint is step 2" not in err
    assert cli._unsaved_final_checkpoint({**result, "checkpoints": {"latest": 4, "best": 4}}) == 0


def test_publish_clears_an_old_leftover_and_puts_the_older_checkpoint_back_when_the_move_fails(tmp_path, monkeypatch):
    """publish: a ``.old`` folder left by an earlier stopped publish is removed first; when moving the new folder
    into place fails, the older checkpoint is renamed back (never lost) and the error goes on."""
    final, tmp = tmp_path / "best", tmp_path / "best.tmp"
    for folder, step in ((final, 1), (tmp, 2), (tmp_path / "best.old", 0)):
        folder.mkdir()
        (folder / ckpt.STATE).write_text(json.dumps({"step": step}))
    real = os.replace

    def failing(src, dst):
        if Path(src) == tmp:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="No space left"):
        ckpt.publish(tmp, final)
    assert ckpt.read_state(final)["step"] == 1 and not (tmp_path / "best.old").exists()
    monkeypatch.setattr(os, "replace", real)
    ckpt.publish(tmp, final)
    assert ckpt.read_state(final)["step"] == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["best"]


def test_a_checkpoint_without_its_state_is_incomplete_and_a_whole_one_has_no_damaged_file(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "step-1"
    folder.mkdir()
    with pytest.raises(UserError, match=rf"^{folder / ckpt.STATE}: cannot read the checkpoint's state "
                                        r"\(FileNotFoundError: .*\); the checkpoint is incomplete$"):
        ckpt.read_state(folder)
    (folder / ckpt.STATE).write_text(json.dumps({"step": 1}))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "random_states_0.pkl").mkdir()  # not a file: not read
    assert ckpt.damaged_file(folder) is None
    (folder / "model.safetensors").write_bytes(b"cut")
    assert ckpt.damaged_file(folder)[0] == folder / "model.safetensors"


def test_meta_tensors_are_never_taken_for_tied_aliases():
    """Tensors on the meta device have no storage (every data pointer is 0): two of one shape are not a tie, while
    a real tie (one parameter under two names) is."""
    real = torch.nn.Linear(3, 3)
    tied = {"a": real.weight, "b": real.weight, "c": torch.nn.Linear(3, 3).weight}
    assert ckpt.tied_aliases(tied) == {"b": "a"}
    meta = {"a": torch.empty(3, 3, device="meta"), "b": torch.empty(3, 3, device="meta")}
    assert ckpt.tied_aliases(meta) == {}


def test_bad_samples_replayed_before_a_resume_point_are_skipped_without_being_counted_again(capsys):
    """While a resumed stream replays the samples it consumed before its checkpoint (inactive), a bad one there is
    skipped in silence: it is already in the saved count. Once active, a new bad sample is counted and said, and the
    stream stops (False) when the count passes the limit."""
    from globetrotter.data.stream import BadSamples

    bad = BadSamples({"shard-0.tar/k1"}, limit=2, worker=0)
    bad.active = False
    assert bad(ValueError("cut"), "/d/shard-0.tar", "k1") and bad(ValueError("cut"), "/d/shard-0.tar", "k9")
    assert (bad.count, bad.report(), capsys.readouterr().err) == (1, [], "")
    bad.active = True
    assert bad(ValueError("cut"), "/d/shard-0.tar", "k1") and bad.count == 1  # the same sample: counted once
    assert bad(ValueError("cut"), "/d/shard-1.tar", "k2") and bad.report() == ["shard-1.tar/k2"]
    assert "skipped bad sample k2 of /d/shard-1.tar (2 so far, worker 0): ValueError: cut" in capsys.readouterr().err
    assert not bad(OSError("unreadable"), "/d/shard-1.tar", None) and bad.count == 3


def test_a_resume_whose_stream_cannot_continue_reads_a_fresh_stream_of_another_seed(tiny_world, tmp_path, capsys,
                                                                                    monkeypatch):
    """A checkpoint without its data stream position (an older one): the resumed run says so and reads a stream of
    a new seed from its start, not the first run's stream again from its beginning (the same batches twice)."""
    from globetrotter.training import trainer

    real, asked = trainer.train_loader_from_config, []

    def recording(cfg, tokenizer, local_batch, seed, **kw):
        asked.append((seed, list(kw["position"].cursors), kw["start_step"]))
        return real(cfg, tokenizer, local_batch, seed, **kw)

    monkeypatch.setattr(trainer, "train_loader_from_config", recording)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "checkpoint_every=2", "seed=5")
    train(cfg)
    (ckpt.checkpoint_root(cfg.run_dir) / ckpt.step_name(2) / ckpt.DATA_STREAM.format(rank=0)).unlink()
    capsys.readouterr()
    assert train(tiny_cfg(tiny_world, tmp_path, "steps=3", "checkpoint_every=2", "seed=5"), resume="latest")["step"] == 3
    assert asked == [(5, [0], 0), (5 * 1_000_003 + 2, [0], 2)]
    assert "no data stream position for process 0" in capsys.readouterr().out
