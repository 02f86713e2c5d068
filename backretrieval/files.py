"""Files into the library functions: checked ``.npy`` inputs, text files of values, checks of rows and K.

Every input of :func:`backretrieval.score`, :func:`backretrieval.compare` and the hit files may
be a path or an array (:func:`load_input`); a path is named in error messages, an array by the
parameter it was given as. What the functions write: :mod:`backretrieval.outputs`; the JSON
records: :mod:`backretrieval.records`.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .errors import BackRetrievalError, BackRetrievalWarning, option
from .vectors import all_finite

if TYPE_CHECKING:  # typing_extensions: mypy's own copy, no dependency at run time
    from typing_extensions import TypeIs

PathLike = str | os.PathLike
ArrayInput = np.ndarray | PathLike
"""An array argument of :func:`backretrieval.score` / :func:`backretrieval.compare`: the array, or a ``.npy`` path."""
IdsInput = Sequence[str] | PathLike
"""Image ids, one per source row: a sequence, or the path of a text file of one id per line."""
_FINITE_CHUNK = 8192  # rows checked for NaN/inf (or all zeros) at once (memmaps stay on disk)


def load_npy(path: PathLike, what: str, check_finite: bool = True, vectors: bool = False,
             bools: bool = True) -> np.ndarray:
    """A .npy file as a read-only memmap; one-line errors name the file (missing, unreadable, not numbers, with
    ``bools`` False a boolean array, rows with NaN, and with ``vectors`` all-zero rows: :func:`check_rows`)."""
    p = Path(path)
    if p.is_dir():
        raise BackRetrievalError(f"{p}: {what} is a folder; expected an .npy file")
    if not p.is_file():
        raise BackRetrievalError(f"{p}: {what} file not found")
    with open(p, "rb") as handle:
        magic = handle.read(6)
    if magic and magic != b"\x93NUMPY" and not magic.startswith(b"PK"):  # np.load would try it as a pickle
        raise BackRetrievalError(f"{p}: {what} is not a .npy file (it has no .npy header); expected an array "
                                 "saved by numpy.save")
    try:
        array = np.load(p, mmap_mode="r")
    except EOFError:  # a file of 0 bytes (or cut short before the header)
        raise BackRetrievalError(f"{p}: {what} is an empty file ({p.stat().st_size} bytes), not a .npy array") \
            from None
    except (ValueError, OSError) as err:
        raise BackRetrievalError(f"{p}: {what} is not a readable .npy file ({err})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise BackRetrievalError(f"{p}: {what} is an .npz archive of {len(array.files)} arrays; expected one .npy array")
    check_numbers(str(p), array, what, bools)
    if check_finite and array.ndim == 2:
        check_rows(str(p), array, what, vectors)
    return array


def subject(label: str, what: str) -> str:
    """How a message names an input: ``"FILE: what"`` for a file, ``what`` alone for an array (whose label
    :func:`load_input` makes ``what`` itself)."""
    return what if label == what else f"{label}: {what}"


def check_rows(label: str, array: np.ndarray, what: str, vectors: bool = True,
               rows: np.ndarray | None = None) -> None:
    """One-line error naming ``label`` and the first bad row of a ``(rows, dim)`` array: rows with NaN or inf and,
    with ``vectors`` (embeddings, image features: rows compared by cosine), all-zero rows, whose cosine with
    anything is undefined (scored 0, they rank arbitrarily). Checked in row chunks (memmaps stay on disk).
    ``rows``: check only these (sorted) row numbers, the ones to be used; the message still names file rows."""
    if array.dtype.kind not in "fiub":
        return
    rows = np.arange(len(array)) if rows is None else np.asarray(rows, dtype=np.int64)
    nonfinite, zero = [], []
    for s in range(0, len(rows), _FINITE_CHUNK):
        chunk = rows[s:s + _FINITE_CHUNK]
        block = np.asarray(array[chunk[0]:chunk[-1] + 1] if len(chunk) == chunk[-1] - chunk[0] + 1 else array[chunk])
        if block.dtype.kind == "f":
            nonfinite.append(chunk[~np.isfinite(block).all(axis=1)])
        if vectors and block.shape[1]:
            zero.append(chunk[~block.any(axis=1)])
    for found, why, after in ((nonfinite, "with NaN or inf", ""),
                              (zero, "that are all zero", "; a zero vector has no direction, so no cosine")):
        bad = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        if len(bad):
            of = f"{len(array)} rows" if len(rows) == len(array) else f"the {len(rows)} rows used"
            raise BackRetrievalError(f"{subject(label, what)} has {len(bad)} of {of} {why} "
                                     f"(first: row {int(bad[0])}){after}")


def check_numbers(label: str, array: np.ndarray, what: str, bools: bool = True) -> None:
    """One-line error when ``array`` holds no real numbers (strings, objects, complex values) or, with ``bools``
    False (embeddings, image features, similarities), booleans: a mask or hits file given by mistake, whose rows
    would be scored as 0/1 vectors."""
    if array.dtype.kind not in ("biuf" if bools else "iuf"):
        mask = "; a boolean array is a mask or hits, not vectors" if array.dtype.kind == "b" else ""
        raise BackRetrievalError(f"{subject(label, what)} holds {array.dtype} values; expected real numbers{mask}")


def as_array(label: str, x: object) -> np.ndarray:
    """``np.asarray(x)``; a one-line error naming ``label`` for nested lists of unequal lengths (ragged rows) and for
    a torch tensor numpy cannot read (one that requires grad, or on a GPU)."""
    try:
        return np.asarray(x)
    except ValueError as err:  # "setting an array element with a sequence ... inhomogeneous shape"
        raise BackRetrievalError(f"{label}: cannot be read as an array (rows of unequal lengths?): "
                                 f"{str(err).splitlines()[0][:120]}") from None
    except (RuntimeError, TypeError) as err:  # a torch tensor that requires grad or is on a GPU: torch's traceback
        raise BackRetrievalError(f"{label}: cannot be read as an array ({str(err).splitlines()[0][:120]}); give "
                                 "tensor.detach().cpu().numpy()") from None


def is_whole(value: object) -> TypeIs[int | np.integer]:
    """An ``int`` or numpy integer, not a bool: a count as a caller may give it (``True``, ``2.5`` or ``1e3`` is
    none)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def require_count(value: object, name: str, minimum: int = 1) -> int:
    """``value`` as an ``int``; a one-line :class:`BackRetrievalError` naming ``name`` unless it is a whole number
    >= ``minimum`` (0 or -1 neighbours, clusters or items gave a figure in silence, 1.5 was read as 1 or failed
    inside numpy)."""
    if not is_whole(value) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise BackRetrievalError(f"{name}: expected {what}, got {value!r}")
    return int(value)


def require_sequence(value: object, name: str, what: str) -> None:
    """One-line error when ``value`` is one ``str`` (or ``bytes``) where a sequence of ``what`` is expected: it would be
    read as its characters (the wording of globetrotter's ``Encoder.encode_text``)."""
    if isinstance(value, (str, bytes)):
        raise BackRetrievalError(f"{option(name)}: expected a sequence of {what}, got one {type(value).__name__} "
                                 f"({value[:40]!r}); wrap it in a list")


def is_path(x: object) -> TypeIs[str | os.PathLike]:
    """True for a path (``str`` or ``os.PathLike``), not an array."""
    return isinstance(x, (str, os.PathLike))


def load_input(x: ArrayInput, what: str, vectors: bool = False, bools: bool = True) -> tuple[str, np.ndarray]:
    """``(label, array)`` of an input given as a ``.npy`` path (label: the path) or an array (label: ``what``);
    ``vectors``: a file's all-zero rows are refused too (:func:`check_rows`); ``bools`` False: a boolean file too."""
    if is_path(x):
        return str(x), load_npy(x, what, vectors=vectors, bools=bools)
    return what, as_array(what, x)


def load_matrix(x: ArrayInput, what: str, vectors: bool = True) -> tuple[str, np.ndarray]:
    """:func:`load_input` of a ``(rows, dim)`` array of real numbers: one-line errors name the file (or ``what``).
    ``vectors`` (embeddings, image features: rows compared by cosine): a file's all-zero rows are refused; False for
    a similarity matrix. A boolean array is refused either way (a mask or hits file is no matrix of scores)."""
    label, array = load_input(x, what, vectors, bools=False)
    check_numbers(label, array, what, bools=False)
    if array.ndim != 2:
        raise BackRetrievalError(f"{subject(label, what)} must be a 2-D array (rows x dim), got shape {array.shape}")
    if array.shape[0] == 0:
        raise BackRetrievalError(f"{subject(label, what)} is empty (0 rows)")
    if array.shape[1] == 0:
        raise BackRetrievalError(f"{subject(label, what)} has 0 columns (vectors of dimension 0)")
    return label, array


def read_lines(x: IdsInput, what: str) -> tuple[str, list[str]]:
    """``(label, lines)`` of a text file given by path, or of a sequence given as is (label: ``what``).

    A file is read as UTF-8 (a leading byte-order mark is dropped); one-line errors name the file for a folder, a
    missing file, and bytes that are not UTF-8 (with their line)."""
    if not is_path(x):
        return what, [str(v) for v in x]
    return str(x), read_text_lines(x, what)


def read_text_lines(path: PathLike, what: str) -> list[str]:
    """The lines of the UTF-8 text file ``path`` (a byte-order mark dropped); one-line errors name the file, and the
    line of the first byte that is not UTF-8."""
    path = Path(path)
    if path.is_dir():
        raise BackRetrievalError(f"{path}: {what} is a folder; expected a text file of one value per line")
    if not path.is_file():
        raise BackRetrievalError(f"{path}: {what} file not found")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise BackRetrievalError(f"{path}: cannot read {what} ({err.strerror or err})") from None
    try:
        return raw.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
        line = raw[:err.start + bom].count(b"\n") + 1
        raise BackRetrievalError(f"{path}:{line}: {what} is not UTF-8 text (byte {err.start + bom}); expected one "
                                 "value per line in UTF-8") from None


def same_rows(items: Sequence[tuple[str, int]], what: str) -> None:
    """One-line error when inputs that must be row-aligned differ in length: ``items`` are (label, rows)."""
    counts = dict(items)
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{label} has {n}" for label, n in counts.items())
        raise BackRetrievalError(f"row counts differ ({what}): {listed}")


def same_dim(items: Sequence[tuple[str, np.ndarray]], what: str) -> None:
    """One-line error when matrices that are compared by cosine differ in width: ``items`` are (label, array)."""
    dims = {label: array.shape[1] for label, array in items}
    if len(set(dims.values())) > 1:
        listed = ", ".join(f"{label} has {d}" for label, d in dims.items())
        raise BackRetrievalError(f"dimensions differ ({what}): {listed}")


def target_indices(label: str, gt: Sequence[int] | np.ndarray, n_src: int, n_tgt: int) -> np.ndarray:
    """The ground-truth target row of each source row (XLR): ``n_src`` integers in ``[0, n_tgt)``; one-line errors
    name the file (or option) and the first bad value."""
    gt = np.asarray(gt)
    if gt.size == 0:  # np.asarray([]) is float
        gt = gt.astype(np.int64)
    if gt.dtype.kind not in "iu":
        raise BackRetrievalError(f"{label}: expected integer target indices, got {gt.dtype} values")
    if gt.shape != (n_src,):
        raise BackRetrievalError(f"{label}: expected {n_src} target indices (one per source row), got shape {gt.shape}")
    bad = np.flatnonzero((gt < 0) | (gt >= n_tgt))
    if len(bad):
        raise BackRetrievalError(f"{label}: row {int(bad[0])} holds target index {int(gt[bad[0]])}, outside [0, {n_tgt}) "
                                 f"({len(bad)} such rows)")
    return gt.astype(np.int64)


def enough_for_k(label: str, n: int, ks: Sequence[int], what: str, remedy: str | None = "use more data",
                 warn: bool = False) -> None:
    """One-line error when ``n`` candidates cannot tell models apart at the largest K: with ``n <= K`` every rank is
    at most K, so Recall@K is 1 for any model. ``remedy``: what else than lowering ``--ks`` helps (None: nothing).
    ``warn``: a warning instead of the error (the low-level metric functions, whose callers may score a small set)."""
    if n <= max(ks):
        message = (f"{label}: {n} {what}, not more than the largest K ({max(ks)}): Recall@{max(ks)} "
                   f"would be 1 for any model; lower {option('ks')}" + (f" or {remedy}" if remedy else ""))
        if not warn:
            raise BackRetrievalError(message)
        warnings.warn(message, BackRetrievalWarning, stacklevel=3)


def read_cache_entry(path: PathLike, rows: int) -> np.ndarray | None:
    """The ``(rows, D)`` features cached at ``path``, or None when there is none, or it is damaged (cut short, not a
    ``.npy`` array, another row count): then it is removed, to be computed and written again, and named in one
    :class:`~backretrieval.errors.BackRetrievalWarning` (it was a traceback that did not name the file)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        cached = np.load(path, allow_pickle=False)
        why = None if isinstance(cached, np.ndarray) else "an .npz archive, not a .npy array"
        if why is None and (cached.ndim != 2 or len(cached) != rows):
            why = f"an array of shape {cached.shape}, expected {rows} rows of features"
    except (ValueError, OSError, EOFError) as err:
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if why is None:
        return cached
    warnings.warn(f"{path}: unreadable cache entry ({why}); computing it again", BackRetrievalWarning, stacklevel=2)
    path.unlink(missing_ok=True)
    return None


def check_matrix(name: str, x: object, rows: int | None = None, dim: int | None = None, dim_of: str = "",
            vectors: bool = True) -> np.ndarray:
    """``x`` checked as a ``(rows, dim)`` matrix of finite numbers; ``vectors`` (embeddings, image features: rows
    compared by cosine): no all-zero row either (:func:`~backretrieval.files.check_rows`)."""
    x = as_array(name, x)
    check_numbers(name, x, "the array", bools=False)
    if x.ndim != 2:
        raise BackRetrievalError(f"{name}: expected a 2-D array (rows x dim), got shape {x.shape}")
    if rows is not None and x.shape[0] != rows:
        raise BackRetrievalError(f"{name}: expected {rows} rows (one per text), got {x.shape[0]}")
    if dim is not None and x.shape[1] != dim:
        raise BackRetrievalError(f"{name}: expected dimension {dim} (as {dim_of}), got {x.shape[1]}")
    if x.shape[0] == 0:
        raise BackRetrievalError(f"{name}: empty (0 rows)")
    if x.shape[1] == 0:
        raise BackRetrievalError(f"{name}: 0 columns (vectors of dimension 0)")
    if vectors:  # NaN, inf or all-zero rows, the first one named: one pass
        check_rows(name, x, "the array")
    elif not all_finite(x):
        raise BackRetrievalError(f"{name}: contains NaN or inf")
    return x
