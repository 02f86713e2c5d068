"""Torch's intra-op threads for the heavy commands: from the cores a process has and the processes it starts.

PyTorch starts as many intra-op threads as the machine has cores, whatever else runs: a training process
beside its data-loader workers (each of which torch runs on one thread), or a command on a small machine
shared with other jobs, then has more busy threads than cores, and its OpenMP threads spin waiting for each
other (docs/results.md, benchmarks). The rule here gives each process its share of the cores, never more than the cores other jobs
leave free:

    threads = max(1, min(cores // (processes_per_node * (1 + workers)), round(cores - load)))

(the load term only when the load is above 0.5).

``cores`` are the cores this process may run on (``os.sched_getaffinity``), ``workers`` the data-loader
processes it starts, ``processes_per_node`` the training processes on this machine (``accelerate launch``),
``load`` the other jobs' use of this process's cores at start (:func:`load_average`: the smaller of the
1-minute load average and the cores busy over the last quarter second, so a command that has just ended, which
weighs in the load average for a minute, takes no core from the next one). So a default run
is never slower than the same run with ``OMP_NUM_THREADS=1`` on a busy machine, and uses the cores of an
idle one. An explicit choice wins: a config's ``threads`` key (training, feature cache), then
``OMP_NUM_THREADS`` in the environment (left as torch read it).

Used by ``train.py`` (recorded in ``result.json``), ``globetrotter-data features build`` and ``eval.py``.
A feature-cache build counts its decoding workers as light (``workers=0``): they make an image's views far
faster than the backbone runs over them, so the backbone gets the cores (docs/results.md, benchmarks).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

ENV = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class ThreadChoice:
    """The intra-op thread count chosen, where it came from (``config``, ``OMP_NUM_THREADS``, ``automatic``),
    and why, in words."""

    threads: int
    source: str
    reason: str

    def __str__(self) -> str:
        return f"torch threads: {self.threads} ({self.reason})"


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's or ``taskset``'s share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def busy_cores(window: float = 0.25, stat: str = "/proc/stat") -> float | None:
    """The machine's cores busy over the next ``window`` seconds (all processes, from the ``cpu`` line of
    ``/proc/stat``: time not idle and not waiting on I/O); None where the system has no such file."""
    def totals() -> tuple[int, int]:
        with open(stat) as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields[:8]), idle  # user..steal; guest time is already in user

    try:
        total0, idle0 = totals()
        time.sleep(window)
        total1, idle1 = totals()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total1 - total0
    if elapsed <= 0:
        return None
    return (os.cpu_count() or 1) * (elapsed - (idle1 - idle0)) / elapsed


def load_average() -> float | None:
    """The other jobs' load on this process's cores: the smaller of the 1-minute load average and
    :func:`busy_cores` (a job that has just ended still weighs in the load average for a minute), times the
    share of the machine's cores this process may use (a container pinned to 4 of 64 cores sees a 64-core
    machine's load); None where the system has neither."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    if load is None or load > 0.5:  # busy, or unknown: look at the cores busy now (an idle machine needs no look)
        busy = busy_cores()
        load = busy if load is None else load if busy is None else min(load, busy)
    return None if load is None else load * min(1.0, available_cores() / (os.cpu_count() or 1))


def _env_threads(env: Mapping[str, str]) -> int | None:
    value = env.get(ENV, "").strip()
    try:
        n = int(value)
    except ValueError:
        return None
    return n if n >= 1 else None


def choose_threads(workers: int = 0, processes: int = 1, requested: int | None = None, *, cores: int | None = None,
                   load: float | None = None, env: Mapping[str, str] | None = None) -> ThreadChoice:
    """The intra-op threads of a process that starts ``workers`` data-loader workers, one of ``processes``
    on this machine (module docstring). ``requested`` (a config's ``threads``) and ``OMP_NUM_THREADS`` in
    ``env`` win; ``cores``, ``load`` and ``env`` default to this machine's (given in tests)."""
    if requested is not None:
        if int(requested) < 1:
            raise ValueError(f"threads must be >= 1 (or null: automatic), got {requested}")
        reason, cores = "set by the config's threads key", available_cores() if cores is None else cores
        if int(requested) > cores:  # oversubscribed: threads wait on each other, far slower than one per core
            reason += f"; more than this machine's {cores} core(s): expect it slower than threads={cores}"
        return ThreadChoice(int(requested), "config", reason)
    env = os.environ if env is None else env
    explicit = _env_threads(env)
    if explicit is not None:
        return ThreadChoice(explicit, ENV, f"{ENV}={explicit}")
    cores = available_cores() if cores is None else cores
    processes, workers = max(1, int(processes)), max(0, int(workers))
    share = cores // (processes * (1 + workers))
    reason = f"automatic: {cores} core(s) // ({processes} process(es) x (1 + {workers} data worker(s))) = {share}"
    if share < 1:
        reason += ", at least 1"
    threads = max(1, share)
    if load is not None and load > 0.5:
        free = max(1, round(cores - load))
        if free < threads:
            threads = free
            reason += f", {free} left free by the machine's load {load:.1f}"
    return ThreadChoice(threads, "automatic", reason)


def configure_threads(workers: int = 0, processes: int = 1, requested: int | None = None,
                      log: Callable[[str], None] | None = None, hint: str = f"{ENV}=N chooses",
                      **machine: Any) -> ThreadChoice:
    """Choose (:func:`choose_threads`) and apply the intra-op threads with ``torch.set_num_threads``; ``log``
    gets one line saying how many, why, and ``hint`` (how to choose). ``machine``: ``cores``/``load``/``env``
    (tests)."""
    if "load" not in machine:
        machine["load"] = load_average()
    choice = choose_threads(workers, processes, requested, **machine)
    apply_threads(choice.threads)
    if log is not None:
        log(f"{choice}; {hint}" if hint else str(choice))
    return choice


def apply_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)`` unless torch already runs that many."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@contextmanager
def using_threads(threads: int) -> Iterator[None]:
    """Torch runs ``threads`` intra-op threads inside the block and its previous count after it."""
    import torch

    before = torch.get_num_threads()
    apply_threads(threads)
    try:
        yield
    finally:
        apply_threads(before)
