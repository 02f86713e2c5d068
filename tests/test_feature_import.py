"""Bring your own image embeddings: `globetrotter-data features import` and training from imported embeddings."""
from __future__ import annotations

import gzip
import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import globetrotter
from conftest import run_data_cli
from globetrotter.config import load_train_config
from globetrotter.data.feature_cache import load_feature_cache
from globetrotter.data.feature_import import (file_sha256, import_embeddings, read_id_list,
                                             split_image_ids)
from globetrotter.data_cli import main as data_main
from globetrotter.errors import UserError
from globetrotter.training.checkpoint import resolve
from globetrotter.training.trainer import train
from globetrotter.training.validation import Validator

pa = pytest.importorskip("pyarrow", reason="parquet imports need the import extra (pyarrow)")
pq = pytest.importorskip("pyarrow.parquet")

DIM = 12


@pytest.fixture(scope="module")
def source(tiny_world) -> tuple[list[str], np.ndarray]:
    """Ids (the split's images, shuffled, and two the split lacks) and their vectors [N, DIM]."""
    rng = np.random.default_rng(0)
    ids = split_image_ids(tiny_world / "train") + ["elsewhere-1", "elsewhere-2"]
    ids = [ids[i] for i in rng.permutation(len(ids))]
    return ids, rng.normal(size=(len(ids), DIM)).astype(np.float32)


def write_npy(folder: Path, ids: list[str], vectors: np.ndarray, json_ids: bool = False) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "emb.npy", vectors)
    id_file = folder / ("ids.json" if json_ids else "ids.txt")
    id_file.write_text(json.dumps(ids) if json_ids else "\n".join(ids) + "\n")
    return folder / "emb.npy", id_file


def write_parquet(path: Path, ids: list[str], rows: list, id_column: str = "image_id", fixed: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = pa.list_(pa.float32(), len(rows[0])) if fixed else pa.list_(pa.float32())
    table = pa.table({id_column: pa.array(ids), "embedding": pa.array([None if r is None else list(r) for r in rows], kind)})
    pq.write_table(table, path, row_group_size=40)
    return path


def check_rows(out: Path, ids: list[str], vectors: np.ndarray, split: Path) -> None:
    cache = load_feature_cache(out)
    assert cache.features.shape == (len(ids) - 2, 1, DIM) and cache.features.dtype == np.float16 and cache.views == 0
    assert list(cache.row_of) == split_image_ids(split)  # the split's first-appearance order
    source_row = {i: r for r, i in enumerate(ids)}
    for image_id, row in cache.row_of.items():
        np.testing.assert_allclose(cache.features[row, 0].astype(np.float32), vectors[source_row[image_id]],
                                   rtol=1e-3, atol=1e-3)


def test_npy_and_parquet_imports_hold_the_source_vectors(tiny_world, source, tmp_path):
    ids, vectors = source
    split = tiny_world / "train"
    emb, id_file = write_npy(tmp_path / "npy", ids, vectors)
    record = import_embeddings(split, emb, tmp_path / "a", "toy", ids=id_file, progress=False)
    check_rows(tmp_path / "a", ids, vectors, split)
    assert record["spec"]["backbone"] == "imported" and record["spec"]["weights"] == "toy"
    assert len(record["spec"]["weights_sha256"]) == 16 and record["spec"]["views"] == 0
    assert record["imported"] == {"source": str(emb.resolve()), "format": "npy", "rows": len(ids), "dim": DIM,
                                  "sha256": file_sha256(emb)}  # the whole digest, as docs/data.md says
    assert json.loads((tmp_path / "a" / "cache.json").read_text())["imported"]["sha256"] == file_sha256(emb)
    assert record["split_checksum"] == json.loads((split / "manifest.json").read_text())["checksum"]
    emb, id_file = write_npy(tmp_path / "json", ids, vectors.astype(np.float16), json_ids=True)  # clip-retrieval: fp16
    import_embeddings(split, emb, tmp_path / "b", "toy", ids=id_file, progress=False)
    check_rows(tmp_path / "b", ids, vectors, split)
    for name, kw in (("list", {}), ("fixed", {"fixed": True, "id_column": "key"})):  # key: as img2dataset writes
        path = write_parquet(tmp_path / f"{name}.parquet", ids, list(vectors), **kw)
        record = import_embeddings(split, path, tmp_path / name, "toy", progress=False)
        check_rows(tmp_path / name, ids, vectors, split)
        assert record["imported"]["format"] == "parquet" and record["imported"]["rows"] == len(ids)


def refused(call, out: Path) -> str:
    with pytest.raises(UserError) as err:
        call()
    message = str(err.value)
    assert "\n" not in message
    assert not out.exists() and not out.with_name(out.name + ".tmp").exists()
    return message


def test_an_imported_cache_read_for_another_split_says_to_import_one_for_it(tiny_world, source, tmp_path):
    """The train split's imported embeddings read for the test split: the error names the split they were imported
    for and says to import the test split's with --out, not that data.features=auto builds them (it would build
    ImageNet features, not the user's)."""
    ids, vectors = source
    emb, id_file = write_npy(tmp_path / "npy", ids, vectors)
    import_embeddings(tiny_world / "train", emb, tmp_path / "cache", "toy", ids=id_file, progress=False)
    with pytest.raises(UserError, match="built from another split") as err:
        load_feature_cache(tmp_path / "cache").rows(split_image_ids(tiny_world / "test"), tiny_world / "test")
    message = str(err.value)
    assert f"features import {tiny_world / 'test'} ... --out FOLDER writes it; name that folder in data.features" \
        in message and "auto" not in message and len(message.splitlines()) == 1


def test_bad_npy_inputs_are_refused_naming_the_file_and_the_first_offending_id(tiny_world, source, tmp_path):
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "out" / "features"
    first_split_id = split_image_ids(split)[0]

    def attempt(ids_, vectors_):
        emb, id_file = write_npy(tmp_path / "src", ids_, vectors_)
        return refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out), emb

    message, emb = attempt(ids + ["one-more"], vectors)
    assert str(emb) in message and f"{len(ids)} rows" in message and "'one-more'" in message
    message, emb = attempt(ids[:-1] + [ids[0]], vectors)  # the id file holds the duplicate: it was emb.npy named
    last = len(ids) - 1
    assert message == (f"{tmp_path / 'src' / 'ids.txt'}: duplicate image id {ids[0]!r} (lines 1 and {last + 1}; "
                       f"rows 0 and {last} of {emb})")
    emb, id_file = write_npy(tmp_path / "json", ids[:-1] + [ids[0]], vectors, json_ids=True)
    message = refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out)
    assert message == f"{id_file}: duplicate image id {ids[0]!r} (items 0 and {last}; rows 0 and {last} of {emb})"
    broken = vectors.copy()
    broken[5, 3] = np.nan
    message, _ = attempt(ids, broken)
    assert "NaN or inf" in message and repr(ids[5]) in message
    broken[5, 3] = 1e6  # finite in float32, inf in float16
    message, _ = attempt(ids, broken)
    assert "float16" in message and repr(ids[5]) in message
    zeros = vectors.copy()  # an all-zero row was imported in silence: no cosine with any image
    zeros[7] = 0.0
    message, _ = attempt(ids, zeros)
    assert f"image {ids[7]!r} (row 7) is all zeros" in message
    message, emb = attempt(ids, vectors > 0)  # a boolean mask is no embedding
    assert message.startswith(f"{emb}: expected a float array") and "got bool" in message
    kept = [i for i in ids if i != first_split_id]
    message, emb = attempt(kept, vectors[: len(kept)])
    assert str(emb) in message and "1 image(s)" in message and repr(first_split_id) in message
    with pytest.raises(UserError, match="--ids"):
        import_embeddings(split, emb, out, "toy", progress=False)


def test_ids_that_are_file_names_are_refused_saying_to_key_rows_by_image_id(tiny_world, source, tmp_path):
    """A user's table keyed by file name (``photos/img3.jpg``) matches no image id (``img3``): the error says so and
    names the id to use, instead of only 'no embedding'."""
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "out" / "features"
    emb, id_file = write_npy(tmp_path / "src", [f"photos/{i}.jpg" for i in ids], vectors)
    message = refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out)
    assert "have no embedding" in message and "the ids are file names" in message
    named = next(i for i in ids if i in split_image_ids(split))
    assert f"('photos/{named}.jpg' is image {named!r})" in message and "key each row by the image id" in message
    emb, id_file = write_npy(tmp_path / "other", [f"x{i}" for i in ids], vectors)  # other ids: no such hint
    message = refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out)
    assert "have no embedding" in message and "file names" not in message


def test_bad_id_files_are_one_line_errors_and_a_byte_order_mark_is_dropped(tiny_world, source, tmp_path, capsys):
    ids, vectors = source
    folder = tmp_path / "ids"
    folder.mkdir()
    bom = folder / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + "\n".join(ids).encode() + b"\n")
    assert read_id_list(bom) == ids
    (folder / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(ids).encode())
    assert read_id_list(folder / "bom.json") == ids
    # gzipped, as the converters read their caption files (it was read through them, then not at all)
    (folder / "ids.txt.gz").write_bytes(gzip.compress("\n".join(ids).encode() + b"\n"))
    (folder / "ids.json.gz").write_bytes(gzip.compress(json.dumps(ids).encode()))
    assert read_id_list(folder / "ids.txt.gz") == ids and read_id_list(folder / "ids.json.gz") == ids
    # bad JSON and bytes that are not UTF-8 named path:LINE:COLUMN, as select's --record, a checkpoint's state and
    # every file read_utf8 reads are (the UTF-8 errors were the id list's own: a byte offset, a line and column)
    cases = [("truncated.json", b'["img0", "img1"', ":1:16: not JSON (Expecting ',' delimiter); "),
             ("two-lines.json", b'[\n"a",\n]', ":3:1: not JSON (Expecting value); "),
             ("latin1.json", b'[\n  "caf\xe9"]', ":2:7: invalid UTF-8 byte 0xe9; expected a JSON list of image ids, "
                                                 "in UTF-8"),
             ("latin1.txt", b"a\nb\ncaf\xe9\n", ":3:4: invalid UTF-8 byte 0xe9; expected one image id per line, in UTF-8"),
             ("blank.txt", b"a\n\nb\n", ": line 2 holds no image id"),
             ("plain.txt.gz", b"a\nb\n", ": not a gzip file ")]
    for name, data, message in cases:
        (folder / name).write_bytes(data)
        with pytest.raises(UserError) as err:
            read_id_list(folder / name)
        text = str(err.value)
        assert text.startswith(f"{folder / name}{message}") and "\n" not in text, text
    np.save(folder / "emb.npy", vectors)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        data_main(["features", "import", str(tiny_world / "train"), "--embeddings", str(folder / "emb.npy"), "--ids",
                   str(folder / "truncated.json"), "--name", "toy", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and not out.exists()
    assert f"{folder / 'truncated.json'}:1:16: not JSON" in err[0], err


def test_bad_parquet_inputs_are_refused(tiny_world, source, tmp_path, monkeypatch):
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    rows = list(vectors)
    rows[7] = vectors[7][:-1]
    path = write_parquet(tmp_path / "dims.parquet", ids, rows)
    message = refused(lambda: import_embeddings(split, path, out, "toy", progress=False), out)
    assert str(path) in message and repr(ids[7]) in message and f"{DIM - 1} values" in message
    rows[7] = None
    path = write_parquet(tmp_path / "null.parquet", ids, rows)
    message = refused(lambda: import_embeddings(split, path, out, "toy", progress=False), out)
    assert f"image {ids[7]!r} (row 7) has a null embedding (expected a list of {DIM} numbers)" in message
    path = write_parquet(tmp_path / "dup.parquet", ids[:-1] + [ids[3]], list(vectors))
    assert repr(ids[3]) in refused(lambda: import_embeddings(split, path, out, "toy", progress=False), out)
    message = refused(lambda: import_embeddings(split, path, out, "toy", embedding_column="emb", progress=False), out)
    assert "no column 'emb'" in message and "image_id, embedding" in message
    monkeypatch.setitem(__import__("sys").modules, "pyarrow.parquet", None)  # pyarrow not installed
    message = refused(lambda: import_embeddings(split, path, out, "toy", progress=False), out)
    assert message.endswith('reading parquet needs pyarrow: pip install "globetrotter[import]" (from a clone: '
                            'pip install -e ".[import]")'), message


def test_values_beyond_float32_are_named_beyond_float16s_range_without_a_numpy_warning(tiny_world, source, tmp_path,
                                                                                        recwarn):
    """A float64 value beyond float32 (parquet or .npy) was cast to inf with numpy's RuntimeWarning and reported as
    "NaN or inf"; a real infinity is still reported as one."""
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    big = vectors.astype(np.float64)
    big[4, 2] = -1e300
    table = pa.table({"image_id": ids, "embedding": pa.array([list(r) for r in big], pa.list_(pa.float64()))})
    pq.write_table(table, tmp_path / "big.parquet")
    emb, id_file = write_npy(tmp_path / "npy", ids, big)
    for call in (lambda: import_embeddings(split, tmp_path / "big.parquet", out, "toy", progress=False),
                 lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)):
        message = refused(call, out)
        assert f"image {ids[4]!r} (row 4) has values beyond float16's range (|x| > 65504)" in message, message
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]
    big[4, 2] = -np.inf
    emb, id_file = write_npy(tmp_path / "inf", ids, big)
    assert "NaN or inf" in refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out)


def test_nan_in_a_row_the_split_lacks_is_dropped_with_it(tiny_world, source, tmp_path):
    """Ids the split lacks are dropped: a NaN or an overflow in their rows no longer refuses the import (it did, while
    their all-zero rows were already ignored); the split's own rows are still checked."""
    ids, vectors = source
    split = tiny_world / "train"
    broken = vectors.copy()
    broken[ids.index("elsewhere-1"), 0] = np.nan
    broken[ids.index("elsewhere-2"), 1] = 1e6
    emb, id_file = write_npy(tmp_path / "src", ids, broken)
    import_embeddings(split, emb, tmp_path / "ok", "toy", ids=id_file, progress=False)
    check_rows(tmp_path / "ok", ids, vectors, split)
    first = split_image_ids(split)[0]
    broken[ids.index(first), 0] = np.nan
    emb, id_file = write_npy(tmp_path / "src", ids, broken)
    message = refused(lambda: import_embeddings(split, emb, tmp_path / "no", "toy", ids=id_file, progress=False),
                      tmp_path / "no")
    assert f"image {first!r} (row {ids.index(first)}) has NaN or inf values" in message


def test_a_null_parquet_row_the_split_lacks_is_dropped_with_it(tiny_world, source, tmp_path):
    """A null embedding of an id the split lacks refused the whole import (a NaN there was already dropped), even
    as the first row, which gives the dimension; a null row of the split's images is still refused naming it."""
    ids, vectors = source
    split = tiny_world / "train"
    order = [ids.index("elsewhere-1")] + [i for i in range(len(ids)) if ids[i] != "elsewhere-1"]
    ids, vectors = [ids[i] for i in order], vectors[order]  # the absent id first
    rows = list(vectors)
    rows[0] = rows[ids.index("elsewhere-2")] = None
    path = write_parquet(tmp_path / "null.parquet", ids, rows)
    import_embeddings(split, path, tmp_path / "ok", "toy", progress=False)
    check_rows(tmp_path / "ok", ids, vectors, split)
    rows[5] = None
    path = write_parquet(tmp_path / "null-kept.parquet", ids, rows)
    message = refused(lambda: import_embeddings(split, path, tmp_path / "no", "toy", progress=False), tmp_path / "no")
    assert f"image {ids[5]!r} (row 5) has a null embedding (expected a list of {DIM} numbers)" in message

def test_ids_that_are_no_strings_and_empty_embeddings_are_refused_naming_the_file(tiny_world, source, tmp_path):
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    emb, id_file = write_npy(tmp_path / "src", ids, vectors, json_ids=True)
    id_file.write_text(json.dumps([None] * len(ids)))  # was: "duplicate image id 'None'"
    message = refused(lambda: import_embeddings(split, emb, out, "toy", ids=id_file, progress=False), out)
    assert str(id_file) in message and "item 0 is null" in message
    table = pa.table({"image_id": pa.array([[i] for i in range(len(ids))]), "embedding": [list(v) for v in vectors]})
    pq.write_table(table, tmp_path / "listid.parquet")
    message = refused(lambda: import_embeddings(split, tmp_path / "listid.parquet", out, "toy", progress=False), out)
    assert "column 'image_id' holds list" in message and "--id-column" in message
    empty = pa.array([[] for _ in ids], pa.list_(pa.float32()))  # was: a cache of 0 dims
    pq.write_table(pa.table({"image_id": ids, "embedding": empty}), tmp_path / "dim0.parquet")
    message = refused(lambda: import_embeddings(split, tmp_path / "dim0.parquet", out, "toy", progress=False), out)
    assert "holds empty lists" in message
    path = write_parquet(tmp_path / "first-null.parquet", ids, [None] + list(vectors[1:]))  # was: "the first row 0"
    message = refused(lambda: import_embeddings(split, path, out, "toy", progress=False), out)
    assert f"image {ids[0]!r} (row 0) has a null embedding" in message


def test_parquet_column_options_with_a_npy_file_are_refused_not_ignored(tiny_world, source, tmp_path, capsys):
    ids, vectors = source
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    out = tmp_path / "features"
    for flag in ("--id-column", "--embedding-column"):
        with pytest.raises(SystemExit) as stop:
            data_main(["features", "import", str(tiny_world / "train"), "--embeddings", str(emb), "--ids",
                       str(id_file), "--name", "toy", "--no-progress", "--out", str(out), flag, "vec"])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1 and f"{flag} is for parquet inputs" in err[0]
    assert not out.exists()


def test_a_cache_of_other_embeddings_at_out_is_kept_unless_forced(tiny_world, source, tmp_path):
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)
    before = (out / "cache.json").read_text()
    with pytest.raises(UserError, match=r"holds imported embeddings 'toy' of 12 dims, not 'other' of 12 dims.*--overwrite"):
        import_embeddings(split, emb, out, "other", ids=id_file, progress=False)
    wide, _ = write_npy(tmp_path / "wide", ids, np.repeat(vectors, 2, axis=1))
    with pytest.raises(UserError, match="of 12 dims, not 'toy' of 24 dims"):
        import_embeddings(split, wide, out, "toy", ids=id_file, progress=False)
    assert (out / "cache.json").read_text() == before and not (tmp_path / "features.tmp").exists()
    assert import_embeddings(split, wide, out, "other", ids=id_file, force=True, progress=False)["dim"] == 24


@pytest.mark.parametrize("damage", [b"", b'{"spec": {"backbone"', b"\x93NUMPY\xff\x00", b"[1, 2]", b'"cache"',
                                    b'{"spec": [1], "dim": 12}'])
def test_a_damaged_cache_record_at_out_is_one_line_naming_it(tiny_world, source, tmp_path, damage):
    """A cache.json at --out that is not UTF-8 JSON, not an object, or whose spec is no object: one line naming it
    (it was a JSONDecodeError, UnicodeDecodeError or AttributeError traceback), the folder left as it was."""
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)
    (out / "cache.json").write_bytes(damage)
    with pytest.raises(UserError, match=r"cache\.json: (not a readable feature-cache record|expected a JSON object)"
                       ) as err:
        import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)
    assert "\n" not in str(err.value) and (out / "cache.json").read_bytes() == damage
    assert str(err.value).endswith("replace it with --overwrite, or write to another --out")  # not `features build`
    assert import_embeddings(split, emb, out, "toy", ids=id_file, force=True, progress=False)["dim"] == 12  # as said


def test_embeddings_of_the_same_name_from_another_source_or_split_are_kept_unless_forced(tiny_world, source, tmp_path,
                                                                                         capsys):
    """Was: a second import of the same --name and width replaced the cache, whatever its vectors."""
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)
    before = (out / "cache.json").read_text()
    import_embeddings(split, emb, out, "toy", ids=id_file, progress=False)  # the same import again: allowed
    new, _ = write_npy(tmp_path / "new", ids, vectors + 1)
    argv = ["features", "import", str(split), "--embeddings", str(new), "--ids", str(id_file), "--name", "toy",
            "--no-progress", "--out", str(out)]
    code, _, stderr = run_data_cli(argv, capsys)
    assert code == 2 and stderr.strip().splitlines() == [
        f"error: --out {out}: holds imported embeddings 'toy' of another source (sha256 "
        f"{json.loads(before)['spec']['weights_sha256']} there, {file_sha256(new)[:16]} now); pass --overwrite to replace "
        f"them or choose another --out"]
    copy = tmp_path / "copy"  # the same images in another split folder
    shutil.copytree(split, copy, ignore=shutil.ignore_patterns("features"))
    with pytest.raises(UserError, match=r"holds imported embeddings 'toy' of another split \(.*train\); pass --overwrite"):
        import_embeddings(copy, emb, out, "toy", ids=id_file, progress=False)
    assert json.loads((out / "cache.json").read_text())["spec"] == json.loads(before)["spec"]
    code, _, _ = run_data_cli(argv + ["--overwrite"], capsys)
    assert code == 0 and json.loads((out / "cache.json").read_text())["spec"]["weights_sha256"] == file_sha256(new)[:16]


def test_the_import_command(tiny_world, source, tmp_path, capsys):
    ids, vectors = source
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    out = tmp_path / "features"
    argv = ["features", "import", str(tiny_world / "train"), "--embeddings", str(emb), "--ids", str(id_file),
            "--name", "toy", "--no-progress", "--out"]
    with pytest.raises(SystemExit) as stop:
        data_main(argv + [str(out)])
    stdout = capsys.readouterr().out
    assert stop.value.code == 0 and "model.image_backbone=imported model.image_pretrained=toy" in stdout
    # the printed overrides load on the default config (they lacked model.freeze_image_backbone=true: refused)
    cfg = load_train_config(None, shlex.split(stdout.split("train with ", 1)[1].splitlines()[0]))
    assert cfg.model.freeze_image_backbone and cfg.data.features == str(out) and cfg.loss.image == 0
    id_file.write_text("\n".join(ids[:-1]) + "\n")  # rows and ids of another count
    with pytest.raises(SystemExit) as stop:
        data_main(argv + [str(tmp_path / "other")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error:") and str(emb) in err[0]
    assert not (tmp_path / "other").exists()


def _cfg(world: Path, out: Path, *extra: str):
    from conftest import TINY

    return load_train_config(None, [f"data.root={world}", f"data.tokenizer={out / 'tokenizer.json'}",
                                    f"output_dir={out}", *TINY, "data.features=auto", "model.image_backbone=imported",
                                    "model.image_pretrained=toy", "model.freeze_image_backbone=true", "loss.image=0",
                                    *extra])


def test_training_from_imported_embeddings_saves_their_width_and_reloads_without_them(tiny_world, source, tmp_path):
    ids, vectors = source
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    import_embeddings(world / "train", emb, world / "train" / "features", "toy", ids=id_file, progress=False)
    # a base config's timm arguments (a narrow ResNet's) are dropped: the imported branch takes the width only
    cfg = _cfg(world, tmp_path, "steps=3", "checkpoint_every=3", "data.batching=neighbours", "data.neighbours_k=2",
               "model.image_backbone_args={channels: [8, 16, 32, 64]}")
    assert train(cfg)["step"] == 3
    checkpoint = resolve(cfg.run_dir, prefer_best=False)
    for saved in (checkpoint / "config.yaml", cfg.run_dir / "config.yaml"):
        assert load_train_config(saved).model.image_backbone_args == {"num_features": DIM}
    shutil.rmtree(world / "train" / "features")  # the checkpoint alone rebuilds the model
    enc = globetrotter.load(cfg.run_dir)
    assert enc.encode_text(["red a square"]).shape == (1, 16)
    assert enc.model.image.num_features == DIM
    from PIL import Image

    with pytest.raises(UserError, match="no image network to run on pixels"):
        enc.encode_image([Image.new("RGB", (32, 32))])


def test_imported_embeddings_refuse_l_v_and_another_name_or_width(tiny_world, source, tmp_path):
    ids, vectors = source
    with pytest.raises(UserError, match="loss.image=1.0: imported embeddings hold one row per image"):
        _cfg(tiny_world, tmp_path, "loss.image=1")
    with pytest.raises(UserError, match="model.image_backbone=imported reads imported embeddings: set data.features"):
        _cfg(tiny_world, tmp_path, "data.features=null")
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)
    cache = tmp_path / "features"
    import_embeddings(tiny_world / "train", emb, cache, "toy", ids=id_file, progress=False)
    with pytest.raises(UserError, match=r"imported embeddings are named 'toy', but model.image_pretrained is 'other'"):
        train(_cfg(tiny_world, tmp_path, f"data.features={cache}", "model.image_pretrained=other", "steps=1"))
    with pytest.raises(UserError, match=r"num_features=8, but the imported embeddings in .* have 12 dims"):
        train(_cfg(tiny_world, tmp_path, f"data.features={cache}", "model.image_backbone_args.num_features=8",
                   "steps=1"))


def test_imported_features_are_the_identity_over_the_cached_rows():
    from globetrotter.models.image import create_image_backbone

    branch = create_image_backbone("imported", "toy", num_features=4)
    x = torch.randn(3, 4)
    assert torch.equal(branch(x), x) and not list(branch.parameters())
    with pytest.raises(UserError, match="num_features"):
        create_image_backbone("imported", "toy")


def test_the_augmentation_keys_are_reported_ignored_with_imported_embeddings(tiny_world, tmp_path):
    from globetrotter.config_checks import ignored_keys

    found = {i.key: i.reason for i in ignored_keys(_cfg(tiny_world, tmp_path, "data.feature_views=3", "data.hflip=false"))}
    assert found["data.feature_views"].startswith("model.image_backbone=imported") and "data.hflip" in found


def test_training_validates_with_g_the_imported_embeddings(tiny_world, source, tmp_path):
    ids, vectors = source
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, ignore=shutil.ignore_patterns("features"))
    val_ids = split_image_ids(world / "val")
    emb, id_file = write_npy(tmp_path / "src", ids + val_ids,
                             np.concatenate([vectors, np.ones((len(val_ids), DIM), np.float32)]))
    for split in ("train", "val"):
        import_embeddings(world / split, emb, tmp_path / "cache", "toy", ids=id_file, progress=False, force=True)
    # one folder serving both splits by image id (the val split imported last: it holds the val images only)
    with pytest.raises(UserError, match=r"missing from the feature cache"):
        train(_cfg(world, tmp_path, "steps=2", f"data.features={tmp_path / 'cache'}", "val.every=2",
                   "val.image_features=features"))
    for split in ("train", "val"):
        import_embeddings(world / split, emb, world / split / "features", "toy", ids=id_file, progress=False)
    cfg = _cfg(world, tmp_path, "steps=2", "val.every=2", "val.image_features=features", "run_name=features-g")
    assert "val/bkr@10" in train(cfg)["metrics"]
    val = Validator(cfg).val  # g: the val images' imported rows, each caption its own image's
    assert val.image_spec == f"features:{world / 'val' / 'features'}"
    assert (val.image_feats == 1).all() and set(val.image_ids) == set(val_ids)  # the train rows are random


def test_an_embeddings_file_that_is_not_npy_is_named_as_such_not_as_a_pickle(tiny_world, source, tmp_path, capsys):
    """A text file named .npy was reported with numpy's 'allow_pickle=False' hint; a folder as 'no such file'."""
    ids, vectors = source
    _, id_file = write_npy(tmp_path / "src", ids, vectors)
    (tmp_path / "notnpy.npy").write_text("0.1 0.2\n")
    np.savez(tmp_path / "arch.npz", a=vectors)
    (tmp_path / "arch.npz").rename(tmp_path / "arch.npy")
    out = tmp_path / "features"
    for emb, message in ((tmp_path / "notnpy.npy", f"{tmp_path / 'notnpy.npy'}: not a .npy file (it has no .npy "
                                                   "header); expected one array saved by numpy.save"),
                         (tmp_path / "arch.npy", f"{tmp_path / 'arch.npy'}: an .npz archive, not a .npy file"),
                         (tmp_path / "src", f"--embeddings {tmp_path / 'src'}: a folder; expected a .npy or .parquet "
                                            "file")):
        with pytest.raises(SystemExit) as stop:
            data_main(["features", "import", str(tiny_world / "train"), "--embeddings", str(emb), "--ids",
                       str(id_file), "--name", "toy", "--no-progress", "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), err
        assert "pickle" not in err[0]
    assert not out.exists()


def test_a_row_that_is_zero_once_in_float16_is_refused_as_all_zeros(tiny_world, source, tmp_path):
    """The cache holds float16: a row of values below float16's smallest subnormal (about 6e-8) is stored as zeros,
    a vector with no direction, so it is refused though it is not zero as given."""
    ids, vectors = source
    vectors = vectors.copy()
    row = ids.index(split_image_ids(tiny_world / "train")[0])
    vectors[row] = 1e-9
    assert not np.float16(1e-9)  # what the cache would hold
    emb, id_file = write_npy(tmp_path / "npy", ids, vectors)
    message = refused(lambda: import_embeddings(tiny_world / "train", emb, tmp_path / "out", "toy", ids=id_file,
                                                progress=False), tmp_path / "out")
    assert f"image {ids[row]!r} (row {row}) is all zeros (in float16)" in message


def test_an_id_file_with_windows_line_ends_or_spaces_around_ids_names_the_same_images(tiny_world, source, tmp_path):
    ids, vectors = source
    emb, id_file = write_npy(tmp_path / "npy", ids, vectors)
    id_file.write_bytes("".join(f" {i}\t\r\n" for i in ids).encode())
    import_embeddings(tiny_world / "train", emb, tmp_path / "out", "toy", ids=id_file, progress=False)
    check_rows(tmp_path / "out", ids, vectors, tiny_world / "train")


def test_missing_unreadable_or_mismatched_inputs_are_one_line_naming_the_file_and_write_nothing(tiny_world, source,
                                                                                                tmp_path):
    """Each input a user can get wrong: the ids or embeddings file absent, ids that are not a JSON list, a .npy cut
    short, a file that is no parquet, a parquet row without an id or with every embedding null, --ids given with a
    parquet file, another kind of file, and an empty --name."""
    ids, vectors = source
    split, out = tiny_world / "train", tmp_path / "features"
    emb, id_file = write_npy(tmp_path / "src", ids, vectors)

    def message(embeddings: Path, ids_: Path | None = id_file, name: str = "toy") -> str:
        return refused(lambda: import_embeddings(split, embeddings, out, name, ids=ids_, progress=False), out)

    assert message(emb, tmp_path / "gone.txt") == f"--ids {tmp_path / 'gone.txt'}: no such file"
    (tmp_path / "ids.json").write_text(json.dumps({"ids": ids}))
    assert message(emb, tmp_path / "ids.json") == f"{tmp_path / 'ids.json'}: expected a JSON list of image ids, got dict"
    cut = tmp_path / "cut.npy"
    cut.write_bytes(emb.read_bytes()[:200])
    assert message(cut).startswith(f"{cut}: not a readable .npy array (")
    assert message(tmp_path / "gone.npy") == f"--embeddings {tmp_path / 'gone.npy'}: no such file"
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not a parquet file at all")
    assert message(junk, None).startswith(f"{junk}: not a readable parquet file (")
    path = write_parquet(tmp_path / "noid.parquet", ids[:3] + [None] + ids[4:], list(vectors))
    assert message(path, None) == f"{path}: row 3 has no image_id"
    path = write_parquet(tmp_path / "nulls.parquet", ids, [None] * len(ids))
    assert message(path, None) == (f"{path}: every row's embedding is null (expected a list of numbers per image)")
    assert message(path) == f"{path}: --ids is for .npy inputs; a parquet file names its images (--id-column)"
    other = tmp_path / "emb.csv"
    other.write_text("a,1\n")
    assert message(other) == f"--embeddings {other}: expected a .npy array (with --ids) or a .parquet file"
    assert message(emb, name=" ").startswith("--name: give the embeddings a name")
