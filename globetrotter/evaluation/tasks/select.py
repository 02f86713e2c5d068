"""Choose how to rank sentences on val, never on test: :func:`select_ranking`.

Every candidate :class:`~..ranking.Ranking` (head × late-interaction weight × CSLS) scores the val split's captions,
and BackRetrieval (the image-pivoted metric; no parallel text) judges each: the mean of BkR@K over the source
languages and K, each language's queries retrieving among the captions of every other language at once, as sentence
translation ranks its candidates (:meth:`~..val_set.BackRetrievalSet.evaluate_across_languages`: so CSLS's query
term, which only differs between target languages, is judged too), on the trainer's validation sample (same split,
size, seed and image similarity ``g`` when ``model`` is a run). The highest mean wins; a tie goes to the simpler ranking (the earlier one in
candidate order: text head before cross, smaller W, cosine before CSLS). The record lists every candidate's score,
the choice and the reason, and how far the choice stands above noise: a bootstrap interval over the val queries of
its mean, paired intervals of its margin over the simplest candidate and over the runner-up
(:func:`choice_margins`), and each other candidate's paired difference from it (:func:`margins_to_choice`; those
whose interval holds 0 are candidates val cannot tell from the choice, drawn by ``eval.py select``). The record
keeps the chosen ranking's score on each val query, so two models chosen on the same queries compare paired
(``against``, :func:`compare_choices`; several seeds of two recipes: :func:`paired_margin`): the interval of one's
margin over the other, resampling the queries together.
``eval.py sentence --ranking RECORD`` applies the choice to test, with statistics from the same reference captions
(:func:`read_choice`).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from backretrieval.files import json_text
from backretrieval.uncertainty import paired_bootstrap, recall_interval

from globetrotter.errors import UserError
from globetrotter.shell import program_name

from ..models import ModelLike, is_baseline
from ..ranking import HEADS, Ranking
from ..records import Result, dataset_info
from ..reference import DEFAULT_SIZE, checked_reference, refuse_test_split
from ..scoring import SCORE_BLOCK, ScoringContext
from ..val_set import BackRetrievalSet, image_features_of
from .checks import require_languages, require_sequence
from .common import resolve_model

if TYPE_CHECKING:
    from globetrotter.config import TrainConfig

DEFAULT_MAXSIM = (0.0, 1.0, 2.0, 4.0, 8.0)
"""Late-interaction weights tried by default."""
DEFAULT_IMAGE_FEATURES = "timm:efficientnet_lite0:package"
"""``g`` for a model without a run config (the baselines): ImageNet features of the offline EfficientNet-Lite0."""


def candidates(heads: Sequence[str], maxsim: Sequence[float], csls: Sequence[bool], csls_k: int = 10) -> list[Ranking]:
    """Every combination, simplest first (the tie order of :func:`select_ranking`), whatever the order given."""
    heads = sorted(set(heads), key=lambda h: HEADS.index(h) if h in HEADS else len(HEADS))  # unknown: Ranking says so
    return [Ranking(h, float(w), bool(c), csls_k) for h, w, c in product(heads, sorted(set(maxsim)), sorted(set(csls)))]


def model_candidates(model: ModelLike, encoder: Any, heads: Sequence[str] = HEADS, maxsim: Sequence[float] = DEFAULT_MAXSIM,
                     csls: Sequence[bool] = (False, True), csls_k: int = 10) -> list[Ranking]:
    """:func:`candidates` for ``model`` (its spec) loaded as ``encoder``: a baseline (``tfidf``, ``ridge:SPLIT``) has one
    embedding and no token rows, and an encoder with a token table per language (the Sigurdsson baseline) no rows that
    MaxSim could pair across languages: the baselines have only the text head's cosine and CSLS, such an encoder
    its heads' cosine and CSLS."""
    if isinstance(model, str) and is_baseline(model) or not hasattr(encoder, "token_table"):
        heads, maxsim = ("text",), (0.0,)
    elif getattr(encoder, "needs_language", False):
        maxsim = (0.0,)
    same_heads = getattr(encoder, "same_heads", None)
    if "text" in heads and same_heads is not None and same_heads("text", "cross"):  # text-only: its "cross"
        heads = [head for head in heads if head != "cross"]  # rankings would be copies of the text ones
    return candidates(heads, maxsim, csls, csls_k)


def retrieved_by_ranking(context: ScoringContext, rankings: Sequence[Ranking], bkr: BackRetrievalSet,
                         block: int = SCORE_BLOCK) -> list[dict[str, np.ndarray]]:
    """For each ranking, each val language's queries' best candidate (``retrieved`` of
    :meth:`~..val_set.BackRetrievalSet.evaluate_across_languages`: the index into the language's ``tgt`` of the row
    maximum of its scores, the lowest of ties), found a block of consecutive rows at a time
    (:meth:`~..scoring.ScoringContext.row_blocks`: about ``block`` scores each), each block's cosines computed once per
    head and its MaxSim once for every ranking: no ``[N, N]`` matrix, and the maxima of every block's scores as the
    whole matrix holds them. ``context`` scores ``bkr``'s captions (every sentence against every sentence)."""
    from backretrieval.errors import BackRetrievalError

    context.encode([r.head for r in rankings], [r.head for r in rankings if r.csls])  # each text in one pass
    scorers = [context.scorer(ranking) for ranking in rankings]
    blocks = bkr.language_blocks()
    code = np.searchsorted([lang for lang, _, _ in blocks], bkr.langs)  # each row's language, a block index
    position = np.empty(len(bkr.langs), dtype=np.int64)  # each row's place among its language's queries
    for _, src, _ in blocks:
        position[src] = np.arange(len(src))
    out = [{lang: np.empty(len(src), dtype=np.int64) for lang, src, _ in blocks} for _ in rankings]
    late = any(r.maxsim for r in rankings)
    for rows in context.row_blocks(late, block):
        maxsim = context.maxsim_rows(rows) if late else None
        head, cosine = None, None
        for ranking, scorer, found in zip(rankings, scorers, out):
            if ranking.head != head:  # candidates come head by head: one head's cosines held at a time
                head, cosine = ranking.head, None  # the last head's cosines freed before the next are made
                cosine = scorer.cosine(rows)
            scores = scorer(rows, cosine=cosine, maxsim=maxsim)
            for c in np.unique(code[rows]).tolist():
                lang, _, tgt = blocks[c]
                mine = np.flatnonzero(code[rows] == c)
                if not len(tgt):  # as bkr_recall says of the [src, tgt] scores
                    raise BackRetrievalError("text_sim: 0 columns (vectors of dimension 0)")
                part = scores[mine][:, tgt]
                if not np.isfinite(part).all():
                    raise BackRetrievalError("text_sim: contains NaN or inf")
                found[lang][position[rows[mine]]] = part.argmax(axis=1)
            del scores
        del maxsim, cosine
    return out


def per_query_scores(hits: dict[str, np.ndarray], langs: np.ndarray) -> np.ndarray:
    """Each val query's mean hit over K, weighted so that their plain mean is the mean over source languages (each
    language counts once, whatever its number of queries), as ``mean_bkr`` is (a query of a language with fewer
    queries than the others scores above 1: intervals take them with ``bounded=False``). ``hits`` are
    :meth:`~..val_set.BackRetrievalSet.evaluate_across_languages`' per-query hits, the languages in sorted order."""
    scores = np.mean([np.asarray(h, dtype=np.float64) for h in hits.values()], axis=0)
    order, counts = np.unique(np.asarray(langs), return_counts=True)
    per_row = np.repeat(counts, counts)  # the size of each query's language, in the hits' order
    return scores * len(scores) / (len(order) * per_row)


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


def queries_sha256(bkr: BackRetrievalSet) -> str:
    """The identity of a val set's queries as BackRetrieval scores them: captions, languages, images, ``g`` and K.
    Two ``select`` records with the same one scored the same queries, each at the same place in their per-query lists."""
    parts = {"texts": list(bkr.texts), "langs": bkr.langs.tolist(), "images": bkr.image_ids.tolist(),
             "g": bkr.image_spec, "ks": list(bkr.ks)}
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


def image_encoder_of(cfg: TrainConfig | None) -> str | None:
    """A run's image encoder in the form of a ``g`` spec (``timm:BACKBONE:WEIGHTS``; ``imported:NAME`` for imported
    vectors), so that a comparison can tell when ``g`` is one of the compared models' own encoder; ``None`` for a
    model without a run config."""
    if cfg is None:
        return None
    model = cfg.model
    if model.image_backbone == "imported":
        return f"imported:{model.image_pretrained}"
    return f"timm:{model.image_backbone}:{model.image_pretrained}"


def read_against(path: str | Path, flag: str = "--against") -> dict:
    """Another model's ``select`` record to compare with (its JSON): a one-line error when it is missing, of another
    form, or without per-query scores (written before they were kept)."""
    other = read_record(path, flag)
    check_against(other, None, "", f"{flag} {path}")
    return other


def _select() -> str:
    """This command as messages name it: ``eval.py select`` from the repository's script, else
    ``globetrotter-eval select`` (:func:`globetrotter.shell.program_name`)."""
    return f"{program_name('eval')} select"


def check_against(other: dict, queries: str | None, image_features: str, source: str = "--against") -> None:
    """A one-line error unless ``other`` (a ``select`` record's JSON) holds per-query scores of the val queries whose
    :func:`queries_sha256` is ``queries`` (``image_features``: this selection's ``g``, named in the error; ``None``:
    the form alone is checked)."""
    theirs = other.get("details") if isinstance(other, dict) else None
    if not isinstance(theirs, dict) or not isinstance(theirs.get("val"), dict) or "chosen" not in theirs:
        raise UserError(f"{source}: not a record of `{_select()}`")
    if "per_query" not in theirs:
        raise UserError(f"{source}: the record holds no per-query scores (written before they were kept); choose "
                        f"again with `{_select()}` for that model")
    if not _finite_scores(theirs["per_query"]):
        scores = theirs["per_query"]
        raise UserError(f"{source}: details.per_query is {json_text(scores)[:40]}, expected a non-empty list of "
                        f"finite numbers (each val query's score); choose again with `{_select()}` for that model")
    if queries is not None and theirs["val"].get("queries_sha256") != queries:
        config = other.get("config") or {}
        said = {k: config.get(k) for k in ("val", "seed", "max_per_lang", "languages")}
        said["seed"] = other.get("seed", said["seed"])  # a record written before the seed left its config keeps it there
        raise UserError(f"{source}: its val queries are not this selection's ({said}, g "
                        f"{theirs['val'].get('image_features')} against {image_features}); run "
                        f"`{_select()}` for both models with the same --val, --seed, --max-per-language, --image-features "
                        f"and --languages")


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


def compare_choices(record: dict, other: dict, *, seed: int = 0, source: str = "--against") -> dict:
    """How far ``record``'s choice stands above ``other``'s on the same val queries (two ``select`` records, their
    JSON read back): the paired bootstrap interval (1,000 replicates, 95%) of the margin of its per-query score over
    the other's, with what the other chose. A one-line error when ``other`` is no select record, predates per-query
    scores, or scored other queries (:func:`check_against`)."""
    margin = paired_margin([record], [other], seed=seed, sources=("this model", source))
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


def read_record(path: str | Path, flag: str) -> dict:
    """A ``select`` record's JSON, for the option ``flag`` (a one-line error naming the file when it is missing or
    not JSON)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: a folder; {flag} takes the JSON record that `{_select()}` wrote")
    if not path.is_file():
        raise UserError(f"{path}: no such file ({flag} takes the JSON record that `{_select()}` wrote)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start}), so not a record of `{_select()}` (the JSON it "
                        "writes)") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}:{err.colno}: not JSON ({err.msg}); expected the record `{_select()}` "
                        "wrote") from None


def select_ranking(
    model: ModelLike,
    val: str | Path | None = None,
    *,
    languages: Sequence[str] | None = None,
    heads: Sequence[str] = HEADS,
    maxsim: Sequence[float] = DEFAULT_MAXSIM,
    csls: Sequence[bool] = (False, True),
    csls_k: int = 10,
    reference: str | Path | None = None,
    reference_size: int | None = DEFAULT_SIZE,
    max_per_lang: int | None = None,
    image_features: str | None = None,
    seed: int | None = None,
    batch_size: int = 256,
    name: str | None = None,
    device: str = "cpu",
    against: str | Path | dict | None = None,
    log: Callable[[str], None] = print,
) -> Result:
    """The ranking of ``model`` with the highest mean val BackRetrieval (module docstring).

    For a trained run, ``val``, ``max_per_lang``, ``image_features``, ``seed`` and the K default to its config's
    (``data.root/data.val_split``, ``val.*``, ``seed``); a baseline (``tfidf``, ``ridge:SPLIT``) needs ``val`` and
    has one head and no token rows (its candidates: cosine and CSLS). Statistics come from ``reference`` (default:
    the ``train`` split beside ``val``), as in :func:`.sentence.evaluate`. ``device`` runs g's image model (and a
    model named by its path). ``against``: another model's ``select`` record on the same val queries (its file,
    or its JSON read by :func:`read_against`); the record then holds this choice's paired margin over that one
    (:func:`compare_choices`).
    """
    require_languages(languages=languages)
    require_sequence(heads, "heads", "head names")
    other = read_against(against) if isinstance(against, (str, Path)) else against
    source = "--against" + (f" {against}" if isinstance(against, (str, Path)) else "")
    encoder, info = resolve_model(model, name, device)
    cfg = getattr(encoder, "cfg", None)
    if val is None:
        if cfg is None:
            raise UserError("select: --val SPLIT is needed for a model without a run config (the baselines)")
        val = Path(cfg.data.root) / cfg.data.val_split
    has: Sequence[str] = ()
    if (Path(val) / "manifest.json").is_file():  # before g embeds any image
        from data_prep.shards import read_manifest

        has = read_manifest(val).get("languages") or ()
        missing = sorted(set(languages or ()) - set(has))
        if missing:
            raise UserError(f"{val}: no caption in language(s) {missing} (has {sorted(has)})")
    refuse_test_split(val, "--val")
    from data_prep.shards import iter_metas

    # val's captions read once, for the images the reference must not show and for BackRetrieval's sample
    metas = [(m["caption"], m["lang"], str(m["image_id"])) for m in iter_metas(val)] if has else None
    # the reference read once: checked as choice_reference does, its captions of the languages val may evaluate kept
    captions = checked_reference(val, reference, None if metas is None else {image for _, _, image in metas},
                                 languages=tuple(languages or has))
    ks = tuple(cfg.val.bkr_ks) if cfg is not None else (1, 5, 10)
    max_per_lang = max_per_lang or (cfg.val.max_per_lang if cfg is not None else 300)
    if image_features is None:
        image_features = DEFAULT_IMAGE_FEATURES if cfg is None else image_features_of(cfg, cfg.data.val_split)
    seed = seed if seed is not None else (cfg.seed if cfg is not None else 0)
    rankings = model_candidates(model, encoder, heads, maxsim, csls, csls_k)
    bkr = BackRetrievalSet(val, max_per_lang, seed, image_features, ks, device=device, captions=metas)
    del metas
    if languages:
        bkr.keep_languages(languages)
    warning = bkr.saturation_warning()
    if warning:  # rankings then tie at that K, whatever they do
        print(warning)
    evaluated = sorted(set(bkr.langs.tolist()))
    queries = queries_sha256(bkr)
    if other is not None:  # before any scoring
        check_against(other, queries, image_features, source)
    pool = captions.pool(reference_size, evaluated)
    del captions  # only the pool's sample is kept while scoring
    context = ScoringContext(encoder, bkr.texts, bkr.langs, pool, batch_size)
    rows, per_query = [], []
    for ranking, retrieved in zip(rankings, retrieved_by_ranking(context, rankings, bkr)):
        metrics, hits = bkr.evaluate_across_languages(retrieved=retrieved)
        mean = float(np.mean([metrics[f"val/bkr@{k}"] for k in ks]))
        per_query.append(per_query_scores(hits, bkr.langs))
        rows.append({"ranking": ranking.to_dict(), "label": ranking.label, "mean_bkr": mean,
                     **{k.split("/")[1]: v for k, v in metrics.items()}})
        log(f"select: {ranking.label:<28} mean val BkR@{{{','.join(map(str, ks))}}} {mean:.4f}")
    best = max(range(len(rows)), key=lambda i: (rows[i]["mean_bkr"], -i))
    chosen = rows[best]
    reason = (f"highest mean val BackRetrieval@{{{','.join(map(str, ks))}}} of {','.join(evaluated)} queries among "
              f"the other languages' captions ({chosen['mean_bkr']:.4f}); ties to the simpler ranking")
    margins = choice_margins(per_query, best, seed)
    for row, margin in zip(rows, margins_to_choice(per_query, best, seed)):
        if margin is not None:
            row["vs_chosen"] = margin
    summary = {"chosen": chosen["label"], "mean_bkr": chosen["mean_bkr"]}
    details = {"chosen": chosen["ranking"], "reason": reason, "uncertainty": margins, "candidates": rows,
               "val": {"captions": len(bkr.texts), "image_features": image_features, "ks": list(ks),
                       "queries_sha256": queries, "model_image_encoder": image_encoder_of(cfg)},
               "reference": pool.record, "per_query": per_query[best]}
    config = {"val": str(val), "languages": evaluated, "heads": sorted({r.head for r in rankings}, key=HEADS.index),
              "maxsim": sorted({r.maxsim for r in rankings}), "csls": list(csls), "csls_k": csls_k, "reference": pool.source, "reference_size": reference_size,
              "max_per_lang": max_per_lang, "seed": seed}
    if other is not None:
        details["against"] = compare_choices({"details": details}, other, seed=seed, source=source)
    return Result("select", summary, evaluated, model=info, dataset=dataset_info(val), config=config, details=details)


def shared_g_warning(sides: Sequence[str], g: str) -> str:
    """The line that says a comparison's ``g`` is one side's own image encoder."""
    return (f"note: g ({g}) is the image encoder of {' and '.join(sides)}; BackRetrieval leans towards a model that "
            f"sees images as g does, so this margin does not referee two image encoders: compare again under a g "
            f"neither uses (--image-features)")


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


@dataclass(frozen=True)
class Choice:
    """What an ``eval.py select`` record chose: the ranking, and the reference captions its statistics came from (a
    split and a per-language cap), for the model and languages it was chosen for. Scoring test with the same
    ranking and reference applies exactly that choice: ``evaluate_sentence_translation(model, split, choice=c)``,
    which refuses another model, other languages, or reference captions that changed since (:meth:`check`)."""

    ranking: Ranking
    reference: str
    reference_size: int | None
    model: str | None = None
    languages: tuple[str, ...] | None = None
    reference_sha256: str | None = None
    source: str = "the select record"
    checkpoint: str | None = None
    """The checkpoint whose weights the choice was made for (``None``: a baseline)."""
    weights_sha256: str | None = None
    """Those weights' file digest (``None``: a baseline, or a record from before it was kept)."""
    oracle: bool = False
    """Made on parallel val text (``experiments/oracle_ranking.py``): a ceiling, not a choice a method can make."""

    @classmethod
    def from_record(cls, data: dict, source: str = "the select record") -> "Choice":
        """The choice of a ``select`` record (``Result.to_record()`` of :func:`select_ranking`, or its JSON read back;
        the oracle's records have the same form). A record of another form is a one-line error."""
        if not isinstance(data, dict) or not all(isinstance(data.get(k), dict) for k in ("details", "config")):
            raise UserError(f"{source}: not a record of `{_select()}` (expected a JSON object with "
                            f"details and config)")
        model, languages = data.get("model") or {}, data.get("languages")
        reference = data["details"].get("reference") or {}
        if not isinstance(model, dict) or not isinstance(reference, dict):
            raise UserError(f"{source}: not a record of `{_select()}` (model and details.reference: objects)")
        return cls(Ranking.from_dict(data["details"]["chosen"], source), str(data["config"]["reference"]),
                   data["config"]["reference_size"], model.get("path"),
                   None if languages is None else tuple(sorted(languages)), reference.get("sha256"), source,
                   model.get("checkpoint"), model.get("weights_sha256"), bool(data["config"].get("oracle")))

    def check_model(self, model: ModelLike, info: dict) -> None:
        """:meth:`check` of the model an evaluation was given (``model``, a spec or an encoder object) and resolved
        to (``info``, its record entry): a model given by its spec, or a baseline object, by the path its record
        names; a loaded run by the checkpoint it holds."""
        by_path = isinstance(model, (str, Path)) or info["checkpoint"] is None
        self.check(model=info["path"] if by_path else None, checkpoint=info["checkpoint"],
                   weights_sha256=info.get("weights_sha256"))

    def check(self, *, model: str | None = None, checkpoint: str | None = None, languages: Sequence[str] | None = None,
              reference: dict | None = None, weights_sha256: str | None = None) -> None:
        """A one-line error when the choice is applied to another ``model`` (its record's path), other weights (the
        ``checkpoint`` a loaded model holds, or the digest of its weights file: a run folder that has saved a better
        or later one since), other ``languages``, or a reference pool (its ``record``) whose captions are not the
        ones it was chosen with."""
        again = f"choose again with `{_select()}` for this evaluation"
        same_weights = checkpoint is not None and checkpoint == self.checkpoint  # e.g. RUN and RUN/checkpoints/best
        if model is not None and self.model is not None and model != self.model and not same_weights:
            raise UserError(f"{self.source} chose a ranking for {self.model}, not {model}; {again}")
        if checkpoint is not None and self.model is not None and checkpoint != self.checkpoint:
            chosen_for = self.checkpoint or self.model
            raise UserError(f"{self.source} chose a ranking for the weights of {chosen_for}, not those of {checkpoint} "
                            f"(has the run saved another checkpoint since?); {again}")
        if weights_sha256 and self.weights_sha256 and weights_sha256 != self.weights_sha256:
            raise UserError(f"{self.source} chose a ranking for other weights than {checkpoint or model} holds now "
                            f"(sha256 {self.weights_sha256[:12]}, now {weights_sha256[:12]}: has the run saved another "
                            f"checkpoint there since?); {again}")
        if languages is not None and self.languages is not None and tuple(sorted(languages)) != self.languages:
            raise UserError(f"{self.source} chose a ranking for {','.join(self.languages)}, not "
                            f"{','.join(sorted(languages))}: evaluate --languages {','.join(self.languages)}, or "
                            f"{again} (--languages)")
        if reference is not None and self.reference_sha256 is not None and reference["sha256"] != self.reference_sha256:
            raise UserError(f"{self.source}: the captions of {reference['split']} are not those the ranking was "
                            f"chosen with (sha256 {reference['sha256'][:12]}, the record's {self.reference_sha256[:12]}); "
                            f"{again}")


def read_choice(record: str | Path) -> Choice:
    """The :class:`Choice` of a ``select`` record's JSON file."""
    data = read_record(record, "--ranking")
    try:
        return Choice.from_record(data, source=str(record))
    except KeyError as err:
        raise UserError(f"{record}: not a record of `{_select()}` (missing key {err.args[0]!r})") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise UserError(f"{record}: not a record of `{_select()}` ({err})") from None
