"""Learning-rate schedule: linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> LambdaLR:
    """LambdaLR whose factor rises linearly over ``warmup_steps`` and follows a cosine to ``min_lr_ratio``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def warmup_warning(warmup_steps: int, total_steps: int, lr: float) -> str | None:
    """A one-line warning when the warm-up outlasts the run (``warmup_steps`` above ``total_steps``): the learning
    rate then stops at ``total_steps / warmup_steps`` of ``lr`` and never reaches it; ``None`` otherwise."""
    if warmup_steps <= total_steps:
        return None
    return (f"warning: optim.warmup_steps={warmup_steps} is above the run's {total_steps} step(s): the learning rate "
            f"only rises to {total_steps / warmup_steps:.0%} of optim.lr={lr:g} (the warm-up never ends); set "
            f"optim.warmup_steps to at most {total_steps}, or train more steps")
