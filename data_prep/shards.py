"""The one data format: WebDataset ``.tar`` shards plus a ``manifest.json`` per split.

One sample is one (image, caption) pair (docs/design.md section 3)::

    __key__   unique, stable id
    jpg|png   the encoded image  (or npy: a precomputed float32 image feature)
    json      {"caption": str, "lang": "de", "image_id": str, "group": str | null}

``group`` ties the captions of one image across languages (parallel test data only).
The manifest holds the shard list, sample count, languages and counts, image size or
feature dim, source, and a content checksum (sha256 over the shard files).

Split rule (Globetrotter paper): ``train`` and ``val`` show each image in exactly one
language; ``test`` shows the same images in every language, tied by ``group``.
:func:`~data_prep.split_rule.check_split_rule` verifies it.
"""
from __future__ import annotations

import io
import json
import tarfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import UserError

MANIFEST = "manifest.json"
SPLITS = ("train", "val", "test")
IMAGE_EXTS = ("jpg", "png", "npy")
REQUIRED_FIELDS = ("caption", "lang", "image_id")  # of a sample's json; ``group`` may be absent (null)


@dataclass
class Sample:
    """One decoded sample. ``image`` is a PIL image, or a float32 vector for ``npy`` features."""

    key: str
    image: Image.Image | np.ndarray | bytes
    caption: str
    lang: str
    image_id: str
    group: str | None = None


def encode_image(image: Image.Image | np.ndarray | bytes, fmt: str, quality: int = 90) -> bytes:
    """Encode an image for a shard: PIL/uint8 array -> jpg/png bytes; features -> npy bytes.

    ``bytes`` are taken as already encoded in ``fmt`` and passed through unchanged.
    """
    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    buf = io.BytesIO()
    if fmt == "npy":
        np.save(buf, np.asarray(image, dtype=np.float32))
        return buf.getvalue()
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    if fmt == "jpg":
        rgb_image(image).save(buf, format="JPEG", quality=quality)
    elif fmt == "png":
        image.save(buf, format="PNG")
    else:
        raise ValueError(f"unknown image format {fmt!r}; expected one of {IMAGE_EXTS}")
    return buf.getvalue()


def rgb_image(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB; 16-bit greyscale (modes ``I;16*`` and ``I``, as which Pillow opens a 16-bit PNG) is scaled
    to 8 bits first (divided by 257), where ``convert("RGB")`` alone clips it to white. (backretrieval.image_inputs has
    the same reading for its g; neither package imports the other.)"""
    if img.mode == "I" or img.mode.startswith("I;16"):
        pixels = np.asarray(img, dtype=np.float64) / 257.0
        img = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
    return img.convert("RGB")


def decode_image(data: bytes, fmt: str) -> Image.Image | np.ndarray:
    """Decode shard bytes back into a RGB PIL image (jpg/png) or a float32 array (npy)."""
    if fmt == "npy":
        return np.load(io.BytesIO(data))
    img = Image.open(io.BytesIO(data))
    img.load()
    return rgb_image(img)


def read_manifest(split_dir: str | Path) -> dict:
    """Read and check a split's manifest; one-line :class:`UserError` on any problem."""
    split_dir = Path(split_dir)
    path = split_dir / MANIFEST
    if not split_dir.is_dir():
        what = "a file" if split_dir.exists() else "split directory not found"
        raise UserError(f"{split_dir}: {what} (expected a folder with {MANIFEST} and .tar shards)")
    if not path.is_file():
        inner = sorted(p.name for p in split_dir.iterdir() if (p / MANIFEST).is_file())
        hint = (f"{split_dir} holds the splits {', '.join(inner)}: name one of them, e.g. {split_dir / inner[0]}"
                if inner else f"is {split_dir} a split folder written by globetrotter-data?")
        raise UserError(f"{path}: manifest not found ({hint})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: malformed manifest ({err})") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path}: manifest is a JSON {type(manifest).__name__}, expected an object with shards, "
                        f"num_samples and languages")
    for key, kind, what in (("shards", list, "a list of shard file names"), ("num_samples", int, "a sample count"),
                            ("languages", dict, "an object of caption counts per language")):
        if key not in manifest:
            raise UserError(f"{path}: manifest lacks key '{key}'")
        value = manifest[key]
        if not isinstance(value, kind) or isinstance(value, bool) or isinstance(value, list) and not all(
                isinstance(name, str) for name in value):  # a list: the shards
            raise UserError(f"{path}: manifest key '{key}' is {json.dumps(value)[:60]}, expected {what}")
    if manifest["num_samples"] == 0 or not manifest["shards"]:
        raise UserError(f"{path}: split is empty (0 samples)")
    for name in manifest["shards"]:
        if not (split_dir / name).is_file():
            raise UserError(f"{split_dir / name}: shard listed in {MANIFEST} is missing")
    check_linked_split(split_dir, manifest)
    return manifest


LINKED_CHECKSUMS = "linked_checksums"  # key of a more-captions summary.json: linked split -> checksum when linked


def check_linked_split(split_dir: Path, manifest: dict) -> None:
    """One-line :class:`UserError` for a split that ``more-captions`` linked to its original dataset when the
    original was rewritten since (its checksum is not the one the dataset's ``summary.json`` recorded): the
    enriched splits and the linked ones would no longer be one split of the images (a test image could be a train
    image). Only a symbolic link is checked, from the summary (the shards are not read)."""
    if not split_dir.is_symlink():
        return
    summary = split_dir.parent / "summary.json"
    try:
        recorded = json.loads(summary.read_text(encoding="utf-8")).get(LINKED_CHECKSUMS, {}).get(split_dir.name)
    except (OSError, ValueError, AttributeError):
        return
    if recorded is not None and recorded != manifest.get("checksum"):
        raise UserError(f"{split_dir}: links to {split_dir.resolve()}, rewritten since more-captions wrote "
                        f"{split_dir.parent} (checksum {manifest.get('checksum')}, {summary} recorded {recorded}): "
                        f"its images may now be in the enriched splits too; run more-captions again to rebuild "
                        f"{split_dir.parent}")


def shard_paths(split_dir: str | Path) -> list[str]:
    """Absolute shard paths of a split, in manifest order."""
    split_dir = Path(split_dir)
    return [str(split_dir / name) for name in read_manifest(split_dir)["shards"]]


def iter_raw(split_dir: str | Path, shards: list[str] | None = None,
             on_bad: Callable[[UserError], None] | None = None,
             check_counts: bool = True) -> Iterator[tuple[str, str, bytes, dict]]:
    """Yield ``(key, image_ext, image_bytes, meta)`` from a split's shards without decoding images.

    Raises :class:`UserError` naming the shard for an unreadable tar or a malformed sample (json that is not an
    object with the fields of :func:`check_meta`, or a sample lacking its image or json). With ``on_bad``, that error
    is handed to it instead and reading goes on, as the training loader does: with the next sample, or after a shard
    that stops reading part-way, with the next shard. The whole split (``shards`` None) is read by
    :func:`iter_split`, which checks the manifest's counts once the last sample is read (unless ``check_counts`` is
    False); ``shards`` (some of the split's) are read as they are, nothing counted.
    """
    samples = iter_split(split_dir, on_bad, check_counts) if shards is None else _read_shards(shards, on_bad)
    for _shard, key, ext, data, meta in samples:
        yield key, ext, data, meta


def iter_split(split_dir: str | Path, on_bad: Callable[[UserError], None] | None = None,
               check_counts: bool = True) -> Iterator[tuple[str, str, str, bytes, dict]]:
    """Yield ``(shard, key, image_ext, image_bytes, meta)`` of every sample of a split, in manifest order, as
    :func:`iter_raw` reads them (``on_bad`` likewise). Once the last sample is read, a one-line :class:`UserError`
    (:func:`check_manifest_counts`' own) when the shards hold another number of samples, or of a language's, than
    the manifest records: every reader of a whole split refuses one, at no cost (unless ``check_counts`` is False,
    or a bad sample was met and handed to ``on_bad``: its count is the reader's to keep)."""
    manifest = read_manifest(split_dir)
    met_bad = False

    def bad(err: UserError) -> None:
        nonlocal met_bad
        met_bad = True
        if on_bad is None:
            raise err
        on_bad(err)

    found: Counter = Counter()
    for sample in _read_shards([str(Path(split_dir) / name) for name in manifest["shards"]], bad):
        found[sample[4]["lang"]] += 1
        yield sample
    if check_counts and not met_bad:
        _check_counts(Path(split_dir) / MANIFEST, manifest, found)


def _read_shards(paths: list[str], on_bad: Callable[[UserError], None] | None
                 ) -> Iterator[tuple[str, str, str, bytes, dict]]:
    """``(shard, key, image_ext, image_bytes, meta)`` of each sample of the shards ``paths`` (see :func:`iter_raw`)."""
    def bad(err: UserError) -> None:
        if on_bad is None:
            raise err
        on_bad(err)

    for path in paths:
        try:
            with tarfile.open(path, "r") as tar:
                pending: dict[str, dict] = defaultdict(dict)
                for member in tar:
                    fh = tar.extractfile(member) if member.isfile() else None
                    if fh is None:
                        continue
                    key, _, ext = member.name.rpartition("/")[2].partition(".")
                    pending[key][ext] = fh.read()
                    entry = pending[key]
                    img_ext = next((e for e in IMAGE_EXTS if e in entry), None)
                    if "json" in entry and img_ext is not None:
                        del pending[key]
                        try:
                            meta = json.loads(entry["json"].decode("utf-8"))
                        except (json.JSONDecodeError, UnicodeDecodeError) as err:
                            bad(UserError(f"{path}: sample '{key}' has malformed json ({err})"))
                            continue
                        try:
                            check_meta(meta, path, key)
                        except UserError as err:
                            bad(err)
                            continue
                        yield path, key, img_ext, entry[img_ext], meta
                for key in pending:
                    bad(UserError(f"{path}: sample '{key}' is incomplete (needs an image and a .json)"))
        except (tarfile.TarError, OSError, EOFError) as err:
            bad(UserError(f"{path}: unreadable shard ({_tar_error(err)})"))


def _tar_error(err: BaseException) -> str:
    """What is wrong with a shard ``tarfile`` could not read, in one line (its "could not be opened" error lists
    each compression it tried, a line each)."""
    if isinstance(err, tarfile.ReadError) and str(err).startswith("file could not be opened"):
        return "not a tar archive, or truncated: expected a .tar shard as globetrotter-data writes them"
    if isinstance(err, (tarfile.ReadError, EOFError)):
        return f"truncated or not a tar archive: {' '.join(str(err).split())}"
    return " ".join(str(err).split())


def check_meta(meta: object, path: str, key: str) -> None:
    """One-line :class:`UserError` naming the shard and sample unless ``meta`` has the fields of the format (module
    docstring): the :data:`REQUIRED_FIELDS` as strings, a caption, lang and image_id that are not empty (or only
    whitespace), and a ``group`` that is such a string or null (or absent). Every reader refuses one, not ``inspect
    --check`` alone: a number or list there was read in silence (an image id 7 and "7" one image to some readers, two
    to others), and an empty image id or group tied unrelated samples into one image or one group."""
    if not isinstance(meta, dict):
        raise UserError(f"{path}: sample '{key}' json is a {type(meta).__name__}, expected an object with "
                        f"{', '.join(REQUIRED_FIELDS)}")
    bad = [f for f in REQUIRED_FIELDS if not isinstance(meta.get(f), str) or f != "caption" and not meta[f].strip()]
    group = meta.get("group")
    if group is not None and not (isinstance(group, str) and group.strip()):
        bad.append("group")
    if bad:
        found = ", ".join(f"{f} {repr(meta[f])[:40] if f in meta else 'absent'}" for f in bad)
        raise UserError(f"{path}: sample '{key}' json lacks valid field(s) {', '.join(bad)} ({found}; expected strings "
                        "caption, lang (a language code) and image_id, and group a string or null, none empty)")
    if not meta["caption"].strip():
        raise UserError(f"{path}: sample '{key}' has an empty caption (expected the text of the image's caption; "
                        f"write the split again without it)")


def decode_sample_image(data: bytes, ext: str, shard: str | Path, key: str) -> Image.Image | np.ndarray:
    """:func:`decode_image` of sample ``key`` of ``shard``; a one-line :class:`UserError` naming both for image
    bytes that do not decode (truncated, or no known format)."""
    try:
        return decode_image(data, ext)
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError) as err:
        why = "not a known image format" if isinstance(err, UnidentifiedImageError) else f"{type(err).__name__}: {err}"
        raise UserError(f"{shard}: sample '{key}' has a .{ext} image that does not decode ({why})") from None


def iter_samples(split_dir: str | Path, decode_images: bool = True) -> Iterator[Sample]:
    """Yield :class:`Sample` objects of a split in shard order (images decoded unless asked not to).

    Raises :class:`UserError` naming the shard and sample for image bytes that do not decode (and, read to the end,
    for a manifest whose counts its shards do not hold: :func:`iter_split`)."""
    for shard, key, ext, data, meta in iter_split(split_dir):
        image = decode_sample_image(data, ext, shard, key) if decode_images else data
        yield Sample(key, image, meta["caption"], meta["lang"], meta["image_id"], meta.get("group"))


def check_samples(split_dir: str | Path, progress: bool = True) -> str:
    """Raise :class:`UserError` naming the shard and sample at the first sample of a split whose image does not
    decode (every image is decoded) or whose caption is empty (blank); return what was checked. ``progress``: a
    progress bar on a terminal (none when stderr is no terminal)."""
    from tqdm import tqdm

    total, checked = read_manifest(split_dir)["num_samples"], 0
    with tqdm(total=total, desc=f"decoding {Path(split_dir).name}", unit="smp",
              disable=None if progress else True, dynamic_ncols=True, leave=False) as bar:
        for shard, key, ext, data, meta in iter_split(split_dir):
            decode_sample_image(data, ext, shard, key)  # an empty caption: refused by iter_raw (check_meta)
            checked += 1
            bar.update(1)
    return f"{checked} samples, every image decodes, no caption is empty"


def read_captions(split_dir: str | Path, check_counts: bool = True) -> list[dict]:
    """All captions' metadata of a split (``key`` added), without decoding images; a manifest whose counts the shards
    do not hold is a one-line :class:`UserError` unless ``check_counts`` is False (:func:`iter_split`)."""
    return [dict(meta, key=key) for key, _, _, meta in iter_raw(split_dir, check_counts=check_counts)]


def iter_metas(split_dir: str | Path) -> Iterator[dict]:
    """Each caption's metadata of a split, in shard order, one at a time (no list of the whole split is held)."""
    for _key, _ext, _data, meta in iter_raw(split_dir):
        yield meta


def check_manifest_counts(split_dir: str | Path, languages: dict[str, int] | None = None) -> str:
    """Raise :class:`UserError` unless a split's shards hold as many samples as its manifest's ``num_samples`` says,
    and each language as many as its ``languages`` counts; return what was checked. ``languages``: the samples per
    language found in the shards (read from them when None)."""
    manifest = read_manifest(split_dir)
    if languages is None:
        languages = Counter(m["lang"] for m in read_captions(split_dir, check_counts=False))
    found = Counter(languages)
    _check_counts(Path(split_dir) / MANIFEST, manifest, found)
    return f"{sum(found.values())} samples, {len(found)} language(s)"


def _check_counts(path: Path, manifest: dict, found: Counter) -> None:
    """One-line :class:`UserError` naming the manifest at ``path`` unless its ``num_samples`` and ``languages``
    counts are those ``found`` (samples per language) in its shards."""
    total = sum(found.values())
    if total != manifest["num_samples"]:
        raise UserError(f"{path}: num_samples is {manifest['num_samples']} but the shards hold {total} samples "
                        f"(the manifest does not describe its shards; write the split again)")
    recorded = manifest["languages"]
    wrong = [f"{lang} {recorded.get(lang, 0)} recorded, {found[lang]} found"
             for lang in sorted(set(recorded) | set(found)) if recorded.get(lang, 0) != found[lang]]
    if wrong:
        raise UserError(f"{path}: languages counts differ from the shards' samples ({'; '.join(wrong)}); write the "
                        "split again")
