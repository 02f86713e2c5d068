"""``zeroshot`` command line: train the XTD10 adapter, evaluate it per language, tag images,
and run the BackRetrieval Triplet/TripletXL case study.

Sub-commands (each writes one JSON record; ``--help`` explains every option and metric):

- ``train``      train the text->image adapter on one language's captions of a split;
- ``retrieval``  text->image Recall@1/5/10 in every language of a test split (Tables 2/3);
- ``tag``        zero-shot multilingual image tagging (section 3.3.2, eqs. 3-5);
- ``triplet``    Triplet/TripletXL adapters over JSONL documents, judged by BackRetrieval.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from backretrieval.errors import BackRetrievalError
from globetrotter.config_io import load_config, to_dict
from globetrotter.argtypes import positive_int
from globetrotter.errors import UserError, run_cli

from .config import ZeroShotConfig
from .data import DEFAULT_CACHE, default_image_weights, embed_cached, image_extractor, load_split_features
from .retrieval import DEFAULT_KS, chance_recall, format_table, recall_at_k, zero_shot_recall
from .tagging import PAPER_W1, PAPER_W2, load_imagenet_classifier, read_tag_vocabulary, tag_images, top_k_source_tags
from .train import load_adapter, save_adapter, train_adapter

RETRIEVAL_HELP = """\
Zero-shot cross-lingual text->image retrieval (Aggarwal et al., XTD10 paper). Each caption is
embedded by the frozen multilingual text encoder, projected by the trained adapter into the
frozen image-feature space, and the test images are ranked by squared Euclidean distance
(--metric cosine: by cosine). Recall@K = share of queries whose own image is among the K
nearest; chance = K / number of images. By default one query per image and language (its
first caption), as XTD10 and Multi30K do; --all-captions uses every caption.
"""

TAG_HELP = """\
Zero-shot multilingual image tagging (XTD10 paper 3.3.2). The English source tags of an image
are the top-k ImageNet classes of the image model. Every target-language tag and every source
tag is embedded by the text encoder + adapter into the image space; for each source tag S_j,
in order, each target tag T_i scores W1*cos(image, T_i) + W2*cos(S_j, T_i) (eqs. 3-5) and the
best target tag not yet used becomes S_j's translation (one per source tag, none twice).
"""

TRIPLET_HELP = """\
The BackRetrieval paper's case study (Fain et al. 2021, 3.2). Documents (JSONL: lang, title,
body, optional image) are embedded by a frozen multilingual text encoder; a siamese adapter (two
dense ReLU layers, 300-d) is trained on the documents WITHOUT images with Triplet (eq. 1: body vs
own title and a random in-batch title, cosine distance, margin 0.1) and TripletXL (eq. 2: plus
beta * the gap between mean distances to the K nearest titles of each other language and of the
own language, beta 0.01, K 5). The documents WITH images then judge three representations
(frozen: concat of the frozen title and body embeddings; triplet; tripletxl: concat of x_t and
x_b) by BackRetrieval Recall@K for every ordered language pair; a box plot shows one point per
pair per model (paper Fig. 3). An "image" ending in .npy is read as a precomputed feature vector.
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=36)


def _ks(value: str) -> list[int]:
    try:
        ks = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {value!r}")
    return ks


def _langs(value: str) -> list[str]:
    langs = [v.strip() for v in value.split(",") if v.strip()]
    if not langs:
        raise argparse.ArgumentTypeError("expected comma-separated language codes, e.g. en,de,fr")
    return langs


def _named_path(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep:
        return Path(value).name or value, value
    if not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH or PATH, got {value!r}")
    return name, path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), metavar="DIR",
                   help="where frozen text and image features are cached (default: $GLOBETROTTER_CACHE or outputs/cache)")
    p.add_argument("--device", default="cpu", help="torch device for the image model and the adapter (default cpu)")
    p.add_argument("--online", action="store_true", help="allow downloads (sentence-transformers models, timm 'hub' weights)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: torch's choice; 1 is fastest on a busy machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _write_json(record: dict, path: str | Path | None) -> None:
    text = json.dumps(record, indent=2, ensure_ascii=False, default=_jsonable)
    if path:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            raise UserError(f"{path}: cannot write the JSON record ({err.strerror or err})") from None
        print(f"wrote {path}", file=sys.stderr)


def _make_out_dir(path: str | Path) -> Path:
    """Create the output folder up front, so a bad ``--out`` fails before any training."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{path}: cannot create the output folder ({err.strerror or err})") from None
    return Path(path)


def _check_adapter_dims(adapter, text_dim: int, image_dim: int, where: str) -> None:
    """One-line error when the features at hand do not fit the adapter's input/output widths."""
    if adapter.text_dim != text_dim or adapter.image_dim != image_dim:
        raise UserError(
            f"{where}: the adapter maps {adapter.text_dim}-d text embeddings to {adapter.image_dim}-d image "
            f"features, but the encoders give {text_dim}-d text and {image_dim}-d image features"
        )


def _jsonable(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# --------------------------------------------------------------------------- train
def cmd_train(args: argparse.Namespace) -> int:
    config = load_config(ZeroShotConfig, args.config, args.overrides)
    _make_out_dir(args.out)
    progress = not args.no_progress
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                progress=progress, online=args.online)
    train = load_split_features(args.train, config.text_encoder, extractor, config.train_langs, args.cache_dir, progress,
                                config.max_captions_per_image)
    rows = train.rows(config.train_langs)
    if len(rows) < 2:
        raise UserError(f"{args.train}: fewer than 2 captions in train_langs {config.train_langs}")
    validate = None
    if args.val:
        val = load_split_features(args.val, config.text_encoder, extractor, config.train_langs, args.cache_dir, progress)
        queries = {lang: val.first_per_image(lang) for lang in config.train_langs if len(val.rows(lang))}
        val_images = torch.from_numpy(val.image_features)
        k = max(args.val_k, 1)

        def validate(adapter) -> float:
            scores = [
                recall_at_k(adapter.embed(torch.from_numpy(val.text_features[r])), val_images, val.caption_image[r], (k,))
                for r in queries.values()
            ]
            return float(np.mean([s[f"image_retrieval_recall@{k}"] for s in scores]))

    start = time.perf_counter()
    adapter, history = train_adapter(
        torch.from_numpy(train.text_features[rows]),
        torch.from_numpy(train.image_features),
        torch.from_numpy(train.caption_image[rows]),
        config,
        validate=validate,
        device=args.device,
        progress=progress,
    )
    elapsed = time.perf_counter() - start
    meta = {
        "train": str(args.train),
        "val": str(args.val) if args.val else None,
        "n_captions": int(len(rows)),
        "n_images": int(len(np.unique(train.caption_image[rows]))),
        "history": {"loss": history.loss, "val": history.val, "best_epoch": history.best_epoch,
                    "samples_per_s": history.samples_per_s, "margin": history.margin,
                    "output_scale": history.output_scale, "train_s": elapsed},
    }
    save_adapter(adapter, config, args.out, **meta)
    print(f"trained {config.loss.name} adapter on {meta['n_captions']} {'/'.join(config.train_langs)} captions of "
          f"{meta['n_images']} images in {elapsed:.0f} s ({history.samples_per_s:.0f} samples/s); "
          f"best epoch {history.best_epoch + 1}/{config.optim.epochs}; saved to {args.out}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- retrieval
def cmd_retrieval(args: argparse.Namespace) -> int:
    progress = not args.no_progress
    record: dict = {"task": "zeroshot_retrieval", "dataset": str(args.test), "metric": args.metric, "ks": args.ks,
                    "queries": "all captions" if args.all_captions else "first caption per image and language",
                    "models": {}}
    table: dict = {}
    for name, path in args.adapter:
        adapter, config, meta = load_adapter(path)
        extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                    progress=progress, online=args.online)
        test = load_split_features(args.test, config.text_encoder, extractor, args.langs, args.cache_dir, progress)
        langs = args.langs or sorted(set(test.langs.tolist()))
        rows = {lang: (test.rows(lang) if args.all_captions else test.first_per_image(lang)) for lang in langs}
        missing = [lang for lang, r in rows.items() if len(r) == 0]
        if missing:
            raise UserError(f"{args.test}: no captions in {missing} (languages present: {sorted(set(test.langs.tolist()))})")
        _check_adapter_dims(adapter, test.text_features.shape[1], test.image_features.shape[1],
                            f"{args.test} vs {path}")
        metrics = zero_shot_recall(
            adapter,
            {lang: torch.from_numpy(test.text_features[r]) for lang, r in rows.items()},
            {lang: test.caption_image[r] for lang, r in rows.items()},
            torch.from_numpy(test.image_features),
            args.ks,
            args.metric,
        )
        n_images = len(test.image_keys)
        table[name] = metrics
        record["models"][name] = {
            "adapter": str(path), "loss": config.loss.name, "text_encoder": config.text_encoder,
            "image_encoder": config.image_encoder, "train_langs": config.train_langs, "metrics": metrics,
            "n_queries": {lang: int(len(r)) for lang, r in rows.items()}, "n_images": n_images,
        }
        record["chance"] = chance_recall(n_images, args.ks)
    for k in args.ks:
        print(f"text->image Recall@{k} ({record['chance'][f'image_retrieval_recall@{k}']:.3f} = chance, "
              f"{n_images} images)")
        print(format_table(table, k))
    _write_json(record, args.json)
    return 0


# --------------------------------------------------------------------------- tag
def _image_paths(sources: Sequence[str]) -> list[Path]:
    exts = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}
    paths: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            paths += sorted(q for q in p.rglob("*") if q.suffix.lower() in exts)
        elif p.is_file():
            paths.append(p)
        else:
            raise UserError(f"{p}: image file or folder not found")
    if not paths:
        raise UserError(f"no images (.jpg/.png/...) found in {list(sources)}")
    return paths


def _vocab(value: str) -> tuple[str, str]:
    lang, sep, path = value.partition("=")
    if not sep or not lang or not path:
        raise argparse.ArgumentTypeError(f"expected LANG=FILE, got {value!r}")
    return lang, path


def cmd_tag(args: argparse.Namespace) -> int:
    progress = not args.no_progress
    adapter, config, _ = load_adapter(args.adapter)
    vocabularies = {lang: read_tag_vocabulary(path) for lang, path in args.vocab}
    paths = _image_paths(args.images)
    if args.limit:
        paths = paths[: args.limit]
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                progress=progress, online=args.online)
    feats = torch.from_numpy(extractor.extract([str(p) for p in paths]))
    if adapter.image_dim != feats.shape[1]:
        raise UserError(f"{args.adapter}: the adapter outputs {adapter.image_dim}-d features but image model "
                        f"{config.image_encoder} gives {feats.shape[1]}-d ones (trained on other image features?)")
    weights = config.image_weights or default_image_weights(config.image_encoder)
    head = load_imagenet_classifier(config.image_encoder, weights, online=args.online)
    with torch.no_grad():
        source, probs = top_k_source_tags(head(feats), args.source_tags)

    def embed_tags(tags: list[str]) -> torch.Tensor:
        return adapter.embed(torch.from_numpy(embed_cached(config.text_encoder, tags, args.cache_dir, progress)))

    tags = tag_images(feats, source, embed_tags, vocabularies, args.w1, args.w2)
    images = []
    for i, path in enumerate(paths):
        entry = {"image": str(path), "source": source[i], "source_probs": [round(float(p), 4) for p in probs[i]],
                 "tags": {lang: tags[lang][i] for lang in vocabularies}}
        images.append(entry)
        print(path.name)
        print(f"  source (ImageNet): {', '.join(source[i])}")
        for lang in vocabularies:
            print(f"  {lang}: {', '.join(tags[lang][i])}")
    record = {"task": "zeroshot_tagging", "adapter": str(args.adapter), "text_encoder": config.text_encoder,
              "image_encoder": config.image_encoder, "w1": args.w1, "w2": args.w2, "source_tags": args.source_tags,
              "vocabularies": {lang: path for lang, path in args.vocab}, "images": images}
    _write_json(record, args.json)
    return 0


# --------------------------------------------------------------------------- triplet
def _npy_image_features(paths: Sequence[str]) -> np.ndarray:
    """Stack precomputed image feature vectors (``.npy`` files), one row per path."""
    rows = []
    for path in paths:
        try:
            rows.append(np.load(path).astype(np.float32).reshape(-1))
        except (OSError, ValueError) as err:
            raise UserError(f"{path}: unreadable .npy image features ({err})") from None
        if rows[-1].shape != rows[0].shape:
            raise UserError(f"{path}: {rows[-1].shape[0]}-d image features, but {paths[0]} has {rows[0].shape[0]}-d")
    return np.stack(rows)


def cmd_triplet(args: argparse.Namespace) -> int:
    from backretrieval.pairs import evaluate_pairs
    from backretrieval.plots import pair_boxplot

    from .triplet import TripletConfig, read_documents, train_siamese

    progress = not args.no_progress
    configs = {name: TripletConfig(hidden_dim=args.hidden_dim, out_dim=args.out_dim, margin=args.margin, beta=beta,
                                   k=args.k, lr=args.lr, batch_size=args.batch_size, epochs=args.epochs,
                                   val_fraction=args.val_fraction, seed=args.seed)
               for name, beta in (("triplet", 0.0), ("tripletxl", args.beta))}
    for config in configs.values():
        try:
            config.validate()
        except ValueError as err:
            raise UserError(f"triplet: {err}") from None
    out = _make_out_dir(args.out)
    docs = [d for path in args.docs for d in read_documents(path)]
    train_docs = [d for d in docs if d.image is None]
    eval_docs = [d for d in docs if d.image is not None]
    if len(train_docs) < 2:
        raise UserError(f"{args.docs}: need at least 2 documents without an image to train on, got {len(train_docs)}")
    eval_langs = sorted({d.lang for d in eval_docs})
    if len(eval_langs) < 2:
        raise UserError(f"{args.docs}: need documents with images in at least 2 languages to evaluate, got {eval_langs}")

    def embed(texts: list[str]) -> torch.Tensor:
        return torch.from_numpy(embed_cached(args.text_encoder, texts, args.cache_dir, progress))

    title, body = embed([d.title for d in train_docs + eval_docs]), embed([d.body for d in train_docs + eval_docs])
    n_train = len(train_docs)
    lang_ids = {lang: i for i, lang in enumerate(sorted({d.lang for d in docs}))}
    langs = torch.tensor([lang_ids[d.lang] for d in train_docs])

    npy = [d.image.endswith(".npy") for d in eval_docs]
    if all(npy):
        image_feats = _npy_image_features([d.image for d in eval_docs])
    elif not any(npy):
        extractor = image_extractor(args.image_model, args.image_weights, args.cache_dir, args.device,
                                    progress=progress, online=args.online)
        image_feats = extractor.extract([d.image for d in eval_docs])
    else:
        raise UserError(f"{args.docs}: images must be all image files or all .npy features, not a mix")

    representations = {"frozen": torch.cat([title[n_train:], body[n_train:]], dim=1)}
    histories = {}
    for name, config in configs.items():
        model, history = train_siamese(title[:n_train], body[:n_train], langs, config, progress=progress)
        representations[name] = model.represent(title[n_train:], body[n_train:])
        histories[name] = {"config": to_dict(config), "train": history.train, "val": history.val,
                           "best_epoch": history.best_epoch}

    doc_langs = [d.lang for d in eval_docs]
    image_ids = [d.image for d in eval_docs]
    results = {
        name: evaluate_pairs(rep.numpy(), doc_langs, image_feats, image_ids, args.ks, max_per_lang=args.max_per_lang,
                             seed=args.seed, with_corr=False)
        for name, rep in representations.items()
    }
    k = max(args.ks)
    plot = pair_boxplot(results, f"bkr@{k}", out / f"boxplot_bkr{k}.png", annotate=args.annotate)
    print(f"BackRetrieval R@{k} over {len(results['frozen']['pairs'])} language pairs "
          f"({len(train_docs)} training documents, {len(eval_docs)} evaluation documents):")
    for name, res in results.items():
        vals = np.array([p[f"bkr@{k}"] for p in res["pairs"].values() if f"bkr@{k}" in p])
        print(f"  {name:<10} mean {vals.mean():.4f}  min {vals.min():.4f}  max {vals.max():.4f}  std {vals.std():.4f}")
    record = {"task": "backretrieval_triplet", "docs": list(args.docs), "text_encoder": args.text_encoder,
              "image_model": None if all(npy) else f"{args.image_model}:{args.image_weights or 'package'}",
              "n_train": len(train_docs), "n_eval": len(eval_docs), "ks": args.ks, "boxplot": str(plot),
              "training": histories,
              "models": {name: {"mean": res["mean"], "pairs": res["pairs"]} for name, res in results.items()}}
    _write_json(record, out / "results.json")
    return 0


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zeroshot", formatter_class=_formatter,
        description="The XTD10 zero-shot system (Aggarwal et al. 2020): an adapter from frozen multilingual "
        "sentence embeddings into a frozen image-feature space, trained on one language and used in all; "
        "multilingual image tagging; and the BackRetrieval paper's Triplet/TripletXL case study.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("train", help="train the text->image adapter (XTD10 3.1-3.2)", formatter_class=_formatter,
                       description="Train the adapter on the train_langs captions of a split (English by default), with "
                       "M3L (eq. 1) or PATR (eq. 2) and in-batch hard negatives. Frozen features are cached.",
                       epilog="example: zeroshot train --train outputs/flickr8k/train --val outputs/flickr8k/val "
                       "--out runs/m3l loss.name=m3l optim.epochs=50")
    p.add_argument("--train", required=True, metavar="SPLIT", help="train split folder (manifest.json + shards)")
    p.add_argument("--val", metavar="SPLIT", help="optional val split: keep the epoch with the best train-language "
                   "text->image Recall@K on it (first caption per image)")
    p.add_argument("--val-k", type=positive_int, default=10, metavar="K",
                   help="K of the validation Recall@K (default 10)")
    p.add_argument("--out", required=True, metavar="DIR", help="checkpoint folder: adapter.safetensors, config.yaml, meta.json")
    p.add_argument("--config", metavar="YAML", help="config file (ZeroShotConfig); defaults are the paper's")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, e.g. loss.name=patr loss.margin=null optim.epochs=10 train_langs=[en]")
    _common(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("retrieval", help="text->image Recall@K per language (XTD10 Tables 2/3)",
                       formatter_class=_formatter, description=RETRIEVAL_HELP,
                       epilog="example: zeroshot retrieval --test outputs/flickr8k/test --adapter m3l=runs/m3l "
                       "--adapter patr=runs/patr --langs en,de,fr,zh --json runs/retrieval.json")
    p.add_argument("--test", required=True, metavar="SPLIT", help="test split folder (the same images in every language)")
    p.add_argument("--adapter", required=True, action="append", type=_named_path, metavar="[NAME=]DIR",
                   help="trained adapter checkpoint (repeat to compare models in one table)")
    p.add_argument("--langs", type=_langs, metavar="CODES", help="languages to evaluate (default: all in the split)")
    p.add_argument("--all-captions", action="store_true", help="use every caption as a query, not the first per image")
    p.add_argument("--metric", choices=("l2", "cosine"), default="l2",
                   help="ranking: squared Euclidean distance, as in training (default), or cosine")
    p.add_argument("--ks", type=_ks, default=list(DEFAULT_KS), metavar="K,K", help="the K of Recall@K (default 1,5,10)")
    p.add_argument("--json", metavar="FILE", help="write the JSON record here")
    _common(p)
    p.set_defaults(func=cmd_retrieval)

    p = sub.add_parser("tag", help="zero-shot multilingual image tagging (XTD10 3.3.2)", formatter_class=_formatter,
                       description=TAG_HELP,
                       epilog="example: zeroshot tag --adapter runs/m3l --images photos/ --vocab de=tags_de.txt "
                       "--vocab fr=tags_fr.txt --json tags.json")
    p.add_argument("--adapter", required=True, metavar="DIR", help="trained adapter checkpoint")
    p.add_argument("--images", required=True, nargs="+", metavar="PATH", help="image files or folders (searched recursively)")
    p.add_argument("--vocab", required=True, action="append", type=_vocab, metavar="LANG=FILE",
                   help="target-language tag vocabulary: UTF-8, one tag per line, '#' comments (repeatable)")
    p.add_argument("--source-tags", type=positive_int, default=5, metavar="K",
                   help="English source tags per image: the top-K ImageNet classes of the image model (default 5)")
    p.add_argument("--w1", type=float, default=PAPER_W1, help=f"weight of cos(image, target tag), eq. 5 (default {PAPER_W1})")
    p.add_argument("--w2", type=float, default=PAPER_W2, help=f"weight of cos(source tag, target tag), eq. 5 (default {PAPER_W2})")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N", help="tag only the first N images")
    p.add_argument("--json", metavar="FILE", help="write the JSON record here")
    _common(p)
    p.set_defaults(func=cmd_tag)

    p = sub.add_parser("triplet", help="Triplet/TripletXL over documents, judged by BackRetrieval (Fig. 3)",
                       formatter_class=_formatter, description=TRIPLET_HELP,
                       epilog="example: zeroshot triplet --docs recipes.jsonl --text-encoder use --out runs/triplet")
    p.add_argument("--docs", required=True, nargs="+", metavar="JSONL", help="document files: {lang, title, body, image?}")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder: results.json and the box plot")
    p.add_argument("--text-encoder", default="use", metavar="SPEC",
                   help="frozen text encoder: use | st:MODEL | npy:PATH | globetrotter:CKPT (default use)")
    p.add_argument("--image-model", default="efficientnet_lite0", help="timm model for image features (default efficientnet_lite0)")
    p.add_argument("--image-weights", default=None, help="package (offline EfficientNet-Lite0, default) | FILE | hub")
    p.add_argument("--hidden-dim", type=positive_int, default=300, help="first dense layer width (default 300)")
    p.add_argument("--out-dim", type=positive_int, default=300, help="output width of x_t and x_b (default 300)")
    p.add_argument("--margin", type=float, default=0.1, help="eq. 1 margin alpha (default 0.1)")
    p.add_argument("--beta", type=float, default=0.01, help="eq. 2 beta of TripletXL (default 0.01)")
    p.add_argument("--k", type=positive_int, default=5, help="eq. 2 nearest neighbours per language (default 5)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--batch-size", type=positive_int, default=128, help="mini-batch size (default 128)")
    p.add_argument("--epochs", type=positive_int, default=40, help="epochs (default 40)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="held-out share for choosing the epoch (default 0.1)")
    p.add_argument("--ks", type=_ks, default=[1, 5, 10], metavar="K,K", help="the K of BkR Recall@K (default 1,5,10)")
    p.add_argument("--max-per-lang", type=positive_int, default=None, metavar="N",
                   help="at most N documents per side of a pair")
    p.add_argument("--annotate", nargs="*", default=[], metavar="A->B", help="language pairs to label in the box plot")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    _common(p)
    p.set_defaults(func=cmd_triplet)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return args.func(args)
    except BackRetrievalError as err:  # the metric package's one-line user errors
        raise UserError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``zeroshot COMMAND ...``; returns the exit code (2 with one line for a user error)."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
