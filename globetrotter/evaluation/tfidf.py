"""A surface-overlap baseline: character n-gram TF-IDF sentence vectors (``--model tfidf``).

No learning and no images: a caption is the TF-IDF vector of its lower-cased character
n-grams inside word boundaries (scikit-learn's ``char_wb`` analyzer, n = 1..4,
sublinear tf = 1 + log tf, smooth idf), L2-normalised, so the cosine of two captions
measures how many (rare) character n-grams they share: names, numbers, cognates and
shared spellings. It is the floor a learned multilingual model must clear (docs/design.md
section 10): on captions in disjoint scripts it is at chance, on related languages it is
not. N-grams made only of whitespace (the ``" "`` unigram of ``char_wb``) are dropped, so
two scripts share no feature at all.

The idf statistics are fitted on an unlabelled corpus: ``eval.py sentence`` fits them on the reference
captions (the train split's, :mod:`.reference`), never on the evaluated sentences unless asked
(``--transductive``); no group, image or translation label is used. Vectors are returned as a
``scipy.sparse`` CSR matrix, so the similarities are exact cosines over the whole vocabulary (a dense 2,400 × 32,768 float32
matrix would be 300 MB): :func:`~globetrotter.evaluation.sentence.sentence_translation`
accepts it as it is.
"""
from __future__ import annotations

from typing import NoReturn, Sequence

import numpy as np
import scipy.sparse as sp
from PIL import Image

from backretrieval.errors import given
from globetrotter.errors import UserError

SPEC = "tfidf"
"""The ``--model`` spec that names this baseline instead of a run folder."""


def is_tfidf_spec(model: str | None) -> bool:
    """Whether a ``--model`` value names the TF-IDF baseline (the exact string ``tfidf``;
    a run folder that happens to be called so is reached as ``./tfidf``)."""
    return model == SPEC


class TfidfEncoder:
    """Character n-gram TF-IDF with the ``encode_text`` interface of :class:`globetrotter.embeddings.Encoder`.

    ``ngram_range`` (inclusive, in characters), ``max_features`` (``None`` = the whole
    vocabulary of the fitting corpus; the vectors stay sparse either way) and
    ``sublinear_tf`` are scikit-learn's ``TfidfVectorizer`` options. Unfitted, the first
    :meth:`encode_text` call fits on the texts it is given (transductive, still label-free).
    """

    name = SPEC
    checkpoint = None

    def __init__(self, ngram_range: tuple[int, int] = (1, 4), max_features: int | None = None,
                 sublinear_tf: bool = True) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.ngram_range = tuple(ngram_range)
        self.max_features = max_features
        self.sublinear_tf = sublinear_tf
        base = TfidfVectorizer(analyzer="char_wb", ngram_range=self.ngram_range, lowercase=True).build_analyzer()
        self._vectorizer = TfidfVectorizer(
            analyzer=lambda doc: [g for g in base(doc) if g.strip()],  # no whitespace-only n-grams
            max_features=max_features, sublinear_tf=sublinear_tf, norm="l2", dtype=np.float32,
        )
        self.fitted_on = 0

    @property
    def config(self) -> dict:
        """The settings, for JSON records."""
        return {"model": SPEC, "analyzer": "char_wb (whitespace-only n-grams dropped)", "lowercase": True,
                "ngram_range": list(self.ngram_range), "max_features": self.max_features,
                "sublinear_tf": self.sublinear_tf, "norm": "l2", "fitted_on_texts": self.fitted_on,
                "vocabulary": len(self._vectorizer.vocabulary_) if self.fitted_on else 0}

    def fit(self, texts: Sequence[str]) -> "TfidfEncoder":
        """Learn the n-gram vocabulary and idf weights from ``texts`` (no labels)."""
        if not len(texts):
            raise UserError("tfidf: no text to fit the n-gram vocabulary on")
        self._vectorizer.fit(list(texts))
        self.fitted_on = len(texts)
        return self

    def encode_text(self, texts: Sequence[str], batch_size: int = 256, head: str = "text") -> sp.csr_matrix:
        """(N, V) float32 CSR matrix of L2-normalised TF-IDF vectors (``batch_size``/``head`` are ignored).

        A text with no known n-gram is an all-zero row (cosine 0 with everything).
        """
        if not self.fitted_on:
            self.fit(texts)
        return sp.csr_matrix(self._vectorizer.transform(list(texts)), dtype=np.float32)

    def encode_image(self, images: Sequence[Image.Image], batch_size: int = 256) -> NoReturn:
        """Always a :class:`UserError`: the baseline reads text only."""
        raise UserError(f"{given('model', 'tfidf')} is a text-only surface baseline: it has no image encoder (use a trained run)")
