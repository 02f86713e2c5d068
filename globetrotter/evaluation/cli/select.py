"""``eval.py select``: the ranking of ``eval.py sentence`` (:mod:`.sentence`), chosen on val by BackRetrieval."""
from __future__ import annotations

import argparse
import shlex
import sys

from globetrotter.argtypes import comma_separated, language_codes, non_negative_float, one_of, positive_int
from globetrotter.errors import UserError
from globetrotter.shell import program_command

from .. import models, plots
from ..models import is_baseline
from ..ranking import HEADS
from ..reference import DEFAULT_SIZE
from ..tasks import select as select_task
from ..tasks.choice_margins import read_against, uncertainty_line
from . import common
from .sentence import CSLS_K, add_ranking_options

SELECT_HELP = (
    "Choose the sentence ranking on val, never on test: every candidate (head x MaxSim weight x CSLS) scores the val "
    "split's captions (the trainer's validation sample: same split, size, seed and image similarity for a run) and "
    "BackRetrieval judges it, with no parallel text: the mean of BkR@K over the source languages (each one's captions retrieving among every other language's at "
    "once) and K. The "
    "highest mean wins; a tie goes to the simpler ranking. Statistics come from --reference as in `eval.py sentence`. "
    "Writes the record (every candidate's score, the choice and why, its score on each val query); `eval.py sentence "
    "--ranking RECORD` applies it. Two models are compared on val with --against: the other's record, made on the same "
    "queries."
)


RETRIEVALS = ("cosine", "csls")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``select`` sub-command."""
    own = common.common_options(seed=None, seed_help="seed of the val sample and of the bootstrap intervals (default: "
                                                    "the run's seed, else 0)",
                                device_help="torch device of the model and of BackRetrieval's image model (g): cpu, "
                                            "cuda, cuda:1, ... (default cpu)")
    p = sub.add_parser("select", parents=[own], help="choose the sentence ranking on val by BackRetrieval",
                       description=SELECT_HELP)
    common.add_model(p, baselines=True)
    p.add_argument("--val", metavar="SPLIT", help="non-parallel split to choose on (default: the run's data.root/data.val_split); "
                        "neither it nor --reference may be a test split")
    p.add_argument("--languages", type=language_codes, metavar="CODES",
                   help="comma-separated language codes (default: all of the val split)")
    p.add_argument("--heads", type=comma_separated(one_of(*HEADS)), default=list(HEADS), metavar="HEAD,HEAD",
                   help=f"heads to try, comma-separated (default {','.join(HEADS)})")
    p.add_argument("--maxsim", type=comma_separated(non_negative_float), default=list(select_task.DEFAULT_MAXSIM),
                   metavar="W,W", help="MaxSim weights to try, comma-separated, 0 = off (default "
                                       f"{','.join(f'{w:g}' for w in select_task.DEFAULT_MAXSIM)})")
    p.add_argument("--retrieval", type=comma_separated(one_of(*RETRIEVALS)), default=list(RETRIEVALS),
                   metavar="R,R", help=f"rankings to try, comma-separated (default {','.join(RETRIEVALS)})")
    p.add_argument("--max-per-language", type=positive_int,
                   help="val captions per language (default: the run's val.max_per_lang; 300 for a baseline)")
    p.add_argument("--image-features", metavar="SPEC",
                   help="BackRetrieval's image similarity g (default: the run's val.image_features; "
                        f"{select_task.DEFAULT_IMAGE_FEATURES} for a baseline)")
    p.add_argument("--against", metavar="RECORD",
                   help="another model's select record on the same val queries: also print and record the paired "
                        "95%% interval of this choice's margin over that one (is the new model better, on val?)")
    add_ranking_options(p)
    p.set_defaults(func=run_select)


def run_select(args: argparse.Namespace) -> int:
    """Run ``select`` with the parsed options: choose the ranking on val, print it and the command that applies it to
    test, write the record and its plot; exit code 0."""
    maxsim, rankings = args.maxsim, args.retrieval
    if args.csls_k is not None and "csls" not in rankings:
        raise UserError(f"--csls-k {args.csls_k} sets CSLS's neighbourhood; add csls to --retrieval or drop it")
    if is_baseline(args.model):  # its candidates are the text head's cosine and CSLS: nothing else is tried
        asked = (("--heads", args.heads, list(HEADS), set(args.heads) <= {"text"}),
                 ("--maxsim", maxsim, list(select_task.DEFAULT_MAXSIM), set(maxsim) <= {0.0}))
        for flag, value, default, within_tried in asked:
            if value != default and not within_tried:
                raise UserError(f"{flag} {','.join(f'{v:g}' if isinstance(v, float) else v for v in value)}: the "
                                f"TF-IDF and ridge baselines have one embedding and no token "
                                f"rows, so select tries only the text head's cosine and CSLS; drop {flag}")
    if args.against:  # checked before the model loads: a bad record is an error before any work
        read_against(args.against)
    encoder = common.load(args)
    result = select_task.select_ranking(
        encoder, val=args.val, languages=args.languages, heads=args.heads,
        maxsim=maxsim, csls=[r == "csls" for r in rankings], csls_k=args.csls_k or CSLS_K, reference=args.reference,
        reference_size=args.reference_size or DEFAULT_SIZE, max_per_lang=args.max_per_language,
        image_features=args.image_features, seed=args.seed, batch_size=args.batch_size, device=args.device,
        against=args.against, log=lambda s: print(s, file=sys.stderr))
    result.model = common.model_entry(args, encoder)
    print(f"chosen on val: {result.metrics['chosen']} ({result.details['reason']}); statistics from "
          f"{result.config['reference']}")
    print(uncertainty_line(result.details))
    figure = plots.plot_choice(result.details["candidates"], f"{common.plot_prefix(args, 'select')}-choice.png",
                               f"{models.model_name(args.model, args.name)}: rankings on val against the choice")
    path = common.write(result, args, [figure])
    print(f"apply it to test: {program_command('eval')} sentence --model {shlex.quote(str(args.model))} --split SPLIT "
          f"--languages {','.join(result.languages)} --ranking {shlex.quote(str(path))}")
    return 0
