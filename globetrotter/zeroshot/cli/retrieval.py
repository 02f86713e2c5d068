"""``zeroshot retrieval``: text->image Recall@K of trained adapters in every language of a test split (XTD10
Tables 2/3)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import comma_separated, distinct_names, language_codes, named_path, positive_int

from ..data import image_extractor, languages_the_encoder_lacks, load_split_features
from ..retrieval import DEFAULT_KS, chance_recall, format_table, split_recall
from ..train import load_adapter
from .common import add_command, check_json, write_json

RETRIEVAL_HELP = """\
Zero-shot cross-lingual text->image retrieval (Aggarwal et al., XTD10 paper). Each caption is
embedded by the frozen multilingual text encoder, projected by the trained adapter into the
frozen image-feature space, and the test images are ranked by the adapter's metric (cosine by
default; --metric overrides it). Recall@K = share of queries whose own image is among the K
nearest (the JSON adds 95% bootstrap intervals over queries); chance = K / number of images;
the median rank of the own image is printed too. Languages the text encoder was not trained on
are named. By default one query per image and language (its first caption), as XTD10 and
Multi30K do; --all-captions uses every caption.
"""


def run(args: argparse.Namespace) -> int:
    """Run ``retrieval`` with the parsed options: print each adapter's Recall@K per language, write the record to
    ``--out`` if given; exit code 0."""
    from globetrotter.evaluation.records import dataset_info  # what a record names of a split

    check_json(args.out)
    progress = not args.no_progress
    record: dict = {"task": "zeroshot_retrieval", "dataset": dataset_info(args.test), "ks": args.ks,
                    "queries": "all captions" if args.all_captions else "first caption per image and language",
                    "models": {}}
    table: dict = {}
    notes: list[str] = []
    # every checkpoint read first: a damaged one after the first was found once the first's features were computed
    adapters = {name: (path, *load_adapter(path)) for name, path in distinct_names(args.adapter, "--adapter").items()}
    for name, (path, adapter, config, _) in adapters.items():
        extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                    progress=progress, online=args.online)
        test = load_split_features(args.test, config.text_encoder, extractor, args.languages, args.cache_dir, progress,
                                   every_image=True, online=args.online)
        metric = args.metric or config.metric
        scores = split_recall(adapter, test, args.languages, args.all_captions, args.ks, metric, where=str(args.test),
                              adapter_name=str(path))
        n_images = scores["n_images"]
        table[name] = scores["metrics"]
        unseen = languages_the_encoder_lacks(config.text_encoder, list(scores["metrics"]))
        record["models"][name] = {
            "adapter": str(path), "loss": config.loss.name, "text_encoder": config.text_encoder,
            "image_encoder": config.image_encoder, "train_langs": config.train_langs, "metric": metric,
            "metrics": scores["metrics"], "intervals": scores["intervals"], "n_queries": scores["n_queries"],
            "n_images": n_images, "languages_the_text_encoder_lacks": unseen,
        }
        if unseen:
            notes.append(f"{name}: the text encoder {config.text_encoder!r} was not trained on {', '.join(unseen)}")
        record["chance"] = chance_recall(n_images, args.ks)
    for k in args.ks:
        print(f"text->image Recall@{k} ({record['chance'][f'image_retrieval_recall@{k}']:.3f} = chance, "
              f"{n_images} images)")
        print(format_table(table, k))
    print("median rank of the own image")
    print(format_table(table, key="median_rank"))
    for note in notes:
        print(f"note: {note}")
    write_json(record, args.out, args)
    return 0


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    """Add the ``retrieval`` sub-command (``parent``: the common options)."""
    p = add_command(sub, parent, "retrieval", "text->image Recall@K per language (XTD10 Tables 2/3)", RETRIEVAL_HELP,
                    "--test outputs/flickr8k/test --adapter m3l=runs/m3l --adapter patr=runs/patr "
                    "--languages en,de,fr,zh --out runs/retrieval.json")
    p.add_argument("--test", required=True, metavar="SPLIT",
                   help="test split folder (the same images in every language)")
    p.add_argument("--adapter", required=True, action="append", type=named_path, metavar="[NAME=]DIR",
                   help="trained adapter checkpoint (repeat to compare models in one table)")
    p.add_argument("--languages", type=language_codes, metavar="CODES",
                   help="comma-separated languages to evaluate (default: all in the split)")
    p.add_argument("--all-captions", action="store_true", help="use every caption as a query, not the first per image")
    p.add_argument("--metric", choices=("l2", "cosine"), default=None,
                   help="ranking: cosine or squared Euclidean distance (default: the adapter's config, `metric`)")
    p.add_argument("--ks", type=comma_separated(positive_int), default=list(DEFAULT_KS), metavar="K,K",
                   help="the K of Recall@K, comma-separated (default 1,5,10)")
    p.add_argument("--out", metavar="FILE", help="write the JSON record here (default: none is written)")
    p.set_defaults(func=run)
