"""Late interaction (MaxSim over token rows) against its definition, written out pair by pair."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.evaluation.late_interaction import maxsim, row_hubness, sentence_tokens
from globetrotter.token_stats import idf


def brute_maxsim(ids_a, ids_b, table, weights, hub, hub_b=None) -> float:
    """The module docstring's formula for one pair of sentences, with loops (``hub_b``: the hubness of b's tokens,
    when it differs from a's)."""
    if not len(ids_a) or not len(ids_b):
        return 0.0
    hub_b = hub if hub_b is None else hub_b
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    s = np.array([[unit[i] @ unit[j] - hub[i] / 2 - hub_b[j] / 2 for j in ids_b] for i in ids_a])
    wa, wb = weights[ids_a], weights[ids_b]
    return 0.5 * ((wa * s.max(1)).sum() / wa.sum() + (wb * s.max(0)).sum() / wb.sum())


@pytest.fixture
def world():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(40, 8)).astype(np.float32)
    sentences = [rng.integers(1, 40, size=rng.integers(1, 7)) for _ in range(13)]
    sentences[4] = np.zeros(0, dtype=np.int64)  # a caption of special tokens only
    return table, sentences


def test_maxsim_equals_the_pairwise_definition_in_any_row_order_and_chunking(world, monkeypatch):
    from globetrotter.evaluation import late_interaction

    table, sentences = world
    weights = idf(sentences, len(table))
    hub = row_hubness(table, k=3)
    bags = sentence_tokens(sentences, table, weights, hub)
    others = sentence_tokens(sentences[::-1], table, weights, hub)
    rows = np.array([7, 2, 4, 11, 0])
    for chunk in (1, 5, 10_000):  # a group per sentence, a few sentences, all at once
        got = maxsim(bags, rows, others, chunk_tokens=chunk)
        want = np.array([[brute_maxsim(sentences[r], b, table, weights, hub) for b in sentences[::-1]] for r in rows])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert (got[rows == 4] == 0).all() and (got[:, len(sentences) - 1 - 4] == 0).all()
    monkeypatch.setattr(late_interaction, "MAX_BLOCK", 40)  # a large b: one query token at a time
    np.testing.assert_allclose(maxsim(bags, rows, others), want, rtol=1e-5, atol=1e-6)


def test_row_hubness_is_the_mean_of_the_k_nearest_other_rows():
    rng = np.random.default_rng(1)
    table = rng.normal(size=(30, 6))
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    pool = np.arange(5, 30)  # rows 0..4 are outside the pool (e.g. special tokens)
    got = row_hubness(table, k=4, rows=pool)
    for i in range(30):
        sims = np.sort([unit[i] @ unit[j] for j in pool if j != i])[::-1]
        assert got[i] == pytest.approx(sims[:4].mean(), abs=1e-5)
    with pytest.raises(ValueError, match="k=30"):
        row_hubness(table, k=30)


def test_idf_counts_each_sentence_once():
    weights = idf([np.array([1, 1, 2]), np.array([2]), np.array([3])], 5)
    assert weights[2] == pytest.approx(np.log(4 / 3) + 1)  # in 2 of 3 sentences
    assert weights[1] == weights[3] == pytest.approx(np.log(4 / 2) + 1)  # 1 of 3, repeats not counted
    assert weights[0] == weights[4] == pytest.approx(np.log(4) + 1)


def test_the_hubness_term_demotes_a_token_near_every_row():
    """Token 1 lies near many rows of the vocabulary: without the correction a candidate holding it matches a
    query it does not translate; with it, the candidate holding the query's own (weaker) match wins."""
    rng = np.random.default_rng(2)
    e = np.eye(16, dtype=np.float32)
    table = 0.9 * e[2] + 0.1 * rng.normal(size=(30, 16)).astype(np.float32)  # most of the vocabulary near e2
    table[0] = e[0]  # the query's token
    table[1] = 0.5 * e[0] + 0.866 * e[2]  # the hub: cosine 0.5 to the query, ~0.87 to most rows
    table[3] = 0.3 * e[0] + 0.954 * e[1]  # the true match: cosine 0.3 to the query, far from the rest
    query, true, hub_only = np.array([0]), np.array([3]), np.array([1])
    weights = np.ones(len(table), np.float32)
    for hub, winner in ((np.zeros(len(table), np.float32), 1), (row_hubness(table, k=5), 0)):
        a = sentence_tokens([query], table, weights, hub)
        b = sentence_tokens([true, hub_only], table, weights, hub)
        assert maxsim(a, np.array([0]), b).argmax() == winner


def test_per_language_hubness_is_taken_among_the_other_sentence_languages_tokens(world):
    """With languages, a token of a sentence in language a matched against a sentence in language b is marked down
    by its hubness among b's tokens, and b's token by its hubness among a's: the formula, pair by pair."""
    from globetrotter.evaluation.late_interaction import language_hubness

    table, sentences = world
    langs = np.array([0, 1, 2] * 4 + [1])  # 13 sentences in 3 languages
    weights = idf(sentences, len(table))
    hub = language_hubness(table, sentences, langs, k=3)
    assert hub.shape == (len(table), 3)
    for m in range(3):
        pool = np.unique(np.concatenate([sentences[i] for i in np.flatnonzero(langs == m)]))
        np.testing.assert_allclose(hub[:, m], row_hubness(table, k=3, rows=pool), atol=1e-6)
    other = [sentences[i] for i in (3, 8, 1)]
    other_langs = np.array([2, 0, 1])
    bags, others = sentence_tokens(sentences, table, weights, hub, langs), sentence_tokens(other, table, weights, hub, other_langs)
    rows = np.array([0, 5, 4, 12])
    for chunk in (1, 10_000):
        got = maxsim(bags, rows, others, chunk_tokens=chunk)
        for r_i, r in enumerate(rows):
            for o in range(len(other)):
                want = brute_maxsim(sentences[r], other[o], table, weights, hub[:, other_langs[o]], hub[:, langs[r]])
                assert got[r_i, o] == pytest.approx(want, abs=1e-5)
    assert (got[rows == 4] == 0).all()
    with pytest.raises(ValueError, match="language"):
        sentence_tokens(sentences, table, weights, hub)  # per-language hubness without the sentences' languages
    with pytest.raises(ValueError, match="same hubness"):
        maxsim(bags, rows, sentence_tokens(other, table, weights, row_hubness(table, k=3)))
    with pytest.raises(ValueError, match="k=3"):
        language_hubness(table, [np.array([1, 2]), np.array([3])], np.array([0, 1]), k=3)
    with pytest.raises(ValueError, match="language 'de' has 2$"):  # named, not "#0"
        language_hubness(table, [np.array([1, 2]), np.array([3])], np.array([0, 1]), k=3, names=["de", "en"])


def test_maxsim_of_repeated_tokens_equals_the_definition_pair_by_pair():
    """Sentences drawn from a few tokens repeat rows within and across sentences (MaxSim pairs each distinct row once
    and takes maxima position by position): every pair's score is still the formula's, for sentences of any length,
    in any order, in several languages, with rows asked twice and sentences without tokens on either side."""
    from globetrotter.evaluation.late_interaction import language_hubness

    rng = np.random.default_rng(3)
    table = rng.normal(size=(16, 5)).astype(np.float32)
    sentences = [rng.integers(1, 7, size=rng.integers(0, 12)) for _ in range(40)]  # tokens 1..6 only
    sentences[5] = sentences[17] = np.zeros(0, dtype=np.int64)
    langs = rng.integers(0, 3, size=len(sentences))
    langs[:3] = [0, 1, 2]
    hub = language_hubness(table, [np.arange(1, 16)] * 3, np.arange(3), k=3) + rng.uniform(0, 0.3, size=(16, 3))
    weights = rng.uniform(0.5, 2.0, size=len(table)).astype(np.float32)
    other = sentences[::-1][:25]
    other_langs = langs[::-1][:25]
    bags = sentence_tokens(sentences, table, weights, hub, langs)
    others = sentence_tokens(other, table, weights, hub, other_langs)
    rows = np.array([9, 0, 5, 33, 9, 21, 2])
    want = np.array([[brute_maxsim(sentences[r], other[o], table, weights, hub[:, other_langs[o]], hub[:, langs[r]])
                      for o in range(len(other))] for r in rows])
    for chunk in (1, 7, 10_000):
        np.testing.assert_allclose(maxsim(bags, rows, others, chunk_tokens=chunk), want, rtol=1e-5, atol=1e-6)


def test_the_token_hubness_k_is_the_one_the_docs_state():
    """evaluation.md says how many nearest rows a token's hubness averages; no option sets it, so the docs are where
    a user reads it, and they must say what `LateInteraction` (every MaxSim ranking) uses."""
    import inspect
    import re
    from pathlib import Path

    from globetrotter.evaluation.late_interaction import LateInteraction

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text("utf-8").split())
    stated = re.findall(r"its mean cosine to its (\d+) nearest rows among the tokens", text)
    assert stated == [str(inspect.signature(LateInteraction).parameters["hub_k"].default)]


class _IdEncoder:
    """Text ``"3 7 7"`` is token ids 3, 7, 7 of a fixed table; the vocabulary is every row but 0 (a special)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def token_table(self):
        return self.table, np.arange(1, len(self.table))

    def token_ids(self, texts):
        return [np.array([int(t) for t in text.split()], dtype=np.int64) for text in texts]


def test_late_interaction_without_languages_takes_the_vocabularys_hubness_and_weights_the_definition(world):
    from globetrotter.evaluation.late_interaction import LateInteraction

    table, sentences = world
    reference = [" ".join(map(str, s)) for s in sentences]
    late = LateInteraction(_IdEncoder(table), 2.0, reference, hub_k=3)
    assert late.languages is None and late.record["hubness"] == "vocabulary"
    hub = row_hubness(table, k=3, rows=np.arange(1, len(table)))
    np.testing.assert_allclose(late.hubness, hub, atol=1e-6)
    texts = ["1 2 3", "5 5 9", "12"]
    a, b = late.bags(texts), late.bags(texts[::-1], ["en", "de", "fr"])  # languages are not read without them
    got = late.scorer(a, b)(np.arange(3))
    ids = _IdEncoder(table).token_ids(texts)
    want = [[2.0 * brute_maxsim(x, y, table, late.idf, hub) for y in ids[::-1]] for x in ids]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    empty = late.bags(["", ""])  # sentences of no token (special tokens only): nothing to match, scores 0
    assert late.scorer(a, empty)(np.arange(3)).tolist() == [[0.0, 0.0]] * 3


def test_late_interaction_refuses_a_negative_weight_and_languages_it_cannot_place(world):
    from globetrotter.evaluation.late_interaction import LateInteraction

    table, sentences = world
    encoder, reference = _IdEncoder(table), [" ".join(map(str, s)) for s in sentences]
    with pytest.raises(ValueError, match="the MaxSim weight must be >= 0, got -1"):
        LateInteraction(encoder, -1, reference)
    with pytest.raises(ValueError, match="2 languages for 13 texts"):
        LateInteraction(encoder, 1.0, reference, hub_k=3, languages=["en", "de"])
    late = LateInteraction(encoder, 1.0, reference, hub_k=3, languages=["en", "de", "fr"] * 4 + ["en"])
    with pytest.raises(ValueError, match="per-language hubness: give the texts' languages"):
        late.bags(["1 2"])
    with pytest.raises(ValueError, match=r"languages \['it'\] are not among the reference texts' \['de', 'en', 'fr'\]"):
        late.bags(["1 2", "3"], ["en", "it"])
