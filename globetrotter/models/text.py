"""The shared-vocabulary transformer text encoder with its tied cloze head."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from scipy import sparse
from torch import nn

from .subword import SubwordTable


class TextEncoder(nn.Module):
    """Token + learned position embeddings -> pre-norm transformer encoder -> final LayerNorm.

    The sentence token is the ``<s>`` token the tokenizer prepends: its output (position 0)
    is the sentence representation. ``forward`` maps ids (B, L) and mask (B, L; 1 = token)
    to token states (B, L, d_model).

    ``ngrams`` (a [vocab_size, G] matrix, :func:`.subword.ngram_matrix`) makes the input table subword-informed:
    a token's vector is its row plus its character n-grams' rows (:class:`.subword.SubwordTable`); ``None`` keeps
    the paper's plain table.
    """

    def __init__(self, vocab_size: int, d_model: int = 512, layers: int = 4, heads: int = 4,
                 ffn: int = 1024, dropout: float = 0.1, max_length: int = 64, zero_init_residual: bool = False,
                 ngrams: sparse.csr_matrix | None = None) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.subword = SubwordTable(ngrams, d_model) if ngrams is not None else None
        self.position_embedding = nn.Embedding(max_length, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.02)
        if zero_init_residual:
            for block in self.transformer.layers:  # each block starts as the identity (as timm's zero_init_last)
                for proj in (block.self_attn.out_proj, block.linear2):
                    nn.init.zeros_(proj.weight)
                    nn.init.zeros_(proj.bias)

    @property
    def d_model(self) -> int:
        """Width of the token vectors and states."""
        return self.token_embedding.embedding_dim

    def token_table(self) -> torch.Tensor:
        """The input vectors of every token [vocab_size, d_model]: the token rows, plus their n-gram rows when the
        table is subword-informed (what the encoder reads, the cloze decoder is tied to and MaxSim compares)."""
        rows = self.token_embedding.weight
        return rows if self.subword is None else self.subword(rows)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Input vectors of ``input_ids`` (B, L) -> (B, L, d_model)."""
        return self.token_embedding(input_ids) if self.subword is None else F.embedding(input_ids, self.token_table())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, normed: bool = True) -> torch.Tensor:
        """Token states (B, L, d_model); ``normed=False`` returns the residual stream before the final LayerNorm."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids) + self.position_embedding(positions)[None]
        x = self.transformer(self.dropout(x), src_key_padding_mask=attention_mask == 0)
        return self.norm(x) if normed else x


def mean_pool(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of token states over real tokens: (B, L, d), (B, L) -> (B, d)."""
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)


class ClozeHead(nn.Module):
    """dense -> GELU -> LayerNorm -> logits over the vocabulary, decoder tied to the token embeddings (to the
    composed table, ``table``, when the encoder's is subword-informed)."""

    def __init__(self, token_embedding: nn.Embedding) -> None:
        super().__init__()
        d = token_embedding.embedding_dim
        self.transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.token_embedding = token_embedding  # shared parameter, not a copy
        self.bias = nn.Parameter(torch.zeros(token_embedding.num_embeddings))

    def forward(self, states: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
        """Logits over the vocabulary for each state: the transform, then the tied token table (``table`` when given)
        and the bias."""
        return F.linear(self.transform(states), self.token_embedding.weight if table is None else table, self.bias)
