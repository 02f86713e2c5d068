"""``eval.py correspondence``: sentence correspondence transfer to unseen languages (paper A.1)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import comma_separated, int_at_least, language_codes, positive_int

from ..correspondence import MIN_UNITS
from ..tasks import correspondence as correspondence_task
from . import common

_CORRESPONDENCE_HELP = (
    "Sentence correspondence transfer test (Globetrotter paper appendix A.1, Tables 5 and 7). Every "
    "caption of --split is lower-cased, its final punctuation dropped, and cut in two at a word "
    "boundary (a character boundary for scripts without spaces, e.g. zh/ja) at a seeded relative "
    "position in [0.35, 0.65]; for exactly half of the captions the second half is swapped with that "
    "of another caption of the same language, of another image, with (nearly) the same second-half "
    "length, so case, word breaks, length and cut position give nothing away (the record's "
    "surface_shortcut_accuracy, a logistic regression on those lengths, should be ~50%). The model is "
    "frozen; its token states feed a probe of one transformer layer with one attention head and a "
    "linear classifier on the sentence token, trained on the first half of the languages "
    "(alphabetical; --seen to choose) for --epochs. METRICS (fractions): seen_accuracy on held-out "
    "images of the seen languages, unseen_accuracy on the other languages (never seen by the probe), "
    "chance 0.5 (accuracies: the mean over --probe-seeds), relative_decrease = (seen - unseen) / (seen - 0.5) of "
    "those means (the paper's, in % there; per seed in the record), n/a unless seen is above chance beyond noise "
    "(one-sided binomial test, p < 0.05); per-language accuracy. --seed fixes the task (cuts, swaps, train/test "
    "images), --probe-seeds the probe's init and batch order."
)


def _correspondence(args: argparse.Namespace) -> int:
    result = correspondence_task.evaluate(
        args.model, args.split, languages=args.languages, seen=args.seen,
        max_per_lang=args.max_per_language, test_fraction=args.test_fraction, min_units=args.min_units,
        epochs=args.epochs, probe_batch_size=args.probe_batch_size, lr=args.lr, probe_seeds=args.probe_seeds,
        seed=args.seed, batch_size=args.batch_size, name=args.name, device=args.device)
    m, d = result.metrics, result.details
    rel = m["relative_decrease"]
    print(f"sentence correspondence: seen {100 * m['seen_accuracy']:.2f}% ({','.join(d['seen_languages'])}), unseen "
          f"{100 * m['unseen_accuracy']:.2f}% ({','.join(d['unseen_languages'])}), chance 50%; relative decrease "
          f"{'n/a (seen not above chance beyond noise)' if rel is None else f'{100 * rel:.2f}%'}; surface-only shortcut "
          f"{100 * m['surface_shortcut_accuracy']:.1f}%; {len(args.probe_seeds)} probe seed(s)")
    common.write(result, args)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``correspondence`` sub-command."""
    own = common.common_options(seed_help="seed of the task: the cuts, the swapped halves and the held-out images of "
                                          "the seen languages (default 0; the probe's seeds are --probe-seeds)")
    p = sub.add_parser("correspondence", parents=[own], help="sentence correspondence transfer to unseen languages (paper A.1)",
                       description=_CORRESPONDENCE_HELP)
    common.add_model(p)
    common.add_split(p, what="split folder whose captions build the task, e.g. the test split as in the paper",
                     detail="shards + manifest.json; no groups needed")
    p.add_argument("--seen", type=language_codes, metavar="CODES",
                   help="comma-separated languages the probe trains on (default: first half of the sorted languages, rounded up)")
    p.add_argument("--max-per-language", type=positive_int, default=2000,
                   help="training examples per seen language and test examples per unseen language (default %(default)s)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="share of seen-language images held out for the seen test (default %(default)s)")
    p.add_argument("--min-units", type=int_at_least(MIN_UNITS, "a caption is cut in two halves"), default=MIN_UNITS,
                   help=f"shortest caption used, in words (characters for unspaced scripts) (default and minimum: {MIN_UNITS})")
    p.add_argument("--epochs", type=positive_int, default=3, help="probe training epochs (paper: 1, on a far larger split; default %(default)s)")
    p.add_argument("--probe-batch-size", type=positive_int, default=64, help="probe training batch (default %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="probe peak learning rate, AdamW one-cycle (default %(default)s)")
    p.add_argument("--probe-seeds", type=comma_separated(int), default=[0, 1, 2], metavar="SEED,SEED",
                   help="probe seeds, comma-separated; metrics are their mean (default 0,1,2)")
    p.set_defaults(func=_correspondence)
