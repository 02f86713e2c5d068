"""The adaptation as the trainer drives it: the starting run loaded into the grown model, the precomputed
features, the objective, the batches and the before/after report."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import torch
from tokenizers import Tokenizer

from ...config import TrainConfig
from ...embeddings import Encoder
from ...encoder import load
from ...models import GlobetrotterModel
from ...texts_cut import texts_cut_once
from ..train_set import train_languages
from . import bank
from .objective import AdaptationObjective
from .report import translation
from .start import start_train_config, starting_checkpoint, trained_languages
from .weights import load_start


class Adaptation:
    """The starting run, loaded into a (vocabulary-grown) model, and the precomputed features the steps read.

    Use: ``a = Adaptation(cfg, model)`` before the optimizer is built (loads the weights, freezes the
    image side); :meth:`precompute` once; then :meth:`objective`, :meth:`batches`, and :meth:`report`.
    """

    def __init__(self, cfg: TrainConfig, model: GlobetrotterModel, log: Callable[[str], None] = print) -> None:
        self.cfg, self.log = cfg, log
        self.source = starting_checkpoint(cfg.adapt.from_run).resolve()
        log(f"adapt: starting from {self.source}")
        self.start: Encoder | None = load(self.source)  # released by precompute
        self.old_languages = trained_languages(self.start.cfg)
        old = start_train_config(cfg, self.start.cfg).data
        self.old_split = str(Path(old.root) / old.train_split)  # the folder of the bank's old-language captions
        if cfg.adapt.train == "new-tokens" and cfg.optim.embedding_lr_scale != 1:
            log(f"adapt: optim.embedding_lr_scale={cfg.optim.embedding_lr_scale:g} (the starting run's) scales the "
                f"new token rows' lr to {cfg.optim.lr * cfg.optim.embedding_lr_scale:g}; configs/adapt.yaml sets 1")
        self.trained_rows = load_start(cfg, model, self.start, log)  # adapt.train=new-tokens: the rows that train
        self.cut_tally: dict = {}  # the texts the report's encodings cut, before and after: one TextsCut at its end

    @torch.no_grad()
    def precompute(self, model: GlobetrotterModel, tokenizer: Tokenizer, device: str | torch.device,
                   main: bool = True) -> None:
        """Encode, once: the bank (old-language training captions by the starting model, and their
        images), the new language's captions as tokens and its images as backbone features; and, on the
        main process (``main``: also the progress bars), the "before" half of :meth:`report`."""
        cfg, a = self.cfg, self.cfg.adapt
        assert self.start is not None  # precompute runs once (the trainer's call): it releases the starting model
        self.start.model.to(device)
        self.start.device = str(device)
        self.features = bank.precompute(cfg, self.start, model, tokenizer, device, progress=main)
        self.log(f"adapt: {len(self.features.ids)} {a.language} captions, "
                 f"{a.epochs if a.epochs is not None else '-'} epoch(s) = {cfg.steps} step{'s' if cfg.steps != 1 else ''} of {cfg.batch_size}; "
                 f"bank of {len(self.features.bank_truth)} old-language train captions "
                 f"({','.join(train_languages(start_train_config(cfg, self.start.cfg)))}), "
                 f"{self.old_batch} beside each batch")
        with texts_cut_once(self.cut_tally, say=False):  # said with the "after" half's, in report
            self.before = translation(cfg, self.old_languages, self.start) if main else None
        self.start.model.cpu()
        self.start = None  # the starting model is no longer needed

    @property
    def old_batch(self) -> int:
        """Old-language bank captions beside each batch: ``adapt.old_batch`` (default the batch size), at most the
        bank's size (known after :meth:`precompute`)."""
        return min(self.cfg.adapt.old_batch or self.cfg.batch_size, len(self.features.bank_truth))

    def objective(self) -> AdaptationObjective:
        """A new :class:`AdaptationObjective` with the run's loss weights."""
        return AdaptationObjective(self.cfg.loss)

    def batches(self, local_batch: int, rank: int = 0, world: int = 1) -> Iterator[dict]:
        """Endless batches for process ``rank`` (:func:`.bank.batches`)."""
        return bank.batches(self.features, self.cfg, self.old_batch, local_batch, rank, world)

    def report(self, encoder: Encoder) -> dict:
        """Before/after sentence translation (fractions): ``{"language", "before": {...}, "after": {...}}``; the test
        captions both halves cut to ``data.max_length`` are one :class:`~...texts_cut.TextsCut` warning."""
        with texts_cut_once(self.cut_tally):
            after = translation(self.cfg, self.old_languages, encoder)
        return {"language": self.cfg.adapt.language, "from": str(self.cfg.adapt.from_run), "checkpoint": str(self.source),
                "old_languages": self.old_languages, "before": self.before, "after": after}
