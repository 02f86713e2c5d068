"""Validation inside the training loop: the hook (:class:`~.validation.Validator`) built once, run after a step, its
metrics logged, and the checkpoint judged against ``best`` with every process agreeing."""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, TypeVar

import numpy as np
from accelerate import Accelerator
from tokenizers import Tokenizer

from ..config import TrainConfig
from ..embeddings import Encoder
from ..texts_cut import TextsCut, texts_cut_once
from ..models import GlobetrotterModel
from .logs import Log, Scalars
from .progress import Progress
from .selection import Verdict, judge

if TYPE_CHECKING:
    from .validation import Validator


def build_validator(cfg: TrainConfig, accelerator: Accelerator, log: Log) -> Validator:
    """The validation hook (main process); warns when val is too small for a BkR@K to tell checkpoints apart."""
    from .validation import Validator

    validator = Validator(cfg, device=str(accelerator.device))
    if validator.note:  # e.g. the languages a per-language model cannot encode, left out
        log(validator.note)
    warning = validator.val.saturation_warning()
    if warning:  # the best checkpoint would then be chosen by a tie
        log(warning)
    return validator


@contextmanager
def texts_cut_said_once(said: set[str], log: Log) -> Iterator[None]:
    """Every validation encodes the same val captions: the :class:`~..encoder.TextsCut` warning of its encoding calls
    is logged once per run (``said``: the messages logged so far), not at each validation; other warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TextsCut)
        yield
    for w in caught:
        if not issubclass(w.category, TextsCut):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in said:
            said.add(str(w.message))
            log(f"warning: validation: {w.message} (said once)")


def validate(cfg: TrainConfig, accelerator: Accelerator, validator: Validator | None, unwrapped: GlobetrotterModel,
             tokenizer: Tokenizer, progress: Progress, done: int, log: Log,
             scalars: Scalars) -> tuple[dict, bool, np.ndarray | None]:
    """Validate after step ``done`` on the main process and judge the checkpoint against ``best``
    (:func:`.selection.judge`); every process gets ``(metrics, accept)``, the main one the selection hits too. The
    metrics go to TensorBoard through ``scalars``."""
    key, verdict, hits = cfg.val.select_by, Verdict(False), None
    metrics: dict = {}
    if accelerator.is_main_process:
        assert validator is not None  # the main process builds one whenever val.every > 0, which calls this
        unwrapped.eval()
        with texts_cut_said_once(validator.texts_cut_said, log), texts_cut_once():  # val and test texts: one line
            metrics, all_hits = validator.evaluate(Encoder(unwrapped, tokenizer, cfg, device=str(accelerator.device)))
        unwrapped.train()
        hits = all_hits.get(key)
        if key and key in metrics:
            verdict = judge(metrics[key], hits, progress.best, progress.best_hits, cfg.val.select_test,
                            cfg.val.select_alpha, cfg.seed)
        scalars({**metrics, **_selection_logs(verdict)}, done)
        log(f"step {done}: " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if verdict.note:
            log(f"step {done}: {verdict.note}")
    metrics, accept = _broadcast((metrics, verdict.accept), accelerator)
    return metrics, accept, hits


def _selection_logs(verdict: Verdict) -> dict[str, float]:
    """TensorBoard scalars of a selection test: its p-value and whether a higher value was rejected as noise."""
    if verdict.p_value is None:
        return {}
    return {"val/select_p_value": verdict.p_value, "val/select_rejected": float(verdict.noise)}


_T = TypeVar("_T")


def _broadcast(obj: _T, accelerator: Accelerator) -> _T:
    """The main process's ``obj`` (picklable) on every process (checkpoint selection must agree)."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]
