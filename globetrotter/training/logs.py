"""What the training loop logs: the ``log`` callable every part takes (:data:`Log`), and a step's scalars to
TensorBoard (:class:`Scalars`, :func:`log_training`), leaving out the statistics undefined at that step."""
from __future__ import annotations

import math
from typing import Callable

from accelerate import Accelerator
from tqdm.auto import tqdm

from ..config import TrainConfig

Log = Callable[[str], None]


UNDEFINED_BECAUSE = {
    "alpha/precision": "no pair with α > 0 in the batch",
    "alpha/cross_language_share": "no pair with α > 0 in the batch",
    "alpha/recall": "no true translation pair in the batch",
}
"""Why a statistic of :func:`~..losses.alpha_stats` (or the objective) is NaN: a share of an empty set."""


class Scalars:
    """Writes a step's scalars to TensorBoard (``accelerator.log``), leaving out the statistics that are undefined
    there (NaN: a share of an empty set, such as ``alpha/precision`` of a batch without a pair with α > 0), which
    would break the plots; the first time a statistic is left out, one line says which and why. A loss or
    ``grad_norm`` is always written as it is: a non-finite one is divergence, not an undefined statistic (the
    :class:`~.step.Stepper` skips the steps whose loss is non-finite)."""

    ALWAYS = ("loss/", "grad_norm")

    def __init__(self, accelerator: Accelerator, log: Log) -> None:
        self.accelerator, self.log = accelerator, log
        self.said: set[str] = set()

    def __call__(self, values: dict[str, float], step: int) -> None:
        undefined = [k for k, v in values.items() if isinstance(v, float) and math.isnan(v) and not k.startswith(self.ALWAYS)]
        new = [k for k in undefined if k not in self.said]
        if new:
            why = "; ".join(f"{k} ({UNDEFINED_BECAUSE.get(k, 'NaN')})" for k in new)
            self.log(f"step {step}: undefined, so not plotted at this step nor any other where it is undefined "
                     f"(said once): {why}")
            self.said.update(new)
        self.accelerator.log({k: v for k, v in values.items() if k not in undefined}, step=step)


def log_training(cfg: TrainConfig, scalars: Scalars, bar: tqdm, logs: dict, bad_samples: int,
                  samples_per_s: float, done: int) -> None:
    """The step's losses, learning rate (the one it trained with), throughput (samples per second of training since
    the last log: validation and checkpoint writes left out) and bad samples to TensorBoard and the progress bar."""
    logs["samples_per_s"] = samples_per_s
    logs["data/bad_samples"] = bad_samples
    logs["loss/total"] = sum(getattr(cfg.loss, k.split("/")[1]) * v for k, v in logs.items()
                             if k.startswith("loss/") and k != "loss/total")
    scalars(logs, done)
    bar.set_postfix(loss=f"{logs['loss/total']:.3f}", sps=f"{logs['samples_per_s']:.0f}")
