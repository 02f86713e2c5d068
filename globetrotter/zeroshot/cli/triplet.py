"""``zeroshot triplet``: the BackRetrieval paper's Triplet/TripletXL case study (Fain et al. 2021, 3.2, Fig. 3)."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from globetrotter.argtypes import comma_separated, positive_int
from globetrotter.errors import UserError

from ..case_study import (case_study_configs, check_annotations, document_images, drop_small_pairs,
                          languages_with_enough_images, npy_image_features, pair_summary, precomputed_images,
                          run_case_study, split_documents)
from ..data import embed_cached, image_extractor, languages_the_encoder_lacks
from ..triplet import read_documents
from .common import add_command, check_out_dir, make_out_dir, write_json

DEFAULT_IMAGE_MODEL = "efficientnet_lite0"
RESULTS = "results.json"

TRIPLET_HELP = """\
The BackRetrieval paper's case study (Fain et al. 2021, 3.2). Documents (JSONL: lang, title,
body, optional image) are embedded by a frozen multilingual text encoder; a siamese adapter (two
dense ReLU layers, 300-d) is trained on the documents WITHOUT images with Triplet (eq. 1: body vs
own title and a random in-batch title, cosine distance, margin 0.1) and TripletXL (eq. 2: plus
beta * the gap between mean distances to the K nearest titles of each other language and of the
own language, beta 0.01, K 5). The documents WITH images then judge three representations
(frozen: concat of the frozen title and body embeddings; triplet; tripletxl: concat of x_t and
x_b) by BackRetrieval Recall@K for every ordered language pair; a box plot shows one point per
pair per model (paper Fig. 3). An "image" ending in .npy is read as a precomputed feature vector;
a relative one is found from the JSONL file's folder. A language with at most K (the largest of
--ks) evaluation images is left out with its pairs, in a printed note: its BkR@K would be 1.
"""


def run(args: argparse.Namespace) -> int:
    """Run ``triplet`` with the parsed options: train and judge the adapters, print their BackRetrieval summary,
    write the box plot and the record into ``--out``; exit code 0."""
    from backretrieval.plots import pair_boxplot

    progress = not args.no_progress
    configs = case_study_configs(args.beta, hidden_dim=args.hidden_dim, out_dim=args.out_dim, margin=args.margin,
                                 k=args.k, lr=args.lr, batch_size=args.batch_size, epochs=args.epochs,
                                 val_fraction=args.val_fraction, seed=args.seed)
    k = max(args.ks)
    if args.max_per_language is not None and args.max_per_language <= k:
        raise UserError(f"--max-per-language {args.max_per_language}: not more than the largest K ({k}): "
                        f"BackRetrieval Recall@{k} of every pair would be 1 for any model; raise --max-per-language or "
                        f"lower --ks")
    check_out_dir(args.out)  # created only once the case study has run: a refused run leaves no folder
    if (Path(args.out) / RESULTS).exists() and not args.overwrite:
        raise UserError(f"{args.out}: already holds a case study ({RESULTS}); pass --overwrite to replace it")
    seen: dict[Path, str] = {}
    for path in args.docs:  # the same file twice was read twice: each of its documents counted double
        key = Path(path).resolve()
        if key in seen:
            one = f"{path} given twice" if seen[key] == path else f"{seen[key]} and {path} are one file"
            raise UserError(f"--docs: {one}; expected each documents file once")
        seen[key] = path
    docs = [d for path in args.docs for d in read_documents(path)]
    lacks = languages_the_encoder_lacks(args.text_encoder, sorted({d.lang for d in docs}))
    if lacks:  # as retrieval, tag and tag-eval say it
        print(f"note: the text encoder {args.text_encoder!r} was not trained on {', '.join(lacks)}")
    train_docs, eval_docs = split_documents(docs, args.docs)
    eval_docs, small = languages_with_enough_images(eval_docs, k, args.docs)
    for lang, n in small.items():
        print(f"note: {lang}: {n} evaluation image(s), not more than the largest K ({k}): as a source its "
              f"BackRetrieval Recall@{k} would be 1 for any model, so its language pairs are left out")
    check_annotations(args.annotate, eval_docs)
    npy = precomputed_images(eval_docs, args.docs)
    if npy:
        for flag, value in (("--image-model", args.image_model), ("--image-weights", args.image_weights)):
            if value is not None:
                raise UserError(f"{flag} {value}: the documents' images are precomputed .npy features, so no image "
                                f"model runs; drop {flag}")
        image_feats = npy_image_features(document_images(eval_docs))
    else:
        args.image_model = args.image_model or DEFAULT_IMAGE_MODEL
        extractor = image_extractor(args.image_model, args.image_weights, args.cache_dir, args.device,
                                    progress=progress, online=args.online)
        image_feats = extractor.extract(document_images(eval_docs))

    loaded: dict = {}  # the text encoder, loaded once for every set of texts the case study embeds

    def embed(texts: list[str]) -> torch.Tensor:
        return torch.from_numpy(embed_cached(args.text_encoder, texts, args.cache_dir, progress, args.online, loaded))

    results, histories = run_case_study(train_docs, eval_docs, embed, image_feats, configs, args.ks,
                                        max_per_lang=args.max_per_language, seed=args.seed, progress=progress,
                                        device=args.device)
    small_pairs = drop_small_pairs(results, k)
    for pair, n in small_pairs.items():
        print(f"note: {pair}: {n} source document(s) once shared images are split between the sides, not more than "
              f"the largest K ({k}): left out")
    out = make_out_dir(args.out)
    g = "precomputed .npy features" if npy else args.image_model
    plot = pair_boxplot(results, f"bkr@{k}", out / f"boxplot_bkr{k}.png", annotate=args.annotate, g=g)
    print(f"BackRetrieval R@{k} over {len(results['frozen']['pairs'])} language pairs "
          f"({len(train_docs)} training documents, {len(eval_docs)} evaluation documents):")
    for name, s in pair_summary(results, k).items():
        print(f"  {name:<10} mean {s['mean']:.4f}  min {s['min']:.4f}  max {s['max']:.4f}  std {s['std']:.4f}")
    record = {"task": "backretrieval_triplet", "docs": list(args.docs), "text_encoder": args.text_encoder,
              "image_model": None if npy else f"{args.image_model}:{args.image_weights or 'package'}",
              "n_train": len(train_docs), "n_eval": len(eval_docs), "ks": args.ks, "boxplot": str(plot),
              "training": histories, "left_out": {"languages": small, "pairs": small_pairs},
              "models": {name: {"mean": res["mean"], "pairs": res["pairs"]} for name, res in results.items()}}
    write_json(record, out / RESULTS, args)
    return 0


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    """Add the ``triplet`` sub-command (``parent``: the common options)."""
    p = add_command(sub, parent, "triplet", "Triplet/TripletXL over documents, judged by BackRetrieval (Fig. 3)",
                    TRIPLET_HELP, "--docs recipes.jsonl --text-encoder use --out runs/triplet")
    p.add_argument("--docs", required=True, nargs="+", metavar="JSONL", help="document files: {lang, title, body, image?}")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder: results.json and the box plot")
    p.add_argument("--overwrite", action="store_true", help="replace the results.json already in --out")
    p.add_argument("--text-encoder", default="use", metavar="SPEC",
                   help="frozen text encoder: use | st:MODEL | npy:PATH | globetrotter:CKPT (default use)")
    p.add_argument("--image-model", default=None,
                   help=f"timm model for image features, for image files (default {DEFAULT_IMAGE_MODEL})")
    p.add_argument("--image-weights", default=None,
                   help="for image files: package (offline EfficientNet-Lite0, default) | FILE | hub")
    p.add_argument("--hidden-dim", type=positive_int, default=300, help="first dense layer width (default 300)")
    p.add_argument("--out-dim", type=positive_int, default=300, help="output width of x_t and x_b (default 300)")
    p.add_argument("--margin", type=float, default=0.1, help="eq. 1 margin alpha, >= 0 (default 0.1)")
    p.add_argument("--beta", type=float, default=0.01, help="eq. 2 beta of TripletXL (default 0.01)")
    p.add_argument("--k", type=positive_int, default=5, help="eq. 2 nearest neighbours per language (default 5)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--batch-size", type=positive_int, default=128, help="mini-batch size (default 128)")
    p.add_argument("--epochs", type=positive_int, default=40, help="epochs (default 40)")
    p.add_argument("--val-fraction", type=float, default=0.1,
                   help="held-out share for choosing the epoch (default 0.1)")
    p.add_argument("--ks", type=comma_separated(positive_int), default=[1, 5, 10], metavar="K,K",
                   help="the K of BkR Recall@K, comma-separated (default 1,5,10)")
    p.add_argument("--max-per-language", type=positive_int, default=None, metavar="N",
                   help="at most N documents per side of a pair (default: all)")
    p.add_argument("--annotate", type=comma_separated(str), default=[], metavar="A->B,A->B",
                   help="language pairs to label in the box plot, comma-separated (default: none)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the adapters' initialisation, batch order and held-out share, and of the "
                   "evaluation's non-matching split and sampling (default 0)")
    p.set_defaults(func=run)
