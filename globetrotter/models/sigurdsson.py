"""The Sigurdsson et al. (2020) baseline's text encoder, extended to many languages as the Globetrotter paper does.

Globetrotter paper, section 5.1 (baselines): "we extended their method to multiple
languages by creating a different word embedding and adapting layer for each language
[...] We use the same vocabulary as in our method, but train separate word embeddings for
different languages." A caption is a bag of words: each token is looked up in its
language's table, passed through its language's adapting layer (Linear + ReLU) into a
space shared by all languages, and the sentence is the max over its words. No context,
no positions, no cloze (there is no language model to train).

The per-language tables are one ``(languages * vocab, d)`` embedding and the adapting
layers one ``(languages, d, d)`` weight, indexed by language: every parameter is in every
step's graph (DDP needs no ``find_unused_parameters``), while a language's rows only ever
move with its own captions.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


class SigurdssonTextEncoder(nn.Module):
    """Per-language word tables and adapting layers over a shared vocabulary.

    ``forward(input_ids (B, L), attention_mask (B, L), lang_ids (B,))`` returns the adapted
    word states (B, L, d_model): ``ReLU(W_lang · E_lang[token] + b_lang)``. :func:`max_pool_words`
    turns them into sentence vectors.
    """

    def __init__(self, vocab_size: int, d_model: int, languages: Sequence[str], dropout: float = 0.1) -> None:
        super().__init__()
        if not languages:
            raise ValueError("the Sigurdsson text encoder needs its training languages (model.languages)")
        self.languages = list(languages)
        self.vocab_size = vocab_size
        n = len(self.languages)
        self.word_embedding = nn.Embedding(n * vocab_size, d_model)
        self.adapt_weight = nn.Parameter(torch.empty(n, d_model, d_model))
        self.adapt_bias = nn.Parameter(torch.zeros(n, d_model))
        self.dropout = nn.Dropout(dropout)
        nn.init.normal_(self.word_embedding.weight, std=0.02)
        bound = 1 / math.sqrt(d_model)  # nn.Linear's default range, per language
        nn.init.uniform_(self.adapt_weight, -bound, bound)

    @property
    def d_model(self) -> int:
        """Width of the word vectors and of the adapted states."""
        return self.word_embedding.embedding_dim

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lang_ids: torch.Tensor) -> torch.Tensor:
        """Adapted word states (B, L, d_model): each token looked up in its caption's language's table and passed
        through that language's adapting layer; ``attention_mask`` is unused here (:func:`max_pool_words` reads it)."""
        if lang_ids is None:
            raise ValueError("the Sigurdsson text encoder needs each caption's language (lang_ids)")
        words = self.word_embedding(input_ids + lang_ids[:, None] * self.vocab_size)  # (B, L, d)
        adapted = torch.einsum("bld,bed->ble", words, self.adapt_weight[lang_ids]) + self.adapt_bias[lang_ids][:, None]
        return self.dropout(torch.relu(adapted))

    @torch.no_grad()
    def word_vectors(self, lang_id: int) -> torch.Tensor:
        """Every vocabulary token of one language through its adapting layer: (vocab, d_model), no dropout."""
        table = self.word_embedding.weight[lang_id * self.vocab_size : (lang_id + 1) * self.vocab_size]
        return torch.relu(table @ self.adapt_weight[lang_id].T + self.adapt_bias[lang_id])


def max_pool_words(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Max over a caption's words: (B, L, d), (B, L) -> (B, d).

    Position 0 (the ``<s>`` token the tokenizer prepends, a constant per language) and
    padding are left out; a caption with no other token keeps position 0.
    """
    keep = attention_mask.bool().clone()
    keep[:, 0] = False
    keep[~keep.any(1), 0] = True
    return states.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)
