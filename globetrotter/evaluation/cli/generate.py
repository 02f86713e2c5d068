"""``eval.py generate``: translation by generation with a decoder on the frozen representation (paper A.5)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from globetrotter.argtypes import positive_int
from globetrotter.errors import UserError

from ..models import language_kwargs, require_trained
from ..sentence import parallel_set
from . import common

_GENERATE_HELP = (
    "Translation by generation (Globetrotter paper appendix A.5, Fig. 11). A small causal transformer "
    "decoder (--layers, trained here from scratch; the paper fine-tunes GPT-2) learns to write the "
    "--target language's captions of --train from the frozen model's sentence representation of each "
    "caption (the text-text head, --head), passed through one linear layer to a prefix of --prefix-length "
    "vectors before the words (--noise: Gaussian noise on the standardised representation while "
    "training, not in the paper). It never sees another language. It is then fed the representations of "
    "the other languages' captions of the parallel --split (--n-groups groups) and decodes greedily. "
    "METRICS (sacrebleu corpus scores, 0-100, one reference: the target caption of the same group): chrF "
    "and BLEU per source language, their mean over sources, the target itself (reconstruction, for "
    "reference) and a mismatched floor (each group decoded from another group's target caption). Prints "
    "--show examples (source, reference, generation). Run once per model (full, text-only, supervised) "
    "to compare; --seed fixes the sample, the decoder's init and its batch order."
)


def _generate(args: argparse.Namespace) -> int:
    from data_prep.shards import read_captions

    from .. import generation as gen

    require_trained(args.model, "generate")
    if args.show < 0:
        raise UserError(f"--show {args.show}: expected a number of examples >= 0")
    if not 0 <= args.noise < float("inf"):
        raise UserError(f"--noise {args.noise}: expected a standard deviation >= 0")
    if not 0 < args.lr < float("inf"):
        raise UserError(f"--lr {args.lr}: expected a learning rate > 0")
    test_metas = read_captions(args.split)
    test_langs = sorted({m["lang"] for m in test_metas})
    if args.target not in test_langs:
        raise UserError(f"{args.split}: no caption in target language {args.target!r} (--target; has {test_langs})")
    sources = common.languages(args.sources) or [lang for lang in test_langs if lang != args.target]
    unknown = sorted(set(sources) - set(test_langs))
    if unknown:
        raise UserError(f"{args.split}: no caption in source language(s) {unknown} (--sources; has {test_langs})")
    sources = [lang for lang in dict.fromkeys(sources) if lang != args.target]
    if not sources:
        raise UserError(f"--sources: give at least one language other than the target {args.target!r}")
    ps = parallel_set(test_metas, [args.target, *sources], n_groups=args.n_groups, seed=args.seed, where=str(args.split))
    if len(ps.group_ids) < 2:
        raise UserError(f"{args.split}: {len(ps.group_ids)} parallel group(s) in {[args.target, *sources]}; need at least 2")
    train_metas = read_captions(args.train)
    train_texts = [m["caption"] for m in train_metas if m["lang"] == args.target]
    if not train_texts:
        raise UserError(f"{args.train}: no caption in target language {args.target!r} to train the decoder on "
                        f"(--train; has {sorted({m['lang'] for m in train_metas})})")
    references = [c for c, lang in zip(ps.captions, ps.langs) if lang == args.target]
    leaked = len(set(references) & set(train_texts))

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    encoder = common.load(args)
    kw = dict(batch_size=args.batch_size, head=args.head)
    train_rep = encoder.encode_text(train_texts, **kw, **language_kwargs(encoder, args.target))
    test_rep = encoder.encode_text(ps.captions, **kw, **language_kwargs(encoder, ps.langs))
    config = gen.DecoderConfig(d_model=args.d_model, layers=args.layers, prefix_length=args.prefix_length,
                               max_tokens=args.max_tokens, steps=args.steps, batch_size=args.decoder_batch_size, lr=args.lr,
                               noise=args.noise)
    print(f"training a {args.layers}-layer decoder on {len(train_texts)} {args.target} captions of {args.train} "
          f"for {args.steps} steps", file=sys.stderr)
    decoder, vocab, log = gen.train_decoder(train_texts, train_rep, encoder.tokenizer, config, seed=args.seed)

    # rows: each source language, the target itself (reconstruction), and the mismatched floor
    rows = {lang: test_rep[ps.langs == lang] for lang in [*sources, args.target]}
    rows["mismatched"] = rows[args.target][gen.derangement(len(references), args.seed)]
    generated = {name: gen.generate(decoder, vocab, rep, batch_size=args.batch_size) for name, rep in rows.items()}
    scores = {name: gen.score(hyps, references, args.target) for name, hyps in generated.items()}

    source_text = {lang: [c for c, l in zip(ps.captions, ps.langs) if l == lang] for lang in [*sources, args.target]}
    examples = []
    for g in range(min(args.show, len(references))):
        examples.append({"group": ps.group_ids[g], "reference": references[g],
                         "generated": {name: generated[name][g] for name in generated},
                         "sources": {lang: source_text[lang][g] for lang in sources}})
        print(f"group {ps.group_ids[g]}  reference ({args.target}): {references[g]}")
        for lang in [*sources, args.target]:
            print(f"  {lang}: {source_text[lang][g]}\n    -> {generated[lang][g]}")
    print(f"translation by generation into {args.target}, {len(references)} parallel groups "
          f"(decoder loss {log['loss_first_tenth']:.2f} -> {log['loss_last_tenth']:.2f}, {log['seconds']:.0f} s)")
    print(f"  {'source':<26} {'chrF':>6} {'BLEU':>6}")
    labels = {args.target: f"{args.target} (reconstruction)", "mismatched": "mismatched (floor)"}
    for name, s in scores.items():
        print(f"  {labels.get(name, name):<26} {s['chrf']:6.2f} {s['bleu']:6.2f}")
    cross = [scores[lang] for lang in sources]
    metrics = {"chrf": float(np.mean([s["chrf"] for s in cross])), "bleu": float(np.mean([s["bleu"] for s in cross])),
               "per_source": {lang: scores[lang] for lang in sources},
               "reconstruction": scores[args.target], "mismatched": scores["mismatched"]}
    details = {"target": args.target, "sources": sources, "n_groups": len(references),
               "train": {"path": str(Path(args.train).resolve()), "captions": len(train_texts),
                         "test_references_in_train": leaked},
               "decoder": {**vars(config), **log}, "examples": examples}
    common.write_record(args, "generate", metrics, [args.target, *sources], details)
    return 0


def register(sub, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("generate", parents=[parent], help="translation by generation with a decoder on the frozen representation (paper A.5)",
                       description=_GENERATE_HELP)
    common.add_model(p)
    p.add_argument("--train", required=True, help="split whose --target captions train the decoder (the train split)")
    p.add_argument("--split", required=True, help="parallel test split folder (groups tie translations)")
    p.add_argument("--target", default="en", help="language the decoder writes (default %(default)s)")
    p.add_argument("--sources", help="comma-separated source languages (default: every other language of --split)")
    p.add_argument("--n-groups", type=positive_int, default=None, help="seeded sample of parallel groups (default: all)")
    p.add_argument("--show", type=int, default=5, help="examples printed (default %(default)s)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="text head to embed with (default: the text-text head)")
    p.add_argument("--steps", type=positive_int, default=600, help="decoder training steps (default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=2, help="decoder transformer layers (default %(default)s)")
    p.add_argument("--d-model", type=positive_int, default=128, help="decoder width, a multiple of its 4 heads (default %(default)s)")
    p.add_argument("--prefix-length", type=positive_int, default=4, help="prefix vectors from the representation (default %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=40, help="longest caption trained on and generated, in BPE tokens (default %(default)s)")
    p.add_argument("--decoder-batch-size", type=positive_int, default=64, help="decoder training batch (default %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="decoder peak learning rate, AdamW, warm-up then cosine (default %(default)s)")
    p.add_argument("--noise", type=float, default=0.0,
                   help="std of Gaussian noise on the standardised representation while training the decoder "
                        "(0 = the paper, default; 1 helped on the synthetic world, not on Flickr8k: see README)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: torch's choice; 1 is fastest on a busy machine)")
    p.set_defaults(func=_generate)
