"""The XTD10 adapter (3.1), its training loop over cached features (3.2) and Recall@K retrieval."""
from __future__ import annotations

import argparse
import json
import re
import shutil

import numpy as np
import pytest
import torch

from conftest import strict_json
from globetrotter.config_io import load_config
from globetrotter.errors import UserError
from globetrotter.zeroshot.adapter import TextToImageAdapter
from globetrotter.zeroshot.config import ZeroShotConfig
from globetrotter.zeroshot.retrieval import (chance_recall, format_table, rank_summary, recall_at_k,
                                             target_ranks, zero_shot_recall)
from globetrotter.zeroshot.cli.common import write_json
from globetrotter.zeroshot.train import META, load_adapter, save_adapter, train_adapter


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_adapter_blocks_follow_the_paper():
    adapter = TextToImageAdapter(text_dim=8, image_dim=6, hidden_dims=(5, 7), dropout=(0.2, 0.1, 0.0))
    fcs = [m for m in adapter.modules() if isinstance(m, torch.nn.Linear)]
    assert [(fc.in_features, fc.out_features) for fc in fcs] == [(8, 5), (5, 7), (7, 6)]
    drops = [m.p for m in adapter.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops == [0.2, 0.1, 0.0]
    adapter.eval()
    x = torch.randn(4, 8)
    h1 = adapter.blocks[0](x)
    h2 = adapter.blocks[1](h1)
    out = adapter.blocks[2](h2)
    # blocks 1 and 2 end in an L2-norm (rows of unit length, or zero when ReLU killed them all)
    for h in (h1, h2):
        norms = h.norm(dim=1)
        assert torch.all((norms - 1).abs() < 1e-5) or torch.all((norms < 1e-6) | ((norms - 1).abs() < 1e-5))
    # the last block has no L2-norm but keeps its ReLU: non-negative, not normalised
    big = adapter(torch.randn(64, 8) * 50)
    assert torch.all(big >= 0)
    torch.testing.assert_close(adapter(x), out)
    torch.testing.assert_close(out, torch.relu(h2 @ fcs[2].weight.T + fcs[2].bias))  # FC -> ReLU, no L2-norm
    # manual recomputation of block 1: relu(W x + b) / ||.||
    fc = fcs[0]
    ref = torch.relu(x @ fc.weight.T + fc.bias)
    torch.testing.assert_close(h1, ref / ref.norm(dim=1, keepdim=True).clamp_min(1e-12))


def test_embed_is_the_eval_forward_and_keeps_the_training_mode():
    """embed() projects without dropout (the same output every call) and leaves a training adapter training."""
    torch.manual_seed(0)
    adapter = TextToImageAdapter(8, 6, hidden_dims=[16], dropout=[0.5, 0.5], form="residual").train()
    x = torch.randn(10, 8)
    got = adapter.embed(x, batch_size=3)
    assert adapter.training
    with torch.no_grad():
        expected = adapter.eval()(x)
    torch.testing.assert_close(got, expected)


def test_adapter_rejects_wrong_dropout_count():
    with pytest.raises(ValueError, match="one rate per block"):
        TextToImageAdapter(8, 6, hidden_dims=(5,), dropout=(0.1, 0.1, 0.1))


@pytest.mark.parametrize("form", ["xtd10", "residual"])
def test_adapter_refuses_a_bare_number_for_its_lists_naming_the_argument(form):
    """As AdapterConfig.validate refuses adapter.dropout: 0.1: called directly, the module raised a bare TypeError
    (object of type 'float' has no len(), or 'float' object is not iterable)."""
    with pytest.raises(ValueError, match=r"^dropout expected a sequence of rates, one per block, got 0\.1$"):
        TextToImageAdapter(8, 6, hidden_dims=[5], dropout=0.1, form=form)
    with pytest.raises(ValueError, match=r"^hidden_dims expected a sequence of widths, got 5$"):
        TextToImageAdapter(8, 6, hidden_dims=5, dropout=[0.1, 0.1], form=form)
    with pytest.raises(ValueError, match=r"^dropout expected a sequence of rates, one per block, got '0\.1'$"):
        TextToImageAdapter(8, 6, hidden_dims=[5], dropout="0.1", form=form)
    assert TextToImageAdapter(8, 6, hidden_dims=(5,), dropout=(0.1, 0.0), form=form)(torch.randn(2, 8)).shape == (2, 6)


def test_paper_config_is_the_papers_and_errors_are_one_line():
    from pathlib import Path

    cfg = load_config(ZeroShotConfig, Path(__file__).resolve().parents[1] / "configs" / "zeroshot" / "xtd10.yaml")
    assert cfg.adapter.form == "xtd10"
    assert cfg.adapter.hidden_dims == [1024, 2048] and cfg.adapter.dropout == [0.2, 0.1, 0.0]
    assert (cfg.loss.name, cfg.loss.margin_scale, cfg.metric) == ("patr", 1.0, "l2")
    assert (cfg.loss.rho, cfg.loss.alpha1, cfg.loss.alpha2) == (4.0, 0.5, 1.0)
    assert cfg.loss.margin is None and cfg.adapter.output_scale is None  # measured on the training images
    assert (cfg.optim.lr, cfg.optim.beta1, cfg.optim.batch_size, cfg.optim.epochs) == (1e-3, 0.99, 128, 50)
    defaults = ZeroShotConfig()  # the project's system: residual adapter, cosine ranking
    assert (defaults.adapter.form, defaults.metric, defaults.loss.name) == ("residual", "cosine", "patr")
    with pytest.raises(UserError, match="adapter.dropout"):
        load_config(ZeroShotConfig, overrides=["adapter.form=xtd10", "adapter.hidden_dims=[8,8]",
                                               "adapter.dropout=[0.1]"])
    with pytest.raises(UserError, match="residual form is one width"):
        load_config(ZeroShotConfig, overrides=["adapter.hidden_dims=[8,8]"])
    with pytest.raises(UserError, match="loss.margin_scale"):
        load_config(ZeroShotConfig, overrides=["loss.margin_scale=0"])
    with pytest.raises(UserError, match="loss.name"):
        load_config(ZeroShotConfig, overrides=["loss.name=hinge"])


@pytest.mark.parametrize("override, said", [
    ("optim.lr=nan", "optim.lr must be > 0 and finite, got nan"),
    ("optim.lr=inf", "optim.lr must be > 0 and finite, got inf"),
    ("optim.weight_decay=-1", "optim.weight_decay must be >= 0 and finite, got -1"),
    ("optim.weight_decay=nan", "optim.weight_decay must be >= 0 and finite, got nan"),
    ("loss.rho=nan", "loss.rho must be > 0 and finite, got nan"),
    ("loss.alpha1=nan", "loss.alpha1 must be >= 0 and finite, got nan"),
    ("loss.alpha2=inf", "loss.alpha2 must be >= 0 and finite, got inf"),
    ("loss.margin=nan", "loss.margin must be >= 0 and finite, or null, got nan"),
    ("loss.margin_scale=inf", "loss.margin_scale must be > 0 and finite, got inf"),
    ("adapter.output_scale=inf", "adapter.output_scale must be > 0 and finite, or null, got inf"),
    ("adapter.dropout=[]", "adapter.dropout needs one rate per block, got none"),
    ("adapter.dropout=[0.1,1.0]", "adapter.dropout rates must be in [0, 1), got [0.1, 1.0]"),
    ("adapter.hidden_dims=[0]", "adapter.hidden_dims must be positive, got [0]"),
    ("optim.batch_size=1", "optim.batch_size must be an integer >= 2 (negatives come from the batch), got 1"),
    ("optim.epochs=0", "optim.epochs must be an integer >= 1, got 0"),
    ("optim.beta2=1", "optim.beta1 and optim.beta2 must be in [0, 1)"),
    ("train_langs=[]", "train_langs must name at least one language"),
    ("max_captions_per_image=0", "max_captions_per_image must be >= 1 or null, got 0"),
])
def test_non_finite_and_negative_config_values_are_refused_up_front(override, said):
    """NaN passed `rho <= 0`, `lr <= 0`... (every comparison with NaN is False) and weight_decay was never checked:
    they failed late (NaN losses, a torch traceback for weight_decay=-1); one line before any work now."""
    with pytest.raises(UserError, match=r"^<defaults> \+ overrides: " + re.escape(said)):
        load_config(ZeroShotConfig, overrides=[override])


@pytest.mark.parametrize("options, key, value", [({"dropout": 0.1}, "adapter.dropout", "0.1"),
                                                 ({"form": "xtd10", "dropout": 0.1}, "adapter.dropout", "0.1"),
                                                 ({"hidden_dims": 64}, "adapter.hidden_dims", "64")])
def test_an_adapter_config_of_a_bare_number_is_refused_from_python_as_from_yaml(options, key, value):
    """AdapterConfig(dropout=0.1).validate() was a raw TypeError ('float' object is not iterable); YAML said it."""
    from globetrotter.zeroshot.config import AdapterConfig

    with pytest.raises(ValueError, match=rf"^{re.escape(key)} expected a list \(one entry per block\), got {value}$"):
        AdapterConfig(**options).validate()
    with pytest.raises(UserError, match=rf"key '{re.escape(key)}' expected a list, got {value}"):
        load_config(ZeroShotConfig, overrides=[f"{key}={value}"])


def test_train_names_a_train_language_the_text_encoder_lacks(tmp_path, capsys):
    """train_langs=[en,cs] with mUSE (no cs) ran with no note; retrieval and tag name cs."""
    from globetrotter.zeroshot.cli import main

    assert main(["train", "--train", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "train_langs=[en,cs]"]) == 2
    assert "note: the text encoder 'use' was not trained on cs\n" in capsys.readouterr().out


def test_a_language_named_twice_in_train_langs_is_refused():
    """train_langs=[en,en] was accepted (and printed en/en) while --languages en,en is refused."""
    with pytest.raises(UserError, match=r"overrides: train_langs names en more than once, got \['en', 'en', 'de'\]$"):
        load_config(ZeroShotConfig, overrides=["train_langs=[en,en,de]"])


def test_train_langs_of_one_bare_code_is_refused_from_python():
    """ZeroShotConfig(train_langs="en").validate() passed, and the string was read as the languages e and n."""
    with pytest.raises(ValueError, match=r"^train_langs expected a list of language codes, got 'en'$"):
        ZeroShotConfig(train_langs="en").validate()
    ZeroShotConfig(train_langs=("en", "de")).validate()  # a tuple is a list of codes too


def test_residual_adapter_blocks_are_pre_norm_skips_of_one_width():
    from globetrotter.zeroshot.adapter import ResidualBlock

    adapter = TextToImageAdapter(8, 6, hidden_dims=[5], dropout=[0.0, 0.3], form="residual")
    blocks = [m for m in adapter.modules() if isinstance(m, ResidualBlock)]
    assert len(blocks) == 2 and [m.p for m in adapter.modules() if isinstance(m, torch.nn.Dropout)] == [0.0, 0.3]
    fcs = [m for m in adapter.modules() if isinstance(m, torch.nn.Linear)]
    assert [(fc.in_features, fc.out_features) for fc in fcs] == [(8, 5), (5, 5), (5, 5), (5, 5), (5, 5), (5, 6)]
    x = torch.randn(3, 5)
    with torch.no_grad():  # a block whose last layer is zero is the identity: the skip carries x through
        blocks[0].mlp[-1].weight.zero_()
        blocks[0].mlp[-1].bias.zero_()
    torch.testing.assert_close(blocks[0](x), x)
    assert (adapter.eval()(torch.randn(64, 8) * 50) < 0).any()  # the output is not clamped at 0
    on_sphere = TextToImageAdapter(8, 6, hidden_dims=[5], dropout=[0.0], output_scale=3.0, form="residual",
                                   normalize_output=True)
    torch.testing.assert_close(on_sphere(torch.randn(4, 8) * 9).norm(dim=1), torch.full((4,), 3.0))
    with pytest.raises(ValueError, match="one width"):
        TextToImageAdapter(8, 6, hidden_dims=[5, 7], dropout=[0.1], form="residual")
    with pytest.raises(ValueError, match="unknown adapter form"):
        TextToImageAdapter(8, 6, form="dense")


def test_recall_matches_brute_force_ranking():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(50, 6)).astype(np.float32)
    queries = images[rng.integers(0, 50, 30)] + rng.normal(scale=1.0, size=(30, 6)).astype(np.float32)
    targets = rng.integers(0, 50, 30)
    targets[:15] = [int(np.argmin(((images - q) ** 2).sum(1))) for q in queries[:15]]  # half are hits at rank 1
    got = recall_at_k(queries, images, targets, ks=(1, 5, 10))
    dist = ((queries[:, None, :] - images[None]) ** 2).sum(-1)
    rank = (dist < dist[np.arange(30), targets][:, None]).sum(1)  # 0-based rank of the target
    for k in (1, 5, 10):
        assert got[f"image_retrieval_recall@{k}"] == pytest.approx(float((rank < k).mean()))
    # cosine ranks by angle: a scaled copy of an image is its own nearest neighbour
    assert recall_at_k(images[:5] * 7.0, images, np.arange(5), ks=(1,), metric="cosine") == {
        "image_retrieval_recall@1": 1.0
    }
    # the ranks behind Recall@K: 1-based, small chunks give the same, the median and intervals follow from them
    ranks = target_ranks(queries, images, targets, chunk=7)
    assert ranks.tolist() == (rank + 1).tolist()
    cos = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
        images / np.linalg.norm(images, axis=1, keepdims=True)).T
    cos_rank = (cos > cos[np.arange(30), targets][:, None]).sum(1) + 1
    assert target_ranks(queries, images, targets, "cosine").tolist() == cos_rank.tolist()
    # a tie counts against the query: outputs that tell no images apart rank every target last, and an image's
    # duplicate in the gallery puts it second
    assert (target_ranks(np.zeros((4, images.shape[1])), images, [0, 1, 2, 3], "cosine") == 50).all()
    doubled = np.concatenate([images, images[:1]])
    assert target_ranks(images[:1], doubled, [0], "cosine").tolist() == [2]
    assert recall_at_k(np.zeros((4, images.shape[1])), images, [0, 1, 2, 3], ks=(10,), metric="cosine") == {
        "image_retrieval_recall@10": 0.0}
    summary = rank_summary(ranks, ks=(1, 10), n_boot=200)
    assert summary["metrics"]["median_rank"] == float(np.median(rank + 1))
    r10 = summary["intervals"]["image_retrieval_recall@10"]
    assert r10["value"] == summary["metrics"]["image_retrieval_recall@10"] and r10["lo"] <= r10["value"] <= r10["hi"]
    assert r10["hi"] - r10["lo"] > 0.05  # 30 queries: a wide interval
    assert chance_recall(200) == {
        "image_retrieval_recall@1": 0.005,
        "image_retrieval_recall@5": 0.025,
        "image_retrieval_recall@10": 0.05,
    }


def _synthetic_pairs(n_images: int, caps_per_image: int, image_dim: int = 64, text_dim: int = 128, seed: int = 0):
    """Images with non-negative features; each caption is a fixed random linear map of its
    image plus noise, L2-normalised (a stand-in for frozen sentence embeddings)."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.relu(torch.randn(n_images, image_dim, generator=gen))
    mix = torch.randn(image_dim, text_dim, generator=gen) / image_dim**0.5
    caption_image = torch.arange(n_images).repeat_interleave(caps_per_image)
    text = images[caption_image] @ mix + 0.1 * torch.randn(len(caption_image), text_dim, generator=gen)
    return torch.nn.functional.normalize(text, dim=1), images, caption_image


def _small_config(*overrides: str) -> ZeroShotConfig:
    base = ["adapter.form=xtd10", "adapter.hidden_dims=[128,128]", "adapter.dropout=[0.2,0.1,0.0]",
            "optim.epochs=20", "optim.batch_size=32", "optim.beta1=0.99"]
    return load_config(ZeroShotConfig, overrides=[*base, *overrides])


def test_patr_training_learns_a_retrieval_mapping(tmp_path):
    text, images, caption_image = _synthetic_pairs(300, 2)
    cfg = _small_config("loss.name=patr", "loss.margin=null")
    train_rows = caption_image < 250
    adapter, history = train_adapter(text[train_rows], images, caption_image[train_rows], cfg, progress=False)
    assert history.loss[-1] < history.loss[0] and history.samples_per_s > 0
    # eta = margin_scale x the mean squared distance between two images trained on (0..249, not the held-out
    # 250..299 that share the features tensor); output scale = their mean feature norm
    typical = float(torch.pdist(images[:250]).pow(2).mean())
    assert history.margin == pytest.approx(cfg.loss.margin_scale * typical, rel=1e-4)
    assert history.output_scale == pytest.approx(float(images[:250].norm(dim=1).mean()), rel=1e-5)
    # held-out images 250..299, never trained on
    test_rows = ~train_rows
    metrics = recall_at_k(adapter.embed(text[test_rows]), images[250:], caption_image[test_rows] - 250, ks=(1, 5))
    assert metrics["image_retrieval_recall@1"] > 10 * chance_recall(50)["image_retrieval_recall@1"]
    # a checkpoint round-trips to identical outputs
    save_adapter(adapter, cfg, tmp_path / "ckpt", text_encoder="npy:x")
    loaded, cfg2, meta = load_adapter(tmp_path / "ckpt")
    assert cfg2 == cfg and meta["text_encoder"] == "npy:x"
    torch.testing.assert_close(loaded.embed(text[:5]), adapter.embed(text[:5]))
    # per-language layout of Tables 2/3
    table = zero_shot_recall(adapter, {"en": text[test_rows]}, {"en": caption_image[test_rows] - 250}, images[250:])
    assert set(table) == {"en"} and table["en"]["image_retrieval_recall@1"] == metrics["image_retrieval_recall@1"]
    assert format_table({"patr": table}).splitlines()[1].startswith("patr")


def test_m3l_training_lowers_its_loss_and_pushes_negative_texts_apart():
    """M3L's claim (XTD10 3.2): the negative-text term as written pushes dissimilar texts away from the anchor."""
    from globetrotter.zeroshot.losses import mine_hard_negatives, squared_distance

    text, images, caption_image = _synthetic_pairs(200, 2)
    cfg = _small_config("loss.name=m3l", "loss.text_term=anchor")

    def ratio_to_negative_text(adapter) -> float:
        out = adapter.embed(text[:128])
        index, _ = mine_hard_negatives(out, images[caption_image[:128]], caption_image[:128])
        d_pos = squared_distance(out, images[caption_image[:128]])
        return float((squared_distance(out, out[index]) / d_pos).median())

    torch.manual_seed(cfg.optim.seed)
    before = ratio_to_negative_text(TextToImageAdapter(128, 64, [128, 128], [0.2, 0.1, 0.0],
                                                       float(images.norm(dim=1).mean())))
    adapter, history = train_adapter(text, images, caption_image, cfg, progress=False)
    assert history.loss[-1] < 1e-2 * history.loss[0]
    assert ratio_to_negative_text(adapter) > 10 * before


def test_validation_keeps_the_best_epoch():
    text, images, caption_image = _synthetic_pairs(40, 2)
    cfg = load_config(ZeroShotConfig, overrides=["adapter.hidden_dims=[16]", "adapter.dropout=[0.0,0.0]", "optim.epochs=4"])
    scores, states = iter([0.1, 0.9, 0.2, 0.3]), []

    def validate(adapter):  # each epoch's weights, as validated
        states.append({k: v.clone() for k, v in adapter.state_dict().items()})
        return next(scores)

    adapter, history = train_adapter(text, images, caption_image, cfg, validate=validate, progress=False)
    assert history.best_epoch == 1 and history.val == [0.1, 0.9, 0.2, 0.3]
    kept = adapter.state_dict()
    assert all(torch.equal(kept[k], states[1][k]) for k in kept)  # the returned weights are the best epoch's
    assert not all(torch.equal(kept[k], states[-1][k]) for k in kept)  # not the last epoch's


def test_a_validation_tie_keeps_the_earlier_epoch():
    """validation_recall's docstring: on a tie the first epoch is kept (a later one must score higher)."""
    text, images, caption_image = _synthetic_pairs(40, 2)
    cfg = load_config(ZeroShotConfig, overrides=["adapter.hidden_dims=[16]", "adapter.dropout=[0.0,0.0]", "optim.epochs=3"])
    scores = iter([0.2, 0.5, 0.5])
    _, history = train_adapter(text, images, caption_image, cfg, validate=lambda _a: next(scores), progress=False)
    assert history.best_epoch == 1


def test_validation_refuses_a_val_split_of_exactly_k_images():
    from globetrotter.zeroshot.data import SplitFeatures
    from globetrotter.zeroshot.train import validation_recall

    def split(n):
        return SplitFeatures(texts=[f"t{i}" for i in range(n)], langs=np.array(["en"] * n, dtype=object),
                             groups=np.array([f"g{i}" for i in range(n)], dtype=object), caption_image=np.arange(n),
                             image_keys=[f"i{i}" for i in range(n)], text_features=np.eye(n, dtype=np.float32),
                             image_features=np.eye(n, dtype=np.float32))

    with pytest.raises(UserError, match=r"^val split: 3 image\(s\), not more than the validation K \(3\)"):
        validation_recall(split(3), ["en"], k=3)
    assert validation_recall(split(4), ["en"], k=3)(_Identity()) == 1.0


def test_train_on_split_counts_the_images_its_captions_show():
    """meta.json's n_images: the images the trained-on captions show, not the split's whole gallery."""
    from globetrotter.zeroshot.data import SplitFeatures
    from globetrotter.zeroshot.train import train_on_split

    text, images, caption_image = _synthetic_pairs(6, 2, image_dim=8, text_dim=12)
    split = SplitFeatures(texts=[f"t{i}" for i in range(12)], langs=np.array(["en"] * 4 + ["de"] * 8, dtype=object),
                          groups=np.array([f"g{i}" for i in caption_image.tolist()], dtype=object),
                          caption_image=caption_image.numpy(), image_keys=[f"i{i}" for i in range(6)],
                          text_features=text.numpy(), image_features=images.numpy())
    rows = split.rows("en")  # the captions of images 0 and 1
    cfg = load_config(ZeroShotConfig, overrides=["adapter.hidden_dims=[8]", "adapter.dropout=[0.0]", "optim.epochs=1"])
    _, meta = train_on_split(split, rows, cfg, progress=False)
    assert meta["n_captions"] == 4 and meta["n_images"] == len(set(caption_image[:4].tolist())) == 2


def test_load_adapter_missing_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not an adapter checkpoint"):
        load_adapter(tmp_path)


def _write_split(root, split, images, captions, prefix="img"):
    """A shard split with npy image features; ``captions`` = [(caption, lang, image_row)], image ids prefix + row."""
    from data_prep.shard_writer import ShardWriter

    with ShardWriter(root / split, split=split, source="test", image_format="npy") as writer:
        for i, (caption, lang, row) in enumerate(captions):
            writer.write(f"s{i}", images[row], caption, lang, image_id=f"{prefix}{row}", group=f"{prefix}{row}")


def test_train_and_retrieval_commands_end_to_end(tmp_path, capsys):
    """Shards with npy image features and a frozen ``npy:`` text encoder whose captions of
    an image are a fixed linear map of it, in two 'languages' sharing that map."""
    import json

    from globetrotter.zeroshot.cli import main

    rng = np.random.default_rng(0)
    n_train, n_test, di, dt = 200, 40, 32, 48
    images = np.maximum(rng.normal(size=(n_train + n_test, di)), 0).astype(np.float32)
    mix = rng.normal(size=(di, dt)).astype(np.float32) / np.sqrt(di)
    texts, vectors = [], []

    def caption(row, lang, k):
        text = f"{lang} caption {k} of image {row}"
        texts.append(text)
        vectors.append(images[row] @ mix + 0.05 * rng.normal(size=dt))
        return text, lang, row

    train = [caption(r, "en", k) for r in range(n_train) for k in range(2)] + [caption(r, "xx", 0) for r in range(20)]
    test = [caption(r, lang, 0) for r in range(n_train, n_train + n_test) for lang in ("en", "xx")]
    _write_split(tmp_path, "train", images, train)
    _write_split(tmp_path, "test", images, test)
    np.save(tmp_path / "text.npy", np.asarray(vectors, dtype=np.float32))
    (tmp_path / "text.npy.texts.json").write_text(json.dumps(texts), encoding="utf-8")
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    code = main(["train", "--train", str(tmp_path / "train"), "--out", str(tmp_path / "patr"), *common,
                 f"text_encoder=npy:{tmp_path / 'text.npy'}", "loss.name=patr", "loss.margin=null",
                 "adapter.hidden_dims=[64]", "optim.epochs=40", "optim.batch_size=32",
                 "max_captions_per_image=1"])
    assert code == 0
    meta = json.loads((tmp_path / "patr" / "meta.json").read_text())
    assert meta["n_captions"] == n_train and meta["n_images"] == n_train  # English only, first caption per image
    code = main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", f"patr={tmp_path / 'patr'}",
                 "--out", str(tmp_path / "r.json"), *common])
    assert code == 0
    record = json.loads((tmp_path / "r.json").read_text())
    metrics = record["models"]["patr"]["metrics"]
    assert set(metrics) == {"en", "xx"} and record["models"]["patr"]["n_queries"] == {"en": n_test, "xx": n_test}
    assert record["chance"]["image_retrieval_recall@10"] == pytest.approx(10 / n_test)
    # the unseen 'language' shares the text space, so zero-shot transfer works there too
    for lang in ("en", "xx"):
        assert metrics[lang]["image_retrieval_recall@10"] > 2 * record["chance"]["image_retrieval_recall@10"]
    printed = capsys.readouterr()
    assert "Recall@10" in printed.out and "replaces" not in printed.err
    # a second record into the same --json replaced the first in silence: now said, as eval.py says it
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", f"patr={tmp_path / 'patr'}",
                 "--out", str(tmp_path / "r.json"), *common]) == 0
    assert f"wrote {tmp_path / 'r.json'} (it replaces an earlier record" in capsys.readouterr().err
    # the adapter's meta.json and the record named neither the options nor the versions they were made with
    import globetrotter

    assert meta["inputs"]["train"] == str(tmp_path / "train") and meta["inputs"]["overrides"][1] == "loss.name=patr"
    assert meta["versions"]["globetrotter"] == globetrotter.__version__ and "torch" in meta["versions"]
    again = json.loads((tmp_path / "r.json").read_text())
    assert again == record  # the same command twice: the same record, bit for bit
    assert record["inputs"]["adapter"] == [["patr", str(tmp_path / "patr")]] and record["inputs"]["ks"] == [1, 5, 10]
    assert record["inputs"]["cache_dir"] == str(tmp_path / "cache") and record["inputs"]["device"] == "cpu"
    assert record["versions"] == meta["versions"]
    # the splits were named by their paths only: now with their manifests' checksums, as eval.py's records name them
    from data_prep.shards import read_manifest

    for split, named in (("train", meta["train"]), ("test", record["dataset"])):
        assert named["path"] == str((tmp_path / split).resolve()) and named["split"] == split
        assert named["checksum"] == read_manifest(tmp_path / split)["checksum"] and named["checksum"]
    assert meta["val"] is None
    # user errors: one line, exit code 2
    assert main(["retrieval", "--test", str(tmp_path / "nope"), "--adapter", str(tmp_path / "patr"), *common]) == 2
    assert main(["train", "--train", str(tmp_path / "train"), "--out", str(tmp_path / "x"), "loss.rho=-1"]) == 2
    err = capsys.readouterr().err
    assert "split directory not found" in err and "loss.rho must be > 0" in err


def test_epoch_loss_is_the_mean_over_the_batches_trained_on():
    """33 captions in batches of 32: the lone 33rd caption has no negative and is skipped, so
    the epoch's loss is the first batch's loss (it was halved by counting the skipped step)."""
    from globetrotter.zeroshot.losses import PATRLoss

    text, images, caption_image = _synthetic_pairs(33, 1, image_dim=8, text_dim=12)
    cfg = load_config(ZeroShotConfig, overrides=[
        "adapter.form=xtd10", "adapter.hidden_dims=[16]", "adapter.dropout=[0.0,0.0]", "adapter.output_scale=1.0",
        "loss.name=patr",
        "loss.margin=2.0", "optim.epochs=1", "optim.batch_size=32"])
    _, history = train_adapter(text, images, caption_image, cfg, progress=False)
    torch.manual_seed(cfg.optim.seed)  # the adapter train_adapter starts from
    adapter = TextToImageAdapter(12, 8, [16], [0.0, 0.0], 1.0)
    idx = torch.randperm(33, generator=torch.Generator().manual_seed(cfg.optim.seed))[:32]
    first = PATRLoss(margin=2.0)(adapter(text[idx]), images[caption_image[idx]], caption_image[idx])
    assert history.loss == [pytest.approx(float(first.detach()), rel=1e-5)]


def test_records_and_checkpoints_write_a_nan_as_null_and_still_load(tmp_path, capsys):
    """A diverged epoch's loss or a recall over no query is NaN (numpy's float32 from the retrieval): both were
    written as a bare NaN, which strict JSON readers refuse."""
    path = tmp_path / "record.json"
    write_json({"metrics": {"en": {"recall@10": np.float32("nan")}, "de": {"recall@10": np.float32(0.5)}},
                "seconds": float("inf")}, path, argparse.Namespace(out=str(path), seed=0))
    written = strict_json(path.read_text(encoding="utf-8"))
    assert {k: written[k] for k in ("metrics", "seconds")} == {"metrics": {"en": {"recall@10": None},
                                                                          "de": {"recall@10": 0.5}}, "seconds": None}
    assert written["inputs"] == {"out": str(path), "seed": 0} and "torch" in written["versions"]
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "ckpt", history={"loss": [float("nan"), 0.5]})
    assert strict_json((tmp_path / "ckpt" / META).read_text(encoding="utf-8"))["history"] == {"loss": [None, 0.5]}
    assert load_adapter(tmp_path / "ckpt")[2]["history"] == {"loss": [None, 0.5]}


def test_commands_reject_bad_outputs_and_mismatched_adapters_in_one_line(tmp_path, capsys):
    from globetrotter.zeroshot.cli import main

    rng = np.random.default_rng(0)
    images = np.maximum(rng.normal(size=(6, 4)), 0).astype(np.float32)
    _write_split(tmp_path, "test", images, [(f"caption {r}", "en", r) for r in range(6)])
    # an adapter whose output (1280-d) does not fit these 4-d image features
    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "wide")
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "wide"), *common]) == 2
    assert "1280-d image features, but the encoders give 16-d text and 4-d image" in capsys.readouterr().err
    # an unwritable JSON record or checkpoint folder (a regular file stands in the way)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "ok")
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "ok"),
                 "--out", str(blocker / "r.json"), *common]) == 2
    assert "r.json: cannot write the JSON record" in capsys.readouterr().err
    assert main(["train", "--train", str(tmp_path / "test"), "--out", str(blocker / "ckpt"), *common,
                 "text_encoder=random:16"]) == 2
    err = capsys.readouterr().err
    assert "cannot create the output folder" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "ok"), "--threads", "-1"])
    assert exit_info.value.code == 2 and "expected a positive integer" in capsys.readouterr().err
    # two adapters of one name would overwrite each other's row: refused
    (tmp_path / "other").mkdir()
    shutil.copytree(tmp_path / "ok", tmp_path / "other" / "ok")
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "ok"),
                 "--adapter", str(tmp_path / "other" / "ok"), *common]) == 2
    assert "--adapter: 'ok' given twice" in capsys.readouterr().err
    # a damaged checkpoint: one line naming the file
    for name, damage in (("meta.json", lambda p: p.write_text(p.read_text()[:20])),
                         ("meta.json", lambda p: p.write_text(json.dumps({"form": "xtd10"}))),
                         ("adapter.safetensors", lambda p: p.write_bytes(p.read_bytes()[:40]))):
        shutil.rmtree(tmp_path / "bad", ignore_errors=True)
        shutil.copytree(tmp_path / "ok", tmp_path / "bad")
        damage(tmp_path / "bad" / name)
        assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "bad"), *common]) == 2
        err = capsys.readouterr().err.strip()
        assert f"bad/{name}: " in err and len(err.splitlines()) == 1, err
    # weights of another shape than meta.json describes: torch's first mismatch is named, not only its heading
    shutil.rmtree(tmp_path / "bad")
    shutil.copytree(tmp_path / "ok", tmp_path / "bad")
    meta = json.loads((tmp_path / "bad" / "meta.json").read_text())
    (tmp_path / "bad" / "meta.json").write_text(json.dumps({**meta, "hidden_dims": [9]}))
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "bad"), *common]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad/adapter.safetensors: does not load into the adapter its meta.json describes (Error(s) in loading " \
           "state_dict for TextToImageAdapter: size mismatch for blocks.0.0.weight: copying a param with shape " \
           "torch.Size([8, 16])" in err and len(err.splitlines()) == 1, err
    # a val split of other image features: refused before training, not after an epoch
    _write_split(tmp_path, "val6", np.ones((6, 6), dtype=np.float32), [(f"caption {r}", "en", r) for r in range(6)])
    assert main(["train", "--train", str(tmp_path / "test"), "--val", str(tmp_path / "val6"), "--val-k", "5", "--out",
                 str(tmp_path / "never"), *common, "text_encoder=random:16"]) == 2
    err = capsys.readouterr().err.strip()
    assert "6-d image features, but the train split's are 16-d and 4-d" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "never").exists()


def test_a_val_split_of_at_most_k_images_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """Recall@10 over 2 val images is 1 for any adapter: every epoch tied at 1.0, the first was kept, unsaid."""
    from globetrotter.zeroshot import train as zs_train
    from globetrotter.zeroshot.cli import main

    images = np.eye(6, dtype=np.float32)
    _write_split(tmp_path, "train", images, [(f"caption {r}", "en", r) for r in range(6)])
    _write_split(tmp_path, "val2", images, [(f"caption {r}", "en", r) for r in range(2)], prefix="val")
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress", "text_encoder=random:6", "optim.epochs=1",
              "adapter.hidden_dims=[8]"]
    trained = []
    real_train = zs_train.train_adapter
    monkeypatch.setattr(zs_train, "train_adapter", lambda *a, **kw: trained.append(1) or real_train(*a, **kw))
    out = tmp_path / "zs" / "ckpt"
    assert main(["train", "--train", str(tmp_path / "train"), "--val", str(tmp_path / "val2"), "--out", str(out),
                 *common]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"--val {tmp_path / 'val2'}: 2 image(s), not more than the validation K (10)" in err
    assert "lower --val-k, or drop --val" in err
    assert not trained and not (tmp_path / "zs").exists()
    # an adequate val set trains as before: 2 images judged by Recall@1
    assert main(["train", "--train", str(tmp_path / "train"), "--val", str(tmp_path / "val2"), "--val-k", "1",
                 "--out", str(out), *common]) == 0
    assert trained and len(json.loads((out / "meta.json").read_text())["history"]["val"]) == 1


def test_val_k_without_val_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """--val-k without --val was ignored in silence (no epoch is chosen): refused in one line, as eval.py refuses an
    option its command would not use."""
    from globetrotter.zeroshot import train as zs_train
    from globetrotter.zeroshot.cli import main

    _write_split(tmp_path, "train", np.eye(8, dtype=np.float32), [(f"caption {r}", "en", r) for r in range(6)])
    monkeypatch.setattr(zs_train, "train_adapter", lambda *a, **kw: pytest.fail("trained"))
    assert main(["train", "--train", str(tmp_path / "train"), "--out", str(tmp_path / "zs"), "--val-k", "5",
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", "text_encoder=random:6"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --val-k 5 sets the K of the validation Recall@K; give --val SPLIT, or drop it"]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "zs").exists()


def test_a_val_split_that_is_or_overlaps_the_train_split_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """--val of the --train split itself (or of some of its images) was accepted: the epoch was chosen on training
    images. Refused in one line, as tag-eval refuses a --vocab-from that shows its --test images."""
    from globetrotter.zeroshot import train as zs_train
    from globetrotter.zeroshot.cli import main

    images = np.eye(8, dtype=np.float32)
    _write_split(tmp_path, "train", images, [(f"caption {r}", "en", r) for r in range(6)])
    _write_split(tmp_path, "val", images, [(f"caption {r}", "en", r) for r in range(4, 8)])  # img4, img5 are train's
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress", "text_encoder=random:6", "optim.epochs=1",
              "adapter.hidden_dims=[8]", "--val-k", "1"]
    monkeypatch.setattr(zs_train, "train_adapter", lambda *a, **kw: pytest.fail("trained"))
    for val, said in ((tmp_path / "train", f"--val {tmp_path / 'train'}: is the --train split"),
                      (tmp_path / ".." / tmp_path.name / "train", "is the --train split"),
                      (tmp_path / "val", f"--val {tmp_path / 'val'}: its captions show 2 of the --train "
                                         f"{tmp_path / 'train'} images the adapter trains on (e.g. 'img4')")):
        out = tmp_path / "zs"
        assert main(["train", "--train", str(tmp_path / "train"), "--val", str(val), "--out", str(out), *common]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
        assert not out.exists()


def test_one_image_shared_by_two_splits_is_refused():
    from globetrotter.zeroshot.cli.common import check_no_shared_images

    with pytest.raises(UserError, match=r"^--val v: its captions show 1 of the train images \(e.g. 'b'\); fix it$"):
        check_no_shared_images("--val v", ["a", "b"], ["b", "c"], "train images", "fix it")
    check_no_shared_images("--val v", ["a"], ["c"], "train images", "fix it")


def test_a_refused_train_run_leaves_no_out_folder(tmp_path, capsys):
    """--out was created before the split and config were checked: each refusal left an empty folder behind."""
    from globetrotter.zeroshot.cli import main

    images = np.eye(4, dtype=np.float32)
    _write_split(tmp_path, "test", images, [(f"caption {r}", "de", r) for r in range(4)])
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress", "text_encoder=random:16"]
    refusals = [(["--train", str(tmp_path / "nope")], "split directory not found"),
                (["--train", str(tmp_path / "test")], "no captions in language(s) ['en']")]
    for i, (argv, message) in enumerate(refusals):
        out = tmp_path / f"run{i}" / "ckpt"
        assert main(["train", *argv, "--out", str(out), *common]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not (tmp_path / f"run{i}").exists()
    (tmp_path / "file").write_text("x")  # a bad --out is still refused up front, naming the blocker
    assert main(["train", "--train", str(tmp_path / "nope"), "--out", str(tmp_path / "file" / "ckpt"), *common]) == 2
    assert "file/ckpt: cannot create the output folder (" in capsys.readouterr().err


def test_retrieval_gallery_is_every_image_whatever_the_languages(tmp_path):
    """A language that captions few of the images is ranked against the whole gallery, as the others are."""
    from globetrotter.zeroshot.cli import main

    rng = np.random.default_rng(0)
    images = rng.normal(size=(12, 4)).astype(np.float32)
    captions = [(f"en {r}", "en", r) for r in range(12)] + [(f"de {r}", "de", r) for r in range(3)]
    _write_split(tmp_path, "test", images, captions)
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "a")
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    records = {}
    for langs in ("de", "de,en"):
        out = tmp_path / f"{langs}.json"
        assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "a"), "--languages", langs,
                     "--out", str(out), *common]) == 0
        records[langs] = json.loads(out.read_text())
    assert records["de"]["models"]["a"]["n_images"] == records["de,en"]["models"]["a"]["n_images"] == 12
    assert records["de"]["models"]["a"]["metrics"]["de"] == records["de,en"]["models"]["a"]["metrics"]["de"]
    assert records["de"]["chance"]["image_retrieval_recall@1"] == pytest.approx(1 / 12)


class _Identity:
    """An adapter stand-in whose image-space embedding is the text feature itself."""

    text_dim = image_dim = 4

    def embed(self, feats):
        return feats.float()


def test_recall_summaries_count_a_rank_of_exactly_k_and_chance_stops_at_one():
    ranks = np.array([1, 2, 3, 10, 11])  # Recall@1 = 1/5, Recall@10 = 4/5 (rank 10 is among the 10 nearest)
    summary = rank_summary(ranks, ks=(1, 10), n_boot=50)
    for k, want in ((1, 0.2), (10, 0.8)):
        assert summary["metrics"][f"image_retrieval_recall@{k}"] == pytest.approx(want)
        assert summary["intervals"][f"image_retrieval_recall@{k}"]["value"] == pytest.approx(want)
    # a random ranking of 4 images has its target among the 5 nearest always: chance is 1, not 5/4
    assert chance_recall(4, ks=(1, 5)) == {"image_retrieval_recall@1": 0.25, "image_retrieval_recall@5": 1.0}


def test_per_language_recall_ranks_by_the_metric_asked_for():
    # the query [5, 5] points exactly at image 1 (cosine rank 1) but lies nearer image 0 (squared distances 41 < 50)
    images = torch.tensor([[1.0, 0.0], [10.0, 10.0]])
    query, target = {"en": torch.tensor([[5.0, 5.0]])}, {"en": np.array([1])}
    by = {metric: zero_shot_recall(_Identity(), query, target, images, ks=(1,), metric=metric)["en"]
          for metric in ("cosine", "l2")}
    assert by["cosine"]["image_retrieval_recall@1"] == 1.0 and by["l2"]["image_retrieval_recall@1"] == 0.0


def test_split_recall_asks_one_query_per_image_unless_all_captions_and_validation_averages_languages():
    from globetrotter.zeroshot.data import SplitFeatures
    from globetrotter.zeroshot.retrieval import split_recall
    from globetrotter.zeroshot.train import train_rows, validation_recall

    images = np.eye(4, dtype=np.float32)
    # en: each image's first caption is its own features, the second those of the next image; de: the next image's
    caption_image = np.array([0, 0, 1, 1, 2, 2, 3, 3, 0, 1, 2, 3])
    shown = np.concatenate([np.repeat(np.arange(4), 2) + np.tile([0, 1], 4), np.arange(4) + 1]) % 4
    split = SplitFeatures(texts=[f"t{i}" for i in range(12)], langs=np.array(["en"] * 8 + ["de"] * 4, dtype=object),
                          groups=np.array([f"g{i}" for i in caption_image], dtype=object), caption_image=caption_image,
                          image_keys=[f"img{i}" for i in range(4)], text_features=images[shown],
                          image_features=images)
    first = split_recall(_Identity(), split, ks=(1,))
    # de: the next image first, then the own image tied with the other two at 0, and a tie counts against it
    assert first["metrics"] == {"de": {"image_retrieval_recall@1": 0.0, "median_rank": 4.0},
                                "en": {"image_retrieval_recall@1": 1.0, "median_rank": 1.0}}
    assert first["n_queries"] == {"de": 4, "en": 4} and first["n_images"] == 4
    every = split_recall(_Identity(), split, ["en"], all_captions=True, ks=(1,))
    assert every["metrics"]["en"]["image_retrieval_recall@1"] == 0.5 and every["n_queries"] == {"en": 8}
    with pytest.raises(UserError, match=r"^test: no captions in \['fr'\]"):
        split_recall(_Identity(), split, ["en", "fr"], where="test")
    # a gallery of at most the largest K: a Python caller is told the argument (ks), not the command's --ks
    with pytest.raises(UserError, match=r"^test: 4 image\(s\), not more than the largest K \(4\): .*; lower ks$"):
        split_recall(_Identity(), split, ks=(1, 4), where="test")
    # the --val score: first caption per image, the mean over the languages present (xx has none)
    assert validation_recall(split, ["en", "de", "xx"], k=1)(_Identity()) == pytest.approx(0.5)
    assert len(train_rows(split, ["de"])) == 4
    # the first caption of each image, in row order (the order the bootstrap intervals resample)
    shuffled = SplitFeatures(texts=["a", "b", "c", "d"], langs=np.array(["en"] * 4, dtype=object),
                             groups=np.array(["g"] * 4, dtype=object), caption_image=np.array([2, 0, 2, 1]),
                             image_keys=["i0", "i1", "i2"], text_features=np.zeros((4, 2), np.float32),
                             image_features=np.zeros((3, 2), np.float32))
    assert shuffled.first_per_image("en").tolist() == [0, 1, 3]
    with pytest.raises(UserError, match="fewer than 2 captions"):
        train_rows(split, ["xx"], "train")


def test_online_reaches_the_text_encoder(tmp_path, monkeypatch):
    """--online lets every command's text encoder download (an ``st:`` model); without it none may."""
    from backretrieval.embedders import load_embedder
    from globetrotter.zeroshot import data as zs_data
    from globetrotter.zeroshot.cli import main

    calls = []

    def spy(spec, **kwargs):
        calls.append(kwargs.get("online", False))
        return load_embedder(spec, **kwargs)

    monkeypatch.setattr(zs_data, "load_embedder", spy)
    images = np.eye(4, dtype=np.float32)
    _write_split(tmp_path, "test", images, [(f"caption {r}", "en", r) for r in range(4)])
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "a")
    for flags, cache in (([], "c1"), (["--online"], "c2")):
        assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "a"), "--no-progress",
                     "--cache-dir", str(tmp_path / cache), "--ks", "1", *flags]) == 0
    assert calls == [False, True]


def test_a_diverged_adapter_ranks_its_targets_last_and_training_stops_on_a_non_finite_loss(monkeypatch):
    """Non-finite outputs compare false with everything: ranked as they are, their targets would come first.
    A non-finite loss stops training with a one-line error, so no such epoch is kept; one image is no data."""
    import globetrotter.zeroshot.train as zs_train

    images = torch.eye(4, 6)
    queries = images.clone()
    queries[1] = float("nan")
    queries[2, 0] = float("inf")
    for metric in ("l2", "cosine"):
        ranks = target_ranks(queries, images, [0, 1, 2, 3], metric=metric)
        assert ranks[0] == 1 and ranks[3] == 1 and ranks[1] == 4 and ranks[2] == 4, (metric, ranks)
    text, feats, caption_image = _synthetic_pairs(16, 1, image_dim=8, text_dim=12)
    cfg = load_config(ZeroShotConfig, overrides=["optim.epochs=1", "optim.batch_size=8"])

    class Diverged(torch.nn.Module):
        def forward(self, out, *_):
            return out.sum() * float("nan")

    monkeypatch.setattr(zs_train, "build_loss", lambda *_a, **_k: Diverged())
    with pytest.raises(UserError, match="loss is nan at epoch 1, step 1; lower optim.lr"):
        train_adapter(text, feats, caption_image, cfg, progress=False)
    with pytest.raises(UserError, match="show one image"):
        train_adapter(text, feats, torch.zeros(16, dtype=torch.long), cfg, progress=False)


def test_a_language_given_twice_in_langs_is_refused_not_merged(capsys):
    """`--languages en,de,en` was silently read as en,de."""
    from globetrotter.zeroshot.cli import main

    for command in (["retrieval", "--test", "t", "--adapter", "a"], ["tag-eval", "--adapter", "a", "--test", "t",
                                                                     "--vocab-from", "v"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--languages", "en,de,en"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "en given twice in 'en,de,en'; expected each language once" in err


def test_train_keeps_an_adapter_already_in_out_unless_overwrite(tmp_path, capsys):
    """`train --out runs/x` replaced the adapter already in runs/x in silence."""
    from globetrotter.zeroshot.cli import main

    images = np.eye(6, dtype=np.float32)
    _write_split(tmp_path, "train", images, [(f"caption {r}", "en", r) for r in range(6)])
    out = tmp_path / "ckpt"
    argv = ["train", "--train", str(tmp_path / "train"), "--out", str(out), "--cache-dir", str(tmp_path / "cache"),
            "--no-progress", "text_encoder=random:6", "optim.epochs=1", "adapter.hidden_dims=[8]"]
    assert main(argv) == 0
    assert "trained patr adapter (residual, 3 blocks) on 6 en captions" in capsys.readouterr().err
    before = (out / "meta.json").read_bytes()
    assert main([*argv, "optim.epochs=2"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: already holds an adapter (adapter.safetensors); pass --overwrite to replace it" in err
    assert err.count("\n") == 1 and (out / "meta.json").read_bytes() == before
    assert main(["train", "--overwrite", *argv[1:], "optim.epochs=2", "adapter.dropout=[0.1]"]) == 0
    history = json.loads((out / "meta.json").read_text())["history"]
    assert len(history["loss"]) == 2
    # adapter.dropout is one rate per block: [0.1] is a 1-block adapter, and the summary line says so
    err = capsys.readouterr().err
    assert "adapter (residual, 1 block) on" in err
    # meta.json counts the epoch kept from 1, as the summary line does (it said 1 where the line said 2/2)
    assert "best epoch 2/2;" in err and history["best_epoch"] == 2
    # the weights file is as readable as the other files (a temporary file moved into place left it 0600)
    modes = {name: (out / name).stat().st_mode & 0o777 for name in ("adapter.safetensors", "config.yaml", "meta.json")}
    assert len(set(modes.values())) == 1, modes
    from globetrotter.zeroshot.adapter import ResidualBlock

    assert sum(isinstance(m, ResidualBlock) for m in load_adapter(out)[0].modules()) == 1


def test_retrieval_refuses_a_k_of_at_least_the_images_and_an_unwritable_json_first(tmp_path, capsys):
    """--ks 500 over 12 images printed Recall@500 = 1.000; a --json (now --out) naming a folder lost the record after the work."""
    from globetrotter.zeroshot.cli import main

    rng = np.random.default_rng(0)
    _write_split(tmp_path, "test", rng.normal(size=(12, 4)).astype(np.float32),
                 [(f"en {r}", "en", r) for r in range(12)])
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "a")
    argv = ["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "a"), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]
    for ks in ("1,12", "500"):
        assert main([*argv, "--ks", ks]) == 2
        err = capsys.readouterr().err
        k = max(map(int, ks.split(",")))
        assert f"test: 12 image(s), not more than the largest K ({k}): Recall@{k} would be 1 for any adapter; " \
               "lower --ks" in err and err.count("\n") == 1, err
    assert main([*argv, "--ks", "1,11"]) == 0
    capsys.readouterr()
    (tmp_path / "folder").mkdir()
    for command in (["retrieval", "--test", str(tmp_path / "nope"), "--adapter", str(tmp_path / "a")],
                    ["tag-eval", "--adapter", str(tmp_path / "a"), "--test", str(tmp_path / "nope"), "--vocab-from",
                     "v"],
                    ["tag", "--adapter", str(tmp_path / "a"), "--images", str(tmp_path / "nope"), "--vocab", "de=v"]):
        assert main([*command, "--out", str(tmp_path / "folder")]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'folder'}: cannot write the JSON record (is a directory)" in err, err


def test_retrieval_refuses_a_damaged_later_adapter_before_any_feature_is_computed(tmp_path, capsys, monkeypatch):
    """`--adapter a=OK --adapter b=DAMAGED` computed the test split's features and scored a before b's one-line error."""
    from globetrotter.zeroshot.cli import main
    from globetrotter.zeroshot.cli import retrieval as command

    _write_split(tmp_path, "test", np.zeros((12, 4), dtype=np.float32), [(f"en {r}", "en", r) for r in range(12)])
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "a")
    (tmp_path / "b").mkdir()
    computed = []

    def load_split_features(*args, **kwargs):
        computed.append(args)
        raise UserError("the test split's features were computed")

    monkeypatch.setattr(command, "load_split_features", load_split_features)
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", f"a={tmp_path / 'a'}",
                 "--adapter", f"b={tmp_path / 'b'}", "--no-progress", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'b'}: not an adapter checkpoint (missing adapter.safetensors" in err and err.count("\n") == 1
    assert not computed


def test_an_adapter_refuses_a_globetrotter_text_encoder_that_saved_other_weights_since(tiny_run, tmp_path, capsys):
    """meta.json named the text encoder globetrotter:RUN only: after the run saved other weights (a new best/, same
    path) retrieval embedded with them through an adapter trained on the old ones, in silence. The adapter now
    records the checkpoint and its weights' sha256 (and --val-k, which picks the kept epoch), and a load of it
    refuses other weights in one line."""
    from safetensors.torch import load_file, save_file

    from globetrotter.evaluation.models import weights_sha256
    from globetrotter.training.checkpoint import resolve
    from globetrotter.zeroshot.cli import main

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(16, 8)).astype(np.float32)
    words = ["red a square", "green a square", "blue a square", "yellow a square"]
    _write_split(tmp_path, "train", images, [(words[r % 4], "en", r) for r in range(12)])
    _write_split(tmp_path, "val", images, [(words[r % 4], "en", r) for r in range(12, 16)])
    common = ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    out = tmp_path / "adapter"
    assert main(["train", "--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--val-k", "2",
                 "--out", str(out), *common, f"text_encoder=globetrotter:{run}", "optim.epochs=1",
                 "adapter.hidden_dims=[8]", "optim.batch_size=4"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    checkpoint = str(resolve(run).resolve())
    assert meta["text_encoder_weights"] == {"checkpoint": checkpoint, "weights_sha256": weights_sha256(checkpoint)}
    assert meta["val_k"] == 2
    load_adapter(out)  # the same weights: loads
    weights = resolve(run) / "model.safetensors"
    state = load_file(str(weights))
    name = next(iter(state))
    state[name] = state[name] + 0.5  # the run saved other weights under the same checkpoint path
    save_file(state, str(weights))
    capsys.readouterr()
    assert main(["retrieval", "--test", str(tmp_path / "val"), "--adapter", str(out), "--k", "2", *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the adapter was trained on the text encoder globetrotter:" in err[0], err
    assert "train the adapter again" in err[0]


def test_texts_cut_by_a_globetrotter_text_encoder_are_one_line_per_command(tiny_run, tmp_path, capsys):
    """train encodes the train captions, then the val captions in two languages: their TextsCut warning was one line
    a split (and, under the 'always' filter of the CLI, one a call); now one line for the command."""
    from globetrotter.zeroshot.cli import main

    rng = np.random.default_rng(0)
    images = rng.normal(size=(16, 8)).astype(np.float32)
    words = ["red a square", "green a square", "blue a square", "yellow a square"]

    def caption(row: int, lang: str = "en") -> str:  # a third of them past the run's 32 tokens
        text = " ".join([words[row % 4]] * (30 if row % 3 == 0 else 1))
        return text if lang == "en" else f"{lang} {text}"

    _write_split(tmp_path, "train", images, [(caption(r), "en", r) for r in range(12)])
    _write_split(tmp_path, "val", images, [(caption(r, lang), lang, r) for r in range(12, 16) for lang in ("en", "ru")])
    assert main(["train", "--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--val-k", "2",
                 "--out", str(tmp_path / "adapter"), "--cache-dir", str(tmp_path / "cache"), "--no-progress",
                 f"text_encoder=globetrotter:{tiny_run}", "optim.epochs=1", "adapter.hidden_dims=[8]",
                 "optim.batch_size=4"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "longer than data.max_length" in line]
    # distinct texts: the train split's 8 (each word short and long), the val captions encoded among them (it was
    # "6 of 12": the lists' counts added, a text of both splits counted twice)
    assert said == ["warning: 4 of 8 text(s) are longer than data.max_length=32 tokens and were cut to it, as in "
                    "training: the tokens past it do not change their embeddings"], said


def test_train_loads_a_globetrotter_text_encoder_once(tiny_run, tmp_path, capsys, monkeypatch):
    """train embeds the val split, then the train split: each loaded the globetrotter:RUN model anew (twice its note
    that the run has no best checkpoint); the command now loads it once."""
    import globetrotter.encoder as encoder
    from globetrotter.zeroshot.cli import main

    loads = []
    real_load = encoder.load
    monkeypatch.setattr(encoder, "load", lambda *a, **kw: loads.append(a) or real_load(*a, **kw))
    rng = np.random.default_rng(0)
    images = rng.normal(size=(16, 8)).astype(np.float32)
    words = ["red a square", "green a square", "blue a square", "yellow a square"]
    _write_split(tmp_path, "train", images, [(words[r % 4], "en", r) for r in range(12)])
    _write_split(tmp_path, "val", images, [(f"{words[r % 4]} too", "en", r) for r in range(12, 16)])
    assert main(["train", "--train", str(tmp_path / "train"), "--val", str(tmp_path / "val"), "--val-k", "2",
                 "--out", str(tmp_path / "adapter"), "--cache-dir", str(tmp_path / "cache"), "--no-progress",
                 f"text_encoder=globetrotter:{tiny_run}", "optim.epochs=1", "adapter.hidden_dims=[8]",
                 "optim.batch_size=4"]) == 0
    assert len(loads) == 1, loads
    notes = [line for line in capsys.readouterr().err.splitlines() if "loading the latest" in line]
    assert len(notes) <= 1, notes


def test_m3l_random_negatives_follow_the_config_seed_only():
    """M3L's random negatives (configs/zeroshot/m3l.yaml) come from torch's default generator, which train_adapter
    seeds with optim.seed itself (shared with dropout, so the documented M3L figures stay reproducible): whatever a
    caller seeded before, the same optim.seed trains the same adapter, and another seed another."""
    text, images, caption_image = _synthetic_pairs(16, 4, image_dim=8, text_dim=12)

    def losses(seed: int, global_seed: int) -> list[float]:
        cfg = load_config(ZeroShotConfig, overrides=["loss.name=m3l", "loss.negatives=random", "optim.epochs=2",
                                                     "adapter.hidden_dims=[16]", "optim.batch_size=16",
                                                     f"optim.seed={seed}"])
        torch.manual_seed(global_seed)
        return train_adapter(text, images, caption_image, cfg, progress=False)[1].loss

    assert losses(0, 1) == losses(0, 2) != losses(1, 1)


def test_target_ranks_by_cosine_rank_by_direction_and_by_l2_by_distance():
    """A far image in the query's direction is the cosine-nearest, a near one off its direction the l2-nearest."""
    images = np.array([[10.0, 0.0], [0.9, 0.5], [-1.0, 0.0]], dtype=np.float32)
    query, before = np.array([[1.0, 0.0]], dtype=np.float32), images.copy()
    assert target_ranks(query, images, [1], "cosine").tolist() == [2]
    assert target_ranks(query, images, [1], "l2").tolist() == [1]
    assert target_ranks(query, images, [0], "cosine").tolist() == [1]
    assert target_ranks(query, images, [0], "l2").tolist() == [3]
    assert np.array_equal(images, before)  # the caller's arrays are not normalised


@pytest.mark.parametrize("call, message", [
    (lambda: target_ranks(np.zeros((1, 2)), np.zeros((3, 2)), [0], "dot"), r"unknown metric 'dot'"),
    (lambda: target_ranks(np.zeros((2, 2)), np.zeros((3, 2)), [0]), r"2 queries but 1 targets"),
    (lambda: target_ranks(np.zeros((0, 2)), np.zeros((3, 2)), []), r"no queries to evaluate"),
    (lambda: target_ranks(np.zeros((1, 2)), np.zeros((3, 4)), [0]), r"query dim 2 != image dim 4"),
    (lambda: target_ranks(np.zeros((1, 2)), np.zeros((3, 2)), [0], "dot"), r"unknown metric 'dot'"),
    (lambda: TextToImageAdapter(4, 2, [3], [], form="residual"), r"dropout needs one rate per block, got none"),
    (lambda: TextToImageAdapter(4, 2, [0], [0.1, 0.1]), r"layer widths must be positive, got \[4, 0, 2\]"),
    (lambda: TextToImageAdapter(4, 2, [3], [0.1, 1.0]), r"dropout rates must be in \[0, 1\), got \[0.1, 1.0\]"),
    (lambda: TextToImageAdapter(4, 2, [3], [0.1, 0.1], output_scale=0.0), r"output_scale must be > 0, got 0.0"),
])
def test_retrieval_and_adapter_refuse_inconsistent_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_an_adapter_embeds_no_texts_as_an_empty_matrix_of_its_image_width():
    adapter = TextToImageAdapter(4, 3, [5], [0.0, 0.0])
    out = adapter.embed(torch.zeros(0, 4))
    assert out.shape == (0, 3) and adapter.training  # its mode is restored


def test_training_refuses_too_few_captions_or_misshaped_inputs_before_any_work():
    from globetrotter.zeroshot.data import first_captions
    from globetrotter.zeroshot.losses import typical_squared_distance
    from globetrotter.zeroshot.train import build_loss

    cfg = ZeroShotConfig(text_encoder="random:4")
    with pytest.raises(UserError, match="need at least 2 training captions, got 1"):
        train_adapter(torch.zeros(1, 4), torch.zeros(2, 3), torch.zeros(1, dtype=torch.long), cfg, progress=False)
    with pytest.raises(ValueError, match="must be 2-D"):
        train_adapter(torch.zeros(4), torch.zeros(2, 3), torch.zeros(4, dtype=torch.long), cfg, progress=False)
    with pytest.raises(ValueError, match=r"caption_image must be \[3\], got \(2,\)"):
        train_adapter(torch.zeros(3, 4), torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), cfg, progress=False)
    assert cfg.loss.name == "patr" and cfg.loss.margin is None  # the default margin is measured on the images
    with pytest.raises(ValueError, match="image features are needed to measure it"):
        build_loss(cfg)
    with pytest.raises(ValueError, match="need at least two images"):
        typical_squared_distance(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="max_captions_per_image must be >= 1, got 0"):
        first_captions(np.zeros(2, dtype=np.int64), np.array(["en", "en"]), 0)


def test_retrieval_notes_a_language_the_text_encoder_lacks_after_the_tables(tmp_path, capsys, monkeypatch):
    from globetrotter.zeroshot.cli import main
    from globetrotter.zeroshot.cli import retrieval

    rng = np.random.default_rng(0)
    _write_split(tmp_path, "test", rng.normal(size=(4, 4)).astype(np.float32),
                 [(f"{lang} {r}", lang, r) for r in range(4) for lang in ("en", "de")])
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"), tmp_path / "a")
    monkeypatch.setattr(retrieval, "languages_the_encoder_lacks", lambda encoder, codes: [c for c in codes if c == "de"])
    out = tmp_path / "r.json"
    assert main(["retrieval", "--test", str(tmp_path / "test"), "--adapter", str(tmp_path / "a"), "--out", str(out),
                 "--ks", "1", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith("note: a: the text encoder 'random:16' was not trained on de")
    assert json.loads(out.read_text())["models"]["a"]["languages_the_text_encoder_lacks"] == ["de"]


def test_a_record_or_output_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    """The commands check --out up front; a path that turns unwritable after it (here: under a file) is still one
    line naming it, and nothing is written."""
    from globetrotter.zeroshot.cli.common import make_out_dir

    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(UserError, match=f"^{blocker / 'r.json'}: cannot write the JSON record \\(.+\\)$"):
        write_json({"metrics": {}}, blocker / "r.json", argparse.Namespace(out=str(blocker / "r.json")))
    with pytest.raises(UserError, match=f"^{blocker / 'out'}: cannot create the output folder \\(.+\\)$"):
        make_out_dir(blocker / "out")
    assert blocker.read_text(encoding="utf-8") == "" and make_out_dir(tmp_path / "new" / "out").is_dir()
