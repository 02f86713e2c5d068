"""BackRetrieval over a non-parallel split (no parallel text needed): the trainer's checkpoint selection and the
ranking choice of ``eval.py select`` both score text models on it.

The image similarity ``g`` (``image_features``) must stay fixed across the models compared: ``pixels`` (colour
thumbnails, no weights), ``model`` (the model's own image head: moves with training), or a BackRetrieval image-model
spec such as ``timm:efficientnet_lite0:package`` or ``timm:resnet50:/path/weights.safetensors`` (cached beside the
split).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from globetrotter.errors import UserError


def pixel_features(images: list[Image.Image], side: int = 16) -> np.ndarray:
    """Centred, L2-normalised colour thumbnails (N, side*side*3): a weight-free image similarity."""
    x = np.stack([np.asarray(im.convert("RGB").resize((side, side), Image.BILINEAR), np.float32).ravel() for im in images])
    x -= x.mean(axis=1, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-6)


class BackRetrievalSet:
    """At most ``max_per_lang`` captions per language of ``split`` (a ``seed``-ed sample) with their images and
    image features; :meth:`evaluate` scores text embeddings or any text similarity on every ordered language pair."""

    def __init__(self, split: str | Path, max_per_lang: int | None = 200, seed: int = 0,
                 image_features: str = "pixels", ks: Sequence[int] = (1, 5, 10)) -> None:
        from data_prep.shards import decode_image, iter_metas, iter_raw

        self.split, self.seed, self.ks, self.image_spec = Path(split), seed, tuple(ks), image_features
        if not (self.split / "manifest.json").is_file():
            raise UserError(f"{self.split}: no split here (expected manifest.json) for BackRetrieval")
        rng = np.random.default_rng(seed)
        by_lang: dict[str, list[int]] = {}
        for i, meta in enumerate(iter_metas(self.split)):  # captions first: only the kept images are decoded
            by_lang.setdefault(meta["lang"], []).append(i)
        keep = sorted(j for idx in by_lang.values() for j in rng.permutation(idx)[:max_per_lang])
        wanted = iter(keep)
        kept: list[tuple[dict, Image.Image]] = []
        next_row = next(wanted, None)
        for i, (_key, ext, data, meta) in enumerate(iter_raw(self.split)):
            if next_row is None:
                break
            if i == next_row:
                kept.append((meta, decode_image(data, ext)))
                next_row = next(wanted, None)
        self.texts = [m["caption"] for m, _ in kept]
        self.langs = np.array([m["lang"] for m, _ in kept])
        self.image_ids = np.array([m["image_id"] for m, _ in kept])
        self.images = [image for _, image in kept]
        if image_features == "pixels":
            self.image_feats = pixel_features(self.images)
        elif image_features == "model":
            self.image_feats = None  # the model's own image head, at each call
        else:  # timm:NAME[:WEIGHTS], WEIGHTS a local file or "package" (offline EfficientNet-Lite0)
            from backretrieval.images import ImageFeatureExtractor

            _, name, *weights = image_features.split(":", 2)
            # once per distinct image (an image may have several captions), cached beside the split for later runs
            extractor = ImageFeatureExtractor(name, weights[0] if weights else None, progress=False,
                                              cache_dir=self.split / "bkr-image-features")
            unique, first, inverse = np.unique(self.image_ids, return_index=True, return_inverse=True)
            self.image_feats = extractor.extract([self.images[i] for i in first], ids=list(unique))[inverse]

    def keep_languages(self, languages: Sequence[str]) -> None:
        """Score only the captions of ``languages`` (and their pairs) from now on."""
        keep = np.isin(self.langs, list(languages))
        if len(set(self.langs[keep])) < 2:
            raise UserError(f"{self.split}: BackRetrieval needs captions in two of {sorted(languages)}; the split has "
                            f"{sorted(set(self.langs))}")
        idx = np.flatnonzero(keep)
        self.texts = [self.texts[i] for i in idx]
        self.images = [self.images[i] for i in idx]
        self.langs, self.image_ids = self.langs[idx], self.image_ids[idx]
        if self.image_feats is not None:
            self.image_feats = self.image_feats[idx]

    def evaluate(self, text_emb: np.ndarray | None = None, encoder=None,
                 text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                 ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(metrics, hits)`` of ``text_emb`` (rows of :attr:`texts`; cosine) or of ``text_scores(src_rows,
        tgt_rows)``: ``metrics["val/bkr@K"]`` the mean over the ordered language pairs, ``hits["val/bkr@K"]`` the
        per-query hits of every pair concatenated in a fixed order (the same queries at every call, so two models'
        hits are paired). ``encoder`` embeds the images when the image similarity is ``model``."""
        from backretrieval import evaluate_pairs

        images = self.image_feats if self.image_feats is not None else encoder.encode_image(self.images)
        result = evaluate_pairs(text_emb, self.langs, images, self.image_ids, ks=self.ks, seed=self.seed,
                                max_rank=max(self.ks), with_corr=False, return_hits=True, text_scores=text_scores)
        metrics = {f"val/bkr@{k}": float(result["mean"][f"bkr@{k}"]) for k in self.ks}
        return metrics, {f"val/bkr@{k}": result["hits"][f"bkr@{k}"] for k in self.ks}

    def evaluate_across_languages(self, text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray], encoder=None
                                  ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """:meth:`evaluate` with each language's queries retrieving among the captions of *every* other language at
        once (BkR's step 2 over the candidates sentence translation ranks, not one target language at a time), then
        back-retrieving among their own language's images; ``metrics`` the mean over the source languages. A ranking
        whose scores differ between target languages (CSLS's query term ``r_b(x)``) is judged where it acts; with two
        languages it is :meth:`evaluate`. Targets showing an image of the source side are left out."""
        from backretrieval import bkr_recall

        images = self.image_feats if self.image_feats is not None else encoder.encode_image(self.images)
        per_k: dict[int, list[float]] = {k: [] for k in self.ks}
        hits: dict[int, list[np.ndarray]] = {k: [] for k in self.ks}
        for lang in sorted(set(self.langs.tolist())):
            src = np.flatnonzero(self.langs == lang)
            tgt = np.flatnonzero((self.langs != lang) & ~np.isin(self.image_ids, self.image_ids[src]))
            res = bkr_recall(None, images[src], None, images[tgt], self.ks, src_image_ids=self.image_ids[src],
                             text_sim=text_scores(src, tgt), max_rank=max(self.ks))
            for k in self.ks:
                per_k[k].append(res[f"bkr@{k}"])
                hits[k].append(res["hits"][k])
        metrics = {f"val/bkr@{k}": float(np.mean(per_k[k])) for k in self.ks}
        return metrics, {f"val/bkr@{k}": np.concatenate(hits[k]) for k in self.ks}

