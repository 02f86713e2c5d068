"""Image-feature cache for frozen backbones (docs/design.md section 10).

With ``model.freeze_image_backbone=true`` the backbone's output for an image never changes,
so it is computed once per image and view, at the config's ``data.image_size``, and training
reads rows of a float16 matrix instead of decoding and augmenting pixels. The step then costs
only the text encoder and the heads.

A cache is a folder (default ``<split>/features``) holding

* ``features.npy``: float16 ``[images, views + 1, dim]``; row ``[i, 0]`` is image ``i`` through the
  evaluation transform (resize, centre crop: what :meth:`Encoder.encode_image` sees), rows
  ``[i, 1:]`` are ``views`` SimCLR-augmented views, each drawn from a generator seeded by
  ``(seed, image index)`` so the cache is the same for any worker count;
* ``image_ids.json``: the image id of each row, in the order images first appear in the shards;
* ``cache.json``: the :class:`CacheSpec` it was built with (backbone, its arguments
  ``model.image_backbone_args``, weights and their checksum, image size, view count and augmentations, seed)
  and the split's content checksum;
* ``means.npz`` (a concatenation of caches only, :mod:`.feature_concat`): the means it was centred on.

Every writer (build, import, concat, a run building its missing cache) writes the folder under a ``.tmp`` name
and swaps it in (:mod:`.feature_cache_write`: :func:`start_cache_write`, :func:`finish_cache_write`): the old cache is
renamed aside, the new one renamed into place, then the old one deleted. Only a feature cache (``cache.json`` and
nothing beyond a cache's own files) or an empty folder is ever replaced; any other folder at the destination (a split,
a dataset root) is refused in one line naming what it holds, ``--overwrite`` or not.

A cache whose spec differs from the one a config asks for is refused with a one-line error
naming both (never silently reused). Imported embeddings (:mod:`.feature_import`, ``model.image_backbone:
imported``) are a cache of the whole image only (0 views) whose spec names them: a config reads them by that name.

A cache is keyed by image id, so it serves any split whose images it holds, not only the one it was built
from ("its own split"): the more-captions copy of a train split (same image bytes; ``configs/flickr8k.yaml``
reads ``outputs/flickr8k/train/features`` for ``outputs/flickr8k-more/train``), the parallel split of a
supervised twin, an adaptation split. Its recorded split checksum is compared (:func:`check_split_checksum`)
when it is read for a split:

* the split's manifest checksum equals the recorded one: accepted;
* the split is the cache's own split (the folder recorded at build time, or the folder the cache sits in as
  ``<split>/features``) with another checksum: the split was rewritten since the build (a regenerated synthetic
  world keeps its image ids but not its pixels): refused with a one-line error naming both checksums;
* the split is a more-captions copy of the cache's own split (its manifest's ``more_captions.from`` and
  ``original_checksum``): the checksum of the split its image bytes were copied from must be the recorded one,
  else refused naming both (a more-captions copy of another split, such as train-parallel, is any other split);
* any other split: no checksum says which images it holds; the cache serves it by image id and
  :meth:`FeatureCache.rows` refuses an image the cache lacks.

A cache or manifest without a checksum (older builds) is not compared.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from data_prep.shards import read_manifest

from ..config import IMPORTED_BACKBONE
from ..errors import UserError

if TYPE_CHECKING:
    from ..config import TrainConfig

FEATURES = "features.npy"
IMAGE_IDS = "image_ids.json"
SPEC = "cache.json"
MEANS = "means.npz"  # a concatenation's means (feature_concat)
CACHE_FILES = frozenset({FEATURES, IMAGE_IDS, SPEC, MEANS})  # all a cache folder ever holds
ROW0_FIELDS = ("backbone", "weights", "weights_sha256", "image_size", "backbone_args")  # what the whole image's row depends on


def canonical_args(args: dict | None) -> str:
    """``model.image_backbone_args`` as one canonical string (sorted keys, no spaces): the spec's ``backbone_args``."""
    return json.dumps(args or {}, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class CacheSpec:
    """Everything that decides a cache's numbers; two caches with equal specs are interchangeable."""

    backbone: str
    weights: str  # "package", a weights file's name, or "random"
    weights_sha256: str  # first 16 hex digits of the weights file ("" for random init)
    image_size: int
    views: int  # augmented views per image (row 0, the whole image, comes on top)
    crop_scale_min: float
    colour_jitter: float
    hue_jitter: float
    grayscale: float
    hflip: bool
    seed: int
    backbone_args: str = "{}"  # canonical_args(model.image_backbone_args); absent from older cache.json files: {}

    def differences(self, other: "CacheSpec") -> list[str]:
        """``key: mine != other's`` for every field that differs."""
        mine, theirs = asdict(self), asdict(other)
        return [f"{k}={mine[k]!r} vs {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]


@functools.lru_cache(maxsize=8)
def _weights_digest(weights: str | None, backbone: str) -> tuple[str, str]:
    """(name, first 16 hex digits of sha256) of ``backbone``'s weights; read once per process."""
    from backretrieval.image_weights import file_digest, package_weights_path

    if not weights:
        return "random", ""
    if weights == "package":
        from backretrieval.errors import BackRetrievalError, cli_option_names

        try:
            with cli_option_names(False):  # (--image-model, --image-weights) are no flags of train.py
                return "package", file_digest(package_weights_path(backbone))
        except BackRetrievalError as err:
            raise UserError(f"model.image_pretrained: {err}") from None
    path = Path(weights)
    if not path.is_file():
        raise UserError(f"model.image_pretrained: weights file {path} not found")
    return path.name, file_digest(path)


def imported_spec(name: str, sha256: str = "") -> CacheSpec:
    """The spec of imported embeddings ``name`` (:mod:`.feature_import`): no backbone run, no image size, no
    augmented views; ``sha256`` is their source file's (not compared: a config names the embeddings only)."""
    return CacheSpec(backbone=IMPORTED_BACKBONE, weights=name, weights_sha256=sha256, image_size=0, views=0,
                     crop_scale_min=0.0, colour_jitter=0.0, hue_jitter=0.0, grayscale=0.0, hflip=False, seed=0)


def spec_from_config(cfg: "TrainConfig") -> CacheSpec:
    """The cache a run's config asks for: its backbone, weights, image size, views and augmentations."""
    d, m = cfg.data, cfg.model
    if m.image_backbone == IMPORTED_BACKBONE:  # no weights to hash: the imported embeddings' name
        return imported_spec(m.image_pretrained or "")
    name, digest = _weights_digest(m.image_pretrained, m.image_backbone)
    return CacheSpec(backbone=m.image_backbone, weights=name, weights_sha256=digest, image_size=d.image_size,
                     views=d.feature_views, crop_scale_min=d.crop_scale_min, colour_jitter=d.colour_jitter,
                     hue_jitter=d.hue_jitter, grayscale=d.grayscale, hflip=d.hflip, seed=d.feature_seed,
                     backbone_args=canonical_args(m.image_backbone_args))


def cache_dir_for(cfg: "TrainConfig", split: str) -> Path | None:
    """Where the run's cache for ``split`` lives: ``data.features`` (``auto`` = ``<split>/features``), None for pixels."""
    where = cfg.data.features
    if not where:
        return None
    return Path(cfg.data.root) / split / "features" if where == "auto" else Path(where)


@dataclass
class FeatureCache:
    """A loaded cache: ``features`` [images, views + 1, dim] float16 (memory-mapped) and the row of each image id."""

    path: Path
    features: np.ndarray
    row_of: dict[str, int]
    spec: CacheSpec
    built_from: str = ""  # the split its cache.json records it was built (or imported) from; "" when unknown

    @property
    def views(self) -> int:
        """K, the augmented views cached per image (the whole image's row not counted)."""
        return self.features.shape[1] - 1

    def rows(self, image_ids: list[str], split_dir: Path | str) -> np.ndarray:
        """The cache row of each image id; a one-line error naming the first missing id and the count."""
        missing = [i for i in image_ids if i not in self.row_of]
        if missing:
            how = "import" if self.spec.backbone == IMPORTED_BACKBONE else "build"
            head = (f"{self.path}: {len(set(missing))} image(s) of {split_dir} are missing from the feature cache "
                    f"(first: {missing[0]!r})")
            if self.built_from and not same_folder(self.built_from, split_dir):  # another dataset's cache
                where = (f"writes {Path(split_dir) / 'features'}, where a run's data.features=auto looks and builds it"
                         if how == "build" else "--out FOLDER writes it; name that folder in data.features")
                raise UserError(f"{head}: it was built from another split, {self.built_from}; give {split_dir} a "
                                f"cache of its own (globetrotter-data features {how} {split_dir} ... {where}) "
                                f"instead of this one")
            raise UserError(f"{head}; {how} it again with globetrotter-data features {how}")
        return np.fromiter((self.row_of[i] for i in image_ids), dtype=np.int64, count=len(image_ids))


def same_folder(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one folder once resolved (False where one cannot be resolved)."""
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop before Python 3.13
        return False


def check_split_checksum(path: str | Path, record: dict, split_dir: str | Path) -> None:
    """Refuse (one-line :class:`UserError` naming both checksums) the cache at ``path`` with ``cache.json``
    content ``record`` for reading ``split_dir`` when the split's images may not be the ones it was built from
    (the rules are in the module docstring)."""
    path, split_dir = Path(path), Path(split_dir)
    built = record.get("split_checksum")
    manifest = read_manifest(split_dir)
    current = manifest.get("checksum")
    if not built or not current or current == built:
        return

    def own(folder: str | Path) -> bool:  # the cache's own split: recorded at build time, or the folder it sits in
        return same_folder(folder, record.get("split", "")) or same_folder(path, Path(folder) / "features")

    if own(split_dir):
        raise UserError(f"{path}: feature cache was built from {split_dir} with checksum {built}, but the split's "
                        f"manifest now says {current}: the split was rewritten since; "
                        f"{rewrite_hint(path, {**record, 'split': str(split_dir)})}, "
                        f"or point data.features elsewhere")
    copied = manifest.get("more_captions") or {}
    original = copied.get("original_checksum")
    if original and original != built and own(copied.get("from", "")):
        raise UserError(f"{path}: feature cache was built from a split with checksum {built}, but {split_dir} copied its "
                        f"images from one with checksum {original} (manifest more_captions.original_checksum): rebuild "
                        f"the cache from that split or point data.features elsewhere")


def built_from_split(path: str | Path, split_dir: str | Path) -> bool:
    """Whether the cache at ``path`` was built from ``split_dir``'s very images: the split's manifest checksum, or
    the checksum of the split a more-captions copy took its images from, is the one the cache recorded. (Image ids
    alone do not say it: another folder may hold other photos under the same names.)"""
    if not (Path(path) / SPEC).is_file():
        return False
    built = read_cache_record(path).get("split_checksum")
    manifest = read_manifest(split_dir)
    return bool(built) and built in (manifest.get("checksum"), (manifest.get("more_captions") or {}).get("original_checksum"))


def check_imported(path: Path, spec: CacheSpec, name: str) -> None:
    """Refuse (one line naming both) a cache at ``path`` that is not the imported embeddings ``name``
    (``model.image_pretrained`` of a config with ``model.image_backbone: imported``)."""
    if spec.backbone != IMPORTED_BACKBONE:
        raise UserError(f"{path}: feature cache built from pixels by {spec.backbone} ({spec.weights}), but "
                        f"model.image_backbone=imported asks for imported embeddings {name!r}; import them "
                        f"(globetrotter-data features import) or point data.features elsewhere")
    if spec.weights != name:
        raise UserError(f"{path}: imported embeddings are named {spec.weights!r}, but model.image_pretrained is "
                        f"{name!r}; set model.image_pretrained={spec.weights} or point data.features elsewhere")


def rewrite_hint(path: Path, record: dict) -> str:
    """How to write the cache at ``path`` (its ``cache.json`` content ``record``) again, over what is left of it."""
    spec = record.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    split = record.get("split") or "SPLIT"
    if spec.get("backbone") == IMPORTED_BACKBONE:
        imported = record.get("imported")
        imported = imported if isinstance(imported, dict) else {}
        how = "concat" if imported.get("format") == "concat" else "import"
        return f"write it again with globetrotter-data features {how} {split} ... --out {path} --overwrite"
    return (f"rebuild it with globetrotter-data features build {split} --out {path} --overwrite (with the settings "
            f"it was built for)")


def read_cache_record(path: str | Path, remedy: str | None = None) -> dict:
    """The ``cache.json`` record of the cache folder ``path``: a one-line :class:`UserError` naming the file when it
    is not UTF-8 JSON, not an object, or its ``spec`` is not an object. ``remedy``: what the error tells the user to
    do (default: write the cache again as it was made, :func:`rewrite_hint`)."""
    path = Path(path)
    try:
        record = json.loads((path / SPEC).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path / SPEC}: not a readable feature-cache record ({err}); "
                        f"{remedy or rewrite_hint(path, {})}") from None
    if not isinstance(record, dict) or not isinstance(record.get("spec", {}), dict):
        found = type(record).__name__ if not isinstance(record, dict) else f"a \"spec\" {type(record['spec']).__name__}"
        raise UserError(f"{path / SPEC}: expected a JSON object (a feature-cache record) with a \"spec\" object, got "
                        f"{found}; {remedy or rewrite_hint(path, record if isinstance(record, dict) else {})}")
    return record


def load_feature_cache(path: str | Path, expected: CacheSpec | None = None,
                       split_dir: str | Path | None = None,
                       remedy: str = "rebuild it or point data.features elsewhere") -> FeatureCache:
    """Open a cache folder; refuse it (one-line :class:`UserError`) when its spec is not ``expected`` (the error
    ends with ``remedy``: what the reader can do), or when it is read for ``split_dir`` and its recorded split
    checksum says that split's images may have changed (:func:`check_split_checksum`)."""
    path = Path(path)
    if not (path / SPEC).is_file():
        raise UserError(f"{path}: no feature cache here (expected {SPEC}, {FEATURES} and {IMAGE_IDS}; build one with "
                        f"globetrotter-data features build, or import embeddings with globetrotter-data features import)")
    record = read_cache_record(path)
    missing = [name for name in (FEATURES, IMAGE_IDS) if not (path / name).is_file()]
    if missing:
        raise UserError(f"{path}: incomplete feature cache ({' and '.join(missing)} missing beside {SPEC}); "
                        f"{rewrite_hint(path, record)}")
    try:
        spec = CacheSpec(**record["spec"])
    except (TypeError, KeyError) as err:
        raise UserError(f"{path / SPEC}: not a feature-cache spec of this version ({err})") from None
    if expected is not None and expected.backbone == IMPORTED_BACKBONE:
        check_imported(path, spec, expected.weights)
    elif expected is not None and spec != expected:
        raise UserError(f"{path}: feature cache was built for another setting than the config asks "
                        f"(cache vs config: {'; '.join(spec.differences(expected))}); {remedy}")
    if split_dir is not None:
        check_split_checksum(path, record, split_dir)
    try:  # a truncated file, or one that is no npy array: named, not a numpy traceback
        with open(path / FEATURES, "rb") as fh:
            if fh.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
                raise ValueError("no .npy header: not an npy file")
        features = np.load(path / FEATURES, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:
        raise UserError(f"{path / FEATURES}: not a readable .npy array, truncated or not an npy file "
                        f"({' '.join(str(err).split())}); {rewrite_hint(path, record)}") from None
    try:
        ids = json.loads((path / IMAGE_IDS).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path / IMAGE_IDS}: not a readable list of image ids ({err}); "
                        f"{rewrite_hint(path, record)}") from None
    if not isinstance(ids, list):
        raise UserError(f"{path / IMAGE_IDS}: expected a JSON list of image ids, got {type(ids).__name__}; "
                        f"{rewrite_hint(path, record)}")
    if len(ids) != features.shape[0]:
        raise UserError(f"{path}: {IMAGE_IDS} lists {len(ids)} images but {FEATURES} has {features.shape[0]} rows")
    dim = record.get("dim")  # a features file of another cache of these images: other views or width
    if features.ndim != 3 or features.shape[1] != spec.views + 1 or isinstance(dim, int) and dim != features.shape[2]:
        raise UserError(f"{path / FEATURES}: shape {tuple(features.shape)}, but {SPEC} records {spec.views} views + "
                        f"the whole image of {dim} dims: a features file of another cache; {rewrite_hint(path, record)}")
    built_from = record.get("split")
    built_from = built_from if isinstance(built_from, str) else ""
    return FeatureCache(path, features, {str(i): r for r, i in enumerate(ids)}, spec, built_from)
