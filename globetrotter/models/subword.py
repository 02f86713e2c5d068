"""Subword-informed token embeddings: each token's row plus the rows of its character n-grams (fastText's idea,
over the shared BPE vocabulary).

A token's input vector is ``E[t] + Σ_g C[t, g] · G[g]``: its own row ``E[t]`` and the rows ``G[g]`` of the
character n-grams of its string, weighted by ``C`` (TF-IDF over the vocabulary: sublinear tf, smooth idf, each
token's weights L2-normalised; scikit-learn's ``TfidfVectorizer``). The byte-level BPE marks a word start with
``Ġ``; it becomes ``<`` so that "Ġchien" and "chien" share every n-gram but the word-start ones. The strings are the
tokens as the byte-level BPE writes them, one symbol per UTF-8 byte: in Latin script an n-gram of symbols is one of
characters, but a Cyrillic or Greek character is two symbols and a CJK one three, so there the n-grams are of bytes
(and the shared lead bytes of a script are n-grams of their own).

Why: a token's row is learnt only from the captions that hold it. With a few hundred captions per language
(Flickr8k's fr and cs), an inflected or rare form ("chiens", "psa", "fahrrad") is seen a handful of times, while
its n-grams are shared with its other forms and with cognates and names of the other languages that use the same
script. The n-gram rows pool those captions, in every language, through the images they describe; no parallel text
is used. ``C`` depends only on the tokenizer's vocabulary; it is kept in the model's state as CSR buffers, so a
loaded model uses exactly the matrix it was trained with.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy import sparse
from scipy.sparse.linalg import norm as sparse_norm
from torch import nn

if TYPE_CHECKING:  # scikit-learn is imported when a vectorizer is made
    from sklearn.feature_extraction.text import TfidfVectorizer

WORD_START = "\u0120"  # byte-level BPE's mark of a leading space ("Ġ")


def token_strings(vocabulary: Sequence[str], specials: Sequence[int] = ()) -> list[str]:
    """The strings the n-grams are read from: the word-start mark as ``<``, special tokens empty."""
    skip = set(int(i) for i in specials)
    return ["" if i in skip else ("<" + t[1:] if t.startswith(WORD_START) else t) for i, t in enumerate(vocabulary)]


def _vectorizer(ngram_range: Sequence[int]) -> TfidfVectorizer:
    from sklearn.feature_extraction.text import TfidfVectorizer

    low, high = (int(n) for n in ngram_range)
    return TfidfVectorizer(analyzer="char", ngram_range=(low, high), lowercase=False, sublinear_tf=True, norm="l2",
                           dtype=np.float32)


def ngram_matrix(strings: Sequence[str], ngram_range: Sequence[int]) -> sparse.csr_matrix:
    """``C`` [len(strings), G]: TF-IDF weights of each string's character n-grams (``ngram_range`` inclusive), rows
    L2-normalised, columns in sorted n-gram order; an empty string gets an empty row."""
    if not any(strings):
        return sparse.csr_matrix((len(strings), 0), dtype=np.float32)
    matrix = _vectorizer(ngram_range).fit_transform(list(strings)).tocsr()
    matrix.sort_indices()
    return matrix


def extend_ngram_matrix(matrix: sparse.csr_matrix, strings: Sequence[str], added: Sequence[str],
                        ngram_range: Sequence[int]) -> sparse.csr_matrix:
    """``matrix`` (the [len(strings), G] matrix a model holds for ``strings``, possibly rescaled) with rows for the
    ``added`` strings appended, for a grown vocabulary (adaptation to a new language).

    The old rows and columns stay as they are, so every old token's vector is unchanged; an added string's n-grams
    that ``strings`` already hold map to their old columns, new n-grams get new columns (after the old ones, in
    sorted order). The added rows are TF-IDF weighted over the grown vocabulary, L2-normalised, then scaled to the
    mean norm of the old non-empty rows (the image-pivot start scales each row by its token's idf)."""
    matrix = sparse.csr_matrix(matrix, dtype=np.float32)
    if matrix.shape[0] != len(strings):
        raise ValueError(f"the n-gram matrix has {matrix.shape[0]} rows for {len(strings)} strings")
    old_columns = {}
    if any(strings):
        old_columns = _vectorizer(ngram_range).fit(list(strings)).vocabulary_
    if len(old_columns) != matrix.shape[1]:
        raise ValueError(f"the n-gram matrix has {matrix.shape[1]} columns; the strings' {tuple(ngram_range)}-grams "
                         f"are {len(old_columns)}: not the matrix of these strings")
    if not any(added):
        return sparse.vstack([matrix, sparse.csr_matrix((len(added), matrix.shape[1]), dtype=np.float32)]).tocsr()
    grown = _vectorizer(ngram_range).fit(list(strings) + list(added))
    names = grown.get_feature_names_out()
    fresh = {n: matrix.shape[1] + i for i, n in enumerate(sorted(n for n in names if n not in old_columns))}
    column = np.array([old_columns[n] if n in old_columns else fresh[n] for n in names], dtype=np.int64)
    rows = grown.transform(list(added)).tocsr()
    norms = sparse_norm(matrix, axis=1)
    rows = rows * (float(norms[norms > 0].mean()) if (norms > 0).any() else 1.0)
    rows = sparse.csr_matrix((rows.data, column[rows.indices], rows.indptr),
                             shape=(len(added), matrix.shape[1] + len(fresh)))
    out = sparse.vstack([sparse.csr_matrix((matrix.data, matrix.indices, matrix.indptr),
                                           shape=(matrix.shape[0], rows.shape[1])), rows]).tocsr().astype(np.float32)
    out.sort_indices()
    return out


class SubwordTable(nn.Module):
    """The n-gram half of the composed token table: ``table(E) = E + C @ G`` (module docstring).

    ``C`` is held as CSR buffers (``indptr`` [V + 1], ``indices`` [nnz], ``values`` [nnz]) and applied as one
    ``embedding_bag`` (sum with per-entry weights), so the cost is nnz · d per call, on any device.
    """

    indptr: torch.Tensor  # the CSR buffers (register_buffer), declared so mypy reads them as tensors
    indices: torch.Tensor
    values: torch.Tensor

    def __init__(self, matrix: sparse.csr_matrix, d_model: int) -> None:
        super().__init__()
        matrix = sparse.csr_matrix(matrix, dtype=np.float32)
        self.ngram_embedding = nn.Embedding(max(matrix.shape[1], 1), d_model)
        nn.init.zeros_(self.ngram_embedding.weight)  # the table starts as the token rows alone
        self.register_buffer("indptr", torch.from_numpy(matrix.indptr.astype(np.int64)))
        self.register_buffer("indices", torch.from_numpy(matrix.indices.astype(np.int64)))
        self.register_buffer("values", torch.from_numpy(matrix.data.astype(np.float32)))

    @torch.no_grad()
    def scale_tokens(self, scale: torch.Tensor) -> None:
        """Multiply row ``t`` of ``C`` by ``scale[t]`` ([V]): the image-pivot start weights a token's n-grams by the
        token's idf, as it weights the token's own row (:mod:`globetrotter.training.token_init`)."""
        if scale.shape != (self.num_tokens,):
            raise ValueError(f"scale must have {self.num_tokens} entries, got {tuple(scale.shape)}")
        counts = self.indptr[1:] - self.indptr[:-1]
        self.values.mul_(torch.repeat_interleave(scale.to(self.values), counts))

    @property
    def num_tokens(self) -> int:
        """V, the token rows of ``C``."""
        return self.indptr.numel() - 1

    def matrix(self) -> sparse.csr_matrix:
        """``C`` as a scipy CSR matrix [V, G]."""
        return sparse.csr_matrix((self.values.cpu().numpy(), self.indices.cpu().numpy(), self.indptr.cpu().numpy()),
                                 shape=(self.num_tokens, self.ngram_embedding.num_embeddings))

    def forward(self, token_rows: torch.Tensor) -> torch.Tensor:
        """``token_rows + C @ G`` [V, d]."""
        if token_rows.shape[0] != self.num_tokens:
            raise ValueError(f"the token table has {token_rows.shape[0]} rows, the n-gram matrix {self.num_tokens}")
        if self.indices.numel() == 0:
            return token_rows
        ngrams = F.embedding_bag(self.indices, self.ngram_embedding.weight, self.indptr[:-1], mode="sum",
                                 per_sample_weights=self.values.to(self.ngram_embedding.weight.dtype),
                                 include_last_offset=False)
        return token_rows + ngrams.to(token_rows.dtype)
