"""``data.train_languages``: training on some languages of a split, then adapting to a left-out one from that split;
``data.train_image_share``: training on a fixed share of its images."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import globetrotter
from data_prep.shards import read_captions
from data_prep.split_rule import images_by_language
from globetrotter.config import load_train_config
from globetrotter.data.feature_batches import FeatureBatches
from globetrotter.data.feature_cache import cache_dir_for, spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache, ensure_feature_cache
from globetrotter.data.pipeline import make_train_loader
from globetrotter.data.subset import image_share_key, keeps_caption, matching_share
from globetrotter.encoder import build_model
from globetrotter.tokenizer import encode_batch, load_tokenizer, special_ids, token_bytes, train_tokenizer_on_split
from globetrotter.training import token_init
from globetrotter.training.adapt import load_adapt_config
from globetrotter.training.train_set import train_captions
from globetrotter.training.cli import main as train_main
from globetrotter.training.trainer import train

from conftest import make_tiny_world
from test_adapt import FAST, ColourPool, colour_accuracy

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KEPT = ["en", "ja", "ru"]  # el is left out of training: the tiny world's train split captions it too


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Four languages in train (each image in one), the tokenizer learnt on all four, and the train cache."""
    root = make_tiny_world(tmp_path_factory.mktemp("four"), n_train=192, n_test=16)
    train_tokenizer_on_split(root / "train", root / "tokenizer.json", 300)  # with its provenance, as a run trains it
    return root


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    from safetensors.torch import save_file

    from test_feature_cache import small_backbone

    path = tmp_path_factory.mktemp("weights") / "small.safetensors"
    save_file(small_backbone().state_dict(), str(path))
    return path


def config(world: Path, out: Path, weights: Path, *extra: str):
    return load_train_config(None, [f"data.root={world}", f"output_dir={out}", f"model.image_pretrained={weights}",
                                    *FAST, *extra])


@pytest.fixture(scope="module")
def cache(world, weights, tmp_path_factory):
    cfg = config(world, tmp_path_factory.mktemp("c"), weights)
    if not (cache_dir_for(cfg, "train") / "spec.json").is_file():
        build_feature_cache(world / "train", spec_from_config(cfg), cache_dir_for(cfg, "train"), ColourPool(),
                            workers=0, progress=False)
    return ensure_feature_cache(cfg, "train")


@pytest.fixture(scope="module")
def base(world, weights, cache, tmp_path_factory) -> Path:
    """150 steps on en/ja/ru of the four-language train split, from the image-pivot start."""
    out = tmp_path_factory.mktemp("runs")
    cfg = config(world, out, weights, "run_name=noel", "steps=150", "model.token_init=image_pivot",
                 "data.batching=neighbours", f"data.train_languages=[{','.join(KEPT)}]")
    train(cfg)
    return cfg.run_dir


def greek_only_tokens(world: Path) -> list[int]:
    """Ids of the tokens that el's train captions hold and no other language's does, single bytes excepted (the byte
    alphabet spells rare characters of every language)."""
    tok = load_tokenizer(world / "tokenizer.json")
    metas = read_captions(world / "train")
    held = lambda texts: {i for e in tok.encode_batch(texts) for i in e.ids}  # noqa: E731
    greek = held([m["caption"] for m in metas if m["lang"] == "el"])
    others = held([m["caption"] for m in metas if m["lang"] != "el"])
    out = sorted(i for i in greek - others - set(special_ids(tok).values()) if len(token_bytes(tok.id_to_token(i))) > 1)
    assert out, "the shared BPE holds el's tokens"
    return out


# ----------------------------------------------------------------------------- the key


def test_the_key_is_a_checked_list_saved_with_the_run(world, base, tmp_path, capsys):
    assert load_train_config(None, []).data.train_languages is None
    assert load_train_config(base / "config.yaml").data.train_languages == KEPT
    for bad, message in (("[]", "is empty"), ("[en,en]", "duplicates"), ("en", "expected")):
        with pytest.raises(globetrotter.errors.UserError, match=message):
            load_train_config(None, [f"data.train_languages={bad}"])
    with pytest.raises(SystemExit) as stop:
        train_main([f"data.root={world}", f"output_dir={tmp_path}", "run_name=bad", *FAST[:1],
                    "data.train_languages=[en,xx]"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2
    assert line == f"error: data.train_languages: xx not in {world / 'train'} (its languages: el,en,ja,ru)"
    assert not (tmp_path / "bad").exists()
    from globetrotter.training.prepare import with_text_languages  # the Sigurdsson baseline: one table per kept language

    sig = load_train_config(None, [f"data.root={world}", "model.text_encoder=sigurdsson", "loss.cloze=0",
                                   "data.train_languages=[ru,en]"])
    assert with_text_languages(sig).model.languages == ["en", "ru"]


def test_feature_batches_hold_exactly_the_named_languages(world, cache):
    tok = load_tokenizer(world / "tokenizer.json")
    metas = read_captions(world / "train")
    kept = [m for m in metas if m["lang"] in KEPT]
    assert len(kept) < len(metas)
    for batching in ("random", "neighbours"):
        fb = FeatureBatches(world / "train", cache, tok, 32, 16, batching=batching, languages=KEPT)
        assert len(fb.ids) == len(kept) and sorted(set(fb.langs)) == KEPT
        # the captions and images left in are the kept ones, in order
        assert np.array_equal(fb.rows, cache.rows([str(m["image_id"]) for m in kept], world / "train"))
        langs = {lang for step in range(12) for lang in fb.batch(step)["langs"]}
        assert langs == set(KEPT)
        if batching == "neighbours":  # mined among the kept images only: a mate is never an el image
            assert fb.neighbours.max() < len(fb.image_rows)
    everything = FeatureBatches(world / "train", cache, tok, 32, 16, batching="neighbours")
    assert "el" in {lang for step in range(12) for lang in everything.batch(step)["langs"]}


def test_the_pixel_stream_holds_exactly_the_named_languages(world):
    tok = load_tokenizer(world / "tokenizer.json")
    loader = make_train_loader(str(world / "train"), tok, 16, 16, None, shuffle_buffer=50, workers=0,
                               languages=["el", "en"])
    batches = iter(loader)
    langs = [lang for _ in range(30) for lang in next(batches)["langs"]]
    assert set(langs) == {"el", "en"}


def test_the_image_pivot_start_ignores_the_left_out_language(world, weights, cache, tmp_path):
    cfg = config(world, tmp_path, weights, "model.token_init=image_pivot", f"data.train_languages=[{','.join(KEPT)}]")
    tok = load_tokenizer(world / "tokenizer.json")

    def start(c) -> torch.Tensor:
        torch.manual_seed(0)
        model = build_model(c, tok.get_vocab_size())
        token_init.init_from_config(model, c, tok, log=lambda *_: None)
        return model.text.token_embedding.weight.detach().clone()

    torch.manual_seed(0)
    random_rows = build_model(cfg, tok.get_vocab_size()).text.token_embedding.weight.detach().clone()
    without, with_all = start(cfg), start(config(world, tmp_path, weights, "model.token_init=image_pivot"))
    greek = greek_only_tokens(world)
    assert torch.equal(without[greek], random_rows[greek])  # no el caption entered the ridge
    assert not torch.equal(with_all[greek], random_rows[greek])
    # and the rest is the ridge of the kept captions alone
    torch.manual_seed(0)
    model = build_model(cfg, tok.get_vocab_size())
    kept = [m for m in read_captions(world / "train") if m["lang"] in KEPT]
    ids, mask = encode_batch(tok, [m["caption"] for m in kept], cfg.data.max_length)
    feats = np.asarray(cache.features[cache.rows([str(m["image_id"]) for m in kept], world / "train"), 0], np.float32)
    token_init.init_token_embeddings(model.text.token_embedding, torch.tensor(ids), torch.tensor(mask), feats,
                                     cfg.model.token_init_alpha, list(special_ids(tok).values()), log=lambda *_: None)
    assert torch.equal(without, model.text.token_embedding.weight.detach())


# ----------------------------------------------------------------------------- the image share


def test_image_shares_are_nested_about_their_size_and_checked():
    ids = [f"{i}_photo.jpg" for i in range(4000)]
    kept = {share: {i for i in ids if keeps_caption({"image_id": i, "lang": "en"}, None, share)} for share in (0.25, 0.5)}
    for share, images in kept.items():
        assert abs(len(images) / len(ids) - share) < 0.03
    assert kept[0.25] < kept[0.5]  # nested: a learning curve adds images, it never swaps them
    assert not keeps_caption({"image_id": next(iter(kept[0.25])), "lang": "en"}, {"de"}, 0.5)  # and the languages
    for bad in ("0", "1.5", "-0.2"):
        with pytest.raises(globetrotter.errors.UserError, match="train_image_share must be in"):
            load_train_config(None, [f"data.train_image_share={bad}"])


def test_a_matching_share_keeps_exactly_the_slots_asked_for_and_all_when_the_last_image_fills_them():
    """Ten images in two languages each: ``count = 2 j`` keeps the j images of lowest key (2 j slots), and a count that
    only the last image reaches keeps every image (share 1), as does a count past all slots."""
    slots = {f"{i}.jpg": 2 for i in range(10)}
    for j in range(1, 10):
        share = matching_share(slots, 2 * j)
        assert sum(keeps_caption({"image_id": i}, None, share) for i in slots) == j
    assert matching_share(slots, 19) == matching_share(slots, 20) == matching_share(slots, 21) == 1.0
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):  # no share keeps no image at all
        matching_share(slots, 0)


def test_every_train_path_reads_the_same_share_of_images(world, weights, cache, tmp_path):
    share = 0.3
    cfg = config(world, tmp_path, weights, f"data.train_image_share={share}", f"data.train_languages=[{','.join(KEPT)}]")
    metas = read_captions(world / "train")
    kept = [m for m in metas if m["lang"] in KEPT and image_share_key(m["image_id"]) < share]
    assert 0 < len(kept) < 0.5 * len([m for m in metas if m["lang"] in KEPT])
    assert train_captions(cfg) == kept  # what the image-pivot start and an adaptation's old captions read
    tok = load_tokenizer(world / "tokenizer.json")
    for batching in ("random", "neighbours"):
        fb = FeatureBatches(world / "train", cache, tok, 16, 16, batching=batching, languages=KEPT, image_share=share)
        assert np.array_equal(fb.rows, cache.rows([str(m["image_id"]) for m in kept], world / "train"))
    with pytest.raises(globetrotter.errors.UserError, match="no caption in data.train_image_share=1e-09"):
        FeatureBatches(world / "train", cache, tok, 16, 16, image_share=1e-9)
    from globetrotter.training.prepare import ensure_data  # before a run starts, on every path

    with pytest.raises(globetrotter.errors.UserError, match=r"train_image_share=1e-09: keeps no image of .*train"):
        ensure_data(config(world, tmp_path, weights, "data.train_image_share=1e-9"), log=lambda *_: None)
    # the pixel stream: only the kept images' captions (captions repeat across images: 40 batches of the whole split
    # show every distinct caption, of the few kept images only theirs)
    def rows(ids, mask) -> set[tuple[int, ...]]:  # token rows without their padding
        return {tuple(row[:n]) for row, n in zip(np.asarray(ids).tolist(), np.asarray(mask).sum(1).tolist())}

    few = [m for m in metas if image_share_key(m["image_id"]) < 0.08]
    allowed = rows(*encode_batch(tok, [m["caption"] for m in few], 16))
    everything = rows(*encode_batch(tok, [m["caption"] for m in metas], 16))
    assert allowed < everything
    for image_share, wanted in ((0.08, allowed), (1.0, everything)):
        loader = iter(make_train_loader(str(world / "train"), tok, 16, 16, None, shuffle_buffer=50, workers=0,
                                        image_share=image_share))
        seen = set().union(*(rows(b["input_ids"], b["attention_mask"]) for b in (next(loader) for _ in range(40))))
        assert seen == wanted


def test_match_images_of_keeps_exactly_as_many_images_per_language_as_the_named_split(weights, tmp_path):
    """The images-matched twin's share: on a parallel split, exactly the mean images per language of the one-language
    split (train: 24 per language here), the images of lowest hash key; saved with the run; checked values."""
    from globetrotter.config_io import save_config
    from globetrotter.training.prepare import with_matched_image_share

    world = make_tiny_world(tmp_path / "w", n_train=96, n_test=60, heldout=("el",))  # train: en/ja/ru; test: + el
    def twin(*extra):
        return config(world, tmp_path / "runs", weights, "data.train_split=test", "data.match_images_of=train",
                      "loss.alpha_source=supervised", "data.batching=pairs", "data.features=null", *extra)

    per_language = {lang: 32 for lang in ("en", "ja", "ru")}  # 96 train images over three languages
    with pytest.raises(globetrotter.errors.UserError, match=r"match_images_of=train: .*train has no image in el"):
        with_matched_image_share(twin(), log=lambda *_: None)  # the parallel split also shows el, train does not
    cfg = with_matched_image_share(twin("data.train_languages=[en,ja,ru]"), log=lambda *_: None)
    kept = train_captions(cfg)
    assert {lang: len({m["image_id"] for m in kept if m["lang"] == lang}) for lang in per_language} == per_language
    ids = sorted({str(m["image_id"]) for m in read_captions(world / "test")}, key=image_share_key)
    assert {str(m["image_id"]) for m in kept} == set(ids[:32])  # the images of lowest key, as any share keeps
    # on a one-language split (the full model's): as many images per language on average, not in all
    one = with_matched_image_share(config(world, tmp_path / "runs", weights, "data.match_images_of=val",
                                          "data.features=null"), log=lambda *_: None)
    val_per_language = images_by_language(read_captions(world / "val"))
    wanted = round(sum(map(len, val_per_language.values())) / len(val_per_language))
    kept_one = images_by_language(train_captions(one))
    assert sum(map(len, kept_one.values())) == wanted * len(kept_one) > wanted, (wanted, kept_one)
    with pytest.raises(globetrotter.errors.UserError, match=r"train_image_share=0.5 and data.match_images_of=train "
                                                            r"\(which gives 0\.\d+\): set one of them"):
        with_matched_image_share(twin("data.train_languages=[en,ja,ru]", "data.train_image_share=0.5"))
    with pytest.raises(globetrotter.errors.UserError, match=r"match_images_of=nosuch: .*nosuch is not a converted split"):
        with_matched_image_share(twin("data.match_images_of=nosuch"))
    with pytest.raises(globetrotter.errors.UserError, match="match_images_of is empty"):
        twin("data.match_images_of=' '")
    # a run saves the share it found, and its saved config resolves to the same (a resumed run)
    run = twin("data.train_languages=[en,ja,ru]", "steps=2", "run_name=matched", "val.every=0")
    train(run)
    saved = load_train_config(str(run.run_dir / "config.yaml"), [])
    assert saved.data.train_image_share == cfg.data.train_image_share < 1
    assert with_matched_image_share(saved, log=lambda *_: None) == saved
    # resumed as started: the config as given (share 1) is not refused before the data completes it
    longer = train(twin("data.train_languages=[en,ja,ru]", "steps=3", "run_name=matched", "val.every=0"),
                   resume="latest")
    assert longer["step"] == 3
    save_config(saved, tmp_path / "again.yaml")  # and it is a valid config to write and read again
    assert load_train_config(str(tmp_path / "again.yaml"), []) == saved


# ----------------------------------------------------------------------------- adapting to the left-out language


def test_adapting_to_the_left_out_language_trains_its_existing_tokens(world, base, tmp_path):
    # adapt.vocab_size=0: nothing is appended (a larger shared BPE than this world's 300 holds the left-out language's
    # words whole, as Flickr8k's does zh's): what trains is the rows of el's tokens that no training caption held
    cfg = load_adapt_config(None, [f"adapt.from={base}", "adapt.language=el", "adapt.split=train",
                                   "adapt.vocab_size=0", f"output_dir={tmp_path}", "adapt.epochs=40",
                                   "val.test_groups=12"])
    result = train(cfg)
    assert result["step"] == 40 * 48 // 32  # el captions of the train split only
    before, after = globetrotter.load(base), globetrotter.load(cfg.run_dir)
    n = before.tokenizer.get_vocab_size()
    assert after.tokenizer.get_vocab_size() == n
    greek = greek_only_tokens(world)
    a, b = before.model.state_dict(), after.model.state_dict()
    moved = ~torch.isclose(a["text.token_embedding.weight"], b["text.token_embedding.weight"][:n]).all(1)
    assert moved[greek].all()  # the rows of el's tokens that no training caption held trained
    assert set(torch.nonzero(moved).flatten().tolist()) <= set(greek)  # and nothing else: not el's single bytes either
    tok = before.tokenizer
    greek_bytes = [i for e in tok.encode_batch([m["caption"] for m in read_captions(world / "train") if m["lang"] == "el"])
                   for i in e.ids if len(token_bytes(tok.id_to_token(i))) == 1 and tok.id_to_token(i) != "<s>"]
    assert greek_bytes and not moved[greek_bytes].any()
    assert all(torch.equal(a[k], b[k]) for k in a if not k.endswith(("token_embedding.weight", "cloze_head.bias")))
    # every caption of the old languages is encoded exactly as before (train and test)
    old = [m["caption"] for split in ("train", "test") for m in read_captions(world / split) if m["lang"] in KEPT]
    np.testing.assert_array_equal(before.encode_text(old), after.encode_text(old))
    report = result["adapt"]
    assert report["old_languages"] == KEPT and report["after"]["old_pairs"] == report["before"]["old_pairs"]
    el_before, el_after = (colour_accuracy(run, world, ["el"], KEPT) for run in (base, cfg.run_dir))
    assert el_before <= 0.6 and el_after >= 0.9, (el_before, el_after)  # chance: 0.25


def test_adapting_from_the_train_split_errors(world, base, tmp_path, capsys):
    def run(*argv: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as stop:
            train_main([f"adapt.from={base}", "adapt.split=train", f"output_dir={tmp_path}", *argv])
        return stop.value.code, capsys.readouterr().err.strip().splitlines()[-1]

    code, line = run("adapt.language=ar")
    assert code == 2 and "has no caption in it" in line and "(by language: el " in line and ", ru " in line
    code, line = run("adapt.language=ru")
    assert code == 2 and "trained on ru already" in line
    # a language whose captions hold no token of their own (all occur in the old captions): nothing to train
    from PIL import Image

    from data_prep.shard_writer import ShardWriter

    with ShardWriter(world / "adapt-xx", split="adapt", source="tiny", image_format="png") as w:
        for i in range(4):
            w.write(f"xx-{i}", Image.new("RGB", (32, 32)), "red a square", "xx", f"xx{i}")
    code, line = run("adapt.language=xx", "adapt.split=adapt-xx", "adapt.vocab_size=0")
    assert code == 2 and line.startswith("error: adapt.train=new-tokens: no token to train for xx")
    assert not any(tmp_path.glob("*/config.yaml")) and not any(tmp_path.glob("*/tokenizer.json")), \
        "refused before the run folder is written"


def test_neighbour_batching_on_one_training_language_is_refused_at_the_start(tiny_world, tmp_path):
    """data.batching=neighbours pairs captions across languages: on one language it was refused only after the feature
    cache was built, asking for a smaller data.neighbours_k. Now one line before a tokenizer or cache is built.
    Training on one language with random batching stays legitimate (the others are evaluated or adapted to)."""
    from dataclasses import replace

    from globetrotter.training.prepare import ensure_data
    from globetrotter.training.train_set import check_neighbour_languages

    from test_training import tiny_cfg

    def neighbours(cfg):  # the batching alone (its config needs a frozen pretrained backbone's cache, built later)
        return replace(cfg, data=replace(cfg.data, batching="neighbours"))

    with pytest.raises(globetrotter.errors.UserError) as err:
        ensure_data(neighbours(tiny_cfg(tiny_world, tmp_path, "data.train_languages=[en]")))
    assert str(err.value) == ("data.batching=neighbours pairs each caption with a visual neighbour's caption in another "
                              "language, and the run trains on en only (data.train_languages); train on two or more "
                              "languages, or set data.batching=random")
    assert not (tmp_path / "tokenizer.json").exists()
    check_neighbour_languages(tiny_cfg(tiny_world, tmp_path, "data.train_languages=[en]"))
    check_neighbour_languages(neighbours(tiny_cfg(tiny_world, tmp_path, "data.train_languages=[en,ru]")))
