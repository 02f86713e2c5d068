"""``globetrotter-data features build|import|concat|finetune``: the image-feature cache of a split for frozen-backbone
training, built from pixels by a backbone (:mod:`.feature_cache_build`), imported from precomputed embeddings
(:mod:`.feature_import`), joined (:mod:`.feature_concat`), or built by a backbone fine-tuned to a trained run's reading of
the images' captions (round two, :mod:`globetrotter.training.backbone_finetune`)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from backretrieval.records import json_text
from data_prep.out_folder import lock_out_folder
from data_prep.shards import read_manifest

from ..argtypes import non_negative_int, positive_float, positive_int, torch_device
from ..config import IMPORTED_BACKBONE, load_train_config
from ..errors import UserError
from ..shell import program_command
from ..training.backbone_finetune import FinetuneSettings
from .feature_cache import SPEC, CacheSpec, built_from_split, load_feature_cache, spec_from_config
from .feature_cache_build import build_feature_cache
from .feature_cache_write import check_cache_folder, clear_stale_write


def _warn_random_weights(spec: CacheSpec, split: Path) -> None:
    """One warning line (stderr) when the cache's backbone has no weights: its features are a random network's."""
    if spec.weights == "random":
        print(f"warning: features build {split}: no weights given (--image-weights, or the config's "
              f"model.image_pretrained), so the features come from a randomly initialised {spec.backbone}; for "
              f"pretrained ones pass --image-weights package (ImageNet weights of efficientnet_lite0, _lite1 or "
              f"_lite2) or --image-weights FILE (see --help)", file=sys.stderr)


OUT_HELP = "cache folder (default: SPLIT/features, where data.features=auto looks)"


def _out(args: argparse.Namespace) -> Path:
    """The cache folder to write: ``--out``, else the split's ``features/`` (:data:`OUT_HELP`)."""
    return Path(args.out) if args.out else Path(args.split_dir) / "features"


def _wrote(args: argparse.Namespace, line: str, record: dict) -> int:
    """Say what was written (``line``), and with ``--json`` the cache's ``record``; the exit status, 0."""
    print(line)
    if args.json:
        print(json_text(record, indent=2))
    return 0


def _build(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)
    model = cfg.model
    if args.image_model or args.image_weights:
        other = bool(args.image_model) and args.image_model != model.image_backbone
        model = replace(model, image_backbone=args.image_model or model.image_backbone,
                        image_pretrained=args.image_weights or model.image_pretrained,
                        image_backbone_args={} if other else model.image_backbone_args)
    data = replace(cfg.data, image_size=cfg.data.image_size if args.image_size is None else args.image_size,
                   feature_views=cfg.data.feature_views if args.views is None else args.views)
    cfg = replace(cfg, model=model, data=data)
    if model.image_backbone == IMPORTED_BACKBONE:
        raise UserError("model.image_backbone=imported has no network to build features with; import the embeddings "
                        "with globetrotter-data features import SPLIT --embeddings FILE --name NAME")
    spec = spec_from_config(cfg)
    split = Path(args.split_dir)
    read_manifest(split)  # a folder that is no split: its one-line error before anything is loaded
    sized = args.image_size is not None or any(o.split("=", 1)[0] == "data.image_size" for o in args.overrides)
    if args.config is None and not sized:
        raise UserError(f"features build {split}: no --config and no --image-size; give the training config that "
                        f"will read the cache (--config), or the side of the views in pixels (--image-size, e.g. 224 "
                        f"for an ImageNet backbone): the built-in default is {cfg.data.image_size}")
    _warn_random_weights(spec, split)
    out = _out(args)
    check_cache_folder(out, "--out")  # a folder that is no cache is never replaced, --overwrite or not
    if (out / SPEC).is_file() and not args.overwrite:
        # refuses a cache built for other settings, or a rewritten split
        cache = load_feature_cache(out, spec, split, remedy="rebuild it with --overwrite, or build into another --out")
        if not built_from_split(out, split):  # another split's cache: it serves this one only if it holds its images
            from .feature_import import split_image_ids

            ids = split_image_ids(split)
            missing = [i for i in ids if i not in cache.row_of]
            if missing:
                built = json.loads((out / SPEC).read_text()).get("split") or "another split"
                raise UserError(f"{out}: {len(missing)} of the {len(ids)} image(s) of {split} are missing from this "
                                f"feature cache (first: {missing[0]!r}; it was built from {built}): give features "
                                f"build {split} an --out of its own, e.g. {split / 'features'}")
        with lock_out_folder(out, "--out"):  # a .tmp folder of a running write is not a leftover
            stale = clear_stale_write(out)
        if stale is not None:
            print(f"removed {stale}, left by an interrupted cache write")
        return _wrote(args, f"{out}: up to date ({len(cache.row_of)} images, {cache.views} views, "
                            f"{cache.features.shape[-1]} dims)", json.loads((out / SPEC).read_text()))
    from ..models.image import create_image_backbone
    from ..threads import configure_threads

    # the backbone gets the cores, its decoding workers being light (or the config's threads, or OMP_NUM_THREADS)
    configure_threads(0, requested=cfg.threads, log=print,
                      hint="set threads=N (override) or OMP_NUM_THREADS=N to choose")
    backbone = create_image_backbone(model.image_backbone, model.image_pretrained, **model.image_backbone_args)
    record = build_feature_cache(split, spec, out, backbone, batch_images=args.batch_images, workers=args.workers,
                                 device=args.device, progress=not args.no_progress)
    return _wrote(args, f"wrote {out}: {record['images']} images x {spec.views + 1} views x {record['dim']} dims in "
                        f"{record['build_seconds']:.0f} s ({record['images_per_s']:.1f} images/s)", record)


def train_hint(name: str, cache: Path) -> str:
    """The overrides ``features import`` and ``concat`` print for training on the embeddings named ``name`` in the
    cache folder ``cache``: ``train with`` and the overrides, each a shell word, that load on the default config
    (the imported branch reads cached rows, so the backbone is frozen; L_v needs views the rows lack)."""
    overrides = [f"model.image_backbone={IMPORTED_BACKBONE}", f"model.image_pretrained={name}",
                 "model.freeze_image_backbone=true", f"data.features={cache}", "loss.image=0"]
    return "train with " + " ".join(shlex.quote(o) for o in overrides)


def _import(args: argparse.Namespace) -> int:
    from .feature_import import import_embeddings

    split, out = Path(args.split_dir), _out(args)
    record = import_embeddings(split, args.embeddings, out, args.name, ids=args.ids, id_column=args.id_column,
                               embedding_column=args.embedding_column, force=args.overwrite, progress=not args.no_progress)
    return _wrote(args, f"wrote {out}: {record['images']} images x {record['dim']} dims of "
                        f"{record['imported']['rows']} rows ({record['imported']['format']}) in "
                        f"{record['import_seconds']:.1f} s; {train_hint(args.name, out)}", record)


def _concat(args: argparse.Namespace) -> int:
    from .feature_concat import concat_caches

    split, out = Path(args.split_dir), _out(args)
    record = concat_caches(split, args.cache, out, args.name, force=args.overwrite, progress=not args.no_progress,
                           centre_like=args.centre_like)
    return _wrote(args, f"wrote {out}: {record['images']} images x {record['dim']} dims, the concatenation of "
                        f"{len(args.cache)} caches; {train_hint(args.name, out)}", record)


def _finetune(args: argparse.Namespace) -> int:
    from ..threads import configure_threads
    from ..training.backbone_finetune import finetune_backbone

    settings = FinetuneSettings(epochs=args.epochs, lr=args.lr, seed=args.seed)
    configure_threads(0, log=print, hint="set OMP_NUM_THREADS=N to choose")
    two = finetune_backbone(args.split_dir, args.from_run, args.out, settings, workers=args.workers,
                            device=args.device, progress=not args.no_progress)
    overrides = [f"run_name={Path(args.from_run).resolve().name}-round-two",
                 f"model.image_pretrained={two.model.image_pretrained}", f"data.features={two.data.features}"]
    print(f"next round: {program_command('train')} --config {shlex.quote(str(Path(args.from_run) / 'config.yaml'))} "
          + " ".join(shlex.quote(o) for o in overrides))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``features`` sub-command and its actions ``build``, ``import``, ``concat`` and ``finetune``."""
    features = sub.add_parser(
        "features",
        help="the image-feature cache of a split: build it with a frozen backbone, import your own embeddings, "
        "join several, or fine-tune a run's backbone and cache its features",
        description="The image-feature cache of a split, read by training with model.freeze_image_backbone=true and "
        "data.features=auto|FOLDER instead of pixels: `build` runs a frozen timm backbone over the images; `import` "
        "writes precomputed embeddings (.npy with an id list, or parquet) in the same format; `concat` joins the "
        "caches of several encoders into one; `finetune` fine-tunes the backbone of a run trained on such a cache "
        "to the run's reading of each image's captions, and caches the fine-tuned backbone's features.",
    )
    actions = features.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    p = actions.add_parser(
        "build",
        help="cache a frozen backbone's features of a split (whole image + K augmented views)",
        description="Run a frozen timm backbone once over every image of a split at the config's image size and "
        "store its pooled features, float16 [images, K+1, dim]: the whole image (evaluation transform) then K "
        "SimCLR-augmented views with the config's augmentation settings, seeded per image. Training with "
        "model.freeze_image_backbone=true and data.features=auto|FOLDER then reads these rows instead of pixels. "
        "A cache records what it was built with (model.image_backbone_args included); training refuses one that does "
        "not match its config. --out must be a new or empty folder or a feature cache: any other folder is refused. "
        "Training builds a missing cache itself, on its own device; this command builds it ahead.",
    )
    p.add_argument("split_dir", help="split folder (with manifest.json)")
    p.add_argument("--config", help="training config whose backbone, weights, image size, views and augmentations to use")
    p.add_argument("--image-model", help="timm model name (default: the config's model.image_backbone)")
    p.add_argument("--image-weights", help="'package' (offline ImageNet weights of efficientnet_lite0, _lite1 or _lite2) "
                   "or a local weights file "
                   "(default: the config's model.image_pretrained)")
    p.add_argument("--views", type=non_negative_int, help="augmented views per image, K (default: the config's "
                   "data.feature_views); 0: the whole image only, for `features concat` or a screen of encoders")
    p.add_argument("--image-size", type=positive_int, help="side of the views in pixels (default: the config's "
                   "data.image_size; without --config, needed)")
    p.add_argument("--out", help=OUT_HELP)
    p.add_argument("--overwrite", action="store_true",
                   help="rebuild even if a cache is there (a folder that is no feature cache is never replaced)")
    p.add_argument("--batch-images", type=positive_int, default=16,
                   help="images per forward batch (each with K+1 views; default %(default)s)")
    p.add_argument("--workers", type=non_negative_int, default=1,
                   help="image decoding/augmentation processes; 0: none, the images are decoded and augmented in this "
                        "process (default %(default)s)")
    p.add_argument("--device", type=torch_device, default="cpu",
                   help="torch device of the backbone: cpu, cuda, cuda:1, ... (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the cache record as JSON")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as for train.py")
    p.set_defaults(func=_build)

    q = actions.add_parser(
        "import",
        help="import precomputed image embeddings (.npy + ids, or parquet) as a split's feature cache",
        description="Write your own image embeddings of a split's images as its feature cache, float16 [images, 1, "
        "dim] (the whole image, no augmented views): a .npy float array [N, D] with --ids (one image id per line, "
        "or a .json list; row i is image i), or a parquet file with one row per image (an id column and a list "
        "column). Refused, with nothing written: ids and rows of another count, duplicate ids, NaN/inf values, all-zero rows, rows "
        "of another dimension, images of the split without a row (extra ids are dropped), a cache of other "
        "embeddings at --out, or of the same name from another file or for another split (unless --overwrite), and a folder at --out that is no feature cache (even with --overwrite). Train from it with model.image_backbone=imported "
        "model.image_pretrained=NAME model.freeze_image_backbone=true data.features=auto|FOLDER loss.image=0.",
    )
    q.add_argument("split_dir", help="split folder (with manifest.json)")
    q.add_argument("--embeddings", required=True, help="the embeddings: FILE.npy (float [N, D], with --ids) or FILE.parquet")
    q.add_argument("--ids", help="image id of each .npy row: a text file, one id per line, or a .json list")
    q.add_argument("--name", required=True, help="the embeddings' name; training's model.image_pretrained must be it")
    q.add_argument("--out", help=OUT_HELP)
    q.add_argument("--id-column", help="parquet column of the image ids (default image_id; key, as img2dataset "
                   "writes, when absent)")
    q.add_argument("--embedding-column", help="parquet column of the embeddings (default embedding)")
    q.add_argument("--overwrite", action="store_true", help="replace a cache of other embeddings, dimension, source "
                   "file or split at --out (never a folder that is no feature cache)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.add_argument("--json", action="store_true", help="print the cache record as JSON")
    q.set_defaults(func=_import)

    c = actions.add_parser(
        "concat",
        help="join the whole-image rows of several caches of a split (several encoders) into one imported cache",
        description="Join several image encoders: the whole-image rows of two or more feature caches of the split "
        "(built with `features build`, e.g. with --views 0, or imported), each centred on its mean over the split's "
        "images (or on the means of --centre-like) and scaled to unit length so that every encoder weighs the same, "
        "concatenated and written as one imported cache, float16 [images, 1, sum of dims], with the means beside it "
        "(means.npz). Refused, with nothing written: a cache without an image of the split (caches are matched "
        "by image id: a cache of another split holding the same ids is not told apart), a cache of this split built "
        "before the split was rewritten (its recorded checksum), a cache named twice, fewer than two caches, "
        "--centre-like of other encoders or another order than these caches, a cache of other embeddings at --out "
        "(unless --overwrite), and a folder at --out that is no feature cache (even with --overwrite). Train from it with model.image_backbone=imported "
        "model.image_pretrained=NAME model.freeze_image_backbone=true data.features=FOLDER loss.image=0.",
    )
    c.add_argument("split_dir", help="split folder (with manifest.json)")
    c.add_argument("--cache", action="append", required=True, metavar="FOLDER",
                   help="a feature cache of the split (repeat: two or more, joined in this order)")
    c.add_argument("--name", required=True, help="the joined embeddings' name; training's model.image_pretrained must be it")
    c.add_argument("--out", help=OUT_HELP)
    c.add_argument("--centre-like", metavar="FOLDER", help="centre on the means of this earlier concatenation (the "
                   "train split's) instead of this split's own: new photos joined in the space a run trained in; "
                   "its encoders must be these caches', in the same order")
    c.add_argument("--overwrite", action="store_true", help="replace a cache of other embeddings, dimension, caches "
                   "or split at --out (never a folder that is no feature cache)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--json", action="store_true", help="print the cache record as JSON")
    c.set_defaults(func=_concat)

    f = actions.add_parser(
        "finetune",
        help="fine-tune the frozen backbone of a run to the run's reading of each image's captions, and cache its "
        "features (a second training round then trains on them)",
        description="Round two of the recipe. A run trained on a frozen backbone's feature cache reads each train "
        "image's own captions with its cross-modal head (their mean: what the model understood the picture to "
        "show, in a space where the languages already meet). Every layer of the backbone the run started from is "
        "trained so that a linear head on its pooled features predicts that reading from augmented views of the "
        "picture (cosine loss; AdamW, warm-up then cosine decay), and the fine-tuned backbone builds a feature cache "
        "with the run's settings. --out gets targets/ (the readings, an imported cache), backbone.safetensors, "
        "features/ and finetune.json. Train round two with the run's config and model.image_pretrained=OUT/"
        "backbone.safetensors data.features=OUT/features. No parallel text enters. A finished step is not done "
        "again (an interrupted build resumes); an --out of other settings or contents is refused (docs/training.md, Round two).",
    )
    f.add_argument("split_dir", help="the split whose images round one's feature cache holds (the run's train images)")
    f.add_argument("--from-run", required=True, metavar="RUN", help="round one: a run folder trained on a frozen "
                   "backbone's feature cache")
    f.add_argument("--out", required=True, help="a new or empty folder (or this fine-tune's own, to resume)")
    f.add_argument("--epochs", type=positive_int, default=FinetuneSettings.epochs,
                   help="passes over the images (default %(default)s)")
    f.add_argument("--lr", type=positive_float, default=FinetuneSettings.lr, help="the backbone's learning rate; the head's is "
                   f"{FinetuneSettings.head_lr:g} (default %(default)s)")
    f.add_argument("--seed", type=int, default=FinetuneSettings.seed,
                   help="seeds the head, the views and the order (default %(default)s)")
    f.add_argument("--workers", type=non_negative_int, default=1,
                   help="image decoding/augmentation processes; 0: none, the images are decoded and augmented in this "
                        "process (default %(default)s)")
    f.add_argument("--device", type=torch_device, default="cpu",
                   help="torch device of the backbone: cpu, cuda, cuda:1, ... (default %(default)s)")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")
    f.set_defaults(func=_finetune)

