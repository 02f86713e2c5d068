"""Translation by generation (Globetrotter paper, appendix A.5; Fig. 11).

A small decoder learns to write captions of one *target* language from the frozen sentence
representation of the caption itself; it never sees another language. Fed the
representation of a caption in another language, it writes a target-language sentence:
a translation exactly as far as the representation puts translations in one place.

The paper fine-tunes GPT-2 (small, pretrained on English), then fine-tunes it again
conditioned on the feature vector through one extra linear layer whose output is
concatenated with the input word embeddings. Here the decoder is trained from scratch on
the training captions of the target language (no download, any target language): a
:class:`PrefixDecoder` of a few pre-norm causal transformer blocks over the model's own BPE
vocabulary, restricted to the tokens of those captions (:class:`Vocabulary`), and the
linear layer maps the standardised representation (training mean and standard deviation per
dimension) to ``prefix_length`` embeddings put before the text. Decoding is greedy and
batched, with cached keys and values.

Scores are corpus chrF and BLEU (sacrebleu, 0–100) against the target-language caption of
the same parallel test group; :func:`score` also gives BLEU's tokenisation for zh/ja.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from globetrotter.errors import UserError
from globetrotter.training.scheduler import warmup_cosine

PAD, EOS = 0, 1
"""Decoder ids of padding and of the end-of-sentence token (which also starts every sentence, as in GPT-2)."""


# ----------------------------------------------------------------------------- vocabulary


@dataclass
class Vocabulary:
    """The decoder's vocabulary: the tokenizer ids seen in the training captions, renumbered.

    Decoder id ``i >= 2`` is tokenizer id ``token_ids[i - 2]``; 0 is padding and 1 the
    end-of-sentence token (also the start token). A smaller softmax than the whole BPE
    vocabulary, and the decoder cannot write a token its training text never held anyway.
    """

    tokenizer: Tokenizer
    token_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.token_ids) + 2

    @classmethod
    def build(cls, tokenizer: Tokenizer, texts: Sequence[str]) -> "Vocabulary":
        """The vocabulary of the tokenizer ids that ``texts`` hold (special tokens left out), in ascending order."""
        ids = sorted({i for e in tokenizer.encode_batch(list(texts), add_special_tokens=False) for i in e.ids})
        return cls(tokenizer, np.asarray(ids, dtype=np.int64))

    def encode(self, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
        """Decoder ids of each text (tokens unknown to the vocabulary dropped), cut to ``max_tokens``."""
        lookup = {int(t): i + 2 for i, t in enumerate(self.token_ids)}
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [[lookup[i] for i in e.ids if i in lookup][:max_tokens] for e in encs]

    def decode(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Text of each row of decoder ids, up to its first end-of-sentence token."""
        out = []
        for row in rows:
            ids = []
            for i in row:
                if i == EOS:
                    break
                if i != PAD:
                    ids.append(int(self.token_ids[i - 2]))
            out.append(" ".join(self.tokenizer.decode(ids).split()))
        return out


# ----------------------------------------------------------------------------- model


class Block(nn.Module):
    """One pre-norm causal transformer block (self-attention, GELU MLP) that can extend a
    key/value cache: ``forward(x, past)`` returns the outputs for ``x`` (B, T, d) and the
    keys and values of every position so far."""

    def __init__(self, d_model: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        if d_model % heads:
            raise UserError(f"decoder width {d_model} is not a multiple of its {heads} heads")
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The outputs for ``x`` (B, T, d) and the keys and values of every position so far; with ``past`` (the cache),
        ``x`` is one new position."""
        b, t, d = x.shape
        if past is not None and t != 1:
            raise ValueError("a cached step takes one new position")
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(d, -1))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        # without a cache: causal over the sequence; with one: the new position sees every earlier one
        a = F.scaled_dot_product_attention(q, k, v, is_causal=past is None,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.mlp(self.ln2(x)), (k, v)


class PrefixDecoder(nn.Module):
    """A causal transformer language model conditioned on a sentence representation.

    ``cond`` (B, D) is standardised (buffers ``cond_mean``, ``cond_std``, set from the
    training representations) and mapped by one linear layer to ``prefix_length`` vectors
    of width ``d_model`` put before the token embeddings (paper A.5: "an extra linear layer
    at the input ... concatenated with the input word embeddings").
    ``forward(cond, tokens)`` gives next-token logits (B, T, V) at each token position; the
    output layer is tied to the token embedding.
    """

    cond_mean: torch.Tensor
    cond_std: torch.Tensor

    def __init__(self, vocab_size: int, cond_dim: int, d_model: int = 128, layers: int = 2, heads: int = 4,
                 ffn: int | None = None, prefix_length: int = 4, max_tokens: int = 40, dropout: float = 0.1) -> None:
        super().__init__()
        self.d_model, self.prefix_length, self.max_tokens = d_model, prefix_length, max_tokens
        self.register_buffer("cond_mean", torch.zeros(cond_dim))
        self.register_buffer("cond_std", torch.ones(cond_dim))
        self.prefix = nn.Linear(cond_dim, prefix_length * d_model)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(prefix_length + max_tokens + 1, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, ffn or 4 * d_model, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        for p in (self.token_embedding.weight, self.position.weight):
            nn.init.normal_(p, std=0.02)

    def _prefix(self, cond: torch.Tensor) -> torch.Tensor:
        z = (cond - self.cond_mean) / self.cond_std
        return self.prefix(z).view(len(cond), self.prefix_length, self.d_model)

    def _run(self, x: torch.Tensor, start: int, past: list | None) -> tuple[torch.Tensor, list]:
        x = self.drop(x + self.position(torch.arange(start, start + x.shape[1], device=x.device)))
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            cache.append(kv)
        return self.norm(x) @ self.token_embedding.weight.T, cache

    def forward(self, cond: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits (B, T, V) at each position of ``tokens`` (B, T), after the prefix made from ``cond``."""
        prefix = self._prefix(cond)
        x = torch.cat([prefix, self.token_embedding(tokens)], 1)
        return self._run(x, 0, None)[0][:, self.prefix_length :]

    @torch.no_grad()
    def generate(self, cond: torch.Tensor, max_tokens: int | None = None) -> torch.Tensor:
        """Greedy decoding from the start token: (B, ≤ max_tokens) decoder ids, an
        end-of-sentence token after the last word (padding after it)."""
        max_tokens = min(max_tokens or self.max_tokens, self.max_tokens)
        b = len(cond)
        start = torch.full((b, 1), EOS, dtype=torch.long, device=cond.device)
        logits, cache = self._run(torch.cat([self._prefix(cond), self.token_embedding(start)], 1), 0, None)
        pos = self.prefix_length + 1
        out, done = [], torch.zeros(b, dtype=torch.bool, device=cond.device)
        for step in range(max_tokens):
            last = logits[:, -1].clone()
            last[:, PAD] = -math.inf
            if step == 0:
                last[:, EOS] = -math.inf  # at least one token
            nxt = torch.where(done, torch.full_like(done, PAD, dtype=torch.long), last.argmax(-1))
            out.append(nxt)
            done |= nxt == EOS
            if bool(done.all()) or step == max_tokens - 1:
                break
            logits, cache = self._run(self.token_embedding(nxt[:, None]), pos, cache)
            pos += 1
        return torch.stack(out, 1)


# ----------------------------------------------------------------------------- training


@dataclass
class DecoderConfig:
    """Decoder size and training (defaults: about two minutes on one busy CPU core for ~1k
    captions of ~15 tokens)."""

    d_model: int = 128
    layers: int = 2
    heads: int = 4
    prefix_length: int = 4
    max_tokens: int = 40
    dropout: float = 0.1
    steps: int = 600
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.05
    """Share of the steps with a linear warm-up; cosine decay to 0 after it."""


def _batch(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``[EOS, t1..tn]`` and targets ``[t1..tn, EOS]`` (padding: 0 and -100)."""
    width = max(len(r) for r in rows) + 1
    inp = torch.full((len(rows), width), PAD, dtype=torch.long)
    tgt = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        inp[i, : len(r) + 1] = torch.tensor([EOS, *r])
        tgt[i, : len(r) + 1] = torch.tensor([*r, EOS])
    return inp, tgt


def train_decoder(texts: Sequence[str], cond: np.ndarray, tokenizer: Tokenizer, config: DecoderConfig = DecoderConfig(),
                  seed: int = 0, progress: bool = True) -> tuple[PrefixDecoder, Vocabulary, dict]:
    """Train a :class:`PrefixDecoder` to write ``texts`` from their representations ``cond``
    (N, D) (frozen; computed once by the caller), with AdamW and token cross-entropy, for
    ``config.steps`` batches drawn epoch by epoch in a seeded order (seed: init, order,
    dropout). Returns the decoder (eval mode), its vocabulary and a log with the mean loss
    of the first and last tenth of the steps, the captions used and the seconds taken."""
    from tqdm.auto import tqdm

    if len(texts) != len(cond):
        raise ValueError(f"{len(texts)} texts but {len(cond)} representations")
    vocab = Vocabulary.build(tokenizer, texts)
    rows = vocab.encode(texts, config.max_tokens)
    keep = [i for i, r in enumerate(rows) if r]
    if len(keep) < 2:
        raise UserError(f"the decoder needs at least 2 non-empty training captions, got {len(keep)}")
    rows = [rows[i] for i in keep]
    c = torch.as_tensor(np.asarray(cond, dtype=np.float32)[keep])
    torch.manual_seed(seed)
    dec = PrefixDecoder(len(vocab), c.shape[1], config.d_model, config.layers, config.heads,
                        prefix_length=config.prefix_length, max_tokens=config.max_tokens, dropout=config.dropout)
    dec.cond_mean.copy_(c.mean(0))
    dec.cond_std.copy_(c.std(0).clamp_min(1e-6) if len(c) > 1 else torch.ones(c.shape[1]))
    opt = torch.optim.AdamW(dec.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = warmup_cosine(opt, max(1, int(config.warmup * config.steps)), config.steps)
    gen = torch.Generator().manual_seed(seed)
    perm, at = torch.randperm(len(rows), generator=gen), 0
    losses = []
    dec.train()
    started = time.perf_counter()
    bar = tqdm(range(config.steps), desc="decoder", unit="step", disable=not progress, dynamic_ncols=True, leave=False)
    for step in bar:
        if at + config.batch_size > len(rows) and at > 0:
            perm, at = torch.randperm(len(rows), generator=gen), 0
        idx = perm[at : at + config.batch_size]
        at += config.batch_size
        inp, tgt = _batch([rows[i] for i in idx])
        logits = dec(c[idx], inp)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(dec.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    tenth = max(1, len(losses) // 10)
    log = {"captions": len(rows), "vocabulary": len(vocab), "steps": config.steps,
           "loss_first_tenth": float(np.mean(losses[:tenth])), "loss_last_tenth": float(np.mean(losses[-tenth:])),
           "seconds": time.perf_counter() - started,
           "parameters": sum(p.numel() for p in dec.parameters())}
    return dec.eval(), vocab, log


def generate(decoder: PrefixDecoder, vocab: Vocabulary, cond: np.ndarray, batch_size: int = 256,
             max_tokens: int | None = None) -> list[str]:
    """Greedy target-language text for each representation of ``cond`` (N, D), in batches."""
    cond = np.asarray(cond, dtype=np.float32)
    out: list[str] = []
    decoder.eval()
    for i in range(0, len(cond), batch_size):
        ids = decoder.generate(torch.from_numpy(cond[i : i + batch_size]), max_tokens)
        out += vocab.decode(ids.tolist())
    return out


# ----------------------------------------------------------------------------- scores

_BLEU_TOKENIZE = {"zh": "zh", "ja": "char", "th": "char", "ko": "char"}
"""sacrebleu tokenisation of BLEU for targets written without spaces (13a otherwise)."""


def score(hypotheses: Sequence[str], references: Sequence[str], target: str = "en") -> dict:
    """Corpus chrF (character 6-grams, β = 2) and BLEU (4-grams; 13a tokens, ``zh`` or
    characters for zh/ja/ko/th targets) of ``hypotheses`` against one reference each, both
    in [0, 100], with sacrebleu's defaults otherwise."""
    try:
        import sacrebleu
    except ImportError:
        raise UserError("generate: scores need sacrebleu (pip install sacrebleu)") from None
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    hyps, refs = list(hypotheses), [list(references)]
    bleu = sacrebleu.corpus_bleu(hyps, refs, tokenize=_BLEU_TOKENIZE.get(target, "13a"))
    return {"chrf": float(sacrebleu.corpus_chrf(hyps, refs).score), "bleu": float(bleu.score), "n": len(hyps)}


def derangement(n: int, seed: int = 0) -> np.ndarray:
    """A seeded permutation of ``range(n)`` with no fixed point (n ≥ 2; one cycle over a random
    order): the mismatched floor decodes the representation of another group's caption."""
    if n < 2:
        raise ValueError(f"no derangement of {n} element(s)")
    order = np.random.default_rng(seed).permutation(n)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.roll(order, 1)
    return out
