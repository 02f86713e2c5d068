"""Words as dictionary keys, and their vectors (word translation, paper 5.3; ``eval.py translate-word``).

A dictionary entry is a decoded BPE token with its leading space written as ``▁`` (``" car"`` → ``"▁car"``), so
tokens fit MUSE's ``src tgt`` lines, or ``⟨raw⟩`` for a byte fragment that decodes to no text on its own
(:func:`vocab_keys`); :class:`CaptionTokenizer` turns captions into such keys (or into lower-cased words). A word's
vector is the mean of its input token rows (the paper's choice, :func:`input_word_embeddings`; a tokenizer key is its
own row) or the encoder's contextual embedding of the word alone (:class:`WordEmbedder` gives either).
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer

from .models import language_kwargs, token_embeddings

SPACE = "▁"  # stands for the space a byte-level BPE token carries, so tokens fit MUSE's "src tgt" lines
Embeddings = Literal["input", "contextual"]
_WORD_RE = re.compile(r"\w+", re.UNICODE)


def token_key(decoded: str) -> str:
    """A decoded BPE token as a whitespace-free dictionary entry (``" car"`` → ``"▁car"``)."""
    return decoded.replace(" ", SPACE)


def is_fragment(key: str) -> bool:
    """Whether a key stands for a byte fragment (``⟨raw⟩``, see :func:`vocab_keys`)."""
    return key.startswith("⟨") and key.endswith("⟩")


def key_text(key: str) -> str:
    """The text a dictionary entry stands for (``"▁car"`` → ``" car"``)."""
    return key.replace(SPACE, " ")


def vocab_keys(tokenizer: Tokenizer) -> list[str]:
    """Dictionary key of every token id of a HF tokenizer: the decoded text (see
    :func:`token_key`), or ``⟨raw⟩`` (the vocabulary entry) for a byte fragment that does
    not decode to text on its own; ``""`` for special tokens."""
    vocab = tokenizer.get_vocab()
    keys = [""] * (max(vocab.values()) + 1)
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    for tok, i in vocab.items():
        if tok in specials:
            continue
        decoded = tokenizer.decode([i])
        keys[i] = token_key(decoded) if decoded and "\ufffd" not in decoded else f"⟨{tok}⟩"
    return keys


def row_keys(tokenizer: Tokenizer | None, tokens: Sequence[str]) -> list[str]:
    """Dictionary key of each row of ``Encoder.token_embeddings()`` (``tokens`` = its strings).

    When the rows are the non-special ids in ascending order (checked against the decoded
    strings), keys come from :func:`vocab_keys`, byte fragments included; otherwise from
    the strings, and rows that do not decode to text get ``""``.
    """
    if tokenizer is not None:
        keys = vocab_keys(tokenizer)
        ids = [i for i, k in enumerate(keys) if k]
        if len(ids) == len(tokens) and all(tokenizer.decode([i]) == t for i, t in zip(ids, tokens)):
            return [keys[i] for i in ids]
    return [token_key(t) if t and "\ufffd" not in t else "" for t in tokens]


class CaptionTokenizer:
    """Turns captions into lists of dictionary keys: BPE tokens of a HF ``tokenizers.Tokenizer``,
    or, with ``tokenizer=None``, lower-cased ``\\w+`` words (for space-separated scripts)."""

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer
        self.keys = vocab_keys(tokenizer) if tokenizer is not None else None

    @property
    def kind(self) -> str:
        """``bpe`` with a tokenizer, else ``words``."""
        return "bpe" if self.tokenizer is not None else "words"

    def __call__(self, captions: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is None:
            return [_WORD_RE.findall(c.lower()) for c in captions]
        encs = self.tokenizer.encode_batch(list(captions), add_special_tokens=False)
        keys = self.keys
        assert keys is not None  # set with the tokenizer in __init__
        return [[keys[i] for i in e.ids if i < len(keys) and keys[i]] for e in encs]



def input_word_embeddings(
    words: Sequence[str],
    tokens: Sequence[str],
    matrix: np.ndarray,
    tokenizer: Any = None,
    token_counts: Counter | None = None,
    keys: bool = False,
) -> tuple[list[str], np.ndarray]:
    """Input-token-embedding vectors for ``words`` (the paper's choice).

    ``tokens``/``matrix`` as ``Encoder.token_embeddings()`` gives them (rows matched to keys by :func:`row_keys`).

    ``keys=True``: the words are this tokenizer's keys (what :class:`CaptionTokenizer` gives: the tf-idf dictionary,
    the tokens of a split's captions, :func:`vocabulary`), and each key gets **its own row**, whether or not it
    carries a leading ``▁`` (the word-internal ``are`` of ``squ``+``are`` is not the word ``▁are``); a key with no
    row of its own is the mean of the rows of its exact text's tokens.

    ``keys=False`` (plain words, as a lexicon writes them): a token key (``"▁car"``, a fragment) still gets its row.
    Any other word is tokenised on its own, in its in-sentence form ``" word"`` and its bare form ``"word"`` (and is
    its own token when it is one); the form whose first token is most frequent in ``token_counts`` (the language's
    captions) is used (without counts: the word's own row if it is a token, else the in-sentence form), and the
    word's vector is the mean of its tokens' rows.

    Words with no usable token are dropped: returns the kept words and their (n, d) matrix.
    """
    row_of: dict[str, int] = {}
    for r, key in enumerate(row_keys(tokenizer, tokens)):
        if key:
            row_of.setdefault(key, r)
    vocab = vocab_keys(tokenizer) if tokenizer is not None else []  # read only with a tokenizer
    counts: Mapping[str, int] = token_counts or {}
    kept, rows = [], []

    def rows_of(text: str) -> tuple[list[int], list[int]]:
        """The ids of ``text``'s tokens and the rows of those that have one."""
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        return ids, [row_of[vocab[i]] for i in ids if i < len(vocab) and vocab[i] in row_of]

    for word in words:
        token_rows = [row_of[word]] if word in row_of else []
        own = keys or tokenizer is None or token_counts is None or SPACE in word or is_fragment(word)
        if token_rows and own:
            kept.append(word)
            rows.append(matrix[token_rows[0]])
            continue
        if tokenizer is None or (keys and is_fragment(word)):
            continue
        if keys:  # a key without a row of its own: the tokens of the very text it stands for
            _, exact = rows_of(key_text(word))
            if exact:
                kept.append(word)
                rows.append(matrix[exact].mean(axis=0))
            continue
        # candidate forms: (frequency of the first token, prefer the in-sentence form, rows)
        forms = [(counts.get(word, 0), False, token_rows)] if token_rows else []
        for in_sentence, text in ((True, " " + word), (False, word)):
            ids, form_rows = rows_of(text)
            if form_rows:
                forms.append((counts.get(vocab[ids[0]], 0), in_sentence, form_rows))
        if forms:
            _, _, best = max(forms, key=lambda f: (f[0], f[1]))
            kept.append(word)
            rows.append(matrix[best].mean(axis=0))
    return kept, (np.stack(rows).astype(np.float32) if rows else np.zeros((0, matrix.shape[1]), np.float32))


def usable_word(key: str) -> bool:
    """Whether a key is a word to offer: no byte fragment, not whitespace only (such as the bare ``▁``)."""
    return bool(key_text(key).strip()) and not is_fragment(key)


def vocabulary(encoder: Any, lang: str | None, counts: Mapping[str, Counter]) -> list[str]:
    """The candidate words of ``lang``: the keys of its captions' tokens (``counts[lang]``), else every key of the
    encoder's token table (``lang``'s own for a model with per-language tables); only :func:`usable_word` keys."""
    if lang is not None and lang in counts:
        return sorted(k for k in counts[lang] if usable_word(k))
    tokens = token_embeddings(encoder, lang)[0]
    return sorted({k for k in row_keys(encoder.tokenizer, tokens) if usable_word(k)})


class WordEmbedder:
    """Word vectors of an encoder: ``"input"``, the mean of the word's input token rows (:func:`input_word_embeddings`,
    the first tokens' frequencies from ``counts[lang]``; a model with per-language tables reads ``lang``'s), or
    ``"contextual"``, the encoder's embedding of the word alone (byte fragments left out). Call it with
    ``keys=True`` for words that are tokenizer keys (each gets its own input row), ``False`` for plain words."""

    def __init__(self, encoder: Any, kind: Embeddings = "input", counts: Mapping[str, Counter] | None = None) -> None:
        if kind not in ("input", "contextual"):  # "output" was read as "contextual", in silence
            raise ValueError(f"embeddings must be 'input' or 'contextual', got {kind!r}")
        self.encoder, self.kind, self.counts = encoder, kind, counts or {}
        per_language = getattr(encoder, "needs_language", False)
        self.shared = encoder.token_embeddings() if kind == "input" and not per_language else None

    def __call__(self, words: Sequence[str], lang: str | None, keys: bool = False) -> tuple[list[str], np.ndarray]:
        """The words that have a vector, and their ``[n, d]`` vectors (``keys``: see :func:`input_word_embeddings`)."""
        if self.kind == "input":
            tokens, matrix = self.shared or token_embeddings(self.encoder, lang)
            counts = self.counts.get(lang) if lang is not None else None
            return input_word_embeddings(words, tokens, matrix, self.encoder.tokenizer, counts, keys)
        words = [w for w in words if not is_fragment(w)]  # a byte fragment is no text to encode
        if not words:
            return [], np.zeros((0, 1), np.float32)
        return words, self.encoder.encode_words([key_text(w) for w in words], **language_kwargs(self.encoder, lang))
