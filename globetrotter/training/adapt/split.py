"""The adaptation split: where the new language's captions and images are, what they hold, and where its images'
features come from.

``adapt.split`` is a split under the run's ``data.root`` (``adapt``, ``train``) or the path of any split folder,
absolute or relative to the working directory: a folder of new images that ``globetrotter-data folder ... --all-to
train --out DIR`` wrote (``DIR/train``). A relative value is looked for under ``data.root`` first.

With a feature cache (``data.features``, a frozen backbone) the new images' features (the whole image only: row 0
of a cache) are read from

* the run's own cache when the split is the run's train split, or when ``data.features`` names a cache built from
  the split's very images (its manifest checksum, or that of the split a more-captions copy took its images from,
  is the one the cache recorded: the train split's copies, a parallel twin's) and holding every image of it; never
  by image ids alone, which another folder of photos may reuse;
* else ``<split>/features``: built on the first adaptation when absent, with the run's backbone, weights and image
  size and no augmented views (only the whole image is read, so a new folder costs one pass of the backbone per
  image), and refused when it was built with another backbone, weights or image size (its views and augmentations do
  not matter). The run's own caches are read, never built or rewritten, for the old languages' bank. With imported
  embeddings (``model.image_backbone: imported``) there is no backbone to build it: it must hold embeddings of the
  run's name (``globetrotter-data features import``), whatever their source file.
"""
from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from data_prep.shards import MANIFEST, read_captions, read_manifest

from ...config import IMPORTED_BACKBONE, TrainConfig
from ...data.feature_cache import (
    ROW0_FIELDS, SPEC, CacheSpec, FeatureCache, built_from_split, load_feature_cache, spec_from_config,
)
from ...data.feature_cache_build import build_feature_cache, ensure_feature_cache, require_pictures
from ...errors import UserError

FEATURES = "features"


def split_dir(cfg: TrainConfig) -> Path:
    """The folder of ``adapt.split``: ``<data.root>/<adapt.split>`` when that is a split folder, else ``adapt.split``
    itself (absolute, or relative to the working directory); a one-line error naming both when neither is."""
    value = cfg.adapt.split
    under_root = Path(cfg.data.root) / value
    if (under_root / MANIFEST).is_file():
        return under_root
    path = Path(value).expanduser()
    if (path / MANIFEST).is_file():
        return path
    where = str(under_root) if path.is_absolute() else f"{under_root} or {path.resolve()}"
    raise UserError(f"adapt.split={value}: no split folder ({MANIFEST} and shards) at {where}: name a split under "
                    f"data.root, or the path of one (e.g. DIR/train written by globetrotter-data folder ... --all-to "
                    f"train --out DIR; the synthetic world writes 'adapt' with --held-out)")


def resolved(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``adapt.split`` as an absolute path when it is not a split under ``data.root`` (a folder given
    relative to the working directory stays the same folder in the saved config)."""
    folder = split_dir(cfg)
    for role, held_out in (("test", cfg.data.test_split), ("val", cfg.data.val_split)):
        if held_out is not None and _same(folder, Path(cfg.data.root) / held_out):  # test_split null: no test split
            raise UserError(f"adapt.split={cfg.adapt.split}: {folder} is the run's {role} split; adaptation never "
                            f"trains on the split it is measured or chosen on (give the new language's train captions)")
    if (Path(cfg.data.root) / cfg.adapt.split).resolve() == folder.resolve():
        return cfg
    return replace(cfg, adapt=replace(cfg.adapt, split=str(folder.resolve())))


def manifest_language_counts(folder: Path) -> dict[str, int]:
    """Captions per language, as the manifest of the split ``folder`` counts them."""
    return {code: int(n) for code, n in read_manifest(folder).get("languages", {}).items()}


def new_language(cfg: TrainConfig) -> str:
    """``adapt.language``, which every adaptation's config has (:meth:`~globetrotter.config.AdaptConfig.validate`);
    the same one-line error for a config built without it."""
    if not cfg.adapt.language:
        raise UserError("adapt.from needs adapt.language (the new language's code)")
    return cfg.adapt.language


def check_new_language(cfg: TrainConfig, old_languages: list[str]) -> None:
    """A one-line error when ``adapt.language`` is one the run was trained on (naming the adaptation folder and its
    captions in that language, when the folder is there)."""
    a = cfg.adapt
    if a.language not in old_languages:
        return
    try:
        folder = split_dir(cfg)
        held = f"; {folder} has {manifest_language_counts(folder).get(a.language, 0)} {a.language} caption(s)"
    except UserError:
        held = ""
    raise UserError(f"adapt.language={a.language}: {a.from_run} was trained on {a.language} already (its training "
                    f"languages: {','.join(old_languages)}{held}); adapt it to a language it has not seen, or train a "
                    f"run without it (data.train_languages)")


def check_languages(cfg: TrainConfig, old_languages: list[str]) -> int:
    """The number of ``adapt.language`` captions in the adaptation split; one-line errors naming the folder, the
    language and the counts when the language is one the run was trained on, or the split holds none of it."""
    check_new_language(cfg, old_languages)
    a, folder = cfg.adapt, split_dir(cfg)
    languages = manifest_language_counts(folder)
    count = languages.get(new_language(cfg), 0)
    if not count:
        counts = ", ".join(f"{code} {n}" for code, n in sorted(languages.items()))
        known = [code for code in sorted(languages) if code in old_languages]
        note = f"; {a.from_run} was trained on {','.join(known)} already" if known else ""
        new = [code for code in sorted(languages) if code not in old_languages]
        other = (f"or set adapt.language to the folder's new language ({', '.join(new)})" if new else
                 "(the folder holds no language the run does not know)")
        raise UserError(f"adapt.language={a.language}: {folder} (adapt.split) has no caption in it: 0 of its "
                        f"{sum(languages.values())} captions (by language: {counts or 'none'}{note}); caption its "
                        f"images in {a.language}{', ' if new else ' '}{other}")
    return count


def new_captions(cfg: TrainConfig) -> list[dict]:
    """The adaptation split's captions in ``adapt.language`` (metadata, in shard order)."""
    return [m for m in read_captions(split_dir(cfg)) if m["lang"] == cfg.adapt.language]


def whole_image_spec(cfg: TrainConfig) -> CacheSpec:
    """The cache the adaptation builds for new images: the run's backbone, weights and image size, the whole image
    only (no augmented views)."""
    return replace(spec_from_config(cfg), views=0)


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _cached_new_split(cfg: TrainConfig, folder: Path) -> bool:
    """Whether ``folder``'s image features come from a cache other than the train split's (ensured by the trainer)."""
    return (bool(cfg.data.features) and cfg.loss.uses_images
            and not _same(folder, Path(cfg.data.root) / cfg.data.train_split))


def _reads_own_cache(cfg: TrainConfig, folder: Path) -> bool:
    """Whether the adaptation reads ``<folder>/features`` (not a cache of the run's)."""
    return _cached_new_split(cfg, folder) and _run_cache(cfg, folder) is None


def _run_cache(cfg: TrainConfig, folder: Path, image_ids: list[str] | None = None) -> FeatureCache | None:
    """The run's own cache when it serves ``folder`` (the train split; a named cache holding every image of
    ``image_ids``, default: those of the new language's captions)."""
    if _same(folder, Path(cfg.data.root) / cfg.data.train_split):
        return ensure_feature_cache(cfg, cfg.data.train_split)  # the run's: ensure_data has it, never rebuilt here
    if not cfg.data.features or cfg.data.features == "auto":  # no cache named: none of the run's serves the folder
        return None
    named = Path(cfg.data.features)
    if _same(named, folder / FEATURES) or not built_from_split(named, folder):
        return None  # the folder's own cache (whole images of the run's backbone), or other photos than the cache's
    cache = load_feature_cache(named, spec_from_config(cfg), folder)
    if image_ids is None:
        image_ids = _image_ids(cfg)
    return cache if all(i in cache.row_of for i in image_ids) else None


def _check_own_cache(cfg: TrainConfig, path: Path, folder: Path) -> FeatureCache:
    """``<split>/features``, refused when built with another backbone, weights or image size than the run's."""
    cache = load_feature_cache(path, None, folder)  # refuses a cache of a split rewritten since
    mine, run = asdict(cache.spec), asdict(whole_image_spec(cfg))
    fields = ROW0_FIELDS[:2] if run["backbone"] == IMPORTED_BACKBONE else ROW0_FIELDS  # imported: by name
    diffs = [f"{k}={mine[k]!r} vs the run's {run[k]!r}" for k in fields if mine[k] != run[k]]
    if diffs:
        raise UserError(f"{path}: feature cache of adapt.split was built with another backbone setting than "
                        f"{cfg.adapt.from_run}'s ({'; '.join(diffs)}); delete it (the adaptation builds the new "
                        f"images' features with the run's backbone) or point adapt.split at another folder")
    return cache


def check_features(cfg: TrainConfig) -> None:
    """Refuse, before anything is written, a ``<split>/features`` cache the adaptation would read but was built with
    another backbone, weights or image size (without a feature cache, or with one that serves the split: nothing),
    and, without ``data.features``, a split of precomputed image features (``npy``): the backbone reads pictures."""
    folder = split_dir(cfg)
    if cfg.loss.uses_images and not cfg.data.features:
        require_pictures(folder, read_manifest(folder), "an adaptation without data.features")
    path = folder / FEATURES
    if (path / SPEC).is_file() and _reads_own_cache(cfg, folder):
        _check_own_cache(cfg, path, folder)


def _image_ids(cfg: TrainConfig) -> list[str]:
    return list(dict.fromkeys(str(m["image_id"]) for m in new_captions(cfg)))


def ensure_features(cfg: TrainConfig, log: Callable[[str], None] = print) -> None:
    """Build ``<split>/features`` (the whole images through the run's backbone) when the adaptation reads it and it
    is absent. Main process only, before the others read it (:func:`features`)."""
    folder = split_dir(cfg)
    path = folder / FEATURES
    if not _reads_own_cache(cfg, folder):
        if _cached_new_split(cfg, folder):
            log(f"adapt: {folder}'s image features are read from {cfg.data.features} (built from the same photos)")
        return
    if (path / SPEC).is_file():
        log(f"adapt: {folder}'s image features are read from {path}")
        return
    spec = whole_image_spec(cfg)
    if spec.backbone == IMPORTED_BACKBONE:
        raise UserError(f"{path}: no image features for adapt.split, and model.image_backbone=imported has no network to "
                        f"compute them; import them first: globetrotter-data features import {folder} --embeddings FILE "
                        f"--name {spec.weights}")
    from ...models.image import create_image_backbone

    log(f"adapt: caching the whole-image features of {folder}'s images in {path} ({spec.backbone}, the run's "
        f"backbone; no augmented views) ...")
    backbone = create_image_backbone(cfg.model.image_backbone, cfg.model.image_pretrained,
                                     **cfg.model.image_backbone_args)
    record = build_feature_cache(folder, spec, path, backbone, workers=cfg.data.workers, label="adapt.split")
    log(f"adapt: {record['images']} images in {record['build_seconds']:.0f} s ({record['images_per_s']:.1f} images/s)")


def features(cfg: TrainConfig, folder: Path, image_ids: list[str]) -> FeatureCache:
    """The cache holding the whole-image features of ``image_ids`` of ``folder`` (see the module docstring)."""
    cache = _run_cache(cfg, folder, image_ids)
    if cache is not None:
        return cache
    path = folder / FEATURES
    if not (path / SPEC).is_file():
        raise UserError(f"{path}: no feature cache for adapt.split (the main process builds it first)")
    return _check_own_cache(cfg, path, folder)
