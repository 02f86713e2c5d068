"""The trainer's speed options: bf16 and torch.compile give the eager float32 loss, and fall back in one line."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState

from globetrotter.training import objective, speed
from globetrotter.training.trainer import train
from test_training import tiny_cfg  # tests/ is on sys.path (rootless conftest)

STEPS = ["steps=3", "model.dropout=0", "checkpoint_every=100", "threads=1"]  # no dropout: compiled RNG differs from eager;
# one thread: every run of the module sums in the same order, whatever the machine's load
BF16_REL = 2e-2  # bf16 keeps 8 mantissa bits: each loss within 2% over 3 steps (measured: <= 0.1%)
COMPILE_REL = 1e-4  # inductor reorders float32 sums (measured: ~1e-6)


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """Accelerate fixes mixed_precision once per process: reset it around each run of another precision."""
    AcceleratorState._reset_state()
    yield
    AcceleratorState._reset_state()


@pytest.fixture(scope="module")
def frozen(tmp_path_factory) -> list[str]:
    """Every run's image side: as in the real-photo recipes, a frozen backbone read from a feature cache (the first
    run builds it). Inductor then compiles the text encoder, the heads and the losses; a ResNet's forward and backward
    would add minutes to a cold compile."""
    from safetensors.torch import save_file

    from globetrotter.data_config import DataConfig
    from test_feature_cache import frozen_backbone, small_backbone

    where = tmp_path_factory.mktemp("frozen")
    save_file(small_backbone().state_dict(), str(where / "backbone.safetensors"))
    # the default buffer: no pixels are streamed, so the tiny settings' buffer would only add a warning line
    return [*frozen_backbone(where / "backbone.safetensors", where / "features"),
            f"data.shuffle_buffer={DataConfig.shuffle_buffer}"]


def run_losses(world: Path, frozen: list[str], out: Path, monkeypatch, *extra: str) -> tuple[list[dict], dict]:
    """Train 3 steps on the tiny world; the per-step losses (every term and the total) and the run's result."""
    real, losses = objective.GlobetrotterObjective.forward, []

    def recording(self, out, batch, labels):
        loss, logs = real(self, out, batch, labels)
        losses.append({"total": float(loss.detach()),
                       **{k: float(v) for k, v in logs.items() if k.startswith("loss/")}})
        return loss, logs

    with monkeypatch.context() as m:
        m.setattr(objective.GlobetrotterObjective, "forward", recording)
        AcceleratorState._reset_state()
        result = train(tiny_cfg(world, out, *STEPS, *frozen, *extra))
    assert len(losses) == 3
    return losses, result


@pytest.fixture(scope="module")
def eager(tiny_world, frozen, tmp_path_factory) -> list[dict]:
    """The eager float32 losses every option is compared with: one run for the module (the same 3 steps each time)."""
    AcceleratorState._reset_state()
    with pytest.MonkeyPatch.context() as m:
        losses, _ = run_losses(tiny_world, frozen, tmp_path_factory.mktemp("eager"), m)
    AcceleratorState._reset_state()
    return losses


def assert_losses_close(got: list[dict], want: list[dict], rel: float) -> None:
    for step, (g, w) in enumerate(zip(got, want)):
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=rel, abs=rel * 0.1), (step, key)


def warnings_of(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]


def test_bf16_step_matches_the_float32_step(eager, frozen, tiny_world, tmp_path, monkeypatch):
    bf16, result = run_losses(tiny_world, frozen, tmp_path / "bf16", monkeypatch, "mixed_precision=bf16")
    assert result["mixed_precision"] == "bf16"
    assert bf16 != eager, "bf16 autocast ran (the losses are not bit-identical)"
    assert_losses_close(bf16, eager, BF16_REL)


def test_bf16_without_support_falls_back_to_float32_in_one_line(eager, frozen, tiny_world, tmp_path, monkeypatch, capsys):
    capsys.readouterr()
    monkeypatch.setattr(speed, "bf16_supported", lambda device: False)
    fallback, result = run_losses(tiny_world, frozen, tmp_path / "bf16", monkeypatch, "mixed_precision=bf16")
    (line,) = warnings_of(capsys)
    assert "mixed_precision=bf16 is not supported" in line and "falling back to mixed_precision=no (float32)" in line
    assert result["mixed_precision"] == "no"
    assert fallback == eager  # float32, bit for bit


def test_fp16_on_cpu_says_it_trains_in_float32_and_records_so(eager, frozen, tiny_world, tmp_path, monkeypatch, capsys):
    """fp16 on CPU trained in float32 (Accelerate autocasts fp16 on GPUs only) with result.json saying "fp16"."""
    capsys.readouterr()
    losses, result = run_losses(tiny_world, frozen, tmp_path / "fp16", monkeypatch, "mixed_precision=fp16")
    (line,) = warnings_of(capsys)
    assert "mixed_precision=fp16 does not run on CPU" in line and "float32 (mixed_precision=no)" in line
    assert result["mixed_precision"] == "no" and losses == eager


def test_a_launchers_precision_the_config_overrides_is_said(monkeypatch):
    """`accelerate launch --mixed_precision bf16` trained in float32 in silence: the config key decides."""
    lines: list[str] = []
    monkeypatch.setattr(sys, "argv", ["train.py"])  # `accelerate launch train.py`: the line names train.py
    speed.warn_launcher_precision("no", lines.append, {"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert lines == ["warning: accelerate launch --mixed_precision bf16 is not used: the run's config key decides "
                     "(mixed_precision=no); pass mixed_precision=bf16 to train.py instead"]
    for env in ({}, {"ACCELERATE_MIXED_PRECISION": "no"}, {"ACCELERATE_MIXED_PRECISION": "no"}):
        speed.warn_launcher_precision("bf16", lines.append, env)
    speed.warn_launcher_precision("bf16", lines.append, {"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert len(lines) == 1


@pytest.mark.parametrize("where", ["torch.compile", "first forward"])
def test_compile_failure_falls_back_to_eager_in_one_line(eager, frozen, tiny_world, tmp_path, monkeypatch, capsys, where):
    capsys.readouterr()

    def broken_compile(model, *args, **kwargs):
        if where == "torch.compile":
            raise RuntimeError("no C++ compiler found\nsecond line of the error")

        def fails(*a, **k):
            raise RuntimeError("inductor: lowering failed")
        return fails

    monkeypatch.setattr(torch, "compile", broken_compile)
    fallback, result = run_losses(tiny_world, frozen, tmp_path / "compiled", monkeypatch, "compile=true")
    (line,) = warnings_of(capsys)
    assert "compile=true failed (RuntimeError:" in line and "falling back to the eager model" in line
    assert "second line" not in line
    assert result["compiled"] is False
    assert fallback == eager  # the failed first call is repeated eagerly from the same RNG state


@pytest.mark.slow  # ~10 s with a warm inductor cache; ~70 s cold (2 CPU cores)
def test_compiled_step_matches_the_eager_step_in_one_compilation(eager, frozen, tiny_world, tmp_path, monkeypatch,
                                                                 capsys):
    from torch._dynamo.utils import counters

    counters.clear()
    compiled, result = run_losses(tiny_world, frozen, tmp_path / "compiled", monkeypatch, "compile=true")
    assert result["compiled"] is True, warnings_of(capsys)
    assert_losses_close(compiled, eager, COMPILE_REL)
    # the steps' captions differ in length and number of cloze targets: still one graph, compiled once
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], dict(counters)


class _Noise(torch.nn.Module):
    """A forward that draws from the RNG: its output tells which RNG state it ran from."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(3)


def test_a_first_compiled_call_that_fails_is_repeated_eagerly_from_the_same_rng_state(monkeypatch):
    """A compiled forward that draws random numbers and then fails: the eager repeat must draw the same numbers as
    an eager call from the RNG state before it (the fallback changes nothing of the run but its speed)."""
    def compile_that_fails_after_drawing(model, *args, **kwargs):
        def fails(*a, **k):
            torch.rand(5)  # tracing consumed random numbers before failing
            raise RuntimeError("inductor: lowering failed")
        return fails

    monkeypatch.setattr(torch, "compile", compile_that_fails_after_drawing)
    lines: list[str] = []
    forward = speed.CompiledForward(_Noise(), True, lines.append)
    torch.manual_seed(7)
    got = forward(torch.zeros(3))
    torch.manual_seed(7)
    want = _Noise()(torch.zeros(3))
    assert torch.equal(got, want) and not forward.active and len(lines) == 1


def test_an_error_after_a_first_compiled_call_that_worked_is_raised_not_a_fall_back(monkeypatch):
    """Only the first call is the compilation: a later error is a real error and propagates."""
    calls = []

    def compile_that_fails_on_the_second_call(model, *args, **kwargs):
        def compiled(*a, **k):
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("a real error in step 2")
            return model(*a, **k)
        return compiled

    monkeypatch.setattr(torch, "compile", compile_that_fails_on_the_second_call)
    lines: list[str] = []
    forward = speed.CompiledForward(_Noise(), True, lines.append)
    forward(torch.zeros(3))
    with pytest.raises(RuntimeError, match="a real error in step 2"):
        forward(torch.zeros(3))
    assert forward.active and lines == []
