"""Make sure a run has its data and tokenizer: generate the synthetic world, train the BPE."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from data_prep.shards import MANIFEST, read_manifest

from ..config import TrainConfig
from ..errors import UserError
from ..tokenizer import default_file_name, load_tokenizer, normalization_of, save_tokenizer, train_tokenizer


def tokenizer_path(cfg: TrainConfig) -> Path:
    """``data.tokenizer``, or ``<root>/tokenizer.json`` (``tokenizer-uncased.json`` for ``data.tokenizer_normalization:
    uncased``, so that twins of both settings can share one data root)."""
    if cfg.data.tokenizer:
        return Path(cfg.data.tokenizer)
    return Path(cfg.data.root) / default_file_name(cfg.data.tokenizer_normalization)


def check_tokenizer(cfg: TrainConfig, path: Path) -> None:
    """One-line error when the tokenizer file at ``path`` was made with another normalisation than
    ``data.tokenizer_normalization`` asks for (never a silent reuse)."""
    found = normalization_of(load_tokenizer(path))
    if found != cfg.data.tokenizer_normalization:
        raise UserError(f"{path}: tokenizer made with normalization {found}, but data.tokenizer_normalization is "
                        f"{cfg.data.tokenizer_normalization}; point data.tokenizer elsewhere or delete the file to "
                        f"train a new one")


def train_languages(cfg: TrainConfig) -> list[str]:
    """The languages training reads: ``data.train_languages``, checked against the train split's manifest
    (a code the split lacks is a one-line error naming the split's languages), or all of the split's (sorted)."""
    train_dir = Path(cfg.data.root) / cfg.data.train_split
    found = sorted(read_manifest(train_dir).get("languages", {}))
    wanted = cfg.data.train_languages
    if wanted is None:
        return found
    missing = [code for code in wanted if code not in found]
    if missing:
        raise UserError(f"data.train_languages: {','.join(missing)} not in {train_dir} (its languages: {','.join(found)})")
    return sorted(wanted)


def train_captions(cfg: TrainConfig) -> list[dict]:
    """The train split's captions' metadata that training reads: those of :func:`train_languages` whose image is
    in ``data.train_image_share`` only."""
    from data_prep.shards import read_captions

    from ..data.subset import keeps_caption

    metas = read_captions(Path(cfg.data.root) / cfg.data.train_split)
    if cfg.data.train_languages is None and cfg.data.train_image_share >= 1:
        return metas
    keep = set(train_languages(cfg)) if cfg.data.train_languages is not None else None
    return [m for m in metas if keeps_caption(m, keep, cfg.data.train_image_share)]


def ensure_data(cfg: TrainConfig, log=print) -> None:
    """Generate the synthetic world into ``data.root`` when it is absent and ``data.synth`` is set;
    train the tokenizer on the train split when ``tokenizer.json`` is absent; build the image-feature
    cache when ``data.features`` asks for one that is absent (refuse a mismatched one). Main process only."""
    root = Path(cfg.data.root)
    train_dir = root / cfg.data.train_split
    if not (train_dir / MANIFEST).is_file():
        if cfg.data.synth is None:
            raise UserError(f"data.root: {train_dir} has no {MANIFEST} (convert a dataset first, or set data.synth to generate the synthetic world)")
        from data_prep.synth import generate

        log(f"generating the synthetic world into {root} ...")
        generate(cfg.data.synth, root)
    read_manifest(train_dir)
    train_languages(cfg)  # a code the split lacks: the one-line error, before anything is built
    if cfg.data.train_image_share < 1 and not train_captions(cfg):  # else an endless stream would wait for a caption
        raise UserError(f"data.train_image_share={cfg.data.train_image_share}: keeps no image of {train_dir}")
    path = tokenizer_path(cfg)
    if not path.is_file():
        from data_prep.shards import read_captions

        norm = cfg.data.tokenizer_normalization
        log(f"training the shared BPE tokenizer (vocab {cfg.data.vocab_size}, normalization {norm}) on {train_dir} ...")
        captions = [m["caption"] for m in read_captions(train_dir)]
        save_tokenizer(train_tokenizer(captions, cfg.data.vocab_size, normalization=norm), path)
    check_tokenizer(cfg, path)
    if cfg.data.features and cfg.loss.uses_images:
        from ..data.feature_cache import ensure_feature_cache

        ensure_feature_cache(cfg, cfg.data.train_split, log)


def with_text_languages(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``model.languages`` filled from the train split's manifest (sorted) when a
    per-language text encoder (``model.text_encoder=sigurdsson``) leaves it empty; a given list
    must cover every training language. The transformer's config is returned unchanged."""
    if cfg.model.text_encoder != "sigurdsson":
        return cfg
    train_dir = Path(cfg.data.root) / cfg.data.train_split
    found = train_languages(cfg)
    if not cfg.model.languages:
        return replace(cfg, model=replace(cfg.model, languages=found))
    missing = sorted(set(found) - set(cfg.model.languages))
    if missing:
        raise UserError(f"model.languages {cfg.model.languages} lacks {missing}, which {train_dir} has "
                        f"(leave it empty to take the manifest's languages)")
    return cfg
