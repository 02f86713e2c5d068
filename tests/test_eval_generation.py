"""Translation by generation (paper A.5): a decoder trained on one language's captions writes
them back from their representation, translates exactly as far as the representation is
shared across languages, and the command scores it (chrF, BLEU) and refuses bad input."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from data_prep.shard_writer import ShardWriter
from globetrotter.errors import UserError
from globetrotter.evaluation import cli
from globetrotter.evaluation import models as model_specs
from globetrotter.evaluation import generation as gen
from globetrotter.tokenizer import train_tokenizer
from test_eval_cli import COLOURS, LANGS, SHAPES, FakeEncoder, caption  # tests/ is on sys.path (rootless conftest)

SMALL = gen.DecoderConfig(d_model=64, layers=2, prefix_length=2, max_tokens=16, steps=250, batch_size=32, lr=3e-3)
PLACES = ["on the left", "on the right", "at the top", "at the bottom"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_scores_and_floor_permutation():
    refs = ["a red circle on the left", "two blue squares", "a green star at the top"]
    same = gen.score(refs, refs)
    assert same["chrf"] == pytest.approx(100) and same["bleu"] == pytest.approx(100) and same["n"] == 3
    other = gen.score(["zzz qqq", "xx", "yyy"], refs)
    assert 0 <= other["bleu"] < 1 and 0 <= other["chrf"] < 10
    partial = gen.score(["a red circle on the right", "two blue squares", "a green star"], refs)
    assert other["chrf"] < partial["chrf"] < 100 and 0 < partial["bleu"] < 100
    zh = gen.score(["一个红色的圆"], ["一个红色的圆"], target="zh")  # no spaces: BLEU on zh tokens
    assert zh["bleu"] == pytest.approx(100)
    perm = gen.derangement(50, seed=3)
    assert sorted(perm) == list(range(50)) and not (perm == np.arange(50)).any()
    assert (perm == gen.derangement(50, seed=3)).all() and not (perm == gen.derangement(50, seed=4)).all()
    with pytest.raises(ValueError):
        gen.derangement(1)


def test_decoder_refuses_too_few_captions_and_mismatched_inputs():
    tok = train_tokenizer(["a red circle", "two blue squares"] * 5, vocab_size=100, min_frequency=1)
    cond = np.zeros((2, 4), np.float32)
    with pytest.raises(UserError, match="at least 2 non-empty training captions, got 1"):
        gen.train_decoder(["a red circle", ""], cond, tok, SMALL, progress=False)  # "" encodes to no token
    with pytest.raises(ValueError, match="3 texts but 2 representations"):
        gen.train_decoder(["a", "b", "c"], cond, tok, SMALL, progress=False)
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        gen.score(["a", "b"], ["a"])
    with pytest.raises(UserError, match="^decoder width 30 is not a multiple of its 4 heads$"):
        gen.PrefixDecoder(10, 4, d_model=30)  # the library's own check (eval.py generate refuses --d-model 30 first)
    block = gen.Block(8, 2, 16, 0.0)
    _, past = block(torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match="one new position"):
        block(torch.zeros(1, 2, 8), past)


def _world(rng: np.random.Generator, dim: int = 24):
    """Every (colour, shape, place) caption and its representation: the sum of its concept
    vectors plus a little noise, as a model that embeds meaning would give."""
    colour, shape, place = (rng.normal(size=(n, dim)) for n in (6, 5, 4))
    items = [(c, s, p) for c in range(6) for s in range(5) for p in range(4)]
    texts = [f"a {COLOURS['en'][c]} {SHAPES['en'][s]} {PLACES[p]}" for c, s, p in items]
    rep = np.stack([colour[c] + shape[s] + place[p] for c, s, p in items]) + 0.05 * rng.normal(size=(len(items), dim))
    return texts, rep.astype(np.float32)


def test_decoder_writes_unseen_captions_from_their_representation_only():
    rng = np.random.default_rng(0)
    texts, rep = _world(rng)
    held = rng.permutation(len(texts))[:20]  # 20 combinations the decoder never trains on
    train = np.setdiff1d(np.arange(len(texts)), held)
    tok = train_tokenizer(texts, vocab_size=300, min_frequency=1)
    decoder, vocab, log = gen.train_decoder([texts[i] for i in train], rep[train], tok, SMALL, seed=0, progress=False)
    assert log["loss_last_tenth"] < log["loss_first_tenth"] and log["captions"] == len(train)
    assert len(vocab) < tok.get_vocab_size()  # the softmax covers the training captions' tokens only
    refs = [texts[i] for i in held]
    out = gen.generate(decoder, vocab, rep[held], batch_size=8)
    informed = gen.score(out, refs)
    # a decoder trained on representations unrelated to meaning (random vectors) can only guess
    noise = rng.normal(size=rep.shape).astype(np.float32)
    blind_dec, blind_vocab, _ = gen.train_decoder([texts[i] for i in train], noise[train], tok, SMALL, seed=0, progress=False)
    blind_out = gen.generate(blind_dec, blind_vocab, noise[held])
    blind = gen.score(blind_out, refs)

    assert np.mean([a == b for a, b in zip(out, refs)]) > 0.5  # new combinations written exactly
    assert not any(a == b for a, b in zip(blind_out, refs))
    assert informed["chrf"] > blind["chrf"] + 15 and informed["bleu"] > blind["bleu"] + 25
    # the same decoder fed another caption's representation writes that caption, not this one
    floor = gen.score(gen.generate(decoder, vocab, rep[held][gen.derangement(len(held))]), refs)
    assert informed["chrf"] > floor["chrf"] + 15
    # seeded: the same training gives the same decoder
    again, vocab2, _ = gen.train_decoder([texts[i] for i in train], rep[train], tok, SMALL, seed=0, progress=False)
    assert gen.generate(again, vocab2, rep[held]) == out


# ----------------------------------------------------------------------------- the command


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    return exit_info.value.code


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> Path:
    """A train split (each scene twice, in one language per image) and a parallel test split
    of the same 30 scenes in en/de/fr (the world of test_eval_cli)."""
    root = tmp_path_factory.mktemp("gen_world")
    with ShardWriter(root / "train", split="train", source="tiny", image_format="png", maxcount=100) as w:
        for rep in range(4):
            for c in range(6):
                for s in range(5):
                    lang = LANGS[(rep + c + s) % 3] if rep < 3 else "en"
                    w.write(f"t{rep}{c}{s}", Image.new("RGB", (4, 4)), caption(lang, c, s), lang, f"t{rep}{c}{s}")
    with ShardWriter(root / "test", split="test", source="tiny", image_format="png", maxcount=100) as w:
        for c in range(6):
            for s in range(5):
                for lang in LANGS:
                    w.write(f"s{c}{s}{lang}", Image.new("RGB", (4, 4)), caption(lang, c, s), lang, f"img{c}{s}", group=f"g{c}{s}")
    return root


@pytest.fixture
def fake(monkeypatch):
    encoders = {"full": FakeEncoder(), "textonly": FakeEncoder(language_offset=3.0)}
    monkeypatch.setattr(model_specs, "load_model", lambda path, device="cpu": encoders[Path(path).name])
    return encoders


def _argv(splits: Path, out: Path, model: str, *extra: str) -> list[str]:
    return ["generate", "--model", model, "--name", model, "--train", str(splits / "train"), "--split", str(splits / "test"),
            "--out", str(out), "--steps", "150", "--layers", "1", "--d-model", "32", "--prefix-length", "2",
            "--decoder-batch-size", "32", "--lr", "3e-3", *extra]


def test_generate_command_translates_as_far_as_the_representation_is_shared(splits, fake, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(_argv(splits, out, "full", "--show", "2")) == 0
    printed = capsys.readouterr().out
    shown = re.findall(r"^group g(\d)(\d)  reference \(en\): (.*)$", printed, flags=re.M)
    assert len(shown) == 2 and all(ref == caption("en", int(c), int(s)) for c, s, ref in shown)  # each group's own
    assert "en (reconstruction)" in printed and "mismatched (floor)" in printed
    rec = json.loads((out / "generate-full.json").read_text(encoding="utf-8"))
    m, d = rec["metrics"], rec["details"]
    assert rec["task"] == "generate" and rec["languages"] == ["en", "de", "fr"]
    assert d["sources"] == ["de", "fr"] and d["n_groups"] == 30 and d["train"]["captions"] == 30 + 30
    assert len(d["examples"]) == 2 and set(d["examples"][0]["generated"]) == {"de", "fr", "en", "mismatched"}
    for row in [*m["per_source"].values(), m["reconstruction"], m["mismatched"]]:
        assert 0 <= row["chrf"] <= 100 and 0 <= row["bleu"] <= 100 and row["n"] == 30
    # the full model's representation is shared: de and fr decode as well as en itself, far above the floor
    assert m["reconstruction"]["chrf"] > 90
    for lang in ("de", "fr"):
        assert m["per_source"][lang]["chrf"] > m["reconstruction"]["chrf"] - 5
        assert m["per_source"][lang]["chrf"] > m["mismatched"]["chrf"] + 20
    assert m["chrf"] == pytest.approx(np.mean([m["per_source"][l]["chrf"] for l in ("de", "fr")]))

    # a representation that keeps languages apart (the text-only model) does not translate
    assert run(_argv(splits, out, "textonly", "--sources", "de", "--show", "0")) == 0
    text_only = json.loads((out / "generate-textonly.json").read_text(encoding="utf-8"))["metrics"]
    assert list(text_only["per_source"]) == ["de"]
    assert text_only["per_source"]["de"]["chrf"] < m["per_source"]["de"]["chrf"] - 20
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("extra, message", [
    (["--target", "xx"], "no caption in target language 'xx'"),
    (["--sources", "de,zz"], "no caption in source language(s) ['zz']"),
    (["--sources", "en"], "at least one language other than the target"),
    (["--show", "-1"], "--show -1"),
    (["--n-groups", "1"], "1 parallel group(s) in"),  # the mismatched floor needs another group to decode from
])
def test_generate_bad_input_is_one_line_exit_2(splits, fake, tmp_path, capsys, extra, message):
    assert run(_argv(splits, tmp_path, "full", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_generate_refuses_a_train_split_without_the_target_language(splits, fake, tmp_path, capsys):
    train = tmp_path / "train"
    with ShardWriter(train, split="train", source="tiny", image_format="png", maxcount=100) as w:
        for c in range(3):
            w.write(f"f{c}", Image.new("RGB", (4, 4)), caption("fr", c, 0), "fr", f"f{c}")
    out = tmp_path / "out"
    assert run(_argv(splits, out, "full", "--target", "de") + ["--train", str(train)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists(), err
    assert f"{train}: no caption in target language 'de' to train the decoder on (--train; has ['fr'])" in err


def test_generate_threads_sets_torchs_threads_before_it_reads_the_splits(splits, fake, tmp_path, monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    assert run(_argv(splits, tmp_path, "full", "--n-groups", "1", "--threads", "3")) == 2  # refused after the threads
    assert asked[-1:] == [3]  # after eval.py's own share of the cores (set first where OMP_NUM_THREADS is not)


def test_generate_help_and_bad_splits_and_models_exit_2(splits, fake, tmp_path, capsys):
    assert run(["generate", "--help"]) == 0
    assert "METRICS" in capsys.readouterr().out
    cases = [
        (["--train", str(tmp_path / "missing")], "split directory not found"),
        (["--train", str(splits / "test"), "--target", "de", "--split", str(splits / "train")], "no caption has a 'group'"),
    ]
    for extra, message in cases:
        assert run(_argv(splits, tmp_path, "full") + extra) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert run(_argv(splits, tmp_path, "tfidf")) == 2
    assert "needs a trained run folder" in capsys.readouterr().err


def test_generate_command_on_a_trained_run(tiny_world, tiny_run, tmp_path):
    out = tmp_path / "out"
    argv = ["generate", "--model", str(tiny_run), "--name", "tiny", "--train", str(tiny_world / "train"),
            "--split", str(tiny_world / "test"), "--target", "en", "--out", str(out), "--steps", "60",
            "--layers", "1", "--d-model", "32", "--decoder-batch-size", "16"]
    assert run(argv) == 0
    rec = json.loads((out / "generate-tiny.json").read_text(encoding="utf-8"))
    assert sorted(rec["metrics"]["per_source"]) == ["el", "ja", "ru"] and rec["details"]["n_groups"] == 12
    assert rec["details"]["train"]["captions"] == 24 and rec["details"]["decoder"]["layers"] == 1
    assert all(0 <= r["chrf"] <= 100 for r in rec["metrics"]["per_source"].values())
    # the decoder writes the target's script (pieces of its training captions), whatever the source script
    generated = [t for ex in rec["details"]["examples"] for t in ex["generated"].values()]
    assert len(generated) == 5 * 5 and all(t and set(t) <= set("redgrnblueyowasq ") for t in generated)


def _parallel_copy(src: Path, out: Path, split: str = "train", keep=lambda group: True) -> Path:
    """A copy of the parallel split ``src`` (groups and images kept) written as ``split``, of the groups ``keep``
    accepts."""
    from data_prep.shards import iter_samples

    with ShardWriter(out, split=split, source="copy", image_format="png", maxcount=100) as w:
        for sample in iter_samples(src):
            if keep(sample.group):
                w.write(sample.key, sample.image, sample.caption, sample.lang, sample.image_id, group=sample.group)
    return out


def test_generate_refuses_to_train_on_the_evaluated_groups(splits, fake, tmp_path, capsys):
    """The test split itself, or a parallel split holding its groups, as --train: the decoder would learn the
    references; a one-line error, exit 2, and no record."""
    copy = _parallel_copy(splits / "test", tmp_path / "copy")
    for train, message in ((splits / "test", "is the evaluated --split itself"),
                           (splits / "test" / ".." / "test", "is the evaluated --split itself"),
                           (copy, "a parallel split sharing 30 groups and 30 images")):
        argv = _argv(splits, tmp_path / "out", "full")
        argv[argv.index("--train") + 1] = str(train)
        assert run(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # a parallel split of other groups (here: the ones not evaluated) is fine
    from globetrotter.evaluation.tasks.generate import evaluate
    from globetrotter.evaluation.sentence import parallel_set
    from data_prep.shards import read_captions

    chosen = set(parallel_set(read_captions(splits / "test"), n_groups=10, seed=0).group_ids)
    other = _parallel_copy(splits / "test", tmp_path / "other", keep=lambda g: g not in chosen)
    tiny = gen.DecoderConfig(d_model=16, layers=1, prefix_length=1, steps=2, batch_size=8)
    result = evaluate(fake["full"], splits / "test", other, n_groups=10, show=0, decoder=tiny, log=lambda _: None)
    assert result.details["n_groups"] == 10 and result.details["train"]["test_references_in_train"] == 0


def test_references_in_train_counts_each_reference_found(splits, fake, tmp_path):
    """Repeated references are each counted: 4 groups showing one caption, all in train, make 4, not 1."""
    from globetrotter.evaluation.tasks.generate import evaluate

    test = tmp_path / "test"
    with ShardWriter(test, split="test", source="tiny", image_format="png") as w:
        for g in range(6):
            c, s = (0, 0) if g < 4 else (g, 1)  # groups 0-3 show the same scene, so the same captions
            for lang in LANGS:
                w.write(f"s{g}{lang}", Image.new("RGB", (4, 4)), caption(lang, c, s), lang, f"img{g}", group=f"g{g}")
    from data_prep.shards import read_captions

    train_en = {m["caption"] for m in read_captions(splits / "train") if m["lang"] == "en"}
    refs = [m["caption"] for m in read_captions(test) if m["lang"] == "en"]
    tiny = gen.DecoderConfig(d_model=16, layers=1, prefix_length=1, steps=2, batch_size=8)
    d = evaluate(fake["full"], test, splits / "train", show=0, decoder=tiny, log=lambda _: None).details["train"]
    assert d["test_references"] == len(refs) == 6
    assert d["test_references_in_train"] == sum(r in train_en for r in refs) and len(set(refs) & train_en) < 6


def test_generate_refuses_a_language_the_model_never_read(splits, tiny_world, tiny_run, tmp_path, capsys):
    """--target or --sources naming a language outside the model's training captions (its tokenizer's provenance
    record): the one-line error translate and translate-word give, exit 2, and no record."""
    languages = sorted(json.loads((tiny_world / "train" / "manifest.json").read_text())["languages"])
    out = tmp_path / "out"
    base = ["generate", "--model", str(tiny_run), "--name", "tiny", "--train", str(splits / "train"),
            "--split", str(splits / "test"), "--out", str(out), "--steps", "2", "--layers", "1", "--d-model", "16"]
    for extra, flag, lang in ((["--target", "de"], "--target", "de"),
                              (["--target", "en", "--sources", "fr"], "--sources", "fr")):
        assert run(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the note that the run has no best checkpoint
        assert err == f"error: {flag} {lang}: not a language of the model's training captions ({', '.join(languages)})"
    assert not out.exists()


def test_the_prefix_reads_the_standardised_representation():
    """``cond`` is standardised by the buffers before the prefix layer: a decoder with mean m and std s given c
    builds the same prefix as the same decoder with mean 0 and std 1 given (c - m) / s."""
    import torch

    torch.manual_seed(0)
    dec = gen.PrefixDecoder(vocab_size=10, cond_dim=3, d_model=8, layers=1, heads=2, prefix_length=2).eval()
    cond, mean, std = torch.randn(4, 3), torch.tensor([1.0, -2.0, 0.5]), torch.tensor([2.0, 0.5, 3.0])
    dec.cond_mean.copy_(mean)
    dec.cond_std.copy_(std)
    given = dec._prefix(cond)
    dec.cond_mean.zero_()
    dec.cond_std.fill_(1.0)
    assert torch.allclose(given, dec._prefix((cond - mean) / std), atol=1e-6)
