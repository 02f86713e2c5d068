"""``zeroshot tag``: zero-shot multilingual image tagging (XTD10 3.3.2, eqs. 3-5)."""
from __future__ import annotations

import argparse

import torch
from backretrieval.errors import cli_option_names
from backretrieval.image_weights import default_image_weights

from globetrotter.argtypes import distinct_names, positive_int
from globetrotter.errors import UserError

from ..data import embed_cached, image_extractor, languages_the_encoder_lacks
from ..retrieval import check_adapter_dims
from ..tagging import (PAPER_W1, PAPER_W2, check_tag_weights, image_files, load_imagenet_classifier,
                       read_tag_vocabulary, tag_image_features)
from ..train import load_adapter
from .common import add_command, check_json, write_json

TAG_HELP = """\
Zero-shot multilingual image tagging (XTD10 paper 3.3.2). The English source tags of an image
are the top-k ImageNet classes of the image model. Every target-language tag and every source
tag is embedded by the text encoder + adapter into the image space; for each source tag S_j,
in order, each target tag T_i scores W1*cos(image, T_i) + W2*cos(S_j, T_i) (eqs. 3-5) and the
best target tag not yet used becomes S_j's translation (one per source tag, none twice).
"""


def vocab(value: str) -> tuple[str, str]:
    """``--vocab LANG=FILE``."""
    from data_prep.converters.languages import normalize_language

    lang, sep, path = value.partition("=")
    if not sep or not lang or not path:
        raise argparse.ArgumentTypeError(f"expected LANG=FILE, got {value!r}")
    code = normalize_language(lang)  # "DE" is de, as the converters read it
    if code is None:
        raise argparse.ArgumentTypeError(f"{lang!r} is not an ISO 639-1 language code (e.g. de, zh, pt-BR), in {value!r}")
    return code, path


def run(args: argparse.Namespace) -> int:
    """Run ``tag`` with the parsed options: print each image's tags per language, write the record to ``--out`` if
    given; exit code 0."""
    check_tag_weights(args.w1, args.w2)
    check_json(args.out)
    progress = not args.no_progress
    vocab_files = distinct_names(args.vocab, "--vocab", "language", "give one vocabulary file per language")
    vocabularies = {lang: read_tag_vocabulary(path) for lang, path in vocab_files.items()}
    adapter, config, _ = load_adapter(args.adapter)
    paths = image_files(args.images)
    if args.max_images:
        paths = paths[: args.max_images]
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, args.device,
                                progress=progress, online=args.online)
    with cli_option_names(False):  # the image model is the adapter config's image_encoder/image_weights, worded as
        # arguments: backretrieval's --image-model/--image-weights are no flags of tag
        found, kept, unreadable = extractor.extract_readable(paths)  # each image decoded once
    skipped = [(paths[i], why) for i, why in unreadable]
    paths = [paths[i] for i in kept]
    for path, why in skipped:
        print(f"warning: {path}: unreadable image ({why}); skipped")
    if not paths:
        raise UserError(f"no readable image among the {len(skipped)} given (each named above)")
    feats = torch.from_numpy(found)
    if adapter.image_dim != feats.shape[1]:
        raise UserError(f"{args.adapter}: the adapter outputs {adapter.image_dim}-d features but image model "
                        f"{config.image_encoder} gives {feats.shape[1]}-d ones (trained on other image features?)")
    weights = config.image_weights or default_image_weights(config.image_encoder)
    head = load_imagenet_classifier(config.image_encoder, weights, online=args.online)
    source_tags = min(args.source_tags, head.out_features)
    if source_tags < args.source_tags:  # the top-K of 1,000 classes is all of them: said, not passed over
        print(f"note: --source-tags {args.source_tags}: the image model's classifier has {head.out_features} "
              f"classes; using {source_tags}")
    lacks = languages_the_encoder_lacks(config.text_encoder, list(vocabularies))
    if lacks:  # as retrieval and tag-eval say it
        print(f"note: the text encoder {config.text_encoder!r} was not trained on {', '.join(lacks)}")

    loaded: dict = {}  # the text encoder, loaded once for every language's tags

    def embed_texts(texts: list[str]) -> torch.Tensor:
        emb = embed_cached(config.text_encoder, texts, args.cache_dir, progress, args.online, loaded)
        check_adapter_dims(adapter, emb.shape[1], feats.shape[1], f"{args.adapter}")  # as retrieval checks it
        return torch.from_numpy(emb)

    tagged = tag_image_features(adapter, feats, head, embed_texts, vocabularies, source_tags, args.w1, args.w2)
    images = []
    for path, entry in zip(paths, tagged):
        images.append({"image": str(path), **entry})
        print(path.name)
        print(f"  source (ImageNet): {', '.join(entry['source'])}")
        for lang in vocabularies:
            print(f"  {lang}: {', '.join(entry['tags'][lang])}")
    record = {"task": "zeroshot_tagging", "adapter": str(args.adapter), "text_encoder": config.text_encoder,
              "image_encoder": config.image_encoder, "w1": args.w1, "w2": args.w2, "source_tags": source_tags,
              "vocabularies": vocab_files, "languages_the_text_encoder_lacks": lacks, "images": images,
              "skipped": [{"image": str(path), "why": why} for path, why in skipped]}
    write_json(record, args.out, args)
    return 0


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    """Add the ``tag`` sub-command (``parent``: the common options)."""
    p = add_command(sub, parent, "tag", "zero-shot multilingual image tagging (XTD10 3.3.2)", TAG_HELP,
                    "--adapter runs/m3l --images photos/ --vocab de=tags_de.txt --vocab fr=tags_fr.txt --out tags.json")
    p.add_argument("--adapter", required=True, metavar="DIR", help="trained adapter checkpoint")
    p.add_argument("--images", required=True, nargs="+", metavar="PATH",
                   help="image files or folders (searched recursively)")
    p.add_argument("--vocab", required=True, action="append", type=vocab, metavar="LANG=FILE",
                   help="target-language tag vocabulary: UTF-8, one tag per line, '#' comments (repeatable)")
    p.add_argument("--source-tags", type=positive_int, default=5, metavar="K",
                   help="English source tags per image: the top-K ImageNet classes of the image model (default 5)")
    p.add_argument("--w1", type=float, default=PAPER_W1,
                   help=f"weight of cos(image, target tag), eq. 5 (default {PAPER_W1})")
    p.add_argument("--w2", type=float, default=PAPER_W2,
                   help=f"weight of cos(source tag, target tag), eq. 5 (default {PAPER_W2})")
    p.add_argument("--max-images", type=positive_int, default=None, metavar="N",
                   help="tag only the first N images (default: all)")
    p.add_argument("--out", metavar="FILE", help="write the JSON record here (default: none is written)")
    p.set_defaults(func=run)
