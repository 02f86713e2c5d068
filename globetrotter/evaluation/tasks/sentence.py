"""Sentence translation by retrieval (Globetrotter paper 5.2) as a library call: :func:`evaluate`."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from backretrieval.errors import given, said
from globetrotter.errors import UserError

from ..models import ModelLike
from ..pivot_ridge import PivotRidgeEncoder
from ..ranking import Ranking, needs_statistics
from ..records import Result, dataset_info, matrix_dict
from ..reference import DEFAULT_SIZE, checked_reference
from ..scoring import ScoringContext
from ..sentence import Candidates, group_interval, sentence_translation
from ..tfidf import TfidfEncoder
from .checks import require_languages, require_positive_int
from .choice import Choice
from .common import read_parallel, resolve_model


def _transductive() -> str:
    """How a message names ``transductive=True``: ``--transductive`` on the command line."""
    return said("--transductive", "transductive=True")


def evaluate(
    model: ModelLike,
    split: str | Path,
    *,
    languages: Sequence[str] | None = None,
    n_groups: int | None = 200,
    ranking: Ranking = Ranking(),
    reference: str | Path | None = None,
    reference_size: int | None = DEFAULT_SIZE,
    transductive: bool = False,
    choice: Choice | None = None,
    candidates: Candidates = "other-language",
    seed: int = 0,
    batch_size: int = 256,
    name: str | None = None,
    device: str = "cpu",
) -> Result:
    """Sentence translation of ``model`` on a ``seed``-ed sample of ``n_groups`` parallel groups of ``split``.

    Every sentence is a query whose translations (its group's sentences in the other languages) are the positives;
    the metric is the share of positives in the query's top M-1 candidates under ``ranking``
    (:mod:`..ranking`), over all queries, with chance beside it, the per-language-pair matrix and a 95% bootstrap
    interval over the groups (``details["interval"]``). ``details["per_group"]`` holds each group's id, hits and
    positives, so that two records of the same groups can be compared pairwise (:func:`..sentence.ratio_interval`).

    Statistics a ranking needs (CSLS radii, MaxSim idf and hubness, the TF-IDF baseline's idf) come from
    ``reference`` (a split; default: the ``train`` split beside ``split``), ``reference_size`` captions per
    language, never from the evaluated sentences (inductive). ``transductive=True`` takes them from the evaluated
    sentences instead, and says so in the record; it excludes ``reference``, and a ranking that reads no statistics
    (the cosine of a trained model) has none to take. ``choice`` (an ``eval.py select``
    record's :class:`~.choice.Choice`) sets the ranking and the reference, and must have been made for these
    languages with these reference captions.

    One-line errors: ``reference`` is ``split`` itself (that is the transductive form), ``transductive`` with a
    ranking that reads no statistics, or, with ``choice``, another model (given by its spec), other languages or
    reference captions than the choice's. The record's ``reference`` and ``reference_size`` are None when no
    reference captions were read. ``device`` runs a model given by its spec (a loaded encoder keeps its own).
    """
    require_languages(languages=languages)
    if not isinstance(ranking, Ranking):  # a str, a path or a Choice was AttributeError: no .needs_statistics
        raise UserError(f"ranking: expected a Ranking (head, maxsim, csls, csls_k), got {type(ranking).__name__} "
                        f"{str(ranking)[:60]!r}; an eval.py select record goes in as choice=Choice.from_record(record)")
    if reference_size is not None:  # 2.5 or -1 was numpy's error
        require_positive_int(reference_size, "reference_size")
    if transductive and (reference is not None or choice is not None):
        excluded = (said(f"--ranking {choice.source}", f"choice ({choice.source})") if choice is not None
                    else given("reference", reference))
        raise UserError(f"{_transductive()} takes the statistics from the evaluated sentences; it excludes {excluded}")
    explicit_reference = reference is not None and choice is None
    if choice is not None:
        ranking, reference, reference_size = choice.ranking, choice.reference, choice.reference_size
    ps = read_parallel(split, languages, n_groups, seed)  # a split that is not parallel is told so before its reference
    # the evaluated split read once, the reference once: its images checked, its captions kept for the statistics; a
    # ranking that takes none reads no reference (not even its choice's) unless --reference names one
    source = (None if transductive or not (needs_statistics(model, ranking) or explicit_reference)
              else checked_reference(split, reference, ps.split_images, ps.languages))
    encoder, info = resolve_model(model, name, device)
    if ranking.head != "text" and isinstance(encoder, (TfidfEncoder, PivotRidgeEncoder)):
        raise UserError(f"{said(f'--head {ranking.head}', f'ranking.head={ranking.head!r}')}: the TF-IDF and ridge "
                        f"baselines have one embedding, no {ranking.head} head; "
                        f"{said('drop --head', 'rank by the text head')}")
    if transductive and not needs_statistics(encoder, ranking):
        raise UserError(f"{_transductive()} takes the ranking's statistics from the evaluated sentences, but the "
                        f"{ranking.label} ranking reads none (CSLS, MaxSim and the TF-IDF baseline's idf do): "
                        f"drop {_transductive()}")
    if choice is not None:
        choice.check_model(model, info)
        choice.check(languages=ps.languages)
    pool = None
    if source is not None and (needs_statistics(encoder, ranking) or explicit_reference):  # not transductive
        # an explicit --reference is read (and checked) even when the ranking takes no statistics from it; a
        # choice's reference only when its ranking does
        pool = source.pool(reference_size)
        if choice is not None:
            choice.check(reference=pool.record)
        if not needs_statistics(encoder, ranking):
            pool = None
    source = None  # the reference's captions: only the pool's sample is kept while scoring
    scorer = ScoringContext(encoder, ps.captions, ps.langs, pool, batch_size).scorer(ranking)
    res = sentence_translation(scorer, ps.langs, ps.groups, candidates=candidates, tie_seed=seed)
    langs = res["languages"]
    metrics = {"sentence_translation": res["accuracy"], "chance": res["chance"],
               "per_query_language": res["per_query_language"], "per_target_language": res["per_target_language"]}
    details = {"matrix": matrix_dict(res["matrix"], langs), "asymmetry": matrix_dict(res["asymmetry"], langs),
               "k": res["k"], "n_queries": res["n_queries"], "n_groups": res["n_groups"],
               "interval": group_interval(res["group_hits"], res["group_positives"], seed=seed),
               "per_group": {"ids": [str(g) for g in ps.group_ids], "hits": res["group_hits"].tolist(),
                             "positives": res["group_positives"].tolist()},
               "groups_without_all_languages": ps.skipped_groups, "scoring": scorer.record}
    if isinstance(encoder, PivotRidgeEncoder):
        details["ridge"] = encoder.config
    config = {"languages": list(ps.languages), "n_groups": n_groups, "ranking": ranking.to_dict(),
              "reference": None if pool is None else pool.source, "reference_size": None if pool is None else reference_size,
              "transductive": transductive, "candidates": candidates, "seed": seed,
              "ranking_record": None if choice is None else choice.source,
              "oracle_choice": bool(choice is not None and choice.oracle)}
    return Result("sentence", metrics, langs, model=info, dataset=dataset_info(split), config=config, details=details,
                  arrays={"matrix": res["matrix"], "asymmetry": res["asymmetry"]})
