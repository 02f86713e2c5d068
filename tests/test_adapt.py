"""Adaptation to a new language (paper appendix A.2) on the tiny colour world with Greek held out."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import globetrotter
from data_prep.shards import read_captions
from globetrotter.config import load_train_config
from globetrotter.config_io import save_config
from globetrotter.data.feature_cache import cache_dir_for, spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.losses import transitive_alpha
from globetrotter.tokenizer import (extend_tokenizer, provenance_languages, read_provenance, token_bytes,
                                    train_tokenizer)
from globetrotter.training import checkpoint as ckpt
from globetrotter.training.adapt import load_adapt_config, resolve_config
from globetrotter.training.adapt import split as adapt_split
from globetrotter.errors import UserError
from globetrotter.training.cli import main as train_main
from globetrotter.training.trainer import train

from conftest import WORDS, make_tiny_world

# a frozen random narrow ResNet read from the feature cache: a step costs only the text side
FAST = ["data.synth=null", "data.vocab_size=300", "data.image_size=32", "data.workers=0", "model.d_model=32",
        "model.layers=1", "model.heads=2", "model.ffn=64", "model.embed_dim=16", "batch_size=32", "log_every=50",
        "val.every=0", "optim.warmup_steps=5", "optim.lr=2e-3", "loss.transitive=official", "data.features=auto",
        "data.feature_views=2", "data.hue_jitter=0", "data.grayscale=0", "model.freeze_image_backbone=true",
        "model.image_backbone_args.channels=[8,16,16,16]", "model.image_backbone_args.stem_width=8"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return make_tiny_world(tmp_path_factory.mktemp("heldout"), n_train=192, n_test=16, heldout=("el",), n_adapt=96)


class ColourPool(torch.nn.Module):
    """The cached features' stand-in backbone: a fixed random 1x1 colour projection, max-pooled, [B, 3, S, S] ->
    [B, 16]. Its features name the square's colour, which a random ResNet's do not (a trained one would)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.einsum("oc,bchw->bohw", self.weight, images)).amax((2, 3))


@pytest.fixture(scope="module")
def base(world, tmp_path_factory) -> Path:
    """A run trained on en/ru/ja for 150 steps: its languages share the colours through the images."""
    from safetensors.torch import save_file

    from test_feature_cache import small_backbone

    out = tmp_path_factory.mktemp("runs")
    weights = out / "small.safetensors"
    save_file(small_backbone().state_dict(), str(weights))
    cfg = load_train_config(None, [f"data.root={world}", f"data.tokenizer={out / 'tokenizer.json'}", f"output_dir={out}",
                                   "run_name=base", f"model.image_pretrained={weights}", *FAST, "steps=150"])
    for split in ("train", "adapt"):  # the caches the runs read, built by the stand-in
        build_feature_cache(world / split, spec_from_config(cfg), cache_dir_for(cfg, split), ColourPool(), workers=0,
                            progress=False)
    train(cfg)
    return cfg.run_dir


def colour_accuracy(run: Path, world: Path, query: list[str], target: list[str]) -> float:
    """Share of test captions in ``query`` languages whose nearest caption in ``target`` languages (another
    language) names the same colour: a colour has 4 images here, so this is what the world lets a model show."""
    metas = [m for m in read_captions(world / "test") if m["lang"] in set(query) | set(target)]
    colour = {w: c for words in WORDS.values() for c, w in words.items() if c != "_"}
    colours = np.array([colour[m["caption"].split()[0]] for m in metas])
    langs = np.array([m["lang"] for m in metas])
    emb = globetrotter.load(run).encode_text([m["caption"] for m in metas])
    sim = emb @ emb.T
    sim[langs[:, None] == langs[None, :]] = -np.inf
    sim[:, ~np.isin(langs, target)] = -np.inf
    rows = np.isin(langs, query)
    return float((colours[sim[rows].argmax(1)] == colours[rows]).mean())


def adapt(base: Path, out: Path, *extra: str):
    cfg = load_adapt_config(None, [f"adapt.from={base}", "adapt.language=el", "adapt.vocab_size=300",
                                   f"output_dir={out}", *extra])
    return cfg, train(cfg)


@pytest.mark.filterwarnings("ignore::globetrotter.texts_cut.TextsCut")  # long captions, cut as in training
def test_adapting_teaches_the_new_language_and_keeps_the_old_ones(world, base, tmp_path):
    old = ["en", "ru", "ja"]
    el_before = colour_accuracy(base, world, ["el"], old)
    assert colour_accuracy(base, world, old, old) >= 0.9, "the base run aligned its languages"
    cfg, result = adapt(base, tmp_path, "adapt.epochs=30", "val.test_groups=16")  # asks for the test figures
    assert cfg.run_name == "base-el" and result["step"] == 90  # 30 epochs x 96 captions / 32
    el_after = colour_accuracy(cfg.run_dir, world, ["el"], old)
    assert el_before <= 0.5 and el_after >= 0.9, (el_before, el_after)  # chance: 0.25
    # only the new tokens trained (adapt.train=new-tokens): every old caption is encoded as before
    captions = [m["caption"] for m in read_captions(world / "test") if m["lang"] != "el"]
    np.testing.assert_array_equal(globetrotter.load(base).encode_text(captions),
                                  globetrotter.load(cfg.run_dir).encode_text(captions))
    # the run's own before/after report, asked for: sentence translation on test (as eval.py sentence)
    report = result["adapt"]
    assert report["language"] == "el" and report["old_languages"] == sorted(old)
    assert report["after"]["new_with_old"] > report["before"]["new_with_old"]
    assert report["after"]["new_with_old"] > 2 * report["after"]["chance_all"]
    assert report["after"]["old_pairs"] == report["before"]["old_pairs"]
    assert json.loads((cfg.run_dir / "result.json").read_text())["adapt"]["after"] == report["after"]
    # an ordinary run folder: its config, the grown tokenizer, evaluable by eval.py
    saved = load_train_config(cfg.run_dir / "config.yaml")
    assert saved.adapt.from_run == str(ckpt.resolve(base).resolve()) and saved.adapt.language == "el"
    from globetrotter.evaluation.cli import main as eval_main

    with pytest.raises(SystemExit) as done:
        eval_main(["sentence", "--model", str(cfg.run_dir), "--split", str(world / "test"), "--out", str(tmp_path / "eval"),
                   "--languages", "el,en"])
    assert done.value.code == 0
    record = json.loads(next((tmp_path / "eval").glob("sentence-*base-el.json")).read_text())
    assert record["metrics"]["sentence_translation"] > record["metrics"]["chance"]


def test_fine_tuning_the_whole_text_side_learns_it_too(world, base, tmp_path, monkeypatch):
    from globetrotter.training.adapt import adaptation, weights

    trainable = []

    def load_start(cfg, model, start, log=print):  # the real one; what trains once it has run
        rows = weights.load_start(cfg, model, start, log)
        trainable.extend(n for n, p in model.named_parameters() if p.requires_grad)
        return rows

    monkeypatch.setattr(adaptation, "load_start", load_start)
    old = ["en", "ru", "ja"]
    old_before = colour_accuracy(base, world, old, old)
    cfg, _ = adapt(base, tmp_path, "adapt.epochs=15", "adapt.train=text")
    # the image side stays the start's: the backbone and both image heads (L_v's too, which no step reaches: a
    # trainable parameter without gradient stops DDP)
    assert any(n.startswith("text.") for n in trainable) and not [n for n in trainable if n.startswith("image")]
    assert colour_accuracy(cfg.run_dir, world, ["el"], old) >= 0.75  # chance: 0.25
    assert colour_accuracy(cfg.run_dir, world, old, old) >= old_before - 0.1
    a, b = globetrotter.load(base).model.state_dict(), globetrotter.load(cfg.run_dir).model.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a if k.startswith("text.transformer"))


def test_old_captions_tokenize_as_before_and_only_new_rows_move(world, base, tmp_path):
    cfg, _ = adapt(base, tmp_path, "adapt.epochs=1")
    before, after = globetrotter.load(base), globetrotter.load(cfg.run_dir)
    assert after.tokenizer.get_vocab_size() > before.tokenizer.get_vocab_size()
    old = [m["caption"] for m in read_captions(world / "train")]
    assert all(a.ids == b.ids for a, b in zip(before.tokenizer.encode_batch(old), after.tokenizer.encode_batch(old)))
    greek = [m["caption"] for m in read_captions(world / "adapt")]
    assert max(len(e.ids) for e in after.tokenizer.encode_batch(greek)) < max(len(e.ids) for e in before.tokenizer.encode_batch(greek))
    a, b = before.model.state_dict(), after.model.state_dict()
    n = before.tokenizer.get_vocab_size()
    assert all(torch.equal(a[k], b[k][:n] if k.endswith(("token_embedding.weight", "cloze_head.bias")) else b[k]) for k in a)
    # the adapted run records what it was adapted from: the very checkpoint (absolute), the language and the split,
    # in its config (beside every checkpoint) and its tokenizer's provenance, which lists the new language
    start = str(ckpt.resolve(base).resolve())
    saved = load_train_config(ckpt.resolve(cfg.run_dir) / "config.yaml")
    assert (saved.adapt.from_run, saved.adapt.language, saved.adapt.split) == (start, "el", "adapt")
    record = read_provenance(ckpt.resolve(cfg.run_dir) / "tokenizer.json")
    assert record["adapt"]["from"] == start and record["adapt"]["split"] == str((world / "adapt").resolve())
    assert provenance_languages(record) == {"en", "ru", "ja", "el"}


@pytest.fixture(scope="module")
def base_ngrams(world, base) -> Path:
    """The base run with subword-informed token vectors (model.token_ngrams); ``base`` built the feature caches."""
    cfg = load_train_config(base / "config.yaml", ["run_name=base-ng", "model.token_ngrams=[2,3]"])
    train(cfg)
    return cfg.run_dir


@pytest.mark.filterwarnings("ignore::globetrotter.texts_cut.TextsCut")  # long captions, cut as in training
def test_adapting_a_run_with_token_ngrams_grows_its_ngram_table_and_keeps_the_old_captions(world, base_ngrams,
                                                                                              tmp_path):
    old = ["en", "ru", "ja"]
    el_before = colour_accuracy(base_ngrams, world, ["el"], old)
    cfg, result = adapt(base_ngrams, tmp_path, "adapt.epochs=30", "val.test_groups=16")
    assert colour_accuracy(cfg.run_dir, world, ["el"], old) >= max(0.75, el_before + 0.25)
    before, after = globetrotter.load(base_ngrams), globetrotter.load(cfg.run_dir)
    captions = [m["caption"] for m in read_captions(world / "test") if m["lang"] != "el"]
    np.testing.assert_array_equal(before.encode_text(captions), after.encode_text(captions))
    assert result["adapt"]["after"]["old_pairs"] == result["adapt"]["before"]["old_pairs"]
    # the old tokens' n-gram rows (idf-free here) and the old n-grams' rows are the start's; Greek brought new ones
    old_matrix, grown = before.model.text.subword.matrix(), after.model.text.subword.matrix()
    n, g = old_matrix.shape
    assert grown.shape[0] == after.tokenizer.get_vocab_size() > n and grown.shape[1] > g
    assert (grown[:n, :g] != old_matrix).nnz == 0 and grown[:n, g:].nnz == 0
    rows_before = before.model.text.subword.ngram_embedding.weight
    rows_after = after.model.text.subword.ngram_embedding.weight
    held_by_old = np.unique(old_matrix.indices)
    torch.testing.assert_close(rows_after[held_by_old], rows_before[held_by_old], rtol=0, atol=0)
    assert rows_after[g:].abs().sum() > 0, "the new language's n-grams trained"


def pixel_base_config(root: str | Path, tmp_path: Path, run_name: str):
    """A tiny base run's config that trains on pixels (a small ResNet), 2 steps, its data under ``root``."""
    from conftest import TINY

    return load_train_config(None, [f"data.root={root}", f"data.tokenizer={tmp_path / 'tokenizer.json'}",
                                    f"output_dir={tmp_path}", f"run_name={run_name}", *TINY, "steps=2",
                                    "model.image_backbone_args.channels=[8,16,16,16]",
                                    "model.image_backbone_args.stem_width=8"])


def test_adapting_from_pixels_runs_and_loads(world, tmp_path, monkeypatch):
    from globetrotter.training.adapt import adaptation, weights

    started = {}

    def load_start(cfg, model, start, log=print):  # the real one; the token rows as the adaptation starts them
        rows = weights.load_start(cfg, model, start, log)
        started["rows"], started["table"] = rows, model.text.token_embedding.weight.detach().clone()
        return rows

    monkeypatch.setattr(adaptation, "load_start", load_start)

    base_cfg = pixel_base_config(world, tmp_path, "pixels")
    train(base_cfg)
    cfg, result = adapt(base_cfg.run_dir, tmp_path, "adapt.epochs=1", "adapt.old_captions=40", "adapt.old_batch=8")
    assert result["step"] == 6 and ckpt.read_state(ckpt.resolve(cfg.run_dir))["step"] == 6
    adapted = globetrotter.load(cfg.run_dir)
    assert adapted.encode_text(["κόκκινο τετράγωνο"]).shape == (1, 16)
    # the steps trained the new language's token rows (adapt.train=new-tokens), and only those
    rows, start = started["rows"], started["table"]
    table = adapted.model.text.token_embedding.weight.detach()
    assert rows is not None and len(rows) > 0 and table.shape == start.shape
    moved = (table[rows] != start[rows]).any(1)
    assert moved.all(), f"{int((~moved).sum())} of {len(rows)} new-language rows kept their start"
    others = torch.ones(len(start), dtype=torch.bool)
    others[rows] = False
    assert torch.equal(table[others], start[others])


def test_an_adaptation_split_of_image_features_is_refused_before_a_pixel_run_writes_anything(tmp_path, capsys):
    """A run trained on pixels (no data.features) reads the adaptation split's pictures through its backbone: a split
    of precomputed ``npy`` features is a one-line error before the run folder is written, not an AttributeError
    (``ndarray.convert``) once the old captions' bank is built."""
    from data_prep.shard_writer import ShardWriter

    world = make_tiny_world(tmp_path / "world", n_train=48, n_val=16, n_test=8, heldout=("el",), n_adapt=16)
    metas = read_captions(world / "adapt")
    shutil.rmtree(world / "adapt")
    with ShardWriter(world / "adapt", split="adapt", source="tiny", image_format="npy") as w:
        for i, m in enumerate(metas):
            w.write(f"adapt-{i:05d}", np.full(8, i, np.float32), m["caption"], m["lang"], str(m["image_id"]))
    base_cfg = pixel_base_config(world, tmp_path, "pixels")
    train(base_cfg)
    code, line = run_cli(capsys, f"adapt.from={base_cfg.run_dir}", "adapt.language=el", f"output_dir={tmp_path}",
                         "run_name=adapted")
    assert code == 2 and line.startswith(f"error: {world / 'adapt'}: its samples are precomputed image features")
    assert "an adaptation without data.features reads pictures" in line
    assert not (tmp_path / "adapted").exists()


def test_the_config_is_the_starting_runs_with_the_file_and_overrides_over_it(base, tmp_path):
    file = tmp_path / "adapt.yaml"
    file.write_text("optim:\n  lr: 0.01\nadapt:\n  epochs: 2\n")
    cfg = load_adapt_config(file, [f"adapt.from={base}", "adapt.language=el", "log_every=7"])
    start = load_train_config(base / "config.yaml")
    assert cfg.model == start.model and cfg.data.root == start.data.root and cfg.loss == start.loss
    assert cfg.optim.lr == 0.01 and cfg.adapt.epochs == 2 and cfg.log_every == 7 and cfg.run_name == "base-el"
    repo_file = Path(__file__).resolve().parents[1] / "configs" / "adapt.yaml"
    assert load_adapt_config(repo_file, [f"adapt.from={base}", "adapt.language=el"]).adapt.train == "new-tokens"


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        train_main(list(argv))
    lines = capsys.readouterr().err.strip().splitlines()
    return stop.value.code, lines[-1] if lines else ""


def test_bad_inputs_are_one_line_errors_with_exit_2(world, base, tmp_path, capsys):
    code, line = run_cli(capsys, f"adapt.from={base}", "adapt.language=ru", f"output_dir={tmp_path}")
    assert code == 2 and line.startswith("error: adapt.language=ru:") and "trained on ru already" in line
    empty = tmp_path / "empty-run"
    empty.mkdir()
    save_config(load_train_config(None, []), empty / "config.yaml")
    code, line = run_cli(capsys, f"adapt.from={empty}", "adapt.language=el", f"output_dir={tmp_path}")
    assert code == 2 and line.startswith("error: adapt.from:") and "no checkpoint found" in line
    code, line = run_cli(capsys, f"adapt.from={base}", "adapt.language=ar", f"output_dir={tmp_path}")
    assert code == 2 and "has no caption in it" in line
    code, line = run_cli(capsys, f"adapt.from={base}", "adapt.language=el", "model.layers=2", f"output_dir={tmp_path}")
    assert code == 2 and line.startswith("error: model.layers: 2 differs from the starting run's 1")
    code, line = run_cli(capsys, "--resume", "latest", f"adapt.from={base}", "adapt.language=el", f"output_dir={tmp_path}")
    assert code == 2 and "--resume" in line and "delete the adapted run's own folder (never adapt.from's)" in line
    for held_out in ("test", "val"):  # never trained on the split it is measured or chosen on
        code, line = run_cli(capsys, f"adapt.from={base}", "adapt.language=el", f"adapt.split={held_out}",
                             f"output_dir={tmp_path}")
        assert code == 2 and f"is the run's {held_out} split" in line, line
    # adapt.vocab_size=0 no longer fails here: el's byte tokens, which no old caption holds, train
    # (test_train_languages: the error where every token of the new language's captions is an old caption's)
    code, line = run_cli(capsys, "adapt.from=somewhere")
    assert code == 2 and "adapt.from needs adapt.language" in line
    before = sorted((p, p.stat().st_mtime_ns) for p in base.rglob("*"))
    code, line = run_cli(capsys, f"adapt.from={base}", "adapt.language=el", f"output_dir={base.parent}",
                         f"run_name={base.name}")  # the adapted run would write over the run it starts from
    # said as such, not as "already holds a run (...); delete the folder to run it again": the starting run's folder
    assert code == 2 and line == f"error: run_name/output_dir: {base} is the starting run's folder; give the adapted run its own"
    assert sorted((p, p.stat().st_mtime_ns) for p in base.rglob("*")) == before
    adapted = load_adapt_config(None, [f"adapt.from={base}", "adapt.language=el", f"output_dir={tmp_path}"])
    with pytest.raises(UserError, match="^resume: an adaptation run is short and starts from adapt.from"):
        train(adapted, resume="latest")  # the Python API: refused as the command line refuses it, naming its argument
    assert not adapted.run_dir.exists()
    with pytest.raises(UserError, match=f"^run_name/output_dir: {base} is the starting run's folder; give the adapted "
                                        "run its own$"):  # resolve_config says why, for a caller of the Python API
        resolve_config(load_adapt_config(None, [f"adapt.from={base}", "adapt.language=el", f"output_dir={base.parent}",
                                                f"run_name={base.name}"]))


def test_an_adaptation_whose_val_split_lacks_the_new_language_chooses_no_best_checkpoint(tmp_path, world):
    """Validation on val cannot see the new language when val has no caption in it (or there is no val split): a
    best checkpoint chosen there would be an arbitrary one, so none is chosen; a val split with it keeps the choice."""
    from globetrotter.training.adapt.start import _selection

    for root, chosen in ((tmp_path, ""), (world, "")):  # no val split; a val split without el (held out)
        cfg = load_train_config(None, [f"data.root={root}", "adapt.language=el", "val.select_by=val/bkr@1"])
        assert (_selection(cfg).select_by, _selection(cfg).select_test) == (chosen, None)
    cfg = load_train_config(None, [f"data.root={world}", "adapt.language=ru", "val.select_by=val/bkr@1"])
    assert _selection(cfg) is cfg.val
    cfg = load_train_config(None, [f"data.root={tmp_path}", "adapt.language=el", "val.every=0"])
    assert _selection(cfg) is cfg.val  # no validation: nothing is chosen anyway, and nothing changed


def test_a_named_cache_serves_every_split_whose_images_it_holds(world, base, tmp_path, capsys):
    """``data.features`` names one cache. Adaptation reads it for any split whose images it holds, as the Flickr8k
    supervised twin needs (it trains on train-parallel and adapts from train: train's cache holds both); a split
    whose images it lacks is read from its own cache, ``<split>/features`` (built with the run's backbone when absent:
    test_adapt_folder), never by rebuilding the named one."""
    import shutil

    root = tmp_path / "world"
    shutil.copytree(world, root)
    shutil.copytree(root / "train", root / "train-copy", ignore=shutil.ignore_patterns("features"))
    cfg = load_train_config(base / "config.yaml", [f"data.root={root}", "data.train_split=train-copy",
                                                   f"data.features={root / 'train' / 'features'}",
                                                   "data.train_languages=[en,ru]", "steps=10", "run_name=copy",
                                                   f"data.tokenizer={tmp_path / 'tokenizer.json'}", f"output_dir={tmp_path}"])
    train(cfg)
    adapted = load_adapt_config(None, [f"adapt.from={cfg.run_dir}", "adapt.language=ja", "adapt.split=train",
                                       "adapt.vocab_size=300", f"output_dir={tmp_path}"])
    assert train(adapted)["step"] > 0
    named = fingerprint(root / "train" / "features")
    el = resolve_config(load_adapt_config(None, [f"adapt.from={cfg.run_dir}", "adapt.language=el",
                                                 f"output_dir={tmp_path}"]))
    ids = [str(m["image_id"]) for m in read_captions(root / "adapt")]
    assert adapt_split.features(el, root / "adapt", ids).path == root / "adapt" / "features"
    assert adapt_split.features(el, root / "train-copy", ids[:0]).path == root / "train" / "features"  # the bank's
    assert fingerprint(root / "train" / "features") == named
    # another split of the named cache's photos (a copy of train: the same checksum) is read from it, never built
    from dataclasses import replace

    shutil.copytree(root / "train-copy", root / "train-twin")
    ja = replace(el, adapt=replace(el.adapt, split=str(root / "train-twin"), language="ja"))
    lines: list[str] = []
    adapt_split.ensure_features(ja, lines.append)
    assert lines == [f"adapt: {root / 'train-twin'}'s image features are read from {root / 'train' / 'features'} "
                     "(built from the same photos)"]
    assert not (root / "train-twin" / "features").exists() and fingerprint(root / "train" / "features") == named
    # other photos under the train split's image names (a manifest with another checksum): never the named cache
    shutil.copytree(root / "train-copy", root / "other-photos")
    manifest = json.loads((root / "other-photos" / "manifest.json").read_text())
    manifest["checksum"] = "sha256:" + "0" * 64
    (root / "other-photos" / "manifest.json").write_text(json.dumps(manifest))
    train_ids = [str(m["image_id"]) for m in read_captions(root / "train")][:5]
    with pytest.raises(UserError, match="no feature cache for adapt.split"):  # its own, which the trainer builds
        adapt_split.features(el, root / "other-photos", train_ids)


def fingerprint(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


def test_grown_tokenizer_keeps_old_ids_and_adds_only_what_old_text_cannot_form():
    old_texts = ["red a square", "blue a square", "синий квадрат"] * 5
    tok = train_tokenizer(old_texts, 300)
    new_texts = ["κόκκινο τετράγωνο", "μπλε τετράγωνο", "red τετράγωνο"] * 5
    grown, added = extend_tokenizer(tok, new_texts, 300, old_texts)
    assert added > 0 and grown.get_vocab_size() == tok.get_vocab_size() + added
    assert all(grown.token_to_id(t) == i for t, i in tok.get_vocab().items())
    assert [grown.encode(t).ids for t in old_texts] == [tok.encode(t).ids for t in old_texts]
    assert len(grown.encode("τετράγωνο").ids) < len(tok.encode("τετράγωνο").ids)
    assert grown.decode(grown.encode("κόκκινο τετράγωνο").ids) == "κόκκινο τετράγωνο"
    assert extend_tokenizer(tok, old_texts, 300, old_texts)[1] == 0  # nothing new to add

    # an uncased tokenizer grows uncased: the new tokens are learnt on folded text, and old texts in any case keep
    # their ids (the check against the old captions reads them folded, with the leading space)
    folded = train_tokenizer(old_texts, 300, normalization="uncased")
    grown, added = extend_tokenizer(folded, ["Κόκκινο Τετράγωνο", "μπλε τετράγωνο"] * 5, 300, old_texts)
    assert added > 0 and grown.encode("Τετράγωνο").ids == grown.encode("τετράγωνο").ids
    texts = [token_bytes(t).decode("utf-8", "ignore") for t, i in grown.get_vocab().items() if i >= len(folded.get_vocab())]
    assert all(text == grown.normalizer.normalize_str(text) for text in texts)  # none that folding would change (no capital)
    assert [grown.encode(t.upper()).ids for t in old_texts] == [folded.encode(t).ids for t in old_texts]


def test_pairs_outside_the_mask_get_no_alpha_and_no_say_in_the_batch_statistics():
    g = torch.Generator().manual_seed(0)
    tx, ix, iv = (torch.randn(6, 4, generator=g) for _ in range(3))
    new = torch.arange(6) < 2
    pairs = new[:, None] | new[None, :]
    for variant in ("paper", "official"):
        alpha = transitive_alpha(tx, ix, iv, variant=variant, pairs=pairs)
        assert torch.all(alpha[2:, 2:] == 0) and torch.equal(alpha, alpha.T)
    official = transitive_alpha(tx, ix, iv, variant="official", pairs=pairs)
    assert float(official.max()) == pytest.approx(1.0)  # the largest allowed pair sets the scale, not the masked ones
    unmasked = transitive_alpha(tx, ix, iv, variant="paper")
    assert torch.equal(transitive_alpha(tx, ix, iv, variant="paper", pairs=pairs), unmasked * pairs)


def test_adapting_a_features_head_run_keeps_its_image_side_and_its_last_checkpoint(world, base, tmp_path, capsys):
    """With ``model.image_head_x: features`` the image head's running mean stays the start's (the image side is
    frozen, statistics included). Val has no Greek: no best checkpoint is kept (it would be the first validated
    one), so ``load`` takes the last. A rerun into the same folder says to delete it (an adaptation does not
    resume); the report names the starting checkpoint; an adapted run's captions count as known to a second one."""
    from globetrotter.training.adapt.start import known_captions

    start_cfg = load_train_config(base / "config.yaml", ["run_name=base-features", "model.image_head_x=features",
                                                          "steps=10"])
    train(start_cfg)
    start = globetrotter.load(start_cfg.run_dir)
    cfg, result = adapt(start_cfg.run_dir, tmp_path, "adapt.epochs=2", "val.every=2", "checkpoint_every=2")
    saved = load_train_config(cfg.run_dir / "config.yaml")
    assert saved.val.select_by == "" and not (cfg.run_dir / "checkpoints" / "best").exists()
    adapted = globetrotter.load(cfg.run_dir)
    assert adapted.checkpoint.name == f"step-{result['step']:08d}"
    a, b = start.model.state_dict(), adapted.model.state_dict()
    image_side = [k for k in a if k.startswith(("image.", "image_head_x.", "image_head_v."))]
    assert any(k.endswith("mean") for k in image_side) and all(torch.equal(a[k], b[k]) for k in image_side)
    assert result["adapt"]["checkpoint"] == str(ckpt.resolve(start_cfg.run_dir).resolve())
    from PIL import Image

    images = [Image.new("RGB", (32, 32), colour) for colour in ((220, 30, 30), (40, 60, 220))]
    np.testing.assert_array_equal(start.encode_image(images), adapted.encode_image(images))
    assert adapted.encode_image([]).shape == (0, adapted.encode_image(images[:1]).shape[1])
    with pytest.raises(TypeError, match="wrap it in a list"):
        adapted.encode_text("κόκκινο τετράγωνο")
    code, line = run_cli(capsys, f"adapt.from={start_cfg.run_dir}", "adapt.language=el", "adapt.vocab_size=300",
                         f"output_dir={tmp_path}")
    assert code == 2 and "delete the folder to run it again" in line and "--resume" not in line, line
    greek = {m["caption"] for m in read_captions(world / "adapt") if m["lang"] == "el"}
    assert greek <= {m["caption"] for m in known_captions(saved, saved)}
    assert not greek & {m["caption"] for m in known_captions(saved, start_cfg)}


def test_a_damaged_checkpoint_is_a_one_line_error(base, tmp_path):
    import shutil

    for damage, message in ((lambda c: (c / "model.safetensors").write_bytes(b"12345"), "cannot load the weights"),
                            (lambda c: (c / "trainer_state.json").write_text("{"), "cannot read the checkpoint's state"),
                            (lambda c: (c / "trainer_state.json").write_text("[]"), "expected a JSON object")):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        shutil.copytree(base, run, ignore=shutil.ignore_patterns("tensorboard"))
        damage(ckpt.resolve(run))
        with pytest.raises(UserError, match=message) as err:
            globetrotter.load(run)
        assert len(str(err.value).splitlines()) == 1


def test_a_warm_up_longer_than_the_adaptation_is_said(base, tmp_path, capsys):
    """A few hundred captions make one epoch a few steps, under the starting run's warm-up (Flickr8k's is 50): the
    learning rate never reaches optim.lr and the new rows barely move, which the run says in one line."""
    capsys.readouterr()
    cfg, result = adapt(base, tmp_path / "short")  # one epoch: 96 el captions / 32 = 3 steps, warm-up 5
    assert result["step"] == 3
    out = capsys.readouterr().out
    assert (f"warning: optim.warmup_steps=5 is above the run's 3 step(s): the learning rate only rises to 60% of "
            f"optim.lr={cfg.optim.lr:g} (the warm-up never ends)") in out
    adapt(base, tmp_path / "warm", "optim.warmup_steps=3")
    assert "warm-up never ends" not in capsys.readouterr().out


def test_adapt_epochs_give_enough_steps_to_read_every_caption_that_often():
    """adapt.epochs passes over the captions: a last partial batch is a step too (rounded up), and at least one."""
    from globetrotter.training.adapt.start import epoch_steps

    assert epoch_steps(1, 10, 4) == 3  # 4 + 4 + 2 captions
    assert epoch_steps(2, 10, 4) == 5  # 20 captions, 5 full batches
    assert epoch_steps(1.5, 12, 4) == 5  # 18 captions: 4 batches and a half
    assert epoch_steps(0.01, 10, 4) == 1


def test_steps_beside_adapt_epochs_is_refused_not_replaced(tiny_run, tmp_path, capsys):
    """adapt.epochs (default 1) sets the adaptation's steps: a steps=N given with it would be replaced in silence."""
    with pytest.raises(UserError, match=r"steps=5 and adapt.epochs=1 both set the adaptation's length"):
        load_adapt_config(None, [f"adapt.from={tiny_run}", "adapt.language=el", "steps=5"])
    assert load_adapt_config(None, [f"adapt.from={tiny_run}", "adapt.language=el", "steps=5",
                                    "adapt.epochs=null"]).steps == 5
    with pytest.raises(SystemExit) as done:
        train_main([f"adapt.from={tiny_run}", "adapt.language=el", "steps=5", f"output_dir={tmp_path}"])
    assert done.value.code == 2 and "adapt.epochs=null" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_unfinished_run_or_weights_that_do_not_load_are_refused_before_anything_is_written(base, tmp_path, capsys):
    """adapt.from=RUN of a run short of its steps (killed, or still training) would adapt a half-trained model in
    silence; weights that do not load failed only once the run folder and its grown tokenizer were written."""
    import shutil

    out = tmp_path / "out"
    unfinished = tmp_path / "unfinished"
    shutil.copytree(base, unfinished, ignore=shutil.ignore_patterns("tensorboard"))
    latest = ckpt.resolve(unfinished, prefer_best=False)
    saved = latest / "config.yaml"
    saved.write_text(saved.read_text().replace("\nsteps: 150\n", "\nsteps: 1000\n"))
    code, line = run_cli(capsys, f"adapt.from={unfinished}", "adapt.language=el", f"output_dir={out}")
    assert code == 2 and line == (f"error: adapt.from={unfinished}: the run is unfinished (its latest checkpoint, "
                                  f"{latest.name}, is at step 150 of steps=1000); finish it with --resume latest, or "
                                  f"name a checkpoint to adapt from it as it is (adapt.from={latest})"), line
    named = resolve_config(load_adapt_config(None, [f"adapt.from={latest}", "adapt.language=el", f"output_dir={out}"]))
    assert named.adapt.from_run == str(latest.resolve())  # a checkpoint named itself is taken as it is
    damaged = tmp_path / "damaged"
    shutil.copytree(base, damaged, ignore=shutil.ignore_patterns("tensorboard"))
    (ckpt.resolve(damaged) / "model.safetensors").write_bytes(b"12345")
    code, line = run_cli(capsys, f"adapt.from={damaged}", "adapt.language=el", f"output_dir={out}")
    assert code == 2 and "model.safetensors: cannot load the weights" in line, line
    assert not out.exists()  # no run folder, no grown tokenizer


def test_old_batch_or_old_captions_above_the_old_captions_is_refused_not_cut(base, tmp_path, capsys):
    """The bank holds the run's 192 en/ru/ja train captions: more was cut in silence."""
    out = tmp_path / "out"
    argv = [f"adapt.from={base}", "adapt.language=el", f"output_dir={out}"]
    code, line = run_cli(capsys, *argv, "adapt.old_batch=1000")
    assert code == 2 and line.startswith("error: adapt.old_batch=1000: more than the bank's 192 old captions"), line
    code, line = run_cli(capsys, *argv, "adapt.old_captions=1000")
    assert code == 2 and line.startswith(f"error: adapt.old_captions=1000: {base} has only 192"), line
    code, line = run_cli(capsys, *argv, "adapt.old_captions=10", "adapt.old_batch=11")
    assert code == 2 and "more than the bank's 10 old captions (adapt.old_captions=10 of" in line, line
    assert not out.exists()
    assert resolve_config(load_adapt_config(None, [*argv, "adapt.old_captions=10", "adapt.old_batch=10"])).steps > 0
    assert resolve_config(load_adapt_config(None, [*argv, "adapt.old_captions=192"])).steps > 0  # every one of them


def test_a_config_without_a_test_split_adapts(base, tmp_path):
    """data.test_split: null (no test split, so no test figures) is a valid config: the check that adapt.split is
    not the run's test split joined the null to data.root and stopped the adaptation with a TypeError."""
    cfg, result = adapt(base, tmp_path, "data.test_split=null", "adapt.epochs=null", "steps=2")
    assert result["step"] == 2 and load_train_config(cfg.run_dir / "config.yaml").data.test_split is None


def test_the_before_after_report_says_the_test_texts_it_cut_in_one_warning(world, base, tmp_path):
    """The report encodes the test sentences four times (before and after; the new language with the old ones, and
    the old ones among themselves): each was a TextsCut line of its own. Now the texts any of them cut are one line,
    counted over the distinct texts encoded, as an eval.py command says them."""
    import warnings

    from globetrotter.evaluation import parallel_set
    from globetrotter.texts_cut import TextsCut

    start = load_train_config(base / "config.yaml", ["data.max_length=4", "steps=2", "run_name=short",
                                                     f"output_dir={tmp_path}"])  # every test caption is cut
    train(start)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg, result = adapt(start.run_dir, tmp_path, "adapt.epochs=null", "steps=2", "val.test_groups=8")
    report = result["adapt"]
    assert report["before"] is not None and report["after"] is not None
    metas, old = read_captions(world / "test"), report["old_languages"]
    texts = {caption for langs in (["el", *old], old)
             for caption in parallel_set(metas, langs, n_groups=8, seed=cfg.seed).captions}
    said = [str(w.message) for w in caught if issubclass(w.category, TextsCut) and Path(w.filename).name != "bank.py"]
    assert said == [f"{len(texts)} of {len(texts)} text(s) are longer than data.max_length=4 tokens and were cut to "
                    f"it, as in training: the tokens past it do not change their embeddings"], said


def test_a_run_trained_with_l_v_alone_is_refused_before_anything_is_written(base, tmp_path, capsys):
    """Adaptation trains the text side with the run's losses, the image side fixed: a run trained with L_v alone left
    it no loss, and it stopped at its first step with a TypeError (the loss was the number 0), its folder written."""
    start = load_train_config(base / "config.yaml", ["loss.text=0", "loss.cross=0", "loss.cloze=0", "steps=2",
                                                     "run_name=image-only", f"output_dir={tmp_path}"])
    train(start)
    out = tmp_path / "out"
    code, line = run_cli(capsys, f"adapt.from={start.run_dir}", "adapt.language=el", f"output_dir={out}")
    assert code == 2 and line.startswith("error: loss: ") and "trains L_v alone" in line, line
    assert not out.exists()


def test_no_validation_keeps_val_select_by_so_no_warning_names_a_key_never_set(base, tmp_path):
    """Emptying val.select_by (val has no el) matters only when the run validates; with val.every=0 (the base run's)
    it only drew "warning: val.select_by= is ignored: val.every=0" on every adaptation."""
    from globetrotter.config_checks import ignored_keys

    argv = [f"adapt.from={base}", "adapt.language=el", f"output_dir={tmp_path}"]
    quiet = resolve_config(load_adapt_config(None, argv))
    assert quiet.val.every == 0 and quiet.val.select_by == load_train_config(base / "config.yaml").val.select_by
    assert not [line for line in ignored_keys(quiet) if line.key == "val.select_by"]
    assert resolve_config(load_adapt_config(None, [*argv, "val.every=5"])).val.select_by == ""


def test_adapt_from_takes_a_run_its_checkpoints_a_checkpoint_or_the_latest_and_best_pointers(base, tmp_path):
    """``checkpoints/latest`` (the pointer file the trainer writes) said "no checkpoint found", to adaptation and to
    every loader: it names the latest checkpoint, taken as it is (best/ too), as a checkpoint named itself is."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(base, run, ignore=shutil.ignore_patterns("tensorboard"))
    latest = ckpt.resolve(run, prefer_best=False)
    shutil.copytree(latest, run / "checkpoints" / "best")
    best = run / "checkpoints" / "best"
    for named, start in ((run, best), (run / "checkpoints", best), (best, best), (latest, latest),
                         (run / "checkpoints" / "latest", latest)):
        cfg = load_adapt_config(None, [f"adapt.from={named}", "adapt.language=el", f"output_dir={tmp_path / 'out'}"])
        assert cfg.run_name == "base-el" and resolve_config(cfg).adapt.from_run == str(start.resolve()), named
        assert ckpt.resolve(named) == start, named  # as `globetrotter.load` and `eval.py --model` read it


def test_a_data_tokenizer_of_the_users_is_refused_not_replaced_by_the_grown_one(base, tmp_path, capsys):
    """Adaptation writes its own tokenizer into the run folder (the run's, grown): a data.tokenizer given with it
    was replaced in silence, and so was a data.tokenizer_normalization. The starting run's own (inherited from its
    saved config) is no key of the user's."""
    out, mine = tmp_path / "out", tmp_path / "mine.json"
    argv = [f"adapt.from={base}", "adapt.language=el", f"output_dir={out}"]
    code, line = run_cli(capsys, *argv, f"data.tokenizer={mine}")
    assert code == 2 and line == (f"error: data.tokenizer={mine}: adaptation writes its own tokenizer, the starting "
                                  f"run's grown by the new language's tokens ({out / 'base-el' / 'tokenizer.json'}); "
                                  f"drop data.tokenizer"), line
    file = tmp_path / "adapt.yaml"
    file.write_text(f"data:\n  tokenizer: {mine}\n")
    with pytest.raises(UserError, match=r"^data.tokenizer=.*drop data.tokenizer$"):
        load_adapt_config(file, argv)
    code, line = run_cli(capsys, *argv, "data.vocab_size=500")
    assert code == 2 and line == ("error: data.vocab_size=500: adaptation keeps the starting run's vocabulary and "
                                  "appends the new language's tokens; set adapt.vocab_size (their BPE's size) "
                                  "instead"), line
    code, line = run_cli(capsys, *argv, "data.tokenizer_normalization=uncased")
    assert code == 2 and line.startswith("error: data.tokenizer_normalization: 'uncased' differs from the starting "
                                         "run's 'none'"), line
    length = load_train_config(base / "config.yaml").data.max_length  # positions the model was built with
    code, line = run_cli(capsys, *argv, f"data.max_length={length + 8}")
    assert code == 2 and line.startswith(f"error: data.max_length: {length + 8} differs from the starting run's "
                                         f"{length}"), line
    assert not out.exists()
    cfg = load_adapt_config(None, argv)
    assert cfg.data.tokenizer == load_train_config(base / "config.yaml").data.tokenizer  # the run's, inherited
    assert resolve_config(cfg).data.tokenizer == str(out / "base-el" / "tokenizer.json")


def test_adapt_keys_without_adapt_from_are_refused_not_a_run_from_scratch(base, tmp_path, capsys, monkeypatch):
    """``train.py --config configs/adapt.yaml`` without adapt.from trained a new model from the defaults (with
    adapt.language=el after a warning that it was ignored). A saved config (adapt.from: null, the other adapt keys
    at their defaults) is an ordinary run's."""
    monkeypatch.chdir(tmp_path)  # the old code read data.root's default, data/synth, from here
    repo_file = Path(__file__).resolve().parents[1] / "configs" / "adapt.yaml"
    out = tmp_path / "out"
    for argv, named in ((["--config", str(repo_file)], "sets adapt.split, adapt.epochs, adapt.train, adapt.vocab_size "
                                                       "without it"),
                        (["--config", str(repo_file), "adapt.language=el"], "adapt.vocab_size, adapt.language without it"),
                        (["adapt.language=el"], "quickstart.yaml + overrides sets adapt.language without it"),
                        (["adapt.from="], "adapt.from='' names none")):
        code, line = run_cli(capsys, *argv, "data.synth=null", f"output_dir={out}")
        assert code == 2 and line.startswith("error: adapt.from is required: the run to adapt (adapt.from=RUN: a run "
                                             "folder or one of its checkpoints); ") and named in line, line
    code, line = run_cli(capsys, "--config", str(repo_file), f"adapt.from={base}", f"output_dir={out}")
    assert code == 2 and line.endswith("adapt.from needs adapt.language (the new language's code)"), line
    assert not any(tmp_path.iterdir())
    assert load_adapt_config(base / "config.yaml").adapt.from_run is None


@pytest.fixture(scope="module")
def adapted(base, tmp_path_factory) -> Path:
    """``base`` adapted to el for its default one epoch, 3 steps (a real adapted run folder: its saved config, with
    the steps resolved from adapt.epochs, and its tokenizer's provenance)."""
    cfg, result = adapt(base, tmp_path_factory.mktemp("adapted"))
    assert result["step"] == 3  # 96 captions / 32
    return cfg.run_dir


def test_translate_word_on_an_adapted_model_reads_the_adaptation_split_and_the_base_train_split(world, adapted,
                                                                                                tmp_path, capsys):
    """No one split holds both el (the adaptation split) and en (the base's train split): translate-word fell back to
    every token of the shared BPE, saying the captions "are not on this machine" though both splits were. Each
    language's tokens now come from the split the tokenizer read them in."""
    from globetrotter.evaluation.cli import main as eval_main

    argv = ["translate-word", "--model", str(adapted), "red", "--from", "en", "--to", "el", "--k", "40", "--json",
            "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as done:
        eval_main(argv)
    captured = capsys.readouterr()
    assert done.value.code == 0, captured.err
    assert (f"vocabulary: the el tokens of {world / 'adapt'} and the en tokens of {world / 'train'}, the model's "
            "training captions") in captured.err
    words = [h["text"] for h in json.loads(captured.out.splitlines()[-1])["results"]]
    assert words and all(not w.isascii() for w in words)  # el's own tokens: Greek


def test_an_adapted_runs_saved_config_re_runs_the_adaptation_and_resume_says_it_does_not_resume(adapted, tmp_path,
                                                                                               capsys):
    """`train.py --config RUN/config.yaml --resume latest` of an adaptation said "steps=3 and adapt.epochs=1 both set
    the adaptation's length" though the user set neither (the saved config records the resolved steps, and the
    grown tokenizer and the base's vocab_size). The resume gets the documented line (an adaptation does not resume),
    and the saved config re-runs the adaptation; a steps the user really sets beside adapt.epochs is still refused."""
    saved = adapted / "config.yaml"
    code, line = run_cli(capsys, "--config", str(saved), "--resume", "latest")
    assert code == 2 and line == ("error: --resume: an adaptation run is short and starts from adapt.from; delete the "
                                  "adapted run's own folder (never adapt.from's) and run it again instead"), line
    assert "does not resume" in Path(__file__).parents[1].joinpath("docs", "training.md").read_text(encoding="utf-8")
    again = resolve_config(load_adapt_config(saved, [f"output_dir={tmp_path}"]))
    assert again.steps == 3 and again.adapt.epochs == 1 and again.data.tokenizer == str(again.run_dir / "tokenizer.json")
    with pytest.raises(SystemExit) as done:
        train_main(["--config", str(saved), f"output_dir={tmp_path}"])
    assert done.value.code == 0 and json.loads((again.run_dir / "result.json").read_text())["step"] == 3
    with pytest.raises(UserError, match=r"steps=5 and adapt.epochs=1 both set the adaptation's length"):
        load_adapt_config(saved, [f"output_dir={tmp_path}", "steps=5"])


def test_an_adapted_runs_result_json_names_the_adaptation_split_as_its_train_split(world, adapted):
    """result.json's data.train named data.root/data.train_split for an adaptation, a split its steps never trained
    on. It now names adapt.split (its path and manifest checksum), and the starting run's train split, read for the
    bank of old captions, as old_captions."""
    from data_prep.shards import read_manifest

    data = json.loads((adapted / "result.json").read_text())["data"]
    assert data["train"]["path"] == str((world / "adapt").resolve())
    assert data["train"]["checksum"] == read_manifest(world / "adapt")["checksum"]
    assert data["old_captions"]["path"] == str((world / "train").resolve())
    assert data["old_captions"]["checksum"] == read_manifest(world / "train")["checksum"]
    assert data["test"]["checksum"] == read_manifest(world / "test")["checksum"]


def test_an_adaptation_with_a_relative_data_root_records_its_train_and_old_captions_splits(world, tmp_path,
                                                                                           monkeypatch):
    """With a relative data.root, result.json's data had neither train nor old_captions: the adaptation split's path,
    already under the root, was joined to it again, and the folder not found there was skipped in silence."""
    from data_prep.shards import read_manifest

    monkeypatch.chdir(world.parent)
    base_cfg = pixel_base_config(world.name, tmp_path, "relative")
    train(base_cfg)
    cfg, _ = adapt(base_cfg.run_dir, tmp_path, "adapt.epochs=1", "adapt.old_captions=40", "adapt.old_batch=8")
    assert not Path(cfg.data.root).is_absolute()
    data = json.loads((cfg.run_dir / "result.json").read_text())["data"]
    for role, split in (("train", "adapt"), ("old_captions", "train"), ("test", "test")):
        assert data[role]["path"] == str((world / split).resolve())
        assert data[role]["checksum"] == read_manifest(world / split)["checksum"]


def test_a_run_adapted_twice_knows_both_its_new_languages(world, tmp_path):
    """Adapted to el, then again to xx: the second run's config names xx and the first run, whose config names el;
    its languages (the next adaptation's old ones, the summary's --languages) hold both, beside the train split's."""
    from globetrotter.training.adapt import trained_languages

    trained = trained_languages(load_train_config(None, [f"data.root={world}"]))
    first = tmp_path / "first"
    first.mkdir()
    save_config(load_train_config(None, [f"data.root={world}", f"adapt.from={tmp_path / 'base'}", "adapt.language=el"]),
                first / "config.yaml")
    second = load_train_config(None, [f"data.root={world}", f"adapt.from={first}", "adapt.language=xx"])
    assert trained == ["en", "ja", "ru"]
    assert trained_languages(second) == ["el", "en", "ja", "ru", "xx"]


def test_the_report_reads_new_to_old_from_the_new_languages_row_and_old_to_new_from_its_column(tmp_path,
                                                                                            monkeypatch):
    """Sentence translation's matrix has a row per query language and a column per target language. With the new
    language el in the middle of [en, el, de]: new->old is the mean of el's row (0.2, 0.4), old->new of el's column
    (0.6, 0.8), new_with_old their mean; the old pairs' figure is that of the run on the old languages only."""
    from types import SimpleNamespace

    from globetrotter.training.adapt import report

    test = tmp_path / "test"
    test.mkdir()
    (test / "manifest.json").write_text("{}")
    monkeypatch.setattr(report, "read_manifest", lambda folder: {"languages": {"en": 4, "el": 4, "de": 4}})
    monkeypatch.setattr(report, "read_captions", lambda folder: [])
    monkeypatch.setattr(report, "parallel_set", lambda metas, langs, **kw: SimpleNamespace(
        captions=list(langs), langs=list(langs), groups=[0] * len(langs)))
    nan = float("nan")
    scored = {("en", "el", "de"): {"matrix": np.array([[nan, 0.6, 0.9], [0.2, nan, 0.4], [0.7, 0.8, nan]]),
                                   "languages": ["en", "el", "de"], "accuracy": 0.55, "chance": 0.5},
              ("en", "de"): {"matrix": np.array([[nan, 0.9], [0.7, nan]]), "languages": ["en", "de"],
                             "accuracy": 0.8, "chance": 0.5}}
    monkeypatch.setattr(report, "sentence_translation",
                        lambda emb, langs, groups, tie_seed: scored[tuple(sorted(langs, key=["en", "el", "de"].index))])
    cfg = load_train_config(None, [f"data.root={tmp_path}", "data.test_split=test", "val.test_groups=4",
                                   "adapt.language=el"])
    out = report.translation(cfg, ["en", "de"], SimpleNamespace(encode_text=lambda captions: captions))
    assert out["new_to_old"] == pytest.approx(0.3) and out["old_to_new"] == pytest.approx(0.7)
    assert out["new_with_old"] == pytest.approx(0.5)
    assert (out["all"], out["chance_all"], out["old_pairs"], out["chance_old"]) == (0.55, 0.5, 0.8, 0.5)
    # no figure without a test split holding the new language, or when the run asks for none
    monkeypatch.setattr(report, "read_manifest", lambda folder: {"languages": {"en": 4, "de": 4}})
    assert report.translation(cfg, ["en", "de"], None) is None


def test_a_run_with_one_old_language_has_no_old_pairs_figure_and_the_summary_says_only_the_new_one(
        tmp_path, monkeypatch, capsys):
    """One old language (en) and the new one (el): the 2 x 2 matrix gives new->old in el's row and old->new in its
    column; there are no old pairs to score (None), and the run's summary prints the new language's line alone."""
    from types import SimpleNamespace

    from globetrotter.training.adapt import report
    from globetrotter.training.report import print_summary

    test = tmp_path / "test"
    test.mkdir()
    (test / "manifest.json").write_text("{}")
    monkeypatch.setattr(report, "read_manifest", lambda folder: {"languages": {"en": 4, "el": 4}})
    monkeypatch.setattr(report, "read_captions", lambda folder: [])
    asked = []

    def parallel_set(metas, langs, **kw):
        asked.append(list(langs))
        return SimpleNamespace(captions=list(langs), langs=list(langs), groups=[0] * len(langs))

    monkeypatch.setattr(report, "parallel_set", parallel_set)
    nan = float("nan")
    monkeypatch.setattr(report, "sentence_translation", lambda emb, langs, groups, tie_seed: {
        "matrix": np.array([[nan, 0.25], [0.75, nan]]), "languages": ["en", "el"], "accuracy": 0.5, "chance": 0.25})
    cfg = load_train_config(None, [f"data.root={tmp_path}", "data.test_split=test", "val.test_groups=4",
                                   "adapt.language=el"])
    out = report.translation(cfg, ["en"], SimpleNamespace(encode_text=lambda captions: captions))
    assert asked == [["el", "en"]]  # the old languages alone are one language: not scored
    assert (out["new_to_old"], out["old_to_new"], out["new_with_old"]) == (0.75, 0.25, 0.5)
    assert out["old_pairs"] is None and out["chance_old"] is None
    before = {**out, "new_with_old": 0.125}
    print_summary({"run_dir": str(tmp_path), "metrics": {}, "adapt": {"language": "el", "before": before, "after": out}})
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("adaptation"))
    assert line == ("adaptation to el (sentence translation on test, before -> after): el with the old languages "
                    "12.5% -> 50.0% (chance 25.0%)")
    with_old = {**out, "old_pairs": 0.8}
    print_summary({"run_dir": str(tmp_path), "metrics": {},
                   "adapt": {"language": "el", "before": {**before, "old_pairs": 0.9}, "after": with_old}})
    assert "; old languages among themselves 90.0% -> 80.0%" in capsys.readouterr().out


def test_a_new_token_whose_text_an_old_caption_holds_is_never_added():
    """The old captions hold "zqx" once, too rare for the old BPE to merge; the new language repeats it. A token
    for it would re-tokenize the old caption (the merge applies to every text), so it is not added, and the old
    captions encode exactly as before."""
    old_texts = ["red a square", "blue a square"] * 5 + ["a zqx"]
    tok = train_tokenizer(old_texts, 300)
    assert tok.token_to_id("Ġzqx") is None and tok.token_to_id("zq") is None
    grown, _ = extend_tokenizer(tok, ["zqx τετράγωνο", "μπλε zqx"] * 5, 300, old_texts)
    assert not [t for t, i in grown.get_vocab().items() if i >= tok.get_vocab_size() and b"zq" in token_bytes(t)]
    assert [grown.encode(t).ids for t in old_texts] == [tok.encode(t).ids for t in old_texts]


def test_the_adaptation_objective_contrasts_new_captions_with_the_bank_but_never_bank_pairs_with_each_other():
    """L_t of an adaptation step over [new captions; bank captions]: a pair counts when one caption of it is new (the
    bank's frozen captions are there to be pulled towards, not to pull each other), the bank entries follow the new
    ones, and the cross-language share reads each caption's own language. Computed here from eq. 1 by hand."""
    from globetrotter.config import LossConfig
    from globetrotter.training.adapt.objective import AdaptationObjective

    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(3, 4, generator=g), torch.randn(4, 4, generator=g)
    new_truth, old_truth = [0, 0, 1], [0, 0, 1, 1]  # bank pairs 0-1 and 2-3 share an image: the mask leaves them out
    batch = {"truth": torch.tensor(new_truth), "langs": ["el"] * 3, "old_text_t": old,
             "old_truth": torch.tensor(old_truth), "old_langs": ["ru", "en", "en", "ja"]}
    tau = 0.1
    cfg = LossConfig(alpha_source="supervised", temperature=tau, text=1.0, image=0.0, cross=0.0, cloze=0.0)
    total, logs = AdaptationObjective(cfg)({"text_t": new}, batch, None)

    z = torch.nn.functional.normalize(torch.cat([new, old]), dim=1)
    truth, langs = new_truth + old_truth, ["el"] * 3 + ["ru", "en", "en", "ja"]
    n, mass, loss, cross = len(truth), 0.0, 0.0, 0
    for i in range(n):
        others = torch.stack([z[i] @ z[k] / tau for k in range(n) if k != i])
        for j in range(n):
            if i != j and truth[i] == truth[j] and (i < 3 or j < 3):  # a true pair with a new caption in it
                loss += float(torch.logsumexp(others, 0) - z[i] @ z[j] / tau)
                mass += 1
                cross += langs[i] != langs[j]
    assert mass == 14  # new 0-1, new 0 and 1 with bank 0 and 1, new 2 with bank 2 and 3; both ways
    assert float(total) == pytest.approx(loss / mass, rel=1e-5)
    assert logs["alpha/cross_language_share"] == pytest.approx(cross / mass)  # 12 of 14: all but the new 0-1 pair


def test_adaptation_batches_split_each_step_among_processes_read_every_caption_once_an_epoch_and_share_the_bank():
    """bank.batches: the processes' slices of a step are disjoint and together the step's global batch; an epoch
    reads every new caption once, the next epoch in another order; a batch is cut to its longest caption; the bank
    entries are the same on every process, each with its own truth, language and features."""
    from dataclasses import replace

    from globetrotter.config import AdaptConfig, TrainConfig
    from globetrotter.training.adapt.bank import Precomputed, batches

    n, length = 12, 6
    lengths = torch.tensor([2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 5])
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = (torch.arange(n)[:, None] * 10 + torch.arange(length)[None, :]) * mask  # caption i's tokens: 10 i + position
    bank_truth = torch.arange(100, 108)
    pre = Precomputed(bank={"text_t": bank_truth[:, None].float().expand(8, 3)}, bank_truth=bank_truth,
                      bank_langs=np.array(["en", "ru"] * 4), ids=ids, mask=mask, truth=torch.arange(n), images=None)
    cfg = replace(TrainConfig(), adapt=replace(AdaptConfig(), language="el"))
    local, world, steps = 2, 2, 6  # 4 captions a step: an epoch is 3 steps
    ranks = [[b for _, b in zip(range(steps), batches(pre, cfg, 3, local, rank, world))] for rank in range(world)]
    epochs = []
    for step in range(steps):
        one, two = ranks[0][step], ranks[1][step]
        assert not set(one["truth"].tolist()) & set(two["truth"].tolist())
        for b in (one, two):
            captions = b["truth"]
            assert b["input_ids"].shape[1] == int(lengths[captions].max())  # the longest caption, whole
            assert torch.equal(b["input_ids"], ids[captions, : b["input_ids"].shape[1]])
            assert b["langs"] == ["el"] * local
            assert torch.equal(b["old_text_t"][:, 0].long(), b["old_truth"])  # each bank entry's own features
            assert b["old_langs"] == ["en" if int(t) % 2 == 0 else "ru" for t in b["old_truth"]]
        assert torch.equal(one["old_truth"], two["old_truth"]) and len(set(one["old_truth"].tolist())) == 3
        if step % 3 == 0:
            epochs.append([])
        epochs[-1] += one["truth"].tolist() + two["truth"].tolist()
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(n))  # every caption once an epoch
    assert epochs[0] != epochs[1]  # reshuffled


def test_grown_rows_keep_the_old_ones_and_start_the_new_ones_at_the_old_spread():
    """The grown vocabulary's rows: the old rows as they were, the new token rows drawn around 0 with the old rows'
    spread, and a new cloze bias entry at the old entries' mean (a new token starts as likely as an average one)."""
    from globetrotter.training.adapt.weights import _grow_rows

    g = torch.Generator().manual_seed(0)
    old = torch.randn(50, 8, generator=g) * 3
    grown = _grow_rows(old, 2050, torch.Generator().manual_seed(1))
    assert grown.shape == (2050, 8) and torch.equal(grown[:50], old)
    assert float(grown[50:].mean()) == pytest.approx(0.0, abs=0.05)
    assert float(grown[50:].std()) == pytest.approx(float(old.std()), rel=0.05)
    bias = torch.tensor([1.0, 2.0, 6.0])
    assert torch.equal(_grow_rows(bias, 5, g), torch.tensor([1.0, 2.0, 6.0, 3.0, 3.0]))


def test_a_bank_smaller_than_batch_size_gives_each_step_the_whole_bank(base, tmp_path, capsys):
    """adapt.old_batch null is batch_size, at most the bank: 10 old captions beside each batch of 32."""
    cfg = load_adapt_config(None, [f"adapt.from={base}", "adapt.language=el", "adapt.vocab_size=300",
                                   f"output_dir={tmp_path}", "adapt.old_captions=10", "adapt.epochs=null", "steps=2"])
    assert cfg.batch_size == 32
    assert train(cfg)["step"] == 2
    said = capsys.readouterr()
    assert "bank of 10 old-language train captions" in said.out + said.err
    assert "10 beside each batch" in said.out + said.err


def test_pixel_image_features_come_in_the_order_asked_with_repeats(world):
    """bank.image_features without a feature cache: one row per asked image id, in the asked order (repeats
    included), each that image's pixels through the backbone."""
    from types import SimpleNamespace

    from globetrotter.data.augment import eval_transform
    from globetrotter.data.feature_cache_build import unique_samples
    from globetrotter.training.adapt.bank import image_features

    from data_prep.shards import decode_sample_image

    cfg = load_train_config(None, ["data.features=null", "data.image_size=16"])
    transform = eval_transform(16)
    pixels = {i: transform(decode_sample_image(data, ext, shard, key).convert("RGB")).flatten()
              for i, ext, data, shard, key in unique_samples(world / "adapt")}
    ids = sorted(pixels)[:5]
    asked = [ids[3], ids[0], ids[4], ids[0], ids[1]]
    model = SimpleNamespace(image=lambda x: x.flatten(1))
    got = image_features(cfg, model, world / "adapt", asked, "cpu", progress=False)
    torch.testing.assert_close(got, torch.stack([pixels[i] for i in asked]))
    with pytest.raises(UserError, match=rf"^{world / 'adapt'}: image 'no-such-image' not found in the shards$"):
        image_features(cfg, model, world / "adapt", [ids[0], "no-such-image"], "cpu", progress=False)
