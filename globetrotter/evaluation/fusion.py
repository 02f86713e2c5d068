"""A model fused with the surface-overlap baseline (``eval.py sentence --fuse-tfidf W|auto``).

Sparse + dense retrieval, as search engines mix them: captions are ranked by
``W × cos_tfidf + (1 − W) × cos_model``, the character n-gram TF-IDF cosine
(:mod:`~globetrotter.evaluation.tfidf`: names, numbers, cognates) mixed with the model's. It
asks what a model adds to string overlap. On Flickr8k en/de/fr/cs the image-trained model lifts
TF-IDF by about 6 points while the text-only model lowers it (README, Real photos).

``auto`` picks W without parallel text: the weight of :data:`WEIGHTS` whose fused embeddings get
the highest mean BackRetrieval@K (K of ``val.bkr_ks``: 1, 5, 10) on the run's val split (non-parallel
captions and their images, the trainer's checkpoint-selection protocol,
:class:`~globetrotter.training.validation.Validator`), over the pairs of the evaluated languages only:
string overlap helps en/de/fr/cs and does nothing across scripts.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from .tfidf import TfidfEncoder

WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The weights ``auto`` chooses among."""


def fuse_with_surface(dense: np.ndarray, surface: sp.spmatrix, weight: float) -> sp.csr_matrix:
    """Rows whose cosines are ``weight`` × the surface (TF-IDF) cosine + ``(1 - weight)`` × the dense model's:
    both parts L2-normalised, scaled by the square roots of their weights and concatenated (unit rows)."""
    if dense.shape[0] != surface.shape[0]:
        raise ValueError(f"fuse_with_surface: {dense.shape[0]} dense rows but {surface.shape[0]} surface rows")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"fuse_with_surface: weight must be in [0, 1], got {weight}")
    dense = np.asarray(dense, dtype=np.float32)
    dense = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)
    surface = sp.csr_matrix(surface, dtype=np.float32)
    norms = np.sqrt(np.asarray(surface.multiply(surface).sum(1))).ravel()
    surface = sp.diags(1.0 / np.maximum(norms, 1e-12)).astype(np.float32) @ surface
    return sp.hstack([np.sqrt(weight) * surface, sp.csr_matrix(np.sqrt(1.0 - weight) * dense)], format="csr",
                     dtype=np.float32)


class FusedEncoder:
    """``encode_text`` of a model fused with a TF-IDF encoder fitted on the texts it is given (label-free), as
    dense rows: for BackRetrieval on a val split of a few hundred captions per language. ``weight`` may change
    between calls: the model's embeddings and the TF-IDF vectors of the last texts are kept, so trying several
    weights on the same texts encodes them once."""

    def __init__(self, encoder, weight: float, head: str = "text") -> None:
        self.encoder, self.weight, self.head = encoder, weight, head
        self._texts: list[str] | None = None
        self._parts: tuple[np.ndarray, sp.csr_matrix] | None = None

    def encode_text(self, texts: Sequence[str], head: str | None = None, langs=None, **_) -> np.ndarray:
        texts = list(texts)
        if texts != self._texts:
            kw = {"langs": langs} if getattr(self.encoder, "needs_language", False) else {}
            surface = TfidfEncoder()
            surface.fit(texts)
            self._parts = (self.encoder.encode_text(texts, head=self.head, **kw), surface.encode_text(texts))
            self._texts = texts
        dense, surface_rows = self._parts
        return fuse_with_surface(dense, surface_rows, self.weight).toarray()


def choose_weight(encoder, head: str = "text", languages: Sequence[str] | None = None, weights: Sequence[float] = WEIGHTS,
                  log: Callable[[str], None] = print, validator=None) -> tuple[float, dict[float, float]]:
    """The weight of ``weights`` with the highest mean val BackRetrieval@K for ``encoder`` fused with TF-IDF (ties:
    the smaller weight), and every weight's score. Reads the run's val split and image features as its trainer did;
    the mean over ``val.bkr_ks`` is steadier than one K on a few hundred captions per language. ``validator``
    (default: the run's :class:`~globetrotter.training.validation.Validator`, val only, restricted to ``languages``
    when given) maps an encoder to metrics."""
    cfg = encoder.cfg
    if validator is None:
        from ..training.validation import Validator

        validator = Validator(cfg)
        validator.test_dir = None  # val only: the choice sees no parallel text
        if languages is not None:
            validator.keep_languages(languages)
    scores = {}
    keys = [f"val/bkr@{k}" for k in cfg.val.bkr_ks]
    fused = FusedEncoder(encoder, float(weights[0]), head)
    for w in weights:
        fused.weight = float(w)
        metrics = validator(fused)
        scores[float(w)] = float(np.mean([metrics[k] for k in keys]))
        log(f"--fuse-tfidf auto: W={w:.2f} mean val BkR@{{{','.join(map(str, cfg.val.bkr_ks))}}} {scores[float(w)]:.4f}")
    best = max(scores, key=lambda w: (scores[w], -w))
    return best, scores
