"""Corpus statistics of tokens, shared by training (the image-pivot start) and evaluation (MaxSim, word ground truth).

The smoothed inverse document frequency is scikit-learn's (``TfidfVectorizer(smooth_idf=True)``):

    idf(t) = log((1 + N) / (1 + df(t))) + 1

over ``N`` documents, ``df(t)`` of which hold token ``t``: never zero, and defined for a token no document holds.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def smoothed_idf(document_frequency: np.ndarray, n_documents: int) -> np.ndarray:
    """``log((1 + N) / (1 + df)) + 1`` of every entry of ``document_frequency`` (float64)."""
    df = np.asarray(document_frequency, dtype=np.float64)
    return np.log((1.0 + n_documents) / (1.0 + df)) + 1.0


def document_frequency(token_ids: Sequence[np.ndarray], vocab_size: int) -> np.ndarray:
    """``[vocab_size]`` how many of the documents (one id array each) hold each token."""
    df = np.zeros(vocab_size, dtype=np.int64)
    for ids in token_ids:
        df[np.unique(np.asarray(ids, dtype=np.int64))] += 1
    return df


def idf(token_ids: Sequence[np.ndarray], vocab_size: int) -> np.ndarray:
    """``[vocab_size]`` float32 :func:`smoothed_idf` of each token over the documents ``token_ids`` (one id array
    each)."""
    return smoothed_idf(document_frequency(token_ids, vocab_size), len(token_ids)).astype(np.float32)
