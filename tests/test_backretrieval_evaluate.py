"""The library side of ``backretrieval eval`` and ``correlate``: evaluate_split / correlate_split on shard splits."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from backretrieval import (BackRetrievalError, correlate_split, evaluate_pairs, evaluate_split, parse_model_specs)
from backretrieval.evaluate import language_pairs
from backretrieval.images import image_feature_extractor
from data_prep.shard_writer import ShardWriter

LANGS = ("de", "en", "fr")


@pytest.fixture(scope="module")
def parallel_split(tmp_path_factory):
    """A test-like split: 80 images captioned in 3 languages (tied by group), npy image features,
    and a 'good' text model stored as npy embeddings looked up by caption text."""
    root = tmp_path_factory.mktemp("br_eval")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((80, 12))
    feats = z @ rng.standard_normal((12, 24)) + 0.5 * rng.standard_normal((80, 24))
    texts, emb = [], []
    with ShardWriter(root / "test", split="test", source="unit", image_format="npy", maxcount=100) as w:
        for i in range(80):
            for lang in LANGS:
                caption = f"{lang} caption of picture {i}"
                w.write(f"s{i}_{lang}", feats[i].astype(np.float32), caption, lang, image_id=f"img{i}", group=f"g{i}")
                texts.append(caption)
                emb.append(z[i] + 0.3 * rng.standard_normal(12))
    np.save(root / "good.npy", np.asarray(emb, np.float32))
    (root / "good.npy.texts.json").write_text(json.dumps(texts))
    return root, feats, texts, np.asarray(emb, np.float32)


def test_evaluate_split_is_evaluate_pairs_per_model_with_a_record_and_plots(parallel_split, tmp_path):
    root, feats, texts, emb = parallel_split
    res = evaluate_split(root / "test", [f"good=npy:{root / 'good.npy'}", "random:12"], ks=(1, 5), max_per_lang=30,
                         bootstrap=0, progress=False)
    langs = [t.split()[0] for t in texts]
    ids = [f"img{i // 3}" for i in range(len(texts))]
    groups = [f"g{i // 3}" for i in range(len(texts))]
    ref = evaluate_pairs(emb, langs, feats[np.arange(len(texts)) // 3], ids, (1, 5), groups=groups, max_per_lang=30,
                         max_rank=5)
    assert res.results["good"]["pairs"]["en->fr"]["bkr@5"] == pytest.approx(ref["pairs"]["en->fr"]["bkr@5"])
    assert res.results["good"]["mean"]["xlr@1"] > 0.9 > res.results["random:12"]["mean"]["xlr@5"]
    record = res.to_record()
    assert list(record) == ["task", "inputs", "data", "checksum", "image_model", "ks", "ties", "seed", "max_per_lang",
                            "max_rank", "retrieval", "csls_k", "approximate", "approximate_settings", "bootstrap",
                            "level", "models"]
    assert record["max_rank"] == 5 and record["image_model"] is None and record["ks"] == [1, 5]
    good = record["models"]["good"]
    assert good["spec"] == f"npy:{root / 'good.npy'}" and good["embedder"].startswith("npy:")
    assert good["langs"] == list(LANGS) and good["matrix"]["bkr@5"][0][0] is None  # NaN diagonal -> null
    json.dumps(record, allow_nan=False)
    names = {p.name for p in res.save_plots(tmp_path)}
    assert names == {p.name for p in tmp_path.glob("*.png")}
    assert {"boxplot_bkr5.png", "heatmap_good_bkr5.png", "heatmap_random_12_xlr1.png"} <= names


def test_npy_without_sidecar_takes_rows_in_shard_order(parallel_split, tmp_path):
    # without PATH.texts.json, row i is the split's caption i; the texts must not be sorted or deduplicated first
    root, _, _, emb = parallel_split
    np.save(tmp_path / "plain.npy", emb)
    res = evaluate_split(root / "test", {"plain": f"npy:{tmp_path / 'plain.npy'}", "good": f"npy:{root / 'good.npy'}"},
                         ks=(1, 5), max_per_lang=30, bootstrap=0, progress=False)
    assert res.results["plain"]["pairs"] == res.results["good"]["pairs"]
    assert res.results["plain"]["mean"]["xlr@1"] > 0.9


def test_unknown_language_and_repeated_model_are_named(parallel_split):
    root, *_ = parallel_split
    with pytest.raises(BackRetrievalError, match=r"\['xx'\].*'de', 'en', 'fr'"):
        evaluate_split(root / "test", ["random:4"], languages=["en", "xx"], progress=False)
    with pytest.raises(BackRetrievalError, match="model 'random:4' given twice"):
        evaluate_split(root / "test", ["random:4", "random:4"], progress=False)


class OwnModel:
    """A user's own text model, as backretrieval's TextEmbedder protocol describes it: a name and encode(texts)."""

    def __init__(self, texts: list[str], emb: np.ndarray, name: str = "own") -> None:
        self.row_of, self.emb, self.name = {t: i for i, t in enumerate(texts)}, emb, name

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.emb[[self.row_of[t] for t in texts]]


def test_own_embedder_objects_are_scored_as_the_spec_of_their_embeddings(parallel_split):
    """evaluate_split(split, [Mine()]) was AttributeError: 'Mine' object has no attribute 'strip' ({"mine": Mine()}:
    'partition'): only spec strings were taken. An object with .name and .encode is a model, in a list named by its
    name, in a mapping by its key, beside spec strings; correlate_split likewise."""
    root, _, texts, emb = parallel_split
    run = dict(ks=(1, 5), max_per_lang=30, bootstrap=0, progress=False)
    spec = evaluate_split(root / "test", [f"good=npy:{root / 'good.npy'}"], **run)
    listed = evaluate_split(root / "test", [OwnModel(texts, emb), "random:12"], **run)
    mapped = evaluate_split(root / "test", {"mine": OwnModel(texts, emb), "random": "random:12"}, **run)
    assert list(listed.results) == ["own", "random:12"] and list(mapped.results) == ["mine", "random"]
    assert listed.results["own"]["pairs"] == mapped.results["mine"]["pairs"] == spec.results["good"]["pairs"]
    models = mapped.to_record()["models"]
    assert models["mine"]["spec"] is None and models["mine"]["embedder"] == "own"
    assert models["random"]["spec"] == "random:12"
    json.dumps(mapped.to_record(), allow_nan=False)
    corr = correlate_split(root / "test", {"mine": OwnModel(texts, emb), "random": "random:12"}, pairs=["en-de"],
                           n=30, seeds=1, ks=(1, 10), bootstrap=0, progress=False)
    assert list(corr.pairs["en->de"]["models"]) == ["mine", "random"]
    assert corr.to_record()["models"]["mine"] == {"spec": None, "embedder": "own"}
    with pytest.raises(BackRetrievalError, match="model 'own' given twice"):
        evaluate_split(root / "test", ["own=random:4", OwnModel(texts, emb)], progress=False)


@pytest.mark.parametrize("models, where, given", [
    (["random:4", object()], r"models\[1\]", "object"),
    ({"mine": 3, "random": "random:4"}, r"models\['mine'\]", "int"),
    ([type("NoName", (), {"encode": lambda self, texts: None})()], r"models\[0\]", "NoName"),
])
def test_a_model_that_is_no_spec_nor_embedder_is_one_line_error(parallel_split, models, where, given):
    with pytest.raises(BackRetrievalError, match=rf"^{where}: expected a spec string \(.*\) or a text embedder "
                                                 rf"\(an object with a str .name and .encode\(texts\)\), got {given}"):
        evaluate_split(parallel_split[0] / "test", models, progress=False)


def test_labels_that_would_share_a_plot_file_are_refused_before_any_work(parallel_split, monkeypatch):
    """'run 1' and 'run_1' both wrote heatmap_run_1_*.png: the second model's heat maps replaced the first's."""
    import backretrieval.evaluate as evaluate_module

    def no_work(*_args, **_kwargs):
        raise AssertionError("the split was read before the labels were checked")

    monkeypatch.setattr(evaluate_module, "embed_split", no_work)
    root, *_ = parallel_split
    with pytest.raises(BackRetrievalError, match=r"models 'run 1' and 'run_1' would write their heat maps to one "
                                                 r"file \(heatmap_run_1_\*\.png\)"):
        evaluate_split(root / "test", ["run 1=random:64:1", "run_1=random:64:2"], progress=False)


def test_evaluate_split_extracts_image_features_from_jpeg_shards_with_cache(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    split = tmp_path / "val"
    with ShardWriter(split, split="val", source="unit", image_format="jpg") as w:
        for i in range(6):
            pixels = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
            w.write(f"k{i}", Image.fromarray(pixels), f"caption {i}", LANGS[i % 2], image_id=f"img{i}")
    g = image_feature_extractor("test_efficientnet", "random", cache_dir=tmp_path / "cache", progress=False)
    first = evaluate_split(split, ["random:8"], extractor=g, ks=(1,), bootstrap=0, progress=False).to_record()
    assert len(list((tmp_path / "cache").glob("test_efficientnet-*.npy"))) == 1
    assert first["image_model"] == "test_efficientnet:random"
    fresh = image_feature_extractor("test_efficientnet", "random", cache_dir=tmp_path / "cache", progress=False)

    def no_compute(_images):
        raise AssertionError("image features computed again: the cache was not read")

    monkeypatch.setattr(fresh, "_compute", no_compute)
    again = evaluate_split(split, ["random:8"], extractor=fresh, ks=(1,), bootstrap=0, progress=False)  # from the cache
    assert again.to_record()["models"] == first["models"]


def test_the_language_with_fewest_captions_decides_whether_k_can_tell_models_apart(tmp_path):
    """12 English captions but 4 German ones: at K = 5 every German-side rank is at most 4, Recall@5 is 1 for any
    model; refused up front, naming German, before any caption is embedded."""
    rng = np.random.default_rng(0)
    with ShardWriter(tmp_path / "test", split="test", source="unit", image_format="npy", maxcount=100) as w:
        for i in range(12):
            feature = rng.standard_normal(8).astype(np.float32)
            for lang in ("en", "de") if i < 4 else ("en",):
                w.write(f"s{i}_{lang}", feature, f"{lang} caption {i}", lang, image_id=f"img{i}")
    with pytest.raises(BackRetrievalError, match=r"2 distinct source images in de->en \(an image captioned in both "
                                                 r"languages goes to one side\), not more than the largest K \(5\)"):
        evaluate_split(tmp_path / "test", ["random:8"], ks=(1, 5), bootstrap=0, progress=False)


@pytest.mark.parametrize("images, captions, parallel", [(8, 1, True), (3, 4, False)])
def test_the_early_check_counts_the_source_images_each_pair_is_scored_on(tmp_path, images, captions, parallel):
    """8 pictures captioned in en and de: each pair's sides split them, 4 a side. 12 captions of 3 pictures a
    language: 3 source images. Either passed the check of captions per language (8 and 12 > K = 5), then every model
    scored BkR@5 = 1 with a warning per pair, after every embedding; refused up front now. Twice the pictures: each
    pair scored, no warning."""
    import warnings

    rng = np.random.default_rng(0)
    for n in (images, 2 * images):
        with ShardWriter(tmp_path / f"test{n}", split="test", source="unit", image_format="npy") as w:
            for i in range(n):
                feature = rng.standard_normal(8).astype(np.float32)
                for lang in ("en", "de"):
                    image = f"img{i}" if parallel else f"{lang}{i}"
                    for c in range(captions):
                        w.write(f"s{i}{lang}{c}", feature, f"{lang} caption {i} {c}", lang, image_id=image,
                                group=image)
    with pytest.raises(BackRetrievalError, match=rf"{images // 2 if parallel else images} distinct source images in "
                                                 r"de->en.*, not more than the largest K \(5\)"):
        evaluate_split(tmp_path / f"test{images}", ["random:8"], ks=(1, 5), bootstrap=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = evaluate_split(tmp_path / f"test{2 * images}", ["random:8"], ks=(1, 5), bootstrap=0, progress=False)
    assert set(res.results["random:8"]["pairs"]) == {"de->en", "en->de"}


def test_correlate_split_runs_the_protocol_per_pair(parallel_split, tmp_path):
    root, *_ = parallel_split
    specs = [f"good=npy:{root / 'good.npy'}", "# graded copies of one model",
             f"noisy=noisy:2.0:npy:{root / 'good.npy'}", "random:12"]
    res = correlate_split(root / "test", specs, pairs=["en-de"], n=30, seeds=3, ks=(1, 10), bootstrap=0,
                          progress=False)
    pair = res.pairs["en->de"]
    assert list(pair["models"]) == ["good", "noisy", "random:12"] and pair["n"] == 30 and len(pair["seeds"]) == 3
    xlr = [pair["models"][m]["mean"]["xlr@10"] for m in pair["models"]]
    assert xlr[0] > xlr[1] > xlr[2]
    # three models of graded quality: BkR orders them as XLR does in every seed, and its values follow XLR's
    correlation = pair["correlation"]["@10"]
    assert correlation["spearman"]["bkr"]["per_seed"] == [1.0, 1.0, 1.0]
    assert min(correlation["pearson"]["bkr"]["per_seed"]) > 0.8
    record = res.to_record()
    assert list(record) == ["task", "inputs", "data", "checksum", "image_model", "models", "ks", "ties", "max_rank",
                            "corr_pairs", "retrieval", "bootstrap", "level", "pairs"]
    assert record["models"]["noisy"]["spec"] == f"noisy:2.0:npy:{root / 'good.npy'}"
    assert res.table(10).splitlines()[2].startswith("| en->de | ")
    assert [p.name for p in res.save_plots(tmp_path, 10)] == ["scatter_en-de.png"]
    every = correlate_split(root / "test", specs[-2:], n=10, seeds=1, ks=(1,), bootstrap=0, progress=False)
    assert set(every.pairs) == {f"{a}->{b}" for a in LANGS for b in LANGS if a != b}


def test_correlate_split_takes_half_the_items_per_side_by_default(parallel_split):
    """n unset: min(10000, items // 2) per side, the most a non-matching split of the pair's 80 images allows."""
    root, *_ = parallel_split
    res = correlate_split(root / "test", [f"good=npy:{root / 'good.npy'}", "random:12"], pairs=["en-de"], seeds=1,
                          ks=(1,), bootstrap=0, progress=False)
    assert res.pairs["en->de"]["n"] == 80 // 2


def test_correlate_split_with_thumbnail_and_random_g(parallel_split):
    root, *_ = parallel_split
    models = {"good": f"npy:{root / 'good.npy'}", "random": "random:12"}
    run = dict(pairs=[("en", "de")], n=30, seeds=2, ks=(1, 10), bootstrap=0, progress=False)
    with pytest.raises(BackRetrievalError, match="needs pixels"):  # this split stores features, no pixels
        correlate_split(root / "test", models, extractor=image_feature_extractor("thumbnail:16"), **run)
    bkr = {}
    for g in (None, image_feature_extractor("random:1")):  # the stored features, then the null g replacing them
        rec = correlate_split(root / "test", models, extractor=g, **run).to_record()
        bkr[rec["image_model"]] = rec["pairs"]["en->de"]["models"]["good"]["mean"]["bkr@10"]
    assert set(bkr) == {None, "random:1"} and bkr[None] > bkr["random:1"] + 0.3  # chance: 10 / 30


def test_correlate_split_checks_models_and_pairs_first(tmp_path):
    missing = tmp_path / "nosplit"  # never read: the checks come before the data
    with pytest.raises(BackRetrievalError, match="at least 2 model specs \\(got 1\\)"):
        correlate_split(missing, ["random:4"])
    with pytest.raises(BackRetrievalError, match="pairs: expected SRC-TGT with two different languages, got 'en'"):
        correlate_split(missing, ["random:4", "random:5"], pairs=["en"])
    assert language_pairs(["en-de", ("de", "fr")]) == [("en", "de"), ("de", "fr")]
    with pytest.raises(BackRetrievalError, match="got 'en-en'"):
        language_pairs(["en-en"])


def test_parse_model_specs_labels():
    assert parse_model_specs(["use", "USE-M=use", "npy:/a=b.npy", "# comment", ""]) == {
        "use": "use", "USE-M": "use", "npy:/a=b.npy": "npy:/a=b.npy"}


def test_one_string_for_the_models_or_languages_is_refused(parallel_split):
    """evaluate_split(split, "random:12") read the spec as its characters (model 'r', 'a', ...)."""
    root = parallel_split[0]
    with pytest.raises(BackRetrievalError, match=r"^models: expected a sequence of model specs or text embedders, "
                                                 r"got one str "
                                                 r"\('random:12'\); wrap it in a list$"):
        evaluate_split(root / "test", "random:12", progress=False)
    with pytest.raises(BackRetrievalError, match=r"^languages: expected a sequence of language codes, got one str"):
        evaluate_split(root / "test", ["random:12"], languages="en", progress=False)


@pytest.mark.parametrize("langs", [["en"] * 6, ["en", "de"] * 3])
@pytest.mark.parametrize("kwargs, message", [
    ({"max_per_lang": -1}, "^max_per_lang -1: expected at least 1 caption per side$"),
    ({"seed": -1}, r"^seed: expected an integer >= 0, got -1$"),
    ({"corr_pairs": 0}, "^corr_pairs 0: expected at least 1 pair sampled for CORR$"),
    ({"bootstrap": -1}, r"^bootstrap: expected a number of replicates >= 0 \(0: no intervals\), got -1$"),
    ({"level": 1.5}, r"^level: expected an interval level in \(0, 1\), got 1.5$"),
    ({"block_bytes": 0}, "^block_bytes 0: expected a positive number of bytes per block$"),
])
def test_evaluate_pairs_checks_its_options_before_any_pair_is_scored(langs, kwargs, message):
    """max_per_lang=-1 and seed=-1 failed with numpy's messages inside the first pair, and level, corr_pairs,
    bootstrap and block_bytes were never checked when no pair was scored (one language): one-line errors up front."""
    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(6, 4)), rng.normal(size=(6, 3))
    with pytest.raises(BackRetrievalError, match=message):
        evaluate_pairs(text, langs, images, [f"i{n}" for n in range(6)], (1,), **kwargs)


def test_aligned_pair_takes_the_first_caption_of_each_group_and_language(tmp_path):
    """The protocol's parallel items: one per group captioned in both languages, from its first caption in each
    language (file order); a group in one language only is no item."""
    from backretrieval.data import SplitData, aligned_pair

    langs = ["en", "de", "en", "de", "en", "fr"]
    groups = ["g0", "g0", "g0", "g1", "g1", "g2"]  # g0 has two en captions (rows 0, 2); g2 no de caption
    data = SplitData(split_dir=tmp_path, checksum="", texts=[f"t{i}" for i in range(6)],
                     langs=np.asarray(langs, dtype=object), image_ids=np.asarray(groups, dtype=object),
                     groups=np.asarray(groups, dtype=object), image_keys=["g0", "g1", "g2"],
                     image_index=np.asarray([0, 0, 0, 1, 1, 2]), images=[], image_format="npy")
    src, tgt, img = aligned_pair(data, "en", "de")
    assert src.tolist() == [0, 4] and tgt.tolist() == [1, 3] and img.tolist() == [0, 1]


@pytest.mark.parametrize("kwargs, message", [
    ({"text_scores": lambda s, t: np.zeros((len(s), len(t)))},
     r"^evaluate_pairs: text_scores gives BkR only \(with_corr=False, no groups\)$"),
    ({"text_scores": lambda s, t: np.zeros((len(s), len(t))), "with_corr": False, "groups": ["g"] * 6},
     r"^evaluate_pairs: text_scores gives BkR only"),
    ({"text_emb": None, "with_corr": False}, "^evaluate_pairs: give text_emb or text_scores$"),
    ({"groups": ["g0", "g1"]}, "^evaluate_pairs: groups has 2 entries, expected 6$"),
])
def test_evaluate_pairs_refuses_a_text_side_it_cannot_score(kwargs, message):
    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(6, 4)), rng.normal(size=(6, 3))
    kwargs = {"text_emb": text, **kwargs}
    with pytest.raises(BackRetrievalError, match=message):
        evaluate_pairs(kwargs.pop("text_emb"), ["en", "de"] * 3, images, [f"i{n}" for n in range(6)], (1,), **kwargs)


def test_sides_that_share_no_image_are_kept_whole_and_shared_images_go_to_one_side():
    from backretrieval.pairs import non_matching_sides

    ids = np.array(["a", "b", "c", "d", "a", "e"])
    src, tgt = non_matching_sides(np.array([0, 1]), np.array([2, 3, 5]), ids, np.random.default_rng(0))
    assert src.tolist() == [0, 1] and tgt.tolist() == [2, 3, 5]  # nothing shared: nothing dropped
    src, tgt = non_matching_sides(np.array([0, 1]), np.array([4, 3]), ids, np.random.default_rng(0))
    assert not set(ids[src]) & set(ids[tgt]) and {"b", "d"} <= set(ids[src]) | set(ids[tgt])


def _split_data(tmp_path, langs, groups, image_format="npy"):
    from backretrieval.data import SplitData

    n = len(langs)
    return SplitData(split_dir=tmp_path, checksum="", texts=[f"t{i}" for i in range(n)],
                     langs=np.asarray(langs, dtype=object), image_ids=np.asarray(groups, dtype=object),
                     groups=np.asarray(groups, dtype=object), image_keys=[f"k{i}" for i in range(n)],
                     image_index=np.arange(n), images=[b"\xff"] * n, image_format=image_format)


def test_a_language_pair_without_a_common_group_is_refused_naming_the_split(tmp_path):
    from backretrieval.data import aligned_pair

    data = _split_data(tmp_path, ["en", "de", "en", "fr"], ["g0", "g1", "g2", "g0"])
    with pytest.raises(BackRetrievalError, match=f"^{tmp_path}: no group has captions in both en and de$"):
        aligned_pair(data, "en", "de")
    assert aligned_pair(data, "en", "fr")[0].tolist() == [0]


def test_a_split_of_pixels_without_an_image_model_is_refused_naming_the_format(tmp_path):
    from backretrieval.data import image_features, stored_image_format

    data = _split_data(tmp_path, ["en", "de"], ["g0", "g0"], image_format="jpg")
    assert stored_image_format(data) == "jpg"
    with pytest.raises(BackRetrievalError, match=f"^{tmp_path}: images are jpg; an image model is needed for g"):
        image_features(data, None)
