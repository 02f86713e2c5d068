"""The character n-gram TF-IDF surface baseline (``eval.py sentence --model tfidf``)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from globetrotter.errors import UserError
from globetrotter.evaluation.sentence import sentence_translation
from globetrotter.evaluation.tfidf import TfidfEncoder, is_tfidf_spec

NAMES = ["Maria", "Jonas", "Pavel", "Olga", "Tomas", "Lucia", "Marek", "Ines", "Karel", "Sofia"]
PLACES = ["Praha", "Berlin", "Lyon", "Brno", "Dresden", "Nantes", "Plzen", "Bremen", "Toulouse", "Ostrava"]
EN = "{n} walks {k} dogs through {p} in the rain"
DE = "{n} führt {k} Hunde durch {p} im Regen"  # different words, same names and numbers


def _near_copies(n_groups: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    captions, langs, groups = [], [], []
    for g in range(n_groups):
        fill = {"n": NAMES[g % 10], "p": PLACES[(g * 3) % 10], "k": 10 + g}
        for lang, template in (("en", EN), ("de", DE)):
            captions.append(template.format(**fill))
            langs.append(lang)
            groups.append(g)
    return captions, np.array(langs), np.array(groups)


def test_vectors_are_sparse_l2_normalised_and_lowercased():
    enc = TfidfEncoder()
    x = enc.encode_text(["Ein Hund läuft", "ein hund läuft", "zzz"])
    assert sp.issparse(x) and x.dtype == np.float32
    assert np.allclose(sp.linalg.norm(x, axis=1), 1.0, atol=1e-6)
    assert (x[0] != x[1]).nnz == 0  # case carries no information
    assert enc.fitted_on == 3 and enc.config["vocabulary"] > 0
    assert " " not in enc._vectorizer.vocabulary_  # no whitespace-only n-gram


def test_near_copy_sharing_names_and_numbers_is_ranked_first():
    captions, langs, groups = _near_copies(30)
    enc = TfidfEncoder().fit(captions)
    emb = enc.encode_text(captions)
    res = sentence_translation(emb, langs, groups, tie_seed=0)
    assert res["accuracy"] == 1.0 and res["chance"] == pytest.approx(1 / 30)
    # the same by hand: every English caption's most similar German caption is its own group's
    sims = (emb[langs == "en"] @ emb[langs == "de"].T).toarray()
    assert np.array_equal(sims.argmax(1), np.arange(30))


def test_disjoint_scripts_score_at_chance():
    rng = np.random.default_rng(0)
    alphabets = {"la": "abcdefghijklmnopqrstuvwxyz", "el": "αβγδεζηθικλμνξοπρστυφχψω", "ru": "абвгдежзиклмнопрстуфхцчшщ"}
    n_groups = 120
    captions, langs, groups = [], [], []
    for g in range(n_groups):
        for lang, letters in alphabets.items():
            words = ["".join(rng.choice(list(letters), rng.integers(2, 8))) for _ in range(rng.integers(3, 9))]
            captions.append(" ".join(words))
            langs.append(lang)
            groups.append(g)
    langs, groups = np.array(langs), np.array(groups)
    emb = TfidfEncoder().fit(captions).encode_text(captions)
    cross = (emb @ emb.T).toarray()[langs[:, None] != langs[None, :]]
    assert np.all(cross == 0)  # no shared n-gram at all, not even the space
    scores = [sentence_translation(emb, langs, groups, tie_seed=s)["accuracy"] for s in range(5)]
    chance = sentence_translation(emb, langs, groups, tie_seed=0)["chance"]
    assert chance == pytest.approx(2 / 240)
    # 5 x 720 positives at p = 1/120: sd of the mean ~ 0.0015
    assert np.mean(scores) == pytest.approx(chance, abs=0.006)


def test_dense_and_sparse_embeddings_give_the_same_result():
    captions, langs, groups = _near_copies(12)
    captions = [c if i % 3 else c.replace("dogs", "cats") for i, c in enumerate(captions)]
    emb = TfidfEncoder().fit(captions).encode_text(captions)
    a = sentence_translation(emb, langs, groups, k=1)
    b = sentence_translation(emb.toarray(), langs, groups, k=1)
    assert a["accuracy"] == b["accuracy"] and np.array_equal(a["matrix"], b["matrix"], equal_nan=True)


def test_spec_and_errors():
    assert is_tfidf_spec("tfidf") and not is_tfidf_spec("./tfidf") and not is_tfidf_spec("runs/x")
    with pytest.raises(UserError, match="no image encoder"):
        TfidfEncoder().encode_image([])
    with pytest.raises(UserError, match="no text"):
        TfidfEncoder().fit([])


@pytest.mark.parametrize("command", ["word", "cluster"])
def test_a_loaded_baseline_object_is_refused_like_its_spec(tmp_path, command):
    """``evaluate_word_translation(TfidfEncoder(), ...)`` got past the baseline check (it looked at spec strings only)
    and failed with ``AttributeError: 'TfidfEncoder' object has no attribute 'tokenizer'``; the object is refused as
    ``"tfidf"`` is, in one line."""
    from globetrotter.evaluation import evaluate_clustering, evaluate_word_translation

    evaluate = {"word": evaluate_word_translation, "cluster": evaluate_clustering}[command]
    with pytest.raises(UserError, match=rf"^{command}: model=tfidf is a baseline of .* sentence` and `select` only; {command} "
                                        r"needs a trained run folder$"):
        evaluate(TfidfEncoder(), tmp_path / "no_split_read")


def test_features_are_the_one_to_four_character_ngrams_with_sublinear_term_frequency():
    """The documented settings, read off the vectors: fitted on one text every idf is 1, so an n-gram seen three
    times weighs 1 + ln 3 times one seen once; the features are the lower-cased 1- to 4-grams of each word padded
    with one space either side (char_wb), whitespace-only ones left out."""
    enc = TfidfEncoder().fit(["Abcde abcde abcde xy"])
    vector = enc.encode_text(["Abcde abcde abcde xy"]).toarray()[0]
    vocabulary = enc._vectorizer.vocabulary_
    want = {word[i:i + n] for word in (" abcde ", " xy ") for n in range(1, 5) for i in range(len(word) - n + 1)}
    assert set(vocabulary) == {g for g in want if g.strip()}
    assert vector[vocabulary["bcd"]] / vector[vocabulary["xy"]] == pytest.approx(1 + np.log(3), rel=1e-5)


def test_a_fitted_encoder_keeps_its_vocabulary_and_idf_whatever_it_encodes():
    """Fitted on reference texts, a text's vector depends on that text alone (eval.py sentence encodes the evaluated
    sentences with the reference's idf): the same with other texts beside it, and an n-gram the reference lacks has
    no feature."""
    enc = TfidfEncoder().fit(["a red square", "a blue circle", "a red circle"])
    alone = enc.encode_text(["a red square"])
    beside = enc.encode_text(["xyz xyz", "a red square", "a red square square"])
    assert (alone != beside[1]).nnz == 0 and beside[0].nnz == 0 and enc.fitted_on == 3
