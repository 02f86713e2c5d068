"""Checkpoint selection: does a validated checkpoint replace ``best``?

With ``val.select_test`` null the rule is the plain maximum of ``val.select_by``. With
``mcnemar`` or ``bootstrap`` a checkpoint whose value is higher replaces the best only when
its per-query hits (the selection metric's hit vector over the fixed val queries, every
language pair concatenated) beat the best's at one-sided level ``val.select_alpha``
(:func:`backretrieval.better_beyond_noise`); otherwise the gain is noise and ``best`` stays.
The best's hits are saved as ``selection_hits.npy`` in ``best/`` so a resumed run compares
against them. Where there are none to compare with (a run started without a test, or a
val set that changed size), the plain maximum decides and the log says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError

HITS_FILE = "selection_hits.npy"


@dataclass
class Verdict:
    """The decision on one validated checkpoint.

    ``accept``: it becomes ``best``. ``p_value``: the one-sided p of "new > best" when a
    test ran (else None). ``noise``: the value was higher but not beyond noise. ``note``: a
    one-line reason for the log (empty when there is nothing to say).
    """

    accept: bool
    p_value: float | None = None
    noise: bool = False
    note: str = ""


def judge(value: float, hits: np.ndarray | None, best: dict | None, best_hits: np.ndarray | None,
          test: str | None, alpha: float, seed: int = 0) -> Verdict:
    """Decide whether a checkpoint with selection ``value`` and per-query ``hits`` replaces ``best``.

    ``best``: ``{"metric", "value", "step"}`` or None (no best yet); ``best_hits``: its hit
    vector ``(Q,)`` or None. ``test``: None (plain max), ``"mcnemar"`` or ``"bootstrap"``.
    A NaN ``value`` never becomes best (no later value could compare higher than it), and any
    other value replaces a best whose value is NaN or missing (null in a saved state); the note
    says so.
    """
    from backretrieval.uncertainty import better_beyond_noise, p_better  # typed (the package's lazy names: object)

    if value != value:  # NaN
        return Verdict(False, note="the selection metric is NaN; never chosen as best")
    if best is None:
        return Verdict(True)
    if best.get("value") is None or best["value"] != best["value"]:
        return Verdict(True, note=f"replaces a best with no value ({best.get('metric')} NaN at step "
                                  f"{best.get('step')})")
    if not value > best["value"]:
        return Verdict(False)
    if test is None:
        return Verdict(True)
    if hits is None or best_hits is None or np.shape(hits) != np.shape(best_hits):
        why = "no stored hits for the best" if best_hits is None or hits is None else \
            f"the val queries changed ({np.size(best_hits)} -> {np.size(hits)})"
        return Verdict(True, note=f"select_test={test}: {why}; chose by plain max")
    p = p_better(hits, best_hits, test, seed=seed)
    accept = better_beyond_noise(hits, best_hits, alpha=alpha, test=test, seed=seed)
    note = "" if accept else (f"{best['metric']}={value:.4f} > best {best['value']:.4f} (step {best['step']}) but not "
                              f"beyond noise ({test} p={p:.3g} >= {alpha}); best kept")
    return Verdict(accept, p, not accept, note)


def save_hits(folder: Path, hits: np.ndarray | None) -> None:
    """Write the best's hits beside its checkpoint (nothing when there are none)."""
    if hits is not None:
        np.save(Path(folder) / HITS_FILE, np.asarray(hits))


def load_hits(best_dir: Path, best: dict | None) -> np.ndarray | None:
    """The hits saved in ``best_dir`` when they belong to ``best`` (same step), else None."""
    from backretrieval.errors import BackRetrievalError
    from backretrieval.files import load_npy

    from .checkpoint import STATE, read_state

    path, state = Path(best_dir) / HITS_FILE, Path(best_dir) / STATE
    if best is None or not path.is_file() or not state.is_file():
        return None
    if read_state(best_dir).get("step") != best.get("step"):
        return None
    try:
        hits = np.array(load_npy(path, "the best checkpoint's val hits"))
    except BackRetrievalError as err:
        raise UserError(f"{err}; the checkpoint is damaged: delete this file (the next best is then chosen by "
                        "plain max) or train again") from None
    if hits.ndim != 1:
        raise UserError(f"{path}: the best checkpoint's val hits have shape {hits.shape}, expected one per val query "
                        "(1-D); the checkpoint is damaged: delete this file (the next best is then chosen by plain "
                        "max) or train again")
    return hits
