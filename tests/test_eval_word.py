"""Word translation: tf-idf ground truth (paper B.2), Recall@10 and MUSE P@k with NN/CSLS."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from globetrotter.evaluation.procrustes import normalize_rows
from globetrotter.evaluation.word import WordSpace, rank_word_vectors, word_translation, word_translation_scores
from globetrotter.evaluation.word_dictionary import (
    both_directions,
    build_dictionaries,
    read_dictionary,
    tfidf_dictionary,
    write_dictionary,
)
from globetrotter.evaluation.word_keys import CaptionTokenizer, input_word_embeddings, is_fragment, row_keys


def _planted_corpus(n_sent: int = 800, vocab: int = 60, seed: int = 0):
    """Parallel sentences: a_i always translates to b_i, word order shuffled, plus function words."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab + 1)
    zipf /= zipf.sum()
    src, tgt = [], []
    for _ in range(n_sent):
        words = rng.choice(vocab, size=int(rng.integers(3, 7)), replace=False, p=zipf)
        src.append(["the"] + [f"a{w}" for w in words] + ["a"] * int(rng.integers(0, 2)))
        tgt.append(["der"] + [f"b{w}" for w in rng.permutation(words)] + ["die", "die"])
    return src, tgt


def test_tfidf_builder_finds_the_planted_translations():
    src, tgt = _planted_corpus()
    pairs = {(s, t) for s, t, _ in tfidf_dictionary(src, tgt)}
    planted = {(f"a{i}", f"b{i}") for i in range(60)}
    assert planted <= pairs
    # beyond the most frequent words (function words, top-ranked content words),
    # every pair the builder keeps is a planted one
    rare = {(s, t) for s, t in pairs if s.startswith("a") and s[1:].isdigit() and int(s[1:]) >= 5}
    assert rare == {(f"a{i}", f"b{i}") for i in range(5, 60)}


def test_tfidf_scores_follow_equations_6_and_7():
    # 3 sentence pairs; hand-computed tf-idf for source token "x".
    src = [["x", "y"], ["x"], ["y"]]
    tgt = [["p", "q"], ["p", "p"], ["q"]]
    from globetrotter.evaluation.word_dictionary import _sentence_matrix, tfidf_scores

    s_mat, s_vocab = _sentence_matrix(src)
    t_mat, t_vocab = _sentence_matrix(tgt)
    paper = tfidf_scores(s_mat, t_mat, idf="paper").toarray()
    # doc(x) = tokens of tgt sentences 0,1 = {p:3, q:1}; doc(y) = sentences 0,2 = {p:1, q:2}
    # every target token appears in both documents -> idf = log(2/2) = 0
    assert np.allclose(paper, 0.0)
    smooth = tfidf_scores(s_mat, t_mat, idf="smooth").toarray()
    x, p = list(s_vocab).index("x"), list(t_vocab).index("p")
    assert smooth[x, p] == pytest.approx(3 / 4 * (np.log(3 / 3) + 1))
    # idf of a target token present in only one document
    src2, tgt2 = [["x"], ["y"]], [["p"], ["q"]]
    s2, _ = _sentence_matrix(src2)
    t2, _ = _sentence_matrix(tgt2)
    assert tfidf_scores(s2, t2, idf="paper").toarray()[0, 0] == pytest.approx(np.log(2 / 1))


def test_a_token_repeated_in_a_sentence_counts_that_sentence_once():
    """d_i is the translations of the sentences *holding* t_i (eq. 6), and --min-count counts sentences."""
    from globetrotter.evaluation.word_dictionary import _sentence_matrix, tfidf_scores

    s_mat, _ = _sentence_matrix([["x", "x"], ["x"]])
    t_mat, t_vocab = _sentence_matrix([["p"], ["q"]])
    # doc(x) = {p: 1, q: 1}: tf 1/2 each, and p and q have the same idf, so the same score
    smooth = tfidf_scores(s_mat, t_mat).toarray()
    assert smooth[0, list(t_vocab).index("p")] == pytest.approx(smooth[0, list(t_vocab).index("q")])
    # x is in one sentence of three (twice): fewer than min_count 2, so it is left out; y is in two
    pairs = tfidf_dictionary([["x", "x"], ["y"], ["y"]], [["q"], ["q"], ["q"]], min_count=2)
    assert [(s, t) for s, t, _ in pairs] == [("y", "q")]


def test_row_topk_keeps_k_per_row_and_breaks_ties_by_the_lower_column():
    from scipy import sparse

    from globetrotter.evaluation.word_dictionary import row_topk

    mat = sparse.csr_matrix(np.array([[3.0, 5.0, 5.0, 1.0], [0.0, 2.0, 0.0, 4.0]]))
    rows, cols = row_topk(mat, 2)
    assert sorted(zip(rows.tolist(), cols.tolist())) == [(0, 1), (0, 2), (1, 1), (1, 3)]
    rows, cols = row_topk(mat, 1)
    assert sorted(zip(rows.tolist(), cols.tolist())) == [(0, 1), (1, 3)]  # 5 = 5: column 1 before column 2


def test_tfidf_dictionary_lists_each_source_token_best_score_first():
    src, tgt = _planted_corpus()
    pairs = tfidf_dictionary(src, tgt)
    sources = [s for s, _, _ in pairs]
    assert sources == sorted(sources) and len(set(sources)) < len(sources)  # some token has several translations
    for source in set(sources):
        scores = [sc for s, _, sc in pairs if s == source]
        assert scores == sorted(scores, reverse=True), source


def test_a_given_reverse_dictionary_is_kept_and_languages_filter_the_files(tmp_path):
    from globetrotter.evaluation.word_dictionary import read_dictionaries

    given = {("en", "de"): [("dog", "Hund")], ("de", "en"): [("Hund", "hound")]}
    both = both_directions(given)
    assert both[("de", "en")] == [("Hund", "hound")] and both[("en", "de")] == [("dog", "Hund")]
    assert both_directions({("en", "de"): [("dog", "Hund")]})[("de", "en")] == [("Hund", "dog")]
    write_dictionary(tmp_path / "en-de.txt", [("dog", "Hund")])
    write_dictionary(tmp_path / "en-fr.txt", [("dog", "chien")])
    assert read_dictionaries(tmp_path, ["en", "de"]) == {("en", "de"): [("dog", "Hund")]}


def test_build_dictionaries_gives_both_directions():
    src, tgt = _planted_corpus(300)
    dicts = build_dictionaries({"aa": src, "bb": tgt})
    forward = {(s, t) for s, t, _ in dicts[("aa", "bb")]}
    backward = {(t, s) for s, t, _ in dicts[("bb", "aa")]}
    assert forward == backward and ("a7", "b7") in forward


def _aligned_spaces(n: int = 200, dim: int = 32, noise: float = 0.05, seed: int = 0):
    rng = np.random.default_rng(seed)
    meaning = normalize_rows(rng.normal(size=(n, dim)))
    src = WordSpace([f"s{i}" for i in range(n)], meaning + noise * rng.normal(size=(n, dim)))
    tgt = WordSpace([f"t{i}" for i in range(n)], meaning + noise * rng.normal(size=(n, dim)))
    return src, tgt, [(f"s{i}", f"t{i}") for i in range(n)]


@pytest.mark.parametrize("method", ["nn", "csls"])
def test_aligned_words_translate_perfectly(method):
    src, tgt, pairs = _aligned_spaces()
    res = word_translation_scores(src, tgt, pairs, method=method)
    assert res["all"]["recall@10"] == 1.0
    assert res["all"]["precision@1"] == 1.0 and res["coverage"] == 1.0


def test_random_words_translate_at_chance():
    rng = np.random.default_rng(3)
    n = 1000
    src = WordSpace([f"s{i}" for i in range(n)], rng.normal(size=(n, 64)))
    tgt = WordSpace([f"t{i}" for i in range(n)], rng.normal(size=(n, 64)))
    res = word_translation_scores(src, tgt, [(f"s{i}", f"t{i}") for i in range(n)])
    assert res["chance_recall"] == pytest.approx(10 / n)
    assert res["all"]["recall@10"] == pytest.approx(0.01, abs=0.01)  # sd ~ 0.003


def test_identical_pairs_are_excluded_and_precision_is_per_unique_source():
    e = np.eye(4, dtype=np.float32)
    src = WordSpace(["taxi", "dog", "cat"], np.stack([e[0], e[1], e[2]]))
    tgt = WordSpace(["taxi", "hund", "katze", "tier"], np.stack([e[0], e[1], e[3], e[2]]))
    # "cat" has two valid translations: "katze" (far) and "tier" (its nearest)
    pairs = [("taxi", "taxi"), ("dog", "hund"), ("cat", "katze"), ("cat", "tier")]
    res = word_translation_scores(src, tgt, pairs, ks=(1,), recall_k=1)
    assert res["all"]["recall@1"] == pytest.approx(3 / 4)  # per pair: katze missed
    assert res["all"]["precision@1"] == 1.0  # per unique source: cat -> tier is valid
    assert res["no_identical"]["n_pairs"] == 3 and res["no_identical"]["recall@1"] == pytest.approx(2 / 3)


def test_csls_demotes_a_hub_target():
    # target "hub" is close to every source; NN picks it for s1, CSLS picks the true t1.
    src = WordSpace(["s0", "s1", "s2"], np.array([[1, 0.0, 0.0], [0.6, 0.8, 0.0], [0.6, 0.0, 0.8]]))
    tgt = WordSpace(["t0", "hub", "t1"], np.array([[1, 0.0, 0.0], [0.75, 0.45, 0.45], [0.1, 0.8, -0.6]]))
    nn_idx, _ = rank_word_vectors(src.emb[1:2], tgt.emb, k=1, method="nn")
    csls_idx, _ = rank_word_vectors(src.emb[1:2], tgt.emb, k=1, method="csls", sources=src.emb, csls_k=2)
    assert tgt.words[nn_idx[0, 0]] == "hub"
    assert tgt.words[csls_idx[0, 0]] == "t1"


def test_csls_matches_brute_force_definition():
    rng = np.random.default_rng(5)
    src = normalize_rows(rng.normal(size=(300, 16)))
    tgt = normalize_rows(rng.normal(size=(250, 16)))
    idx, scores = rank_word_vectors(src[:40], tgt, k=5, method="csls", sources=src, csls_k=10, chunk_size=7)
    sims = src @ tgt.T
    r_t = np.sort(sims, axis=1)[:, -10:].mean(axis=1)
    r_s = np.sort(sims.T, axis=1)[:, -10:].mean(axis=1)
    csls = 2 * sims[:40] - r_t[:40, None] - r_s[None, :]
    assert np.array_equal(idx, np.argsort(-csls, axis=1)[:, :5])
    assert np.allclose(scores, np.sort(csls, axis=1)[:, ::-1][:, :5], atol=1e-5)


def test_procrustes_refinement_recovers_a_rotated_language():
    from scipy.linalg import expm

    src, tgt, pairs = _aligned_spaces(500, 8, noise=0.005)
    skew = np.random.default_rng(1).normal(size=(8, 8))
    skew = (skew - skew.T) / 2
    rotation = expm(0.8 * skew / np.linalg.norm(skew, 2))  # rotates by up to 0.8 rad
    spaces = {"xx": src, "yy": WordSpace(tgt.words, tgt.emb @ rotation)}
    dicts = both_directions({("xx", "yy"): pairs})
    plain = word_translation(spaces, dicts)
    pairwise = word_translation(spaces, dicts, procrustes="pairwise")
    multi = word_translation(spaces, dicts, procrustes="multi")
    assert plain["precision@1"] < 0.95
    assert pairwise["precision@1"] == 1.0 and multi["precision@1"] == 1.0
    assert multi["matrix"].shape == (2, 2) and multi["procrustes_log"]["multi"]
    assert set(pairwise["procrustes_log"]) == {"xx-yy", "yy-xx"}


def test_dictionary_roundtrip(tmp_path):
    path = write_dictionary(tmp_path / "en-de.txt", [("▁dog", "▁Hund", 0.5), ("cat", "Katze")])
    assert read_dictionary(path) == [("▁dog", "▁Hund"), ("cat", "Katze")]


@pytest.mark.parametrize("bad", ["ice cream Eis", "ice\tcream\tEis", "dog Hund  Köter", "ice cream\tEis", "dog"])
def test_a_dictionary_line_of_other_than_two_fields_is_named(tmp_path, bad):
    from globetrotter.errors import UserError

    path = tmp_path / "en-de.txt"
    path.write_text(f"cat\tKatze\ndog Hund\n\n{bad}\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        read_dictionary(path)  # was ("ice", "cream"): the third field dropped, the pair wrong
    assert str(err.value) == f"{path}:4: expected 'source target' (MUSE format), got {bad!r}"
    path.write_text("cat\tKatze\n dog   Hund \n", encoding="utf-8")
    assert read_dictionary(path) == [("cat", "Katze"), ("dog", "Hund")]


def test_a_dictionary_byte_that_is_not_utf8_is_named_by_line_and_column(tmp_path):
    """It was named by its byte offset in the file, which no editor shows."""
    from globetrotter.errors import UserError

    path = tmp_path / "en-de.txt"
    path.write_bytes("\ufeffcat\tKatze\ndog Hund\n".encode("utf-8") + b"K\xe4se cheese\n")  # a Latin-1 line
    with pytest.raises(UserError) as err:
        read_dictionary(path)
    assert str(err.value) == (f"{path}:3:2: invalid UTF-8 byte 0xe4; expected a MUSE dictionary ('source target' "
                              f"per line), in UTF-8")
    path.write_bytes("Größe size\n".encode("utf-8") + b"Gr\xf6\xdfe size\n" + "über \xfcber ".encode("utf-8") + b"\xff")
    with pytest.raises(UserError, match=rf"^{path}:2:3: invalid UTF-8 byte 0xf6;"):
        read_dictionary(path)
    path.write_bytes("über über\n".encode("utf-8") + "ü ".encode("utf-8") + b"\xff")
    with pytest.raises(UserError, match=rf"^{path}:2:3: invalid UTF-8 byte 0xff;"):  # a column in characters
        read_dictionary(path)


def _word_level_tokenizer(words: list[str]) -> Tokenizer:
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[UNK]"])
    return tok


def test_input_embeddings_use_token_rows_and_mean_of_pieces():
    tok = _word_level_tokenizer(["red", "car", "rot", "auto"])
    tokens = ["red", "car", "rot", "auto"]
    matrix = np.arange(8, dtype=np.float32).reshape(4, 2)
    words, emb = input_word_embeddings(["car", "red car", "zzz"], tokens, matrix, tok, Counter())
    assert words == ["car", "red car"]  # "zzz" has no usable token
    assert np.allclose(emb[0], matrix[1]) and np.allclose(emb[1], matrix[:2].mean(axis=0))
    assert CaptionTokenizer(tok)(["red car", "Auto"]) == [["red", "car"], []]
    assert CaptionTokenizer(None)(["Red car, red!"]) == [["red", "car", "red"]]


def test_bpe_keys_mark_the_leading_space_and_byte_fragments():
    from globetrotter.tokenizer import special_ids, train_tokenizer

    tok = train_tokenizer(["the red car", "the red ball", "a red car", "红色的车"] * 20, vocab_size=280, min_frequency=1)
    sents = CaptionTokenizer(tok)(["the red car", "黑"])
    assert sents[0][0] == "the" and "▁red" in sents[0]
    # "黑" is unseen: its 3 UTF-8 bytes are 3 fragment tokens, kept under their raw names
    assert len(sents[1]) == 3 and all(is_fragment(k) for k in sents[1])
    # rows of Encoder.token_embeddings() (non-special ids, ascending, decoded) get the same keys
    specials = set(special_ids(tok).values())
    ids = sorted(i for i in tok.get_vocab().values() if i not in specials)
    keys = row_keys(tok, [tok.decode([i]) for i in ids])
    assert set(sents[0]) | set(sents[1]) <= set(keys)
    assert len(set(keys)) == len(keys)  # fragments no longer collide on "\ufffd"
    # a lexicon word takes the form its language's captions use: mid-sentence "▁red", initial "the"
    tokens = [tok.decode([i]) for i in ids]
    counts = Counter(t for s in CaptionTokenizer(tok)(["the red car", "a red ball"]) for t in s)
    words, emb = input_word_embeddings(["red", "the"], tokens, np.eye(len(ids)), tok, counts)
    assert words == ["red", "the"]
    assert emb[0].argmax() == keys.index("▁red") and emb[1].argmax() == keys.index("the")


def test_a_dictionary_file_given_for_its_folder_is_named_as_such(tmp_path, monkeypatch):
    """A file named by a relative path said '... <src>-<tgt>.txt files (.)': the folder is now absolute."""
    from globetrotter.errors import UserError
    from globetrotter.evaluation.word_dictionary import read_dictionaries

    (tmp_path / "en-de.txt").write_text("dog Hund\n", encoding="utf-8")
    for given in (tmp_path / "en-de.txt", Path("en-de.txt")):
        monkeypatch.chdir(tmp_path)
        with pytest.raises(UserError) as err:
            read_dictionaries(given)
        assert str(err.value) == (f"{given}: a file; dictionary takes the folder of <src>-<tgt>.txt files (e.g. its "
                                  f"folder, {tmp_path.resolve()})")
    assert read_dictionaries(tmp_path) == {("en", "de"): [("dog", "Hund")]}


def test_a_byte_order_mark_is_no_part_of_the_first_word_and_a_repeated_pair_counts_once(tmp_path):
    """A file saved with a UTF-8 BOM had '\\ufeffcat' as its first word (never found); a pair given twice was scored
    twice. The BOM is dropped, and so is the repeat, with a warning naming the file and how many."""
    from backretrieval.errors import BackRetrievalWarning

    path = tmp_path / "en-de.txt"
    path.write_text("\ufeffcat Katze\ndog Hund\ncat Katze\ndog\tHund\n", encoding="utf-8")
    with pytest.warns(BackRetrievalWarning, match=rf"^{re.escape(str(path))}: 2 duplicate pair\(s\) dropped"):
        assert read_dictionary(path) == [("cat", "Katze"), ("dog", "Hund")]


def test_chance_recall_is_k_over_the_target_words():
    """Recall@10 of a random ranking: 10 of the target language's candidates, whatever the source's size."""
    rng = np.random.default_rng(0)
    src = WordSpace([f"s{i}" for i in range(5)], rng.normal(size=(5, 8)))
    tgt = WordSpace([f"t{i}" for i in range(40)], rng.normal(size=(40, 8)))
    res = word_translation_scores(src, tgt, [(f"s{i}", f"t{i}") for i in range(5)])
    assert res["chance_recall"] == 10 / 40 and res["n_targets"] == 40


def test_recall_matrix_rows_are_sources_and_means_skip_pairs_without_pairs():
    """Row = source, column = target: only en→de and en→fr have a dictionary, so only row en is filled. de→... none;
    en→de holds identical pairs only, so its no-identical subset is empty and the no-identical mean is en→fr's."""
    e = np.eye(4, dtype=np.float32)
    spaces = {"en": WordSpace(["taxi", "dog"], e[:2]), "de": WordSpace(["taxi", "hund"], e[:2]),
              "fr": WordSpace(["chien", "taxi", "x"], np.stack([e[1], e[0], e[2]]))}
    dicts = {("en", "de"): [("taxi", "taxi")], ("en", "fr"): [("dog", "chien"), ("taxi", "x")]}
    res = word_translation(spaces, dicts, ks=(1,), recall_k=1)
    assert res["languages"] == ["de", "en", "fr"]
    en, de, fr = 1, 0, 2
    assert res["matrix"][en, de] == 1.0 and res["matrix"][en, fr] == 0.5  # taxi→taxi, not x
    filled = ~np.isnan(res["matrix"])
    assert filled.sum() == 2 and filled[en].sum() == 2
    assert np.isnan(res["matrix_no_identical"][en, de]) and res["matrix_no_identical"][en, fr] == 0.5
    assert res["recall@1_no_identical"] == 0.5  # en→fr's alone: en→de has no non-identical pair
    assert res["recall@1"] == pytest.approx((1.0 + 0.5) / 2)


def test_a_tokenizer_key_without_a_row_of_its_own_is_the_mean_of_its_exact_texts_tokens():
    """keys=True: a key with a row takes it; one without (here the two-token "red car") is the mean of the rows of
    the tokens of its very text; a byte fragment without a row, or a text of no known token, is dropped."""
    tok = _word_level_tokenizer(["red", "car", "rot", "auto"])
    tokens = ["red", "car", "rot", "auto"]
    matrix = np.arange(8, dtype=np.float32).reshape(4, 2)
    words, emb = input_word_embeddings(["car", "red car", "⟨e9⟩", "zzz"], tokens, matrix, tok, Counter(), keys=True)
    assert words == ["car", "red car"]
    np.testing.assert_array_equal(emb, [matrix[1], matrix[:2].mean(axis=0)])


def test_dictionaries_of_a_language_without_a_space_or_of_one_language_are_left_out():
    """A dictionary en-xx (no xx words given) or en-en has no pair to score: neither is a result, a language of the
    matrix or a term of the means; the other pairs score as without them."""
    e = np.eye(4, dtype=np.float32)
    spaces = {"en": WordSpace(["taxi", "dog"], e[:2]), "fr": WordSpace(["chien", "taxi"], np.stack([e[1], e[0]]))}
    dicts = {("en", "fr"): [("dog", "chien"), ("taxi", "taxi")]}
    alone = word_translation(spaces, dicts, ks=(1,), recall_k=1)
    res = word_translation(spaces, {**dicts, ("en", "xx"): [("dog", "Hund")], ("en", "en"): [("dog", "dog")]},
                           ks=(1,), recall_k=1)
    assert res["languages"] == ["en", "fr"] and set(res["pairs"]) == {"en-fr"}
    np.testing.assert_array_equal(res["matrix"], alone["matrix"])
    assert res["recall@1"] == alone["recall@1"] == 1.0
    with pytest.raises(ValueError, match="procrustes must be 'none', 'pairwise' or 'multi', got 'full'"):
        word_translation(spaces, dicts, procrustes="full")
    with pytest.raises(ValueError, match="method must be 'nn' or 'csls', got 'cos'"):
        rank_word_vectors(e[:1], e, k=1, method="cos")


def test_no_mutual_pair_is_an_empty_dictionary_and_why_empty_says_which_rule_left_it_empty():
    """Under the paper's idf, log(N / df), a token in every sentence scores 0: no pair is stored, so no pair is
    mutual. That raised numpy's "all keys need to be the same shape" (indexing the scores with no pair gave a
    sparse matrix) instead of an empty dictionary and the one-line reason."""
    from globetrotter.evaluation.word_dictionary import why_empty

    tokenized = {"en": [["a"], ["a"]], "de": [["b"], ["b"]]}
    assert tfidf_dictionary(tokenized["en"], tokenized["de"], idf="paper") == []
    assert build_dictionaries(tokenized, top_k=1, idf="paper") == {("de", "en"): [], ("en", "de"): []}
    assert why_empty(tokenized, 1, 1) == "no token pair is in each other's tf-idf top top_k=1"
    assert why_empty(tokenized, 1, 3) == ("no de/en token is in at least min_count=3 of the 2 sentences "
                                          "(the most frequent: 2)")
    assert why_empty({"en": tokenized["en"]}, 1, 1) == "it needs at least 2 languages, got ['en']"
    with pytest.raises(ValueError, match="idf must be 'smooth' or 'paper', got 'bm25'"):
        tfidf_dictionary(tokenized["en"], tokenized["de"], idf="bm25")
    with pytest.raises(ValueError, match="2 source sentences but 1 target sentences"):
        tfidf_dictionary(tokenized["en"], tokenized["de"][:1])


def test_dictionary_folders_and_files_that_cannot_be_read_are_named(tmp_path):
    from globetrotter.errors import UserError
    from globetrotter.evaluation.word_dictionary import read_dictionaries

    with pytest.raises(UserError, match=r"none: dictionary folder not found \(expected <src>-<tgt>.txt files\)$"):
        read_dictionaries(tmp_path / "none")
    write_dictionary(tmp_path / "en-de.txt", [("dog", "Hund")])
    with pytest.raises(UserError, match=r": no <src>-<tgt>.txt dictionary for languages \['en', 'fr'\]$"):
        read_dictionaries(tmp_path, ["en", "fr"])
    (tmp_path / "en-fr.txt").mkdir()  # a folder of a dictionary's name: unreadable as a file
    with pytest.raises(UserError, match=r"en-fr.txt: unreadable dictionary \("):
        read_dictionaries(tmp_path, ["en", "fr"])
