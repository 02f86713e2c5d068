"""Bring your own image embeddings: import precomputed vectors as a split's feature cache (docs/data.md).

Users who train at scale compute image embeddings once (img2dataset / clip-retrieval layouts) and train from them.
:func:`import_embeddings` writes them in the feature cache's folder format (:mod:`.feature_cache`), the whole image
only (``features.npy`` float16 ``[images, 1, dim]``, 0 augmented views), so training reads them as it reads a
cache built from pixels, with ``model.image_backbone: imported`` and ``model.image_pretrained: NAME``.

Inputs:

* ``.npy``: a float array ``[N, D]`` and an id list (``ids``: a text file, one image id per line, or a ``.json``
  list), row ``i`` being image ``ids[i]``; read memory-mapped;
* ``.parquet`` (needs ``pyarrow``): one row per image, an id column (``image_id``; ``key`` as img2dataset writes it
  when the default is absent) and an embedding column (list or fixed-size list of floats), read in record batches.

The source is checked (one-line :class:`UserError` naming the file and the first offending id; the cache is written
under a ``.tmp`` name and renamed at the end, so a refused import leaves nothing): ids and rows of equal count, no
duplicate id, one dimension for every row; every image of the split must have a row, not null, with finite values
within float16's range and not all zero (the rows of ids the split lacks are dropped, their values unchecked). ``--out``
must be absent, empty or a feature cache
(:func:`.feature_cache_write.check_cache_folder`): another folder is refused, ``--overwrite`` or not.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path, PurePath
from typing import Callable, Iterator

import numpy as np
from tqdm.auto import tqdm

from backretrieval.records import json_text
from data_prep.checksums import file_sha256
from data_prep.errors import install_hint, read_utf8
from data_prep.shards import iter_metas, read_manifest

from ..config import IMPORTED_BACKBONE
from ..errors import UserError
from .feature_cache import FEATURES, IMAGE_IDS, SPEC, imported_spec, read_cache_record, same_folder
from .feature_cache_write import cache_write, check_cache_folder

CHUNK_ROWS = 65_536  # source rows converted (float32) at a time
FLOAT16_MAX = float(np.finfo(np.float16).max)
FLOAT32_MAX = float(np.finfo(np.float32).max)
PYARROW_HINT = f"reading parquet needs pyarrow: {install_hint('import')}"


def split_image_ids(split_dir: Path) -> list[str]:
    """The split's image ids in the order they first appear in its shards (no image is decoded)."""
    return list(dict.fromkeys(str(m["image_id"]) for m in iter_metas(split_dir)))


def saturating_float32(values: np.ndarray) -> np.ndarray:
    """``values`` as float32, without numpy's overflow warning: a finite value beyond float32's range becomes
    float32's largest of its sign (still beyond float16's, so it is refused as such, not as an infinity)."""
    with np.errstate(over="ignore"):
        out = np.asarray(values, dtype=np.float32)
    beyond = np.isinf(out)
    if beyond.any():
        beyond &= np.isfinite(values)
        if beyond.any():
            out[beyond] = np.copysign(FLOAT32_MAX, values[beyond])
    return out


def is_json_id_list(path: Path) -> bool:
    """Whether the id file ``path`` is a ``.json`` list (``.json`` or ``.json.gz``), else one id per line."""
    return path.name.removesuffix(".gz").endswith(".json")


def read_id_list(path: Path) -> list[str]:
    """Image ids of an id file: a ``.json`` list, else one id per line; UTF-8, a byte-order mark dropped (``.gz``:
    gunzipped first).

    One-line :class:`UserError` naming the file (``path:LINE:COLUMN`` for bytes that are not UTF-8, as
    :func:`~data_prep.errors.read_utf8` says them, and for malformed JSON; the line of a text file without an id)."""
    if not path.is_file():
        raise UserError(f"--ids {path}: no such file")
    json_list = is_json_id_list(path)
    try:
        text = read_utf8(path, "a JSON list of image ids" if json_list else "one image id per line")
    except OSError as err:
        raise UserError(f"--ids {path}: cannot read ({err})") from None
    if json_list:
        try:
            ids = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{err.lineno}:{err.colno}: not JSON ({err.msg}); expected a JSON list of "
                            "image ids") from None
        if not isinstance(ids, list):
            raise UserError(f"{path}: expected a JSON list of image ids, got {type(ids).__name__}")
        bad = next((i for i, v in enumerate(ids) if isinstance(v, bool) or not isinstance(v, (str, int))), None)
        if bad is not None:
            raise UserError(f"{path}: item {bad} is {json.dumps(ids[bad])}, not an image id (expected a JSON "
                            "list of strings or integers)")
        return [str(i) for i in ids]
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's end
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise UserError(f"{path}: line {number} holds no image id")
    return [line.strip() for line in lines]


class FeatureSource:
    """Embeddings in source order: ``ids`` (all rows'), ``dim``, ``fmt`` and ``chunks(kept)`` of float32 rows
    (``kept``: bool per source row, True for the split's images; the other rows are dropped, so they may be null)."""

    path: Path
    fmt: str
    ids: list[str]
    dim: int

    def chunks(self, kept: np.ndarray) -> Iterator[np.ndarray]:
        """The float32 rows of the source rows ``kept`` marks, in source order, a chunk at a time."""
        raise NotImplementedError

    def duplicate(self, image_id: str, first: int, row: int) -> str:
        """The message for ``image_id`` given to source rows ``first`` and ``row``, naming the file that says so."""
        return f"{self.path}: duplicate image id {image_id!r} (rows {first} and {row})"


class _Npy(FeatureSource):
    def __init__(self, path: Path, ids_path: Path | None) -> None:
        if ids_path is None:
            raise UserError(f"{path}: a .npy file holds no image ids; give them with --ids FILE (one per line, or .json)")
        self.path, self.fmt = path, "npy"
        with open(path, "rb") as handle:
            magic = handle.read(6)
        if magic != b"\x93NUMPY":  # np.load would try it as a pickle (and say allow_pickle), or open an .npz
            kind = "an .npz archive, not a .npy file" if magic.startswith(b"PK") else (
                "an empty file" if not magic else "not a .npy file (it has no .npy header)")
            raise UserError(f"{path}: {kind}; expected one array saved by numpy.save")
        try:
            self.array = np.load(path, mmap_mode="r")
        except (ValueError, EOFError) as err:
            raise UserError(f"{path}: not a readable .npy array ({err})") from None
        if self.array.ndim != 2 or self.array.dtype.kind != "f" or self.array.shape[1] < 1:
            raise UserError(f"{path}: expected a float array [N, D], got {self.array.dtype} {list(self.array.shape)}")
        self.ids = read_id_list(ids_path)
        self.dim = int(self.array.shape[1])
        rows = self.array.shape[0]
        if rows != len(self.ids):
            first = (f"first id without a row: {self.ids[rows]!r}" if len(self.ids) > rows
                     else f"first row without an id: {len(self.ids)}")
            raise UserError(f"{path}: {rows} rows but {ids_path} lists {len(self.ids)} ids ({first})")
        self.ids_path = ids_path

    def duplicate(self, image_id: str, first: int, row: int) -> str:
        """The message naming the id file's lines (a ``.json`` list's items) and the array's rows."""
        unit, at = ("items", 0) if is_json_id_list(self.ids_path) else ("lines", 1)
        return (f"{self.ids_path}: duplicate image id {image_id!r} ({unit} {first + at} and {row + at}; rows {first} "
                f"and {row} of {self.path})")

    def chunks(self, kept: np.ndarray) -> Iterator[np.ndarray]:
        for start in range(0, len(self.ids), CHUNK_ROWS):
            yield saturating_float32(self.array[start: start + CHUNK_ROWS])


class _Parquet(FeatureSource):
    def __init__(self, path: Path, id_column: str, embedding_column: str) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(f"{path}: {PYARROW_HINT}") from None
        self.path, self.fmt = path, "parquet"
        try:
            self.file = pq.ParquetFile(path)
        except Exception as err:  # pyarrow's ArrowInvalid and kin: not a parquet file
            raise UserError(f"{path}: not a readable parquet file ({err})") from None
        names = self.file.schema_arrow.names
        if id_column not in names and id_column == "image_id" and "key" in names:
            id_column = "key"  # img2dataset's name
        for flag, column in (("--id-column", id_column), ("--embedding-column", embedding_column)):
            if column not in names:
                raise UserError(f"{path}: no column {column!r} ({flag}; its columns: {', '.join(names)})")
        self.id_column, self.embedding_column = id_column, embedding_column
        import pyarrow as pa

        kind = self.file.schema_arrow.field(id_column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
            raise UserError(f"{path}: column {id_column!r} holds {kind}, not image ids (strings or integers; "
                            "--id-column)")
        self.ids = []
        for batch in self.file.iter_batches(batch_size=CHUNK_ROWS, columns=[id_column]):
            column = batch.column(0)
            if column.null_count:
                raise UserError(f"{path}: row {len(self.ids) + column.is_null().to_pylist().index(True)} has no "
                                f"{id_column}")
            self.ids += [str(i) for i in column.to_pylist()]
        self.dim = self._first_dim()

    def _first_dim(self) -> int:
        import pyarrow as pa

        kind = self.file.schema_arrow.field(self.embedding_column).type
        lists = pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)
        if not lists or not (pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)):
            raise UserError(f"{self.path}: column {self.embedding_column!r} holds {kind}, not lists of floats "
                            f"(one flat list of numbers per image)")
        dim = kind.list_size if pa.types.is_fixed_size_list(kind) else None
        batches = self.file.iter_batches(batch_size=CHUNK_ROWS, columns=[self.embedding_column]) if dim is None else ()
        for batch in batches:  # the first row that is not null (a null one of an id the split lacks is dropped)
            column = batch.column(0)
            valid = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))
            if len(valid):
                dim = len(column[int(valid[0])].as_py())
                break
        if dim is None and self.ids:
            raise UserError(f"{self.path}: every row's embedding is null (expected a list of numbers per image)")
        if dim == 0:
            raise UserError(f"{self.path}: column {self.embedding_column!r} holds empty lists; expected one list "
                            "of D >= 1 numbers per image")
        return dim or 0  # no row at all: every image of the split lacks one (refused by _check_ids)

    def chunks(self, kept: np.ndarray) -> Iterator[np.ndarray]:
        """Float32 rows; a null row of an id the split lacks is yielded as NaN (it is dropped), one of the split's
        images or a row of another length is refused naming its id."""
        import pyarrow.compute as pc

        row = 0
        for batch in self.file.iter_batches(batch_size=CHUNK_ROWS, columns=[self.embedding_column]):
            column = batch.column(0)
            null = column.is_null().to_numpy(zero_copy_only=False)
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
            bad = np.flatnonzero((null & kept[row: row + len(column)]) | (~null & (lengths != self.dim)))
            if len(bad):
                i = int(bad[0])
                where = f"{self.path}: image {self.ids[row + i]!r} (row {row + i})"
                if null[i]:
                    raise UserError(f"{where} has a null embedding (expected a list of {self.dim} numbers)")
                raise UserError(f"{where} has {int(lengths[i])} values, where the first row has {self.dim} (one "
                                f"dimension for all)")
            values = saturating_float32(column.drop_null().flatten().to_numpy(zero_copy_only=False))
            if null.any():  # rows of ids the split lacks: NaN, dropped with them
                full = np.full((len(column), self.dim), np.nan, dtype=np.float32)
                full[~null] = values.reshape(-1, self.dim)
                values = full
            yield values.reshape(len(column), self.dim)
            row += len(column)


def _open_source(path: Path, ids: Path | None, id_column: str | None, embedding_column: str | None) -> FeatureSource:
    """The source at ``path``; ``id_column`` / ``embedding_column``: ``None`` for the defaults (refused with a
    ``.npy`` when given, as it names no columns)."""
    if path.is_dir():
        raise UserError(f"--embeddings {path}: a folder; expected a .npy or .parquet file")
    if not path.is_file():
        raise UserError(f"--embeddings {path}: no such file")
    if path.suffix == ".npy":
        given = [flag for flag, value in (("--id-column", id_column), ("--embedding-column", embedding_column))
                 if value is not None]
        if given:
            raise UserError(f"{path}: {' and '.join(given)} {'is' if len(given) == 1 else 'are'} for parquet "
                            "inputs; a .npy array has no columns (its ids come from --ids)")
        return _Npy(path, ids)
    if path.suffix in (".parquet", ".pq"):
        if ids is not None:
            raise UserError(f"{path}: --ids is for .npy inputs; a parquet file names its images (--id-column)")
        return _Parquet(path, id_column or "image_id", embedding_column or "embedding")
    raise UserError(f"--embeddings {path}: expected a .npy array (with --ids) or a .parquet file")


def _check_ids(source: FeatureSource, wanted: list[str], split_dir: Path) -> list[int]:
    """The source row of each of the split's images; refuses duplicate ids and images without a row."""
    row_of: dict[str, int] = {}
    for row, image_id in enumerate(source.ids):
        if row_of.setdefault(image_id, row) != row:
            raise UserError(source.duplicate(image_id, row_of[image_id], row))
    missing = [i for i in wanted if i not in row_of]
    if missing:
        raise UserError(f"{source.path}: {len(missing)} image(s) of {split_dir} have no embedding "
                        f"(first: {missing[0]!r}){_file_name_hint(row_of, set(missing))}")
    return [row_of[i] for i in wanted]


def _file_name_hint(source_ids: dict[str, int], missing: set[str]) -> str:
    """What to change when the source keys its rows by file name or path (``photos/a b.jpg``) rather than by the
    image id a converter made of it (``a_b``: :func:`data_prep.converters.pipeline.safe_id` of the stem); ``""``
    when no source id is a file name of a missing image."""
    from data_prep.converters.pipeline import safe_id

    for source_id in source_ids:
        stem = PurePath(source_id).stem
        if stem != source_id and safe_id(stem) in missing:
            return (f"; the ids are file names ({source_id!r} is image {safe_id(stem)!r}): key each row by the image "
                    f"id the split's samples hold (the file stem, characters outside A-Z a-z 0-9 _ - made _; "
                    f"docs/data.md, The format)")
    return ""


def _check_out(out_dir: Path, name: str, dim: int, force: bool, digest: str, split_dir: Path) -> None:
    """Refuse a folder at ``out_dir`` that is no cache (:func:`.feature_cache_write.check_cache_folder`, ``force`` or not)
    and, unless ``force``, a cache of other embeddings or dimension, or of the same name and dimension but from
    another source (its recorded sha256 is not ``digest``) or of another split than ``split_dir``."""
    check_cache_folder(out_dir, "--out")
    if force or not (out_dir / SPEC).is_file():
        return
    record = read_cache_record(out_dir, remedy="replace it with --overwrite, or write to another --out")
    spec = record.get("spec", {})
    theirs = (spec.get("backbone"), spec.get("weights"), record.get("dim"))
    if theirs != (IMPORTED_BACKBONE, name, dim):
        what = (f"imported embeddings {spec.get('weights')!r}" if theirs[0] == IMPORTED_BACKBONE
                else f"the feature cache of {spec.get('backbone')} ({spec.get('weights')})")
        raise UserError(f"--out {out_dir}: holds {what} of {record.get('dim')} dims, not {name!r} of {dim} dims; "
                        f"pass --overwrite to replace it or choose another --out")
    other = [] if spec.get("weights_sha256") == digest else \
        [f"another source (sha256 {spec.get('weights_sha256') or 'unrecorded'} there, {digest} now)"]
    if record.get("split") and not same_folder(record["split"], split_dir):
        other.append(f"another split ({record['split']})")
    if other:
        raise UserError(f"--out {out_dir}: holds imported embeddings {name!r} of {' and '.join(other)}; pass "
                        f"--overwrite to replace them or choose another --out")


def _check_name(name: str) -> None:
    if not name or not name.strip():
        raise UserError("--name: give the embeddings a name (model.image_pretrained of the runs that train on them)")


def import_embeddings(split_dir: str | Path, embeddings: str | Path, out_dir: str | Path, name: str,
                      ids: str | Path | None = None, id_column: str | None = None,
                      embedding_column: str | None = None, force: bool = False, progress: bool = True,
                      source_label: str | None = None) -> dict:
    """Write the embeddings of the split's images from ``embeddings`` (``.npy`` with ``ids``, or ``.parquet``) as a
    feature cache ``[images, 1, D]`` float16 in ``out_dir``, named ``name``; returns its ``cache.json`` record.
    ``id_column`` / ``embedding_column`` (parquet only; ``None``: ``image_id`` or ``key``, and ``embedding``).
    ``source_label``: what the record names as the source in place of the file's path (a temporary file's path
    names nothing a rerun finds again).

    At most :data:`CHUNK_ROWS` source rows are held as float32 at a time (besides the id -> row index)."""
    _check_name(name)
    check_cache_folder(out_dir, "--out")  # before the source is read or hashed
    path = Path(embeddings)
    source = _open_source(path, None if ids is None else Path(ids), id_column, embedding_column)
    hash_start = time.perf_counter()
    sha256 = file_sha256(path)
    hash_seconds = time.perf_counter() - hash_start
    return write_imported(split_dir, source, out_dir, name, sha256[:16], force, progress,  # the spec's form: 16 digits
                          {"source": source_label or str(path.resolve()), "format": source.fmt, "rows": len(source.ids),
                           "dim": source.dim, "sha256": sha256}, extra={"hash_seconds": hash_seconds})


def write_imported(split_dir: str | Path, source: FeatureSource, out_dir: str | Path, name: str, digest: str,
                   force: bool, progress: bool, imported: dict, extra: dict | None = None,
                   extra_files: Callable[[Path], None] | None = None) -> dict:
    """Write the rows of ``source`` for the split's images as the imported cache ``name`` in ``out_dir`` (under a
    ``.tmp`` name, swapped in at the end: a refused write leaves nothing); ``imported`` describes the source in the
    record; ``extra_files(tmp)`` writes further files of the cache into the ``.tmp`` folder before the swap.
    Returns the ``cache.json`` record."""
    split_dir, out_dir = Path(split_dir), Path(out_dir)
    _check_name(name)
    check_cache_folder(out_dir, "--out")
    manifest = read_manifest(split_dir)
    start = time.perf_counter()
    path = source.path
    wanted = split_image_ids(split_dir)
    rows = np.asarray(_check_ids(source, wanted, split_dir), dtype=np.int64)
    _check_out(out_dir, name, source.dim, force, digest, split_dir)
    position = np.full(len(source.ids), -1, dtype=np.int64)  # source row -> row of the cache (-1: not in the split)
    position[rows] = np.arange(len(rows))
    with cache_write(out_dir, "--out") as tmp:
        feats = np.lib.format.open_memmap(tmp / FEATURES, mode="w+", dtype=np.float16, shape=(len(wanted), 1, source.dim))
        first = 0
        with tqdm(total=len(source.ids), desc=f"import {path.name}", unit="row", disable=not progress,
                  dynamic_ncols=True) as bar:
            for chunk in source.chunks(position >= 0):
                with np.errstate(over="ignore"):
                    half = chunk.astype(np.float16)  # beyond float16's range: inf
                where = position[first: first + len(chunk)]
                kept = where >= 0  # the rows of the split's images: only they are checked (the others are dropped)
                bad = np.flatnonzero(kept & ~np.isfinite(half).all(axis=1))
                if len(bad):
                    row = first + int(bad[0])
                    why = "NaN or inf values" if not np.isfinite(chunk[bad[0]]).all() else \
                        f"values beyond float16's range (|x| > {FLOAT16_MAX:.0f})"
                    raise UserError(f"{path}: image {source.ids[row]!r} (row {row}) has {why}")
                zero = np.flatnonzero(kept & ~half.any(axis=1))
                if len(zero):
                    row = first + int(zero[0])
                    raise UserError(f"{path}: image {source.ids[row]!r} (row {row}) is all zeros (in float16): a zero "
                                    f"vector has no direction, so no cosine with any image")
                feats[where[kept], 0] = half[kept]
                first += len(chunk)
                bar.update(len(chunk))
        feats.flush()
        del feats
        seconds = time.perf_counter() - start
        record = {"spec": asdict(imported_spec(name, digest)), "split": str(split_dir.resolve()),
                  "split_checksum": manifest.get("checksum"), "images": len(wanted), "dim": source.dim,
                  "imported": imported, "import_seconds": seconds, **(extra or {}),
                  "images_per_s": len(wanted) / max(seconds, 1e-9)}
        (tmp / IMAGE_IDS).write_text(json_text(wanted))
        if extra_files is not None:
            extra_files(tmp)
        (tmp / SPEC).write_text(json_text(record, indent=2))
    return record
