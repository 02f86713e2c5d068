"""What training reads of the train split: its languages (:func:`train_languages`) and captions
(:func:`train_captions`), and the one-line refusals, before anything is built, of languages that do not suit the run."""
from __future__ import annotations

from pathlib import Path

from data_prep.shards import read_manifest
from data_prep.split_rule import images_in_several_languages

from ..config import TrainConfig
from ..errors import UserError


def check_val_languages(cfg: TrainConfig) -> None:
    """A one-line error, before anything is built, when validation (``val.every``) of a per-language text encoder
    (``model.text_encoder=sigurdsson``: a word table per training language) would have fewer than two of
    ``data.val_split``'s languages to score: BackRetrieval needs two, and the others have no table (the first
    validation stopped the run, in its middle)."""
    if cfg.val.every <= 0 or cfg.model.text_encoder != "sigurdsson":
        return
    split = Path(cfg.data.root) / cfg.data.val_split
    present = sorted(read_manifest(split).get("languages", {}))
    trained = train_languages(cfg)
    if len([lang for lang in present if lang in trained]) < 2:
        raise UserError(f"val.every={cfg.val.every}: BackRetrieval on {split} ({','.join(present)}) needs two "
                        f"languages the model has a word table for, and the Sigurdsson baseline (model.text_encoder="
                        f"sigurdsson) trains one for {','.join(trained)} only; train on two of the val split's languages "
                        f"(data.train_languages), or set val.every=0")


def check_neighbour_languages(cfg: TrainConfig) -> None:
    """A one-line error, before a tokenizer or feature cache is built, when ``data.batching=neighbours`` would train
    on one language (:func:`train_languages`): it pairs each caption with one of a visual neighbour captioned in
    another language, and there is none (the refusal came after the feature cache, asking for a smaller
    ``data.neighbours_k``). Training on one language is otherwise legitimate (docs/training.md, ``data.train_languages``:
    the others can be evaluated or adapted to), and left alone."""
    languages = train_languages(cfg)
    if cfg.data.batching == "neighbours" and len(languages) < 2:
        where = ("data.train_languages" if cfg.data.train_languages is not None
                 else f"the only language of {Path(cfg.data.root) / cfg.data.train_split}")
        raise UserError(f"data.batching=neighbours pairs each caption with a visual neighbour's caption in another "
                        f"language, and the run trains on {','.join(languages)} only ({where}); train on two or more "
                        f"languages, or set data.batching=random")


def check_one_language_split(cfg: TrainConfig) -> None:
    """For a run without parallel text (``loss.alpha_source`` other than ``supervised``): a one-line error when the
    training captions show an image in more than one language (the train/val rule of docs/design.md section 3). A shard
    that does not read whole is left to the loader, which skips and counts its bad samples."""
    if cfg.loss.alpha_source == "supervised":
        return
    several = images_in_several_languages(train_captions(cfg, skip_unreadable=True))
    if several:
        first, langs = next(iter(several.items()))
        raise UserError(f"{Path(cfg.data.root) / cfg.data.train_split}: {len(several)} image(s) captioned in more "
                        f"than one language (e.g. {first!r}: {','.join(langs)}); a run without parallel text "
                        f"(loss.alpha_source={cfg.loss.alpha_source}) trains on a one-language split")


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


def train_captions(cfg: TrainConfig, skip_unreadable: bool = False) -> list[dict]:
    """The train split's captions' metadata that training reads: those of :func:`train_languages` whose image is
    in ``data.train_image_share`` only. ``skip_unreadable``: leave out the samples that do not read, as the loader
    does (a one-line error naming the shard otherwise)."""
    from data_prep.shards import iter_raw, read_captions

    from ..data.subset import keeps_caption

    split = Path(cfg.data.root) / cfg.data.train_split
    if not skip_unreadable:
        metas = read_captions(split)
    else:
        metas = [dict(meta, key=key) for key, _, _, meta in iter_raw(split, on_bad=lambda err: None)]
    if cfg.data.train_languages is None and cfg.data.train_image_share >= 1:
        return metas
    keep = set(train_languages(cfg)) if cfg.data.train_languages is not None else None
    return [m for m in metas if keeps_caption(m, keep, cfg.data.train_image_share)]


def check_text_languages(cfg: TrainConfig) -> None:
    """A one-line error when ``model.languages`` of a per-language text encoder (``model.text_encoder=sigurdsson``:
    one word table per language) is not the training languages (:func:`train_languages`): a training language it
    lacks has no table for its captions, and a language training never reads would get a table no caption trains
    (left at its random start, it would encode that language's captions with noise). Empty: the training
    languages are taken."""
    given = cfg.model.languages
    if cfg.model.text_encoder != "sigurdsson" or not given:
        return
    found = train_languages(cfg)
    missing, extra = [c for c in found if c not in given], [c for c in given if c not in found]
    if not missing and not extra:
        return
    where = ("data.train_languages" if cfg.data.train_languages is not None
             else f"the languages of {Path(cfg.data.root) / cfg.data.train_split}")
    wrong = "; ".join(part for part in (f"lacks {','.join(missing)}" if missing else "",
                                        f"names {','.join(extra)}, which training never reads" if extra else "") if part)
    raise UserError(f"model.languages=[{','.join(given)}] {wrong}: the Sigurdsson baseline (model.text_encoder="
                    f"sigurdsson) has one word table per training language, and the run trains on {','.join(found)} "
                    f"({where}); give those, or leave model.languages empty to take them")
