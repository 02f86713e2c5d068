"""``eval.py word``: word translation by retrieval (paper 5.3, MUSE), and ``eval.py build-dictionary``: its tf-idf
ground truth from a parallel split (paper B.2)."""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
import json

import numpy as np

from globetrotter.argtypes import positive_int
from globetrotter.errors import UserError

from .. import plots
from ..models import language_kwargs, require_trained, token_embeddings
from ..records import matrix_dict
from ..word import (
    CaptionTokenizer,
    WordSpace,
    both_directions,
    build_dictionaries,
    input_word_embeddings,
    is_fragment,
    key_text,
    read_dictionaries,
    word_translation,
    write_dictionary,
)
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
    "lower-cased words (--words, for space-separated scripts)."
)


def _word_spaces(encoder, args, words_by_lang: dict[str, list[str]], counts: dict[str, Counter]) -> dict[str, WordSpace]:
    spaces = {}
    if args.embeddings == "input":
        shared = None if getattr(encoder, "needs_language", False) else encoder.token_embeddings()
        for lang, words in words_by_lang.items():
            tokens, matrix = shared or token_embeddings(encoder, lang)  # per-language tables
            kept, emb = input_word_embeddings(words, tokens, matrix, encoder.tokenizer, counts.get(lang))
            spaces[lang] = WordSpace(kept, emb)
    else:
        for lang, words in words_by_lang.items():
            words = [w for w in words if not is_fragment(w)]  # a byte fragment is no text to encode
            emb = (encoder.encode_words([key_text(w) for w in words], **language_kwargs(encoder, lang)) if words
                   else np.zeros((0, 1), np.float32))
            spaces[lang] = WordSpace(words, emb)
    return spaces


def _word(args: argparse.Namespace) -> int:
    require_trained(args.model, "word")
    if not args.dictionary and not args.split:
        raise UserError("word: give --split (a parallel split, for the tf-idf ground truth) or --dictionary")
    encoder = common.load(args)
    tokenizer = CaptionTokenizer(encoder.tokenizer)
    tokenized: dict[str, list[list[str]]] = {}
    if args.split:
        ps = common.read_parallel(args, None)
        for lang in ps.languages:
            tokenized[lang] = tokenizer([c for c, l in zip(ps.captions, ps.langs) if l == lang])
    counts = {lang: Counter(t for s in sents for t in s) for lang, sents in tokenized.items()}
    languages = common.languages(args.languages) or (sorted(tokenized) if tokenized else None)
    if args.dictionary:
        dicts = both_directions(read_dictionaries(args.dictionary, languages))
        gt = f"lexicon:{args.dictionary}"
    else:
        dicts = {k: [(s, t) for s, t, _ in v] for k, v in build_dictionaries(tokenized, args.top_k, args.idf, args.min_count).items()}
        gt = "tfidf"
    words_by_lang: dict[str, set] = {}
    for (a, b), pairs in dicts.items():
        words_by_lang.setdefault(a, set()).update(s for s, _ in pairs)
        words_by_lang.setdefault(b, set()).update(t for _, t in pairs)
    if args.candidates == "split":
        if not tokenized:
            raise UserError("word: --candidates split needs --split")
        for lang, c in counts.items():
            words_by_lang.setdefault(lang, set()).update(c)
    spaces = _word_spaces(encoder, args, {l: sorted(w) for l, w in words_by_lang.items()}, counts)
    metrics, details, written = {}, {}, []
    prefix = common.plot_prefix(args, "word")
    for method in args.method:
        for proc in args.procrustes:
            res = word_translation(spaces, dicts, method=method, procrustes=proc,
                                   procrustes_k=args.procrustes_k, procrustes_iter=args.procrustes_iter)
            tag = f"{method}/{proc}"
            metrics[tag] = {k: v for k, v in res.items() if k.startswith(("recall@", "precision@"))}
            details[tag] = {"pairs": res["pairs"], "procrustes_log": res["procrustes_log"],
                            "recall_matrix": matrix_dict(res["matrix"], res["languages"]),
                            "recall_matrix_no_identical": matrix_dict(res["matrix_no_identical"], res["languages"])}
            print(f"word translation [{args.embeddings} embeddings, {method}, procrustes={proc}]: "
                  f"R@10 {100 * res['recall@10']:.1f}% (no identical {100 * res['recall@10_no_identical']:.1f}%), "
                  f"P@1 {100 * res['precision@1']:.1f}% P@5 {100 * res['precision@5']:.1f}% P@10 {100 * res['precision@10']:.1f}%")
            if not written:
                written.append(plots.plot_language_matrix(res["matrix"], res["languages"], f"{prefix}-recall10.png",
                                                          f"Word translation Recall@10 ({method}) (%)"))
            if proc == "multi" and res["procrustes_log"].get("multi"):
                written.append(plots.plot_convergence(res["procrustes_log"]["multi"], f"{prefix}-procrustes-multi.png",
                                                      "Multi-language Procrustes"))
    details["ground_truth"] = {"source": gt, "pairs": {f"{a}-{b}": len(p) for (a, b), p in dicts.items()},
                               "vocabulary": {l: len(s.words) for l, s in spaces.items()}}
    common.write_record(args, "word", metrics, sorted(spaces), details, written)
    return 0


def _build_dictionary(args: argparse.Namespace) -> int:
    if sum(bool(x) for x in (args.tokenizer, args.model, args.words)) != 1:
        raise UserError("build-dictionary: give exactly one of --tokenizer, --model or --words")
    if args.tokenizer:
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(args.tokenizer))
        except Exception as err:  # tokenizers raises a bare Exception
            raise UserError(f"{args.tokenizer}: not a tokenizers JSON file ({str(err).splitlines()[0]})") from None
    elif args.model:
        require_trained(args.model, "build-dictionary")
        tok = common.load(args).tokenizer
    else:
        tok = None
    ps = common.read_parallel(args, args.n_groups)
    tokenize = CaptionTokenizer(tok)
    tokenized = {lang: tokenize([c for c, l in zip(ps.captions, ps.langs) if l == lang]) for lang in ps.languages}
    dicts = build_dictionaries(tokenized, args.top_k, args.idf, args.min_count)
    out = Path(args.dictionary_out or Path(args.split).resolve().parent / "dictionary-tfidf")
    for (a, b), pairs in dicts.items():
        write_dictionary(out / f"{a}-{b}.txt", pairs)
    summary = {
        "split": str(Path(args.split).resolve()), "tokens": tokenize.kind, "groups": len(ps.group_ids),
        "top_k": args.top_k, "idf": args.idf, "min_count": args.min_count,
        "pairs": {f"{a}-{b}": len(p) for (a, b), p in dicts.items()},
        "examples": {f"{a}-{b}": [f"{key_text(s).strip()} = {key_text(t).strip()}" for s, t, _ in p[:20]]
                     for (a, b), p in dicts.items() if a < b},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    sizes = [len(p) for p in dicts.values()]
    print(f"wrote {len(dicts)} dictionaries ({min(sizes)}–{max(sizes)} pairs each) from {len(ps.group_ids)} "
          f"parallel groups to {out}")
    return 0


def register(sub, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("word", parents=[parent], help="word translation Recall@10 and MUSE P@k (paper 5.3)", description=_WORD_HELP)
    common.add_model(p)
    common.add_split(p, required=False, what="parallel split for the tf-idf ground truth and token frequencies")
    p.add_argument("--dictionary", help="folder of <src>-<tgt>.txt lexicon files (MUSE format); default: tf-idf from --split")
    p.add_argument("--embeddings", choices=["input", "contextual"], default="input",
                   help="input token embeddings (the paper; default) or contextual word embeddings")
    p.add_argument("--method", nargs="+", choices=["nn", "csls"], default=["nn", "csls"], help="ranking(s) (default: both)")
    p.add_argument("--procrustes", nargs="+", choices=["none", "pairwise", "multi"], default=["none"],
                   help="refinement(s) before ranking (default: none)")
    p.add_argument("--procrustes-k", type=positive_int, default=5, help="mutual nearest neighbours for anchors (paper: 5)")
    p.add_argument("--procrustes-iter", type=positive_int, default=10, help="refinement rounds (default %(default)s)")
    p.add_argument("--candidates", choices=["dictionary", "split"], default="dictionary",
                   help="target candidates: the language's dictionary words (default) or also every token seen in its --split captions")
    _tfidf_args(p)
    p.set_defaults(func=_word)

    p = sub.add_parser("build-dictionary", parents=[parent], help="tf-idf word ground truth from a parallel split (paper B.2)", description=_BUILD_HELP)
    common.add_split(p)
    p.add_argument("--dictionary-out", help="output folder (default: <split>/../dictionary-tfidf)")
    p.add_argument("--tokenizer", help="tokenizer.json to split captions into BPE tokens")
    common.add_model(p, required=False)
    p.add_argument("--words", action="store_true", help="use lower-cased words instead of BPE tokens")
    p.add_argument("--n-groups", type=positive_int, default=None, help="use a seeded sample of this many groups (default: all)")
    _tfidf_args(p)
    p.set_defaults(func=_build_dictionary)


def _tfidf_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top-k", type=positive_int, default=5, help="mutual top-k of the tf-idf rule (paper: 5)")
    p.add_argument("--idf", choices=["smooth", "paper"], default="smooth",
                   help="idf: 'paper' = log(|D|/df) (eq. 7; 0 for tokens in every document, so it ranks nothing on "
                        "small vocabularies), 'smooth' = log((1+|D|)/(1+df))+1 (default)")
    p.add_argument("--min-count", type=positive_int, default=1, help="ignore tokens seen in fewer sentences (default %(default)s)")
