"""Tokenizer keys as words (word translation's tf-idf truth, --candidates split, translate-word's vocabulary): each
key is embedded by its own input row, a word-internal token such as the ``are`` of ``squ``+``are`` included, while a
lexicon's plain word still takes its most frequent form."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from data_prep.shard_writer import ShardWriter
from globetrotter.evaluation import evaluate_word_translation, translate_words
from globetrotter.evaluation.word_keys import SPACE, CaptionTokenizer, WordEmbedder, input_word_embeddings, row_keys

# "are" is a word ("▁are") and, in "square", "stare", ..., a word-internal token ("are") of its own
CAPTIONS = (["two dogs are on the grass", "the cats are here", "people are walking", "birds are flying"] * 5
            + ["a " + w + "are" for w in ["c", "sh", "st", "b", "d", "m", "f", "r", "squ", "h", "gl", "sp"]])


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CAPTIONS * 4, trainers.BpeTrainer(vocab_size=295, show_progress=False,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<pad>"])
    return tok


class RowEncoder:
    """An encoder whose input rows are one random vector per token id (no special)."""

    needs_language = False
    checkpoint = None

    def __init__(self, tok: Tokenizer) -> None:
        self.tokenizer = tok
        self.ids = sorted(i for t, i in tok.get_vocab().items() if t != "<pad>")
        self.matrix = np.random.default_rng(0).normal(size=(len(self.ids), 32)).astype(np.float32)

    def token_embeddings(self, lang=None):
        return [self.tokenizer.decode([i]) for i in self.ids], self.matrix


def _rows(tok: Tokenizer, encoder: RowEncoder) -> dict[str, int]:
    tokens, _ = encoder.token_embeddings()
    return {k: r for r, k in enumerate(row_keys(tok, tokens)) if k}


def test_every_caption_key_gets_its_own_row_and_plain_words_their_frequent_form(tok):
    encoder = RowEncoder(tok)
    tokens, matrix = encoder.token_embeddings()
    row_of = _rows(tok, encoder)
    counts = Counter(t for s in CaptionTokenizer(tok)(CAPTIONS) for t in s)
    assert "are" in counts and f"{SPACE}are" in counts  # both the suffix and the word are tokens of the captions
    keys = sorted(counts)
    kept, vecs = input_word_embeddings(keys, tokens, matrix, tok, counts, keys=True)
    assert kept == keys
    for key, vec in zip(kept, vecs):
        assert np.allclose(vec, matrix[row_of[key]]), key
    # the same string as a lexicon's plain word: the more frequent form, mid-sentence "▁are"
    words, plain = input_word_embeddings(["are"], tokens, matrix, tok, counts)
    assert words == ["are"] and np.allclose(plain[0], matrix[row_of[f"{SPACE}are"]])
    # the embedder passes the choice on
    _, via = WordEmbedder(encoder, "input", {"en": counts})(["are"], "en", keys=True)
    assert np.allclose(via[0], matrix[row_of["are"]])


@pytest.fixture(scope="module")
def copy_split(tmp_path_factory) -> Path:
    """A parallel split whose language "xx" is an exact copy of "en": each token translates to itself."""
    split = tmp_path_factory.mktemp("copy") / "test"
    with ShardWriter(split, split="test", source="copy", image_format="png") as w:
        for i, c in enumerate(CAPTIONS):
            for lang in ("en", "xx"):
                w.write(f"t{i}-{lang}", Image.new("RGB", (8, 8)), c, lang, f"img{i}", group=f"g{i}")
    return split


def test_tfidf_word_translation_of_an_exact_copy_is_perfect(tok, copy_split):
    result = evaluate_word_translation(RowEncoder(tok), split=copy_split, methods=["nn"])
    pairs = result.details["nn/none"]["pairs"]["en-xx"]["all"]["n_pairs"]
    assert pairs > 0 and result.details["ground_truth"]["source"] == "tfidf"
    assert result.metrics["nn/none"]["precision@1"] == 1.0  # every key is its own nearest neighbour
    split_candidates = evaluate_word_translation(RowEncoder(tok), split=copy_split, methods=["nn"],
                                                 candidates="split")
    assert split_candidates.metrics["nn/none"]["precision@1"] == 1.0


def test_translate_word_vocabulary_keys_keep_their_own_rows(tok, copy_split, tmp_path):
    encoder = RowEncoder(tok)
    hits = translate_words(encoder, ["are"], source="en", to="xx", corpus=copy_split, k=2, out=tmp_path,
                           log=lambda _: None)[0]
    # the query (a plain word: "▁are") finds itself; the suffix "are" is another vector, not a second copy of it
    assert hits[0][0] == "are" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert hits[1][1] < 0.99
