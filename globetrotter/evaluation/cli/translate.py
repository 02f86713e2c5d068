"""``eval.py translate``: translate sentences by retrieval over a saved index (and what ``translate-word`` shares
with it: the queries, the index options, the printing)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable, Sequence

from backretrieval.records import json_text
from globetrotter.argtypes import language_code, output_folder, positive_int
from globetrotter.errors import UserError

from ..tasks import translate as translate_task
from ..tasks.translate import RERANK
from ..translate import DEFAULT_IVF_MIN, DEFAULT_NPROBE, read_text_corpus
from . import common

_TRANSLATE_HELP = (
    "Translate sentences by retrieval: print the k nearest sentences of the target language in a corpus (a shard "
    "split folder, or a text file of one sentence per line in the target language), with their scores. By default "
    "the cosine of the text-text head ranks them; --ranking applies the ranking `eval.py select` chose on val (head, "
    "MaxSim, CSLS, with the statistics of its reference captions), the one the sentence figures are measured with. "
    "The corpus index (faiss; exact below --ivf-min sentences, IVF above) is built once, saved under --index and "
    "reloaded while the model and corpus are unchanged."
)


def queries(args: argparse.Namespace) -> list[str]:
    """The sentences (or words) given as arguments, then those of ``--input`` (one per line)."""
    found = list(args.text)
    if args.input:
        if not Path(args.input).is_file():
            raise UserError(f"{args.input}: query file not found (--input, one query per line)")
        found += read_text_corpus(args.input)
        if not found:
            raise UserError(f"{args.input}: no query in it (--input, one query per line)")
    if not found:
        raise UserError("translate: give sentences as arguments or --input FILE (one per line)")
    return found


def index_options(args: argparse.Namespace) -> dict:
    """The index keywords of :func:`~..tasks.translate.translate_sentences` and ``translate_words``."""
    return {"index": args.index, "out": args.out, "rebuild": args.rebuild, "ivf_min": args.ivf_min,
            "nprobe": args.nprobe}


def print_results(args: argparse.Namespace, texts: Sequence[str], results: Iterable[list[tuple[str, float]]]) -> None:
    """Each query and its hits, as text (each score right-aligned to the widest, a negative one's sign included, so
    that the texts stand in one column) or (``--json``) one JSON object a query."""
    results = list(results)
    width = max((len(f"{score:.3f}") for hits in results for _, score in hits), default=0)
    for query, hits in zip(texts, results):
        if args.json:
            print(json_text({"query": query, "target_lang": args.to,
                             "results": [{"text": t, "score": round(s, 4)} for t, s in hits]}, ensure_ascii=False))
        else:
            print(query)
            for text, score in hits:
                print(f"  {score:{width}.3f}  {text}")


def add_parser(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser, name: str, helptext: str, description: str,
               k: int, queries: str = "sentences") -> argparse.ArgumentParser:
    """A translate sub-command with the options both share (``parent``: the common options it uses; ``queries``:
    what it translates, ``sentences`` or ``words``)."""
    p = sub.add_parser(name, parents=[parent], help=helptext, description=description)
    common.add_model(p)
    p.add_argument("text", nargs="*", help=f"{queries} to translate")
    p.add_argument("--input", help="file of queries, one per line")
    p.add_argument("--to", required=True, type=language_code, help="target language code")
    p.add_argument("--k", type=positive_int, default=k, help="results per query (default %(default)s)")
    p.add_argument("--index", type=output_folder,
                   help="index folder (default: under --out/index, one per model and corpus)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the index even if a matching one is saved")
    p.add_argument("--ivf-min", type=positive_int, default=DEFAULT_IVF_MIN,
                   help="corpus size from which an IVF index is used (default %(default)s)")
    p.add_argument("--nprobe", type=positive_int, default=DEFAULT_NPROBE,
                   help="IVF cells searched per query (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object per query")
    return p


def _translate(args: argparse.Namespace) -> int:
    texts = queries(args)  # --rerank without --ranking, or under a chosen cosine: refused by translate_sentences
    results = translate_task.translate_sentences(
        args.model, texts, to=args.to, corpus=args.corpus, corpus_lang=args.corpus_language, source=args.source,
        k=args.k, ranking=args.ranking or None, rerank=args.rerank, batch_size=args.batch_size,
        device=args.device, **index_options(args))
    print_results(args, texts, results)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``translate`` sub-command."""
    own = common.common_options(with_seed=False, name=False)  # prints translations: no record, no sample
    p = add_parser(sub, own, "translate", "translate sentences by retrieval from a corpus", _TRANSLATE_HELP, k=5)
    p.add_argument("--corpus", required=True, help="target corpus: a split folder, or a text file with one sentence per line")
    p.add_argument("--corpus-language", type=language_code,
                   help="language of the corpus sentences, checked: it must be --to, the language searched (default: --to)")
    p.add_argument("--from", dest="source", type=language_code,
                   help="language of the queries (needed by --ranking with MaxSim or CSLS, whose statistics are per "
                        "language, and by a model with per-language tables: the Sigurdsson baseline)")
    p.add_argument("--ranking", metavar="RECORD",
                   help="an `eval.py select` record of this model: rank by the ranking it chose on val, as "
                        "`eval.py sentence --ranking` scores (the printed score is then that ranking's)")
    p.add_argument("--rerank", type=positive_int, metavar="K",
                   help="with --ranking of MaxSim or CSLS: the nearest sentences by the chosen head's cosine that the "
                        f"ranking re-scores (default {RERANK})")
    p.set_defaults(func=_translate)
