"""``zeroshot tag-eval``: Precision@K of multilingual image tagging on held-out captions, against a frequency
baseline."""
from __future__ import annotations

import argparse
import sys

import torch
from backretrieval.data import load_split
from backretrieval.image_weights import default_image_weights

from globetrotter.argtypes import language_codes, positive_int
from globetrotter.errors import UserError

from ..data import embed_cached, image_extractor, languages_the_encoder_lacks, load_split_features
from ..retrieval import check_adapter_dims
from ..tag_eval import content_words, evaluate_tagging, frequent_words
from ..tagging import (PAPER_W1, PAPER_W2, caption_transfer_tags, check_tag_weights, load_imagenet_classifier,
                       tag_image_features)
from ..train import load_adapter
from .common import add_command, check_json, check_no_shared_images, write_json

TAG_EVAL_HELP = """\
Measure multilingual image tagging (XTD10 3.3.2) on a split's held-out captions. The true tags
of an image in a language are the content words (stop words removed; zh segmented by jieba)
that at least --min-share of its captions there contain. The candidate tags of a language are
the --vocab-size most frequent content words of the --vocab-from split's captions in it. Two
taggers are scored: `captions` maps the --vocab-from captions of the language (text only) into
the image space and gives an image the K words most common among its --neighbours nearest
captions; `xtd10` is the `tag` command (top-K ImageNet source tags translated by eq. 5). Each is
scored by Precision@K, the share of its K tags that are true, over images with a true tag, with a
95% bootstrap interval; the frequency baseline gives every image the K most frequent candidates.
Needs the optional packages spacy (stop-word lists) and jieba: pip install "globetrotter[tagging-eval]" (from a
clone: pip install -e ".[tagging-eval]").
"""


def run(args: argparse.Namespace) -> int:
    """Run ``tag-eval`` with the parsed options: print each tagger's Precision@K per language beside the frequency
    baseline's, write the record to ``--out`` if given; exit code 0."""
    from globetrotter.evaluation.records import dataset_info  # what a record names of a split

    check_tag_weights(args.w1, args.w2)
    check_json(args.out)
    if args.vocab_size < args.k:  # was blamed on the --vocab-from split after all its features were computed
        raise UserError(f"--vocab-size {args.vocab_size}: fewer candidate tags than --k ({args.k}) tags per image; "
                        f"raise --vocab-size or lower --k")
    progress = not args.no_progress
    adapter, config, _ = load_adapter(args.adapter)
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                progress=progress, online=args.online)
    loaded: dict = {}  # the text encoder, loaded once for the test captions, the tags and the captions voting
    split = load_split_features(args.test, config.text_encoder, extractor, args.languages, args.cache_dir, progress,
                                online=args.online, loaded=loaded)
    check_adapter_dims(adapter, split.text_features.shape[1], split.image_features.shape[1],
                       f"{args.test} vs {args.adapter}")  # the text width too, as retrieval checks it
    codes = args.languages or sorted(set(split.langs.tolist()))
    source = load_split(args.vocab_from, codes)
    # the captions tagger would vote with the captions that define the truth
    check_no_shared_images(f"--vocab-from {args.vocab_from}", source.image_keys, split.image_keys,
                           f"{args.test} images tagging is measured on", "give the train split")
    captions = {lang: [t for t, code in zip(source.texts, source.langs) if code == lang] for lang in codes}
    vocabularies = {lang: frequent_words(captions[lang], lang, args.vocab_size) for lang in codes}
    for lang in codes:
        if len(vocabularies[lang]) < args.k:
            raise UserError(f"{args.vocab_from}: fewer than {args.k} content words in {lang!r} to tag with")
    neighbours = {lang: min(args.neighbours, len(captions[lang])) for lang in codes}
    for lang, n in neighbours.items():  # the nearest N of fewer captions are all of them: said, not passed over
        if n < args.neighbours:
            print(f"note: --neighbours {args.neighbours}: {args.vocab_from} has {n} {lang} captions; using {n}")
    head = load_imagenet_classifier(config.image_encoder, config.image_weights or
                                    default_image_weights(config.image_encoder), online=args.online)

    def embed_texts(texts: list[str]) -> torch.Tensor:
        return torch.from_numpy(embed_cached(config.text_encoder, texts, args.cache_dir, progress, args.online,
                                             loaded))

    def by_captions(features: torch.Tensor, lang: str) -> list[list[str]]:
        words = [content_words(c, lang) for c in captions[lang]]
        return caption_transfer_tags(features, adapter.embed(embed_texts(captions[lang])), words, neighbours[lang],
                                     args.k)

    def by_eq5(features: torch.Tensor, lang: str) -> list[list[str]]:
        tagged = tag_image_features(adapter, features, head, embed_texts, {lang: vocabularies[lang]}, args.k,
                                    args.w1, args.w2)
        return [entry["tags"][lang] for entry in tagged]

    taggers = {"captions": by_captions, "xtd10": by_eq5}
    scores = evaluate_tagging(split, codes, vocabularies, taggers, args.k, args.min_share)
    key = f"precision@{args.k}"
    print(f"tagging {key} on {args.test} ({len(split.image_keys)} images; 95% bootstrap intervals)", file=sys.stderr)
    columns = [*taggers, "frequency"]
    print(f"{'lang':<5} {'images':>6} " + " ".join(f"{name:>22}" for name in columns))
    for lang, s in scores.items():
        cells = [f"{s[m]['value']:.3f} [{s[m]['lo']:.3f}, {s[m]['hi']:.3f}]" for m in columns]
        print(f"{lang:<5} {s['n_images']:>6} " + " ".join(f"{c:>22}" for c in cells))
    lacks = languages_the_encoder_lacks(config.text_encoder, codes)
    if lacks:
        print(f"note: the text encoder {config.text_encoder!r} was not trained on {', '.join(lacks)}")
    record = {"task": "zeroshot_tag_eval", "adapter": str(args.adapter), "test": dataset_info(args.test),
              "vocab_from": dataset_info(args.vocab_from), "vocab_size": args.vocab_size, "k": args.k,
              "neighbours": args.neighbours, "neighbours_used": neighbours, "w1": args.w1, "w2": args.w2,
              "min_share": args.min_share, "metric": key, "scores": scores, "languages_the_text_encoder_lacks": lacks,
              "baseline_tags": {lang: v[: args.k] for lang, v in vocabularies.items()}}
    write_json(record, args.out, args)
    return 0


def _share(value: str) -> float:
    share = float(value)
    if not 0.0 < share <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1], got {value!r}")
    return share


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    """Add the ``tag-eval`` sub-command (``parent``: the common options)."""
    p = add_command(sub, parent, "tag-eval", "tagging Precision@K on held-out captions vs a frequency baseline",
                    TAG_EVAL_HELP, "--adapter runs/zs --test outputs/flickr8k/test --vocab-from outputs/flickr8k/train "
                    "--languages en,de,fr,zh --out runs/tag-eval.json")
    p.add_argument("--adapter", required=True, metavar="DIR", help="trained adapter checkpoint")
    p.add_argument("--test", required=True, metavar="SPLIT", help="split whose captions give the tag truth")
    p.add_argument("--vocab-from", required=True, metavar="SPLIT",
                   help="split whose captions give each language's candidate tags (a train split)")
    p.add_argument("--languages", type=language_codes, metavar="CODES",
                   help="comma-separated languages to measure (default: all in --test)")
    p.add_argument("--vocab-size", type=positive_int, default=1000, metavar="N",
                   help="candidate tags per language: its N most frequent content words, those of the xtd10 tagger and "
                        "the frequency baseline; the captions tagger takes any word of its captions (default 1000)")
    p.add_argument("--k", type=positive_int, default=5, metavar="K",
                   help="tags per image, and the K of Precision@K (default 5)")
    p.add_argument("--neighbours", type=positive_int, default=30, metavar="N",
                   help="captions tagger: the N captions nearest each image vote (default 30)")
    p.add_argument("--min-share", type=_share, default=0.5, metavar="S",
                   help="a true tag is in at least this share of the image's captions (default 0.5)")
    p.add_argument("--w1", type=float, default=PAPER_W1, help=f"weight of cos(image, tag), eq. 5 (default {PAPER_W1})")
    p.add_argument("--w2", type=float, default=PAPER_W2,
                   help=f"weight of cos(source tag, tag), eq. 5 (default {PAPER_W2})")
    p.add_argument("--out", metavar="FILE", help="write the JSON record here (default: none is written)")
    p.set_defaults(func=run)
