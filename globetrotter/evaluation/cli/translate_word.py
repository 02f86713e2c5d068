"""``eval.py translate-word``: translate words by retrieval over the vocabulary (a saved index, as ``translate``)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import language_code

from ..tasks import translate as translate_task
from . import common
from .translate import add_parser, index_options, print_results, queries

_TRANSLATE_WORD_HELP = (
    "Translate words by retrieval over the vocabulary: the k nearest target-language tokens of each "
    "query word (target vocabulary = the tokens seen in --to captions of --corpus; by default, of the captions the "
    "model's tokenizer was trained on, else the whole BPE vocabulary of every language), by cosine (nn) or CSLS, "
    "from input token embeddings or contextual ones. The "
    "vocabulary index is saved and reloaded like translate's."
)


def _translate_word(args: argparse.Namespace) -> int:
    texts = queries(args)
    results = translate_task.translate_words(
        args.model, texts, to=args.to, source=args.source, corpus=args.corpus, embeddings=args.embeddings,
        method=args.method, k=args.k, device=args.device, **index_options(args))
    print_results(args, texts, results)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``translate-word`` sub-command."""
    own = common.common_options(with_seed=False, name=False, batch_size=False)  # no record, sample or encoding batch
    p = add_parser(sub, own, "translate-word", "translate words by retrieval over the vocabulary",
                   _TRANSLATE_WORD_HELP, k=10, queries="words")
    p.add_argument("--corpus", help="split folder whose captions give each language's vocabulary (default: the captions the "
                        "tokenizer was trained on, when on this machine; else the whole vocabulary)")
    p.add_argument("--from", dest="source", type=language_code, help="source language (for the word's form and CSLS)")
    p.add_argument("--embeddings", choices=["input", "contextual"], default="input", help="word embeddings (default: input)")
    p.add_argument("--method", choices=["nn", "csls"], default="nn", help="ranking (default: nn)")
    p.set_defaults(func=_translate_word)
