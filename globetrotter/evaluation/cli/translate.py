"""``eval.py translate`` and ``translate-word``: translate sentences and words by retrieval over a saved index."""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from globetrotter.argtypes import non_negative_float, positive_int
from globetrotter.errors import UserError

from ..late_interaction import LateInteraction
from ..models import language_kwargs, require_trained, token_embeddings
from ..records import dataset_info
from ..translate import DEFAULT_IVF_MIN, DEFAULT_NPROBE, file_signature, open_or_build, read_text_corpus
from ..word import CaptionTokenizer, input_word_embeddings, is_fragment, key_text, row_keys, translate_words
from . import common

_TRANSLATE_HELP = (
    "Translate sentences by retrieval: embed the queries with the text-text head and print the k "
    "nearest sentences of the target language in a corpus (a shard split folder, or a text file of one "
    "sentence per line in the target language), with their cosine similarity. The corpus index "
    "(faiss; exact below --ivf-min sentences, IVF above) is built once, saved under --index and "
    "reloaded while the model and corpus are unchanged."
)
_TRANSLATE_WORD_HELP = (
    "Translate words by retrieval over the vocabulary: the k nearest target-language tokens of each "
    "query word (target vocabulary = the tokens seen in --to captions of --corpus, else the whole BPE "
    "vocabulary), by cosine (nn) or CSLS, from input token embeddings or contextual ones. The "
    "vocabulary index is saved and reloaded like translate's."
)


def _model_signature(encoder, path: str) -> dict:
    ckpt = Path(getattr(encoder, "checkpoint", None) or path)
    weights = ckpt / "model.safetensors"
    target = weights if weights.is_file() else ckpt
    return file_signature(target) if target.exists() else {"path": str(target)}


def _index_dir(args: argparse.Namespace, kind: str) -> Path:
    if args.index:
        return Path(args.index)
    corpus = str(Path(args.corpus).resolve()) if args.corpus else "vocabulary"
    tag = hashlib.sha1(f"{Path(args.model).resolve()}|{corpus}|{kind}".encode()).hexdigest()[:10]
    return Path(args.out) / "index" / f"{kind}-{Path(corpus).name}-{tag}"


def _queries(args: argparse.Namespace) -> list[str]:
    queries = list(args.text)
    if args.input:
        if not Path(args.input).is_file():
            raise UserError(f"{args.input}: query file not found (--input, one query per line)")
        queries += read_text_corpus(args.input)
    if not queries:
        raise UserError("translate: give sentences as arguments or --input FILE (one per line)")
    return queries


def _translate(args: argparse.Namespace) -> int:
    require_trained(args.model, "translate")
    from data_prep.shards import read_captions, read_manifest

    queries = _queries(args)
    corpus = Path(args.corpus)
    if corpus.is_dir():
        manifest = read_manifest(corpus)
        if args.to not in manifest["languages"]:
            raise UserError(f"{corpus}: no caption in language {args.to!r} (has {sorted(manifest['languages'])})")
        corpus_sig = {"path": str(corpus.resolve()), "checksum": manifest.get("checksum")}

        def texts() -> list[str]:
            return [m["caption"] for m in read_captions(corpus) if m["lang"] == args.to]
    else:
        if (args.corpus_lang or args.to) != args.to:
            raise UserError(f"{corpus}: corpus language {args.corpus_lang!r} differs from --to {args.to!r}")
        corpus_sig = file_signature(corpus) if corpus.is_file() else None
        if corpus_sig is None:
            raise UserError(f"{corpus}: corpus not found (a split folder or a text file, one sentence per line)")

        def texts() -> list[str]:
            return read_text_corpus(corpus)

    encoder = common.load(args)
    signature = {"model": _model_signature(encoder, args.model), "corpus": corpus_sig, "head": "text",
                 "ivf_min": args.ivf_min}
    index = open_or_build(_index_dir(args, "sentences"), args.to, signature, texts,
                          lambda t: encoder.encode_text(list(t), batch_size=args.batch_size, head="text",
                                                        **language_kwargs(encoder, args.to)),
                          rebuild=args.rebuild, ivf_min=args.ivf_min, nprobe=args.nprobe,
                          log=lambda s: print(s, file=sys.stderr))
    emb = encoder.encode_text(queries, batch_size=args.batch_size, head="text", **language_kwargs(encoder, args.source))
    if args.maxsim is None:
        _print_results(args, queries, index.search(emb, args.k))
        return 0
    hits = index.search(emb, max(args.k, args.rerank))
    _print_results(args, queries, [found[: args.k] for found in _rerank(encoder, args.maxsim, queries, hits, texts())])
    return 0


def _rerank(encoder, weight: float, queries: Sequence[str], hits: list[list[tuple[str, float]]],
            corpus: Sequence[str]) -> list[list[tuple[str, float]]]:
    """``translate --maxsim W``: each query's hits re-scored by cosine + W × MaxSim (idf over ``corpus``), best first."""
    late = LateInteraction(encoder, weight, corpus)
    out = []
    for query, found in zip(queries, hits):
        if not found:
            out.append(found)
            continue
        extra = late.scorer(late.bags([query]), late.bags([t for t, _ in found]))(np.zeros(1, dtype=np.int64))[0]
        scored = [(text, float(score + e)) for (text, score), e in zip(found, extra)]
        out.append(sorted(scored, key=lambda item: -item[1]))
    return out


def _print_results(args: argparse.Namespace, queries: Sequence[str], results) -> None:
    for query, hits in zip(queries, results):
        if args.json:
            print(json.dumps({"query": query, "target_lang": args.to,
                              "results": [{"text": t, "score": round(s, 4)} for t, s in hits]}, ensure_ascii=False))
        else:
            print(query)
            for text, score in hits:
                print(f"  {score:.3f}  {text}")


def _vocab_for(encoder, args, lang: str | None, counts: dict[str, Counter]) -> list[str]:
    """Target words for translate-word: tokens of ``lang``'s captions, else the whole vocabulary
    (no byte fragments, no whitespace-only tokens such as the bare space ``▁``)."""

    def usable(k: str) -> bool:
        return bool(key_text(k).strip()) and not is_fragment(k)

    if lang is not None and lang in counts:
        return sorted(k for k in counts[lang] if usable(k))
    tokens = token_embeddings(encoder, lang)[0]
    return sorted({k for k in row_keys(encoder.tokenizer, tokens) if usable(k)})


def _translate_word(args: argparse.Namespace) -> int:
    require_trained(args.model, "translate-word")
    queries = _queries(args)
    encoder = common.load(args)
    counts: dict[str, Counter] = {}
    if args.corpus:
        from data_prep.shards import read_captions

        tok = CaptionTokenizer(encoder.tokenizer)
        by_lang: dict[str, list[str]] = {}
        for m in read_captions(args.corpus):
            by_lang.setdefault(m["lang"], []).append(m["caption"])
        for flag, lang in (("--to", args.to), ("--from", args.source)):
            if lang is not None and lang not in by_lang:
                raise UserError(f"{args.corpus}: no caption in language {lang!r} ({flag}; has {sorted(by_lang)})")
        counts = {lang: Counter(t for s in tok(caps) for t in s) for lang, caps in by_lang.items()}
    shared = (encoder.token_embeddings() if args.embeddings == "input" and not getattr(encoder, "needs_language", False)
              else None)

    def embed(words: Sequence[str], lang: str | None) -> tuple[list[str], np.ndarray]:
        if args.embeddings == "input":  # the Sigurdsson baseline: the language's own table
            tokens, matrix = shared or token_embeddings(encoder, lang)
            return input_word_embeddings(words, tokens, matrix, encoder.tokenizer, counts.get(lang))
        words = [w for w in words if not is_fragment(w)]
        return words, encoder.encode_words([key_text(w) for w in words], **language_kwargs(encoder, lang))

    signature = {"model": _model_signature(encoder, args.model), "embeddings": args.embeddings,
                 "corpus": dataset_info(args.corpus)["checksum"] if args.corpus else None}
    index = open_or_build(_index_dir(args, f"words-{args.embeddings}"), args.to, signature,
                          lambda: _vocab_for(encoder, args, args.to, counts),
                          lambda w: _normalized(embed(w, args.to)[1]),
                          rebuild=args.rebuild, ivf_min=args.ivf_min, nprobe=args.nprobe,
                          log=lambda s: print(s, file=sys.stderr))
    kept, q_emb = embed(queries, args.source)
    if len(kept) < len(queries):
        raise UserError(f"translate-word: no token embedding for {sorted(set(queries) - set(kept))}")
    q_emb = _normalized(q_emb)
    if args.method == "csls":
        tgt = index.index.reconstruct_n(0, index.index.ntotal)
        src = _normalized(embed(_vocab_for(encoder, args, args.source, counts), args.source)[1])
        idx, scores = translate_words(q_emb, tgt, args.k, "csls", sources=src)
        results = [[(index.texts[i], float(s)) for i, s in zip(ri, rs)] for ri, rs in zip(idx, scores)]
    else:
        results = index.search(q_emb, args.k)
    results = [[(key_text(t).strip(), s) for t, s in hits] for hits in results]
    _print_results(args, queries, results)
    return 0


def _normalized(x: np.ndarray) -> np.ndarray:
    from ..procrustes import normalize_rows

    return normalize_rows(x)


def register(sub, parent: argparse.ArgumentParser) -> None:
    for name, helptext, desc, func in (
        ("translate", "translate sentences by retrieval from a corpus", _TRANSLATE_HELP, _translate),
        ("translate-word", "translate words by retrieval over the vocabulary", _TRANSLATE_WORD_HELP, _translate_word),
    ):
        p = sub.add_parser(name, parents=[parent], help=helptext, description=desc)
        common.add_model(p)
        p.add_argument("text", nargs="*", help="sentences (or words) to translate")
        p.add_argument("--input", help="file of queries, one per line")
        p.add_argument("--to", required=True, help="target language code")
        p.add_argument("--k", type=positive_int, default=5 if name == "translate" else 10, help="results per query (default %(default)s)")
        p.add_argument("--index", help="index folder (default: under --out/index, one per model and corpus)")
        p.add_argument("--rebuild", action="store_true", help="rebuild the index even if a matching one is saved")
        p.add_argument("--ivf-min", type=positive_int, default=DEFAULT_IVF_MIN, help="corpus size from which an IVF index is used (default %(default)s)")
        p.add_argument("--nprobe", type=positive_int, default=DEFAULT_NPROBE, help="IVF cells searched per query (default %(default)s)")
        p.add_argument("--json", action="store_true", help="print one JSON object per query")
        if name == "translate":
            p.add_argument("--corpus", required=True, help="target corpus: a split folder, or a text file with one sentence per line")
            p.add_argument("--corpus-lang", help="language of a text-file corpus (default: --to)")
            p.add_argument("--from", dest="source",
                           help="language of the queries (needed by a model with per-language tables: the Sigurdsson baseline)")
            p.add_argument("--maxsim", type=non_negative_float, metavar="W",
                           help="re-rank the --rerank nearest sentences by cosine + W x MaxSim of the model's token rows "
                                "(late interaction, as `eval.py sentence --maxsim`; idf over the corpus); the printed "
                                "score is then that sum. 2-4 suit a model whose token rows carry meaning "
                                "(configs/flickr8k.yaml's image-pivot rows, a supervised twin); it hurts one whose rows "
                                "start random (the synthetic quickstart)")
            p.add_argument("--rerank", type=positive_int, default=50, metavar="K",
                           help="with --maxsim: nearest sentences by cosine to re-rank (default %(default)s)")
        else:
            p.add_argument("--corpus", help="split folder whose captions give each language's vocabulary (default: whole vocabulary)")
            p.add_argument("--from", dest="source", help="source language (for the word's form and CSLS)")
            p.add_argument("--embeddings", choices=["input", "contextual"], default="input", help="word embeddings (default: input)")
            p.add_argument("--method", choices=["nn", "csls"], default="nn", help="ranking (default: nn)")
        p.set_defaults(func=func)
