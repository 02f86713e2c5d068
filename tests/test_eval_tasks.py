"""The evaluation library called directly (no command line): each task with a loaded encoder object, on the tiny
parallel world of test_eval_cli whose answers are known, checked against the metric functions computed by hand."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.errors import UserError
from globetrotter.evaluation import (
    Result,
    build_word_dictionary,
    evaluate_clustering,
    evaluate_correspondence,
    evaluate_generation,
    evaluate_retrieval,
    evaluate_sentence_translation,
    evaluate_word_translation,
    retrieval_per_language,
    select_ranking,
    translate_sentences,
    translate_words,
)
from globetrotter.evaluation.word_dictionary import read_dictionary
from globetrotter.evaluation.word_keys import CaptionTokenizer
import test_eval_cli
from test_eval_cli import ARTICLE, COLOURS, LANGS, SHAPES, FakeEncoder

world = test_eval_cli.world  # the fixture: 30 scenes x 3 languages (test), the same scenes one language each (train)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LEXICON = {(a, b): set(zip(COLOURS[a], COLOURS[b])) | set(zip(SHAPES[a], SHAPES[b])) for a in LANGS for b in LANGS}


def test_word_translation_with_a_lexicon_scores_each_ranking_and_refinement(world):
    result = evaluate_word_translation(FakeEncoder(), dictionary=world / "dictionary", methods=("nn", "csls"),
                                       procrustes=("none", "multi"), name="fake")
    assert isinstance(result, Result) and result.task == "word"
    assert result.model == {"path": None, "name": "fake", "checkpoint": None, "weights_sha256": None}
    assert result.languages == ["de", "en", "fr"] and result.dataset is None
    assert list(result.metrics) == ["nn/none", "nn/multi", "csls/none", "csls/multi"]
    for m in result.metrics.values():  # the fake's words share their concept vectors across languages
        assert m["recall@10"] == m["precision@1"] == m["precision@1_no_identical"] == 1.0
    pairs = result.details["nn/none"]["pairs"]["en-de"]
    assert pairs["all"]["n_pairs"] == 11 and pairs["no_identical"]["n_pairs"] == 10  # ring = ring
    assert result.details["ground_truth"]["source"] == f"lexicon:{world / 'dictionary'}"
    assert result.details["ground_truth"]["vocabulary"] == {lang: 11 for lang in LANGS}
    assert result.details["nn/multi"]["procrustes_log"]["multi"]  # the multi-language maps' convergence
    matrix = result.arrays["recall"]["nn/none"]
    assert result.arrays["languages"] == ["de", "en", "fr"] and np.isnan(np.diag(matrix)).all()
    assert np.nanmin(matrix) == 1.0
    record = result.to_record()
    assert record["config"]["methods"] == ["nn", "csls"] and "arrays" not in record


def test_word_translation_falls_when_languages_are_apart_and_with_tfidf_truth(world, tmp_path):
    offset = evaluate_word_translation(FakeEncoder(language_offset=3.0), dictionary=world / "dictionary",
                                       methods=("nn",))
    assert offset.metrics["nn/none"]["precision@1_no_identical"] < 0.5  # each language's words cluster apart
    tfidf = evaluate_word_translation(FakeEncoder(), split=world / "test", methods=("nn",), embeddings="contextual")
    assert tfidf.details["ground_truth"]["source"] == "tfidf" and tfidf.dataset["split"] == "test"
    assert tfidf.metrics["nn/none"]["recall@10"] > 0.5
    # the evaluation's ground truth is the dictionary build_word_dictionary writes
    built = build_word_dictionary(world / "test", tmp_path, model=FakeEncoder())
    assert tfidf.details["ground_truth"]["pairs"] == built.summary["pairs"]


class MarkedEncoder(FakeEncoder):
    """The fake with a byte-level tokenizer, as the project's BPE: every word has an in-sentence token ``"Ġw"`` (key
    ``"▁w"``, its concept vector) and a bare token ``"w"`` (key ``"w"``, a random vector no other word shares), so a
    tokenizer key is not the plain word a lexicon writes."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        super().__init__()
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
        rng = np.random.default_rng(1)
        self.rows: dict[str, np.ndarray] = {}  # byte-level token -> row
        for word, vec in sorted(self.vectors.items()):
            for form, row in ((word, rng.normal(size=vec.shape)), (" " + word, vec)):
                (piece, _), = byte_level.pre_tokenize_str(form)
                self.rows[piece] = row
        vocab = {"[UNK]": 0, **{piece: i + 1 for i, piece in enumerate(self.rows)}}
        self.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        self.tokenizer.pre_tokenizer = byte_level
        self.tokenizer.decoder = decoders.ByteLevel()
        self.tokenizer.add_special_tokens(["[UNK]"])

    def token_embeddings(self):
        return ([self.tokenizer.decode([i + 1]) for i in range(len(self.rows))],
                np.stack(list(self.rows.values())).astype(np.float32))


def test_a_lexicon_word_is_embedded_in_the_form_its_captions_use(world):
    """Lexicon words are plain words: "red" is embedded as the in-sentence token " red" the captions hold (the
    concept vector all languages share), not as its bare token "red" (a row of its own); only without a split,
    which gives no frequencies, is a word that is a token its own row."""
    lexicon = evaluate_word_translation(MarkedEncoder(), world / "test", dictionary=world / "dictionary",
                                        methods=("nn",))
    assert lexicon.metrics["nn/none"]["precision@1"] == 1.0
    bare = evaluate_word_translation(MarkedEncoder(), dictionary=world / "dictionary", methods=("nn",))
    assert bare.metrics["nn/none"]["precision@1"] < 0.5  # the bare rows: random, so the fake does tell them apart


def test_split_candidates_hold_a_lexicon_word_once(tmp_path, world):
    """--candidates split adds the split's tokens to the lexicon's words; a token that spells a lexicon word, bare (a
    caption starting with "red") or in-sentence ("▁red", the very vector the word "red" is embedded as), stays that
    word, a candidate once: a second copy of a target would tie with it and could take its place."""
    from data_prep.shard_writer import ShardWriter
    from PIL import Image
    from test_eval_cli import caption

    captions: dict[str, list[str]] = {lang: [] for lang in LANGS}
    with ShardWriter(tmp_path / "test", split="test", source="tiny", image_format="png", maxcount=40) as w:
        for c in range(6):
            for s in range(5):
                for lang in LANGS:
                    text = caption(lang, c, s)
                    text = text[2:] if lang == "en" and s == 0 else text  # "red circle": no article
                    captions[lang].append(text)
                    w.write(f"s{c}{s}{lang}", Image.new("RGB", (8, 8)), text, lang, image_id=f"img{c}{s}",
                            group=f"img{c}{s}")
    result = evaluate_word_translation(MarkedEncoder(), tmp_path / "test", dictionary=world / "dictionary",
                                       methods=("nn",), candidates="split")
    tokenize = CaptionTokenizer(MarkedEncoder().tokenizer)
    for lang in LANGS:
        tokens = {k for sent in tokenize(captions[lang]) for k in sent}
        assert (set(COLOURS[lang]) <= tokens) == (lang == "en")  # "red circle" holds the bare token "red"
        lexicon = set(COLOURS[lang]) | set(SHAPES[lang])
        assert {f"▁{w}" for w in lexicon} <= tokens  # every word in-sentence too: the ties the rule removes
        others = {k for k in tokens if k.lstrip("▁") not in lexicon}  # the articles: "a", "ein", "un"
        assert others == {ARTICLE[lang]}, lang
        assert result.details["ground_truth"]["vocabulary"][lang] == len(lexicon | others), lang
    # every target once among its candidates, beside random article rows: as exact as the lexicon's words alone
    assert result.metrics["nn/none"]["precision@1"] == 1.0


def test_every_evaluation_takes_the_model_and_its_split_positionally(world):
    """evaluate_word_translation(run, split, dictionary=...) was a TypeError ('evaluate() takes 1 positional
    argument'): its split, and select_ranking's val, were keyword-only, unlike every other evaluation's."""
    import inspect

    for evaluate in (evaluate_sentence_translation, evaluate_word_translation, evaluate_retrieval, evaluate_clustering,
                     evaluate_correspondence, evaluate_generation, select_ranking):
        first = list(inspect.signature(evaluate).parameters.values())[:2]
        assert [p.kind for p in first] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2, evaluate.__module__
        assert first[0].name == "model" and first[1].name in ("split", "val"), evaluate.__module__
    for call in (evaluate_sentence_translation, evaluate_word_translation, evaluate_retrieval, evaluate_clustering,
                 evaluate_correspondence, evaluate_generation, select_ranking, translate_sentences, translate_words):
        assert inspect.signature(call).parameters["model"].annotation == "ModelLike", call.__module__
    given = {"dictionary": world / "dictionary", "methods": ("nn",), "name": "fake"}
    positional = evaluate_word_translation(FakeEncoder(), world / "test", **given)
    assert positional.to_record()["metrics"] == evaluate_word_translation(FakeEncoder(), split=world / "test",
                                                                        **given).to_record()["metrics"]
    with pytest.raises(TypeError, match="^languages: expected a sequence"):  # the arguments were taken: then checked
        select_ranking(FakeEncoder(), world / "train", languages="en,de")


def test_word_translation_bad_input(world):
    with pytest.raises(UserError, match="give split .* or dictionary$"):
        evaluate_word_translation(FakeEncoder())
    with pytest.raises(UserError, match="^word: candidates='split' needs split$"):
        evaluate_word_translation(FakeEncoder(), dictionary=world / "dictionary", candidates="split")
    with pytest.raises(UserError, match="needs a trained run folder"):
        evaluate_word_translation("tfidf", dictionary=world / "dictionary")
    for methods, procrustes in (((), ("none",)), (("nn",), ())):
        with pytest.raises(ValueError, match="at least one method and one procrustes setting"):
            evaluate_word_translation(FakeEncoder(), dictionary=world / "dictionary", methods=methods,
                                      procrustes=procrustes)


def test_word_translation_passes_the_procrustes_settings_on(world, monkeypatch):
    """procrustes_k and procrustes_iter are the refinement's, not its defaults."""
    import globetrotter.evaluation.tasks.word as task

    seen, real = [], task.word_translation

    def spy(*args, **kwargs):
        seen.append((kwargs["procrustes_k"], kwargs["procrustes_iter"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(task, "word_translation", spy)
    evaluate_word_translation(FakeEncoder(), dictionary=world / "dictionary", methods=("nn",),
                              procrustes=("pairwise",), procrustes_k=3, procrustes_iter=2)
    assert seen == [(3, 2)]


def test_few_candidates_warn_up_to_and_including_k():
    """10 target words rank every answer within the 10 nearest: Recall@10 is 1 for any model, so it warns; 11 do not."""
    import warnings

    from backretrieval.errors import BackRetrievalWarning
    from globetrotter.evaluation.tasks.word import _warn_few_candidates
    from globetrotter.evaluation.word import WordSpace

    def space(n):
        return WordSpace([f"w{i}" for i in range(n)], np.eye(n, 12))

    with pytest.warns(BackRetrievalWarning, match=r"1 language pair\(s\) with 10 or fewer target candidates \(en-de 10\)"):
        _warn_few_candidates({"en": space(11), "de": space(10)}, {("en", "de"): [("w0", "w0")]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_few_candidates({"en": space(10), "de": space(11)}, {("en", "de"): [("w0", "w0")]})


def test_build_word_dictionary_finds_the_lexicon_and_writes_muse_files(world, tmp_path):
    built = build_word_dictionary(world / "test", tmp_path / "dict", tokenizer=FakeEncoder().tokenizer)
    assert built.folder == tmp_path / "dict" and len(built.pairs) == 6 and built.summary["groups"] == 30
    for (a, b), pairs in built.pairs.items():
        found = {(s, t) for s, t, _ in pairs}
        assert LEXICON[(a, b)] <= found  # every colour and shape with its translation
        assert read_dictionary(built.folder / f"{a}-{b}.txt") == [(s, t) for s, t, _ in pairs]
    assert built.summary["tokens"] == "bpe" and (built.folder / "summary.json").is_file()
    sample = build_word_dictionary(world / "test", tmp_path / "sample", words=True, n_groups=12, languages=["de", "fr"])
    assert sample.summary["groups"] == 12 and sample.summary["tokens"] == "words" and set(sample.pairs) == {
        ("de", "fr"), ("fr", "de")}
    for given in ({}, {"words": True, "model": FakeEncoder()}):
        with pytest.raises(UserError, match="exactly one of"):
            build_word_dictionary(world / "test", tmp_path / "x", **given)



def test_dictionary_summary_holds_what_redraws_it(world, tmp_path):
    import hashlib
    import json

    tokenizer = tmp_path / "tokenizer.json"
    FakeEncoder().tokenizer.save(str(tokenizer))
    built = build_word_dictionary(world / "test", tmp_path / "a", tokenizer=tokenizer, n_groups=12, seed=5,
                                  languages=["fr", "de"], top_k=3)
    summary = json.loads((built.folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["seed"] == 5 and summary["n_groups"] == 12 and summary["groups"] == 12
    assert summary["languages"] == ["fr", "de"] and summary["tokenizer"] == str(tokenizer.resolve())
    assert summary["tokenizer_sha256"] == hashlib.sha256(
        FakeEncoder().tokenizer.to_str().encode("utf-8")).hexdigest()
    again = build_word_dictionary(summary["split"], tmp_path / "b", tokenizer=summary["tokenizer"],
                                  languages=summary["languages"], n_groups=summary["n_groups"], seed=summary["seed"],
                                  top_k=summary["top_k"], idf=summary["idf"], min_count=summary["min_count"])
    assert again.pairs == built.pairs
    by_model = build_word_dictionary(world / "test", tmp_path / "c", model=FakeEncoder()).summary
    assert by_model["model"]["name"] == "FakeEncoder" and by_model["tokenizer"] is None
    assert by_model["n_groups"] is None and by_model["seed"] == 0 and by_model["languages"] == ["de", "en", "fr"]


def test_empty_ground_truth_and_empty_queries_are_one_line_errors(world, tmp_path):
    with pytest.raises(UserError, match=r"no word pair in any of the 6 language pairs.*min_count=1000.*nothing written"):
        build_word_dictionary(world / "test", tmp_path / "empty", words=True, min_count=1000)
    assert not (tmp_path / "empty").exists()
    with pytest.raises(UserError, match=r"no ground-truth pair: the tf-idf dictionary .* is empty.*min_count=1000"):
        evaluate_word_translation(FakeEncoder(), split=world / "test", min_count=1000)
    lexicon = tmp_path / "lexicon"
    lexicon.mkdir()
    (lexicon / "en-de.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(UserError, match="hold no pair"):
        evaluate_word_translation(FakeEncoder(), dictionary=lexicon)
    (lexicon / "en-de.txt").write_text("zzz qqq\n", encoding="utf-8")  # pairs, but no word has a vector
    with pytest.raises(UserError, match="none of the 2 ground-truth pairs .* has both words embedded"):
        evaluate_word_translation(FakeEncoder(), dictionary=lexicon)
    (lexicon / "en-de.txt").write_text("red qqq\n", encoding="utf-8")  # one word of each pair has a vector: still none
    with pytest.raises(UserError, match="none of the 2 ground-truth pairs .* has both words embedded"):
        evaluate_word_translation(FakeEncoder(), dictionary=lexicon)
    for queries in ([""], ["red", "  "]):
        with pytest.raises(UserError, match="empty or only spaces"):
            translate_words(FakeEncoder(), queries, to="fr", corpus=world / "test", out=tmp_path)
    from globetrotter.evaluation import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["build-dictionary", "--split", str(world / "test"), "--words", "--min-count", "1000",
                  "--dictionary-out", str(tmp_path / "empty")])
    assert exit_info.value.code == 2 and not (tmp_path / "empty").exists()

def test_retrieval_is_the_metric_over_the_encoders_embeddings(world):
    from data_prep.shards import read_captions

    result = evaluate_retrieval(FakeEncoder(), world / "test")
    assert result.languages == ["de", "en", "fr"]
    for lang in LANGS:
        assert result.metrics["per_language"][lang]["image_retrieval_recall@1"] == 1.0
    assert result.details == {"n_images": 30, "n_captions": 90}
    # a language-offset encoder, against retrieval_per_language over the same embeddings by hand
    encoder = FakeEncoder(language_offset=3.0)
    sample = evaluate_retrieval(encoder, world / "test", languages=["en", "de"], ks=(1, 3), max_images=10, seed=3)
    assert sample.details == {"n_images": 10, "n_captions": 20} and sample.languages == ["de", "en"]
    kept = sorted({f"img{c}{s}" for c in range(6) for s in range(5)})
    kept = [kept[i] for i in np.sort(np.random.default_rng(3).choice(30, 10, replace=False))]
    metas = [m for m in read_captions(world / "test") if m["lang"] in ("en", "de") and m["image_id"] in kept]
    images = np.stack([encoder.scene[(int(i[3]), int(i[4]))] for i in kept])
    expected = retrieval_per_language(encoder.encode_text([m["caption"] for m in metas]), [m["lang"] for m in metas],
                                      images, [kept.index(m["image_id"]) for m in metas], ks=(1, 3))
    assert sample.metrics["mean"] == pytest.approx(expected["mean"])
    for lang in ("de", "en"):
        assert sample.metrics["per_language"][lang] == pytest.approx(expected["per_language"][lang])
    assert sample.metrics["mean"]["chance_image_retrieval_recall@1"] == pytest.approx(0.1)
    # the gallery is every image of the split, whichever languages ask: on the one-language train split the en
    # captions show a third of the images and are still ranked against all of them
    train = read_captions(world / "train")
    n_images = len({m["image_id"] for m in train})
    en_train = [m for m in train if m["lang"] == "en"]
    assert 3 * len({m["image_id"] for m in en_train}) == n_images
    one = evaluate_retrieval(FakeEncoder(), world / "train", languages=["en"])
    assert one.details == {"n_images": n_images, "n_captions": len(en_train)}
    assert one.metrics["per_language"]["en"]["chance_image_retrieval_recall@1"] == pytest.approx(1 / n_images)
    with pytest.raises(UserError, match=r"no caption in language\(s\) \['xx'\] \(has \['de', 'en', 'fr'\]\)$"):
        evaluate_retrieval(encoder, world / "test", languages=["en", "xx"])  # the split's languages named, as sentence's
    with pytest.raises(UserError, match="no image encoder"):
        evaluate_retrieval("tfidf", world / "test")


def test_clustering_follows_meaning_or_language(world):
    full = evaluate_clustering(FakeEncoder(), world / "test", k=3, name="full")
    text = evaluate_clustering(FakeEncoder(language_offset=3.0), world / "test", k=3)
    assert full.metrics["meaning_purity"] == 1.0 and full.metrics["language_purity"] < 0.6
    assert text.metrics["language_purity"] == 1.0 and text.metrics["meaning_purity"] < 0.5
    assert full.details["n_sentences"] == sum(full.details["cluster_sizes"]) == 90 and full.details["k"] == 3
    assert len(full.details["examples"]) == 3 and full.languages == ["de", "en", "fr"]
    assert full.metrics["chance"]["meaning_purity"] < full.metrics["meaning_purity"]


class TokenEncoder(FakeEncoder):
    """The fake with token states: a fixed random vector per character, one row per character, zero-padded."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[str] = []

    def encode_tokens(self, texts, batch_size: int = 256):
        self.encoded += list(texts)
        width = max(len(t) for t in texts)
        states = np.zeros((len(texts), width, 8), np.float32)
        for i, t in enumerate(texts):
            states[i, : len(t)] = [np.random.default_rng(ord(ch)).normal(size=8) for ch in t]
        return states, np.arange(width)[None, :] < np.array([len(t) for t in texts])[:, None]


def test_correspondence_trains_a_probe_on_the_seen_languages(tmp_path):
    from test_eval_correspondence import DE, EL, EN, ZH, _write_split

    split = _write_split(tmp_path / "split", {"en": EN, "de": DE, "el": EL, "zh": ZH})
    encoder = TokenEncoder()
    result = evaluate_correspondence(encoder, split, probe_seeds=(0, 1), epochs=1, max_per_lang=60)
    m, d = result.metrics, result.details
    assert d["seen_languages"] == ["de", "el"] and d["unseen_languages"] == ["en", "zh"]
    assert result.languages == ["de", "el", "en", "zh"] and [r["seed"] for r in d["per_seed"]] == [0, 1]
    assert d["probe"]["d_model"] == 8 and m["chance"] == 0.5 and 0 <= m["unseen_accuracy"] <= 1
    assert m["seen_accuracy"] == pytest.approx(np.mean([r["seen_accuracy"] for r in d["per_seed"]]))
    n_texts = sum(sum(part.values()) for part in d["n_examples"].values())
    assert len(encoder.encoded) == n_texts  # every part's texts, encoded once
    with pytest.raises(UserError, match="no token-level states"):
        evaluate_correspondence(FakeEncoder(), split)


def test_generation_decodes_every_source_and_the_floor(world):
    from globetrotter.evaluation.generation import DecoderConfig

    lines: list[str] = []
    decoder = DecoderConfig(d_model=16, layers=1, prefix_length=2, steps=30, batch_size=16, lr=3e-3)
    result = evaluate_generation(FakeEncoder(), world / "test", world / "train", target="en",
                                 sources=["fr", "de", "fr"], n_groups=10, show=3, decoder=decoder, log=lines.append)
    m, d = result.metrics, result.details
    assert result.languages == ["en", "fr", "de"] and d["sources"] == ["fr", "de"] and d["n_groups"] == 10
    assert list(m["per_source"]) == ["fr", "de"] and all(s["n"] == 10 for s in m["per_source"].values())
    for score in ("chrf", "bleu"):  # the mean over the sources only: the target's reconstruction is apart
        assert m[score] == pytest.approx(np.mean([m["per_source"][lang][score] for lang in ("fr", "de")]))
    assert len(d["examples"]) == 3 and set(d["examples"][0]["generated"]) == {"fr", "de", "en", "mismatched"}
    assert d["decoder"]["steps"] == 30 and d["train"]["captions"] == 30
    assert d["train"]["test_references_in_train"] == 10  # the world's train split captions the same scenes
    assert len(lines) == 1 and lines[0].startswith("training a 1-layer decoder on 30 en captions")
    # a Python caller typed no flag: each refusal names the argument as given (eval.py's flags: test_eval_cli)
    for kwargs, message in (({"target": "xx"}, r"no caption in target language 'xx' \(target; has "),
                            ({"sources": ["en"]}, "^sources: give at least one language other than the target"),
                            ({"decoder": DecoderConfig(lr=-1.0)}, "^decoder.lr=-1.0: expected a learning rate > 0$"),
                            ({"show": -1}, "^show=-1: expected a number of examples >= 0$")):
        with pytest.raises(UserError, match=message):
            evaluate_generation(FakeEncoder(), world / "test", world / "train", **kwargs)


def test_generation_with_a_log_of_its_own_shows_no_progress_bar(world, capsys):
    """log=lambda _: None silenced the note but the decoder's progress bar still ran on stderr."""
    from globetrotter.evaluation.generation import DecoderConfig

    decoder = DecoderConfig(d_model=16, layers=1, prefix_length=2, steps=5, batch_size=16)
    evaluate_generation(FakeEncoder(), world / "test", world / "train", n_groups=4, decoder=decoder)
    err = capsys.readouterr().err
    assert "training a 1-layer decoder" in err and "decoder: " in err  # by default: the note and the bar
    evaluate_generation(FakeEncoder(), world / "test", world / "train", n_groups=4, decoder=decoder,
                        log=lambda _: None)
    assert capsys.readouterr().err == ""


def test_translate_sentences_and_words_with_a_loaded_encoder(world, tmp_path):
    built: list[str] = []
    hits = translate_sentences(FakeEncoder(), ["a red circle", "a blue ring"], to="de", corpus=world / "test", k=2,
                               out=tmp_path, log=built.append)
    assert [h[0][0] for h in hits] == ["ein kreis rot", "ein ring blau"] and len(hits[0]) == 2
    assert hits[0][0][1] >= hits[0][1][1]
    translate_sentences(FakeEncoder(), ["a red circle"], to="de", corpus=world / "test", out=tmp_path,
                        log=built.append)
    assert len(built) == 2  # an encoder object with no checkpoint: its index is rebuilt, never trusted
    words = translate_words(FakeEncoder(), ["red", "star"], source="en", to="fr", corpus=world / "test", k=3,
                            method="csls", out=tmp_path, log=built.append)
    assert [w[0][0] for w in words] == ["rouge", "étoile"] and len(words[0]) == 3
    with pytest.raises(UserError, match="no token embedding"):
        translate_words(FakeEncoder(), ["zzz"], source="en", to="fr", corpus=world / "test", out=tmp_path)
    with pytest.raises(UserError, match="'xx'"):
        translate_sentences(FakeEncoder(), ["a red circle"], to="xx", corpus=world / "test", out=tmp_path)


def test_translate_sentences_refuses_a_rerank_that_re_scores_nothing(world):
    """rerank=K sets how many sentences a ranking with MaxSim or CSLS re-scores: given with no ranking, or with a
    choice of a plain cosine, it was taken and changed nothing (only eval.py translate refused it, and the library
    could not tell it from its default): one line now, naming the arguments given (eval.py translate's names its
    flags). Left out, it is the default."""
    from globetrotter.evaluation import Choice, Ranking

    quiet = {"to": "de", "corpus": world / "test", "source": "en", "k": 2, "log": lambda _: None}
    cosine = Choice(Ranking("cross"), str(world / "train"), None, source="select.json")
    csls = Choice(Ranking("text", 0.0, True, 3), str(world / "train"), None)
    with pytest.raises(UserError, match=r"^rerank=3 re-scores under a chosen ranking; give ranking \(a select record "
                                        r"or its Choice\) or drop it$"):
        translate_sentences(FakeEncoder(), ["a red circle"], rerank=3, **quiet)
    with pytest.raises(UserError, match=r"^rerank=3 re-scores under a ranking with MaxSim or CSLS; ranking "
                                        r"\(select\.json\) chose cosine \(cross head\), whose scores are the "
                                        r"index's own: drop rerank$"):
        translate_sentences(FakeEncoder(), ["a red circle"], ranking=cosine, rerank=3, **quiet)
    with pytest.raises(UserError, match=r"^ranking \(the select record\): csls takes its statistics per "
                                        r"language; give the queries' language with source=LANG$"):
        translate_sentences(FakeEncoder(), ["a red circle"], ranking=csls, **dict(quiet, source=None))
    with pytest.raises(UserError, match=r"^rerank: expected a positive integer, got 0$"):
        translate_sentences(FakeEncoder(), ["a red circle"], ranking=csls, rerank=0, **quiet)
    for choice, rerank in ((cosine, None), (csls, 3), (csls, None), (None, None)):
        hits = translate_sentences(FakeEncoder(), ["a red circle"], ranking=choice, rerank=rerank, **quiet)
        assert hits[0][0][0] == "ein kreis rot" and len(hits[0]) == 2, (choice, rerank)


def test_translate_sentences_shows_its_bars_only_with_the_default_log(world, monkeypatch, capsys):
    """eval.py translate (the default log) shows the bars of encoding a corpus of several chunks and of re-ranking
    more than QUERY_CHUNK queries; a log of one's own (quiet) took the notes but still showed both bars."""
    from functools import partial

    from globetrotter.evaluation import Choice, Ranking
    from globetrotter.evaluation.tasks import translate as task

    monkeypatch.setattr(task, "open_or_build", partial(task.open_or_build, encode_chunk=4))  # 30 sentences: 8 chunks
    given = {"to": "de", "corpus": world / "test", "source": "en", "k": 1,
             "ranking": Choice(Ranking("text", 0.0, True, 3), str(world / "train"), None)}
    queries = ["a red circle"] * (task.QUERY_CHUNK + 1)
    translate_sentences(FakeEncoder(), queries, **given)
    err = capsys.readouterr().err
    assert "encoding de corpus" in err and "re-ranking (" in err, err
    assert translate_sentences(FakeEncoder(), queries, log=lambda _: None, **given)[0][0][0] == "ein kreis rot"
    assert capsys.readouterr().err == ""


def test_translating_from_python_writes_no_file_unless_asked(world, tmp_path, monkeypatch):
    """translate_sentences and translate_words saved their index in ./eval_out/index/ of the working folder by
    default, as eval.py does: a library call keeps it in memory, and saves it with out= (eval.py passes --out)."""
    monkeypatch.chdir(tmp_path)
    quiet = {"corpus": world / "test", "k": 1, "log": lambda _: None}
    sentences = translate_sentences(FakeEncoder(), ["a red circle"], to="de", **quiet)
    words = translate_words(FakeEncoder(), ["red"], source="en", to="fr", **quiet)
    assert sentences[0][0][0] == "ein kreis rot" and words[0][0][0] == "rouge"
    assert list(tmp_path.iterdir()) == []
    translate_sentences(FakeEncoder(), ["a red circle"], to="de", out="saved", **quiet)
    assert [p.name for p in (tmp_path / "saved" / "index").iterdir()][0].startswith("sentences-test-")


def test_one_str_for_a_list_of_queries_or_languages_is_refused(world, tmp_path):
    """translate_sentences(e, 'Kreis', ...) returned one result per character, and languages='en,de' failed with
    "no caption in language(s) ['e', 'n', ',', 'd']": one str is refused as Encoder.encode_text refuses one."""
    for translate in (translate_sentences, translate_words):
        with pytest.raises(TypeError, match=r"^queries: expected a sequence of texts, got one str \('Kreis'\); wrap "
                                            r"it in a list$"):
            translate(FakeEncoder(), "Kreis", to="fr", corpus=world / "test", out=tmp_path, k=1)
    expected = r"expected a sequence of language codes, got one str \('en,de'\); wrap it in a list \(\['en', 'de'\]\)"
    for call in (lambda: evaluate_clustering(FakeEncoder(), world / "test", languages="en,de", k=3),
                 lambda: evaluate_sentence_translation(FakeEncoder(), world / "test", languages="en,de"),
                 lambda: evaluate_retrieval(FakeEncoder(), world / "test", languages="en,de"),
                 lambda: evaluate_word_translation(FakeEncoder(), split=world / "test", languages="en,de"),
                 lambda: build_word_dictionary(world / "test", tmp_path / "d", words=True, languages="en,de"),
                 lambda: select_ranking(FakeEncoder(), val=world / "train", languages="en,de")):
        with pytest.raises(TypeError, match="^languages: " + expected):
            call()
    with pytest.raises(TypeError, match="^seen: " + expected):
        evaluate_correspondence(TokenEncoder(), world / "test", seen="en,de")
    with pytest.raises(TypeError, match="^sources: " + expected):
        evaluate_generation(FakeEncoder(), world / "test", world / "train", sources="en,de")
    assert not (tmp_path / "d").exists()
    # the other lists of names: 'text' was the heads 't', 'e', 'x'; 'nn' the methods 'n', 'n'
    with pytest.raises(TypeError, match=r"^heads: expected a sequence of head names, got one str \('text'\)"):
        select_ranking(FakeEncoder(), val=world / "train", heads="text")
    for name, given in (("methods", {"methods": "nn"}), ("procrustes", {"procrustes": "pairwise"})):
        with pytest.raises(TypeError, match=rf"^{name}: expected a sequence of"):
            evaluate_word_translation(FakeEncoder(), split=world / "test", **given)


@pytest.mark.parametrize("value", [0, -5, 2.5, True])  # True: a bool is not a count (Python reads it as 1)
def test_counts_and_k_must_be_positive_integers(world, tmp_path, value):
    """max_images=0 scored every image and recorded 0 (-5: numpy's error); n_groups 0 said 'at least 2 languages,
    found []' (-5: numpy's error, 2.5: a TypeError); translate_sentences(k=0) failed on faiss' bare assertion."""
    with pytest.raises(UserError, match=rf"^max_images: expected a positive integer, got {value}$"):
        evaluate_retrieval(FakeEncoder(), world / "test", max_images=value)
    for evaluate in (evaluate_sentence_translation, evaluate_clustering):
        with pytest.raises(UserError, match=rf"^n_groups: expected a positive integer, got {value}$"):
            evaluate(FakeEncoder(), world / "test", n_groups=value)
    for translate in (translate_sentences, translate_words):
        with pytest.raises(UserError, match=rf"^k: expected a positive integer, got {value}$"):
            translate(FakeEncoder(), ["a red circle"], to="de", corpus=world / "test", out=tmp_path, k=value)


def test_retrieval_refuses_a_k_of_zero_and_warns_when_k_is_not_below_the_gallery(world):
    """ks=[0] reported recall@0; a K past the gallery gave 1.0 without a word."""
    from backretrieval import BackRetrievalWarning

    with pytest.raises(UserError, match=r"^ks: expected positive integers, got \[0\]$"):
        evaluate_retrieval(FakeEncoder(), world / "test", ks=[0])
    with pytest.warns(BackRetrievalWarning, match=r"^retrieval: 5 images in the gallery, not more than the largest K "
                                                  r"\(10\): Recall@10 would be 1 for any model"):
        evaluate_retrieval(FakeEncoder(), world / "test", ks=[1, 10], max_images=5)


def test_sentence_translation_takes_a_device_as_the_other_tasks_do(world, monkeypatch):
    """A model given by its spec is loaded on ``device`` (a loaded encoder keeps its own, so it cannot show this)."""
    from globetrotter.evaluation import models as model_specs

    asked: list[tuple[str, str]] = []

    def load(spec, device="cpu"):  # records the device; the fake encoder runs anywhere
        asked.append((spec, device))
        return FakeEncoder()

    monkeypatch.setattr(model_specs, "load_model", load)
    result = evaluate_sentence_translation("some-run", world / "test", n_groups=10, device="cuda:3")
    assert asked == [("some-run", "cuda:3")]
    assert result.details["n_groups"] == 10


def test_a_value_error_of_sentence_translation_is_not_blamed_on_the_split(world):
    """The parallel sample (read_parallel) refuses every split that sentence_translation's ValueErrors describe (one
    language, a group twice in a language, too few candidates); what is left is a bad argument, here ``candidates``,
    or a bug. Either was a UserError naming the split as its cause (``test: candidates must be ...``, exit 2)."""
    with pytest.raises(ValueError, match="^candidates must be 'other-language' or 'all', got 'same'$"):
        evaluate_sentence_translation(FakeEncoder(), world / "test", n_groups=10, candidates="same")


def test_retrieval_queries_are_embedded_by_the_cross_modal_head(world):
    """Text->image retrieval compares the images with the cross-modal text head: an encoder whose text-text head is
    unrelated to the images (here the cross head's embeddings negated) still finds every image at rank 1."""

    class CrossOnly(FakeEncoder):
        def encode_text(self, texts, batch_size: int = 256, head: str = "text") -> np.ndarray:
            emb = super().encode_text(texts, batch_size, head)
            return emb if head == "cross" else -emb

    result = evaluate_retrieval(CrossOnly(), world / "test", languages=["en"])
    assert result.metrics["per_language"]["en"]["image_retrieval_recall@1"] == 1.0


def test_retrieval_puts_each_image_at_its_row_in_any_shard_order_and_batch_size(tmp_path):
    """Images read in batches smaller than the gallery, from shards that list them in the reverse of the gallery's
    (sorted) order: each embedding lands at its own image's row, so every caption still finds its image at rank 1."""
    from PIL import Image

    from data_prep.shard_writer import ShardWriter
    from test_eval_cli import caption

    with ShardWriter(tmp_path / "test", split="test", source="tiny", image_format="png", maxcount=40) as w:
        for c in reversed(range(6)):
            for s in reversed(range(5)):
                w.write(f"s{c}{s}", Image.new("RGB", (8, 8), (c, s, 0)), caption("en", c, s), "en",
                        image_id=f"img{c}{s}")
    for batch_size in (4, 7, 256):
        result = evaluate_retrieval(FakeEncoder(), tmp_path / "test", batch_size=batch_size)
        assert result.details == {"n_images": 30, "n_captions": 30}
        assert result.metrics["per_language"]["en"]["image_retrieval_recall@1"] == 1.0, batch_size


def test_the_sentence_interval_is_the_bootstrap_of_its_own_groups_with_its_seed(world):
    """details["interval"] is group_interval of the record's own per-group hits and positives, drawn with the
    evaluation's seed (the seed the record names), whatever that seed is."""
    from globetrotter.evaluation.sentence import group_interval

    def interval_of(result, seed: int) -> dict:
        per_group = result.details["per_group"]
        return group_interval(np.array(per_group["hits"]), np.array(per_group["positives"]), seed=seed)

    encoder = FakeEncoder(language_offset=1.0)  # languages apart: some translations missed, so the groups differ
    first = evaluate_sentence_translation(encoder, world / "test", seed=0)
    assert first.details["interval"] == interval_of(first, 0)
    # a seed whose bootstrap tells it from seed 0 on these groups
    seed = next(s for s in range(1, 50) if interval_of(first, s) != interval_of(first, 0))
    result = evaluate_sentence_translation(encoder, world / "test", seed=seed)
    assert result.details["interval"] == interval_of(result, seed) != interval_of(result, 0)


def test_a_reference_given_to_a_ranking_without_statistics_is_recorded_as_unused(world):
    """A cosine ranking takes no statistics: an explicit reference is checked but not used, and the record says so
    (statistics none, reference None), as a ranking that reads it (CSLS) records it."""
    from globetrotter.evaluation.ranking import Ranking

    cosine = evaluate_sentence_translation(FakeEncoder(), world / "test", reference=world / "train")
    assert cosine.details["scoring"]["statistics"] == "none"
    assert cosine.config["reference"] is None and cosine.config["reference_size"] is None
    csls = evaluate_sentence_translation(FakeEncoder(), world / "test", reference=world / "train",
                                         ranking=Ranking(csls=True, csls_k=3))
    assert csls.details["scoring"]["statistics"] == "inductive" and csls.config["reference"] is not None


def test_transductive_scoring_refuses_a_choice_made_with_a_reference(world):
    """A select choice carries the reference its statistics come from: transductive=True would score it with
    others, and is refused naming the choice."""
    from globetrotter.evaluation.ranking import Ranking
    from globetrotter.evaluation.tasks.choice import Choice

    choice = Choice(Ranking(csls=True, csls_k=3), str(world / "train"), None, source="chosen.json")
    with pytest.raises(UserError, match=r"^transductive=True takes .*; it excludes choice \(chosen.json\)$"):
        evaluate_sentence_translation(FakeEncoder(), world / "test", transductive=True, choice=choice)


def test_clustering_refuses_as_many_clusters_as_sentences(world):
    """k-means with one cluster a sentence makes every purity 1, as chance: k equal to the sentences sampled (2
    groups x 3 languages = 6) is refused as k above them is; one fewer runs."""
    for k in (6, 7):
        with pytest.raises(UserError, match=f"^k={k}: k-means needs fewer clusters than the 6 sentences"):
            evaluate_clustering(FakeEncoder(), world / "test", n_groups=2, k=k)
    assert evaluate_clustering(FakeEncoder(), world / "test", n_groups=2, k=5).details["k"] == 5


def test_a_python_callers_refusals_name_its_arguments_not_eval_py_flags(world):
    """The library's refusals named eval.py's flags (--transductive, --reference, --val) to a Python caller, who
    typed none: they name the arguments as given (eval.py's wording: test_eval_cli)."""
    cases = [(lambda: evaluate_sentence_translation(FakeEncoder(), world / "test", transductive=True,
                                                    reference=world / "train"),
              f"transductive=True takes the statistics from the evaluated sentences; it excludes "
              f"reference={world / 'train'}"),
             (lambda: select_ranking(FakeEncoder(), world / "test", image_features="pixels"),
              f"val={world / 'test'}: a test split; choices are made on val and read nothing of test, not even its "
              f"captions' statistics: name a val split (e.g. the val split beside it)"),
             (lambda: evaluate_word_translation(FakeEncoder()),
              "word: give split (a parallel split, for the tf-idf ground truth) or dictionary")]
    for call, message in cases:
        with pytest.raises(UserError) as err:
            call()
        assert str(err.value) == message and "--" not in str(err.value)


def test_translate_words_names_a_language_the_model_never_read_by_its_argument(tiny_run, tmp_path):
    """``translate_words(..., to="xx")`` said "--to xx: not a language ..." (eval.py translate-word's flag)."""
    for given, named in (({"to": "xx"}, "to=xx"), ({"to": "en", "source": "xx"}, "source=xx")):
        with pytest.raises(UserError) as err:
            translate_words(tiny_run, ["red"], **given, log=lambda _: None)
        assert str(err.value).startswith(f"{named}: not a language of the model's training captions (")
        assert "--" not in str(err.value)
