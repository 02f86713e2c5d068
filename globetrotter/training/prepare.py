"""Make sure a run has its data and tokenizer: generate the synthetic world, train the BPE."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from data_prep.shards import MANIFEST, read_manifest
from data_prep.synth.config import SynthConfig

from ..config import IMPORTED_BACKBONE, TrainConfig
from ..errors import UserError
from ..tokenizer import default_file_name, other_split_warning, train_tokenizer_on_split
from .tokenizer_file import check_tokenizer, check_tokenizer_split, tokenizer_path
from .train_set import (check_neighbour_languages, check_one_language_split, check_text_languages, check_val_languages,
                        train_captions, train_languages)

if TYPE_CHECKING:
    import torch


def check_eval_splits(cfg: TrainConfig) -> None:
    """One-line errors, before anything is built, when validation (``val.every``) has no ``data.val_split`` to read,
    or ``val.test_groups`` asks for test figures (at validations, or an adaptation's report) and ``data.test_split``
    holds no split: they would fail at the first validation, or be left out in silence. Their manifests are read (a
    more-captions link whose original split was rewritten since is refused here)."""
    root = Path(cfg.data.root)
    if cfg.val.every > 0 and not (root / cfg.data.val_split / MANIFEST).is_file():
        raise UserError(f"data.val_split={cfg.data.val_split!r}: {root / cfg.data.val_split} has no {MANIFEST} "
                        f"(validation reads it every val.every steps); name a converted split, or set val.every=0")
    test = root / cfg.data.test_split if cfg.data.test_split else None
    if cfg.scores_test and test is not None and not (test / MANIFEST).is_file():
        raise UserError(f"val.test_groups={cfg.val.test_groups}: data.test_split={cfg.data.test_split!r} has no "
                        f"{MANIFEST} at {test}; name a converted split, or set val.test_groups=0")
    for split in (root / cfg.data.val_split if cfg.val.every > 0 else None, test if cfg.scores_test else None):
        if split is not None:
            read_manifest(split)  # e.g. a more-captions link whose original split was rewritten since


# the keys the data completes (with_matched_image_share, with_text_languages, with_imported_dim): a config as given
# may differ there from the completed one a checkpoint saved
COMPLETED_KEYS = ("data.train_image_share", "model.languages", "model.image_backbone_args")


def with_matched_image_share(cfg: TrainConfig, log: Callable[[str], None] = print) -> TrainConfig:
    """``cfg`` with ``data.train_image_share`` worked out from ``data.match_images_of`` (unchanged without it): the
    share of the train split's images (:func:`~..data.subset.matching_share`) that keeps exactly as many as that
    split shows per language, on average over :func:`train_languages`. One-line errors when that split lacks one of
    those languages, or when a ``data.train_image_share`` below 1 is set and differs (a resumed run's saved config
    holds the one found here)."""
    from data_prep.shards import read_captions
    from data_prep.split_rule import images_by_language

    from ..data.subset import matching_share

    if cfg.data.match_images_of is None:
        return cfg
    root = Path(cfg.data.root)
    other = root / cfg.data.match_images_of
    if not (other / MANIFEST).is_file():
        raise UserError(f"data.match_images_of={cfg.data.match_images_of}: {other} is not a converted split (no {MANIFEST})")
    langs = train_languages(cfg)
    per_language = images_by_language(read_captions(other))
    missing = [lang for lang in langs if lang not in per_language]
    if missing:
        raise UserError(f"data.match_images_of={cfg.data.match_images_of}: {other} has no image in "
                        f"{','.join(missing)} (its languages: {','.join(sorted(per_language))})")
    count = round(sum(len(per_language[lang]) for lang in langs) / len(langs))
    whole = replace(cfg, data=replace(cfg.data, train_image_share=1.0))
    languages_of: dict[str, set] = {}
    for m in train_captions(whole):
        languages_of.setdefault(str(m["image_id"]), set()).add(m["lang"])
    images = set(languages_of)
    # count images in each of the L languages: count x L (image, language) slots, whatever the split's layout
    share = matching_share({i: len(v) for i, v in languages_of.items()}, count * len(langs))
    given = cfg.data.train_image_share
    if given < 1 and abs(given - share) > 1e-12:
        raise UserError(f"data.train_image_share={given} and data.match_images_of={cfg.data.match_images_of} "
                        f"(which gives {share:.6f}): set one of them")
    log(f"data.match_images_of={cfg.data.match_images_of}: {min(count, len(images))} of the {len(images)} images of "
        f"{root / cfg.data.train_split} per language, as {other} has ({','.join(langs)}; "
        f"data.train_image_share={share:.6f})")
    return replace(cfg, data=replace(cfg.data, train_image_share=share))


# SynthConfig fields that change how a world is generated, never what it holds (worlds are byte-identical whatever
# the number of worker processes and the scenes per task)
WORLD_NEUTRAL_KEYS = ("workers", "chunk_size")


def check_world(synth: SynthConfig, world_yaml: Path) -> None:
    """One-line error when ``data.synth`` asks for another world than the one ``world_yaml`` (the config a generation
    of ``data.root`` saved) describes: the run would train on that one and its config.yaml record this one. The keys
    of :data:`WORLD_NEUTRAL_KEYS` are not compared."""
    from data_prep.config_io import load_config, to_dict

    wanted, found = to_dict(synth), to_dict(load_config(SynthConfig, world_yaml))
    differ = [key for key in wanted if key not in WORLD_NEUTRAL_KEYS and wanted[key] != found.get(key)]
    if differ:
        said = ", ".join(f"data.synth.{key}={wanted[key]!r} but {found.get(key)!r} there" for key in differ)
        raise UserError(f"data.root={world_yaml.parent}: holds a synthetic world made with another config ({said}; "
                        f"see {world_yaml}); name another data.root to generate this one, or drop data.synth "
                        f"(data.synth=null) to train on the world there")


def ensure_data(cfg: TrainConfig, log: Callable[[str], None] = print, device: str | torch.device = "cpu") -> None:
    """Generate the synthetic world into ``data.root`` when it is absent and ``data.synth`` is set;
    train the tokenizer when its file is absent; build the image-feature
    cache (its backbone on ``device``, the training's) when ``data.features`` asks for one that is absent (refuse a
    mismatched one). Main process only.

    The tokenizer is trained on ``data.tokenizer_split`` (a one-language split), not on the training split, so the
    twins of a comparison (full, text-only, supervised on a parallel split) share one BPE that saw no parallel text;
    a run without parallel text refuses a training split that breaks the one-language rule."""
    if not cfg.data.root.strip():  # here, not in the config's checks: a saved run loads for use without its data
        raise UserError("data.root is empty: name the dataset folder (its train/, val/ and test/ splits)")
    from data_prep.synth.world import SOURCE as SYNTHETIC, STAGING, WORLD_CONFIG

    root = Path(cfg.data.root)
    train_dir = root / cfg.data.train_split
    if tokenizer_path(cfg).is_dir():  # found before a tokenizer is trained for it
        folder = tokenizer_path(cfg)
        raise UserError(f"{folder}: a folder where the tokenizer file should be (data.tokenizer); give a file's path, "
                        f"e.g. {folder / default_file_name(cfg.data.tokenizer_normalization)}")
    if not (train_dir / MANIFEST).is_file():
        if (root / MANIFEST).is_file():  # a split given as the dataset: never a synthetic world generated into it
            raise UserError(f"data.root={root} is a split folder (it holds {MANIFEST}); give the dataset folder that "
                            f"holds {cfg.data.train_split}/, e.g. data.root={root.parent}")
        splits = sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file()) if root.is_dir() else []
        if splits:  # a dataset folder: the split name is wrong (no world is generated among splits)
            raise UserError(f"data.train_split={cfg.data.train_split!r}: {train_dir} has no {MANIFEST} (splits there: "
                            f"{', '.join(splits)})")
        if cfg.data.synth is None:
            raise UserError(f"data.root: {train_dir} has no {MANIFEST} (convert a dataset first, or set data.synth to generate the synthetic world)")
        held = sorted(p.name for p in root.iterdir() if p.name != STAGING)[:3] if root.is_dir() else []
        if held:  # never among other files (data.root=. once generated a world into the working folder)
            raise UserError(f"data.root={root}: no {cfg.data.train_split}/{MANIFEST} there, and the folder holds other "
                            f"files ({', '.join(held)}...): the synthetic world (data.synth) is generated into an absent "
                            f"or empty folder; name one, or the dataset folder (an interrupted generation: delete the folder)")
        from data_prep.synth import generate

        log(f"generating the synthetic world into {root} ...")
        generate(cfg.data.synth, root, flag="data.root")
    manifest = read_manifest(train_dir)
    if manifest.get("source") == SYNTHETIC and not (root / WORLD_CONFIG).is_file():  # a world's last file
        raise UserError(f"data.root={root}: {train_dir} is a synthetic world's split, but {root / WORLD_CONFIG}, which "
                        f"generation writes last, is missing: an interrupted generation; delete {root} (or regenerate "
                        f"it: globetrotter-data synth --out {root})")
    if cfg.data.synth is not None and (root / WORLD_CONFIG).is_file():
        check_world(cfg.data.synth, root / WORLD_CONFIG)
    if cfg.loss.uses_images and not cfg.data.features:
        from ..data.feature_cache_build import require_pictures

        require_pictures(train_dir, manifest, "training without data.features")
    train_languages(cfg)  # a code the split lacks: the one-line error, before anything is built
    check_neighbour_languages(cfg)
    check_text_languages(cfg)  # so is a Sigurdsson model.languages that is not the training languages
    if cfg.data.train_image_share < 1 and not train_captions(cfg):  # else an endless stream would wait for a caption
        raise UserError(f"data.train_image_share={cfg.data.train_image_share}: keeps no image of {train_dir}")
    check_one_language_split(cfg)
    check_eval_splits(cfg)
    check_val_languages(cfg)
    check_tokenizer_split(cfg)
    path = tokenizer_path(cfg)
    if not path.is_file():
        norm, split = cfg.data.tokenizer_normalization, root / cfg.data.tokenizer_split
        doubt = other_split_warning(split, read_manifest(split))  # e.g. an adapt split: held-out languages
        if doubt:
            log(f"warning: data.tokenizer_split={cfg.data.tokenizer_split!r}: {doubt}")
        log(f"training the shared BPE tokenizer (vocab {cfg.data.vocab_size}, normalization {norm}) on {split} ...")
        train_tokenizer_on_split(split, path, cfg.data.vocab_size, normalization=norm)
    check_tokenizer(cfg, path, log)
    if cfg.data.features and cfg.loss.uses_images:
        from ..data.feature_cache_build import ensure_feature_cache

        ensure_feature_cache(cfg, cfg.data.train_split, log, device=device)


def with_text_languages(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``model.languages`` filled with the training languages (:func:`train_languages`, sorted) when a
    per-language text encoder (``model.text_encoder=sigurdsson``) leaves it empty; a given list is checked
    (:func:`check_text_languages`). The transformer's config is returned unchanged."""
    if cfg.model.text_encoder != "sigurdsson":
        return cfg
    check_text_languages(cfg)
    if not cfg.model.languages:
        return replace(cfg, model=replace(cfg.model, languages=train_languages(cfg)))
    return cfg


def with_imported_dim(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``model.image_backbone_args.num_features`` set to the width of the imported embeddings in
    ``data.features`` (``model.image_backbone: imported``; the base config's other timm arguments are dropped), so
    the saved config rebuilds the model without the cache; a config that gives another width is a one-line error
    naming both. Other configs are returned unchanged."""
    m = cfg.model
    if m.image_backbone != IMPORTED_BACKBONE or not cfg.loss.uses_images:
        return cfg
    from ..data.feature_cache import cache_dir_for, load_feature_cache

    path = cache_dir_for(cfg, cfg.data.train_split)
    if path is None:  # as TrainConfig.validate says it (a config built in Python may not have been validated)
        raise UserError("model.image_backbone=imported reads imported embeddings: set data.features (auto or the "
                        "folder globetrotter-data features import wrote)")
    dim = int(load_feature_cache(path).features.shape[-1])
    given = m.image_backbone_args.get("num_features")
    if given is not None and given != dim:
        raise UserError(f"model.image_backbone_args.num_features={given}, but the imported embeddings in {path} have "
                        f"{dim} dims; drop the key (training sets it from the cache) or point data.features elsewhere")
    # the width only: a base config's timm arguments (e.g. a narrow ResNet's channels) mean nothing here
    return replace(cfg, model=replace(m, image_backbone_args={"num_features": dim}))
