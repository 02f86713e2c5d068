"""What a feature-cache writer may replace, and what a cache must match to be read: the guard of every writer
(build, import, concat, a run's own build), the swap of a new cache over an old one, model.image_backbone_args in the
spec, --centre-like's encoders and their order, nested parquet lists, and a half-removed cache."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_tiny_world, run_data_cli
from globetrotter.config import load_train_config
from globetrotter.data.feature_cache import load_feature_cache, spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache, ensure_feature_cache
from globetrotter.data.feature_concat import concat_caches
from globetrotter.data.feature_import import import_embeddings, split_image_ids
from globetrotter.errors import UserError
from globetrotter.models.image import create_image_backbone

SMALL = {"channels": [8, 16, 16, 16], "stem_width": 8}
SMALL_ARGS = [f"model.image_backbone_args.channels={SMALL['channels']}",
              f"model.image_backbone_args.stem_width={SMALL['stem_width']}"]


def small_backbone(**extra) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_image_backbone("resnet18", None, **SMALL, **extra)


def listing(folder: Path) -> list[tuple[str, int]]:
    """Every file under ``folder`` with its size: what a refused write must leave as it was."""
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def config(*overrides: str):
    return load_train_config(None, ["data.image_size=32", "data.feature_views=2", *SMALL_ARGS, *overrides])


def one_line_error(code: int, stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert code == 2 and lines and lines[-1].startswith("error:"), stderr[-2000:]
    return lines[-1]


def write_npy(folder: Path, ids: list[str], vectors: np.ndarray) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "emb.npy", vectors.astype(np.float32))
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    return folder / "emb.npy", folder / "ids.txt"


@pytest.fixture
def world(tmp_path) -> Path:
    return make_tiny_world(tmp_path / "world", n_train=24, n_val=12, n_test=4)


@pytest.fixture
def weights(tmp_path) -> Path:
    from safetensors.torch import save_file

    path = tmp_path / "small.safetensors"
    save_file(small_backbone().state_dict(), str(path))
    return path


def test_no_writer_replaces_a_folder_that_is_no_feature_cache(world, tmp_path, weights, capsys):
    (world / "notes.txt").write_text("kept")
    before = listing(world)
    split = world / "train"
    # features build --out <the dataset root>, with and without --overwrite
    build = ["features", "build", str(split), *SMALL_ARGS, "--image-model", "resnet18", "--image-weights", str(weights),
             "--image-size", "32", "--views", "1", "--workers", "0", "--out", str(world)]
    for extra in ([], ["--overwrite"]):
        line = one_line_error(*run_data_cli(build + extra, capsys)[::2])
        assert str(world) in line and "notes.txt" in line and "train/" in line
    # features import / concat --overwrite --out <a split>
    ids = split_image_ids(split)
    emb, id_file = write_npy(tmp_path / "src", ids, np.random.default_rng(0).normal(size=(len(ids), 4)))
    for force in ([], ["--overwrite"]):
        line = one_line_error(*run_data_cli(["features", "import", str(split), "--embeddings", str(emb), "--ids",
                                             str(id_file), "--name", "x", "--no-progress", "--out", str(split), *force],
                                            capsys)[::2])
        assert str(split) in line and "manifest.json" in line
    for name in ("a", "b"):
        import_embeddings(split, emb, tmp_path / name, name, ids=id_file, progress=False)
    with pytest.raises(UserError, match="manifest.json"):
        concat_caches(split, [tmp_path / "a", tmp_path / "b"], split, "ab", force=True, progress=False)
    # a run whose data.features names the dataset root
    cfg = config(f"data.root={world}", f"data.features={world}", "model.freeze_image_backbone=true",
                 f"model.image_pretrained={weights}")
    with pytest.raises(UserError) as err:
        ensure_feature_cache(cfg, "train", log=lambda _: None)
    assert "\n" not in str(err.value) and str(world) in str(err.value) and "notes.txt" in str(err.value)
    # a cache folder that holds other files too is no cache to replace, --overwrite or not
    cache = tmp_path / "cache"
    import_embeddings(split, emb, cache, "x", ids=id_file, progress=False)
    (cache / "mine.txt").write_text("kept")
    with pytest.raises(UserError, match="mine.txt"):
        import_embeddings(split, emb, cache, "x", ids=id_file, force=True, progress=False)
    assert (cache / "mine.txt").read_text() == "kept"
    assert listing(world) == before and not list(tmp_path.glob("*.tmp")) and not list(world.glob("*.tmp"))


def test_a_tmp_folder_holding_other_files_is_never_deleted_as_a_leftover_write(tmp_path):
    """``<out>.tmp`` is cleared only when it holds nothing but cache files (a killed write's leftover): a folder of
    that name holding anything else is refused and kept as it was; a leftover is removed."""
    from globetrotter.data.feature_cache_write import start_cache_write

    out, tmp = tmp_path / "features", tmp_path / "features.tmp"
    tmp.mkdir()
    (tmp / "features.npy").write_bytes(b"half")
    (tmp / "notes.txt").write_text("mine")
    before = listing(tmp)
    with pytest.raises(UserError, match=r"features.tmp: .* holds features.npy, notes.txt, not a leftover"):
        start_cache_write(out)
    assert listing(tmp) == before
    (tmp / "notes.txt").unlink()
    assert start_cache_write(out) == tmp and not any(tmp.iterdir())  # a leftover: cleared


def test_a_new_cache_is_swapped_in_over_the_old_one_which_survives_a_failed_swap(world, tmp_path, monkeypatch):
    split, out = world / "train", tmp_path / "features"
    build_feature_cache(split, spec_from_config(config()), out, small_backbone(), workers=0, progress=False)
    old = load_feature_cache(out)
    old_rows, old_record = np.array(old.features), (out / "cache.json").read_text()
    del old
    other = spec_from_config(config("data.feature_views=3"))
    real = os.replace

    def failing(src, dst, *args, **kwargs):
        if Path(src).name.endswith(".tmp"):
            raise OSError("disk full")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        build_feature_cache(split, other, out, small_backbone(), workers=0, progress=False)
    monkeypatch.setattr(os, "replace", real)
    assert (out / "cache.json").read_text() == old_record  # the old cache, whole, where it was
    np.testing.assert_array_equal(load_feature_cache(out).features, old_rows)
    build_feature_cache(split, other, out, small_backbone(), workers=0, progress=False)
    assert load_feature_cache(out, other).views == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("features")] == ["features"]  # no .tmp, no old
    # an empty folder is a place to write a cache
    (tmp_path / "empty").mkdir()
    build_feature_cache(split, other, tmp_path / "empty", small_backbone(), workers=0, progress=False)
    assert load_feature_cache(tmp_path / "empty", other).views == 3


def test_concat_writes_its_means_before_the_cache_is_renamed_into_place(world, tmp_path, monkeypatch):
    split = world / "train"
    ids = split_image_ids(split)
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        emb, id_file = write_npy(tmp_path / f"src-{name}", ids, rng.normal(size=(len(ids), 5)))
        import_embeddings(split, emb, tmp_path / name, name, ids=id_file, progress=False)
    seen, real = [], os.replace

    def spy(src, dst, *args, **kwargs):
        if Path(src).name.endswith(".tmp"):
            seen.append(sorted(p.name for p in Path(src).iterdir()))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", spy)
    concat_caches(split, [tmp_path / "a", tmp_path / "b"], tmp_path / "ab", "ab", progress=False)
    assert seen and "means.npz" in seen[-1] and "cache.json" in seen[-1]
    with np.load(tmp_path / "ab" / "means.npz") as means:
        a = load_feature_cache(tmp_path / "a").features[:, 0].astype(np.float64)
        np.testing.assert_allclose(means["arr_0"], a.mean(axis=0), rtol=1e-6, atol=1e-9)


def test_image_backbone_args_are_part_of_the_spec(world, tmp_path, capsys, weights):
    split = world / "train"
    mean_pool, max_pool = config(), config("model.image_backbone_args.global_pool=max")
    assert spec_from_config(mean_pool) != spec_from_config(max_pool)
    out = tmp_path / "features"
    build_feature_cache(split, spec_from_config(mean_pool), out, small_backbone(), workers=0, progress=False)
    assert load_feature_cache(out, spec_from_config(mean_pool), split).row_of
    with pytest.raises(UserError, match="global_pool") as err:
        load_feature_cache(out, spec_from_config(max_pool), split)
    assert "\n" not in str(err.value)
    # the build command: another pooling is refused, not "up to date"
    def build(*overrides: str) -> list[str]:
        return ["features", "build", str(split), *SMALL_ARGS, *overrides, "--image-model", "resnet18", "--image-weights",
                str(weights), "--image-size", "32", "--views", "1", "--workers", "0", "--out", str(tmp_path / "cli")]

    code, stdout, stderr = run_data_cli(build(), capsys)
    assert code == 0, stderr[-2000:]
    line = one_line_error(*run_data_cli(build("model.image_backbone_args.global_pool=max"), capsys)[::2])
    assert "global_pool" in line
    # a cache.json written before the spec had the arguments: built with none, still read for a config with none
    plain = config("model.image_backbone_args={}")
    build_feature_cache(split, spec_from_config(plain), tmp_path / "old", small_backbone(), workers=0, progress=False)
    record = json.loads((tmp_path / "old" / "cache.json").read_text())
    del record["spec"]["backbone_args"]
    (tmp_path / "old" / "cache.json").write_text(json.dumps(record))
    assert load_feature_cache(tmp_path / "old", spec_from_config(plain), split).row_of
    with pytest.raises(UserError, match="stem_width"):
        load_feature_cache(tmp_path / "old", spec_from_config(mean_pool), split)


def test_centre_like_refuses_other_encoders_or_another_order(world, tmp_path):
    rng = np.random.default_rng(2)
    caches: dict[str, dict[str, Path]] = {}
    for split in ("train", "val"):
        ids = split_image_ids(world / split)
        for name in ("p", "q", "r"):  # the same encoders' embeddings of each split, each 6 dims
            emb, id_file = write_npy(tmp_path / f"src-{split}-{name}", ids, rng.normal(size=(len(ids), 6)))
            out = tmp_path / f"{split}-{name}"
            import_embeddings(world / split, emb, out, name, ids=id_file, progress=False)
            caches.setdefault(split, {})[name] = out
    train, val = caches["train"], caches["val"]
    concat_caches(world / "train", [train["p"], train["q"]], tmp_path / "pq-train", "pq", progress=False)
    like = tmp_path / "pq-train"
    for wrong in (["q", "p"], ["p", "r"]):
        with pytest.raises(UserError) as err:
            concat_caches(world / "val", [val[n] for n in wrong], tmp_path / "bad", "pq", progress=False, centre_like=like)
        message = str(err.value)
        assert "\n" not in message and str(like) in message
        assert all(repr(n) in message for n in {"p", "q", *wrong})  # both lists of encoders named
        assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.tmp").exists()
    concat_caches(world / "val", [val["p"], val["q"]], tmp_path / "pq-val", "pq", progress=False, centre_like=like)
    assert load_feature_cache(tmp_path / "pq-val").features.shape[-1] == 12


def test_nested_list_parquet_embeddings_are_a_one_line_error(world, tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    ids = split_image_ids(world / "train")
    kind = pa.list_(pa.list_(pa.float32()))
    table = pa.table({"image_id": pa.array(ids), "embedding": pa.array([[[float(i)] * 3] for i in range(len(ids))], kind)})
    path = tmp_path / "nested.parquet"
    pq.write_table(table, path)
    out = tmp_path / "out"
    line = one_line_error(*run_data_cli(["features", "import", str(world / "train"), "--embeddings", str(path),
                                         "--name", "x", "--no-progress", "--out", str(out)], capsys)[::2])
    assert str(path) in line and "'embedding'" in line and str(pq.read_schema(path).field("embedding").type) in line
    assert not out.exists() and not (tmp_path / "out.tmp").exists()


@pytest.mark.parametrize("gone", ["features.npy", "image_ids.json"])
def test_a_half_removed_cache_says_to_rebuild_it_with_overwrite(world, tmp_path, weights, capsys, gone):
    out = tmp_path / "features"
    build = ["features", "build", str(world / "train"), *SMALL_ARGS, "--image-model", "resnet18", "--image-weights",
             str(weights), "--image-size", "32", "--views", "1", "--workers", "0", "--out", str(out)]
    code, _, stderr = run_data_cli(build, capsys)
    assert code == 0, stderr[-2000:]
    (out / gone).unlink()
    with pytest.raises(UserError, match="--overwrite") as err:
        load_feature_cache(out)
    assert gone in str(err.value) and "\n" not in str(err.value)
    line = one_line_error(*run_data_cli(build, capsys)[::2])
    assert gone in line and "--overwrite" in line
    code, _, stderr = run_data_cli(build + ["--overwrite"], capsys)  # what the error says to do
    assert code == 0, stderr[-2000:]
    assert len(load_feature_cache(out).row_of) == len(split_image_ids(world / "train"))


def test_concat_help_is_true_about_caches_of_other_splits(world, tmp_path, capsys):
    """Caches are matched by image id: one of another dataset's split with the same ids (other pixels) is joined,
    as the help says; one of the same split built before it was rewritten is refused, as it says too."""
    import globetrotter.data.feature_cache_cli as cli

    other = make_tiny_world(tmp_path / "other", n_train=24, n_val=12, n_test=4, size=48)  # same ids, other photos
    assert split_image_ids(other / "train") == split_image_ids(world / "train")
    for name in ("a", "b"):
        build_feature_cache(world / "train", spec_from_config(config()), tmp_path / name,
                            small_backbone(global_pool="max" if name == "b" else "avg"), workers=0, progress=False)
    concat_caches(other / "train", [tmp_path / "a", tmp_path / "b"], tmp_path / "ab", "ab", progress=False)
    manifest = json.loads((world / "train" / "manifest.json").read_text())
    (world / "train" / "manifest.json").write_text(json.dumps({**manifest, "checksum": "sha256:rewritten"}))
    with pytest.raises(UserError, match="rewritten"):
        concat_caches(world / "train", [tmp_path / "a", tmp_path / "b"], tmp_path / "x", "x", progress=False)
    import argparse

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["features", "concat", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a cache of another split or" not in text  # the old, untrue claim
    assert "same ids is not told apart" in text and "rewritten" in text


class _SecondWriter(torch.nn.Module):
    """A backbone that, at its second batch, runs ``second()`` (another writer of the same cache) once."""

    def __init__(self, second):
        super().__init__()
        self.inner, self.second, self.calls, self.result = small_backbone(), second, 0, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 2:
            try:
                self.second()
                self.result = "finished"
            except UserError as err:
                self.result = str(err)
        return self.inner(x)


def test_a_second_cache_writer_is_refused_while_the_first_writes_and_the_first_completes(world, tmp_path):
    """Each writer cleared a `.tmp` folder it found as an interrupted write's leftover: a second build (or import)
    into the folder deleted the first's work in progress, and the first then failed with a traceback."""
    split, out, spec = world / "train", tmp_path / "features", spec_from_config(config())
    ids = split_image_ids(split)
    emb, id_file = write_npy(tmp_path / "src", ids, np.random.default_rng(0).normal(size=(len(ids), 4)))
    seconds = {
        "build": lambda: build_feature_cache(split, spec, out, small_backbone(), workers=0, progress=False),
        "import": lambda: import_embeddings(split, emb, out, "x", ids=id_file, force=True, progress=False),
    }
    reference = build_feature_cache(split, spec, tmp_path / "reference", small_backbone(), batch_images=8, workers=0,
                                    progress=False)
    for kind, second in seconds.items():
        first = _SecondWriter(second)
        build_feature_cache(split, spec, out, first, batch_images=8, workers=0, progress=False)
        label = "--out " if kind == "import" else ""
        assert first.result is not None and first.result.startswith(f"{label}{out}: another command is writing there"), \
            (kind, first.result)
        assert "\n" not in first.result
        cache, ref = load_feature_cache(out, spec, split), load_feature_cache(tmp_path / "reference", spec, split)
        assert cache.row_of == ref.row_of and np.array_equal(cache.features, ref.features), kind
        assert sorted(p.name for p in tmp_path.iterdir()) == ["features", "reference", "src", "world"], kind
    assert reference["images"] == len(ids)


def test_a_run_waits_for_another_writer_of_its_cache_and_reads_what_it_wrote(world, tmp_path, weights, monkeypatch):
    """Runs started together (seeds 0, 1, 2 on a fresh machine) each built the missing cache: the second deleted the
    first's write in progress. Now a run waits while another command holds the cache's lock, then reads its cache."""
    import subprocess
    import sys

    from data_prep.out_folder import lock_path

    out = tmp_path / "features"
    cfg = config(f"data.root={world}", f"data.features={out}", "model.freeze_image_backbone=true",
                 f"model.image_pretrained={weights}")
    built = tmp_path / "built"
    build_feature_cache(world / "train", spec_from_config(cfg), built, small_backbone(), workers=0, progress=False)
    holder = ("import shutil, sys\nfrom data_prep.out_folder import lock_out_folder\n"
              f"with lock_out_folder({str(out)!r}):\n    print('holding', flush=True)\n    sys.stdin.readline()\n"
              f"    shutil.copytree({str(built)!r}, {str(out)!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    lines: list[str] = []

    def waiting(line: str) -> None:  # the run says it waits: now the holder writes its cache and lets go
        lines.append(line)
        proc.stdin.write("go\n")
        proc.stdin.flush()

    try:
        assert proc.stdout.readline().strip() == "holding"
        monkeypatch.setattr("globetrotter.models.image.create_image_backbone",
                            lambda *a, **k: pytest.fail("built the cache another command was writing"))
        cache = ensure_feature_cache(cfg, "train", waiting)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert len(lines) == 1 and lines[0].startswith(f"data.features {out}: another command is writing there now") \
        and "waiting" in lines[0], lines
    assert np.array_equal(cache.features, load_feature_cache(built).features)
    assert not lock_path(out).exists()


def test_a_damaged_imported_or_joined_cache_says_how_it_was_written(world, tmp_path):
    """An imported cache is written again with features import, a concatenation with features concat (not build);
    a spec of another version, ids that do not match the rows, and an image the cache lacks are one line naming
    the folder; a write to a path that is a file is refused and the file kept."""
    import shutil

    split = world / "train"
    ids = split_image_ids(split)
    emb, id_file = write_npy(tmp_path / "src", ids, np.random.default_rng(0).normal(size=(len(ids), 4)))
    imported, joined = tmp_path / "imported", tmp_path / "joined"
    import_embeddings(split, emb, imported, "p", ids=id_file, progress=False)
    import_embeddings(split, emb, tmp_path / "other", "q", ids=id_file, progress=False)
    concat_caches(split, [imported, tmp_path / "other"], joined, "pq", progress=False)
    for folder, how in ((imported, "import"), (joined, "concat")):
        damaged = shutil.copytree(folder, tmp_path / f"damaged-{how}")
        (damaged / "features.npy").unlink()
        with pytest.raises(UserError, match=f"write it again with globetrotter-data features {how} {split} ... "
                                            f"--out {damaged} --overwrite"):
            load_feature_cache(damaged)
    old_spec = shutil.copytree(imported, tmp_path / "old-spec")
    record = json.loads((old_spec / "cache.json").read_text())
    record["spec"]["resolution"] = 224
    (old_spec / "cache.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=f"^{old_spec}/cache.json: not a feature-cache spec of this version .*resolution"):
        load_feature_cache(old_spec)
    short = shutil.copytree(imported, tmp_path / "short")
    (short / "image_ids.json").write_text(json.dumps(ids[:-1]))
    with pytest.raises(UserError, match=f"^{short}: image_ids.json lists {len(ids) - 1} images but features.npy has "
                                        f"{len(ids)} rows$"):
        load_feature_cache(short)
    with pytest.raises(UserError, match=f"^{imported}: 1 image\\(s\\) of {split} are missing from the feature cache "
                                        f"\\(first: 'nope'\\); import it again with globetrotter-data features import$"):
        load_feature_cache(imported).rows([ids[0], "nope"], split)
    (tmp_path / "a-file").write_text("kept")
    with pytest.raises(UserError, match="a-file: is not a folder, so not a feature cache to replace"):
        import_embeddings(split, emb, tmp_path / "a-file", "p", ids=id_file, force=True, progress=False)
    assert (tmp_path / "a-file").read_text() == "kept" and not (tmp_path / "a-file.tmp").exists()


def test_overwriting_a_link_to_a_cache_replaces_the_link_and_keeps_what_it_pointed_at(world, tmp_path):
    split = world / "train"
    ids = split_image_ids(split)
    emb, id_file = write_npy(tmp_path / "src", ids, np.random.default_rng(0).normal(size=(len(ids), 4)))
    target, link = tmp_path / "target", tmp_path / "link"
    import_embeddings(split, emb, target, "p", ids=id_file, progress=False)
    before = listing(target)
    link.symlink_to(target)
    import_embeddings(split, emb, link, "q", ids=id_file, force=True, progress=False)
    assert not link.is_symlink() and load_feature_cache(link).spec.weights == "q"
    assert listing(target) == before and load_feature_cache(target).spec.weights == "p"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "src", "target", "world"]  # nothing left aside


def test_the_caches_a_config_asks_for_are_refused_in_one_line_when_they_cannot_be(world, tmp_path):
    """Weights that are not there, 'package' weights of a backbone without a package, a cache of pixels read as
    imported embeddings, and data.features unset (a run that reads pixels) are each one line naming the setting."""
    from dataclasses import replace

    with pytest.raises(UserError, match=f"^model.image_pretrained: weights file {tmp_path / 'gone.pt'} not found$"):
        spec_from_config(config(f"model.image_pretrained={tmp_path / 'gone.pt'}"))
    with pytest.raises(UserError, match="^model.image_pretrained: image weights 'package' are for .*not resnet18"):
        spec_from_config(load_train_config(None, ["model.image_pretrained=package"]))
    from backretrieval.errors import cli_option_names
    from globetrotter.models.image import create_image_backbone

    with cli_option_names():  # train.py's: the backretrieval command line's --image-model is no flag of it
        for make in (lambda: spec_from_config(load_train_config(None, ["model.image_pretrained=package"])),
                     lambda: create_image_backbone("resnet18", "package")):
            with pytest.raises(UserError, match="not resnet18") as refused:
                make()
            assert "--image" not in str(refused.value), refused.value
    pixels = spec_from_config(config())
    out = tmp_path / "features"
    build_feature_cache(world / "train", pixels, out, small_backbone(), workers=0, progress=False)
    with pytest.raises(UserError, match=f"^{out}: feature cache built from pixels by resnet18 \\(random\\), but "
                                        "model.image_backbone=imported asks for imported embeddings 'p'"):
        load_feature_cache(out, replace(pixels, backbone="imported", weights="p"))
    with pytest.raises(UserError, match="^data.features is not set: this run reads pixels$"):
        ensure_feature_cache(config("data.features="), "train")


def test_a_folder_that_cannot_be_resolved_is_no_same_folder_and_the_cache_error_still_names_it(world, tmp_path):
    """same_folder promises False where a path cannot be resolved; a symlink loop raised RuntimeError (Python < 3.13:
    pathlib's loop error), so reading an imported cache recorded as built from such a path was a traceback."""
    from globetrotter.data.feature_cache import same_folder

    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    assert same_folder(tmp_path / "loop-a", world / "train") is False
    assert same_folder(world / "train", world / "train" / ".." / "train") is True
    split = world / "train"
    ids = split_image_ids(split)
    emb, id_file = write_npy(tmp_path / "src", ids, np.random.default_rng(0).normal(size=(len(ids), 4)))
    import_embeddings(split, emb, tmp_path / "cache", "p", ids=id_file, progress=False)
    record = json.loads((tmp_path / "cache" / "cache.json").read_text())
    record["split"] = str(tmp_path / "loop-a")
    (tmp_path / "cache" / "cache.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=f"it was built from another split, {tmp_path / 'loop-a'}; give {split} a "):
        load_feature_cache(tmp_path / "cache").rows(["nope"], split)
