"""The evaluation CLI end to end on a tiny parallel shard split, with a fake encoder whose
answers are known (captions of one scene share their concept vectors across languages)."""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers

from data_prep.shard_writer import ShardWriter
from data_prep.shards import read_manifest
from globetrotter.evaluation import cli, sentence_translation_score
from globetrotter.evaluation import models as model_specs
from globetrotter.evaluation.procrustes import normalize_rows

COLOURS = {"en": ["red", "blue", "green", "yellow", "black", "white"],
           "de": ["rot", "blau", "grün", "gelb", "schwarz", "weiß"],
           "fr": ["rouge", "bleu", "vert", "jaune", "noir", "blanc"]}
SHAPES = {"en": ["circle", "square", "star", "heart", "ring"],
          "de": ["kreis", "quadrat", "stern", "herz", "ring"],  # "ring" is identical in en and de
          "fr": ["cercle", "carré", "étoile", "cœur", "anneau"]}
ARTICLE = {"en": "a", "de": "ein", "fr": "un"}
LANGS = ["en", "de", "fr"]
DIM = 32


def caption(lang: str, colour: int, shape: int) -> str:
    c, s = COLOURS[lang][colour], SHAPES[lang][shape]
    return f"a {c} {s}" if lang == "en" else f"{ARTICLE[lang]} {s} {c}"


class FakeEncoder:
    """Satisfies the ``globetrotter.load`` Encoder interface; the meaning of a caption is the
    sum of its concept vectors (shared by all languages), an image's that of its scene."""

    def __init__(self, language_offset: float = 0.0, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        colour_vec = rng.normal(size=(6, DIM))
        shape_vec = rng.normal(size=(5, DIM))
        lang_vec = rng.normal(size=(3, DIM)) * language_offset
        self.vectors: dict[str, np.ndarray] = {}
        for li, lang in enumerate(LANGS):
            for i, w in enumerate(COLOURS[lang]):
                self.vectors[w] = colour_vec[i] + lang_vec[li]
            for i, w in enumerate(SHAPES[lang]):
                self.vectors[w] = shape_vec[i] + lang_vec[li]
            self.vectors[ARTICLE[lang]] = 0.2 * rng.normal(size=DIM) + lang_vec[li]
        self.scene = {(c, s): colour_vec[c] + shape_vec[s] for c in range(6) for s in range(5)}
        words = sorted(self.vectors)
        vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
        self.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        self.tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        self.tokenizer.add_special_tokens(["[UNK]"])
        self.config = {"fake": True}
        self.checkpoint = None

    def _vec(self, text: str) -> np.ndarray:
        return sum((self.vectors.get(w, np.zeros(DIM)) for w in text.lower().split()), np.zeros(DIM))

    def encode_text(self, texts, batch_size: int = 256, head: str = "text") -> np.ndarray:
        return normalize_rows(np.stack([self._vec(t) for t in texts]))

    def encode_image(self, images, batch_size: int = 256) -> np.ndarray:
        # the scene is written in the red/green channel of pixel (0, 0) (lossless PNG)
        return normalize_rows(np.stack([self.scene[tuple(int(v) for v in im.getpixel((0, 0))[:2])] for im in images]))

    def token_embeddings(self):
        words = sorted(self.vectors)
        return words, np.stack([self.vectors[w] for w in words]).astype(np.float32)

    def encode_words(self, words) -> np.ndarray:
        return np.stack([self._vec(w) for w in words]).astype(np.float32)

    def token_table(self):
        words = sorted(self.vectors)  # row i + 1 is word i, row 0 the [UNK] special
        return np.vstack([np.zeros(DIM), np.stack([self.vectors[w] for w in words])]).astype(np.float32), np.arange(1, len(words) + 1)

    def token_ids(self, texts):
        return [np.array([i for i in self.tokenizer.encode(t.lower()).ids if i != 0], dtype=np.int64) for t in texts]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """30 scenes x 3 languages in a test split, a non-parallel train split of the same scenes, and the lexicon."""
    root = tmp_path_factory.mktemp("world")
    with ShardWriter(root / "test", split="test", source="tiny", image_format="png", maxcount=40) as w:
        for c in range(6):
            for s in range(5):
                image = Image.new("RGB", (8, 8), (c, s, 0))
                for lang in LANGS:
                    w.write(f"s{c}{s}{lang}", image, caption(lang, c, s), lang, image_id=f"img{c}{s}", group=f"img{c}{s}")
    with ShardWriter(root / "train", split="train", source="tiny", image_format="png", maxcount=40) as w:
        for c in range(6):  # the reference texts of inductive scoring: each image in one language, no groups
            for s in range(5):
                for lang in LANGS:
                    w.write(f"t{c}{s}{lang}", Image.new("RGB", (8, 8), (c, s, 0)), caption(lang, c, s), lang,
                            image_id=f"train{c}{s}{lang}")
    lexicon = root / "dictionary"
    lexicon.mkdir()
    for a in LANGS:
        for b in LANGS:
            if a != b:
                pairs = list(zip(COLOURS[a], COLOURS[b])) + list(zip(SHAPES[a], SHAPES[b]))
                (lexicon / f"{a}-{b}.txt").write_text("".join(f"{x} {y}\n" for x, y in pairs), encoding="utf-8")
    return root


@pytest.fixture
def fake(monkeypatch):
    encoders = {"full": FakeEncoder(), "textonly": FakeEncoder(language_offset=3.0)}

    real = model_specs.load_model
    DEVICES.clear()

    def load(path, device="cpu"):
        DEVICES.append(device)
        return encoders[Path(path).name] if Path(path).name in encoders else real(path, device)

    monkeypatch.setattr(model_specs, "load_model", load)
    return encoders


DEVICES: list[str] = []  # the devices the fake load_model was asked for, in order


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    return exit_info.value.code


def record(out: Path, task: str, model: str = "full") -> dict:
    return json.loads((out / f"{task}-{model}.json").read_text(encoding="utf-8"))


def test_sentence_command_writes_record_and_plots(world, fake, tmp_path):
    out = tmp_path / "out"
    assert run(["sentence", "--model", "full", "--name", "full", "--split", str(world / "test"), "--out", str(out)]) == 0
    rec = record(out, "sentence")
    assert rec["metrics"]["sentence_translation"] == 1.0
    assert rec["metrics"]["chance"] == pytest.approx(2 / 60)
    assert rec["languages"] == ["de", "en", "fr"] and rec["dataset"]["split"] == "test"
    assert rec["details"]["matrix"]["en"]["de"] == 1.0 and rec["details"]["asymmetry"]["en"]["de"] == 0.0
    assert all(Path(p).is_file() for p in rec["plots"]) and len(rec["plots"]) == 2
    assert run(["sentence", "--model", "textonly", "--name", "textonly", "--split", str(world / "test"), "--out", str(out)]) == 0
    assert record(out, "sentence", "textonly")["metrics"]["sentence_translation"] < 1.0
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_every_eval_record_names_the_versions_it_was_made_with(world, tmp_path):
    """No record held a version: two records of other code or another torch read alike. Result.to_record, the one
    writer of every eval.py record, now adds the package's, torch's and Python's versions."""
    import platform

    import torch

    import globetrotter

    out = tmp_path / "out"
    assert run(["sentence", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out)]) == 0
    assert record(out, "sentence", "tfidf")["versions"] == {"globetrotter": globetrotter.__version__,
                                                           "torch": torch.__version__, "numpy": np.__version__,
                                                           "python": platform.python_version()}


def _options_of(command: str) -> set[str]:
    """The destinations of every option of ``eval.py COMMAND`` (its own and the common ones)."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest for a in sub.choices[command]._actions if a.dest != "help"}


def test_eval_records_list_every_option_they_were_made_with(world, tmp_path):
    """A record's config held the settings its task resolved, not the command line: --batch-size, --device and
    --name were nowhere, so a record did not say how to make it again. common.write adds every option."""
    out = tmp_path / "out"
    argv = ["sentence", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out), "--n-groups", "5",
            "--batch-size", "7", "--seed", "3"]
    assert run(argv) == 0
    rec = record(out, "sentence", "tfidf")
    options = rec["inputs"]  # config.options before every command's record spelled its options alike
    assert "options" not in rec["config"] and rec["seed"] == 3 and "seed" not in rec["config"]
    assert set(options) == _options_of("sentence") | {"command"}
    assert options["batch_size"] == 7 and options["device"] == "cpu" and options["seed"] == 3
    assert options["n_groups"] == 5 and options["split"] == str(world / "test") and options["name"] is None
    summary = json.loads((out / "results.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert summary["inputs"] == options and summary["seed"] == 3


def test_sentence_command_with_the_tfidf_baseline_fits_its_idf_on_the_reference(world, tmp_path, capsys):
    from data_prep.shards import read_captions
    from globetrotter.evaluation.sentence import parallel_set, sentence_translation
    from globetrotter.evaluation.tfidf import TfidfEncoder

    out = tmp_path / "out"
    assert run(["sentence", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out)]) == 0
    rec = record(out, "sentence", "tfidf")
    assert rec["model"] == {"path": "tfidf", "name": "tfidf", "checkpoint": None, "weights_sha256": None}
    scoring = rec["details"]["scoring"]
    assert scoring["statistics"] == "inductive" and scoring["tfidf"]["fitted_on"]["split"] == str(world / "train")
    assert rec["config"]["reference"] == str(world / "train") and rec["config"]["transductive"] is False
    # the same figure by hand: idf fitted on the train split's captions, exact sparse cosines, ties at --seed
    ps = parallel_set(read_captions(world / "test"), n_groups=200, seed=0)
    emb = TfidfEncoder().fit([m["caption"] for m in read_captions(world / "train")]).encode_text(ps.captions)
    expected = sentence_translation(emb, ps.langs, ps.groups, tie_seed=0)["accuracy"]
    assert rec["metrics"]["sentence_translation"] == pytest.approx(expected)
    # cognates (ring/ring, rot/rouge, ...) lift it above chance, far from the perfect fake model
    assert rec["metrics"]["chance"] < rec["metrics"]["sentence_translation"] < 1.0
    capsys.readouterr()
    assert run(["retrieval", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no image encoder" in err and len(err.strip().splitlines()) == 1
    assert run(["cluster", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out)]) == 2
    assert "needs a trained run folder" in capsys.readouterr().err


def test_sentence_command_wires_the_ranking_reference_and_transductive_form(world, fake, tmp_path, capsys):
    from data_prep.shards import read_captions
    from globetrotter.evaluation import Ranking, ScoringContext, read_reference
    from globetrotter.evaluation.sentence import parallel_set, sentence_translation

    out = tmp_path / "out"
    argv = ["sentence", "--model", "textonly", "--split", str(world / "test"), "--out", str(out), "--maxsim", "0.5",
            "--retrieval", "csls", "--csls-k", "4"]
    assert run(argv + ["--name", "inductive"]) == 0
    rec = record(out, "sentence", "inductive")
    ranking = Ranking("text", 0.5, True, 4)
    assert rec["config"]["ranking"] == ranking.to_dict() and rec["details"]["scoring"]["statistics"] == "inductive"
    assert rec["details"]["scoring"]["maxsim_tokens"]["reference"] == str(world / "train")
    ps = parallel_set(read_captions(world / "test"), n_groups=200, seed=0)
    pool = read_reference(world / "train", ps.languages)
    scorer = ScoringContext(fake["textonly"], ps.captions, ps.langs, pool).scorer(ranking)
    expected = sentence_translation(scorer, ps.langs, ps.groups, tie_seed=0)["accuracy"]
    assert rec["metrics"]["sentence_translation"] == pytest.approx(expected)
    assert "statistics from" in capsys.readouterr().out
    assert run(argv + ["--name", "transductive", "--transductive"]) == 0
    rec = record(out, "sentence", "transductive")
    assert rec["details"]["scoring"]["statistics"] == "transductive" and rec["config"]["reference"] is None
    assert "TRANSDUCTIVE" in capsys.readouterr().out
    scorer = ScoringContext(fake["textonly"], ps.captions, ps.langs, None).scorer(ranking)
    expected = sentence_translation(scorer, ps.langs, ps.groups, tie_seed=0)["accuracy"]
    assert rec["metrics"]["sentence_translation"] == pytest.approx(expected)
    # bad input: one line each, exit 2
    for extra, message in ((["--transductive", "--reference", str(world / "train")], "excludes --reference"),
                           (["--reference", str(world / "nope")], "nope: no split here"),
                           (["--reference", str(world / "train"), "--languages", "en,de", "--csls-k", "40"],
                            r"--csls-k 40 neighbours exceed the 30 reference captions in de \(\S+train\); name a "
                            r"--reference with 40 or more de captions, or lower --csls-k"),
                           # the split has 30 de captions: a larger --reference-size helps up to them only
                           (["--reference-size", "3", "--n-groups", "10"],
                            r"--csls-k 4 neighbours exceed the 3 reference captions in de \(\S+train, a sample of "
                            r"its 30\); raise --reference-size to 4 or more, or lower --csls-k$"),
                           (["--reference-size", "3", "--csls-k", "40"],
                            r"--csls-k 40 neighbours exceed the 3 reference captions in de \(\S+train, a sample of "
                            r"its 30\); name a --reference with 40 or more de captions, or lower --csls-k$"),
                           (["--transductive", "--n-groups", "4"],
                            r"--retrieval csls --transductive: --csls-k 4 neighbours exceed the 3 evaluated sentences "
                            r"in de besides the query's own \(4 in all\); sample more groups \(--n-groups\) or lower "
                            r"--csls-k"),
                           (["--ranking", str(world / "nope.json")], "--ranking .* sets the whole ranking")):
        assert run(argv + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert re.search(message, err) and len(err.splitlines()) == 1, err
    lone = world / "lone"
    if not lone.exists():
        with ShardWriter(lone / "train", split="train", source="tiny", image_format="png") as w:
            w.write("x", Image.new("RGB", (8, 8)), "a red circle", "en", image_id="x")
    assert run(argv + ["--reference", str(lone / "train")]) == 2
    assert "no caption in de,fr for the reference statistics" in capsys.readouterr().err
    assert run(["sentence", "--model", "tfidf", "--split", str(world / "test"), "--out", str(out), "--maxsim", "1"]) == 2
    err = capsys.readouterr().err
    assert "--maxsim" in err and len(err.strip().splitlines()) == 1


def test_select_names_a_g_of_an_unknown_model_by_its_image_features_not_backretrievals_flag(world, tmp_path, capsys):
    """backretrieval words a g's unknown model with its own flag (--image-model) under a command line; eval.py has
    none: select names the --image-features value it was given, and the model as an argument."""
    pool = tmp_path / "pool"  # a reference split of images the val split does not show
    with ShardWriter(pool, split="train", source="tiny", image_format="png") as w:
        for lang in LANGS:
            w.write(f"p{lang}", Image.new("RGB", (8, 8), (9, 9, 0)), caption(lang, 1, 1), lang, image_id=f"pool{lang}")
    assert run(["select", "--model", "tfidf", "--val", str(world / "train"), "--reference", str(pool),
                "--image-features", "timm:resnet5:package", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: image features 'timm:resnet5:package': image model 'resnet5' is not a timm model "
                          "(did you mean") and "--image-model" not in err and len(err.splitlines()) == 1, err


def test_select_says_what_helps_when_csls_k_exceeds_a_languages_reference_captions(world, tmp_path, capsys):
    """select scores with sentence's reference pool: a --csls-k beyond a language's captions names --reference-size
    only where its sample cut them (it said "raise --reference-size" also where the split has no more)."""
    pool = tmp_path / "pool"  # 5 captions a language, of images the val split does not show
    with ShardWriter(pool, split="train", source="tiny", image_format="png") as w:
        for s in range(5):
            for lang in LANGS:
                w.write(f"p{s}{lang}", Image.new("RGB", (8, 8), (9, s, 0)), caption(lang, 1, s), lang,
                        image_id=f"pool{s}{lang}")
    argv = ["select", "--model", "tfidf", "--val", str(world / "train"), "--reference", str(pool), "--retrieval",
            "csls", "--image-features", "pixels", "--out", str(tmp_path / "out")]
    where = re.escape(str(pool))
    for extra, message in ((["--csls-k", "6"], rf"the 5 reference captions in de \({where}\); name a --reference with 6 "
                                               r"or more de captions, or lower --csls-k$"),
                           (["--csls-k", "4", "--reference-size", "3"],
                            rf"the 3 reference captions in de \({where}, a sample of its 5\); raise --reference-size to "
                            r"4 or more, or lower --csls-k$")):
        assert run(argv + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert re.search(message, err) and len(err.splitlines()) == 1, err


def test_sentence_scores_with_the_reference_captions_read_alone(world):
    """`eval.py sentence` reads the reference split once for its image ids (it may show no evaluated image) and its
    captions (the statistics; it read it twice: test_sentence_reads_the_evaluated_split_once). The record is the one
    of the captions read by read_reference alone: the same sample, statistics and figures."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation import (Ranking, ScoringContext, evaluate_sentence_translation, parallel_set,
                                         read_reference, sentence_translation)
    from globetrotter.evaluation.tfidf import TfidfEncoder

    ranking = Ranking("text", 0.0, True, 3)
    result = evaluate_sentence_translation("tfidf", world / "test", ranking=ranking, reference_size=20)
    ps = parallel_set(read_captions(world / "test"), n_groups=200, seed=0)
    pool = read_reference(world / "train", ps.languages, 20)
    scorer = ScoringContext(TfidfEncoder(), ps.captions, ps.langs, pool).scorer(ranking)
    assert result.details["scoring"] == scorer.record and scorer.record["reference"] == pool.record
    assert pool.record["per_language"] == {"de": 20, "en": 20, "fr": 20}  # sampled: 30 captions each
    expected = sentence_translation(scorer, ps.langs, ps.groups, tie_seed=0)
    assert result.metrics["sentence_translation"] == expected["accuracy"]
    assert result.details["per_group"]["hits"] == expected["group_hits"].tolist()


def test_the_sentence_record_names_only_the_statistics_that_applied(world, fake, tmp_path):
    """A cosine ranking reads no reference: the record said reference_size 2000 beside reference None; --transductive
    and --reference-size apply where the ranking reads statistics (the TF-IDF baseline's idf)."""
    out = tmp_path / "out"
    test = ["sentence", "--split", str(world / "test"), "--out", str(out)]
    assert run(test + ["--model", "full", "--name", "full"]) == 0
    config = record(out, "sentence")["config"]
    assert config["reference"] is None and config["reference_size"] is None and config["transductive"] is False
    assert run(test + ["--model", "tfidf", "--name", "tfidf", "--transductive"]) == 0
    rec = record(out, "sentence", "tfidf")
    assert rec["details"]["scoring"]["statistics"] == "transductive" and rec["config"]["transductive"] is True
    assert rec["config"]["reference_size"] is None
    assert run(test + ["--model", "tfidf", "--reference-size", "7", "--name", "capped"]) == 0
    assert record(out, "sentence", "capped")["config"]["reference_size"] == 7


def test_the_word_record_names_only_the_settings_that_applied(world, fake, tmp_path):
    """word recorded the tf-idf rule beside a lexicon and Procrustes settings without refinement; the defaults of the
    options refused when given stay harmless."""
    out = tmp_path / "out"
    word = ["word", "--model", "full", "--split", str(world / "test"), "--out", str(out), "--method", "nn"]
    assert run(word + ["--dictionary", str(world / "dictionary"), "--name", "full"]) == 0
    config = record(out, "word")["config"]
    assert [config[k] for k in ("top_k", "idf", "min_count", "procrustes_k", "procrustes_iter")] == [None] * 5
    assert run(word + ["--top-k", "4", "--procrustes", "pairwise", "--procrustes-iter", "2", "--name", "tfidf"]) == 0
    config = record(out, "word", "tfidf")["config"]
    assert [config[k] for k in ("top_k", "idf", "min_count", "procrustes_k", "procrustes_iter")] == [4, "smooth", 1, 5, 2]


def test_select_says_its_cut_captions_once_per_command_not_once_per_head_or_split(tiny_run, tiny_world, tmp_path,
                                                                                  capsys):
    """select encodes the val captions once per head (text, cross) and the reference captions too; the TextsCut
    warning of the over-long captions is one line for the command (it was one a split read: two lines that did not
    say which split), as the trainer's validations say it once per run. It counts distinct texts (the tiny world's
    captions repeat: it counted each list's positions, a text in both splits twice)."""
    from data_prep.shards import read_captions

    texts, long = set(), set()
    for split in ("val", "train"):  # one caption past the 32 tokens in each
        with ShardWriter(tmp_path / split, split=split, source="tiny", image_format="png", maxcount=40) as w:
            for i, m in enumerate(read_captions(tiny_world / split)):
                pixels = np.random.default_rng(i).integers(0, 255, (32, 32, 3), dtype=np.uint8)
                caption = " ".join([m["caption"]] * (30 if i == 0 else 1))
                w.write(f"{split}-{i:05d}", Image.fromarray(pixels), caption, m["lang"], m["image_id"])
                texts.add(caption)
                long.update([caption] if i == 0 else [])
    assert run(["select", "--model", str(tiny_run), "--name", "cut", "--val", str(tmp_path / "val"), "--reference",
                str(tmp_path / "train"), "--out", str(tmp_path / "out"), "--maxsim", "0"]) == 0
    heads = {c["ranking"]["head"] for c in record(tmp_path / "out", "select", "cut")["details"]["candidates"]}
    said = [line for line in capsys.readouterr().err.splitlines() if "longer than data.max_length" in line]
    assert heads == {"text", "cross"} and said == [
        f"warning: {len(long)} of {len(texts)} text(s) are longer than data.max_length=32 tokens and were cut to it, as in "
        f"training: the tokens past it do not change their embeddings"], said


def test_select_runs_the_text_encoder_once_over_each_caption_for_both_heads(tiny_run, monkeypatch):
    """select encoded the val captions, and again the reference captions, once per head (text, cross): two passes of
    the text encoder over the same texts, the heads being projections of the same sentence states. Each text now
    passes once, and each head's embeddings are those the head gives alone."""
    from globetrotter import load
    from globetrotter.evaluation.tasks.select import select_ranking
    from globetrotter.models.globetrotter import GlobetrotterModel
    from globetrotter.texts_cut import TextsCut

    passed = []
    real = GlobetrotterModel.sentence_states
    monkeypatch.setattr(GlobetrotterModel, "sentence_states",
                        lambda self, ids, *args: passed.append(len(ids)) or real(self, ids, *args))
    result = select_ranking(str(tiny_run), maxsim=(0.0,), log=lambda line: None)  # heads text, cross; CSLS or not
    assert {c["ranking"]["head"] for c in result.details["candidates"]} == {"text", "cross"}
    assert sum(passed) == result.details["val"]["captions"] + result.details["reference"]["captions"]
    encoder = load(tiny_run)
    texts = ["red a square", "синий квадрат", "a much longer caption of a green square"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TextsCut)  # the long caption is cut to the tiny run's length: as it should be
        both = encoder.encode_text_heads(texts, ("text", "cross", "backbone"), batch_size=2)
        for head, emb in both.items():
            np.testing.assert_array_equal(emb, encoder.encode_text(texts, batch_size=2, head=head))


def test_select_chooses_on_val_and_sentence_applies_the_choice(tiny_run, tiny_world, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(["select", "--model", str(tiny_run), "--name", "run", "--out", str(out), "--maxsim", "0,1",
                "--heads", "text", "--csls-k", "3"]) == 0
    rec = record(out, "select", "run")
    assert rec["dataset"]["path"] == str((tiny_world / "val").resolve())
    assert len(rec["details"]["candidates"]) == 4 and rec["config"]["reference"] == str(tiny_world / "train")
    # the reference split is named by its manifest's checksum too, as the record's dataset is
    checksum = read_manifest(tiny_world / "train")["checksum"]
    assert checksum and rec["details"]["reference"]["checksum"] == checksum
    best = max(rec["details"]["candidates"], key=lambda c: c["mean_bkr"])
    assert rec["details"]["chosen"] == best["ranking"] and rec["metrics"]["mean_bkr"] == best["mean_bkr"]
    printed = capsys.readouterr().out
    assert "chosen on val" in printed and "95% intervals over the val queries" in printed
    # the printed test command names the languages it was chosen for (sentence refuses any other set)
    assert f"--split SPLIT --languages {','.join(rec['languages'])} --ranking {out / 'select-run.json'}" in printed
    # the intervals are of the figures the choice was made on: the same means, the runner-up the best other one
    spread = rec["details"]["uncertainty"]
    assert spread["mean"]["value"] == pytest.approx(best["mean_bkr"])
    assert spread["mean"]["lo"] <= best["mean_bkr"] <= spread["mean"]["hi"]
    runner_up = rec["details"]["candidates"][spread["over_runner_up"]["candidate"]]
    assert runner_up is not best and runner_up["mean_bkr"] == max(
        c["mean_bkr"] for c in rec["details"]["candidates"] if c is not best)
    assert spread["over_runner_up"]["diff"] == pytest.approx(best["mean_bkr"] - runner_up["mean_bkr"])
    # every other candidate against the choice, paired on the same queries (the runner-up's the margin's mirror)
    others = [c for c in rec["details"]["candidates"] if c is not best]
    assert "vs_chosen" not in best and all(c["vs_chosen"]["lo"] <= c["vs_chosen"]["diff"] <= c["vs_chosen"]["hi"]
                                           for c in others)
    assert all(c["vs_chosen"]["diff"] == pytest.approx(c["mean_bkr"] - best["mean_bkr"]) for c in others)
    assert runner_up["vs_chosen"]["lo"] == pytest.approx(-spread["over_runner_up"]["hi"])
    tied = [c["label"] for c in others if c["vs_chosen"]["lo"] <= 0 <= c["vs_chosen"]["hi"]]
    assert (f"within noise of the choice (paired interval holds 0): {len(tied)} of 3 other rankings "
            f"({', '.join(tied)})" in printed) == bool(tied)
    assert rec["plots"] == [str(out / "select-run-choice.png")] and Image.open(rec["plots"][0]).size[0] > 300
    path = out / "select-run.json"
    assert run(["sentence", "--model", str(tiny_run), "--name", "chosen", "--split", str(tiny_world / "test"),
                "--out", str(out), "--n-groups", "12", "--ranking", str(path), "--csls-k", "3"]) == 0
    scored = record(out, "sentence", "chosen")
    assert scored["config"]["ranking"] == rec["details"]["chosen"]
    interval = scored["details"]["interval"]
    assert interval["lo"] <= scored["metrics"]["sentence_translation"] <= interval["hi"]
    printed = capsys.readouterr().out  # the interval printed is the record's, both ends
    assert f"95% interval over the groups {100 * interval['lo']:.2f}–{100 * interval['hi']:.2f}%" in printed
    assert run(["sentence", "--model", str(tiny_run), "--split", str(tiny_world / "test"), "--out", str(out),
                "--ranking", str(path), "--head", "cross"]) == 2
    assert "drop --head" in capsys.readouterr().err
    assert run(["select", "--model", "tfidf", "--out", str(out)]) == 2
    assert "--val SPLIT is needed" in capsys.readouterr().err


def test_sentence_applies_a_choice_with_the_statistics_it_was_chosen_with(tiny_run, tiny_world, tmp_path, capsys):
    """A ranking chosen with one reference pool is scored on test with that pool, not the default beside test, nor
    another sample of it drawn with the scoring's seed."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation import Ranking, ScoringContext, read_reference
    from globetrotter.evaluation.sentence import parallel_set, sentence_translation
    from globetrotter.evaluation.tasks.common import resolve_model


    # a pool that is neither the train split (the default) nor an evaluated split: val's captions, of other images
    # (a copy of val itself, its images included, is refused: its captions are the evaluated ones)
    from data_prep.shards import iter_raw

    out, pool_split = tmp_path / "out", tmp_path / "pool"
    with ShardWriter(pool_split, split="train", source="unit", image_format="png") as writer:
        for key, _ext, data, meta in iter_raw(tiny_world / "val"):
            writer.write(key, data, meta["caption"], meta["lang"], f"pool-{meta['image_id']}")
    assert run(["select", "--model", str(tiny_run), "--name", "pooled", "--out", str(out), "--maxsim", "0",
                "--heads", "text", "--retrieval", "csls", "--csls-k", "3", "--reference", str(pool_split),
                "--reference-size", "6", "--seed", "1"]) == 0
    choice = record(out, "select", "pooled")
    assert choice["config"]["reference"] == str(pool_split) and choice["config"]["reference_size"] == 6
    assert f"statistics from {pool_split}" in capsys.readouterr().out
    path = out / "select-pooled.json"
    test = ["sentence", "--model", str(tiny_run), "--split", str(tiny_world / "test"), "--out", str(out),
            "--n-groups", "12", "--ranking", str(path)]
    assert run(test + ["--name", "applied"]) == 0
    scored = record(out, "sentence", "applied")
    assert scored["config"]["reference"] == str(pool_split) and scored["config"]["reference_size"] == 6
    # val holds 8 captions per language: the 6 the choice was made with (seed 1) are the 6 test is scored with (seed 0)
    pool = read_reference(pool_split, choice["languages"], 6)
    assert len(read_reference(pool_split, ["en"], None)) == 8
    assert scored["details"]["scoring"]["reference"]["sha256"] == choice["details"]["reference"]["sha256"] \
        == pool.record["sha256"]
    # the same figure by hand: CSLS radii among those 6 val captions per language, not the train split's
    ps = parallel_set(read_captions(tiny_world / "test"), n_groups=12, seed=0)
    encoder, _ = resolve_model(str(tiny_run))
    scorer = ScoringContext(encoder, ps.captions, ps.langs, pool).scorer(
        Ranking.from_dict(choice["details"]["chosen"]))
    expected = sentence_translation(scorer, ps.langs, ps.groups, tie_seed=0)["accuracy"]
    assert scored["metrics"]["sentence_translation"] == pytest.approx(expected)
    # the same reference named again is fine; another one, another size or the transductive form is refused
    assert run(test + ["--name", "again", "--reference", str(pool_split)]) == 0
    capsys.readouterr()
    for extra, message in ((["--reference", str(tiny_world / "train")], "chosen with statistics from .*val.*--reference"),
                           (["--reference-size", "2000"], "6 captions per language.*--reference-size 2000"),
                           (["--csls-k", "5"], "chosen with --csls-k 3; drop --csls-k 5"),
                           (["--transductive"], "chosen with statistics from .*--transductive")):
        assert run(test + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert re.search(message, err) and len(err.splitlines()) == 1, err


def test_a_choice_applies_only_to_the_model_languages_and_captions_it_was_made_for(tiny_run, tiny_world, tmp_path,
                                                                                  capsys, monkeypatch):
    """``sentence --ranking`` refuses a record made for another model or other languages, and one whose reference
    captions are no longer those it was chosen with (a ranking that reads them: CSLS); the scored record names the
    choice it applied."""
    monkeypatch.setattr(sys, "argv", ["eval.py"])  # messages name the command as it was started
    out = tmp_path / "out"
    assert run(["select", "--model", str(tiny_run), "--name", "run", "--out", str(out), "--maxsim", "0",
                "--heads", "text", "--retrieval", "csls", "--csls-k", "3"]) == 0
    path = out / "select-run.json"
    test = ["sentence", "--split", str(tiny_world / "test"), "--out", str(out), "--n-groups", "12"]
    assert run(test + ["--model", str(tiny_run), "--name", "applied", "--ranking", str(path)]) == 0
    assert record(out, "sentence", "applied")["config"]["ranking_record"] == str(path)
    # the same weights by their checkpoint folder (the run folder loads it): the choice applies
    weights = record(out, "sentence", "applied")["model"]["checkpoint"]
    assert Path(weights).parent.name == "checkpoints"
    assert run(test + ["--model", weights, "--name", "by-checkpoint", "--ranking", str(path)]) == 0
    capsys.readouterr()
    changed = json.loads(path.read_text(encoding="utf-8"))
    changed["details"]["reference"]["sha256"] = "0" * 64  # as if the train split had been rebuilt since
    stale = out / "stale.json"
    stale.write_text(json.dumps(changed), encoding="utf-8")
    binary = out / "binary.json"
    binary.write_bytes(bytes(range(128, 256)))
    for extra, message in ((["--model", "tfidf", "--ranking", str(path)], "chose a ranking for .*tiny_run.*, not tfidf"),
                           (["--model", str(tiny_run), "--ranking", str(path), "--languages", "en,ru"],
                            "chose a ranking for el,en,ja,ru, not en,ru: evaluate --languages el,en,ja,ru, or choose "
                            "again"),
                           (["--model", str(tiny_run), "--ranking", str(stale)],
                            "are not those the ranking was chosen with"),
                           (["--model", str(tiny_run), "--ranking", str(binary)], "not a record of `eval.py select`")):
        assert run(test + extra) == 2, extra
        err = [line for line in capsys.readouterr().err.splitlines() if "no best checkpoint" not in line]
        assert len(err) == 1 and re.search(message, err[0]), err


def test_a_choice_is_refused_once_the_run_loads_other_weights(tiny_run, tiny_world, tmp_path, capsys):
    """A select record names the checkpoint it chose for: after the run saves another one (what --model now loads),
    ``sentence --ranking`` refuses it; the scored record names the checkpoint it evaluated. A cosine choice reads no
    reference: its split may be gone."""
    import shutil

    from globetrotter.training.checkpoint import LATEST

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    out, reference = tmp_path / "out", tmp_path / "reference"
    shutil.copytree(tiny_world / "train", reference)
    assert run(["select", "--model", str(run_dir), "--name", "run", "--out", str(out), "--maxsim", "0",
                "--heads", "text", "--retrieval", "cosine", "--reference", str(reference)]) == 0
    path = out / "select-run.json"
    chosen_for = json.loads(path.read_text(encoding="utf-8"))["model"]["checkpoint"]
    assert Path(chosen_for).parent == (run_dir / "checkpoints").resolve()
    shutil.rmtree(reference)
    test = ["sentence", "--model", str(run_dir), "--split", str(tiny_world / "test"), "--out", str(out),
            "--n-groups", "12", "--ranking", str(path)]
    assert run(test + ["--name", "scored"]) == 0
    assert record(out, "sentence", "scored")["model"]["checkpoint"] == chosen_for
    checkpoints = run_dir / "checkpoints"
    shutil.copytree(chosen_for, checkpoints / "step-00000009")
    (checkpoints / LATEST).write_text("step-00000009")
    capsys.readouterr()
    assert run(test) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "no best checkpoint" not in line]
    assert len(err) == 1 and "not those of" in err[0] and "step-00000009" in err[0], err
    # other weights saved under the very folder it chose for (a new best/): the path alone let the choice through
    from safetensors.torch import load_file, save_file

    shutil.rmtree(checkpoints / "step-00000009")
    (checkpoints / LATEST).write_text(Path(chosen_for).name)
    tensors = load_file(Path(chosen_for) / "model.safetensors")
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 1
    save_file(tensors, str(Path(chosen_for) / "model.safetensors"))
    assert run(test) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "no best checkpoint" not in line]
    assert len(err) == 1 and "chose a ranking for other weights than" in err[0], err


def test_a_choice_is_checked_against_an_encoder_object_too(tiny_run, tiny_world, tmp_path):
    """The library form: a choice made for the TF-IDF baseline is refused for a loaded run, and one made for a run
    for the baseline's object; an encoder object's records are named after its run, not ``checkpoints``."""
    import globetrotter
    from globetrotter.evaluation.tasks import sentence as sentence_task
    from globetrotter.evaluation.tasks.choice import read_choice
    from globetrotter.evaluation.tfidf import TfidfEncoder
    from globetrotter.errors import UserError

    out = tmp_path / "out"
    assert run(["select", "--model", "tfidf", "--val", str(tiny_world / "val"), "--out", str(out),
                "--retrieval", "cosine"]) == 0
    assert run(["select", "--model", str(tiny_run), "--name", "run", "--out", str(out), "--maxsim", "0",
                "--heads", "text", "--retrieval", "cosine"]) == 0
    for_tfidf, for_run = (read_choice(out / f"select-{name}.json") for name in ("tfidf", "run"))
    tried = json.loads((out / "select-tfidf.json").read_text(encoding="utf-8"))["config"]
    assert (tried["heads"], tried["maxsim"]) == (["text"], [0.0])  # what was tried, not the defaults asked for
    encoder = globetrotter.load(tiny_run)
    split = tiny_world / "test"
    for model, choice in ((encoder, for_tfidf), (TfidfEncoder(), for_run)):
        with pytest.raises(UserError, match="chose a ranking for"):
            sentence_task.evaluate(model, split, n_groups=12, choice=choice)
    result = sentence_task.evaluate(encoder, split, n_groups=12, choice=for_run)
    assert result.model["name"] == f"{tiny_run.name}-{encoder.checkpoint.name}" != "checkpoints"


def test_select_breaks_ties_to_the_simpler_head_whatever_the_order_given():
    from globetrotter.evaluation.tasks.select import candidates

    for heads in (["text", "cross"], ["cross", "text"], ["cross", "text", "cross"]):
        assert [r.label for r in candidates(heads, [0.0], [False])] == ["cosine", "cosine (cross head)"], heads


def test_a_record_of_the_wrong_form_is_a_one_line_error(tiny_run, tiny_world, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "globetrotter-eval")])  # the installed console script
    out = tmp_path / "out"
    assert run(["select", "--model", str(tiny_run), "--name", "run", "--out", str(out), "--maxsim", "0",
                "--heads", "text", "--retrieval", "cosine"]) == 0
    # the next step names the console script (an install has no eval.py), not `python eval.py sentence`
    applied = [line for line in capsys.readouterr().out.splitlines() if line.startswith("apply it to test: ")]
    assert len(applied) == 1 and re.match(r"apply it to test: \S*globetrotter-eval sentence --model ", applied[0])
    good = json.loads((out / "select-run.json").read_text(encoding="utf-8"))
    bad_csls = json.loads(json.dumps(good))
    bad_csls["details"]["chosen"]["csls"] = "no"
    bad_reference = json.loads(json.dumps(good))
    bad_reference["details"]["reference"] = "train"
    test = ["sentence", "--model", str(tiny_run), "--split", str(tiny_world / "test"), "--out", str(out),
            "--n-groups", "12"]
    for i, (data, message) in enumerate((([], "not a record of `globetrotter-eval select`"), (None, "not a record"),
                                         (bad_csls, "ranking csls 'no' is str, expected bool"),
                                         (bad_reference, "not a record"))):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        capsys.readouterr()
        assert run(test + ["--ranking", str(path)]) == 2, data
        err = [line for line in capsys.readouterr().err.splitlines() if "no best checkpoint" not in line]
        assert len(err) == 1 and message in err[0], err
    (tmp_path / "a-file").write_text("x")
    for extra, message in ((["--seed", "-1"], "expected an integer >= 0"),
                           (["--out", str(tmp_path / "a-file")], "cannot create the output folder (a file of that name exists)")):
        assert run(test + extra) == 2
        assert message in capsys.readouterr().err


def test_the_reference_is_never_the_evaluated_split_nor_a_missing_one(tiny_run, tiny_world, tmp_path, capsys):
    """The statistics never come from the evaluated sentences unless --transductive says so, and an explicit
    --reference is checked even for a ranking that reads no statistics; a choice reads nothing of a test split (by
    its manifest, whatever its folder is called); BackRetrieval refuses a parallel split."""
    out = tmp_path / "out"
    split = tiny_world / "test"
    renamed, parallel = tmp_path / "renamed", tmp_path / "parallel"
    for copy, role in ((renamed, "test"), (parallel, "val")):
        shutil.copytree(split, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        (copy / "manifest.json").write_text(json.dumps({**manifest, "split": role}))
    sentence = ["sentence", "--model", str(tiny_run), "--split", str(split), "--out", str(out), "--n-groups", "12"]
    select = ["select", "--model", str(tiny_run), "--out", str(out), "--maxsim", "0", "--heads", "text",
              "--csls-k", "3"]
    for argv, message in ((sentence + ["--retrieval", "csls", "--csls-k", "3", "--reference", str(split)],
                           "is the evaluated split"),
                          (sentence + ["--reference", str(tiny_world / "nope")], "nope: no split here"),
                          (select + ["--reference", str(tiny_world / "val")], "is the evaluated split"),
                          (select + ["--val", str(split)], r"--val \S+test: a test split; .*: name a val split "
                                                           r"\(e.g. the val split beside it\)$"),
                          (select + ["--reference", str(split)], r"--reference \S+test: a test split; .*: name "
                                                                 r"another split \(e.g. the train split\)$"),
                          (select + ["--reference", str(renamed)], r"--reference \S+renamed: a test split"),
                          (select + ["--val", str(parallel)], "captioned in more than one language"),
                          # sentence took a copy of test, or a split showing its images, as its statistics
                          (sentence + ["--reference", str(renamed)], r"--reference \S+renamed: a test split"),
                          (sentence + ["--reference", str(parallel)], r"--reference \S+parallel: shows 12 images of "
                                                                      r"the evaluated split \S+test \(e.g. 'img")):
        assert run(argv) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if "no best checkpoint" not in line]
        assert len(err) == 1 and re.search(message, err[0]), err



def test_a_ranking_without_statistics_reads_no_default_reference(tiny_run, tiny_world, tmp_path, capsys):
    """The cosine of a trained model takes no statistics, so the train split beside --split is not read: one that shows
    the evaluated images (here a copy of test) was refused, naming a --reference never given. A ranking that reads it
    (CSLS) is refused still, naming the default and the flag that replaces it."""
    data = tmp_path / "data"
    shutil.copytree(tiny_world / "test", data / "test")
    shutil.copytree(tiny_world / "test", data / "train")
    manifest = json.loads((data / "train" / "manifest.json").read_text())
    (data / "train" / "manifest.json").write_text(json.dumps({**manifest, "split": "train"}))
    sentence = ["sentence", "--model", str(tiny_run), "--split", str(data / "test"), "--n-groups", "12", "--out",
                str(tmp_path / "out"), "--name", "tiny"]
    assert run(sentence) == 0
    assert record(tmp_path / "out", "sentence", "tiny")["config"]["reference"] is None
    capsys.readouterr()
    assert run(sentence + ["--retrieval", "csls", "--csls-k", "3"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and re.search(r"\S+train \(the default reference split\): shows 12 images of the evaluated "
                                       r"split .*with --reference SPLIT", err[0]), err


def test_sentence_reads_the_evaluated_split_once(tiny_run, tiny_world, tmp_path, monkeypatch):
    """The evaluated split was read twice, for its sample and again to check that the reference split shows none of
    its images; the check now takes the image ids the sample's reading found. The train split (the reference) was read
    twice too with statistics, for the check and again for its captions: one pass gives both now."""
    from collections import Counter

    from data_prep import shards
    from globetrotter.evaluation import read_reference

    reads, real = Counter(), shards.iter_raw

    def counting(split_dir, *args, **kwargs):
        reads[Path(split_dir).name] += 1
        return real(split_dir, *args, **kwargs)

    monkeypatch.setattr(shards, "iter_raw", counting)
    base = ["sentence", "--model", str(tiny_run), "--split", str(tiny_world / "test"), "--n-groups", "12"]
    assert run(base + ["--out", str(tmp_path / "cosine")]) == 0
    assert reads == Counter({"test": 1})  # the cosine takes no statistics: no reference read
    reads.clear()
    assert run(base + ["--retrieval", "csls", "--csls-k", "3", "--out", str(tmp_path / "csls")]) == 0
    assert reads == Counter({"test": 1, "train": 1})
    # select too read its reference twice, to check it and again for its captions (the record's pool is the same),
    # and its val split's captions twice, for the images the reference must not show and again for the val sample
    # (the pictures are read in a pass of their own, iter_split)
    reads.clear()
    assert run(["select", "--model", str(tiny_run), "--csls-k", "3", "--maxsim", "0,1", "--heads", "text",
                "--name", "tiny", "--out", str(tmp_path / "select")]) == 0
    assert reads["train"] == 1 and reads["val"] == 1
    chosen = record(tmp_path / "select", "select", "tiny")
    assert chosen["details"]["reference"] == read_reference(tiny_world / "train", chosen["languages"]).record


def test_sentence_translation_score_for_the_trainer(world):
    res = sentence_translation_score(FakeEncoder(), world / "test", n_groups=20, seed=1)
    assert res["score"] == 1.0 and 0 < res["chance"] < 0.1 and res["n_groups"] == 20


def test_word_command_with_the_lexicon(world, fake, tmp_path):
    out = tmp_path / "out"
    assert run(["word", "--model", "full", "--name", "full", "--dictionary", str(world / "dictionary"),
                "--procrustes", "none,multi", "--out", str(out)]) == 0
    metrics = record(out, "word")["metrics"]
    for tag in ("nn/none", "csls/none", "nn/multi"):
        assert metrics[tag]["precision@1"] == 1.0 and metrics[tag]["recall@10"] == 1.0
    assert metrics["nn/none"]["precision@1_no_identical"] == 1.0
    details = record(out, "word")["details"]
    assert details["nn/none"]["pairs"]["en-de"]["all"]["n_pairs"] == 11
    assert details["nn/none"]["pairs"]["en-de"]["no_identical"]["n_pairs"] == 10  # ring = ring
    plots = [Path(p).name for p in record(out, "word")["plots"]]  # the multi map serves nn and csls: drawn once
    assert plots == ["word-full-recall10.png", "word-full-procrustes-multi.png"]


def test_word_command_with_tfidf_ground_truth(world, fake, tmp_path):
    out = tmp_path / "out"
    assert run(["word", "--model", "full", "--name", "full", "--split", str(world / "test"), "--method", "nn",
                "--embeddings", "contextual", "--out", str(out)]) == 0
    rec = record(out, "word")
    assert rec["details"]["ground_truth"]["source"] == "tfidf"
    assert rec["metrics"]["nn/none"]["recall@10"] > 0.5


def test_build_dictionary_finds_the_lexicon(world, fake, tmp_path):
    dict_out = tmp_path / "dict"
    assert run(["build-dictionary", "--split", str(world / "test"), "--model", "full",
                "--dictionary-out", str(dict_out)]) == 0
    pairs = {tuple(line.split()) for line in (dict_out / "en-de.txt").read_text(encoding="utf-8").splitlines()}
    truth = set(zip(COLOURS["en"], COLOURS["de"])) | set(zip(SHAPES["en"], SHAPES["de"]))
    assert truth <= pairs
    assert (dict_out / "de-en.txt").is_file() and (dict_out / "summary.json").is_file()
    # without a model: TF-IDF over the parallel groups, words that go together in translations
    by_words = tmp_path / "by-words"
    assert run(["build-dictionary", "--split", str(world / "test"), "--words", "--dictionary-out", str(by_words)]) == 0
    pairs = {tuple(line.split()) for line in (by_words / "en-de.txt").read_text(encoding="utf-8").splitlines()}
    assert truth <= pairs and ("red", "rot") in pairs and ("red", "blau") not in pairs


def test_build_dictionary_refuses_a_tokenizer_file_that_is_not_one_and_hashes_only_a_serialisable_one(world, tmp_path,
                                                                                                    capsys):
    from globetrotter.evaluation.tasks.word import build_dictionary

    bad = tmp_path / "tokenizer.json"
    bad.write_text("not json", encoding="utf-8")
    assert run(["build-dictionary", "--split", str(world / "test"), "--tokenizer", str(bad),
                "--dictionary-out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{bad}: not a tokenizers JSON file (" in err
    assert not (tmp_path / "none").exists()

    class Unserialisable:
        """A tokenizer object without ``to_str`` (not a ``tokenizers.Tokenizer``): it tokenizes, it has no JSON."""

        def __init__(self, tok) -> None:
            self._tok = tok

        def __getattr__(self, name: str):
            if name == "to_str":
                raise AttributeError(name)
            return getattr(self._tok, name)

    real = FakeEncoder().tokenizer
    built = {}
    for label, tok in (("real", real), ("wrapped", Unserialisable(real))):
        out = tmp_path / label
        summary = build_dictionary(world / "test", out, tokenizer=tok, languages=["en", "de"]).summary
        built[label] = (summary["tokenizer_sha256"], (out / "en-de.txt").read_text(encoding="utf-8"))
    assert built["real"][0] == hashlib.sha256(real.to_str().encode("utf-8")).hexdigest()
    assert built["wrapped"][0] is None and built["wrapped"][1] == built["real"][1]  # the same build, no hash


def test_build_dictionary_replaces_its_earlier_build_and_never_a_hand_made_lexicon(world, fake, tmp_path, capsys):
    dict_out = tmp_path / "dict"
    assert run(["build-dictionary", "--split", str(world / "test"), "--words", "--dictionary-out", str(dict_out)]) == 0
    assert len(list(dict_out.glob("*-*.txt"))) == 6
    capsys.readouterr()
    assert run(["build-dictionary", "--split", str(world / "test"), "--words", "--languages", "en,de", "--top-k", "1",
                "--dictionary-out", str(dict_out)]) == 0
    assert sorted(p.name for p in dict_out.glob("*-*.txt")) == ["de-en.txt", "en-de.txt"]  # not 2 builds mixed
    assert json.loads((dict_out / "summary.json").read_text(encoding="utf-8"))["languages"] == ["en", "de"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "removed 4 dictionaries of the earlier build" in err[0] and "fr-en" in err[0]
    # a lexicon no build wrote (the synthetic world's ground truth) is refused before any work, left as it was
    lexicon = tmp_path / "lexicon"
    shutil.copytree(world / "dictionary", lexicon)
    before = {p.name: p.read_bytes() for p in lexicon.iterdir()}
    assert run(["build-dictionary", "--split", str(world / "test"), "--words", "--dictionary-out", str(lexicon)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(lexicon) in err and "no earlier build-dictionary wrote" in err
    assert {p.name: p.read_bytes() for p in lexicon.iterdir()} == before


def test_build_dictionary_by_words_leaves_out_languages_written_without_spaces(tmp_path, capsys):
    zh = {"colour": ["红色", "蓝色", "绿色", "黄色", "黑色", "白色"], "shape": ["圆形", "方形", "星形", "心形", "环形"]}
    split = tmp_path / "test"
    with ShardWriter(split, split="test", source="tiny", image_format="png", maxcount=40) as w:
        for c in range(6):
            for s in range(5):
                image = Image.new("RGB", (8, 8), (c, s, 0))
                for lang in ("en", "de"):
                    w.write(f"s{c}{s}{lang}", image, caption(lang, c, s), lang, image_id=f"img{c}{s}", group=f"img{c}{s}")
                w.write(f"s{c}{s}zh", image, f"一个{zh['colour'][c]}的{zh['shape'][s]}", "zh", image_id=f"img{c}{s}",
                        group=f"img{c}{s}")
    out = tmp_path / "dict"
    assert run(["build-dictionary", "--split", str(split), "--words", "--dictionary-out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*-*.txt")) == ["de-en.txt", "en-de.txt"]  # no "一个红色的圆形 rot"
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["languages"] == ["de", "en"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "left out zh" in err[0] and "without spaces" in err[0]
    assert run(["build-dictionary", "--split", str(split), "--words", "--languages", "en,zh",
                "--dictionary-out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "written with spaces" in err and not (tmp_path / "none").exists()


def test_retrieval_command(world, fake, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["retrieval", "--model", "full", "--name", "full", "--split", str(world / "test"), "--out", str(out)]
    assert run(argv) == 0
    rec = record(out, "retrieval")
    for lang in LANGS:
        assert rec["metrics"]["per_language"][lang]["image_retrieval_recall@1"] == 1.0
        assert rec["metrics"]["per_language"][lang]["text_retrieval_recall@1"] == 1.0
    assert rec["details"]["n_images"] == 30 and rec["details"]["n_captions"] == 90
    assert "replaces an earlier record" not in capsys.readouterr().out
    assert run(argv + ["--ks", "1"]) == 0  # the same model's record again: said, and both summaries kept
    assert "it replaces an earlier record of this model" in capsys.readouterr().out
    assert len((out / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 2
    other = ["retrieval", "--model", "textonly", "--name", "full", "--split", str(world / "test"), "--out", str(out)]
    assert run(other) == 0  # another model under the same name: the one replaced is named
    assert f"it replaces an earlier record of another model, {Path('full').resolve()}, with this name" in \
        capsys.readouterr().out
    (out / "retrieval-full.json").write_text("{cut short", encoding="utf-8")  # a record that no longer reads
    assert run(argv) == 0
    said = capsys.readouterr().out
    assert "it replaces an earlier record of an unknown model (the file does not read as a record)" in said, said
    assert record(out, "retrieval")["metrics"]["per_language"]["en"]["image_retrieval_recall@1"] == 1.0


def test_the_metrics_warnings_are_one_line_on_the_command_line(world, fake, tmp_path, capsys):
    """A K not below the gallery (backretrieval's warning, Recall@K is 1 for any model) was Python's two-line
    warning with a source line of the package; eval.py prints it as one ``warning:`` line, as its own notices."""
    argv = ["retrieval", "--model", "full", "--split", str(world / "test"), "--ks", "1,500", "--out", str(tmp_path)]
    assert run(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("warning: ") and "500" in err[0], err


def test_cluster_command_full_vs_text_only(world, fake, tmp_path):
    out = tmp_path / "out"
    for name in ("full", "textonly"):
        assert run(["cluster", "--model", name, "--name", name, "--split", str(world / "test"), "--k", "3",
                    "--out", str(out)]) == 0
    full, text = record(out, "cluster")["metrics"], record(out, "cluster", "textonly")["metrics"]
    assert full["meaning_purity"] == 1.0 and full["language_purity"] < 0.6
    assert text["language_purity"] == 1.0 and text["meaning_purity"] < 0.5


def test_cluster_says_when_the_split_has_fewer_groups_than_asked(world, fake, tmp_path, capsys):
    """As sentence does: --n-groups 5000 clustered every group of the split with no word of it."""
    out = tmp_path / "out"
    assert run(["cluster", "--model", "full", "--name", "full", "--split", str(world / "test"), "--k", "3",
                "--n-groups", "5000", "--out", str(out)]) == 0
    groups = record(out, "cluster")["details"]["n_groups"]
    assert f"note: --n-groups 5000, but {world / 'test'} has {groups} groups in every one of" in capsys.readouterr().out
    assert run(["cluster", "--model", "full", "--name", "full", "--split", str(world / "test"), "--k", "3",
                "--n-groups", str(groups), "--out", str(out)]) == 0  # exactly the groups there are: nothing to say
    assert "note:" not in capsys.readouterr().out


def test_translate_sentences_from_split_and_text_file(world, fake, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["translate", "--model", "full", "a red circle", "a blue ring", "--to", "de",
            "--corpus", str(world / "test"), "--out", str(out), "--k", "2"]
    assert run(argv) == 0
    first = capsys.readouterr()
    lines = first.out.splitlines()
    assert lines[0] == "a red circle" and lines[1].split(maxsplit=1)[1] == "ein kreis rot"
    assert lines[3] == "a blue ring" and lines[4].endswith("ein ring blau")
    assert "built IndexFlatIP index of 30 de entries" in first.err
    assert run(argv) == 0
    assert "built" not in capsys.readouterr().err  # reloaded, not rebuilt
    corpus = tmp_path / "fr.txt"
    corpus.write_text("un cercle rouge\nun carré noir\n", encoding="utf-8")
    queries = tmp_path / "queries.txt"
    queries.write_text("a black square\n", encoding="utf-8")
    assert run(["translate", "--model", "full", "--input", str(queries), "--to", "fr", "--corpus", str(corpus),
                "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["results"][0]["text"] == "un carré noir"


def test_translate_refuses_a_missing_corpus_and_an_empty_query_file(world, fake, tmp_path, capsys):
    out = tmp_path / "out"
    missing = tmp_path / "missing.txt"
    assert run(["translate", "--model", "full", "a red circle", "--to", "de", "--corpus", str(missing),
                "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{missing}: corpus not found (a split folder or a text file" in err
    empty = tmp_path / "queries.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    assert run(["translate", "--model", "full", "--input", str(empty), "--to", "de", "--corpus", str(world / "test"),
                "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{empty}: no query in it (--input, one query per line)" in err
    assert run(["translate", "--model", "full", "--to", "de", "--corpus", str(world / "test"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "translate: give sentences as arguments or --input FILE" in err
    assert not out.exists()  # refused before any index was built


def test_translate_word_notes_absent_words_only_for_an_encoder_with_a_tokenizer():
    from types import SimpleNamespace

    from globetrotter.evaluation.tasks.translate import _note_odd_words
    from globetrotter.tokenizer import train_tokenizer

    bpe = train_tokenizer(["a red square", "a blue circle"] * 5, vocab_size=100, min_frequency=1)
    for tokenizer, expected in ((None, 1), (bpe, 2)):
        said: list[str] = []
        _note_odd_words(SimpleNamespace(tokenizer=tokenizer), ["red square", "qzxqzx"], said.append)
        assert len(said) == expected and "['red square'] is several words" in said[0]
        assert expected == 1 or "['qzxqzx'] is not in the model's vocabulary" in said[1]


def test_translate_prints_negative_scores_in_the_column_of_the_others(capsys):
    """A CSLS or cosine score below 0 took one more character, so its text stood one column right of the others'."""
    from globetrotter.evaluation.cli.translate import print_results

    args = argparse.Namespace(json=False, to="de")
    print_results(args, ["a red circle", "a ring"], [[("ein kreis rot", 0.912), ("ein ring", -0.05)],
                                                      [("ein ring blau", -1.5)]])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["a red circle", "   0.912  ein kreis rot", "  -0.050  ein ring", "a ring", "  -1.500  ein ring blau"]
    print_results(args, ["a red circle"], [[("ein kreis rot", 0.912), ("ein ring", 0.05)]])  # none below 0: as before
    assert capsys.readouterr().out.splitlines()[1:] == ["  0.912  ein kreis rot", "  0.050  ein ring"]


def test_translate_ranks_by_a_choice_with_the_statistics_of_its_whole_pool(world, fake):
    """Re-scored under a chosen ranking, each candidate gets the score `eval.py sentence` gives the pair: MaxSim and
    CSLS with the statistics of the reference captions the choice was made with, in all of its languages (the idf
    counts every language), not only the two translated."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation import Ranking, ScoringContext, read_reference
    from globetrotter.evaluation.tasks.choice import Choice
    from globetrotter.evaluation.tasks.translate import translate_sentences

    encoder, ranking = fake["textonly"], Ranking("text", 1.5, True, 4)
    choice = Choice(ranking, str(world / "train"), None, languages=("de", "en", "fr"))
    corpus = [m["caption"] for m in read_captions(world / "test") if m["lang"] == "de"]
    queries = ["a red circle", "a blue star", "a green ring"]
    got = translate_sentences(encoder, queries, to="de", corpus=world / "test", source="en", k=3, ranking=choice,
                              rerank=10, log=lambda _: None)
    cos = encoder.encode_text(corpus) @ encoder.encode_text(queries).T  # [corpus, queries]
    for pool_langs, same in ((["de", "en", "fr"], True), (["de", "en"], False)):
        pool = read_reference(world / "train", pool_langs)
        for q, query in enumerate(queries):
            scores = ScoringContext(encoder, [query] + corpus, ["en"] + ["de"] * len(corpus), pool).scorer(ranking)(
                np.array([0]))[0, 1:]
            shortlist = np.argsort(-cos[:, q], kind="stable")[:10]  # the 10 nearest by cosine, re-scored
            best = shortlist[np.argsort(-scores[shortlist], kind="stable")[:3]]
            expected = [(corpus[i], float(scores[i])) for i in best]
            matches = [t for t, _ in got[q]] == [t for t, _ in expected] and np.allclose(
                [s for _, s in got[q]], [s for _, s in expected], atol=1e-5)
            assert matches == same, (pool_langs, query, got[q], expected)


def test_translate_refuses_a_rerank_that_a_chosen_cosine_would_ignore(world, fake, tmp_path, capsys):
    """--rerank K sets how many sentences a ranking with MaxSim or CSLS re-scores; a record that chose the cosine
    re-scores none, so the K was accepted and had no effect: refused now, one line, exit 2, as --rerank without
    --ranking is. A choice with CSLS takes it."""
    argv = ["translate", "--model", "full", "a red circle", "--to", "de", "--from", "en", "--corpus",
            str(world / "test"), "--out", str(tmp_path / "out")]
    records = {}
    for name, chosen in (("cosine", {"head": "cross", "maxsim": 0.0, "csls": False, "csls_k": 3}),
                         ("csls", {"head": "text", "maxsim": 0.0, "csls": True, "csls_k": 3})):
        records[name] = tmp_path / f"select-{name}.json"
        records[name].write_text(json.dumps({"details": {"chosen": chosen},
                                             "config": {"reference": str(world / "train"), "reference_size": None}}))
    assert run(argv + ["--ranking", str(records["cosine"])]) == 0  # the record itself is fine
    capsys.readouterr()
    assert run(argv + ["--ranking", str(records["cosine"]), "--rerank", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: --rerank 3 re-scores under a ranking with MaxSim or CSLS; --ranking {records['cosine']} "
                   "chose cosine (cross head), whose scores are the index's own: drop --rerank"), err
    assert run(argv + ["--ranking", str(records["csls"]), "--rerank", "3"]) == 0


def test_translate_applies_the_ranking_select_chose(tiny_run, tiny_world, tmp_path, capsys):
    from data_prep.shards import read_captions
    from globetrotter.evaluation import ScoringContext, read_reference
    from globetrotter.evaluation.tasks.common import resolve_model
    from globetrotter.evaluation.tasks.choice import read_choice

    out = tmp_path / "out"
    assert run(["select", "--model", str(tiny_run), "--name", "run", "--out", str(out), "--maxsim", "1",
                "--heads", "cross", "--retrieval", "csls", "--csls-k", "3"]) == 0
    path = out / "select-run.json"
    choice = read_choice(path)
    assert choice.ranking.label == "maxsim 1 + csls (cross head)"
    test = [m for m in read_captions(tiny_world / "test")]
    query = next(m["caption"] for m in test if m["lang"] == "en")
    corpus = list(dict.fromkeys(m["caption"] for m in test if m["lang"] == "ru"))
    argv = ["translate", "--model", str(tiny_run), query, "--to", "ru", "--corpus", str(tiny_world / "test"),
            "--out", str(out), "--json", "--k", str(len(corpus)), "--ranking", str(path)]
    capsys.readouterr()
    assert run(argv + ["--from", "en"]) == 0
    captured = capsys.readouterr()
    assert "index/sentences-cross-test-" in captured.err  # an index of the cross head's vectors
    got = json.loads(captured.out.splitlines()[-1])["results"]
    encoder, _ = resolve_model(str(tiny_run))
    pool = read_reference(tiny_world / "train", choice.languages)
    scores = ScoringContext(encoder, [query] + corpus, ["en"] + ["ru"] * len(corpus), pool).scorer(choice.ranking)(
        np.array([0]))[0, 1:]
    order = np.argsort(-scores, kind="stable")
    assert sorted(r["text"] for r in got) == sorted(corpus)
    assert [r["score"] for r in got] == pytest.approx([round(float(scores[i]), 4) for i in order], abs=2e-4)
    capsys.readouterr()
    # bad input: one line each, exit 2, before the model is loaded
    for extra, message in (([], "takes its statistics per language; give the queries' language with --from"),
                           (["--from", "en", "--to", "de"], None),
                           (["--from", "xx"], "was chosen for el,en,ja,ru, not xx")):
        args = argv + extra
        if message is None:  # a language the corpus lacks
            assert run(args) == 2
            assert "no caption in language 'de'" in capsys.readouterr().err
            continue
        assert run(args) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    other = tmp_path / "other.json"
    data = json.loads(path.read_text())
    data["model"]["path"] = str(tmp_path / "another-run")
    data["model"]["checkpoint"] = str(tmp_path / "another-run" / "checkpoints" / "best")  # another model's weights
    other.write_text(json.dumps(data))
    assert run(argv + ["--from", "en", "--ranking", str(other)]) == 2
    assert "chose a ranking for" in capsys.readouterr().err
    # a language the model never read: named with the model's own languages (its tokenizer's provenance record),
    # even where no corpus would catch it (translate-word's whole vocabulary, a text-file corpus)
    languages = sorted(json.loads((tiny_world / "train" / "manifest.json").read_text())["languages"])
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(corpus) + "\n")
    for args in (["translate-word", "--model", str(tiny_run), "red", "--to", "xx"],
                 ["translate-word", "--model", str(tiny_run), "red", "--to", "ru", "--from", "xx"],
                 ["translate", "--model", str(tiny_run), query, "--to", "xx", "--corpus", str(corpus_file)]):
        assert run(args + ["--out", str(out)]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the note that the run has no best checkpoint
        flag = "--from" if "--from" in args else "--to"
        assert err == f"error: {flag} xx: not a language of the model's training captions ({', '.join(languages)})"


def test_translate_word(world, fake, tmp_path, capsys):
    out = tmp_path / "out"
    for method in ("nn", "csls"):
        assert run(["translate-word", "--model", "full", "red", "star", "--from", "en", "--to", "fr", "--corpus",
                    str(world / "test"), "--out", str(out), "--k", "3", "--method", method]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[1].split()[1] == "rouge" and lines[5].split()[1] == "étoile"


def test_translate_word_searches_the_training_captions_tokens_of_the_target_language_by_default(tiny_run, tiny_world,
                                                                                                 tmp_path, capsys):
    """Without --corpus the vocabulary was every token of the shared BPE, so a word's nearest "translation" was itself
    (cosine 1) or a word of a third language. It is now the --to tokens of the captions the tokenizer was trained on
    (its provenance record), as if that split were given; where they are not on this machine, the whole vocabulary,
    said so."""
    import shutil

    def words(model: Path, *extra: str) -> tuple[list[str], str]:
        argv = ["translate-word", "--model", str(model), "red", "--from", "en", "--to", "ru", "--k", "40", "--json",
                "--out", str(tmp_path / "out"), *extra]
        assert run(argv) == 0
        captured = capsys.readouterr()
        return [h["text"] for h in json.loads(captured.out.splitlines()[-1])["results"]], captured.err

    default, note = words(tiny_run)
    assert f"the ru and en tokens of {tiny_world / 'train'}, the model's training captions" in note
    assert default == words(tiny_run, "--corpus", str(tiny_world / "train"))[0]
    run_copy = tmp_path / "moved"
    shutil.copytree(tiny_run, run_copy, ignore=shutil.ignore_patterns("tensorboard"))
    for record in run_copy.rglob("tokenizer.provenance.json"):
        data = json.loads(record.read_text(encoding="utf-8"))
        data["splits"][0]["path"] = str(tmp_path / "elsewhere" / "train")
        record.write_text(json.dumps(data), encoding="utf-8")
    whole, note = words(run_copy)
    assert "every token of the shared BPE, whatever its language" in note
    assert all(not w.isascii() for w in default)  # ru's own tokens: Cyrillic
    assert any(w.isascii() for w in whole)  # the query's own fragments, and other languages'


@pytest.mark.parametrize("command", [
    ["sentence", "--split", "{test}"], ["retrieval", "--split", "{test}"], ["cluster", "--split", "{test}", "--k", "3"],
    ["word", "--split", "{test}", "--dictionary", "{dictionary}"],
    ["translate", "a red circle", "--to", "de", "--corpus", "{test}"],
    ["translate-word", "red", "--from", "en", "--to", "fr", "--corpus", "{test}"],
])
def test_every_command_loads_the_model_on_the_device_asked_for(world, fake, tmp_path, command, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # --device is checked against the machine's GPUs
    argv = [a.format(test=world / "test", dictionary=world / "dictionary") for a in command]
    assert run(argv + ["--model", "full", "--out", str(tmp_path), "--device", "cuda:3"]) == 0
    assert DEVICES == ["cuda:3"]
    DEVICES.clear()
    assert run(argv + ["--model", "full", "--out", str(tmp_path)]) == 0
    assert DEVICES == ["cpu"]


def test_help_explains_metrics_and_errors_are_one_line(world, fake, tmp_path, capsys):
    for command in ("sentence", "word", "build-dictionary", "retrieval", "cluster"):
        assert run([command, "--help"]) == 0
        assert "METRIC" in capsys.readouterr().out or command == "build-dictionary"
    assert run(["sentence", "--model", "full", "--split", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "nope" in err and len(err.splitlines()) == 1
    bad = tmp_path / "dict"
    bad.mkdir()
    (bad / "en-de.txt").write_text("red rot\nlonely\n", encoding="utf-8")
    assert run(["word", "--model", "full", "--dictionary", str(bad), "--out", str(tmp_path)]) == 2
    assert "en-de.txt:2" in capsys.readouterr().err


# ----------------------------------------------------------------------------- real data

def _multi30k_split(flickr8k_dir: Path, out: Path, n_images: int = 150) -> Path:
    """A parallel en/de/fr/cs test split from Multi30K task 1 captions of Flickr8k images."""
    task1 = flickr8k_dir / "multi30k" / "task1"
    names = (task1 / "image_splits" / "train.txt").read_text().split()
    caps = {lang: gzip.open(task1 / "raw" / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
            for lang in ("en", "de", "fr", "cs")}
    images = {p.name.split("_")[0]: p for p in (flickr8k_dir / "images").glob("*.jpg")}
    with ShardWriter(out, split="test", source="multi30k-task1") as w:
        kept = 0
        for line, name in enumerate(names):
            photo = name.split(".")[0]
            if photo not in images:
                continue
            data = images[photo].read_bytes()
            for lang, lines in caps.items():
                w.write(f"{photo}-{lang}", data, lines[line], lang, image_id=photo, group=photo)
            kept += 1
            if kept == n_images:
                break
    return out


class PixelEncoder:
    """Text embedding = a 4x4 thumbnail of the caption's image (looked up); image = its thumbnail."""

    def __init__(self, split: Path) -> None:
        from data_prep.shards import iter_samples

        self.by_caption = {s.caption: self._thumb(s.image) for s in iter_samples(split)}

    @staticmethod
    def _thumb(image: Image.Image) -> np.ndarray:
        v = np.asarray(image.resize((4, 4)), dtype=np.float32).ravel()
        return v - v.mean()

    def encode_text(self, texts, batch_size=256, head="text"):
        return normalize_rows(np.stack([self.by_caption[t] for t in texts]))

    def encode_image(self, images, batch_size=256):
        return normalize_rows(np.stack([self._thumb(im) for im in images]))


@pytest.mark.realdata
def test_real_flickr8k_dictionary_and_retrieval(flickr8k_dir, tmp_path, monkeypatch):
    split = _multi30k_split(flickr8k_dir, tmp_path / "test")
    dict_out = tmp_path / "dict"
    assert run(["build-dictionary", "--split", str(split), "--words", "--dictionary-out", str(dict_out)]) == 0
    en_de = {tuple(line.split()) for line in (dict_out / "en-de.txt").read_text(encoding="utf-8").splitlines()}
    assert {("dog", "hund"), ("man", "mann"), ("woman", "frau")} <= en_de
    en_fr = {tuple(line.split()) for line in (dict_out / "en-fr.txt").read_text(encoding="utf-8").splitlines()}
    assert {("dog", "chien"), ("water", "eau")} <= en_fr
    monkeypatch.setattr(model_specs, "load_model", lambda path, device="cpu": PixelEncoder(split))
    out = tmp_path / "out"
    assert run(["retrieval", "--model", str(split), "--name", "pixels", "--split", str(split), "--out", str(out)]) == 0
    rec = record(out, "retrieval", "pixels")
    assert rec["details"]["n_images"] == 150 and rec["details"]["n_captions"] == 600
    assert rec["metrics"]["mean"]["image_retrieval_recall@1"] == 1.0


@pytest.mark.parametrize("argv", [
    ["sentence", "--model", "full", "--n-groups", "0"],
    ["cluster", "--model", "full", "--k", "0"],
    ["word", "--model", "full", "--top-k", "0"],
    ["word", "--model", "full", "--procrustes-k", "-1"],
    ["retrieval", "--model", "full", "--ks", "1,0"],
    ["translate", "--model", "full", "x", "--to", "de", "--k", "0"],
    ["translate-word", "--model", "full", "x", "--to", "de", "--k", "zero"],
])
def test_counts_below_one_are_usage_errors(world, fake, tmp_path, capsys, argv):
    if argv[0] in ("sentence", "cluster", "word", "retrieval"):
        argv = argv + ["--split", str(world / "test")]
    if argv[0] == "translate":
        argv = argv + ["--corpus", str(world / "test")]
    assert run(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "expected a positive integer" in err.splitlines()[-1]


def test_unknown_languages_and_missing_query_file_are_named(world, fake, tmp_path, capsys):
    assert run(["retrieval", "--model", "full", "--split", str(world / "test"), "--languages", "en,xx",
                "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "'xx'" in err and len(err.splitlines()) == 1
    assert run(["translate-word", "--model", "full", "red", "--from", "xx", "--to", "fr", "--corpus",
                str(world / "test"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "'xx'" in err and "--from" in err and len(err.splitlines()) == 1
    assert run(["translate", "--model", "full", "--input", str(tmp_path / "queries.txt"), "--to", "de",
                "--corpus", str(world / "test"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "queries.txt: query file not found" in err and len(err.splitlines()) == 1
    (tmp_path / "empty.txt").write_text("\n\n")
    assert run(["translate", "--model", "full", "--input", str(tmp_path / "empty.txt"), "--to", "de",
                "--corpus", str(world / "test"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'empty.txt'}: no query in it (--input, one query " \
                                              f"per line)"


@pytest.mark.parametrize("argv, message", [
    # an option the command would ignore, or apply otherwise than asked
    (["build-dictionary", "--split", "{test}", "--words", "--out", "{out}"], "unrecognized arguments: --out"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{test}", "--seed", "3"],
     "unrecognized arguments: --seed 3"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{test}", "--name", "mine"],
     "unrecognized arguments: --name mine"),
    (["translate-word", "--model", "full", "red", "--to", "de", "--batch-size", "8"],
     "unrecognized arguments: --batch-size 8"),
    (["word", "--model", "full", "--split", "{test}", "--batch-size", "8"], "unrecognized arguments: --batch-size 8"),
    (["sentence", "--model", "full", "--split", "{test}", "--csls-k", "5"],
     "error: --csls-k 5 sets CSLS's neighbourhood; give --retrieval csls or drop it"),
    (["select", "--model", "full", "--val", "{train}", "--retrieval", "cosine", "--csls-k", "5"],
     "error: --csls-k 5 sets CSLS's neighbourhood; add csls to --retrieval or drop it"),
    (["select", "--model", "full", "--val", "{train}", "--languages", "en,xx"],
     "error: {train}: no caption in language(s) ['xx'] (has ['de', 'en', 'fr'])"),
    (["select", "--model", "tfidf", "--val", "{train}", "--maxsim", "4"],
     "error: --maxsim 4: the TF-IDF and ridge baselines have one embedding and no token rows, so select tries only "
     "the text head's cosine and CSLS; drop --maxsim"),
    (["select", "--model", "tfidf", "--val", "{train}", "--heads", "cross"], "error: --heads cross: the TF-IDF"),
    (["sentence", "--model", "full", "--split", "{test}", "--retrieval", "csls", "--transductive",
      "--reference-size", "5"],
     "error: --reference-size 5 samples the reference captions; --transductive reads none (its statistics are the "
     "evaluated sentences'): drop one of them"),
    (["sentence", "--model", "full", "--split", "{test}", "--transductive"],
     "error: --transductive takes the ranking's statistics from the evaluated sentences, but the cosine ranking reads "
     "none (CSLS, MaxSim and the TF-IDF baseline's idf do): drop --transductive"),
    (["sentence", "--model", "full", "--split", "{test}", "--reference", "{train}", "--reference-size", "5"],
     "error: --reference-size 5 samples the reference captions of the ranking's statistics; the cosine ranking reads "
     "none (CSLS, MaxSim and the TF-IDF baseline's idf do): drop --reference-size"),
    (["word", "--model", "full", "--split", "{test}", "--dictionary", "{dictionary}", "--top-k", "3", "--idf", "paper",
      "--min-count", "50"],
     "error: --top-k 3, --idf paper, --min-count 50 set the tf-idf ground truth built from --split; --dictionary "
     "{dictionary} replaces it: drop them"),
    (["word", "--model", "full", "--dictionary", "{dictionary}", "--procrustes-k", "3", "--procrustes-iter", "1"],
     "error: --procrustes-k 3, --procrustes-iter 1 set the Procrustes refinement; give --procrustes pairwise or multi, "
     "or drop them"),
    (["word", "--model", "full", "--dictionary", "{dictionary}", "--procrustes", "none", "--procrustes-k", "5"],
     "error: --procrustes-k 5 sets the Procrustes refinement; give --procrustes pairwise or multi, or drop it"),
    (["sentence", "--model", "tfidf", "--split", "{test}", "--head", "cross"],
     "error: --head cross: the TF-IDF and ridge baselines have one embedding, no cross head; drop --head"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{test}", "--corpus-language", "fr"],
     "error: {test}: corpus language 'fr' differs from --to 'de'"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{test}", "--rerank", "3"],
     "error: --rerank 3 re-scores under a chosen ranking; give --ranking RECORD or drop it"),
    # a value of the wrong kind, named
    (["translate", "--model", "full", "", "--to", "de", "--corpus", "{test}"],
     "error: translate: query 1 of 1 is empty or only spaces: no sentence to translate"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{empty}"],
     "error: {empty}: no sentence in it (--corpus, a text file of one sentence per line)"),
    (["translate", "--model", "full", "red", "--to", "de", "--corpus", "{test}", "--index", "{empty}"],
     "argument --index: {empty}: cannot create the output folder (a file of that name exists)"),
    (["build-dictionary", "--split", "{test}", "--words", "--dictionary-out", "{empty}"],
     "argument --dictionary-out: {empty}: cannot create the output folder (a file of that name exists)"),
    (["sentence", "--model", "full", "--split", "{train}"],  # the default reference beside it is itself: not the issue
     "error: {train}: no caption has a 'group'; expected a parallel (test) split"),
    (["select", "--model", "tfidf", "--val", "{train}"],  # no --reference given: its default is named as such
     "error: {train}: the default reference split (the train split beside it) is the evaluated split itself: the "
     "statistics would come from the evaluated sentences; name another split with --reference SPLIT"),
    (["sentence", "--model", "full", "--split", "{test}", "--languages", "en,xx"],
     "error: {test}: no caption in language(s) ['xx'] (has ['de', 'en', 'fr'])"),
    (["cluster", "--model", "full", "--split", "{test}", "--n-groups", "3", "--k", "9"],
     "error: --k 9: k-means needs fewer clusters than the 9 sentences sampled (3 groups x 3 languages; one sentence a "
     "cluster makes every purity 1, as chance): lower --k or sample more groups (--n-groups)"),
    (["cluster", "--model", "full", "--split", "{test}", "--languages", "en,en"],  # was read as one language
     "error: argument --languages: en given twice in 'en,en'; expected each language once"),
    (["cluster", "--model", "full", "--split", "{test}", "--languages", ","],  # was every language of the split
     "error: argument --languages: expected comma-separated language codes, e.g. en,de,fr, got ','"),
    (["select", "--model", "full", "--retrieval", "cosine,cls"],
     "error: argument --retrieval: invalid choice 'cls' (choose from cosine, csls) (in 'cosine,cls')"),
    (["select", "--model", "full", "--maxsim", "0,-1"],
     "error: argument --maxsim: expected a finite number >= 0, got -1.0 (in '0,-1')"),
    (["correspondence", "--model", "full", "--split", "{test}", "--lr", "-1"],
     "error: --lr -1.0: expected a learning rate > 0"),
    (["generate", "--model", "full", "--train", "{train}", "--split", "{test}", "--d-model", "6"],
     "error: --d-model 6: expected a multiple of the decoder's 4 heads"),
    # the library names its arguments to a Python caller (test_eval_tasks), eval.py's flags here
    (["generate", "--model", "full", "--train", "{train}", "--split", "{test}", "--lr", "-1"],
     "error: --lr -1.0: expected a learning rate > 0"),
    (["generate", "--model", "full", "--train", "{train}", "--split", "{test}", "--show", "-1"],
     "error: --show -1: expected a number of examples >= 0"),
    (["generate", "--model", "full", "--train", "{test}", "--split", "{test}"],
     "error: --train {test}: is the evaluated --split itself; the decoder would learn the references (give the train "
     "split)"),
    (["word", "--model", "full"],
     "error: word: give --split (a parallel split, for the tf-idf ground truth) or --dictionary"),
    (["sentence", "--model", "full", "--split", "{test}", "--transductive", "--reference", "{train}"],
     "error: --transductive takes the statistics from the evaluated sentences; it excludes --reference {train}"),
    (["select", "--model", "tfidf", "--val", "{test}"],
     "error: --val {test}: a test split; choices are made on val and read nothing of test, not even its captions' "
     "statistics: name a val split (e.g. the val split beside it)"),
])
def test_ignored_options_and_bad_values_are_refused_before_anything_is_written(world, fake, tmp_path, capsys, argv,
                                                                              message):
    out, empty = tmp_path / "out", tmp_path / "empty.txt"
    empty.write_text("\n")
    paths = {"test": world / "test", "train": world / "train", "out": out, "empty": empty,
             "dictionary": world / "dictionary"}
    argv = [a.format(**paths) for a in argv]
    if argv[0] != "build-dictionary":
        argv += ["--out", str(out)]
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and message.format(**paths) in err.splitlines()[-1], err
    assert len(err.splitlines()) == 1 or "usage:" in err  # argparse's own errors come with the usage
    assert not out.exists()


def test_translate_word_never_offers_a_bare_space():
    from collections import Counter

    from globetrotter.evaluation.word_keys import vocabulary
    from globetrotter.tokenizer import train_tokenizer

    tok = train_tokenizer(["the red car", "a red ball", "a blue car"] * 20, vocab_size=270, min_frequency=1)

    class BpeEncoder:
        tokenizer = tok

        def token_embeddings(self):
            ids = sorted(tok.get_vocab().values())
            return [tok.decode([i]) for i in ids], np.zeros((len(ids), 2), np.float32)

    counts = {"en": Counter({"▁": 3, "▁red": 2, "⟨Ġ⟩": 1})}
    assert vocabulary(BpeEncoder(), "en", counts) == ["▁red"]
    vocab = vocabulary(BpeEncoder(), None, {})
    assert "▁red" in vocab and all(w.replace("▁", " ").strip() for w in vocab)


def test_maxsim_on_a_trained_run_reads_its_token_rows(tiny_run, tiny_world, tmp_path):
    from globetrotter.encoder import load
    from globetrotter.tokenizer import special_ids

    encoder = load(tiny_run)
    table, vocabulary = encoder.token_table()
    specials = set(special_ids(encoder.tokenizer).values())
    assert table.shape == (encoder.tokenizer.get_vocab_size(), encoder.model.text.d_model)
    assert specials and not specials & set(vocabulary.tolist()) and len(vocabulary) == len(table) - len(specials)
    ids = encoder.token_ids(["a red square", ""])
    assert len(ids[0]) >= 3 and not specials & set(ids[0].tolist()) and len(ids[1]) == 0
    out = tmp_path / "out"
    assert run(["sentence", "--model", str(tiny_run), "--name", "late", "--split", str(tiny_world / "test"),
                "--out", str(out), "--n-groups", "12", "--maxsim", "1", "--retrieval", "csls", "--csls-k", "3"]) == 0
    rec = record(out, "sentence", "late")
    scoring = rec["details"]["scoring"]
    assert scoring["maxsim"] == 1.0 and scoring["maxsim_tokens"]["hubness"].startswith("per language")
    # the figure by hand: MaxSim + CSLS with the statistics of the train split beside test
    from data_prep.shards import read_captions
    from globetrotter.evaluation import Ranking, ScoringContext, read_reference
    from globetrotter.evaluation.sentence import parallel_set, sentence_translation

    ps = parallel_set(read_captions(tiny_world / "test"), n_groups=12, seed=0)
    scorer = ScoringContext(encoder, ps.captions, ps.langs, read_reference(tiny_world / "train", ps.languages)
                            ).scorer(Ranking("text", 1.0, True, 3))
    expected = sentence_translation(scorer, ps.langs, ps.groups, tie_seed=0)["accuracy"]
    assert rec["metrics"]["sentence_translation"] == pytest.approx(expected)


def test_a_candidate_val_cannot_tell_from_the_choice_is_named_as_such():
    from globetrotter.evaluation.tasks.choice_margins import margins_to_choice, within_noise

    rng = np.random.default_rng(0)
    chosen = rng.integers(0, 2, 400).astype(float)
    twin = chosen.copy()  # a few queries won and a few more lost: within noise
    twin[rng.choice(np.flatnonzero(chosen == 1), 12, replace=False)] = 0.0
    twin[rng.choice(np.flatnonzero(chosen == 0), 8, replace=False)] = 1.0
    far = np.where(rng.random(400) < 0.5, 0.0, chosen)  # half the hits lost: far below beyond noise
    margins = margins_to_choice([far, chosen, twin], chosen=1)
    assert margins[1] is None and margins[0]["hi"] < 0 and margins[2]["lo"] <= 0 <= margins[2]["hi"]
    assert margins[2]["diff"] == pytest.approx(twin.mean() - chosen.mean())
    rows = [{"label": label, **({"vs_chosen": m} if m else {})} for label, m in zip(("far", "chosen", "twin"), margins)]
    assert within_noise(rows) == ["twin"]


def test_per_query_scores_weigh_each_language_once():
    from globetrotter.evaluation.tasks.select import per_query_scores

    langs = np.array(["fr", "en", "en", "en", "fr"])  # the hits come in sorted language order: en, en, en, fr, fr
    hits = {"val/bkr@1": np.array([1.0, 0.0, 0.0, 1.0, 1.0]), "val/bkr@5": np.array([1.0, 1.0, 0.0, 1.0, 0.0])}
    scores = per_query_scores(hits, langs)
    en, fr = np.mean([1 / 3, 2 / 3]), np.mean([1.0, 0.5])  # per language, the mean over K
    assert scores.mean() == pytest.approx((en + fr) / 2)
    # query by query (the bootstrap of `select` resamples these): mean over K, times N / (L * its language's queries)
    # -- the 3 en queries come first, 5 / 6 each, then the 2 fr ones, 5 / 4 each
    np.testing.assert_allclose(scores, [1.0 * 5 / 6, 0.5 * 5 / 6, 0.0, 1.0 * 5 / 4, 0.5 * 5 / 4])
    # a score above 1 (a language of fewer queries) is no rank: select's intervals took it for one and stopped after
    # the whole grid was scored (val splits with unequal captions per language, e.g. en,zh)
    from globetrotter.evaluation.tasks.choice_margins import choice_margins, margins_to_choice

    other = per_query_scores({"val/bkr@1": np.array([0.0, 0.0, 1.0, 1.0, 0.0])}, langs)
    margins = choice_margins([other, scores], chosen=1)
    assert margins["mean"]["value"] == pytest.approx((en + fr) / 2) and margins["mean"]["hi"] > 1 / 2
    assert margins_to_choice([other, scores], chosen=1)[0]["diff"] == pytest.approx(other.mean() - scores.mean())


def test_select_runs_the_image_model_of_g_on_the_device_asked_for(world, fake, tmp_path, monkeypatch):
    import torch

    from globetrotter.evaluation.tasks import select as select_task

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    asked = {}

    class Stop(Exception):
        pass

    def backretrieval_set(*args, device="cpu", **kwargs):
        asked["device"] = device
        raise Stop

    monkeypatch.setattr(select_task, "BackRetrievalSet", backretrieval_set)
    with pytest.raises(Stop):
        cli.main(["select", "--model", "full", "--val", str(world / "train"), "--reference", str(tmp_path / "pool"),
                  "--out", str(tmp_path), "--device", "cuda:1"])
    assert asked == {"device": "cuda:1"} and DEVICES == ["cuda:1"]


@pytest.mark.parametrize("device, gpus, message", [
    ("gpu", 0, "expected a torch device (cpu, cuda, cuda:1, mps, ...), got 'gpu'"),
    ("cuda", 0, "cuda: torch sees no CUDA device on this machine (use cpu)"),
    ("cuda:2", 2, "cuda:2: this machine has 2 CUDA device(s), cuda:0 to cuda:1"),
])
def test_a_device_the_machine_lacks_is_a_usage_error_before_any_work(world, fake, tmp_path, capsys, monkeypatch,
                                                                     device, gpus, message):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert run(["sentence", "--model", "full", "--split", str(world / "test"), "--out", str(tmp_path),
                "--device", device]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"argument --device: {message}") and DEVICES == []


def test_the_commands_the_trainer_prints_choose_on_val_then_score_test(tiny_run, tiny_world, tmp_path, capsys,
                                                                        monkeypatch):
    import shlex

    from globetrotter.training.report import print_summary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])  # `python train.py`: the commands run eval.py
    print_summary({"run_dir": str(tiny_run), "metrics": {}}, tiny_world / "test")
    lines = capsys.readouterr().out.splitlines()
    select_line, sentence_line = lines[-2], lines[-1]
    assert select_line.startswith("choose its ranking on val") and sentence_line.startswith("then score the test split")
    select_argv = shlex.split(select_line.split(": ", 1)[1])
    sentence_argv = shlex.split(sentence_line.split(": ", 1)[1])
    assert select_argv[1] == "eval.py" and sentence_argv[1] == "eval.py"
    # as printed (the tiny world needs a small CSLS k and grid), run in order: sentence reads what select wrote
    assert run(select_argv[2:] + ["--csls-k", "3", "--maxsim", "0,1", "--heads", "text"]) == 0
    assert run(sentence_argv[2:] + ["--csls-k", "3", "--n-groups", "12"]) == 0
    chosen = json.loads(Path(sentence_argv[sentence_argv.index("--ranking") + 1]).read_text())["details"]["chosen"]
    scored = record(tmp_path / "eval_out", "sentence", model_specs.model_name(sentence_argv[sentence_argv.index("--model") + 1]))
    assert scored["config"]["ranking"] == chosen
    # a run on more-captions' split: select gets the one-language original as its reference, as the README's does
    enriched = tmp_path / "more" / "train"  # its manifest is all the summary reads
    enriched.mkdir(parents=True)
    (enriched / "manifest.json").write_text(json.dumps({"more_captions": {"from": str(tiny_world / "train")}}))
    print_summary({"run_dir": str(tiny_run), "metrics": {}}, tiny_world / "test", None, enriched)
    select_argv = shlex.split(capsys.readouterr().out.splitlines()[-2].split(": ", 1)[1])
    assert select_argv[select_argv.index("--reference") + 1] == str(tiny_world / "train")
    print_summary({"run_dir": str(tiny_run), "metrics": {}}, tiny_world / "test", None, tiny_world / "train")
    assert "--reference" not in capsys.readouterr().out.splitlines()[-2]


def test_a_twin_trained_on_train_parallel_is_told_the_reference_of_the_full_model(tmp_path, capsys, monkeypatch):
    """The supervised twins train on a more-captions dataset's train-parallel split (a link, no more_captions in its
    manifest): their summary printed `select` without --reference, so the statistics came from the enriched train
    split beside val while the full model's came from the one-language original. Every model of a table gets the
    one reference that select reads beside val, spelled as its original."""
    import shlex

    from globetrotter.training.report import print_summary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    original, more = Path("outputs/flickr8k"), Path("outputs/flickr8k-more")
    for folder, manifest in [(original / "train", {}), (original / "test", {}), (more / "val", {}),
                             (more / "train", {"more_captions": {"from": str(original / "train")}}),
                             (more / "train-parallel", {})]:
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps(manifest))
    references = []
    for run_name, train_split in [("runs/full", "train"), ("runs/twin", "train-parallel")]:
        print_summary({"run_dir": run_name, "metrics": {}}, original / "test", more / "val", more / train_split)
        select_argv = shlex.split(capsys.readouterr().out.splitlines()[-2].split(": ", 1)[1])
        references.append(select_argv[select_argv.index("--reference") + 1] if "--reference" in select_argv else None)
    assert references == [str(original / "train")] * 2


def test_the_summary_names_an_original_under_the_working_folder_relative_to_it(tmp_path, capsys, monkeypatch):
    """more-captions records its original as an absolute path; the summary's command gives one under the working
    folder relative to it (as the docs' commands are written), and one elsewhere as it is."""
    import shlex

    from globetrotter.training.report import print_summary

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    for where in (work, elsewhere):
        for folder, manifest in [(where / "orig" / "train", {}), (where / "orig" / "test", {}), (where / "more" / "val", {}),
                                 (where / "more" / "train", {"more_captions": {"from": str(where / "orig" / "train")}})]:
            folder.mkdir(parents=True)
            (folder / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(work)
    for where, expected in [(work, str(Path("orig") / "train")), (elsewhere, str(elsewhere / "orig" / "train"))]:
        print_summary({"run_dir": "runs/full", "metrics": {}}, where / "orig" / "test", where / "more" / "val")
        select_argv = shlex.split(capsys.readouterr().out.splitlines()[-2].split(": ", 1)[1])
        assert select_argv[select_argv.index("--reference") + 1] == expected


def test_the_summary_of_a_twin_on_train_parallel_names_its_languages_and_the_original_test_split(tmp_path, capsys,
                                                                                                 monkeypatch):
    """The supervised twin trains on train-parallel (en/de/fr/cs), val and test have zh too: the printed select chose
    on zh and the printed sentence scored it, a language the run never read, and the test split was named through
    the link more-captions made (outputs/flickr8k-more/test), not as the README does (outputs/flickr8k/test). The
    commands now name the languages the run was trained on, and the original test split."""
    import shlex

    from globetrotter.training import cli as train_cli, trainer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    five = {lang: 10 for lang in ("en", "de", "fr", "cs", "zh")}
    original, more = Path("outputs/flickr8k"), Path("outputs/flickr8k-more")
    for folder, manifest in [(original / "train", {"languages": five}), (original / "val", {"languages": five}),
                             (original / "test", {"languages": five}),
                             (more / "train", {"languages": five, "more_captions": {"from": str(original / "train")}}),
                             (more / "train-parallel", {"languages": {lang: 10 for lang in ("en", "de", "fr", "cs")}})]:
        folder.mkdir(parents=True)  # a manifest that reads (a shard listed and there): the summary reads no more
        (folder / "manifest.json").write_text(json.dumps({"shards": ["s.tar"], "num_samples": 10, **manifest}))
        (folder / "s.tar").touch()
    for name in ("val", "test"):  # linked, as more-captions does
        (more / name).symlink_to(Path("..") / "flickr8k" / name, target_is_directory=True)

    def fake_train(cfg, resume=None, written=None):
        return {"run_dir": str(cfg.run_dir), "metrics": {}, "step": cfg.steps, "checkpoints": {"latest": cfg.steps}}

    monkeypatch.setattr(trainer, "train", fake_train)
    commands = {}
    for config in ("flickr8k-supervised", "flickr8k"):
        with pytest.raises(SystemExit) as stop:
            train_cli.main(["--config", str(Path(__file__).resolve().parents[1] / "configs" / f"{config}.yaml")])
        assert stop.value.code == 0
        lines = capsys.readouterr().out.splitlines()
        commands[config] = [shlex.split(line.split(": ", 1)[1]) for line in lines[-2:]]
    (select, sentence), (full_select, full_sentence) = commands["flickr8k-supervised"], commands["flickr8k"]
    assert select[select.index("--languages") + 1] == "en,de,fr,cs"
    assert sentence[sentence.index("--languages") + 1] == "en,de,fr,cs"
    assert sentence[sentence.index("--split") + 1] == str(original / "test")
    assert select[select.index("--reference") + 1] == str(original / "train")
    # the full model reads every language of val and test: no --languages, the same test split
    assert "--languages" not in full_select + full_sentence
    assert full_sentence[full_sentence.index("--split") + 1] == str(original / "test")


def test_an_adapted_run_whose_language_val_lacks_is_told_to_score_test_without_a_choice(tiny_run, tiny_world,
                                                                                          tmp_path, capsys, monkeypatch):
    """val has no caption in the new language: a choice made there is refused for it, so the summary gives the test
    command alone (it printed select, then a sentence --ranking that failed)."""
    import shlex

    from globetrotter.training.report import print_summary

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])  # `python train.py`: the command runs eval.py
    val_without_en = tmp_path / "val"  # its manifest is all the summary reads
    val_without_en.mkdir()
    (val_without_en / "manifest.json").write_text(json.dumps({"languages": {"ru": 10}}), encoding="utf-8")
    result = {"run_dir": str(tiny_run), "metrics": {}, "adapt": {"language": "en"}}
    print_summary(result, tiny_world / "test", val_without_en)
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("val has no en caption, so no ranking can be chosen on val for en") and "select" not in last
    argv = shlex.split(last.split(": ", 1)[1])
    assert "--ranking" not in argv and run(argv[2:] + ["--n-groups", "12"]) == 0
    print_summary(result, tiny_world / "test", tiny_world / "val")  # val has en
    assert capsys.readouterr().out.splitlines()[-2].startswith("choose its ranking on val")
    # a test split without the new language cannot score it: said, not a command that scores the old ones alone
    print_summary(result | {"adapt": {"language": "xx"}}, tiny_world / "test", tiny_world / "val")
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"the test split {tiny_world / 'test'} has no xx caption, so it cannot score xx")


def test_select_against_another_record_is_paired_over_the_same_val_queries(tiny_run, tiny_world, tmp_path, capsys):
    """Two choices on the same val queries compare query by query: the margin is the difference of the two means and
    its interval holds it; a record of other queries (another g and sample seed: the baseline's defaults), a missing
    file or one without per-query scores is a one-line error before any scoring."""
    out = tmp_path / "out"
    base = ["select", "--model", str(tiny_run), "--out", str(out), "--heads", "text"]
    assert run(base + ["--name", "cosine", "--maxsim", "0", "--retrieval", "cosine"]) == 0
    base += ["--csls-k", "3"]
    first = record(out, "select", "cosine")
    assert len(first["details"]["per_query"]) == first["details"]["val"]["captions"]
    assert np.mean(first["details"]["per_query"]) == pytest.approx(first["metrics"]["mean_bkr"])
    model = yaml.safe_load((tiny_run / "config.yaml").read_text(encoding="utf-8"))["model"]
    assert first["details"]["val"]["model_image_encoder"] == f"timm:{model['image_backbone']}:{model['image_pretrained']}"
    capsys.readouterr()
    assert run(base + ["--name", "grid", "--maxsim", "0,1", "--against", str(out / "select-cosine.json")]) == 0
    second = record(out, "select", "grid")
    margin = second["details"]["against"]
    assert margin["diff"] == pytest.approx(second["metrics"]["mean_bkr"] - first["metrics"]["mean_bkr"])
    assert margin["lo"] <= margin["diff"] <= margin["hi"] and margin["chosen"] == "cosine"
    assert margin["model"] == first["model"]["path"]
    assert "paired over the same queries" in capsys.readouterr().out
    assert run(["select", "--model", "tfidf", "--val", str(tiny_world / "val"), "--out", str(out),
                "--retrieval", "cosine", "--against", str(out / "select-cosine.json")]) == 2
    err = capsys.readouterr().err
    assert f"--against {out / 'select-cosine.json'}: its val queries are not this selection's" in err
    assert len(err.strip().splitlines()) == 1
    old = dict(first, details={k: v for k, v in first["details"].items() if k != "per_query"})
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    for against, message in ((tmp_path / "old.json", "holds no per-query scores"), (tmp_path / "none.json", "no such file")):
        assert run(base + ["--maxsim", "0", "--against", str(against)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_sentence_says_when_the_split_has_fewer_groups_than_asked(tiny_world, tmp_path, capsys):
    """--n-groups 600 on a split of 12 groups scored the 12 and said 600 nowhere but the config: a note now."""
    out = tmp_path / "out"
    assert run(["sentence", "--model", "tfidf", "--split", str(tiny_world / "test"), "--out", str(out),
                "--n-groups", "50"]) == 0
    printed = capsys.readouterr().out
    assert "12 groups x" in printed and "note: --n-groups 50, but" in printed and "has 12 groups" in printed
    # a query's candidates are the other languages' sentences of every group, not one per group
    assert "are of 12 groups, not 50)" in printed and "candidates" not in printed.split("note:")[1]
    assert run(["sentence", "--model", "tfidf", "--split", str(tiny_world / "test"), "--out", str(out),
                "--n-groups", "12", "--name", "all"]) == 0
    assert "note: --n-groups" not in capsys.readouterr().out


def test_a_test_figure_scored_with_the_oracles_choice_says_so(tiny_world, tmp_path, capsys):
    """A ranking chosen on parallel val (experiments/oracle_ranking.py, config.oracle) applied to test printed and
    recorded like val's choice: the record and the line now say it is the oracle's."""
    out = tmp_path / "out"
    assert run(["select", "--model", "tfidf", "--val", str(tiny_world / "val"), "--out", str(out),
                "--retrieval", "cosine"]) == 0
    chosen = json.loads((out / "select-tfidf.json").read_text(encoding="utf-8"))
    (out / "oracle.json").write_text(json.dumps({**chosen, "config": {**chosen["config"], "oracle": True}}))
    test = ["sentence", "--model", "tfidf", "--split", str(tiny_world / "test"), "--out", str(out), "--n-groups", "12"]
    for ranking, oracle in (("select-tfidf.json", False), ("oracle.json", True)):
        capsys.readouterr()
        assert run(test + ["--ranking", str(out / ranking), "--name", ranking]) == 0
        assert ("is the oracle's choice, made on parallel val text" in capsys.readouterr().out) is oracle
        assert record(out, "sentence", ranking)["config"]["oracle_choice"] is oracle


def test_word_prints_chance_and_warns_of_few_candidates_and_repeated_pairs(world, fake, tmp_path, capsys):
    """The R@10/P@ line had no chance beside it (the record had it); a lexicon of 10 or fewer target words makes
    R@10 1 for any model, and a repeated pair counted twice, both in silence. Now: chance printed as `sentence`
    prints it, and a one-line warning for each."""
    lexicon = tmp_path / "lexicon"
    lexicon.mkdir()
    pairs = list(zip(COLOURS["en"], COLOURS["de"]))[:4]
    (lexicon / "en-de.txt").write_text("".join(f"{x} {y}\n" for x, y in pairs + pairs[:1]), encoding="utf-8")
    assert run(["word", "--model", "full", "--name", "full", "--dictionary", str(lexicon), "--method", "nn",
                "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    line = next(l for l in captured.out.splitlines() if l.startswith("word translation"))
    assert "R@10 100.0% (chance 100.0%, no identical" in line, line  # 4 candidates: R@10 is 1 whatever the model
    warnings_ = [l for l in captured.err.splitlines() if l.startswith("warning: ")]
    assert f"warning: {lexicon / 'en-de.txt'}: 1 duplicate pair(s) dropped (each pair counts once)" in warnings_
    assert any(l.startswith("warning: word: 2 language pair(s) with 10 or fewer target candidates (de-en 4, en-de 4)")
               for l in warnings_), warnings_
    details = record(tmp_path / "out", "word")["details"]
    assert details["nn/none"]["pairs"]["en-de"]["all"]["n_pairs"] == 4


def test_translate_notes_a_k_above_the_corpus_and_cut_queries_and_translate_word_odd_queries(tiny_run, tiny_world,
                                                                                             tmp_path, capsys):
    """A --k above the corpus, a query longer than data.max_length tokens (cut), a translate-word query of several
    words or no token of its own: each went through in silence; now one line each (the cut query: the TextsCut
    warning alone, no 'queries cut' note beside it), and the command runs."""
    from globetrotter.config import load_train_config

    limit = load_train_config(tiny_run / "config.yaml").data.max_length
    from data_prep.shards import read_captions

    n_ru = len({m["caption"] for m in read_captions(tiny_world / "test") if m["lang"] == "ru"})  # distinct sentences
    out = str(tmp_path / "out")
    long_query = " ".join(["red"] * (2 * limit))
    assert run(["translate", "--model", str(tiny_run), "red square", long_query, "--to", "ru", "--corpus",
                str(tiny_world / "test"), "--k", str(n_ru + 5), "--out", out]) == 0
    err = capsys.readouterr().err
    assert f"note: --k {n_ru + 5}: the corpus has {n_ru} ru sentences; each query lists all of them" in err, err
    cut = [line for line in err.splitlines() if "cut" in line]  # one notice, not a note beside the warning
    assert len(cut) == 1 and re.fullmatch(rf"warning: 1 of \d+ text\(s\) are longer than data.max_length={limit} "
                                          r"tokens and were cut to it, .*", cut[0]), cut
    import globetrotter

    vocab = globetrotter.load(tiny_run).tokenizer.get_vocab()
    token = next(t[1:] for t in sorted(vocab) if t.startswith("Ġ") and len(t) > 3 and t[1:].isalpha())  # a whole word
    assert run(["translate-word", "--model", str(tiny_run), token, "red square", "qzxqzx", "--from", "en", "--to",
                "ru", "--k", "3", "--out", out]) == 0
    err = capsys.readouterr().err
    assert "note: ['red square'] is several words" in err, err
    assert "note: ['qzxqzx'] is not in the model's vocabulary" in err, err  # a token of its own gets no note


def test_a_folder_given_as_the_ranking_record_is_named_as_a_folder(tmp_path, monkeypatch):
    """`eval.py sentence --ranking DIR` said 'DIR: no such file'."""
    from globetrotter.errors import UserError
    from globetrotter.evaluation.tasks.choice import read_choice

    from backretrieval.errors import cli_option_names

    monkeypatch.setattr(sys, "argv", ["eval.py"])
    with pytest.raises(UserError) as err, cli_option_names():  # as eval.py runs it
        read_choice(tmp_path)
    assert str(err.value) == f"{tmp_path}: a folder; --ranking takes the JSON record that `eval.py select` wrote"
    with pytest.raises(UserError) as err:  # a Python caller typed no flag
        read_choice(tmp_path)
    assert str(err.value) == f"{tmp_path}: a folder; ranking takes the JSON record that `eval.py select` wrote"


def test_a_ranking_record_that_is_not_json_names_the_place_not_the_exception(tmp_path, monkeypatch):
    """`eval.py sentence --ranking afile.txt` said '(JSONDecodeError: Expecting value: line 1 column 1 (char 0))';
    a JSON object without a key of the record '(KeyError: 'reference')'."""
    from globetrotter.errors import UserError
    from globetrotter.evaluation.tasks.choice import read_choice

    monkeypatch.setattr(sys, "argv", ["eval.py"])
    (tmp_path / "afile.txt").write_text("not json\n")
    with pytest.raises(UserError) as err:
        read_choice(tmp_path / "afile.txt")
    assert str(err.value) == (f"{tmp_path / 'afile.txt'}:1:1: not JSON (Expecting value); expected the record "
                              "`eval.py select` wrote")
    (tmp_path / "partial.json").write_text(json.dumps({"details": {"chosen": {}}, "config": {}}))
    with pytest.raises(UserError) as err:
        read_choice(tmp_path / "partial.json")
    assert "Error" not in str(err.value) and str(err.value).startswith(f"{tmp_path / 'partial.json'}: not a record of "
                                                                       "`eval.py select` (")


def test_retrieval_refuses_a_split_of_image_features_before_loading_a_model(tmp_path, capsys):
    """Was a ``TypeError`` traceback (``images[0]: expected a PIL image, got ndarray``) once the model had loaded: an
    ``npy`` split's rows are precomputed image features, which the run's image encoder cannot read."""
    from data_prep.shard_writer import ShardWriter

    with ShardWriter(tmp_path / "test", split="test", source="unit", image_format="npy") as writer:
        for i in range(6):
            writer.write(f"s{i}", np.full(4, i, np.float32), f"caption {i}", ["en", "de"][i % 2], f"img{i}")
    code = run(["retrieval", "--model", str(tmp_path / "no_run_needed"), "--split", str(tmp_path / "test"),
                "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {tmp_path / 'test'}: its samples are precomputed image features "
                                        "(npy, 4 dims), not pictures, and text-image retrieval reads pictures"), err
    assert not (tmp_path / "out").exists()


def test_a_tie_goes_to_the_simpler_ranking_and_a_candidates_score_is_its_mean_over_k(tmp_path):
    """FakeEncoder embeds a caption alike by both heads, so the cross head's cosine ties the text head's on every
    val query: the choice is the simpler ranking (the text head), whatever order the heads are given in; and each
    candidate's mean_bkr is the mean of its own BkR@K."""
    from itertools import product

    from globetrotter.evaluation import Ranking
    from globetrotter.evaluation.tasks.select import select_ranking

    for split, prefix in (("val", "v"), ("train", "t")):  # the reference: the same captions, of other images
        with ShardWriter(tmp_path / split, split=split, source="unit", image_format="png") as writer:
            for c, s, lang in product(range(6), range(5), LANGS):  # each image in one language, none all grey
                writer.write(f"{prefix}{c}{s}{lang}", Image.new("RGB", (8, 8), (40 * c + 10, 40 * s + 5, 100)),
                             caption(lang, c, s), lang, image_id=f"{prefix}{c}{s}{lang}")
    result = select_ranking(FakeEncoder(language_offset=3.0), tmp_path / "val", heads=("cross", "text"),
                            maxsim=(0.0,), csls=(False, True), csls_k=3, reference=tmp_path / "train",
                            image_features="pixels", log=lambda line: None)
    rows = result.details["candidates"]
    assert [r["label"] for r in rows] == ["cosine", "csls", "cosine (cross head)", "csls (cross head)"]
    assert rows[0]["mean_bkr"] == rows[2]["mean_bkr"] and rows[1]["mean_bkr"] == rows[3]["mean_bkr"]
    best = max(r["mean_bkr"] for r in rows)
    assert result.details["chosen"] == Ranking(csls=best > rows[0]["mean_bkr"], csls_k=3).to_dict()
    for r in rows:
        assert r["mean_bkr"] == pytest.approx(np.mean([r[f"bkr@{k}"] for k in (1, 5, 10)]))


def test_a_copy_of_the_choice_is_within_noise_of_it():
    """A candidate that scores every val query as the choice does cannot be told from it: its paired interval is
    [0, 0], which holds 0."""
    from globetrotter.evaluation.tasks.choice_margins import margins_to_choice, within_noise

    chosen = np.random.default_rng(1).integers(0, 2, 100).astype(float)
    margins = margins_to_choice([chosen.copy(), chosen], chosen=1)
    assert margins[0] == {"diff": 0.0, "lo": 0.0, "hi": 0.0}
    assert within_noise([{"label": "copy", "vs_chosen": margins[0]}, {"label": "chosen"}]) == ["copy"]


def test_model_names_leave_out_the_checkpoints_folder(tmp_path):
    """A record's model name is the last two parts of the run folder's path, a checkpoint folder's without the
    ``checkpoints`` folder between them (``myrun-best``, not ``checkpoints-best``, which every run's best would share)."""
    run = tmp_path / "runs" / "myrun"
    assert model_specs.model_name(str(run)) == "runs-myrun"
    assert model_specs.model_name(str(run / "checkpoints" / "best")) == "myrun-best"
    assert model_specs.model_name(str(run / "checkpoints" / "best"), "mine") == "mine"
    # two ridge baselines fitted on different datasets' train splits are two models: two names
    assert model_specs.model_name(f"ridge:{tmp_path / 'a' / 'train'}") != model_specs.model_name(
        f"ridge:{tmp_path / 'b' / 'train'}")


def test_the_checkpoint_a_spec_loads_now_is_the_one_the_loaded_model_names(tiny_run, tmp_path, monkeypatch):
    """A `--ranking` record is checked against the checkpoint its --model spec loads now: for a relative spec that
    is the same absolute folder the loaded encoder's records name, or every choice would be refused."""
    monkeypatch.chdir(tiny_run.parent)
    now = model_specs.current_checkpoint(tiny_run.name)
    assert now is not None and Path(now).is_absolute()
    assert now == model_specs.checkpoint_of(model_specs.load_model(tiny_run.name))
    # a baseline, a folder without a checkpoint and a missing folder load none now: None, and loading says why
    for spec in ("tfidf", str(tmp_path), str(tmp_path / "missing")):
        assert model_specs.current_checkpoint(spec) is None, spec


def test_the_retrieval_plot_draws_chance_as_printed_never_above_100(world, fake, tmp_path, capsys, monkeypatch):
    """Chance of text->image Recall@K is K of the n gallery images, and 100% for a K at or above n: the plot's dashed
    line says the same as the printed line (K=50 of 30 images: 100%, not 167%)."""
    from globetrotter.evaluation import plots

    drawn = {}
    real = plots.plot_bars

    def recording(*args, **kwargs):
        drawn.update(kwargs["chance"])
        return real(*args, **kwargs)

    monkeypatch.setattr(plots, "plot_bars", recording)
    assert run(["retrieval", "--model", "full", "--split", str(world / "test"), "--out", str(tmp_path),
                "--ks", "1,50"]) == 0
    assert drawn == pytest.approx({"R@1": 100 / 30, "R@50": 100.0})
    assert "R@1 3.3, R@50 100.0" in capsys.readouterr().out
