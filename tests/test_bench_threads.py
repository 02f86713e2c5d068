"""bench/bench_threads.py: the synthetic world is made before any timing, a --skip that leaves nothing to
measure is refused up front (no train.py run is started, no settle wait), and a failed measured run is one line."""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import load_bench

from globetrotter.errors import run_cli


@pytest.fixture
def threads(monkeypatch):
    """bench_threads with its subprocesses and measurements stubbed; ``events`` lists what ran, in order."""
    module = load_bench("bench_threads")
    events: list[str] = []

    def fake_run(cmd, **kwargs):
        events.append("prepare" if "ensure_data" in " ".join(map(str, cmd)) else "run")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def fake_measure(kind, one_thread, args, tmp, tag):
        events.append(f"measure {kind}")
        return 1.0, 1

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    monkeypatch.setattr(module.subprocess, "Popen", lambda *a, **k: events.append("background"))
    monkeypatch.setattr(module, "measure", fake_measure)
    monkeypatch.setattr(module, "wait_for_quiet", lambda limit: None)
    monkeypatch.setattr(module.time, "sleep", lambda s: events.append("sleep"))
    module.events = events
    return module


def run(module, monkeypatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", ["bench/bench_threads.py", *argv])
    return run_cli(lambda _argv: module.main())


def test_the_world_is_prepared_before_the_first_timing(threads, monkeypatch):
    assert run(threads, monkeypatch, "--train-steps", "2", "--skip", "features,busy") == 0
    assert threads.events[0] == "prepare" and "measure train" in threads.events


@pytest.mark.parametrize("skip", [["alone", "busy"], ["train", "features"]])
def test_a_skip_leaving_nothing_to_measure_is_refused_up_front(threads, monkeypatch, capsys, skip):
    assert run(threads, monkeypatch, "--skip", ",".join(skip)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --skip") and err.count("\n") == 1
    assert threads.events == []  # no world made, no background job, no settle wait


def test_a_failed_measured_run_is_one_line_and_exit_2(monkeypatch, capsys):
    """A measured train.py that failed ended the benchmark with exit 1 and its stderr's last 2,000 characters."""
    module = load_bench("bench_threads")

    def fake_run(cmd, **kwargs):
        if "ensure_data" in " ".join(map(str, cmd)):
            return subprocess.CompletedProcess(cmd, 0, "", "")
        failed = "Traceback (most recent call last):\n  ...\nerror: out of memory\n"
        return subprocess.CompletedProcess(cmd, 1, "", failed)

    monkeypatch.setattr(module.subprocess, "run", fake_run)
    monkeypatch.setattr(module, "wait_for_quiet", lambda limit: None)
    assert run(module, monkeypatch, "--train-steps", "2", "--skip", "features,busy") == 2
    err = capsys.readouterr().err
    assert err == "error: train.py (default threads, alone-train-0-0) exited 1: error: out of memory\n"
