"""How far a ranking chosen on val stands above noise, and above another model's choice, on the same val queries."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
from backretrieval.errors import given, option, said
from backretrieval.records import json_text
from backretrieval.uncertainty import paired_bootstrap, recall_interval

from globetrotter.errors import UserError

from .choice import read_record, select_command


def choice_margins(scores: Sequence[np.ndarray], chosen: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """How far the chosen candidate stands above noise on the same val queries (1,000 bootstrap replicates, 95%):
    ``mean`` its interval; ``over_simplest`` and ``over_runner_up`` the paired interval of its margin over the first
    candidate and over the best other one (absent when it is that candidate or there is none)."""
    out: dict[str, dict[str, float]] = {"mean": recall_interval(scores[chosen], seed=seed, bounded=False)}
    if chosen != 0:
        out["over_simplest"] = paired_bootstrap(scores[chosen], scores[0], seed=seed, bounded=False)
    others = [i for i in range(len(scores)) if i != chosen]
    if others:
        runner_up = max(others, key=lambda i: (float(scores[i].mean()), -i))
        out["over_runner_up"] = {"candidate": runner_up,
                                 **paired_bootstrap(scores[chosen], scores[runner_up], seed=seed, bounded=False)}
    return out


def margins_to_choice(scores: Sequence[np.ndarray], chosen: int, seed: int = 0) -> list[dict[str, float] | None]:
    """Each candidate's paired interval of its difference from the chosen one on the same val queries (``diff``,
    ``lo``, ``hi``; 1,000 bootstrap replicates, 95%), None for the chosen itself. An interval that holds 0 is a
    candidate val cannot tell from the choice."""
    return [None if i == chosen else
            {k: v for k, v in paired_bootstrap(s, scores[chosen], seed=seed, bounded=False).items()
             if k in ("diff", "lo", "hi")}
            for i, s in enumerate(scores)]


def within_noise(rows: Sequence[dict]) -> list[str]:
    """The labels of the candidates of a ``select`` record whose paired interval to the choice holds 0."""
    return [r["label"] for r in rows if r.get("vs_chosen") and r["vs_chosen"]["lo"] <= 0 <= r["vs_chosen"]["hi"]]


def read_against(path: str | Path, flag: str | None = None) -> dict:
    """Another model's ``select`` record to compare with (its JSON): a one-line error when it is missing, of another
    form, or without per-query scores (written before they were kept). ``flag``: how messages name the option that
    gave it (default: ``against``, as :func:`~backretrieval.errors.option` names it)."""
    other = read_record(path, flag or option("against"))
    check_against(other, None, "", f"{flag} {path}" if flag else given("against", path))
    return other


def check_against(other: dict, queries: str | None, image_features: str, source: str | None = None) -> None:
    """A one-line error unless ``other`` (a ``select`` record's JSON) holds per-query scores of the val queries whose
    :func:`queries_sha256` is ``queries`` (``image_features``: this selection's ``g``, named in the error; ``None``:
    the form alone is checked). ``source`` names ``other`` in errors (default: ``against``, as
    :func:`~backretrieval.errors.option` names it)."""
    source = source or option("against")
    theirs = other.get("details") if isinstance(other, dict) else None
    if not isinstance(theirs, dict) or not isinstance(theirs.get("val"), dict) or "chosen" not in theirs:
        raise UserError(f"{source}: not a record of `{select_command()}`")
    if "per_query" not in theirs:
        raise UserError(f"{source}: the record holds no per-query scores (written before they were kept); choose "
                        f"again with `{select_command()}` for that model")
    if not _finite_scores(theirs["per_query"]):
        scores = theirs["per_query"]
        raise UserError(f"{source}: details.per_query is {json_text(scores)[:40]}, expected a non-empty list of "
                        f"finite numbers (each val query's score); choose again with `{select_command()}` for that "
                        "model")
    if queries is not None and theirs["val"].get("queries_sha256") != queries:
        config = other.get("config") or {}
        kept = {k: config.get(k) for k in ("val", "seed", "max_per_lang", "languages")}
        kept["seed"] = other.get("seed", kept["seed"])  # a record written before the seed left its config keeps it there
        raise UserError(f"{source}: its val queries are not this selection's ({kept}, g "
                        f"{theirs['val'].get('image_features')} against {image_features}); run "
                        f"{said(f'`{select_command()}`', 'select_ranking')} for both models with the same "
                        f"{', '.join(map(option, ('val', 'seed', 'max_per_lang', 'image_features')))} and "
                        f"{option('languages')}")


def _finite_scores(scores: object) -> bool:
    """A non-empty 1-D run of finite numbers: a record's list read back, or this choice's array before it is written."""
    if isinstance(scores, np.ndarray):
        return scores.ndim == 1 and scores.size > 0 and np.issubdtype(scores.dtype, np.number) and bool(
            np.isfinite(scores).all())
    try:
        return isinstance(scores, list) and bool(scores) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in scores)
    except OverflowError:  # a JSON integer too large for a float
        return False


def compare_choices(record: dict, other: dict, *, seed: int = 0, source: str | None = None) -> dict:
    """How far ``record``'s choice stands above ``other``'s on the same val queries (two ``select`` records, their
    JSON read back): the paired bootstrap interval (1,000 replicates, 95%) of the margin of its per-query score over
    the other's, with what the other chose. A one-line error when ``other`` is no select record, predates per-query
    scores, or scored other queries (:func:`check_against`; ``source`` names ``other``, default ``against``)."""
    margin = paired_margin([record], [other], seed=seed, sources=("this model", source or option("against")))
    model, metrics = (x if isinstance(x, dict) else {} for x in (other.get("model"), other.get("metrics")))
    return {"model": model.get("path"), "chosen": metrics.get("chosen"), "mean_bkr": metrics.get("mean_bkr"), **margin}


def paired_margin(records: Sequence[dict], others: Sequence[dict], *, seed: int = 0,
                  sources: tuple[str, str] = ("A", "B")) -> dict:
    """The paired bootstrap interval (95%) of the margin of ``records`` over ``others`` on the same val queries:
    each side's per-query scores are averaged over its records first (the seeds of one recipe, or one model), so
    the margin is the recipes' mean over seeds, paired query by query. Every record must hold per-query scores of
    the same queries (:func:`check_against`; ``sources`` name the two sides in its errors). ``g_is_encoder_of`` names
    the side whose image encoder is ``g`` itself when the other's is not (:func:`image_encoder_of`): BackRetrieval
    leans towards a model that sees images as ``g`` does, so such a margin does not referee two image encoders
    (docs/evaluation.md)."""
    if not records or not others:
        raise UserError("paired_margin: each side needs at least one select record")
    check_against(records[0], None, "", sources[0])
    first = records[0]["details"]["val"]
    queries, g = first.get("queries_sha256"), first.get("image_features")
    count = len(records[0]["details"]["per_query"])
    for side, group in zip(sources, (records, others)):
        for i, rec in enumerate(group):
            source = side if len(group) == 1 else f"{side} (record {i + 1})"
            check_against(rec, queries, g, source)
            if len(rec["details"]["per_query"]) != count:
                raise UserError(f"{source}: holds {len(rec['details']['per_query'])} per-query scores for the same "
                                f"val queries as {count} scores of {sources[0]}: a damaged record")
    mean = [np.mean([np.asarray(r["details"]["per_query"], dtype=np.float64) for r in group], axis=0)
            for group in (records, others)]
    shared = [side for side, group in zip(sources, (records, others))
              if any(r["details"]["val"].get("model_image_encoder") == g for r in group)]
    if len(shared) == 2:  # both sides see images as g does: it leans towards neither
        shared = []
    return {**paired_bootstrap(mean[0], mean[1], seed=seed, bounded=False), "g_is_encoder_of": shared}


def shared_g_warning(sides: Sequence[str], g: str) -> str:
    """The line that says a comparison's ``g`` is one side's own image encoder; on the command line it names `select`'s
    flag as that command's (experiments/compare_recipes.py, which prints it too, has no such flag)."""
    flag = said(f"`{select_command()} --image-features`", option("image_features"))
    return (f"note: g ({g}) is the image encoder of {' and '.join(sides)}; BackRetrieval leans towards a model that "
            f"sees images as g does, so this margin does not referee two image encoders: compare again under a g "
            f"neither uses ({flag})")


def uncertainty_line(details: dict) -> str:
    """A ``select`` record's intervals in one line: the choice's mean and its margins over the simplest candidate
    and the runner-up (``details`` of the record)."""
    margins, rows = details["uncertainty"], details["candidates"]
    m = margins["mean"]
    parts = [f"{m['value']:.4f} [{m['lo']:.4f}, {m['hi']:.4f}]"]
    for key, index in (("over_simplest", 0), ("over_runner_up", None)):
        if key in margins:
            d = margins[key]
            if index is None and d["candidate"] == 0 and "over_simplest" in margins:
                parts[-1] += " (also the runner-up)"  # one margin, said once
                continue
            label = rows[d["candidate"] if index is None else index]["label"]
            parts.append(f"over {label} {d['diff']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]")
    line = "95% intervals over the val queries (bootstrap): " + "; ".join(parts)
    tied = within_noise(rows)
    if tied:
        line += (f"\nwithin noise of the choice (paired interval holds 0): {len(tied)} of {len(rows) - 1} other "
                 f"rankings ({', '.join(tied)})")
    if "against" in details:
        d = details["against"]
        line += (f"\nagainst {d['model']} ({d['chosen']}, {d['mean_bkr']:.4f}), paired over the same queries: "
                 f"{d['diff']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]")
        if d.get("g_is_encoder_of"):
            line += "\n" + shared_g_warning(d["g_is_encoder_of"], details["val"]["image_features"])
    return line
