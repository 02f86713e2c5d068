"""The learning-rate schedule: linear warm-up, then a cosine to ``optim.min_lr_ratio`` of ``optim.lr``."""
from __future__ import annotations

import math

import pytest
import torch

from globetrotter.training.scheduler import warmup_cosine, warmup_warning


def rates(warmup: int, total: int, min_lr_ratio: float, lr: float = 2.0) -> list[float]:
    """The rate each of the ``total`` steps trains with (read before the schedule steps, as the trainer does)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    schedule = warmup_cosine(optimizer, warmup, total, min_lr_ratio)
    out = []
    for _ in range(total):
        out.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    return out + [schedule.get_last_lr()[0]]  # and the one after the last step


def test_warm_up_rises_linearly_then_the_cosine_ends_at_the_floor():
    """warm-up 4 of 10 steps, floor 0.25 of lr=2: steps 0..3 train at (k + 1) / 4 of lr; from step 4 the rate is
    floor + (1 - floor) * (1 + cos(pi * t)) / 2 of lr with t = (k - 4) / 6 going from 0 to 1, so it reaches
    lr at step 4 and exactly 0.25 * lr = 0.5 after the last step."""
    lr, floor = 2.0, 0.25
    expected = [lr * (k + 1) / 4 for k in range(4)]
    expected += [lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (k - 4) / 6))) for k in range(4, 11)]
    got = rates(4, 10, floor, lr)
    assert got == pytest.approx(expected)
    assert got[4] == pytest.approx(lr) and got[-1] == pytest.approx(floor * lr)
    assert all(a >= b for a, b in zip(got[4:], got[5:]))  # never rises after the warm-up
    assert min(got[4:]) == pytest.approx(floor * lr)  # never below the floor


def test_no_warm_up_starts_at_lr_and_a_floor_of_one_keeps_it():
    assert rates(0, 5, 0.0)[0] == pytest.approx(2.0)
    assert rates(0, 5, 1.0) == pytest.approx([2.0] * 6)


def test_a_warm_up_as_long_as_the_run_is_not_warned_about_one_step_longer_is():
    assert warmup_warning(10, 10, 1e-3) is None  # the last step trains at the full rate
    said = warmup_warning(11, 10, 1e-3)
    assert said is not None and "optim.warmup_steps=11" in said and "91%" in said  # 10 / 11 of lr at most
    assert rates(11, 10, 0.0)[-2] == pytest.approx(2.0 * 10 / 11)
