"""``eval.py sentence``: sentence translation by retrieval (paper 5.2), with its ranking from the flags or from an
``eval.py select`` record (:mod:`.select`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from globetrotter.argtypes import non_negative_float, positive_int
from globetrotter.errors import UserError
from globetrotter.shell import program_name

from .. import models, plots
from ..ranking import HEADS, Ranking, needs_statistics
from ..reference import DEFAULT_SIZE
from ..tasks import choice as choice_task
from ..tasks import sentence as sentence_task
from . import common

SENTENCE_HELP = (
    "Sentence translation by retrieval (Globetrotter paper 5.2). A seeded sample of --n-groups parallel test groups "
    "is taken in all M languages; every sentence is a query whose M-1 translations are the positives. METRIC: the "
    "share of positives ranked in the query's top M-1 candidates (in %; chance beside it), and the per-language-pair "
    "matrix A[query, target] (heat map, languages by family as the paper's Fig. 7) with its asymmetry A - A^T (Fig. "
    "9). Candidates are all other-language sentences (docs/design.md section 7; --candidates all lets same-language "
    "ones compete). RANKING: cosine of the sentence embeddings of --head, plus W x MaxSim of the token rows "
    "(--maxsim W), less CSLS's neighbourhood radii per language pair (--retrieval csls); or the ranking an `eval.py "
    "select` record chose on val (--ranking). STATISTICS (CSLS radii, MaxSim idf and token hubness, the TF-IDF "
    "baseline's idf) come from --reference, unlabelled captions other than the evaluated ones (default: the train "
    "split beside --split), so a pair's score never depends on the other test sentences (inductive); "
    "--transductive takes them from the evaluated sentences instead and says so in the record. BASELINES as --model: "
    "tfidf (lower-cased character 1-4-gram TF-IDF, exact cosine; no learning, no images) and ridge:TRAIN_SPLIT (per "
    "language, a ridge map from TF-IDF to the frozen backbone's image features of TRAIN_SPLIT's feature cache; "
    "captions meet only through their predicted images)."
)


CSLS_K = Ranking.csls_k
"""CSLS neighbours of a ranking given by flags (the ranking's default)."""


def add_ranking_options(p: argparse.ArgumentParser) -> None:
    """The options of the ranking's statistics that ``sentence`` and ``select`` share: ``--reference``,
    ``--reference-size`` and ``--csls-k``."""
    p.add_argument("--reference", metavar="SPLIT",
                   help="split whose captions (in the evaluated languages; no groups or images read) give the "
                        "ranking's statistics (default: the train split beside the evaluated split)")
    p.add_argument("--reference-size", type=positive_int, metavar="N",
                   help=f"reference captions per language, a fixed sample of larger splits, the same for every --seed "
                        f"(default {DEFAULT_SIZE})")
    p.add_argument("--csls-k", type=positive_int, metavar="K", help=f"CSLS neighbourhood size (default: {CSLS_K})")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sentence`` sub-command."""
    own = common.common_options(seed_help="seed of the --n-groups sample, of tie breaks and of the bootstrap interval "
                                          "(default 0)")
    p = sub.add_parser("sentence", parents=[own], help="sentence translation accuracy (paper 5.2)",
                       description=SENTENCE_HELP)
    common.add_model(p, baselines=True)
    common.add_split(p)
    p.add_argument("--n-groups", type=positive_int, default=200, help="parallel groups sampled (paper: 200; default %(default)s)")
    p.add_argument("--candidates", choices=["other-language", "all"], default="other-language",
                   help="rank among other-language sentences (default) or all sentences (the paper's wording)")
    p.add_argument("--head", choices=HEADS, help="head embedding the sentences (default: text, the text-text head)")
    p.add_argument("--maxsim", type=non_negative_float, metavar="W",
                   help="add W x MaxSim: each token of one sentence paired with its most similar token of the other "
                        "(cosine of the model's input token rows less their hubness), idf-weighted, both ways "
                        "(ColBERT/BERTScore); trained runs only (default: 0, off)")
    p.add_argument("--retrieval", choices=("cosine", "csls"),
                   help="csls: less CSLS's radii r_b(x)/2 + r_a(y)/2 of each query-candidate language pair (Conneau et "
                        "al., 2018), which marks down hubs (default: cosine, the paper)")
    p.add_argument("--ranking", metavar="RECORD",
                   help="the ranking an `eval.py select` record chose (its JSON file), with the reference captions "
                        "its statistics came from; excludes --head, --maxsim, --retrieval and --transductive, and "
                        "any other --reference, --reference-size or --csls-k")
    add_ranking_options(p)
    p.add_argument("--transductive", action="store_true",
                   help="take the statistics (of CSLS, MaxSim or the TF-IDF baseline; a ranking without them has none) "
                        "from the evaluated sentences themselves (not inductive; recorded)")
    p.set_defaults(func=run_sentence)


def _scoring(args: argparse.Namespace) -> tuple[Ranking, str | None, int | None, choice_task.Choice | None]:
    """The ranking and its reference captions (split, per-language cap), from the flags or from a ``select`` record
    (``--ranking``: its choice, checked to be this model's, so that test is scored with the statistics the choice was
    made with)."""
    explicit = [flag for flag, value in (("--head", args.head), ("--maxsim", args.maxsim), ("--retrieval", args.retrieval))
                if value is not None]
    if not args.ranking:
        if args.csls_k is not None and args.retrieval != "csls":
            raise UserError(f"--csls-k {args.csls_k} sets CSLS's neighbourhood; give --retrieval csls or drop it")
        if args.reference_size is not None and args.transductive:
            raise UserError(f"--reference-size {args.reference_size} samples the reference captions; --transductive "
                            f"reads none (its statistics are the evaluated sentences'): drop one of them")
        ranking = Ranking(args.head or "text", args.maxsim or 0.0, args.retrieval == "csls", args.csls_k or CSLS_K)
        return ranking, args.reference, args.reference_size or DEFAULT_SIZE, None
    if explicit:
        raise UserError(f"--ranking {args.ranking} sets the whole ranking; drop {', '.join(explicit)}")
    choice = choice_task.read_choice(args.ranking)
    chosen_with = f"--ranking {args.ranking} was chosen with statistics from {choice.reference}"
    if args.transductive:
        raise UserError(f"{chosen_with}; --transductive would score it with others: drop one of them")
    if args.reference is not None and Path(args.reference).resolve() != Path(choice.reference).resolve():
        raise UserError(f"{chosen_with}; --reference {args.reference} would score it with others: drop --reference, "
                        f"or choose again with `{program_name('eval')} select --reference {args.reference}`")
    if args.csls_k is not None and args.csls_k != choice.ranking.csls_k:
        raise UserError(f"--ranking {args.ranking} was chosen with --csls-k {choice.ranking.csls_k}; drop --csls-k "
                        f"{args.csls_k}")
    if args.reference_size is not None and args.reference_size != choice.reference_size:
        raise UserError(f"{chosen_with}, {choice.reference_size} captions per language; --reference-size "
                        f"{args.reference_size} would score it with others: drop --reference-size")
    choice.check(model=common.model_entry(args)["path"], **models.fingerprint(models.current_checkpoint(args.model)))
    return choice.ranking, choice.reference, choice.reference_size, choice


def run_sentence(args: argparse.Namespace) -> int:
    """Run ``sentence`` with the parsed options: print the figure, write the record and its plots; exit code 0."""
    ranking, reference, reference_size, choice = _scoring(args)
    encoder = common.load(args)
    if args.reference_size is not None and choice is None and not needs_statistics(encoder, ranking):
        raise UserError(f"--reference-size {args.reference_size} samples the reference captions of the ranking's "
                        f"statistics; the {ranking.label} ranking reads none (CSLS, MaxSim and the TF-IDF baseline's "
                        f"idf do): drop --reference-size")
    result = sentence_task.evaluate(
        encoder, args.split, languages=args.languages, n_groups=args.n_groups,
        ranking=ranking, reference=reference, reference_size=reference_size, choice=choice,
        transductive=args.transductive, candidates=args.candidates, seed=args.seed, batch_size=args.batch_size,
        name=models.model_name(args.model, args.name))
    result.model = common.model_entry(args, encoder)
    prefix, langs = common.plot_prefix(args, "sentence"), result.languages
    overall = (f"\noverall {100 * result.metrics['sentence_translation']:.2f}%, chance "
               f"{100 * result.metrics['chance']:.2f}% (top {result.details['k']}, {result.details['n_groups']} groups)")
    written = [
        plots.plot_language_matrix(result.arrays["matrix"], langs, f"{prefix}-matrix.png",
                                   "Sentence translation by query → target language (%)" + overall),
        plots.plot_language_matrix(result.arrays["asymmetry"], langs, f"{prefix}-asymmetry.png",
                                   "Asymmetry A − Aᵀ (percentage points)" + overall, diverging=True, label="pp"),
    ]
    m, d = result.metrics, result.details
    scoring = d["scoring"]
    where = {"none": "no statistics", "inductive": f"statistics from {result.config['reference']}",
             "transductive": "TRANSDUCTIVE: statistics from the evaluated sentences"}[scoring["statistics"]]
    print(f"sentence translation: {100 * m['sentence_translation']:.2f}% of translations in the top {d['k']} "
          f"(chance {100 * m['chance']:.2f}%), {d['n_groups']} groups x {len(langs)} languages; "
          f"ranking {scoring['label']}, {where}; 95% interval over the groups "
          f"{100 * d['interval']['lo']:.2f}–{100 * d['interval']['hi']:.2f}%")
    if result.config["oracle_choice"]:
        print(f"note: {args.ranking} is the oracle's choice, made on parallel val text: a ceiling of the ranking, not "
              f"a figure of the method (whose choice is `eval.py select`'s, without parallel text)")
    if d["n_groups"] < args.n_groups:  # the figure is of fewer groups than asked
        print(f"note: --n-groups {args.n_groups}, but {args.split} has {d['n_groups']} groups in every one of "
              f"{','.join(langs)}: all of them were scored (chance and figure are of {d['n_groups']} groups, not "
              f"{args.n_groups})")
    common.write(result, args, written)
    return 0
