"""``eval.py word``: word translation by retrieval (paper 5.3, MUSE), and ``eval.py build-dictionary``: its tf-idf
ground truth from a parallel split (paper B.2)."""
from __future__ import annotations

import argparse
from pathlib import Path

from globetrotter.argtypes import comma_separated, non_negative_int, one_of, output_folder, positive_int
from globetrotter.errors import UserError

from .. import plots
from ..tasks import word as word_task
from ..word import PROCRUSTES_ITER, PROCRUSTES_K
from ..word_dictionary import IDF, MIN_COUNT, TOP_K
from . import common

_WORD_HELP = (
    "Word translation by retrieval (paper 5.3, appendix B.2; MUSE). Ground truth: a lexicon folder of "
    "<src>-<tgt>.txt files (--dictionary; the synthetic world writes one) or the paper's tf-idf "
    "dictionary built on the fly from the parallel --split. METRICS per ordered language pair, averaged "
    "over pairs: Recall@10 = share of dictionary pairs whose target word is among the 10 nearest "
    "target-language words of the source word (paper Fig. 5), with and without pairs of identical "
    "tokens; MUSE P@1/5/10 = share of unique source words with any valid translation in the top k. "
    "Ranking by cosine nearest neighbour (nn) or CSLS = 2cos(x,y) - r_T(x) - r_S(y) (mean cosine to 10 "
    "nearest neighbours). Word embeddings: the input token embeddings (the paper; a multi-token word is "
    "the mean of its tokens) or contextual (each word run through the encoder alone). Optional "
    "Procrustes refinement: pairwise, or multi-language (one orthogonal map per language), anchors "
    "from mutual k-nearest neighbours (k=5)."
)
_BUILD_HELP = (
    "Build the tf-idf word-translation ground truth of the Globetrotter paper (appendix B.2; its "
    "authors never released theirs) from a parallel split. For token t of language A, its document is "
    "every token of the B translations of the A sentences containing t; tf-idf(t, u) = tf(u in doc) x "
    "idf(u); (t, u) is kept when u is in t's top-k and t in u's top-k (k=5). Writes MUSE-format "
    "<src>-<tgt>.txt files (both directions; a BPE token's leading space is written as U+2581) and "
    "summary.json to --dictionary-out. Tokens are the model's BPE tokens (--model or --tokenizer) or "
    "lower-cased words (--words, for space-separated scripts: languages written without spaces are left out). "
    "An earlier build's --dictionary-out has its dictionary files replaced; a folder of dictionary files no "
    "build-dictionary wrote is refused."
)


def _refuse_unused(args: argparse.Namespace, names: tuple[str, ...], what: str, remedy: str) -> None:
    """A one-line error naming each option of ``names`` the user gave (its default None: not given), which sets
    ``what`` that this evaluation does not use; ``remedy``: what would use them."""
    given = [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in names if getattr(args, name) is not None]
    if given:
        raise UserError(f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} {what}; {remedy} "
                        f"{'it' if len(given) == 1 else 'them'}")


def _word(args: argparse.Namespace) -> int:
    if args.dictionary:
        _refuse_unused(args, ("top_k", "idf", "min_count"), "the tf-idf ground truth built from --split",
                       f"--dictionary {args.dictionary} replaces it: drop")
    if set(args.procrustes) == {"none"}:
        _refuse_unused(args, ("procrustes_k", "procrustes_iter"), "the Procrustes refinement",
                       "give --procrustes pairwise or multi, or drop")
    # its warnings (duplicate dictionary pairs, too few candidates) are one 'warning:' line each: run_cli's
    result = word_task.evaluate(
        args.model, split=args.split, dictionary=args.dictionary, languages=args.languages,
        embeddings=args.embeddings, methods=args.method, procrustes=args.procrustes,
        procrustes_k=args.procrustes_k or PROCRUSTES_K, procrustes_iter=args.procrustes_iter or PROCRUSTES_ITER,
        candidates=args.candidates, top_k=args.top_k or TOP_K, idf=args.idf or IDF,
        min_count=args.min_count or MIN_COUNT, name=args.name, device=args.device)
    prefix = common.plot_prefix(args, "word")
    written: list[Path] = []
    for tag, m in result.metrics.items():
        method, proc = tag.split("/")
        pairs = result.details[tag]["pairs"].values()
        chance = [p["chance_recall"] for p in pairs if p.get("chance_recall") is not None]
        print(f"word translation [{args.embeddings} embeddings, {method}, procrustes={proc}]: "
              f"R@10 {100 * m['recall@10']:.1f}% ("
              + (f"chance {100 * sum(chance) / len(chance):.1f}%, " if chance else "")
              + f"no identical {100 * m['recall@10_no_identical']:.1f}%), "
              + " ".join(f"P@{k} {100 * m[f'precision@{k}']:.1f}%" for k in (1, 5, 10)))
        if not written:  # the heat map of the first setting (the record holds every setting's matrix)
            setting = f"{args.embeddings} embeddings, {method}, " + ("no Procrustes" if proc == "none"
                                                                      else f"{proc} Procrustes")
            title = f"Word translation Recall@10 (%)\n{setting}" + (
                f"\nchance {100 * sum(chance) / len(chance):.2g}% (K / target words, mean over pairs)" if chance else "")
            written.append(plots.plot_language_matrix(result.arrays["recall"][tag], result.arrays["languages"],
                                                      f"{prefix}-recall10.png", title))
        multi = result.details[tag]["procrustes_log"].get("multi")
        convergence = f"{prefix}-procrustes-multi.png"
        if proc == "multi" and multi and str(convergence) not in map(str, written):  # one map for every method
            written.append(plots.plot_convergence(multi, convergence, "Multi-language Procrustes\n"
                                                  f"({args.embeddings} embeddings; the same maps for every method)"))
    common.write(result, args, written)
    return 0


def _build_dictionary(args: argparse.Namespace) -> int:
    built = word_task.build_dictionary(
        args.split, args.dictionary_out, tokenizer=args.tokenizer, model=args.model, words=args.words,
        languages=args.languages, n_groups=args.n_groups, top_k=args.top_k, idf=args.idf,
        min_count=args.min_count, seed=args.seed)
    sizes = [len(p) for p in built.pairs.values()]
    print(f"wrote {len(built.pairs)} dictionaries ({min(sizes)}–{max(sizes)} pairs each) from "
          f"{built.summary['groups']} parallel groups to {built.folder}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``word`` and ``build-dictionary`` sub-commands."""
    # token rows or one word at a time: no encoding batch; every group of --split is read: nothing sampled
    own = common.common_options(batch_size=False, with_seed=False)  # every group of --split is read: no sample
    p = sub.add_parser("word", parents=[own], help="word translation Recall@10 and MUSE P@k (paper 5.3)", description=_WORD_HELP)
    common.add_model(p)
    common.add_split(p, required=False, what="parallel split for the tf-idf ground truth and token frequencies")
    p.add_argument("--dictionary", help="folder of <src>-<tgt>.txt lexicon files (MUSE format); default: tf-idf from --split")
    p.add_argument("--embeddings", choices=["input", "contextual"], default="input",
                   help="input token embeddings (the paper; default) or contextual word embeddings")
    p.add_argument("--method", type=comma_separated(one_of("nn", "csls")), default=["nn", "csls"], metavar="M,M",
                   help="ranking(s), comma-separated: nn, csls (default: nn,csls)")
    p.add_argument("--procrustes", type=comma_separated(one_of("none", "pairwise", "multi")), default=["none"],
                   metavar="P,P", help="refinement(s) before ranking, comma-separated: none, pairwise, multi "
                                       "(default: none)")
    p.add_argument("--procrustes-k", type=positive_int,
                   help=f"with --procrustes pairwise or multi: mutual nearest neighbours for anchors (paper and default: "
                        f"{PROCRUSTES_K})")
    p.add_argument("--procrustes-iter", type=positive_int,
                   help=f"with --procrustes pairwise or multi: refinement rounds (default {PROCRUSTES_ITER})")
    p.add_argument("--candidates", choices=["dictionary", "split"], default="dictionary",
                   help="target candidates: the language's dictionary words (default) or also every token seen in its --split captions")
    _tfidf_args(p, given=True)
    p.set_defaults(func=_word)

    # its own options: it writes no record (no --out, --name) and encodes nothing (no --batch-size, --device)
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--seed", type=non_negative_int, default=0, help="seed of the --n-groups sample (default 0)")
    p = sub.add_parser("build-dictionary", parents=[own], help="tf-idf word ground truth from a parallel split (paper B.2)", description=_BUILD_HELP)
    common.add_split(p)
    p.add_argument("--dictionary-out", type=output_folder,
                   help="output folder (default: <split>/../dictionary-tfidf)")
    p.add_argument("--tokenizer", help="tokenizer.json to split captions into BPE tokens")
    common.add_model(p, required=False)
    p.add_argument("--words", action="store_true", help="use lower-cased words instead of BPE tokens")
    p.add_argument("--n-groups", type=positive_int, default=None, help="use a seeded sample of this many groups (default: all)")
    _tfidf_args(p)
    p.set_defaults(func=_build_dictionary)


def _tfidf_args(p: argparse.ArgumentParser, given: bool = False) -> None:
    """The tf-idf rule's options; ``given``: their default is None (the rule's defaults apply), so that a value the
    user gave is told from the default."""
    top_k, idf, min_count = (None, None, None) if given else (TOP_K, IDF, MIN_COUNT)
    p.add_argument("--top-k", type=positive_int, default=top_k,
                   help=f"mutual top-k of the tf-idf rule (paper and default: {TOP_K})")
    p.add_argument("--idf", choices=["smooth", "paper"], default=idf,
                   help="idf: 'paper' = log(|D|/df) (eq. 7; 0 for tokens in every document, so it ranks nothing on "
                        "small vocabularies), 'smooth' = log((1+|D|)/(1+df))+1 (default)")
    p.add_argument("--min-count", type=positive_int, default=min_count,
                   help=f"ignore tokens seen in fewer sentences (default {MIN_COUNT})")
