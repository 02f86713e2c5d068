"""Evaluation and inference over a trained model (docs/design.md section 7).

The library: one function per evaluation that takes a model (:data:`ModelLike`: a run folder, a baseline spec or a
loaded encoder) and data and returns a :class:`Result` (the JSON record ``eval.py`` writes):
:func:`evaluate_sentence_translation`
(paper 5.2, with the :class:`Ranking` chosen on val by :func:`select_ranking`, statistics from a
:class:`ReferencePool`), :func:`evaluate_word_translation` (paper 5.3, ground truth from a lexicon or
:func:`build_word_dictionary`), :func:`evaluate_retrieval` (text↔image, XTD10), :func:`evaluate_clustering` (paper
A.4), :func:`evaluate_correspondence` (paper A.1), :func:`evaluate_generation` (paper A.5); translation by
retrieval over a faiss index (in memory, or saved with ``out=``/``index=``) for users (:func:`translate_sentences`, :func:`translate_words`); and the pure
metric functions over numpy embeddings they are built on (testable without a model): :func:`sentence_translation`,
:func:`word_translation` (its nearest words of a vector: :func:`rank_word_vectors`) and the tf-idf ground truth
:func:`tfidf_dictionary` (paper 5.3, B.2), Procrustes refinement (:func:`refine_pairwise`, :func:`refine_multi`),
:func:`retrieval_recall` (text↔image), :func:`cluster_analysis` (paper A.4), and the saved translation index
(:class:`CorpusIndex`). The command line (``globetrotter-eval``, ``eval.py``) lives in
:mod:`globetrotter.evaluation.cli` and only parses, calls these and prints.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backretrieval.renamed import renamed_keywords

from .clustering import cluster_analysis, purity_scores
from .procrustes import mutual_nearest_neighbors, orthogonal_map, refine_multi, refine_pairwise
from .ranking import Ranking
from .models import ModelLike
from .records import Result
from .reference import ReferencePool, default_reference, read_reference
from .retrieval import retrieval_per_language, retrieval_recall
from .scoring import ScoringContext, SentenceScorer
from .sentence import ParallelSet, parallel_set, sentence_translation
from .tasks.choice import Choice
from .tasks.cluster import evaluate as evaluate_clustering
from .tasks.correspondence import evaluate as evaluate_correspondence
from .tasks.generate import evaluate as evaluate_generation
from .tasks.retrieval import evaluate as evaluate_retrieval
from .tasks.select import select_ranking
from .tasks.sentence import evaluate as evaluate_sentence_translation
from .tasks.translate import translate_sentences, translate_words
from .tasks.word import build_dictionary as build_word_dictionary
from .tasks.word import evaluate as evaluate_word_translation
from .translate import CorpusIndex, build_index
from .word import rank_word_vectors, word_translation, word_translation_scores
from .word_dictionary import tfidf_dictionary

if TYPE_CHECKING:  # the encoder module imports torch
    from ..embeddings import Encoder

_PARALLEL_CACHE: dict[tuple, ParallelSet] = {}


@renamed_keywords(split_dir="split")
def sentence_translation_score(encoder: Encoder, split: str | Path, n_groups: int = 200, seed: int = 0,
                               batch_size: int = 256) -> dict:
    """Sentence translation accuracy of ``encoder`` on a parallel split (paper 5.2).

    For the trainer's validation hook: the seeded sample of ``n_groups`` groups is read
    once per (split, checksum, n_groups, seed) and cached. A model with one word table per language (the
    Sigurdsson baseline) is scored on the split's languages it has a table for. Returns the dict of
    :func:`sentence_translation` with ``score`` (= ``accuracy``) and ``chance`` as
    fractions in [0, 1].
    """
    from data_prep.shards import read_captions, read_manifest

    per_language = getattr(encoder, "needs_language", False)  # the Sigurdsson baseline: one word table per language
    # ... so it is scored on the split's languages it has a table for (a held-out language has none)
    known = tuple(encoder.model.cfg.languages) if per_language else None
    key = (str(Path(split).resolve()), read_manifest(split).get("checksum"), n_groups, seed, known)
    if key not in _PARALLEL_CACHE:
        metas = read_captions(split)
        languages = None if known is None else sorted({m["lang"] for m in metas} & set(known))
        _PARALLEL_CACHE[key] = parallel_set(metas, languages, n_groups=n_groups, seed=seed, where=str(split))
    ps = _PARALLEL_CACHE[key]
    langs = {"langs": list(ps.langs)} if per_language else {}
    emb = encoder.encode_text(ps.captions, batch_size=batch_size, head="text", **langs)
    result = sentence_translation(emb, ps.langs, ps.groups)
    result["score"] = result["accuracy"]
    return result


__all__ = [
    "Choice",
    "CorpusIndex",
    "ModelLike",
    "ParallelSet",
    "Ranking",
    "ReferencePool",
    "Result",
    "ScoringContext",
    "SentenceScorer",
    "build_index",
    "build_word_dictionary",
    "cluster_analysis",
    "default_reference",
    "evaluate_clustering",
    "evaluate_correspondence",
    "evaluate_generation",
    "evaluate_retrieval",
    "evaluate_sentence_translation",
    "evaluate_word_translation",
    "mutual_nearest_neighbors",
    "orthogonal_map",
    "parallel_set",
    "purity_scores",
    "rank_word_vectors",
    "read_reference",
    "refine_multi",
    "refine_pairwise",
    "retrieval_per_language",
    "retrieval_recall",
    "select_ranking",
    "sentence_translation",
    "sentence_translation_score",
    "tfidf_dictionary",
    "translate_sentences",
    "translate_words",
    "word_translation",
    "word_translation_scores",
]
