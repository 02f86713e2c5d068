"""``zeroshot train``: train the text->image adapter on one language's captions of a split (XTD10 3.1-3.2)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from globetrotter.argtypes import positive_int
from globetrotter.config_io import load_config
from globetrotter.errors import UserError

from ..config import ZeroShotConfig
from ..data import image_extractor, languages_the_encoder_lacks, load_split_features
from ..train import (CONFIG, META, WEIGHTS, save_adapter, text_encoder_weights, train_on_split, train_rows,
                     validation_recall)
from .common import add_command, check_no_shared_images, check_out_dir, make_out_dir, provenance


def run(args: argparse.Namespace) -> int:
    """Run ``train`` with the parsed options: train the adapter and save it into ``--out``; exit code 0."""
    from globetrotter.evaluation.records import dataset_info  # what a record names of a split

    config = load_config(ZeroShotConfig, args.config, args.overrides)
    check_out_dir(args.out)  # created only once training is done: a refused run leaves no folder
    held = [name for name in (WEIGHTS, CONFIG, META) if (Path(args.out) / name).exists()]
    if held and not args.overwrite:  # checked before training: the adapter there was replaced in silence
        raise UserError(f"{args.out}: already holds an adapter ({held[0]}); pass --overwrite to replace it")
    if args.val_k is not None and not args.val:  # it was ignored in silence: no epoch is chosen without --val
        raise UserError(f"--val-k {args.val_k} sets the K of the validation Recall@K; give --val SPLIT, or drop it")
    args.val_k = 10 if args.val_k is None else args.val_k
    if args.val and Path(args.val).resolve() == Path(args.train).resolve():  # the epoch would be chosen on train data
        raise UserError(f"--val {args.val}: is the --train split; give a split of other images, or drop --val")
    lacks = languages_the_encoder_lacks(config.text_encoder, config.train_langs)
    if lacks:  # as retrieval, tag and tag-eval say it
        print(f"note: the text encoder {config.text_encoder!r} was not trained on {', '.join(lacks)}")
    weights = text_encoder_weights(config.text_encoder)  # what the features are embedded with; checked at each load
    progress = not args.no_progress
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                progress=progress, online=args.online)
    validate = val = None
    loaded: dict = {}  # the text encoder, loaded once for the val and the train split
    if args.val:  # read first: a val split too small to choose an epoch is refused before the train split's features
        val = load_split_features(args.val, config.text_encoder, extractor, config.train_langs, args.cache_dir, progress,
                                  every_image=True, online=args.online, loaded=loaded)
        validate = validation_recall(val, config.train_langs, args.val_k, config.metric, where=f"--val {args.val}",
                                     remedy=f"use a val split of more than {args.val_k} images, lower --val-k, "
                                            "or drop --val")
    train = load_split_features(args.train, config.text_encoder, extractor, config.train_langs, args.cache_dir, progress,
                                config.max_captions_per_image, online=args.online, loaded=loaded)
    rows = train_rows(train, config.train_langs, args.train)
    if val is not None:
        (vt, vi), (tt, ti) = ((s.text_features.shape[1], s.image_features.shape[1]) for s in (val, train))
        if (vt, vi) != (tt, ti):
            raise UserError(f"--val {args.val}: {vt}-d text and {vi}-d image features, but the train split's are "
                            f"{tt}-d and {ti}-d (stored features of another encoder?)")
        check_no_shared_images(f"--val {args.val}", val.image_keys, train.image_keys,
                               f"--train {args.train} images the adapter trains on",
                               "give a split of other images, or drop --val")  # as tag-eval refuses --vocab-from
    adapter, trained = train_on_split(train, rows, config, validate, device=args.device, progress=progress)
    meta = {"train": dataset_info(args.train), "val": dataset_info(args.val) if args.val else None,
            "val_k": args.val_k if args.val else None, "text_encoder_weights": weights, **trained,
            **provenance(args)}
    save_adapter(adapter, config, make_out_dir(args.out), **meta)
    history = meta["history"]
    blocks = len(config.adapter.dropout)  # one block per rate: adapter.dropout=[0.1] is a 1-block adapter
    print(f"trained {config.loss.name} adapter ({config.adapter.form}, {blocks} block{'s' * (blocks != 1)}) on "
          f"{meta['n_captions']} {'/'.join(config.train_langs)} captions of {meta['n_images']} images in "
          f"{history['train_s']:.0f} s ({history['samples_per_s']:.0f} samples/s); "
          f"best epoch {history['best_epoch']}/{config.optim.epochs}; saved to {args.out}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    """Add the ``train`` sub-command (``parent``: the common options)."""
    p = add_command(sub, parent, "train", "train the text->image adapter (XTD10 3.1-3.2)",
                    "Train the adapter on the train_langs captions of a split (English by default), with M3L (eq. 1) "
                    "or PATR (eq. 2) and in-batch hard negatives. Frozen features are cached.",
                    "--train outputs/flickr8k-en/train --val outputs/flickr8k-en/val --out runs/m3l "
                    "--config configs/zeroshot/m3l.yaml")
    p.add_argument("--train", required=True, metavar="SPLIT", help="train split folder (manifest.json + shards)")
    p.add_argument("--val", metavar="SPLIT", help="optional val split: keep the epoch with the best train-language "
                   "text->image Recall@K on it (first caption per image)")
    p.add_argument("--val-k", type=positive_int, default=None, metavar="K",
                   help="K of the validation Recall@K, with --val (default 10)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="checkpoint folder: adapter.safetensors, config.yaml, meta.json")
    p.add_argument("--overwrite", action="store_true", help="replace the adapter already in --out")
    p.add_argument("--config", metavar="YAML",
                   help="config file (ZeroShotConfig) (default: none, this project's system; "
                        "configs/zeroshot/xtd10.yaml is the XTD10 paper's PATR system as the paper describes it, "
                        "configs/zeroshot/m3l.yaml the paper's M3L loss as this project trains it, "
                        "configs/zeroshot/recipe.yaml the reference recipe the system is compared with; "
                        "docs/zeroshot.md)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, e.g. loss.name=patr loss.margin=null optim.epochs=10 train_langs=[en]; "
                        "adapter.dropout is one rate per block, so its length sets the number of blocks")
    p.set_defaults(func=run)
