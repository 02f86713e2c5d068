"""Several image encoders as one: `globetrotter-data features concat`, and `features build --views 0`."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_data_cli

from globetrotter.config import load_train_config
from globetrotter.data.feature_cache import CacheSpec, load_feature_cache
from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.data.feature_concat import concat_caches
from globetrotter.data.feature_import import split_image_ids
from globetrotter.errors import UserError
from globetrotter.models.image import create_image_backbone

SMALL = {"channels": [8, 16, 16, 16], "stem_width": 8}


def spec(views: int) -> CacheSpec:
    return CacheSpec(backbone="resnet18", weights="random", weights_sha256="", image_size=32, views=views,
                     crop_scale_min=0.5, colour_jitter=0.4, hue_jitter=0.0, grayscale=0.0, hflip=True, seed=0)


def build(split: Path, out: Path, seed: int, views: int) -> Path:
    torch.manual_seed(seed)
    backbone = create_image_backbone("resnet18", None, **SMALL)
    build_feature_cache(split, spec(views), out, backbone, batch_images=16, workers=0, progress=False)
    return out


@pytest.fixture(scope="module")
def caches(tiny_world, tmp_path_factory) -> tuple[Path, Path]:
    """Two encoders' caches of the train split: whole image only, and whole image + 2 augmented views."""
    root = tmp_path_factory.mktemp("concat")
    split = tiny_world / "train"
    return build(split, root / "a", seed=0, views=0), build(split, root / "b", seed=1, views=2)


def centred_unit(cache_dir: Path, ids: list[str]) -> np.ndarray:
    cache = load_feature_cache(cache_dir)
    x = cache.features[cache.rows(ids, cache_dir), 0].astype(np.float64)
    x -= x.mean(axis=0)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_concat_joins_each_cache_centred_and_unit_length(tiny_world, caches, tmp_path):
    split = tiny_world / "train"
    a, b = caches
    record = concat_caches(split, [a, b], tmp_path / "ab", "ab", progress=False)
    ids = split_image_ids(split)
    joined = load_feature_cache(tmp_path / "ab")
    d = load_feature_cache(a).features.shape[-1]
    assert joined.features.shape == (len(ids), 1, 2 * d) and joined.views == 0 and list(joined.row_of) == ids
    expected = np.concatenate([centred_unit(a, ids), centred_unit(b, ids)], axis=1)
    np.testing.assert_allclose(joined.features[:, 0].astype(np.float64), expected, atol=2e-3)
    halves = joined.features[:, 0].astype(np.float64).reshape(len(ids), 2, d)
    np.testing.assert_allclose(np.linalg.norm(halves, axis=2), 1.0, atol=5e-3)  # each encoder weighs the same
    assert record["spec"]["backbone"] == "imported" and record["spec"]["weights"] == "ab"
    assert [s["path"] for s in record["imported"]["sources"]] == [str(a.resolve()), str(b.resolve())]
    # the order of the caches is the order of the columns
    concat_caches(split, [b, a], tmp_path / "ba", "ba", progress=False)
    swapped = load_feature_cache(tmp_path / "ba").features[:, 0]
    np.testing.assert_array_equal(swapped[:, :d], joined.features[:, 0, d:])


def test_another_split_is_joined_in_the_space_of_the_first(tiny_world, tmp_path):
    """New photos (here val's) centred on the train split's means, as the run that trained on train saw its images."""
    caches = {}
    for split in ("train", "val"):
        caches[split] = [build(tiny_world / split, tmp_path / f"{split}-{seed}", seed=seed, views=0) for seed in (0, 1)]
    concat_caches(tiny_world / "train", caches["train"], tmp_path / "train-joined", "j", progress=False)
    concat_caches(tiny_world / "val", caches["val"], tmp_path / "val-joined", "j", progress=False,
                  centre_like=tmp_path / "train-joined")
    ids = split_image_ids(tiny_world / "val")
    parts = []
    for train_cache, val_cache in zip(caches["train"], caches["val"]):
        train_rows = load_feature_cache(train_cache).features[:, 0].astype(np.float64)
        cache = load_feature_cache(val_cache)
        x = cache.features[cache.rows(ids, val_cache), 0].astype(np.float64) - train_rows.mean(axis=0)
        parts.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    joined = load_feature_cache(tmp_path / "val-joined").features[:, 0].astype(np.float64)
    np.testing.assert_allclose(joined, np.concatenate(parts, axis=1), atol=2e-3)
    with pytest.raises(UserError, match="another source"):  # was: replaced in silence by the rows centred on val's own means
        concat_caches(tiny_world / "val", caches["val"], tmp_path / "val-joined", "j", progress=False)
    own = concat_caches(tiny_world / "val", caches["val"], tmp_path / "val-own", "j", progress=False)
    assert "centred_like" not in own["imported"]
    assert not np.allclose(load_feature_cache(tmp_path / "val-own").features[:, 0].astype(np.float64), joined, atol=2e-3)
    with pytest.raises(UserError, match="no means.npz here"):
        concat_caches(tiny_world / "val", caches["val"], tmp_path / "x", "j", progress=False, centre_like=caches["val"][0])
    # a damaged means.npz: one line naming it (was an EOFError / BadZipFile / ValueError traceback)
    means = (tmp_path / "train-joined" / "means.npz").read_bytes()
    for damaged in (b"", means[: len(means) // 2], b"not an npz at all"):
        (tmp_path / "train-joined" / "means.npz").write_bytes(damaged)
        with pytest.raises(UserError, match=r"train-joined: means\.npz is unreadable \(.*write that concatenation again"):
            concat_caches(tiny_world / "val", caches["val"], tmp_path / "y", "j", progress=False,
                          centre_like=tmp_path / "train-joined")


def test_concat_refuses_bad_input_and_writes_nothing(tiny_world, caches, tmp_path):
    split = tiny_world / "train"
    a, b = caches
    out = tmp_path / "out"
    with pytest.raises(UserError, match="two or more caches, got 1"):
        concat_caches(split, [a], out, "x", progress=False)
    with pytest.raises(UserError, match="named twice"):
        concat_caches(split, [a, a], out, "x", progress=False)
    with pytest.raises(UserError, match="missing from the feature cache"):  # a cache of the train split, read for val
        concat_caches(tiny_world / "val", [a, b], out, "x", progress=False)
    with pytest.raises(UserError, match="no feature cache here"):
        concat_caches(split, [a, tmp_path / "nowhere"], out, "x", progress=False)
    assert not out.exists() and not out.with_name("out.tmp").exists()
    concat_caches(split, [a, b], out, "x", progress=False)
    with pytest.raises(UserError, match="pass --overwrite"):  # other embeddings at --out are kept
        concat_caches(split, [a, b], out, "y", progress=False)
    assert json.loads((out / "cache.json").read_text())["spec"]["weights"] == "x"


def test_an_out_that_is_one_of_the_inputs_is_refused_even_with_force(tiny_world, caches, tmp_path):
    import shutil

    split = tiny_world / "train"
    a, b = caches
    mine = shutil.copytree(a, tmp_path / "a")
    before = (mine / "cache.json").read_text()
    with pytest.raises(UserError, match=f"--out {mine}: is also --cache {mine}"):  # was: replaced by the join
        concat_caches(split, [mine, b], mine, "x", force=True, progress=False)
    joined = tmp_path / "joined"
    concat_caches(split, [mine, b], joined, "x", progress=False)
    with pytest.raises(UserError, match="is also --centre-like"):
        concat_caches(split, [mine, b], joined, "x", force=True, progress=False, centre_like=joined)
    assert (mine / "cache.json").read_text() == before


def test_build_with_no_views_then_concat_from_the_command_line(tiny_world, tmp_path, capsys):
    split = tiny_world / "train"
    torch.manual_seed(0)
    weights = tmp_path / "small.safetensors"
    from safetensors.torch import save_file

    save_file(create_image_backbone("resnet18", None, **SMALL).state_dict(), str(weights))
    build = ["features", "build", str(split), "model.image_backbone_args.channels=[8,16,16,16]",
             "model.image_backbone_args.stem_width=8", "--workers", "0", "--image-model", "resnet18",
             "--image-weights", str(weights), "--image-size", "32"]
    code, _, stderr = run_data_cli(build + ["--views", "0", "--out", str(tmp_path / "whole")], capsys)
    assert code == 0, stderr[-2000:]
    whole = load_feature_cache(tmp_path / "whole")
    assert whole.views == 0 and whole.spec.views == 0  # 0 views is a value, not "the config's default"
    code, _, stderr = run_data_cli(build + ["--views", "2", "--out", str(tmp_path / "views")], capsys)
    assert code == 0, stderr[-2000:]
    np.testing.assert_array_equal(load_feature_cache(tmp_path / "views").features[:, 0], whole.features[:, 0])
    for bad in (["--views", "-1"], ["--image-size", "0"]):
        code, _, stderr = run_data_cli(build + bad + ["--out", str(tmp_path / "bad")], capsys)
        assert code == 2 and bad[0] in stderr and not (tmp_path / "bad").exists()
    code, stdout, stderr = run_data_cli(["features", "concat", str(split), "--cache", str(tmp_path / "whole"), "--cache",
                                    str(tmp_path / "views"), "--name", "joined", "--out", str(tmp_path / "joined"),
                                    "--no-progress"], capsys)
    assert code == 0, stderr[-2000:]
    assert "model.image_pretrained=joined" in stdout
    # the printed overrides load on the default config (they lacked model.freeze_image_backbone=true: refused)
    cfg = load_train_config(None, shlex.split(stdout.split("train with ", 1)[1].splitlines()[0]))
    assert cfg.model.freeze_image_backbone and cfg.data.features == str(tmp_path / "joined")
    assert load_feature_cache(tmp_path / "joined").features.shape[-1] == 2 * whole.features.shape[-1]
    code, _, stderr = run_data_cli(["features", "concat", str(split), "--cache", str(tmp_path / "whole"), "--name", "j",
                               "--out", str(tmp_path / "one")], capsys)
    assert code != 0 and stderr.strip().splitlines()[-1] == "error: features concat joins two or more caches, got 1"


def test_a_corrupt_features_file_is_one_line_naming_it(tiny_world, caches, tmp_path, capsys):
    """A features.npy cut short or not an npy file: one line naming it (exit 2), not numpy's traceback; no --out."""
    import shutil

    a, b = caches
    whole = (b / "features.npy").read_bytes()
    for data, why in ((whole[: len(whole) // 2], "mmap length is greater than file size"),
                      (whole[:60], "EOF: reading array header"), (b"garbage\n", "no .npy header: not an npy file")):
        bad = tmp_path / "bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(b, bad)
        (bad / "features.npy").write_bytes(data)
        code, _, err = run_data_cli(["features", "concat", str(tiny_world / "train"), "--cache", str(a), "--cache",
                                     str(bad), "--name", "j", "--out", str(tmp_path / "out"), "--no-progress"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err[-2000:]
        assert lines[0].startswith(f"error: {bad / 'features.npy'}: not a readable .npy array") and why in lines[0]
        assert not (tmp_path / "out").exists() and not (tmp_path / "out.tmp").exists()


def test_a_damaged_image_ids_file_or_a_features_file_of_another_cache_is_one_line(caches, tmp_path):
    """Was: json's traceback for an image_ids.json cut short or not UTF-8 (eval.py select --image-features, features
    concat, a run), and a features.npy copied from another cache of the same images read silently at its own width."""
    import shutil

    a, b = caches
    for name, damage, expected in (
            ("cut", lambda d: (d / "image_ids.json").write_text((a / "image_ids.json").read_text()[:15]),
             "image_ids.json: not a readable list of image ids ("),
            ("latin1", lambda d: (d / "image_ids.json").write_bytes(b'["caf\xe9"]'),
             "image_ids.json: not a readable list of image ids ("),
            ("object", lambda d: (d / "image_ids.json").write_text('{"ids": []}'),
             "image_ids.json: expected a JSON list of image ids, got dict"),
            ("other", lambda d: shutil.copy(b / "features.npy", d / "features.npy"),
             "features.npy: shape (")):
        bad = tmp_path / name
        shutil.copytree(a, bad)
        damage(bad)
        with pytest.raises(UserError) as err:
            load_feature_cache(bad)
        text = str(err.value)
        assert "\n" not in text and text.startswith(str(bad)) and expected in text, text
    assert "a features file of another cache" in text and "--overwrite" in text


def test_a_centre_like_record_in_utf8_reads_the_same_under_a_non_utf8_locale(tmp_path):
    """cache.json is UTF-8 (as every cache record is read): a joined cache's non-ASCII folder name, written unescaped,
    must read the same whatever the locale's encoding (here ASCII: the C locale, Python's UTF-8 mode off)."""
    import os
    import subprocess
    import sys

    sources = [{"path": "/données/日本", "dim": 8}, {"path": "/b", "dim": 4}]
    (tmp_path / "cache.json").write_bytes(json.dumps({"imported": {"sources": sources}}, ensure_ascii=False).encode())
    code = ("import json, sys; from pathlib import Path; from globetrotter.data.feature_concat import read_sources; "
            "sys.stdout.write(json.dumps(read_sources(Path(sys.argv[1]))))")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == sources


def test_a_centre_like_that_does_not_fit_these_caches_is_one_line_naming_what_it_holds(tiny_world, caches, tmp_path):
    """--centre-like names a concatenation of a built and an imported cache: another order names both lists (a built
    cache by backbone, weights, size and width); a means.npz whose vectors are not one per cache of these widths, a folder without cache.json or one whose
    cache.json joined nothing is refused naming the folder, and nothing is written."""
    import shutil

    from globetrotter.data.feature_import import import_embeddings

    split = tiny_world / "train"
    a, _ = caches
    ids = split_image_ids(split)
    np.save(tmp_path / "emb.npy", np.random.default_rng(0).normal(size=(len(ids), 6)).astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    b = tmp_path / "imported"
    import_embeddings(split, tmp_path / "emb.npy", b, "p", ids=tmp_path / "ids.txt", progress=False)
    like = tmp_path / "ab"
    concat_caches(split, [a, b], like, "ab", progress=False)
    d = load_feature_cache(a).features.shape[-1]
    out = tmp_path / "out"

    def refused(folder: Path, caches_in_order: list[Path]) -> str:
        with pytest.raises(UserError) as err:
            concat_caches(split, caches_in_order, out, "x", progress=False, centre_like=folder)
        assert "\n" not in str(err.value) and str(folder) in str(err.value)
        assert not out.exists() and not out.with_name("out.tmp").exists()
        return str(err.value)

    built, imported = f"resnet18 (random, 32 px, {d} dims)", "imported 'p' (6 dims)"
    assert f"it joined {built} + {imported}, but these caches are {imported} + {built}" in refused(like, [b, a])
    wrong_width = shutil.copytree(like, tmp_path / "wrong-width")
    np.savez(wrong_width / "means.npz", np.zeros(d), np.zeros(7))
    assert f"its means.npz has means of {[d, 7]} dims, these caches {[d, 6]}" in refused(wrong_width, [a, b])
    not_vectors = shutil.copytree(like, tmp_path / "not-vectors")
    np.savez(not_vectors / "means.npz", np.zeros((2, d)))
    assert f"means.npz holds [{(2, d)}], expected one mean vector per joined cache" in refused(not_vectors, [a, b])
    no_record = shutil.copytree(like, tmp_path / "no-record")
    (no_record / "cache.json").unlink()
    assert "no readable cache.json" in refused(no_record, [a, b])
    no_sources = shutil.copytree(like, tmp_path / "no-sources")
    record = json.loads((no_sources / "cache.json").read_text())
    del record["imported"]["sources"]
    (no_sources / "cache.json").write_text(json.dumps(record))
    assert "names no joined caches" in refused(no_sources, [a, b])
