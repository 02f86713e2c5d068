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
(:func:`.choice_margins.choice_margins`), and each other candidate's paired difference from it
(:func:`.choice_margins.margins_to_choice`; those whose interval holds 0 are candidates val cannot tell from the
choice, drawn by ``eval.py select``). The record keeps the chosen ranking's score on each val query, so two models
chosen on the same queries compare paired (``against``, :func:`.choice_margins.compare_choices`; several seeds of two
recipes: :func:`.choice_margins.paired_margin`): the interval of one's margin over the other, resampling the queries
together.
``eval.py sentence --ranking RECORD`` applies the choice to test, with statistics from the same reference captions
(:func:`.choice.read_choice`).
"""
from __future__ import annotations

import hashlib
import json
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from backretrieval.errors import given, said
from globetrotter.errors import UserError

from ..models import ModelLike, is_baseline
from ..ranking import HEADS, Ranking
from ..records import Result, dataset_info
from ..reference import DEFAULT_SIZE, checked_reference, refuse_test_split
from ..scoring import SCORE_BLOCK, ScoringContext
from ..val_set import BackRetrievalSet, image_features_of
from .checks import require_languages, require_positive_int, require_sequence
from .choice_margins import check_against, choice_margins, compare_choices, margins_to_choice, read_against
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
    for listed, what in ((maxsim, "maxsim"), (csls, "csls")):  # 0.5 or True was 'float/bool object is not iterable'
        if not isinstance(listed, Iterable) or isinstance(listed, str):
            raise TypeError(f"{what}: expected a sequence of the values to try, got one {type(listed).__name__} "
                            f"({listed!r}); wrap it in a list")
    for count, what in ((max_per_lang, "max_per_lang"), (reference_size, "reference_size")):
        if count is not None:  # 0 was the default in silence, 2.5 or -1 numpy's error
            require_positive_int(count, what)
    other = read_against(against) if isinstance(against, (str, Path)) else against
    source = given("against", against) if isinstance(against, (str, Path)) else None  # None: check_against's name
    encoder, info = resolve_model(model, name, device)
    cfg = getattr(encoder, "cfg", None)
    if val is None:
        if cfg is None:
            raise UserError(f"select: {said('--val SPLIT', 'val')} is needed for a model without a run config (the "
                            "baselines)")
        val = Path(cfg.data.root) / cfg.data.val_split
    has: Sequence[str] = ()
    if (Path(val) / "manifest.json").is_file():  # before g embeds any image
        from data_prep.shards import read_manifest

        has = read_manifest(val).get("languages") or ()
        missing = sorted(set(languages or ()) - set(has))
        if missing:
            raise UserError(f"{val}: no caption in language(s) {missing} (has {sorted(has)})")
    refuse_test_split(val, "val")
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
