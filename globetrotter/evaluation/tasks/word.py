"""Word translation by retrieval (Globetrotter paper 5.3; MUSE) as a library call, :func:`evaluate`, and its tf-idf
ground truth from a parallel split (paper B.2), :func:`build_dictionary`."""
from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Literal, Mapping, NamedTuple, Sequence

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from backretrieval.errors import BackRetrievalWarning, option, said
from backretrieval.records import json_text
from globetrotter.errors import UserError

from ..models import ModelLike
from ..records import Result, dataset_info, matrix_dict
from ..sentence import ParallelSet
from ..word import PROCRUSTES_ITER, PROCRUSTES_K, Method, WordSpace, word_translation
from ..word_dictionary import (IDF, MIN_COUNT, TOP_K, Idf, both_directions, build_dictionaries, read_dictionaries,
                               why_empty, write_dictionary)
from ..word_keys import CaptionTokenizer, Embeddings, WordEmbedder, key_text
from .checks import require_languages, require_positive_int, require_sequence, require_trained
from .common import read_parallel, resolve_model

Procrustes = Literal["none", "pairwise", "multi"]


def _tokenized(split: str | Path, languages: Sequence[str] | None, tokenizer: CaptionTokenizer, n_groups: int | None,
               seed: int) -> tuple[ParallelSet, dict[str, list[list[str]]]]:
    """A parallel sample of ``split`` and its captions as dictionary keys, per language (row s = group s)."""
    ps = read_parallel(split, languages, n_groups, seed)
    return ps, {lang: tokenizer([c for c, l in zip(ps.captions, ps.langs) if l == lang]) for lang in ps.languages}


def evaluate(
    model: ModelLike,
    split: str | Path | None = None,
    *,
    dictionary: str | Path | None = None,
    languages: Sequence[str] | None = None,
    embeddings: Embeddings = "input",
    methods: Sequence[Method] = ("nn", "csls"),
    procrustes: Sequence[Procrustes] = ("none",),
    procrustes_k: int = PROCRUSTES_K,
    procrustes_iter: int = PROCRUSTES_ITER,
    candidates: Literal["dictionary", "split"] = "dictionary",
    top_k: int = TOP_K,
    idf: Idf = IDF,
    min_count: int = MIN_COUNT,
    name: str | None = None,
    device: str = "cpu",
) -> Result:
    """Word translation of a trained ``model`` for every ranking in ``methods`` × refinement in ``procrustes``.

    Ground truth: the lexicon folder ``dictionary`` (``<src>-<tgt>.txt``, MUSE format; a missing direction is the
    inverse of the other), else the tf-idf dictionary of the parallel ``split`` (:func:`build_dictionary`'s rule with
    ``top_k``, ``idf``, ``min_count``). ``split`` also gives each language's token frequencies (which form of a word
    to embed) and, with ``candidates="split"``, adds every token of its captions to the target candidates (with a
    lexicon, a token spelling one of its words, ``"red"`` or ``"▁red"``, is that word, a candidate once).
    Input embeddings: the tf-idf dictionary's words and the split's tokens are tokenizer keys, each embedded by its
    own row; a lexicon's words are plain words, embedded in their most frequent form
    (:func:`~..word_keys.input_word_embeddings`). No ground-truth pair, or none with both words embedded: a
    :class:`UserError`.
    The record's ``config`` holds None for the settings that did not apply (``top_k``, ``idf``, ``min_count`` with
    a lexicon; ``procrustes_k``, ``procrustes_iter`` without refinement).
    Metrics per ``"<method>/<procrustes>"``: Recall@10 and P@1/5/10, with and without identical pairs
    (:func:`~..word.word_translation`); ``arrays["recall"]`` holds each one's Recall@10 language matrix.
    """
    require_trained(model, "word")
    require_languages(languages=languages)
    require_sequence(methods, "methods", "method names")
    require_sequence(procrustes, "procrustes", "refinement names")
    for count, value in (("procrustes_k", procrustes_k), ("procrustes_iter", procrustes_iter), ("top_k", top_k),
                         ("min_count", min_count)):  # procrustes_iter=2.5 was range's TypeError, min_count=2.5 read as 3
        require_positive_int(value, count)
    if not methods or not procrustes:
        raise ValueError("word: give at least one method and one procrustes setting")
    if candidates not in ("dictionary", "split"):  # "all" was read as "dictionary", in silence
        raise ValueError(f"candidates must be 'dictionary' or 'split', got {candidates!r}")
    if not dictionary and not split:
        raise UserError(f"word: give {option('split')} (a parallel split, for the tf-idf ground truth) or "
                        f"{option('dictionary')}")
    encoder, info = resolve_model(model, name, device)
    tokenized: dict[str, list[list[str]]] = {}
    if split:
        _, tokenized = _tokenized(split, languages, CaptionTokenizer(encoder.tokenizer), None, 0)  # every group
    counts = {lang: Counter(t for s in sents for t in s) for lang, sents in tokenized.items()}
    languages = list(languages) if languages else (sorted(tokenized) if tokenized else None)
    if dictionary:
        dicts = both_directions(read_dictionaries(dictionary, languages))
        source = f"lexicon:{dictionary}"
    else:
        dicts = {key: [(s, t) for s, t, _ in pairs]
                 for key, pairs in build_dictionaries(tokenized, top_k, idf, min_count).items()}
        source = "tfidf"
    n_truth = sum(len(p) for p in dicts.values())
    if not n_truth:
        why = (f"the lexicon files of {dictionary} hold no pair for {languages or 'any language'}" if dictionary
               else f"the tf-idf dictionary of {split} is empty, {why_empty(tokenized, top_k, min_count)}")
        raise UserError(f"word: no ground-truth pair: {why}")
    if candidates == "split" and not tokenized:
        raise UserError(f"word: {_split_candidates()} needs {option('split')}")
    # plain words (a lexicon's) and tokenizer keys (the tf-idf dictionary's, the split's tokens) per language
    plain: dict[str, set] = {}
    keys: dict[str, set] = {}
    truth_words = plain if dictionary else keys
    for (a, b), pairs in dicts.items():
        truth_words.setdefault(a, set()).update(s for s, _ in pairs)
        truth_words.setdefault(b, set()).update(t for _, t in pairs)
    if candidates == "split":
        for lang, c in counts.items():
            words = plain.get(lang, set())  # a token spelling a lexicon word ("red", "▁red") is that word, once
            keys.setdefault(lang, set()).update(k for k in c if key_text(k).strip() not in words)
    embed = WordEmbedder(encoder, embeddings, counts)
    spaces = {}
    for lang in sorted(set(plain) | set(keys)):
        kept_plain, emb_plain = embed(sorted(plain.get(lang, ())), lang)
        kept_keys, emb_keys = embed(sorted(keys.get(lang, ())), lang, keys=True)
        parts = [e for w, e in ((kept_plain, emb_plain), (kept_keys, emb_keys)) if w]
        spaces[lang] = WordSpace(kept_plain + kept_keys, np.concatenate(parts) if parts else emb_plain)
    n_usable = sum(s in spaces[a].index and t in spaces[b].index for (a, b), p in dicts.items() for s, t in p)
    if not n_usable:
        raise UserError(f"word: none of the {n_truth} ground-truth pairs ({source}) has both words embedded "
                        f"({embeddings} embeddings of {info['name']})")
    _warn_few_candidates(spaces, dicts)
    metrics, details, matrices = {}, {}, {}
    settings = [(method, proc) for method in methods for proc in procrustes]
    for method, proc in tqdm(settings, desc="word translation", unit=" setting", disable=None):  # off without a TTY
        res = word_translation(spaces, dicts, method=method, procrustes=proc, procrustes_k=procrustes_k,
                               procrustes_iter=procrustes_iter)
        tag = f"{method}/{proc}"
        metrics[tag] = {k: v for k, v in res.items() if k.startswith(("recall@", "precision@"))}
        details[tag] = {"pairs": res["pairs"], "procrustes_log": res["procrustes_log"],
                        "recall_matrix": matrix_dict(res["matrix"], res["languages"]),
                        "recall_matrix_no_identical": matrix_dict(res["matrix_no_identical"], res["languages"])}
        matrices[tag] = res["matrix"]
    details["ground_truth"] = {"source": source, "pairs": {f"{a}-{b}": len(p) for (a, b), p in dicts.items()},
                               "vocabulary": {lang: len(s.words) for lang, s in spaces.items()}}
    refined = set(procrustes) != {"none"}  # the settings that applied; None: unused (no refinement, a lexicon)
    config = {"split": split and str(split), "dictionary": dictionary and str(dictionary), "languages": languages,
              "embeddings": embeddings, "methods": list(methods), "procrustes": list(procrustes),
              "procrustes_k": procrustes_k if refined else None, "procrustes_iter": procrustes_iter if refined else None,
              "candidates": candidates, "top_k": None if dictionary else top_k, "idf": None if dictionary else idf,
              "min_count": None if dictionary else min_count}
    return Result("word", metrics, sorted(spaces), model=info, dataset=dataset_info(split) if split else None,
                  config=config, details=details, arrays={"recall": matrices, "languages": res["languages"]})


def _split_candidates() -> str:
    """How a message names ``candidates="split"``: ``--candidates split`` on the command line."""
    return said("--candidates split", "candidates='split'")


def _words() -> str:
    """How a message names ``words=True``: ``--words`` on the command line."""
    return said("--words", "words=True")


def _warn_few_candidates(spaces: Mapping[str, WordSpace], dicts: Mapping[tuple[str, str], Sequence]) -> None:
    """A :class:`~backretrieval.errors.BackRetrievalWarning` naming the language pairs whose target language has no
    more candidate words than Recall@K's K: every rank is then at most K, so Recall@K is 1 for any model."""
    k = 10  # word_translation's Recall@10, and its largest P@k
    few = [f"{a}-{b} {len(spaces[b].words)}" for a, b in sorted(dicts)
           if a != b and a in spaces and b in spaces and len(spaces[b].words) <= k]
    if few:
        warnings.warn(f"word: {len(few)} language pair(s) with {k} or fewer target candidates ({', '.join(few)}), "
                      f"not more than the largest K ({k}): Recall@{k} and P@{k} would be 1 for any model there; "
                      f"give more dictionary words, or {option('split')} with {_split_candidates()}",
                      BackRetrievalWarning, stacklevel=3)


class Dictionaries(NamedTuple):
    """What :func:`build_dictionary` wrote: the folder, each ordered pair's ``(src, tgt, score)`` list, and the
    summary (also ``summary.json`` in the folder)."""

    folder: Path
    pairs: dict[tuple[str, str], list[tuple[str, str, float]]]
    summary: dict


def _tokenizer_hash(tok: Tokenizer | None) -> str | None:
    """sha256 of a ``tokenizers.Tokenizer``'s JSON (None: no tokenizer, or one that cannot be serialised)."""
    import hashlib

    try:
        return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest() if tok is not None else None
    except Exception:  # not a tokenizers.Tokenizer
        return None


def _is_build_summary(path: Path) -> bool:
    """Whether ``path`` is the ``summary.json`` of an earlier :func:`build_dictionary` (its keys, not a converter's)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(summary, dict) and {"tokens", "pairs", "top_k", "idf", "min_count"} <= set(summary)


def _check_out_folder(folder: Path) -> list[Path]:
    """The earlier build's ``*-*.txt`` files of ``folder`` (to be replaced); a folder holding dictionary files (or a
    ``summary.json``) that no earlier build wrote is a :class:`UserError` (never overwritten)."""
    if not folder.is_dir():
        return []
    found = sorted(folder.glob("*-*.txt"))
    summary = folder / "summary.json"
    if (found or summary.exists()) and not _is_build_summary(summary):
        what = f"{len(found)} <src>-<tgt>.txt files" if found else "a summary.json"
        raise UserError(f"build-dictionary: {folder} holds {what} that no earlier build-dictionary wrote (no "
                        f"summary.json of one); give another {said('--dictionary-out', 'out')}, nothing written")
    return found


def _given(x: object) -> bool:
    return x is not None and not (isinstance(x, str) and not x)


def build_dictionary(
    split: str | Path,
    out: str | Path | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    model: ModelLike | None = None,
    words: bool = False,
    languages: Sequence[str] | None = None,
    n_groups: int | None = None,
    top_k: int = TOP_K,
    idf: Idf = IDF,
    min_count: int = MIN_COUNT,
    seed: int = 0,
) -> Dictionaries:
    """The tf-idf word-translation ground truth of the parallel ``split`` (paper B.2; its authors never released
    theirs), written as MUSE ``<src>-<tgt>.txt`` files (both directions; a BPE token's leading space as U+2581) and
    ``summary.json`` into ``out`` (default: ``dictionary-tfidf`` beside the split).

    Tokens: the BPE tokens of ``tokenizer`` (a ``tokenizers.Tokenizer`` or its JSON file) or of ``model``'s
    tokenizer (a trained run or a loaded encoder), or lower-cased words (``words=True``); exactly one. Rule: token
    t's document is every token of the translations of the sentences holding t; (t, u) is kept when each is in the
    other's top ``top_k`` by tf-idf (:func:`~..word_dictionary.tfidf_dictionary`). ``n_groups``: a ``seed``-ed sample
    of the groups (default: all). ``summary.json`` records what redraws it: the split, the sampling (``seed``, the
    requested and drawn groups, languages), the rule's settings and the tokens' source (tokenizer file or model, and
    the tokenizer's sha256). No pair in any direction: a :class:`UserError`, and nothing is written.

    ``out`` may be an earlier build's folder: its ``*-*.txt`` files are replaced (those this build does not write are
    removed, said on stderr); a folder with dictionary files and no earlier build's ``summary.json`` (hand-made
    ground truth) is a :class:`UserError` before any work. ``words=True`` leaves out the languages written without
    spaces (zh, ja: most captions hold no space), said on stderr; fewer than 2 languages left: a :class:`UserError`."""
    require_languages(languages=languages)
    if _given(tokenizer) + _given(model) + bool(words) != 1:
        raise UserError(f"build-dictionary: give exactly one of {option('tokenizer')}, {option('model')} or {_words()}")
    folder = Path(out or Path(split).resolve().parent / "dictionary-tfidf")
    earlier = _check_out_folder(folder)
    tok = None
    source: dict[str, str | dict | None] = {"tokenizer": None, "model": None}
    if isinstance(tokenizer, (str, Path)) and _given(tokenizer):
        source["tokenizer"] = str(Path(tokenizer).resolve())
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(tokenizer))
        except Exception as err:  # tokenizers raises a bare Exception
            raise UserError(f"{tokenizer}: not a tokenizers JSON file ({str(err).splitlines()[0]})") from None
    elif _given(tokenizer):
        tok = tokenizer
        source["tokenizer"] = type(tokenizer).__name__
    elif model is not None and _given(model):
        require_trained(model, "build-dictionary")
        encoder, info = resolve_model(model)
        tok = encoder.tokenizer
        source["model"] = {"path": info.get("path") and str(info["path"]), "name": info.get("name"),
                           "checkpoint": info.get("checkpoint") and str(info["checkpoint"])}
    tokenize = CaptionTokenizer(tok)
    ps, tokenized = _tokenized(split, languages, tokenize, n_groups, seed)
    kept = list(ps.languages)
    if words:
        from ..correspondence import uses_spaces

        unspaced = [lang for lang in kept if not uses_spaces([c for c, l in zip(ps.captions, ps.langs) if l == lang])]
        kept = [lang for lang in kept if lang not in unspaced]
        if len(kept) < 2:
            raise UserError(f"build-dictionary {_words()}: {split} has {len(kept)} language(s) written with spaces "
                            f"({kept}; {unspaced} are not), need 2; use {option('model')} or {option('tokenizer')} "
                            "for BPE tokens")
        if unspaced:
            print(f"build-dictionary {_words()}: left out {', '.join(unspaced)} (written without spaces, so a 'word' "
                  f"would be a whole phrase); use {option('model')} or {option('tokenizer')} for them", file=sys.stderr)
            tokenized = {lang: tokenized[lang] for lang in kept}
    pairs = build_dictionaries(tokenized, top_k, idf, min_count)
    if not any(pairs.values()):
        raise UserError(f"build-dictionary: no word pair in any of the {len(pairs)} language pairs of "
                        f"{len(ps.group_ids)} groups of {split}: {why_empty(tokenized, top_k, min_count)}; "
                        "nothing written")
    for (a, b), found in pairs.items():
        write_dictionary(folder / f"{a}-{b}.txt", found)
    summary = {
        "split": str(Path(split).resolve()), "checksum": dataset_info(split).get("checksum"),
        "tokens": tokenize.kind, **source, "tokenizer_sha256": _tokenizer_hash(tok),
        "languages": kept,
        "seed": seed, "n_groups": n_groups, "groups": len(ps.group_ids),
        "top_k": top_k, "idf": idf, "min_count": min_count,
        "pairs": {f"{a}-{b}": len(p) for (a, b), p in pairs.items()},
        "examples": {f"{a}-{b}": [f"{key_text(s).strip()} = {key_text(t).strip()}" for s, t, _ in p[:20]]
                     for (a, b), p in pairs.items() if a < b},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json_text(summary, indent=2, ensure_ascii=False), encoding="utf-8")
    written = {f"{a}-{b}.txt" for a, b in pairs}
    stale = [path for path in earlier if path.name not in written]
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        print(f"build-dictionary: removed {len(stale)} dictionaries of the earlier build in {folder} that this one "
              f"does not write ({', '.join(p.stem for p in stale[:6])}{', …' if len(stale) > 6 else ''})",
              file=sys.stderr)
    return Dictionaries(folder, pairs, summary)
