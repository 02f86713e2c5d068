"""The validation hook: BackRetrieval on ``val`` (no parallel data, :class:`~..evaluation.val_set.BackRetrievalSet`),
and sentence translation on ``test`` only for a run that asks for it (``val.test_groups`` > 0).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..config import TrainConfig
from ..embeddings import Encoder
from ..evaluation.val_set import BackRetrievalSet, image_features_of


class Validator:
    """Loads the val/test data once; ``__call__(encoder)`` returns ``{"val/bkr@K": ..., "test/...": ...}``,
    :meth:`evaluate` the same and the per-query hits of every ``val/bkr@K``."""

    def __init__(self, cfg: TrainConfig, device: str = "cpu") -> None:
        self.cfg = cfg
        root = Path(cfg.data.root)
        # g's network, if any, runs once over the val images on ``device`` (the training's)
        self.val = BackRetrievalSet(root / cfg.data.val_split, cfg.val.max_per_lang, cfg.seed,
                                    image_features_of(cfg, cfg.data.val_split), cfg.val.bkr_ks, device=device)
        self.note: str | None = None  # what the trainer logs once about the val set
        self.texts_cut_said: set[str] = set()  # the val captions' TextsCut messages the trainer logged (once each)
        if cfg.model.text_encoder == "sigurdsson":  # one word table per training language: none for the others
            self._keep_trained(cfg)
        # the test split only for a run that asks for it (val.test_groups > 0); never used to choose anything
        self.test_dir = root / cfg.data.test_split if cfg.data.test_split and cfg.val.test_groups > 0 else None
        if self.test_dir is not None and not (self.test_dir / "manifest.json").is_file():
            self.test_dir = None

    def _keep_trained(self, cfg: TrainConfig) -> None:
        """Score the val captions of the languages the per-language model has a table for (``model.languages``, the
        training languages), as sentence translation does: the others cannot be encoded (the first validation
        stopped the run). Fewer than two left is refused before the run starts
        (:func:`~.train_set.check_val_languages`)."""
        present = sorted(set(self.val.langs.tolist()))
        kept = [lang for lang in present if lang in cfg.model.languages]
        untrained = [lang for lang in present if lang not in cfg.model.languages]
        if not untrained:
            return
        self.keep_languages(kept)
        self.note = (f"val: BackRetrieval on {','.join(kept)} only: the Sigurdsson baseline has no word table for "
                     f"{','.join(untrained)} (not among its training languages)")

    def keep_languages(self, languages: Sequence[str]) -> None:
        """Score only the val captions of ``languages`` (and their pairs) from now on."""
        self.val.keep_languages(languages)

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        """The metrics of ``encoder`` (see :meth:`evaluate` for the per-query hits too)."""
        return self.evaluate(encoder)[0]

    def evaluate(self, encoder: Encoder) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(metrics, hits)``: ``hits["val/bkr@K"]`` is the per-query hit vector ``(Q,)`` of every
        language pair concatenated in a fixed order (the same queries at every call, so two
        checkpoints' hits are paired for checkpoint selection)."""
        text = encoder.encode_text(self.val.texts, head="text", langs=list(self.val.langs))
        metrics, hits = self.val.evaluate(text)
        if self.test_dir is not None:
            from ..evaluation import sentence_translation_score

            st = sentence_translation_score(encoder, self.test_dir, n_groups=self.cfg.val.test_groups, seed=self.cfg.seed)
            metrics["test/sentence_translation"] = float(st["score"])
            metrics["test/sentence_translation_chance"] = float(st["chance"])
        return metrics, hits
