"""``eval.py generate``: translation by generation with a decoder on the frozen representation (paper A.5)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import language_code, language_codes, positive_int

from ..tasks import generate as generate_task
from . import common

_GENERATE_HELP = (
    "Translation by generation (Globetrotter paper appendix A.5, Fig. 11). A small causal transformer "
    "decoder (--layers, trained here from scratch; the paper fine-tunes GPT-2) learns to write the "
    "--target language's captions of --train from the frozen model's sentence representation of each "
    "caption (the text-text head, --head), passed through one linear layer to a prefix of --prefix-length "
    "vectors before the words. It never sees another language. It is then fed the representations of "
    "the other languages' captions of the parallel --split (--n-groups groups) and decodes greedily. "
    "METRICS (sacrebleu corpus scores, 0-100, one reference: the target caption of the same group): chrF "
    "and BLEU per source language, their mean over sources, the target itself (reconstruction, for "
    "reference) and a mismatched floor (each group decoded from another group's target caption). Prints "
    "--show examples (source, reference, generation). Run once per model (full, text-only, supervised) "
    "to compare; --seed fixes the sample, the decoder's init and its batch order."
)


def _generate(args: argparse.Namespace) -> int:
    from ..generation import DecoderConfig

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    decoder = DecoderConfig(d_model=args.d_model, layers=args.layers, prefix_length=args.prefix_length,
                            max_tokens=args.max_tokens, steps=args.steps, batch_size=args.decoder_batch_size,
                            lr=args.lr)
    result = generate_task.evaluate(
        args.model, args.split, args.train, target=args.target, sources=args.sources,
        n_groups=args.n_groups, show=args.show, head=args.head, decoder=decoder, seed=args.seed,
        batch_size=args.batch_size, name=args.name, device=args.device)  # says on stderr when the decoder starts training
    m, d, target = result.metrics, result.details, args.target
    for ex in d["examples"]:
        print(f"group {ex['group']}  reference ({target}): {ex['reference']}")
        for lang, text in [*ex["sources"].items(), (target, ex["reference"])]:
            print(f"  {lang}: {text}\n    -> {ex['generated'][lang]}")
    log = d["decoder"]
    print(f"translation by generation into {target}, {d['n_groups']} parallel groups "
          f"(decoder loss {log['loss_first_tenth']:.2f} -> {log['loss_last_tenth']:.2f}, {log['seconds']:.0f} s)")
    print(f"  {'source':<26} {'chrF':>6} {'BLEU':>6}")
    rows = {**m["per_source"], f"{target} (reconstruction)": m["reconstruction"],
            "mismatched (floor)": m["mismatched"]}
    for label, s in rows.items():
        print(f"  {label:<26} {s['chrf']:6.2f} {s['bleu']:6.2f}")
    common.write(result, args)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``generate`` sub-command."""
    own = common.common_options(seed_help="seed of the --n-groups sample, of the decoder's initialisation and batch "
                                          "order, and of the mismatched floor (default 0)",
                                device_help="torch device of the model (the decoder trains on the CPU): cpu, cuda, "
                                            "cuda:1, ... (default cpu)")
    p = sub.add_parser("generate", parents=[own], help="translation by generation with a decoder on the frozen representation (paper A.5)",
                       description=_GENERATE_HELP)
    common.add_model(p)
    p.add_argument("--train", required=True, help="split whose --target captions train the decoder (the train split; not --split, nor a "
                        "parallel split sharing its groups or images)")
    p.add_argument("--split", required=True, help="parallel test split folder (groups tie translations)")
    p.add_argument("--target", default="en", type=language_code,
                   help="language the decoder writes (default %(default)s)")
    p.add_argument("--sources", type=language_codes, metavar="CODES",
                   help="comma-separated source languages (default: every other language of --split)")
    p.add_argument("--n-groups", type=positive_int, default=None, help="seeded sample of parallel groups (default: all)")
    p.add_argument("--show", type=int, default=5, help="examples printed (default %(default)s)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="head to embed the captions with: text (the text-text head) or cross "
                   "(the cross-modal head) (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=600, help="decoder training steps (default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=2, help="decoder transformer layers (default %(default)s)")
    p.add_argument("--d-model", type=positive_int, default=128, help="decoder width, a multiple of its 4 heads (default %(default)s)")
    p.add_argument("--prefix-length", type=positive_int, default=4, help="prefix vectors from the representation (default %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=40, help="longest caption trained on and generated, in BPE tokens (default %(default)s)")
    p.add_argument("--decoder-batch-size", type=positive_int, default=64, help="decoder training batch (default %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="decoder peak learning rate, AdamW, warm-up then cosine (default %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: this process's share of the free cores, as every eval.py "
                        "command; 1 is fastest on a busy machine)")
    p.set_defaults(func=_generate)
