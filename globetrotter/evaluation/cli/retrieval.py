"""``eval.py retrieval``: cross-lingual text->image and image->text retrieval per language (XTD10 protocol)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import comma_separated, positive_int

from .. import plots
from ..tasks import retrieval as retrieval_task
from . import common

_RETRIEVAL_HELP = (
    "Cross-lingual text->image and image->text retrieval per language (XTD10 protocol) on a test "
    "split: the gallery is every image of the split (once), the queries each language's captions, "
    "embedded by the cross-modal heads. METRICS (CLIP_benchmark names, fractions): "
    "image_retrieval_recall@K = share of captions whose image is among the K nearest images "
    "(text->image); text_retrieval_recall@K = share of images with one of their captions among the K "
    "nearest captions of that language (image->text)."
)


def _retrieval(args: argparse.Namespace) -> int:
    ks = list(dict.fromkeys(args.ks))  # each K once
    result = retrieval_task.evaluate(args.model, args.split, languages=args.languages, ks=ks,
                                     max_images=args.max_images, seed=args.seed, batch_size=args.batch_size,
                                     name=args.name, device=args.device)
    per_language = result.metrics["per_language"]
    n = result.details["n_images"]

    def recalls(m: dict, direction: str) -> str:
        return " ".join(f"R@{k} {100 * m[f'{direction}_recall@{k}']:.1f}" for k in ks)

    print(f"recall in % over {n} images (chance of text→image: " + ", ".join(f"R@{k} {100 * min(1.0, k / n):.1f}"
                                                                           for k in ks)
          + "; of image→text: per language, over the images captioned in it)")
    for lang in result.languages:
        m = per_language[lang]
        print(f"{lang}: text→image {recalls(m, 'image_retrieval')} | image→text {recalls(m, 'text_retrieval')} "
              f"(chance {recalls(m, 'chance_text_retrieval')})")
    bars = {lang: {f"R@{k}": 100 * per_language[lang][f"image_retrieval_recall@{k}"] for k in ks}
            for lang in result.languages}
    chance = {f"R@{k}": 100 * min(1.0, k / n) for k in ks}  # as printed above: K of the n gallery images
    written = [plots.plot_bars(bars, f"{common.plot_prefix(args, 'retrieval')}-text2image.png",
                               f"Text→image retrieval: each language's captions query {n} images\n(dashed: "
                               + ", ".join(f"chance {key} {v:.2g}%" for key, v in chance.items()) + ")",
                               "recall (%)", chance=chance, xlabel="query language")]
    common.write(result, args, written)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``retrieval`` sub-command."""
    own = common.common_options(seed_help="seed of the --max-images sample (default 0)",
                                device_help="torch device of the model (its text and image encoders): cpu, cuda, "
                                            "cuda:1, ... (default cpu)")
    p = sub.add_parser("retrieval", parents=[own], help="text→image / image→text Recall@K per language", description=_RETRIEVAL_HELP)
    common.add_model(p)
    common.add_split(p, what="test split folder with images", detail="shards + manifest.json; no groups needed")
    p.add_argument("--ks", type=comma_separated(positive_int), default=[1, 5, 10], metavar="K,K",
                   help="the K of Recall@K, comma-separated (default 1,5,10)")
    p.add_argument("--max-images", type=positive_int, help="evaluate on a seeded sample of this many images (default: all)")
    p.set_defaults(func=_retrieval)
