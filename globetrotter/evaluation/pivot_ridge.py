"""A linear image-pivot baseline: per-language ridge maps from caption n-grams to image features
(``--model ridge:TRAIN_SPLIT``).

No transformer and no parallel text. For every language separately, a caption is its
character n-gram TF-IDF vector (:class:`~.tfidf.TfidfEncoder`, fitted on that language's
training captions only, so two languages share no input feature), and a ridge regression
(scikit-learn, closed form; :mod:`globetrotter.image_ridge`) maps it to the frozen backbone's
features of the image it describes: the whole-image row of the split's feature cache
(``<split>/features``, built by ``globetrotter-data features build``), L2-normalised and centred. A test caption is embedded as
its predicted image feature, so captions of different languages meet only through what
their images look like: the image pivot of the Globetrotter paper in its simplest, linear
form. It is the figure a learned model trained on the same images and captions should
clear (docs/design.md section 10).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Sequence

import numpy as np
from PIL import Image

from backretrieval.errors import given
from globetrotter.errors import UserError
from globetrotter.image_ridge import fit_image_ridge, image_targets

from .tfidf import TfidfEncoder

if TYPE_CHECKING:  # scikit-learn loads with the first fit
    from sklearn.linear_model import Ridge

PREFIX = "ridge:"
"""``--model ridge:TRAIN_SPLIT`` names this baseline instead of a run folder."""


def is_pivot_ridge_spec(model: str | None) -> bool:
    """Whether a ``--model`` value names the image-pivot ridge baseline."""
    return model is not None and model.startswith(PREFIX)


def default_features(split: Path) -> Path:
    """``<split>/features``; for a ``more-captions`` split without its own cache, the cache of the split it was
    made from (same images and image ids), which its manifest names."""
    own = split / "features"
    if own.exists() or not (split / "manifest.json").is_file():
        return own
    from data_prep.shards import read_manifest

    origin = (read_manifest(split).get("more_captions") or {}).get("from")
    return Path(origin) / "features" if origin and (Path(origin) / "features").exists() else own


class PivotRidgeEncoder:
    """Per-language TF-IDF → ridge → image-feature space, with the ``encode_text`` interface of the
    trained encoders (it needs each text's language: ``needs_language``)."""

    needs_language = True
    checkpoint = None

    def __init__(self, train_split: str | Path, alpha: float = 3.0, features: str | Path | None = None) -> None:
        self.train_split = Path(train_split)
        self.features = Path(features) if features is not None else default_features(self.train_split)
        self.alpha = alpha
        self.maps: dict[str, tuple[TfidfEncoder, Ridge]] = {}
        self.counts: dict[str, int] = {}
        self._fit()

    def _fit(self) -> None:
        from data_prep.shards import read_captions
        from globetrotter.data.feature_cache import load_feature_cache

        if not (self.train_split / "manifest.json").is_file():
            raise UserError(f"{self.train_split}: no split here (expected manifest.json); "
                            f"{given('model', 'ridge:SPLIT')} needs the training split the baseline is fitted on")
        metas = read_captions(self.train_split)
        cache = load_feature_cache(self.features)
        rows = cache.rows([str(m["image_id"]) for m in metas], self.train_split)
        target, self.centre = image_targets(cache.features[rows, 0])  # the whole image of each caption
        langs = np.array([m["lang"] for m in metas])
        captions = [m["caption"] for m in metas]
        for lang in sorted(set(langs.tolist())):
            idx = np.flatnonzero(langs == lang)
            vectorizer = TfidfEncoder().fit([captions[i] for i in idx])
            fit = fit_image_ridge(vectorizer.encode_text([captions[i] for i in idx]), target[idx], self.alpha)
            self.maps[lang], self.counts[lang] = (vectorizer, fit.model), len(idx)

    @property
    def config(self) -> dict:
        """The settings, for JSON records."""
        return {"model": "ridge", "train_split": str(self.train_split), "features": str(self.features),
                "alpha": self.alpha, "inputs": "per-language char_wb 1-4 TF-IDF", "target": "centred whole-image features",
                "captions_per_language": self.counts}

    def encode_text(self, texts: Sequence[str], batch_size: int = 256, head: str = "text",
                    langs: str | Sequence[str] | None = None) -> np.ndarray:
        """(N, F) L2-normalised predicted image features of ``texts`` in languages ``langs``."""
        if langs is None:
            raise UserError(f"{given('model', 'ridge')}: needs each text's language (one map per training language)")
        langs = [langs] * len(texts) if isinstance(langs, str) else list(langs)
        unknown = sorted(set(langs) - set(self.maps))
        if unknown:
            raise UserError(f"{given('model', 'ridge')}: language(s) {unknown} have no caption in {self.train_split} "
                            f"(it has {sorted(self.maps)})")
        out = np.zeros((len(texts), len(self.centre)), dtype=np.float32)
        langs_arr = np.array(langs)
        for lang in sorted(set(langs)):
            idx = np.flatnonzero(langs_arr == lang)
            vectorizer, model = self.maps[lang]
            out[idx] = model.predict(vectorizer.encode_text([texts[int(i)] for i in idx]))
        return out / (np.linalg.norm(out, axis=1, keepdims=True) + 1e-12)

    def encode_image(self, images: Sequence[Image.Image], batch_size: int = 256) -> NoReturn:
        """Always a :class:`UserError`: the baseline embeds captions only."""
        raise UserError(f"{given('model', 'ridge')}: is a text baseline fitted through images; it does not embed images")
