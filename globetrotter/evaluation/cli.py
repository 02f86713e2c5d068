"""``globetrotter-eval`` / ``python eval.py``: evaluate and use a trained model.

Every evaluation sub-command loads the model and a shard split, computes its metric with
the pure functions of this package, prints a short summary and writes one JSON record
(dataset, model, task, metrics, languages, config) to ``--out/<task>-<model>.json``,
appends it to ``--out/results.jsonl`` (to collect a table across runs), and saves its
plots (PNG) next to it. ``translate`` and ``translate-word`` print translations instead.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np

from globetrotter.argtypes import fusion_weight, non_negative_float, positive_int
from globetrotter.errors import UserError, run_cli

from . import plots
from .clustering import cluster_analysis
from .retrieval import retrieval_per_language
from .sentence import csls_penalty, csls_radii, parallel_set, sentence_translation
from .pivot_ridge import PREFIX as RIDGE_PREFIX
from .pivot_ridge import PivotRidgeEncoder, is_pivot_ridge_spec
from .fusion import choose_weight, fuse_with_surface
from .late_interaction import LateInteraction
from .tfidf import TfidfEncoder, is_tfidf_spec
from .translate import DEFAULT_IVF_MIN, DEFAULT_NPROBE, file_signature, open_or_build, read_text_corpus
from .word import (
    CaptionTokenizer,
    WordSpace,
    both_directions,
    build_dictionaries,
    input_word_embeddings,
    is_fragment,
    key_text,
    read_dictionaries,
    row_keys,
    translate_words,
    word_translation,
    write_dictionary,
)

# ----------------------------------------------------------------------------- helpers


def load_encoder(path: str):
    """``globetrotter.load(path)``, imported lazily (tests replace this function with a fake).

    The spec ``tfidf`` gives the unfitted character n-gram TF-IDF baseline instead, and
    ``ridge:TRAIN_SPLIT`` the image-pivot ridge baseline fitted on that split.
    """
    if is_tfidf_spec(path):
        return TfidfEncoder()
    if is_pivot_ridge_spec(path):
        return PivotRidgeEncoder(path[len(RIDGE_PREFIX):])
    if not Path(path).exists():
        raise UserError(f"{path}: model not found (expected a run folder or a checkpoint folder)")
    from globetrotter import load

    return load(path)


def _lang_kw(encoder, langs) -> dict:
    """``{"langs": langs}`` for an encoder with per-language word tables (the Sigurdsson baseline), else
    ``{}``: the other encoders (and the baselines' ``encode_text``) take no languages."""
    if not getattr(encoder, "needs_language", False):
        return {}
    return {"langs": langs if langs is None or isinstance(langs, str) else list(langs)}


def _token_embeddings(encoder, lang: str | None):
    """``encoder.token_embeddings()``; ``lang``'s own table for an encoder with per-language tables."""
    return encoder.token_embeddings(lang) if getattr(encoder, "needs_language", False) else encoder.token_embeddings()


def _languages(arg: str | None) -> list[str] | None:
    return [x.strip() for x in arg.split(",") if x.strip()] if arg else None


def _jsonable(obj):
    """numpy → plain Python; NaN/inf → None (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _matrix_dict(matrix: np.ndarray, languages: Sequence[str]) -> dict:
    """Row-major ``{row_lang: {col_lang: value}}`` view of a language-pair matrix."""
    return {a: {b: matrix[i, j] for j, b in enumerate(languages) if i != j} for i, a in enumerate(languages)}


def _model_name(args: argparse.Namespace) -> str:
    if getattr(args, "name", None):
        return args.name
    if is_tfidf_spec(args.model):
        return "tfidf"
    if is_pivot_ridge_spec(args.model):
        return "ridge-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(Path(args.model[len(RIDGE_PREFIX):]).parts[-2:]))
    path = Path(args.model).resolve()
    parts = [p for p in path.parts[-3:] if p not in ("checkpoints",)]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts[-2:]))


def _dataset_info(split: str | Path) -> dict:
    from data_prep.shards import read_manifest

    manifest = read_manifest(split)
    return {"path": str(Path(split).resolve()), "split": manifest.get("split"), "source": manifest.get("source"),
            "checksum": manifest.get("checksum"), "num_samples": manifest.get("num_samples")}


def write_record(args: argparse.Namespace, task: str, metrics: dict, languages: Sequence[str],
                 details: dict | None = None, plots_written: Sequence[Path] = ()) -> Path:
    """Write the run's JSON record to ``--out/<task>-<model>.json`` and append it to ``results.jsonl``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k not in ("func",)}
    record = {
        "task": task,
        "dataset": _dataset_info(args.split) if getattr(args, "split", None) else None,
        "model": {"path": (args.model if is_tfidf_spec(args.model) else str(Path(args.model).resolve()))
                  if getattr(args, "model", None) else None,
                  "name": _model_name(args) if getattr(args, "model", None) else None},
        "metrics": metrics,
        "languages": list(languages),
        "config": config,
        "details": details or {},
        "plots": [str(p) for p in plots_written],
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    record = _jsonable(record)
    name = f"{task}-{record['model']['name']}" if record["model"]["name"] else task
    path = out / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")
    tmp.replace(path)
    with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({k: record[k] for k in ("task", "dataset", "model", "metrics", "languages", "config", "created")},
                            ensure_ascii=False, allow_nan=False) + "\n")
    print(f"wrote {path}")
    return path


def _read_parallel(args: argparse.Namespace, n_groups: int | None):
    from data_prep.shards import read_captions

    metas = read_captions(args.split)
    return parallel_set(metas, _languages(args.languages), n_groups=n_groups, seed=args.seed, where=str(args.split))


def _plot_prefix(args: argparse.Namespace, task: str) -> Path:
    return Path(args.out) / f"{task}-{_model_name(args)}"


# ----------------------------------------------------------------------------- sentence


def _fit_tfidf(args: argparse.Namespace, encoder, ps) -> dict | None:
    """Fit the TF-IDF baseline's idf (no labels): on every caption of the split in the evaluated
    languages (``--tfidf-fit split``, default) or on the evaluated sample only. None for a model."""
    if not isinstance(encoder, TfidfEncoder):
        return None
    if args.tfidf_fit == "split":
        from data_prep.shards import read_captions

        wanted = set(ps.languages)
        encoder.fit([m["caption"] for m in read_captions(args.split) if m["lang"] in wanted])
    else:
        encoder.fit(ps.captions)
    return {**encoder.config, "fit": args.tfidf_fit}


def _text_model_only(args: argparse.Namespace, command: str) -> None:
    """A one-line error when a command that needs a trained model is given ``--model tfidf``."""
    model = getattr(args, "model", None)
    if is_tfidf_spec(model) or is_pivot_ridge_spec(model):
        raise UserError(f"{command}: --model {model.split(':')[0]} is a baseline of `eval.py sentence` only; "
                        f"{command} needs a trained run folder")


def _late_interaction(args: argparse.Namespace, encoder, ps) -> LateInteraction | None:
    """``--maxsim W``: the late-interaction scorer of the model's token rows over the evaluated sentences, the
    tokens' hubness per language or over the vocabulary (``--maxsim-hubness``)."""
    if args.maxsim is None:
        return None
    try:
        return LateInteraction(encoder, args.maxsim, ps.captions,
                               languages=ps.langs if args.maxsim_hubness == "per-language" else None)
    except ValueError as err:
        raise UserError(f"--maxsim: {err} (--maxsim-hubness vocabulary takes it over the whole vocabulary)") from None


def _csls(args: argparse.Namespace, encoder, ps, emb, fuse_weight: float | None, surface,
          late: LateInteraction | None = None) -> tuple[dict, dict | None]:
    """``--retrieval csls``: the ranking's CSLS terms as :func:`sentence_translation` keywords, over the evaluated
    sentences or over the ``--csls-pool`` split's captions in the evaluated languages (embedded as the sentences
    are, fused alike, with ``--maxsim`` alike), and their record; ``({}, None)`` for cosine. Per language
    (default): every row's radius in each language (``csls_radii``); pooled: each candidate's ``r(y) / 2`` over
    all other languages together (``candidate_penalty``)."""
    if args.retrieval != "csls":
        return {}, None
    record = {"k": args.csls_k, "pool": "evaluated sentences", "neighbourhood": args.csls_neighbourhood}
    pool = pool_langs = None
    if args.csls_pool:
        from data_prep.shards import read_captions

        wanted = set(ps.languages)
        metas = [m for m in read_captions(args.csls_pool) if m["lang"] in wanted]
        if not metas:
            raise UserError(f"{args.csls_pool}: no caption in {sorted(wanted)} for --csls-pool")
        pool_langs = np.array([m["lang"] for m in metas])
        pool = _sentence_embeddings(args, encoder, [m["caption"] for m in metas], pool_langs, fuse_weight, surface)
        record.update(pool=str(args.csls_pool), pool_captions=len(metas))
    extra = None
    if late is not None:
        extra = late.scorer(late.evaluated, late.evaluated if pool is None
                            else late.bags([m["caption"] for m in metas], pool_langs))
    try:
        if args.csls_neighbourhood == "pooled":
            return {"candidate_penalty": csls_penalty(emb, ps.langs, args.csls_k, pool, pool_langs,
                                                      extra_scores=extra) / 2.0}, record
        return {"csls_radii": csls_radii(emb, ps.langs, args.csls_k, pool, pool_langs, extra_scores=extra)}, record
    except ValueError as err:
        raise UserError(f"--retrieval csls: {err}") from None


def _sentence_embeddings(args: argparse.Namespace, encoder, captions: list[str], langs, fuse_weight: float | None,
                         surface) -> np.ndarray:
    """The rows ``eval.py sentence`` ranks: the model's (or the baseline's) embeddings, fused with ``surface``'s
    TF-IDF at ``fuse_weight`` when given."""
    emb = encoder.encode_text(captions, batch_size=args.batch_size, head=args.head, **_lang_kw(encoder, langs))
    return emb if fuse_weight is None else fuse_with_surface(emb, surface.encode_text(captions), fuse_weight)


def _sentence(args: argparse.Namespace) -> int:
    if args.fuse_tfidf is not None and is_tfidf_spec(args.model):
        raise UserError("--fuse-tfidf mixes a model with the TF-IDF baseline: give a model, not --model tfidf")
    if args.fuse_tfidf == "auto" and is_pivot_ridge_spec(args.model):
        raise UserError("--fuse-tfidf auto chooses W on a run's val split: give a run folder or a number")
    if args.maxsim is not None and (is_tfidf_spec(args.model) or is_pivot_ridge_spec(args.model)):
        raise UserError(f"--maxsim scores a trained model's token rows; --model {args.model.split(':')[0]} has none")
    ps = _read_parallel(args, args.n_groups)
    encoder = load_encoder(args.model)
    tfidf = _fit_tfidf(args, encoder, ps)
    fused = surface = None
    if args.fuse_tfidf is not None:
        fused = {"weight": args.fuse_tfidf}
        if args.fuse_tfidf == "auto":
            fused["weight"], fused["val_mean_bkr"] = choose_weight(encoder, args.head, ps.languages, log=lambda m: print(m, file=sys.stderr))
            print(f"--fuse-tfidf auto: W={fused['weight']:.2f} (highest mean val BackRetrieval)", file=sys.stderr)
        surface = TfidfEncoder()
        fused["tfidf"] = _fit_tfidf(args, surface, ps)
    weight = fused["weight"] if fused else None
    emb = _sentence_embeddings(args, encoder, ps.captions, ps.langs, weight, surface)
    late = _late_interaction(args, encoder, ps)
    ranking, csls = _csls(args, encoder, ps, emb, weight, surface, late)
    res = sentence_translation(emb, ps.langs, ps.groups, candidates=args.candidates, tie_seed=args.seed, **ranking,
                               extra_scores=None if late is None else late.scorer(late.evaluated, late.evaluated))
    langs = res["languages"]
    prefix = _plot_prefix(args, "sentence")
    written = [
        plots.plot_language_matrix(res["matrix"], langs, f"{prefix}-matrix.png",
                                   "Sentence translation by query → target language (%)"),
        plots.plot_language_matrix(res["asymmetry"], langs, f"{prefix}-asymmetry.png",
                                   "Asymmetry A − Aᵀ (percentage points)", diverging=True, label="pp"),
    ]
    metrics = {"sentence_translation": res["accuracy"], "chance": res["chance"],
               "per_query_language": res["per_query_language"], "per_target_language": res["per_target_language"]}
    details = {"matrix": _matrix_dict(res["matrix"], langs), "asymmetry": _matrix_dict(res["asymmetry"], langs),
               "k": res["k"], "n_queries": res["n_queries"], "n_groups": res["n_groups"],
               "groups_without_all_languages": ps.skipped_groups}
    if tfidf is not None:
        details["tfidf"] = tfidf
    if isinstance(encoder, PivotRidgeEncoder):
        details["ridge"] = encoder.config
    if fused is not None:
        details["fuse_tfidf"] = fused
    if csls is not None:
        details["csls"] = csls
    if late is not None:
        details["maxsim"] = late.record
    print(f"sentence translation: {100 * res['accuracy']:.2f}% of translations in the top {res['k']} "
          f"(chance {100 * res['chance']:.2f}%), {res['n_groups']} groups x {len(langs)} languages")
    write_record(args, "sentence", metrics, langs, details, written)
    return 0


# ----------------------------------------------------------------------------- word


def _word_spaces(encoder, args, words_by_lang: dict[str, list[str]], counts: dict[str, Counter]) -> dict[str, WordSpace]:
    spaces = {}
    if args.embeddings == "input":
        shared = None if getattr(encoder, "needs_language", False) else encoder.token_embeddings()
        for lang, words in words_by_lang.items():
            tokens, matrix = shared or _token_embeddings(encoder, lang)  # per-language tables
            kept, emb = input_word_embeddings(words, tokens, matrix, encoder.tokenizer, counts.get(lang))
            spaces[lang] = WordSpace(kept, emb)
    else:
        for lang, words in words_by_lang.items():
            words = [w for w in words if not is_fragment(w)]  # a byte fragment is no text to encode
            emb = (encoder.encode_words([key_text(w) for w in words], **_lang_kw(encoder, lang)) if words
                   else np.zeros((0, 1), np.float32))
            spaces[lang] = WordSpace(words, emb)
    return spaces


def _word(args: argparse.Namespace) -> int:
    _text_model_only(args, "word")
    if not args.dictionary and not args.split:
        raise UserError("word: give --split (a parallel split, for the tf-idf ground truth) or --dictionary")
    encoder = load_encoder(args.model)
    tokenizer = CaptionTokenizer(encoder.tokenizer)
    tokenized: dict[str, list[list[str]]] = {}
    if args.split:
        ps = _read_parallel(args, None)
        for lang in ps.languages:
            tokenized[lang] = tokenizer([c for c, l in zip(ps.captions, ps.langs) if l == lang])
    counts = {lang: Counter(t for s in sents for t in s) for lang, sents in tokenized.items()}
    languages = _languages(args.languages) or (sorted(tokenized) if tokenized else None)
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
    prefix = _plot_prefix(args, "word")
    for method in args.method:
        for proc in args.procrustes:
            res = word_translation(spaces, dicts, method=method, procrustes=proc,
                                   procrustes_k=args.procrustes_k, procrustes_iter=args.procrustes_iter)
            tag = f"{method}/{proc}"
            metrics[tag] = {k: v for k, v in res.items() if k.startswith(("recall@", "precision@"))}
            details[tag] = {"pairs": res["pairs"], "procrustes_log": res["procrustes_log"],
                            "recall_matrix": _matrix_dict(res["matrix"], res["languages"]),
                            "recall_matrix_no_identical": _matrix_dict(res["matrix_no_identical"], res["languages"])}
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
    write_record(args, "word", metrics, sorted(spaces), details, written)
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
        _text_model_only(args, "build-dictionary")
        tok = load_encoder(args.model).tokenizer
    else:
        tok = None
    ps = _read_parallel(args, args.n_groups)
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


# ----------------------------------------------------------------------------- retrieval


def _retrieval(args: argparse.Namespace) -> int:
    if is_tfidf_spec(args.model):
        raise UserError("retrieval: --model tfidf is a text-only surface baseline with no image encoder; "
                        "text-image retrieval needs a trained run folder")
    from data_prep.shards import decode_image, iter_raw, read_captions

    wanted = set(_languages(args.languages) or [])
    metas = [m for m in read_captions(args.split) if not wanted or m["lang"] in wanted]
    missing = wanted - {m["lang"] for m in metas}
    if missing:
        raise UserError(f"{args.split}: no caption in language(s) {sorted(missing)}")
    image_ids = sorted({str(m["image_id"]) for m in metas})
    if args.max_images and len(image_ids) > args.max_images:
        pick = np.random.default_rng(args.seed).choice(len(image_ids), args.max_images, replace=False)
        image_ids = [image_ids[i] for i in np.sort(pick)]
    row_of = {iid: i for i, iid in enumerate(image_ids)}
    encoder = load_encoder(args.model)
    image_emb: list[np.ndarray | None] = [None] * len(image_ids)
    batch, batch_rows = [], []

    def flush() -> None:
        if batch:
            emb = encoder.encode_image(batch, batch_size=args.batch_size)
            for r, e in zip(batch_rows, emb):
                image_emb[r] = e
            batch.clear()
            batch_rows.clear()

    seen = set()
    for _, ext, data, meta in iter_raw(args.split):
        iid = str(meta["image_id"])
        if iid in row_of and iid not in seen:
            seen.add(iid)
            batch.append(decode_image(data, ext))
            batch_rows.append(row_of[iid])
            if len(batch) >= args.batch_size:
                flush()
    flush()
    captions = [m for m in metas if str(m["image_id"]) in row_of]
    text_emb = encoder.encode_text([m["caption"] for m in captions], batch_size=args.batch_size, head="cross",
                                   **_lang_kw(encoder, [m["lang"] for m in captions]))
    res = retrieval_per_language(text_emb, [m["lang"] for m in captions], np.stack(image_emb),
                                 [row_of[str(m["image_id"])] for m in captions], ks=args.ks)
    langs = sorted(res["per_language"])
    for lang in langs:
        m = res["per_language"][lang]
        print(f"{lang}: text→image " + " ".join(f"R@{k} {100 * m[f'image_retrieval_recall@{k}']:.1f}" for k in args.ks)
              + " | image→text " + " ".join(f"R@{k} {100 * m[f'text_retrieval_recall@{k}']:.1f}" for k in args.ks))
    written = [plots.plot_bars({l: {f"R@{k}": 100 * res["per_language"][l][f"image_retrieval_recall@{k}"] for k in args.ks}
                                for l in langs}, f"{_plot_prefix(args, 'retrieval')}-text2image.png",
                               f"Text→image retrieval over {len(image_ids)} images", "recall (%)")]
    write_record(args, "retrieval", res, langs, {"n_images": len(image_ids), "n_captions": len(captions)}, written)
    return 0


# ----------------------------------------------------------------------------- cluster


def _cluster(args: argparse.Namespace) -> int:
    _text_model_only(args, "cluster")
    ps = _read_parallel(args, args.n_groups)
    encoder = load_encoder(args.model)
    emb = encoder.encode_text(ps.captions, batch_size=args.batch_size, head=args.head, **_lang_kw(encoder, ps.langs))
    res = cluster_analysis(emb, ps.langs, ps.groups, ps.captions, k=args.k, seed=args.seed)
    print(f"k-means k={res['k']} over {len(ps)} sentences: language purity {res['language_purity']:.3f} "
          f"(chance {res['chance']['language_purity']:.3f}), meaning purity {res['meaning_purity']:.3f} "
          f"(chance {res['chance']['meaning_purity']:.3f}); NMI language {res['nmi_language']:.3f}, "
          f"meaning {res['nmi_meaning']:.3f}")
    for ex in res["examples"]:
        print(f"cluster {ex['cluster']}: " + " | ".join(f"({s['lang']}) {s['text']}" for s in ex["sentences"]))
    metrics = {k: res[k] for k in ("language_purity", "meaning_purity", "nmi_language", "nmi_meaning", "chance")}
    write_record(args, "cluster", metrics, ps.languages,
                 {"k": res["k"], "cluster_sizes": res["cluster_sizes"], "examples": res["examples"]})
    return 0


# ----------------------------------------------------------------------------- correspondence


def _correspondence(args: argparse.Namespace) -> int:
    import torch

    from data_prep.shards import read_captions

    from . import correspondence as corr

    _text_model_only(args, "correspondence")
    task = corr.build_task(read_captions(args.split), _languages(args.languages), _languages(args.seen), seed=args.seed,
                           test_fraction=args.test_fraction, max_per_language=args.max_per_language,
                           min_units=args.min_units)
    encoder = load_encoder(args.model)
    if not hasattr(encoder, "encode_tokens"):
        raise UserError(f"correspondence: {args.model} gives no token-level states (needs a Globetrotter run folder)")
    feats = {}
    for name in ("train", "seen_test", "unseen_test"):
        part = getattr(task, name)
        states, mask = encoder.encode_tokens(part.texts, batch_size=args.batch_size, **_lang_kw(encoder, part.langs))
        feats[name] = corr.Features(torch.from_numpy(states), torch.from_numpy(mask))
    res = corr.evaluate(task, feats, probe_seeds=args.probe_seeds, epochs=args.epochs,
                        batch_size=args.probe_batch_size, lr=args.lr)
    rel = res["relative_decrease"]
    print(f"sentence correspondence: seen {100 * res['seen_accuracy']:.2f}% ({','.join(task.seen)}), unseen "
          f"{100 * res['unseen_accuracy']:.2f}% ({','.join(task.unseen)}), chance 50%; relative decrease "
          f"{'n/a (seen at chance)' if rel is None else f'{100 * rel:.2f}%'}; surface-only shortcut "
          f"{100 * res['surface_shortcut_accuracy']:.1f}%; {len(args.probe_seeds)} probe seed(s)")
    metrics = {k: res[k] for k in ("seen_accuracy", "unseen_accuracy", "relative_decrease", "chance",
                                   "seen_accuracy_std", "unseen_accuracy_std", "per_language", "surface_shortcut_accuracy")}
    examples = {}
    for lang in task.seen + task.unseen:
        part = task.seen_test if lang in task.seen else task.unseen_test
        idx = np.flatnonzero(part.langs == lang)
        examples[lang] = [{"text": part.texts[i], "corresponds": bool(part.labels[i])} for i in idx[:4]]
    details = {"seen_languages": task.seen, "unseen_languages": task.unseen, "units": task.train.unit | task.unseen_test.unit,
               "n_examples": {name: {str(l): int((getattr(task, name).langs == l).sum()) for l in np.unique(getattr(task, name).langs)}
                              for name in ("train", "seen_test", "unseen_test")},
               "per_seed": res["per_seed"], "examples": examples,
               "probe": {"layers": 1, "heads": 1, "d_model": int(feats["train"].states.shape[-1]), "epochs": args.epochs,
                         "batch_size": args.probe_batch_size, "lr": args.lr, "optimizer": "AdamW, one-cycle"}}
    write_record(args, "correspondence", metrics, task.seen + task.unseen, details)
    return 0


# ----------------------------------------------------------------------------- generate


def _generate(args: argparse.Namespace) -> int:
    from data_prep.shards import read_captions

    from . import generation as gen

    _text_model_only(args, "generate")
    if args.show < 0:
        raise UserError(f"--show {args.show}: expected a number of examples >= 0")
    if not 0 <= args.noise < float("inf"):
        raise UserError(f"--noise {args.noise}: expected a standard deviation >= 0")
    if not 0 < args.lr < float("inf"):
        raise UserError(f"--lr {args.lr}: expected a learning rate > 0")
    test_metas = read_captions(args.split)
    test_langs = sorted({m["lang"] for m in test_metas})
    if args.target not in test_langs:
        raise UserError(f"{args.split}: no caption in target language {args.target!r} (--target; has {test_langs})")
    sources = _languages(args.sources) or [lang for lang in test_langs if lang != args.target]
    unknown = sorted(set(sources) - set(test_langs))
    if unknown:
        raise UserError(f"{args.split}: no caption in source language(s) {unknown} (--sources; has {test_langs})")
    sources = [lang for lang in dict.fromkeys(sources) if lang != args.target]
    if not sources:
        raise UserError(f"--sources: give at least one language other than the target {args.target!r}")
    ps = parallel_set(test_metas, [args.target, *sources], n_groups=args.n_groups, seed=args.seed, where=str(args.split))
    if len(ps.group_ids) < 2:
        raise UserError(f"{args.split}: {len(ps.group_ids)} parallel group(s) in {[args.target, *sources]}; need at least 2")
    train_metas = read_captions(args.train)
    train_texts = [m["caption"] for m in train_metas if m["lang"] == args.target]
    if not train_texts:
        raise UserError(f"{args.train}: no caption in target language {args.target!r} to train the decoder on "
                        f"(--train; has {sorted({m['lang'] for m in train_metas})})")
    references = [c for c, lang in zip(ps.captions, ps.langs) if lang == args.target]
    leaked = len(set(references) & set(train_texts))

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    encoder = load_encoder(args.model)
    kw = dict(batch_size=args.batch_size, head=args.head)
    train_rep = encoder.encode_text(train_texts, **kw, **_lang_kw(encoder, args.target))
    test_rep = encoder.encode_text(ps.captions, **kw, **_lang_kw(encoder, ps.langs))
    config = gen.DecoderConfig(d_model=args.d_model, layers=args.layers, prefix_length=args.prefix_length,
                               max_tokens=args.max_tokens, steps=args.steps, batch_size=args.decoder_batch_size, lr=args.lr,
                               noise=args.noise)
    print(f"training a {args.layers}-layer decoder on {len(train_texts)} {args.target} captions of {args.train} "
          f"for {args.steps} steps", file=sys.stderr)
    decoder, vocab, log = gen.train_decoder(train_texts, train_rep, encoder.tokenizer, config, seed=args.seed)

    # rows: each source language, the target itself (reconstruction), and the mismatched floor
    rows = {lang: test_rep[ps.langs == lang] for lang in [*sources, args.target]}
    rows["mismatched"] = rows[args.target][gen.derangement(len(references), args.seed)]
    generated = {name: gen.generate(decoder, vocab, rep, batch_size=args.batch_size) for name, rep in rows.items()}
    scores = {name: gen.score(hyps, references, args.target) for name, hyps in generated.items()}

    source_text = {lang: [c for c, l in zip(ps.captions, ps.langs) if l == lang] for lang in [*sources, args.target]}
    examples = []
    for g in range(min(args.show, len(references))):
        examples.append({"group": ps.group_ids[g], "reference": references[g],
                         "generated": {name: generated[name][g] for name in generated},
                         "sources": {lang: source_text[lang][g] for lang in sources}})
        print(f"group {ps.group_ids[g]}  reference ({args.target}): {references[g]}")
        for lang in [*sources, args.target]:
            print(f"  {lang}: {source_text[lang][g]}\n    -> {generated[lang][g]}")
    print(f"translation by generation into {args.target}, {len(references)} parallel groups "
          f"(decoder loss {log['loss_first_tenth']:.2f} -> {log['loss_last_tenth']:.2f}, {log['seconds']:.0f} s)")
    print(f"  {'source':<26} {'chrF':>6} {'BLEU':>6}")
    labels = {args.target: f"{args.target} (reconstruction)", "mismatched": "mismatched (floor)"}
    for name, s in scores.items():
        print(f"  {labels.get(name, name):<26} {s['chrf']:6.2f} {s['bleu']:6.2f}")
    cross = [scores[lang] for lang in sources]
    metrics = {"chrf": float(np.mean([s["chrf"] for s in cross])), "bleu": float(np.mean([s["bleu"] for s in cross])),
               "per_source": {lang: scores[lang] for lang in sources},
               "reconstruction": scores[args.target], "mismatched": scores["mismatched"]}
    details = {"target": args.target, "sources": sources, "n_groups": len(references),
               "train": {"path": str(Path(args.train).resolve()), "captions": len(train_texts),
                         "test_references_in_train": leaked},
               "decoder": {**vars(config), **log}, "examples": examples}
    write_record(args, "generate", metrics, [args.target, *sources], details)
    return 0


# ----------------------------------------------------------------------------- translate


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
    _text_model_only(args, "translate")
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

    encoder = load_encoder(args.model)
    signature = {"model": _model_signature(encoder, args.model), "corpus": corpus_sig, "head": "text",
                 "ivf_min": args.ivf_min}
    index = open_or_build(_index_dir(args, "sentences"), args.to, signature, texts,
                          lambda t: encoder.encode_text(list(t), batch_size=args.batch_size, head="text",
                                                        **_lang_kw(encoder, args.to)),
                          rebuild=args.rebuild, ivf_min=args.ivf_min, nprobe=args.nprobe,
                          log=lambda s: print(s, file=sys.stderr))
    emb = encoder.encode_text(queries, batch_size=args.batch_size, head="text", **_lang_kw(encoder, args.source))
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
    tokens = _token_embeddings(encoder, lang)[0]
    return sorted({k for k in row_keys(encoder.tokenizer, tokens) if usable(k)})


def _translate_word(args: argparse.Namespace) -> int:
    _text_model_only(args, "translate-word")
    queries = _queries(args)
    encoder = load_encoder(args.model)
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
            tokens, matrix = shared or _token_embeddings(encoder, lang)
            return input_word_embeddings(words, tokens, matrix, encoder.tokenizer, counts.get(lang))
        words = [w for w in words if not is_fragment(w)]
        return words, encoder.encode_words([key_text(w) for w in words], **_lang_kw(encoder, lang))

    signature = {"model": _model_signature(encoder, args.model), "embeddings": args.embeddings,
                 "corpus": _dataset_info(args.corpus)["checksum"] if args.corpus else None}
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
    from .procrustes import normalize_rows

    return normalize_rows(x)


# ----------------------------------------------------------------------------- parser

_SENTENCE_HELP = (
    "Sentence translation by retrieval (Globetrotter paper 5.2). A seeded sample of --n-groups "
    "parallel test groups is taken in all M languages; every sentence is a query whose M-1 "
    "translations are the positives. METRIC: the share of positives ranked in the query's top M-1 "
    "candidates by cosine similarity, over all queries (in %; chance is printed beside it), plus the "
    "per-language-pair matrix A[query, target] (heat map, languages sorted by family as the paper's "
    "Fig. 7) and its asymmetry A - A^T (Fig. 9). Candidates are all other-language sentences "
    "(DESIGN.md); --candidates all also lets same-language sentences compete (the paper's wording). "
    "Ties are broken in a --seed random order. --model tfidf (instead of a run folder) is the "
    "surface-overlap floor: lower-cased character 1-4-gram TF-IDF (scikit-learn char_wb, sublinear "
    "tf, L2-normalised; idf fitted without labels on the split's captions, --tfidf-fit), exact cosine "
    "over the sparse vectors; no learning, no images. --model ridge:TRAIN_SPLIT is the linear "
    "image pivot: per language, a ridge map from that language's char n-gram TF-IDF to the frozen "
    "backbone's whole-image features of TRAIN_SPLIT's feature cache (TRAIN_SPLIT/features); "
    "captions meet only through their predicted images; no parallel text, no transformer."
)
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
_RETRIEVAL_HELP = (
    "Cross-lingual text->image and image->text retrieval per language (XTD10 protocol) on a test "
    "split: the gallery is every image of the split (once), the queries each language's captions, "
    "embedded by the cross-modal heads. METRICS (CLIP_benchmark names, fractions): "
    "image_retrieval_recall@K = share of captions whose image is among the K nearest images "
    "(text->image); text_retrieval_recall@K = share of images with one of their captions among the K "
    "nearest captions of that language (image->text)."
)
_CLUSTER_HELP = (
    "Clustering analysis (paper appendix A.4): spherical k-means (k=50) over the text embeddings of "
    "--n-groups parallel test groups in all languages. METRICS: language purity = share of sentences "
    "whose cluster's majority language is their own (1 = clusters by language, as the text-only "
    "model); meaning purity = share of sentences in the cluster holding most of their group's "
    "translations (1 = clusters by meaning, as the full model); NMI of the clusters with language and "
    "with group; each also for shuffled clusters (chance). Prints three sentences of the first three "
    "clusters (Fig. 10). Run once per model (full and text-only) to compare."
)
_CORRESPONDENCE_HELP = (
    "Sentence correspondence transfer test (Globetrotter paper appendix A.1, Tables 5 and 7). Every "
    "caption of --split is lower-cased, its final punctuation dropped, and cut in two at a word "
    "boundary (a character boundary for scripts without spaces, e.g. zh/ja) at a seeded relative "
    "position in [0.35, 0.65]; for exactly half of the captions the second half is swapped with that "
    "of another caption of the same language, of another image, with (nearly) the same second-half "
    "length, so case, word breaks, length and cut position give nothing away (the record's "
    "surface_shortcut_accuracy, a logistic regression on those lengths, should be ~50%). The model is "
    "frozen; its token states feed a probe of one transformer layer with one attention head and a "
    "linear classifier on the sentence token, trained on the first half of the languages "
    "(alphabetical; --seen to choose) for --epochs. METRICS (fractions): seen_accuracy on held-out "
    "images of the seen languages, unseen_accuracy on the other languages (never seen by the probe), "
    "chance 0.5, relative_decrease = (seen - unseen) / (seen - 0.5) (the paper's, in % there), each the "
    "mean over --probe-seeds; per-language accuracy. --seed fixes the task (cuts, swaps, train/test "
    "images), --probe-seeds the probe's init and batch order."
)
_GENERATE_HELP = (
    "Translation by generation (Globetrotter paper appendix A.5, Fig. 11). A small causal transformer "
    "decoder (--layers, trained here from scratch; the paper fine-tunes GPT-2) learns to write the "
    "--target language's captions of --train from the frozen model's sentence representation of each "
    "caption (the text-text head, --head), passed through one linear layer to a prefix of --prefix-length "
    "vectors before the words (--noise: Gaussian noise on the standardised representation while "
    "training, not in the paper). It never sees another language. It is then fed the representations of "
    "the other languages' captions of the parallel --split (--n-groups groups) and decodes greedily. "
    "METRICS (sacrebleu corpus scores, 0-100, one reference: the target caption of the same group): chrF "
    "and BLEU per source language, their mean over sources, the target itself (reconstruction, for "
    "reference) and a mismatched floor (each group decoded from another group's target caption). Prints "
    "--show examples (source, reference, generation). Run once per model (full, text-only, supervised) "
    "to compare; --seed fixes the sample, the decoder's init and its batch order."
)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="globetrotter-eval",
        description="Evaluate and use a trained Globetrotter model: translation by retrieval (sentences, "
        "words), word ground truth, Procrustes refinement, cross-lingual image retrieval, clustering, "
        "sentence correspondence transfer, translation by generation. "
        "Each evaluation writes one JSON record and PNG plots into --out.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default="eval_out", help="folder for JSON records, plots and indexes (default %(default)s)")
    common.add_argument("--batch-size", type=positive_int, default=256, help="encoding batch size (default %(default)s)")
    common.add_argument("--seed", type=int, default=0, help="seed of every sample and k-means (default %(default)s)")
    common.add_argument("--name", help="model name in records and file names (default: from the model path)")

    def model_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--model", required=required, help="trained model: a run folder (its best, else latest checkpoint) or a checkpoint folder")

    def split_arg(p: argparse.ArgumentParser, required: bool = True, what: str = "parallel test split folder") -> None:
        p.add_argument("--split", required=required, help=f"{what} (shards + manifest.json; groups tie translations)")
        p.add_argument("--languages", help="comma-separated language codes to use (default: all of the split)")

    p = sub.add_parser("sentence", parents=[common], help="sentence translation accuracy (paper 5.2)", description=_SENTENCE_HELP)
    model_arg(p)
    split_arg(p)
    p.add_argument("--n-groups", type=positive_int, default=200, help="parallel groups sampled (paper: 200; default %(default)s)")
    p.add_argument("--candidates", choices=["other-language", "all"], default="other-language",
                   help="rank among other-language sentences (DESIGN.md, default) or all sentences (paper's wording)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="text head to embed with (default: the text-text head)")
    p.add_argument("--tfidf-fit", choices=["split", "sample"], default="split",
                   help="--model tfidf only: fit the idf on every caption of --split in the evaluated languages "
                        "(default) or on the evaluated sample only; no labels either way")
    p.add_argument("--fuse-tfidf", type=fusion_weight, metavar="W|auto",
                   help="rank by W x (char n-gram TF-IDF cosine) + (1 - W) x (the model's cosine): the model fused with "
                        "the surface-overlap baseline, as sparse + dense retrieval is (idf fitted as --tfidf-fit says; "
                        "no labels). Says what the model adds to string overlap. auto: the W of 0.1..0.9 with the "
                        "highest mean BackRetrieval@{1,5,10} on the run's val split, pairs of the evaluated languages "
                        "(no parallel text)")
    p.add_argument("--retrieval", choices=("cosine", "csls"), default="cosine",
                   help="rank candidates by cosine (the paper; default) or by CSLS (Conneau et al., 2018): query x and "
                        "candidate y score 2 cos(x, y) - r(x) - r(y), where r is a sentence's mean cosine to its "
                        "--csls-k nearest sentences, so a candidate near many queries (a hub) is marked down")
    p.add_argument("--csls-neighbourhood", choices=("per-language", "pooled"), default="per-language",
                   help="where CSLS takes r: per-language (default; CSLS of each query-candidate language pair, "
                        "as Conneau et al. define it: r(x) among y's language, r(y) among x's, so a query whose "
                        "neighbourhood is denser in one target language does not fill its top k with it) or pooled "
                        "(before stop 29: only r(y), among all other languages together; README tables before then)")
    p.add_argument("--maxsim", type=non_negative_float, metavar="W",
                   help="late interaction: rank by cos(sentence embeddings) + W x MaxSim, where MaxSim pairs every "
                        "token of one sentence with its most similar token of the other (cosine of the model's input "
                        "token rows, less the two rows' hubness: --maxsim-hubness) and averages the pairs, "
                        "idf-weighted, both ways (ColBERT/BERTScore). Keeps the colours and counts that one sentence "
                        "vector blurs. Trained runs only; combines with --retrieval csls and --fuse-tfidf. Off by default: "
                        "2-4 help a model whose token rows carry meaning (configs/flickr8k.yaml's image-pivot rows, "
                        "a supervised twin: 18.6%% -> 28.4%% on Flickr8k) and hurt one whose rows start random (the "
                        "synthetic quickstart)")
    p.add_argument("--maxsim-hubness", choices=("per-language", "vocabulary"), default="per-language",
                   help="where --maxsim takes a token row's hubness: per-language (default; among the tokens of the "
                        "other sentence's language in the evaluated sentences, CSLS per language pair as "
                        "--csls-neighbourhood) or vocabulary (among all rows of the vocabulary, which are mostly "
                        "the token's own language: before stop 29)")
    p.add_argument("--csls-k", type=positive_int, default=10, metavar="K", help="CSLS neighbourhood size (default: 10)")
    p.add_argument("--csls-pool", metavar="SPLIT",
                   help="take CSLS neighbourhoods among this split's captions in the evaluated languages (e.g. the "
                        "non-parallel val split, which keeps the test set out of the correction) instead of among "
                        "the evaluated sentences (default)")
    p.set_defaults(func=_sentence)

    p = sub.add_parser("word", parents=[common], help="word translation Recall@10 and MUSE P@k (paper 5.3)", description=_WORD_HELP)
    model_arg(p)
    split_arg(p, required=False, what="parallel split for the tf-idf ground truth and token frequencies")
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

    p = sub.add_parser("build-dictionary", parents=[common], help="tf-idf word ground truth from a parallel split (paper B.2)", description=_BUILD_HELP)
    split_arg(p)
    p.add_argument("--dictionary-out", help="output folder (default: <split>/../dictionary-tfidf)")
    p.add_argument("--tokenizer", help="tokenizer.json to split captions into BPE tokens")
    model_arg(p, required=False)
    p.add_argument("--words", action="store_true", help="use lower-cased words instead of BPE tokens")
    p.add_argument("--n-groups", type=positive_int, default=None, help="use a seeded sample of this many groups (default: all)")
    _tfidf_args(p)
    p.set_defaults(func=_build_dictionary)

    p = sub.add_parser("retrieval", parents=[common], help="text→image / image→text Recall@K per language", description=_RETRIEVAL_HELP)
    model_arg(p)
    split_arg(p, what="test split folder with images")
    p.add_argument("--ks", type=positive_int, nargs="+", default=[1, 5, 10], help="K values (default 1 5 10)")
    p.add_argument("--max-images", type=positive_int, help="evaluate on a seeded sample of this many images (default: all)")
    p.set_defaults(func=_retrieval)

    p = sub.add_parser("cluster", parents=[common], help="k-means language vs meaning purity (paper A.4)", description=_CLUSTER_HELP)
    model_arg(p)
    split_arg(p)
    p.add_argument("--n-groups", type=positive_int, default=200, help="parallel groups sampled (default %(default)s)")
    p.add_argument("--k", type=positive_int, default=50, help="number of clusters (paper: 50)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="text head to embed with")
    p.set_defaults(func=_cluster)

    p = sub.add_parser("correspondence", parents=[common], help="sentence correspondence transfer to unseen languages (paper A.1)",
                       description=_CORRESPONDENCE_HELP)
    model_arg(p)
    split_arg(p, what="split folder whose captions build the task (the paper: the test split; no groups needed)")
    p.add_argument("--seen", help="comma-separated languages the probe trains on (default: first half of the sorted languages, rounded up)")
    p.add_argument("--max-per-language", type=positive_int, default=2000,
                   help="training examples per seen language and test examples per unseen language (default %(default)s)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="share of seen-language images held out for the seen test (default %(default)s)")
    p.add_argument("--min-units", type=positive_int, default=4, help="shortest caption used, in words (characters for unspaced scripts); at least 4")
    p.add_argument("--epochs", type=positive_int, default=3, help="probe training epochs (paper: 1, on a far larger split; default %(default)s)")
    p.add_argument("--probe-batch-size", type=positive_int, default=64, help="probe training batch (default %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="probe peak learning rate, AdamW one-cycle (default %(default)s)")
    p.add_argument("--probe-seeds", type=int, nargs="+", default=[0, 1, 2], help="probe seeds; metrics are their mean (default 0 1 2)")
    p.set_defaults(func=_correspondence)

    p = sub.add_parser("generate", parents=[common], help="translation by generation with a decoder on the frozen representation (paper A.5)",
                       description=_GENERATE_HELP)
    model_arg(p)
    p.add_argument("--train", required=True, help="split whose --target captions train the decoder (the train split)")
    p.add_argument("--split", required=True, help="parallel test split folder (groups tie translations)")
    p.add_argument("--target", default="en", help="language the decoder writes (default %(default)s)")
    p.add_argument("--sources", help="comma-separated source languages (default: every other language of --split)")
    p.add_argument("--n-groups", type=positive_int, default=None, help="seeded sample of parallel groups (default: all)")
    p.add_argument("--show", type=int, default=5, help="examples printed (default %(default)s)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="text head to embed with (default: the text-text head)")
    p.add_argument("--steps", type=positive_int, default=600, help="decoder training steps (default %(default)s)")
    p.add_argument("--layers", type=positive_int, default=2, help="decoder transformer layers (default %(default)s)")
    p.add_argument("--d-model", type=positive_int, default=128, help="decoder width, a multiple of its 4 heads (default %(default)s)")
    p.add_argument("--prefix-length", type=positive_int, default=4, help="prefix vectors from the representation (default %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=40, help="longest caption trained on and generated, in BPE tokens (default %(default)s)")
    p.add_argument("--decoder-batch-size", type=positive_int, default=64, help="decoder training batch (default %(default)s)")
    p.add_argument("--lr", type=float, default=1e-3, help="decoder peak learning rate, AdamW, warm-up then cosine (default %(default)s)")
    p.add_argument("--noise", type=float, default=0.0,
                   help="std of Gaussian noise on the standardised representation while training the decoder "
                        "(0 = the paper, default; 1 helped on the synthetic world, not on Flickr8k: see README)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: torch's choice; 1 is fastest on a busy machine)")
    p.set_defaults(func=_generate)

    for name, helptext, desc, func in (
        ("translate", "translate sentences by retrieval from a corpus", _TRANSLATE_HELP, _translate),
        ("translate-word", "translate words by retrieval over the vocabulary", _TRANSLATE_WORD_HELP, _translate_word),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext, description=desc)
        model_arg(p)
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
    for name, helptext in (("tag", "multilingual image tagging (XTD10 paper 3.3.2, eqs. 3-5)"),
                           ("zeroshot", "zero-shot cross-lingual image retrieval: train/retrieval/tag/triplet (M3L, PATR)")):
        # forwarded whole to globetrotter.zeroshot.cli (see _main); listed here for --help
        sub.add_parser(name, help=f"{helptext}; `eval.py {name} --help` for options", add_help=False)
    return parser


def _tfidf_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top-k", type=positive_int, default=5, help="mutual top-k of the tf-idf rule (paper: 5)")
    p.add_argument("--idf", choices=["smooth", "paper"], default="smooth",
                   help="idf: 'paper' = log(|D|/df) (eq. 7; 0 for tokens in every document, so it ranks nothing on "
                        "small vocabularies), 'smooth' = log((1+|D|)/(1+df))+1 (default)")
    p.add_argument("--min-count", type=positive_int, default=1, help="ignore tokens seen in fewer sentences (default %(default)s)")


ZEROSHOT_COMMANDS = ("tag", "zeroshot")


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ZEROSHOT_COMMANDS:  # `eval.py tag ...` = `globetrotter-zeroshot tag ...`
        from globetrotter.zeroshot.cli import _main as zeroshot_main

        return zeroshot_main(argv if argv[0] == "tag" else argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point (``globetrotter-eval``; ``python eval.py``)."""
    raise SystemExit(run_cli(_main, argv))
