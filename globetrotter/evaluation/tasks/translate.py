"""Translation by retrieval for users, as library calls: :func:`translate_sentences` (the nearest sentences of a
target-language corpus) and :func:`translate_words` (the nearest words of a target-language vocabulary). Each
searches a faiss index (:func:`~..translate.open_or_build`): kept in memory for the call, or, with ``out=`` or
``index=`` (as ``eval.py`` passes ``--out``), saved and reloaded while the model and corpus are unchanged."""
from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from tqdm import tqdm

from backretrieval.errors import given, option, said
from globetrotter.errors import UserError
from globetrotter.shell import program_name

from ..models import ModelLike, encode_texts
from ..procrustes import normalize_rows
from ..ranking import Ranking
from ..records import dataset_info
from ..reference import ReferencePool, read_reference
from ..scoring import ScoringContext
from ..translate import DEFAULT_IVF_MIN, DEFAULT_NPROBE, CorpusIndex, file_signature, open_or_build, read_text_corpus
from ..word import rank_word_vectors
from ..word_keys import CaptionTokenizer, Embeddings, WordEmbedder, key_text, vocabulary
from .checks import (named, named_value, require_known_languages, require_language, require_positive_int,
                     require_sequence, require_trained)
from .choice import Choice, read_choice
from .common import log_to_stderr, resolve_model, shows_progress

Hits = list[list[tuple[str, float]]]
"""Per query, ``(text, score)`` best first."""


def _model_path(model: ModelLike, encoder: Any) -> Path | None:
    """What identifies the model on disk: the spec's folder, else the encoder's checkpoint (None: an unsaved model)."""
    if isinstance(model, (str, Path)):
        return Path(model)
    checkpoint = getattr(encoder, "checkpoint", None)
    return Path(checkpoint) if checkpoint else None


def _model_signature(encoder: Any, path: Path | None) -> dict:
    ckpt = getattr(encoder, "checkpoint", None) or path
    if ckpt is None:
        return {"path": None}
    weights = Path(ckpt) / "model.safetensors"
    target = weights if weights.is_file() else Path(ckpt)
    return file_signature(target) if target.exists() else {"path": str(target)}


def index_folder(out: str | Path, model_path: Path | None, corpus: str | Path | None, kind: str) -> Path:
    """The default index folder: ``out/index/<kind>-<corpus name>-<hash of model, corpus and kind>``."""
    corpus = str(Path(corpus).resolve()) if corpus else "vocabulary"
    model = model_path.resolve() if model_path is not None else "unsaved"
    tag = hashlib.sha1(f"{model}|{corpus}|{kind}".encode()).hexdigest()[:10]
    return Path(out) / "index" / f"{kind}-{Path(corpus).name}-{tag}"


def _open(model: ModelLike, encoder: Any, corpus: str | Path | None, kind: str, lang: str, signature: dict,
          texts_fn: Callable[[], Sequence[str]], encode_fn: Callable[[Sequence[str]], np.ndarray], *, index: str | Path | None,
          out: str | Path | None, rebuild: bool, ivf_min: int, nprobe: int, log: Callable[[str], None]) -> CorpusIndex:
    """The ``lang`` index of ``encoder`` (``model`` as given) over ``texts_fn()``, opened or built: saved in ``index``,
    else under ``out`` (:func:`index_folder`), else kept in memory. A model with no folder or checkpoint has no
    lasting identity: its index is always rebuilt."""
    path = _model_path(model, encoder)
    signature = {"model": _model_signature(encoder, path), **signature}
    folder = Path(index) if index else index_folder(out, path, corpus, kind) if out is not None else None
    return open_or_build(folder, lang, signature, texts_fn, encode_fn, rebuild=rebuild or path is None,
                         ivf_min=ivf_min, nprobe=nprobe, log=log, progress=shows_progress(log))


def _corpus_texts(corpus: Path, to: str, corpus_lang: str | None) -> tuple[dict, Callable[[], list[str]]]:
    """``(signature, texts)`` of a sentence corpus: ``to``'s captions of a split folder, or a text file's lines."""
    from data_prep.shards import read_captions, read_manifest

    if (corpus_lang or to) != to:
        raise UserError(f"{corpus}: corpus language {corpus_lang!r} differs from {named_value('to', repr(to))}")
    if corpus.is_dir():
        manifest = read_manifest(corpus)
        if to not in manifest["languages"]:
            raise UserError(f"{corpus}: no caption in language {to!r} (has {sorted(manifest['languages'])})")
        return ({"path": str(corpus.resolve()), "checksum": manifest.get("checksum")},
                lambda: [m["caption"] for m in read_captions(corpus) if m["lang"] == to])
    if not corpus.is_file():
        raise UserError(f"{corpus}: corpus not found (a split folder or a text file, one sentence per line)")

    def texts() -> list[str]:
        found = read_text_corpus(corpus)
        if not found:
            raise UserError(f"{corpus}: no sentence in it ({named('corpus')}, a text file of one sentence per line)")
        return found

    return file_signature(corpus), texts


def require_queries(queries: Sequence[str], command: str, what: str) -> None:
    """A one-line error when there is no query, or one is empty or only spaces (nothing to translate); a
    ``TypeError`` for one str (its characters would be the queries: :func:`~.checks.require_sequence`)."""
    require_sequence(queries, "queries")
    blank = [i + 1 for i, q in enumerate(queries) if not q.strip()]
    if not queries or blank:
        raise UserError(f"{command}: " + (
            f"query {', '.join(map(str, blank))} of {len(queries)} is empty or only spaces: no {what} to translate"
            if blank else f"no query {what} given"))


QUERY_CHUNK = 8
"""Queries re-scored at a time under a ranking with statistics: their candidates' MaxSim is computed in one block."""

RERANK = 50
"""Sentences a ranking with statistics re-scores per query unless ``rerank`` (``--rerank``) says."""


def translate_sentences(
    model: ModelLike,
    queries: Sequence[str],
    *,
    to: str,
    corpus: str | Path,
    corpus_lang: str | None = None,
    source: str | None = None,
    k: int = 5,
    ranking: str | Path | Choice | None = None,
    rerank: int | None = None,
    index: str | Path | None = None,
    out: str | Path | None = None,
    rebuild: bool = False,
    ivf_min: int = DEFAULT_IVF_MIN,
    nprobe: int = DEFAULT_NPROBE,
    batch_size: int = 256,
    log: Callable[[str], None] = log_to_stderr,
    device: str = "cpu",
) -> Hits:
    """The ``k`` sentences of language ``to`` in ``corpus`` (a split folder, or a text file of one sentence per line
    in ``corpus_lang`` = ``to``) nearest to each query (in ``source``), ``(text, score)`` best first.

    Without ``ranking``: by the cosine of the text-text head. With ``ranking`` (an ``eval.py select`` record, or its
    :class:`~.choice.Choice`): by the ranking chosen on val, as ``eval.py sentence --ranking`` scores a pair: the
    ``rerank`` (default :data:`RERANK`) nearest by the chosen head's cosine are re-scored by cosine + W × MaxSim
    (− the CSLS radii), every statistic from the reference captions the choice was made with; the score is that sum.
    A ranking with statistics needs ``source`` (they are per language) and both languages among the choice's; a
    ``rerank`` given without one (no ``ranking``, or one that chose a plain cosine) re-scores nothing and is a
    :class:`UserError`. The corpus index is
    built for the call and kept in memory: nothing is written unless ``index`` (a folder) or ``out`` (the index
    goes under ``out/index``, :func:`index_folder`; ``eval.py translate`` passes ``--out``) is given; then it is
    saved and reloaded while the model and corpus are unchanged. Notes (a saved index built, a ``k`` beyond the
    corpus) go to ``log``, stderr by default, with the progress bars (a ``log`` of one's own, ``lambda _: None``:
    quiet, shows none); queries cut to the model's length are a ``TextsCut`` warning. A query
    with no text is a :class:`UserError`."""
    require_positive_int(k, "k")
    require_language(to, "to")
    require_queries(queries, "translate", "sentence")
    require_trained(model, "translate")
    if ranking is not None and not isinstance(ranking, (str, Path, Choice)):  # a Ranking: AttributeError
        raise UserError(f"ranking: expected an eval.py select record (its path) or its Choice, got "
                        f"{type(ranking).__name__} {str(ranking)[:60]!r}")
    choice = read_choice(ranking) if isinstance(ranking, (str, Path)) else ranking
    chosen = choice.ranking if choice is not None else Ranking()
    if rerank is not None:
        _require_rerank(rerank, choice)
    corpus = Path(corpus)
    corpus_sig, texts = _corpus_texts(corpus, to, corpus_lang)

    pool = _choice_pool(choice, source, to) if choice is not None and chosen.needs_statistics else None
    encoder, info = resolve_model(model, device=device)
    require_known_languages(encoder, {"to": to, "source": source})
    if choice is not None:
        choice.check_model(model, info)

    def encode(t: Sequence[str]) -> np.ndarray:
        return encode_texts(encoder, t, to, chosen.head, batch_size)

    kind = "sentences" if chosen.head == "text" else f"sentences-{chosen.head}"
    found = _open(model, encoder, corpus, kind, to, {"corpus": corpus_sig, "head": chosen.head, "ivf_min": ivf_min},
                  texts, encode, index=index, out=out, rebuild=rebuild, ivf_min=ivf_min, nprobe=nprobe, log=log)
    if k > len(found.texts):
        log(f"note: {given('k', k)}: the corpus has {len(found.texts)} {to} sentences; each query lists all of them")
    emb = encode_texts(encoder, queries, source, chosen.head, batch_size)
    if pool is None:
        return found.search(emb, k)
    terms = ["cosine"] + ([f"+ {chosen.maxsim:g} x MaxSim"] if chosen.maxsim else []) + (
        ["- CSLS radii"] if chosen.csls else [])
    log(f"scores: those of the chosen ranking, {chosen.label} ({' '.join(terms)}), not cosines")
    hits = found.search(emb, max(k, rerank or RERANK))
    assert source is not None  # _choice_pool refused a ranking with statistics without --from
    return [best[:k] for best in rerank_hits(encoder, chosen, pool, queries, source, to, hits, batch_size,
                                             progress=shows_progress(log))]


def _require_rerank(rerank: int, choice: Choice | None) -> None:
    """A one-line :class:`UserError` for a ``rerank`` that is no positive integer or that re-scores nothing: no
    ranking chosen, or one that chose a plain cosine (its scores are the index's own)."""
    require_positive_int(rerank, "rerank")
    if choice is None:
        ranking = said(option("ranking", "RECORD"), "ranking (a select record or its Choice)")
        raise UserError(f"{given('rerank', rerank)} re-scores under a chosen ranking; give {ranking} or drop it")
    if not choice.ranking.needs_statistics:
        raise UserError(f"{given('rerank', rerank)} re-scores under a ranking with MaxSim or CSLS; "
                        f"{_ranking_given(choice)} chose "
                        f"{choice.ranking.label}, whose scores are the index's own: drop {option('rerank')}")


def _ranking_given(choice: Choice) -> str:
    """How a message names the ranking the caller gave: ``--ranking RECORD`` on the command line (inside
    :func:`~backretrieval.errors.cli_option_names`), ``ranking (its source)`` in Python, where no flag was typed."""
    return said(f"--ranking {choice.source}", f"ranking ({choice.source})")


def _note_odd_words(encoder: Any, queries: Sequence[str], log: Callable[[str], None]) -> None:
    """One line naming the queries of several words, and one naming those that are no token of the model's
    vocabulary (neither ``word`` nor `` word`` is one token): each is embedded as the mean of its tokens' rows."""
    several = [q for q in queries if len(q.split()) > 1]
    if several:
        log(f"note: {several} {'is' if len(several) == 1 else 'are'} several words; translate-word embeds each as "
            f"the mean of its tokens (`{program_name('eval')} translate` translates sentences)")
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        return
    absent = [q for q in queries if len(q.split()) == 1 and all(
        len(tokenizer.encode(text, add_special_tokens=False).ids) != 1 for text in (q.strip(), " " + q.strip()))]
    if absent:
        log(f"note: {absent} {'is' if len(absent) == 1 else 'are'} not in the model's vocabulary (no token of its "
            "own); embedded as the mean of its pieces")


def _choice_pool(choice: Choice, source: str | None, to: str) -> ReferencePool:
    """The reference captions ``choice`` was made with, checked unchanged; one-line errors when the queries'
    language is not given or either language is not among the choice's."""
    if source is None:
        raise UserError(f"{_ranking_given(choice)}: {choice.ranking.label} takes its statistics per language; give "
                        f"the queries' language with {named_value('source', 'LANG')}")
    languages = choice.languages or tuple(sorted({source, to}))
    missing = [lang for lang in dict.fromkeys((source, to)) if lang not in languages]
    if missing:
        select = said(f"`{program_name('eval')} select --languages`", "select_ranking(languages=...)")
        raise UserError(f"{_ranking_given(choice)} was chosen for {','.join(languages)}, not "
                        f"{','.join(missing)}; choose one for these languages with {select}")
    pool = read_reference(choice.reference, languages, choice.reference_size)
    choice.check(reference=pool.record)
    return pool


def rerank_hits(encoder: Any, ranking: Ranking, pool: ReferencePool, queries: Sequence[str], source: str, to: str,
                hits: Hits, batch_size: int, progress: bool = True) -> Hits:
    """Each query's hits re-scored under ``ranking`` with ``pool``'s statistics (the score a
    :class:`~..scoring.SentenceScorer` gives the pair), best first; :data:`QUERY_CHUNK` queries at a time (with a
    progress bar on stderr when ``progress`` and there are more)."""
    base, out = None, []
    for start in tqdm(range(0, len(queries), QUERY_CHUNK), desc=f"re-ranking ({ranking.label})", unit="chunk",
                      disable=not progress or len(queries) <= QUERY_CHUNK, file=sys.stderr):
        chunk, found = list(queries[start:start + QUERY_CHUNK]), hits[start:start + QUERY_CHUNK]
        candidates = list(dict.fromkeys(text for row in found for text, _ in row))
        texts, langs = chunk + candidates, [source] * len(chunk) + [to] * len(candidates)
        context = ScoringContext(encoder, texts, langs, pool, batch_size, queries=len(chunk)) if base is None \
            else base.with_sentences(texts, langs, queries=len(chunk))
        base = base or context
        scores = context.scorer(ranking)(np.arange(len(chunk)))
        column = {text: i for i, text in enumerate(candidates)}
        for q, row in enumerate(found):
            scored = [(text, float(scores[q, column[text]])) for text, _ in row]
            out.append(sorted(scored, key=lambda item: -item[1]))
    return out


def caption_counts(corpus: str | Path, encoder: Any, required: dict[str, str | None]) -> dict[str, Counter]:
    """Each language's token counts over the captions of the split ``corpus`` (keys of ``encoder``'s tokenizer);
    ``required`` maps a parameter name (named as :func:`~.checks.named` says) to a language that must have captions
    (None: not asked)."""
    from data_prep.shards import read_captions

    by_lang: dict[str, list[str]] = {}
    for m in read_captions(corpus):
        by_lang.setdefault(m["lang"], []).append(m["caption"])
    for name, lang in required.items():
        if lang is not None and lang not in by_lang:
            raise UserError(f"{corpus}: no caption in language {lang!r} ({named(name)}; has {sorted(by_lang)})")
    tokenize = CaptionTokenizer(encoder.tokenizer)
    return {lang: Counter(t for s in tokenize(caps) for t in s) for lang, caps in by_lang.items()}


def training_corpus(encoder: Any, langs: Sequence[str | None]) -> dict[str, Path]:
    """Each of ``langs`` (None: not asked) mapped to the split on this machine whose captions the model's tokenizer
    read in it, as its provenance record names them: an adapted one's new language from its adaptation split
    (``adapt.split``), the others from its base's train split (the record it ``extends``). A language with no such
    split here is left out."""
    from data_prep.shards import MANIFEST, read_manifest

    from ...tokenizer import read_provenance
    from ..models import checkpoint_of

    checkpoint = checkpoint_of(encoder)
    record = read_provenance(Path(checkpoint) / "tokenizer.json") if checkpoint else None
    wanted = [lang for lang in dict.fromkeys(langs) if lang]
    found: dict[str, Path] = {}
    while record and len(found) < len(wanted):
        adapt = record.get("adapt") or {}
        candidates = ([Path(adapt["split"])] if adapt.get("split") else []) + [
            Path(split.get("path", "")) for split in record.get("splits") or []]
        for path in candidates:
            if (path / MANIFEST).is_file():
                held = set(read_manifest(path)["languages"])
                found.update({lang: path for lang in wanted if lang in held and lang not in found})
        record = record.get("extends")
    return {lang: found[lang] for lang in wanted if lang in found}


def _training_counts(corpora: dict[str, Path], encoder: Any) -> dict[str, Counter]:
    """:func:`caption_counts` of each language from its own split of ``corpora`` (:func:`training_corpus`)."""
    counts: dict[str, Counter] = {}
    for path in dict.fromkeys(corpora.values()):
        langs = [lang for lang, where in corpora.items() if where == path]
        found = caption_counts(path, encoder, {})
        counts.update({lang: found[lang] for lang in langs})
    return counts


def _training_note(corpora: dict[str, Path], wanted: Sequence[str]) -> str:
    """The log line saying which vocabulary :func:`translate_words` searches without ``--corpus``."""
    if len(corpora) == len(wanted) and len(set(corpora.values())) == 1:
        return (f"vocabulary: the {' and '.join(wanted)} tokens of {corpora[wanted[0]]}, the model's training "
                f"captions ({named('corpus')} to choose another)")
    if len(corpora) == len(wanted):
        parts = [f"the {' and '.join(l for l in wanted if corpora[l] == path)} tokens of {path}"
                 for path in dict.fromkeys(corpora[l] for l in wanted)]
        return f"vocabulary: {' and '.join(parts)}, the model's training captions ({named('corpus')} to choose another)"
    missing = [lang for lang in wanted if lang not in corpora]
    return (f"vocabulary: every token of the shared BPE, whatever its language (no split of the captions the "
            f"tokenizer was trained on in {', '.join(missing)} is on this machine; "
            f"{given('corpus', 'SPLIT')} keeps each language's own)")


def translate_words(
    model: ModelLike,
    queries: Sequence[str],
    *,
    to: str,
    source: str | None = None,
    corpus: str | Path | None = None,
    embeddings: Embeddings = "input",
    method: str = "nn",
    k: int = 10,
    index: str | Path | None = None,
    out: str | Path | None = None,
    rebuild: bool = False,
    ivf_min: int = DEFAULT_IVF_MIN,
    nprobe: int = DEFAULT_NPROBE,
    log: Callable[[str], None] = log_to_stderr,
    device: str = "cpu",
) -> Hits:
    """The ``k`` words of language ``to`` nearest to each query word (of language ``source``), ``(word, score)``
    best first: by cosine (``method="nn"``) or CSLS against ``source``'s vocabulary, of the ``embeddings`` word
    vectors (:class:`~..word_keys.WordEmbedder`). A language's vocabulary is the tokens of its captions in the split
    ``corpus`` (default: :func:`training_corpus`, the captions the tokenizer was trained on in it: an adapted
    model's new language from its adaptation split, the others from its base's train split), else the whole token
    table, every language's tokens (:func:`~..word_keys.vocabulary`); its words are tokenizer keys, each
    embedded by its own input row, while a query is a plain word (its most frequent form). A query with no text is a
    :class:`UserError`. The index is kept in memory, or saved and reloaded, and notes are logged, as
    :func:`translate_sentences`'s."""
    require_positive_int(k, "k")
    if method not in ("nn", "csls"):  # "cos" was ranked by cosine, in silence
        raise ValueError(f"method must be 'nn' or 'csls', got {method!r}")
    require_language(to, "to")
    require_queries(queries, "translate-word", "word")
    require_trained(model, "translate-word")
    encoder = resolve_model(model, device=device)[0]
    require_known_languages(encoder, {"to": to, "source": source})
    if corpus is None:
        wanted = [lang for lang in dict.fromkeys((to, source)) if lang]
        corpora = training_corpus(encoder, wanted)
        log(_training_note(corpora, wanted))
        complete = len(corpora) == len(wanted)
        corpus = corpora[to] if complete else None  # the index holds --to's words: named by its split
        counts = _training_counts(corpora, encoder) if complete else {}
    else:
        counts = caption_counts(corpus, encoder, {"to": to, "source": source})
    embed = WordEmbedder(encoder, embeddings, counts)
    signature = {"embeddings": embeddings, "corpus": dataset_info(corpus)["checksum"] if corpus else None,
                 "word_keys": "own-row"}  # indexes built when keys took another form's row are rebuilt
    found = _open(model, encoder, corpus, f"words-{embeddings}", to, signature, lambda: vocabulary(encoder, to, counts),
                  lambda words: normalize_rows(embed(words, to, keys=True)[1]), index=index, out=out, rebuild=rebuild,
                  ivf_min=ivf_min, nprobe=nprobe, log=log)
    _note_odd_words(encoder, queries, log)
    kept, q_emb = embed(queries, source)
    if len(kept) < len(queries):
        raise UserError(f"translate-word: no token embedding for {sorted(set(queries) - set(kept))}")
    q_emb = normalize_rows(q_emb)
    if method == "csls":
        targets = found.index.reconstruct_n(0, found.index.ntotal)
        sources = normalize_rows(embed(vocabulary(encoder, source, counts), source, keys=True)[1])
        idx, scores = rank_word_vectors(q_emb, targets, k, "csls", sources=sources)
        hits = [[(found.texts[i], float(s)) for i, s in zip(ri, rs)] for ri, rs in zip(idx, scores)]
    else:
        hits = found.search(q_emb, k)
    return [[(key_text(t).strip(), s) for t, s in row] for row in hits]
