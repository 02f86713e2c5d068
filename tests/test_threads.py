"""The intra-op thread rule of the heavy commands (globetrotter/threads.py): each process gets its share of the
cores after its data workers, never more than the machine's load leaves free; an explicit choice wins."""
from __future__ import annotations

import pytest
import torch

from globetrotter import threads
from globetrotter.threads import ENV, choose_threads, configure_threads

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize("cores, processes, workers, threads", [
    (2, 1, 2, 1),    # the trainer on a 2-core machine with its 2 data workers: 2 // 3 -> at least 1
    (2, 1, 1, 1),    # the feature-cache build with one decoding worker
    (2, 1, 0, 2),    # eval.py alone on an idle 2-core machine: both cores
    (16, 1, 2, 5),   # 16 // (1 x 3)
    (16, 4, 1, 2),   # accelerate launch --num_processes 4, 1 worker each: 16 // 8
    (16, 8, 2, 1),   # more processes than cores: never 0
    (1, 1, 0, 1),
])
def test_share_of_the_cores_per_process_and_worker(cores, processes, workers, threads):
    choice = choose_threads(workers, processes, cores=cores, load=0.0, env=NO_ENV)
    assert (choice.threads, choice.source) == (threads, "automatic")
    assert f"{cores} core(s)" in choice.reason


@pytest.mark.parametrize("cores, workers, load, threads", [
    (2, 0, 1.0, 1),   # one other job on a 2-core machine: one thread, never slower than OMP_NUM_THREADS=1
    (2, 0, 4.8, 1),   # a busy machine
    (2, 0, 0.3, 2),   # a little background noise is not a job
    (16, 0, 4.0, 12), # 12 cores left free
    (16, 2, 4.0, 5),  # the share is below what is free: the share
])
def test_the_machines_load_caps_the_threads(cores, workers, load, threads):
    choice = choose_threads(workers, cores=cores, load=load, env=NO_ENV)
    assert choice.threads == threads
    assert ("left free by the machine's load" in choice.reason) == (threads < cores // (1 + workers))


def test_an_explicit_choice_wins():
    assert choose_threads(2, cores=2, load=0.0, env={ENV: "3"}).threads == 3
    assert choose_threads(2, cores=2, load=0.0, env={ENV: "3"}).source == ENV
    config = choose_threads(0, requested=4, cores=2, load=5.0, env={ENV: "1"})  # the config key beats the environment
    assert (config.threads, config.source) == (4, "config")
    assert "more than this machine's 2 core(s): expect it slower than threads=2" in config.reason  # honoured, but said
    assert "core(s)" not in choose_threads(0, requested=2, cores=2, load=0.0, env=NO_ENV).reason
    for junk in ("", "0", "x", "-2"):  # an unusable OMP_NUM_THREADS is not a choice
        assert choose_threads(0, cores=2, load=0.0, env={ENV: junk}).source == "automatic"
    with pytest.raises(ValueError, match="threads must be >= 1"):
        choose_threads(0, requested=0)


def test_configure_sets_torch_and_logs_one_line():
    before = torch.get_num_threads()
    lines: list[str] = []
    try:
        # torch starts at a count other than the choice each time, so only applying the choice passes
        torch.set_num_threads(1)
        choice = configure_threads(2, cores=6, load=0.0, env=NO_ENV, log=lines.append)  # 6 // (1 + 2)
        assert torch.get_num_threads() == choice.threads == 2
        assert lines == [f"torch threads: 2 ({choice.reason}); {ENV}=N chooses"]
        torch.set_num_threads(3)
        choice = configure_threads(2, cores=2, load=0.0, env=NO_ENV, log=None)
        assert torch.get_num_threads() == choice.threads == 1
    finally:
        torch.set_num_threads(before)


def test_training_config_key_and_validation():
    from globetrotter.config import load_train_config
    from globetrotter.errors import UserError

    assert load_train_config(None, []).threads is None  # automatic by default
    assert load_train_config(None, ["threads=3"]).threads == 3
    with pytest.raises(UserError, match="threads must be >= 1"):
        load_train_config(None, ["threads=0"])


def test_using_threads_sets_the_count_inside_the_block_and_restores_it_after():
    from globetrotter.threads import using_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with using_threads(3):
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1
        with pytest.raises(RuntimeError), using_threads(2):
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_busy_cores_reads_the_time_not_idle_between_two_looks(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: 1000 jiffies pass, 250 of them idle or waiting on I/O
    stat.write_text("cpu 100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    monkeypatch.setattr(threads.time, "sleep",
                        lambda s: stat.write_text("cpu 500 0 450 850 200 0 0 0 0 0\ncpu0 1 2 3\n"))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.busy_cores(stat=str(stat)) == pytest.approx(4 * 750 / 1000)
    assert threads.busy_cores(stat=str(tmp_path / "missing")) is None


def test_a_command_that_has_just_ended_takes_no_core_from_the_next(monkeypatch):
    # the 1-minute load average still counts the previous command; the cores busy now do not
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.9, 1.0, 0.5))
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 0.1)
    assert threads.load_average() == pytest.approx(0.1)
    assert threads.choose_threads(cores=2, load=threads.load_average(), env={}).threads == 2
    # a job that keeps running shows in both: the smaller one counts
    monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 2.0)
    assert threads.load_average() == pytest.approx(1.9)
    assert threads.choose_threads(cores=2, load=threads.load_average(), env={}).threads == 1


def test_the_cores_left_free_are_rounded_to_the_nearest_core():
    """The rule's round(cores - load): 8 cores with a load of 2.4 leave 5.6 free, 6 cores (not 5); 2.6 leave 5."""
    assert choose_threads(cores=8, load=2.4, env=NO_ENV).threads == 6
    assert choose_threads(cores=8, load=2.6, env=NO_ENV).threads == 5


def test_the_load_counts_only_this_processs_share_of_the_machine(monkeypatch):
    """A process pinned to 4 of 16 cores sees the whole machine's load: it counts a quarter of it."""
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(threads, "busy_cores", lambda window=0.25: 8.0)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    assert threads.load_average() == pytest.approx(8.0 * 4 / 16)
    monkeypatch.setattr(threads, "available_cores", lambda: 16)
    assert threads.load_average() == pytest.approx(8.0)


def test_a_resumed_run_with_automatic_threads_keeps_its_checkpoints_count_and_an_explicit_one_wins(
        tmp_path, monkeypatch):
    """The automatic count depends on the machine's load; a resume takes the count its checkpoint was trained with
    (so it continues exactly) and says what automatic would have been. threads=N in the config is kept as asked."""
    import json
    from types import SimpleNamespace

    from globetrotter.config import load_train_config
    from globetrotter.training import trainer
    from globetrotter.training.checkpoint import STATE

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    applied: list[int] = []
    monkeypatch.setattr(trainer, "apply_threads", applied.append)
    monkeypatch.setattr(trainer, "choose_threads", lambda workers, processes, requested, load: (
        threads.ThreadChoice(requested, "config", "asked") if requested else
        threads.ThreadChoice(3, "automatic", "the cores' share")))
    source = tmp_path / "step-4"
    source.mkdir()
    (source / STATE).write_text(json.dumps({"step": 4, "threads": 2}))
    process, lines = SimpleNamespace(num_processes=1), []
    choice = trainer._configure_threads(load_train_config(None, []), process, source, lines.append)
    assert (choice.threads, choice.source, applied) == (2, "checkpoint", [2])
    assert "the count step-4 was trained with" in lines[0] and "(automatic would be 3)" in lines[0]
    assert trainer._configure_threads(load_train_config(None, []), process, None, lines.append).threads == 3
    assert trainer._configure_threads(load_train_config(None, ["threads=5"]), process, source, lines.append).threads == 5
    assert applied == [2, 3, 5]


def test_a_stat_file_that_does_not_move_gives_no_busy_count_and_no_load_average_falls_back_to_it(
        tmp_path, monkeypatch):
    """No time passed between the two reads of the cpu line (a frozen or fake /proc/stat): nothing to divide by,
    so no figure rather than a division by zero. Without a load average the cores busy now are the load."""
    import os

    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 100 0 0 0 0 0 0\n")
    assert threads.busy_cores(0.0, str(stat)) is None

    def no_loadavg():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_loadavg)
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.5)
    monkeypatch.setattr(threads, "available_cores", lambda: os.cpu_count() or 1)
    assert threads.load_average() == 1.5
    monkeypatch.setattr(threads, "busy_cores", lambda: None)
    assert threads.load_average() is None
