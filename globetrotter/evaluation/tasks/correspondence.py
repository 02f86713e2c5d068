"""Sentence correspondence transfer to unseen languages (Globetrotter paper A.1) as a library call: :func:`evaluate`."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from backretrieval.errors import given
from backretrieval.files import is_whole
from backretrieval.renamed import renamed_keywords
from globetrotter.errors import UserError

from ..models import ModelLike, language_kwargs
from ..records import Result, dataset_info
from .checks import require_languages, require_positive_int, require_trained
from .common import resolve_model

PARTS = ("train", "seen_test", "unseen_test")


@renamed_keywords(max_per_language="max_per_lang")
def evaluate(
    model: ModelLike,
    split: str | Path,
    *,
    languages: Sequence[str] | None = None,
    seen: Sequence[str] | None = None,
    max_per_lang: int = 2000,
    test_fraction: float = 0.2,
    min_units: int = 4,
    epochs: int = 3,
    probe_batch_size: int = 64,
    lr: float = 1e-3,
    probe_seeds: Sequence[int] = (0, 1, 2),
    seed: int = 0,
    batch_size: int = 256,
    name: str | None = None,
    device: str = "cpu",
) -> Result:
    """Whether ``model``'s frozen token states tell a caption from a spliced one in languages a probe never saw.

    The task (:func:`~..correspondence.build_task`, ``seed``-ed): each caption of ``split`` cut in two, half of them
    given another caption's second half; a one-layer, one-head transformer probe trained for ``epochs`` on the
    ``seen`` languages (default: the first half of the sorted ``languages``). Metrics (fractions, means over
    ``probe_seeds``): ``seen_accuracy`` on held-out images of the seen languages, ``unseen_accuracy`` on the others,
    ``relative_decrease`` = (seen - unseen) / (seen - 0.5) (None unless seen is above chance beyond noise:
    :func:`~..correspondence.relative_decrease`), per-language accuracy, and the accuracy of a classifier
    of surface lengths alone (``surface_shortcut_accuracy``, ~0.5 when the task gives nothing away).
    """
    import torch

    from data_prep.shards import read_captions

    from .. import correspondence as corr

    require_trained(model, "correspondence")
    require_languages(languages=languages, seen=seen)
    counts = {"epochs": epochs, "probe_batch_size": probe_batch_size, "max_per_lang": max_per_lang}
    for count_name, count in counts.items():  # 0 epochs was an untrained probe's figure, 2.5 torch's scheduler error
        if count is not None:
            require_positive_int(count, count_name)
    if isinstance(probe_seeds, (str, bytes)) or not isinstance(probe_seeds, Sequence) or not probe_seeds \
            or not all(is_whole(s) for s in probe_seeds):
        raise UserError(f"probe_seeds: expected a non-empty sequence of integers, got {probe_seeds!r}")
    if not 0 < lr < float("inf"):
        raise UserError(f"{given('lr', lr)}: expected a learning rate > 0")
    task = corr.build_task(read_captions(split), languages, seen, seed=seed, test_fraction=test_fraction,
                           max_per_language=max_per_lang, min_units=min_units)
    encoder, info = resolve_model(model, name, device)
    if not hasattr(encoder, "encode_tokens"):
        raise UserError(f"correspondence: {model} gives no token-level states (needs a Globetrotter run folder)")
    feats = {}
    for part_name in PARTS:
        part = getattr(task, part_name)
        states, mask = encoder.encode_tokens(part.texts, batch_size=batch_size, **language_kwargs(encoder, part.langs))
        feats[part_name] = corr.Features(torch.from_numpy(states), torch.from_numpy(mask))
    res = corr.evaluate(task, feats, probe_seeds=probe_seeds, epochs=epochs, batch_size=probe_batch_size, lr=lr)
    metrics = {k: res[k] for k in ("seen_accuracy", "unseen_accuracy", "relative_decrease", "chance",
                                   "seen_accuracy_std", "unseen_accuracy_std", "per_language", "surface_shortcut_accuracy")}
    examples = {}
    for lang in task.seen + task.unseen:
        part = task.seen_test if lang in task.seen else task.unseen_test
        idx = np.flatnonzero(part.langs == lang)
        examples[lang] = [{"text": part.texts[i], "corresponds": bool(part.labels[i])} for i in idx[:4]]
    n_examples = {}
    for part_name in PARTS:
        langs = getattr(task, part_name).langs
        n_examples[part_name] = {str(lang): int((langs == lang).sum()) for lang in np.unique(langs)}
    details = {"seen_languages": task.seen, "unseen_languages": task.unseen,
               "units": task.train.unit | task.unseen_test.unit, "n_examples": n_examples,
               "per_seed": res["per_seed"], "examples": examples,
               "probe": {"layers": 1, "heads": 1, "d_model": int(feats["train"].states.shape[-1]), "epochs": epochs,
                         "batch_size": probe_batch_size, "lr": lr, "optimizer": "AdamW, one-cycle"}}
    config = {"languages": None if languages is None else list(languages), "seen": task.seen,
              "max_per_language": max_per_lang, "test_fraction": test_fraction, "min_units": min_units,
              "epochs": epochs, "probe_batch_size": probe_batch_size, "lr": lr, "probe_seeds": list(probe_seeds),
              "seed": seed}
    return Result("correspondence", metrics, task.seen + task.unseen, model=info, dataset=dataset_info(split),
                  config=config, details=details)
