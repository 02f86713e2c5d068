"""The validation hook: BackRetrieval on ``val`` (no parallel data), and sentence translation on ``test`` only for
a run that asks for it (``val.test_groups`` > 0).

Image similarity for BackRetrieval (``val.image_features``) must stay fixed across
checkpoints so scores are comparable: ``pixels`` (colour thumbnails, no weights),
``model`` (the checkpoint's own image head; moves with training), or a BackRetrieval
image-model spec such as ``timm:resnet50:/path/weights.safetensors``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from data_prep.shards import iter_samples

from ..config import TrainConfig
from ..encoder import Encoder
from ..errors import UserError


def pixel_features(images: list[Image.Image], side: int = 16) -> np.ndarray:
    """Centred, L2-normalised colour thumbnails (N, side*side*3): a weight-free image similarity."""
    x = np.stack([np.asarray(im.convert("RGB").resize((side, side), Image.BILINEAR), np.float32).ravel() for im in images])
    x -= x.mean(axis=1, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-6)


class Validator:
    """Loads the val/test data once; ``__call__(encoder)`` returns ``{"val/bkr@K": ..., "test/...": ...}``,
    :meth:`evaluate` the same and the per-query hits of every ``val/bkr@K``."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        root = Path(cfg.data.root)
        rng = np.random.default_rng(cfg.seed)
        samples = list(iter_samples(root / cfg.data.val_split))
        by_lang: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            by_lang.setdefault(s.lang, []).append(i)
        keep = sorted(j for idx in by_lang.values() for j in rng.permutation(idx)[: cfg.val.max_per_lang])
        self.samples = [samples[i] for i in keep]
        self.texts = [s.caption for s in self.samples]
        self.langs = np.array([s.lang for s in self.samples])
        self.image_ids = np.array([s.image_id for s in self.samples])
        self.images = [s.image for s in self.samples]
        spec = cfg.val.image_features
        if spec == "pixels":
            self.image_feats = pixel_features(self.images)
        elif spec == "model":
            self.image_feats = None  # computed from the checkpoint at each call
        else:  # timm:NAME[:WEIGHTS], WEIGHTS a local file or "package" (offline EfficientNet-Lite0)
            from backretrieval.images import ImageFeatureExtractor

            _, name, *weights = spec.split(":", 2)
            # once per distinct image (a zh image has five captions), cached beside the split for the next runs
            extractor = ImageFeatureExtractor(name, weights[0] if weights else None, progress=False,
                                              cache_dir=root / cfg.data.val_split / "bkr-image-features")
            unique, first, inverse = np.unique(self.image_ids, return_index=True, return_inverse=True)
            feats = extractor.extract([self.images[i] for i in first], ids=list(unique))
            self.image_feats = feats[inverse]
        # the test split only for a run that asks for it (val.test_groups > 0); never used to choose anything
        self.test_dir = root / cfg.data.test_split if cfg.data.test_split and cfg.val.test_groups > 0 else None
        if self.test_dir is not None and not (self.test_dir / "manifest.json").is_file():
            self.test_dir = None

    def keep_languages(self, languages: Sequence[str]) -> None:
        """Score only the val captions of ``languages`` (and their pairs) from now on."""
        keep = np.isin(self.langs, list(languages))
        if len(set(self.langs[keep])) < 2:
            raise UserError(f"{self.cfg.data.root}/{self.cfg.data.val_split}: BackRetrieval needs val captions in two of "
                            f"{sorted(languages)}; the split has {sorted(set(self.langs))}")
        idx = np.flatnonzero(keep)
        self.samples = [self.samples[i] for i in idx]
        self.texts = [self.texts[i] for i in idx]
        self.images = [self.images[i] for i in idx]
        self.langs, self.image_ids = self.langs[idx], self.image_ids[idx]
        if self.image_feats is not None:
            self.image_feats = self.image_feats[idx]

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        """The metrics of ``encoder`` (see :meth:`evaluate` for the per-query hits too)."""
        return self.evaluate(encoder)[0]

    def evaluate(self, encoder: Encoder) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(metrics, hits)``: ``hits["val/bkr@K"]`` is the per-query hit vector ``(Q,)`` of every
        language pair concatenated in a fixed order (the same queries at every call, so two
        checkpoints' hits are paired for checkpoint selection)."""
        from backretrieval import evaluate_pairs

        metrics: dict[str, float] = {}
        text = encoder.encode_text(self.texts, head="text", langs=list(self.langs))
        images = self.image_feats if self.image_feats is not None else encoder.encode_image(self.images)
        ks = tuple(self.cfg.val.bkr_ks)
        result = evaluate_pairs(text, self.langs, images, self.image_ids, ks=ks, seed=self.cfg.seed,
                                max_rank=max(ks), with_corr=False, return_hits=True)
        hits = {f"val/bkr@{k}": result["hits"][f"bkr@{k}"] for k in ks}
        for k in ks:
            metrics[f"val/bkr@{k}"] = float(result["mean"][f"bkr@{k}"])
        if self.test_dir is not None:
            from ..evaluation import sentence_translation_score

            st = sentence_translation_score(encoder, self.test_dir, n_groups=self.cfg.val.test_groups, seed=self.cfg.seed)
            metrics["test/sentence_translation"] = float(st["score"])
            metrics["test/sentence_translation_chance"] = float(st["chance"])
        return metrics, hits
