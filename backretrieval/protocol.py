"""The BackRetrieval paper's validation protocol (Fain et al. 2021, section 3.1, Table 1, Fig. 2).

Over a set of text models f, on a dataset with parallel ground truth (item i has a
source caption, a target caption and an image):

* per seed, sample N source items and a *non-matching* (disjoint) set of N target items;
  BkR_f is computed from the source captions/images against the target captions/images,
  CORR_f on the same two sets, and XLR_f on the N source items against their own
  target-language captions (the ground truth the sampled BkR never sees);
* per seed, Pearson and Spearman of (XLR_f, BkR_f) over the models f, and of
  (XLR_f, CORR_f) for the baseline; reported as mean +- std over seeds (paper: N = 10 000,
  25 seeds; N = 1 500 for small datasets).

The image side of BkR does not depend on f, so for each seed the ``(N, N)`` float32
image-similarity matrix is computed once and shared by all models when it fits in
``image_sim_bytes``.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats
from tqdm.auto import tqdm

from .errors import BackRetrievalError, given, option
from .files import as_array, check_matrix, enough_for_k, is_whole
from .metric import DEFAULT_KS, bkr_recall, corr_terms, xlr_recall
from .metric_checks import check_ks
from .uncertainty import DEFAULT_LEVEL, check_interval_options, corr_interval, recall_intervals
from .vectors import l2_normalize

DEFAULT_SEEDS = 25  # paper 3.1
DEFAULT_IMAGE_SIM_BYTES = 1 << 30


def sample_non_matching(n_items: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint random index sets of size ``n`` from ``range(n_items)``: sources, targets."""
    for name, value in (("n_items", n_items), ("n", n)):
        if not is_whole(value):  # 2.5: a slice or numpy error
            raise BackRetrievalError(f"{given(name, value)}: expected a whole number")
    if n < 1 or 2 * n > n_items:
        if n < 1:
            raise BackRetrievalError(f"{given('n', n)}: expected at least 1 item per side")
        remedy = (f"use {given('n', n_items // 2)} or less" if n_items >= 2
                  else "no N fits: use more data")
        raise BackRetrievalError(f"{given('n', n)}: needs 2N <= {n_items} items (disjoint, non-matching source and "
                                 f"target samples); {remedy}")
    perm = np.random.default_rng(seed).permutation(n_items)
    return np.sort(perm[:n]), np.sort(perm[n:2 * n])


def protocol_seed(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    image_feats: np.ndarray,
    src_idx: np.ndarray,
    tgt_idx: np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    corr_pairs: int = 1_000_000,
    image_sim: np.ndarray | None = None,
    seed: int = 0,
    bootstrap: int = 0,
    level: float = DEFAULT_LEVEL,
    retrieval: str = "cosine",
) -> dict:
    """BkR@K, XLR@K and CORR of one model for one (source, target) sample.

    ``src_text[i]``/``tgt_text[i]`` are item i's captions (translations or independent
    descriptions of image ``image_feats[i]``); ``image_sim`` optionally holds
    g(I_T, I_S) for ``tgt_idx`` x ``src_idx``. With ``bootstrap`` > 0 replicates the
    record also has ``"intervals"``: ``{metric: {"value", "lo", "hi", "se"}}`` over the
    N source queries (:mod:`backretrieval.uncertainty`).
    """
    s_txt, t_txt = src_text[src_idx], tgt_text[tgt_idx]
    s_img, t_img = image_feats[src_idx], image_feats[tgt_idx]
    given = image_sim is not None  # g given: the features serve CORR only (bkr_recall takes one image side)
    bkr = bkr_recall(s_txt, None if given else s_img, t_txt, None if given else t_img, ks, ties=ties,
                     max_rank=max_rank, image_sim=image_sim, retrieval=retrieval)
    xlr = xlr_recall(s_txt, tgt_text[src_idx], ks, ties=ties, max_rank=max_rank, retrieval=retrieval)
    out = {f"bkr@{k}": bkr[f"bkr@{k}"] for k in ks}
    out.update({f"xlr@{k}": xlr[f"xlr@{k}"] for k in ks})
    out["hub_share"], out["hub_skewness"] = bkr["hubness"]["hub_share"], bkr["hubness"]["skewness"]
    terms = corr_terms(s_txt, s_img, t_txt, t_img, corr_pairs=corr_pairs, seed=seed)
    corr = corr_interval(terms["text_dist"], terms["image_dist"], terms["query"], len(src_idx), max(bootstrap, 1),
                         level, seed)
    out["corr"] = corr["value"]
    if bootstrap > 0:
        out["intervals"] = {**recall_intervals(bkr, bootstrap, level, seed),
                            **recall_intervals(xlr, bootstrap, level, seed), "corr": corr}
    return out


def _corr(x: Sequence[float], y: Sequence[float], kind: str) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input -> NaN, reported as such
        fn = stats.pearsonr if kind == "pearson" else stats.spearmanr
        return float(fn(np.asarray(x, float), np.asarray(y, float)).statistic)


def correlate_over_models(per_model: Mapping[str, Sequence[dict]], ks: Sequence[int]) -> dict:
    """Pearson/Spearman over models of BkR@K vs XLR@K and CORR vs XLR@K, mean and std over seeds.

    ``per_model[name][s]`` is the :func:`protocol_seed` record of seed ``s``. Returns
    ``{"@K": {"pearson": {"bkr": {"mean", "std", "per_seed", "defined"}, "corr": {...}}, "spearman": {...}}}``:
    a seed where the correlation is undefined (NaN: a metric equal for every model) is left out of the mean and
    std, and ``defined`` counts the seeds that are in them (NaN mean when none is).
    """
    names = list(per_model)
    if len(names) < 2:
        raise BackRetrievalError(f"correlation over models needs at least 2 models, got {len(names)}")
    ks = check_ks(ks)  # one K as an int was 'int object is not iterable'
    n_seeds = min(len(per_model[m]) for m in names)
    for m in names:  # a K the records lack was KeyError: 'xlr@5'
        for s, record in enumerate(per_model[m][:n_seeds]):
            lacking = [key for k in ks for key in (f"xlr@{k}", f"bkr@{k}") if key not in record]
            if lacking or "corr" not in record:
                held = sorted(int(key[4:]) for key in record if key.startswith("xlr@"))
                raise BackRetrievalError(f"per_model[{m!r}][{s}]: no {(lacking or ['corr'])[0]!r} (the record holds K "
                                         f"= {held}); expected a protocol_seed record of every K in ks {list(ks)}")
    out: dict = {}
    for k in ks:
        entry: dict = {}
        for kind in ("pearson", "spearman"):
            entry[kind] = {}
            for metric in ("bkr", "corr"):
                key = f"bkr@{k}" if metric == "bkr" else "corr"
                vals = [
                    _corr([per_model[m][s][f"xlr@{k}"] for m in names], [per_model[m][s][key] for m in names], kind)
                    for s in range(n_seeds)
                ]
                ok = [v for v in vals if np.isfinite(v)]
                entry[kind][metric] = {"mean": float(np.mean(ok)) if ok else float("nan"),
                                       "std": float(np.std(ok)) if ok else float("nan"), "per_seed": vals,
                                       "defined": len(ok)}
        out[f"@{k}"] = entry
    return out


def run_protocol(
    models: Mapping[str, tuple[np.ndarray, np.ndarray]],
    image_feats: np.ndarray,
    n: int | None = None,
    seeds: int | Sequence[int] = DEFAULT_SEEDS,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    corr_pairs: int = 1_000_000,
    image_sim_bytes: int = DEFAULT_IMAGE_SIM_BYTES,
    progress: bool = True,
    bootstrap: int = 0,
    level: float = DEFAULT_LEVEL,
    retrieval: str = "cosine",
) -> dict:
    """Run the protocol (module doc) for several models on one aligned dataset and language pair.

    Args:
        models: name -> (source-language embeddings ``(M, d)``, target-language embeddings
            ``(M, d)``), row i of both describing image ``image_feats[i]``.
        image_feats: ``(M, D)`` image features (g = cosine).
        n: sample size N per side (default: ``M // 2``, the most that keeps sides disjoint).
        seeds: number of seeds (0..S-1) or explicit seeds.
        ks, ties, max_rank, corr_pairs: metric options (see :mod:`backretrieval.metric`).
        image_sim_bytes: share one image-similarity matrix per seed across models when it fits.
        bootstrap, level: per seed and model, ``level`` intervals over queries of every
            figure (``per_seed[s]["intervals"]``; 0: none).
        retrieval: ``"cosine"`` (the paper) or ``"csls"``, for BkR's step 2 and XLR's ranks.

    Returns:
        ``{"n", "seeds", "ks", "models": {name: {"per_seed": [...], "mean": {...}, "std": {...}}},
        "correlation": see :func:`correlate_over_models` (only with >= 2 models)}``.
    """
    ks = check_ks(ks)
    check_interval_options(bootstrap, level)  # -1 ran with no intervals, in silence
    if not models:  # an empty result, in silence
        raise BackRetrievalError("models: expected at least one model (name -> (source, target) embeddings), got none")
    image_feats = check_matrix("image_feats", image_feats, vectors=False).astype(np.float32, copy=False)
    n_items = len(image_feats)
    for name, pair in models.items():  # one array was read as its first two rows: a misleading row count
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            got = f"{len(pair)} items" if isinstance(pair, (tuple, list)) else f"one {type(pair).__name__}"
            raise BackRetrievalError(f"models[{name!r}]: expected a (source, target) pair of embeddings, got {got}")
    models = {name: (as_array(f"model {name} source", pair[0]), as_array(f"model {name} target", pair[1]))
              for name, pair in models.items()}  # lists of rows: numpy's 'only integer scalar arrays' TypeError
    for name, (src, tgt) in models.items():
        if len(src) != n_items or len(tgt) != n_items:
            raise BackRetrievalError(
                f"model {name}: {len(src)} source / {len(tgt)} target embeddings for {n_items} images; "
                "expected one per image"
            )
    n = n_items // 2 if n is None else n
    if not is_whole(n):  # 10.5 was run as 10, True as 1
        raise BackRetrievalError(f"{given('n', n)}: expected a whole number of items per side")
    enough_for_k("protocol", n, ks, f"items per side ({option('n')})", f"raise {option('n')}")
    if is_whole(seeds):
        seeds = list(range(seeds))
    elif isinstance(seeds, (Sequence, np.ndarray)) and not isinstance(seeds, str) and all(
            is_whole(s) for s in seeds):
        seeds = [int(s) for s in seeds]
    else:  # "12" was the seeds 1 and 2, True one seed, 2.0 'float object is not iterable'
        raise BackRetrievalError(f"{given('seeds', repr(seeds))}: expected a number of seeds or a list of integer seeds")
    if not seeds:
        raise BackRetrievalError("protocol: needs at least 1 seed, got none")
    per_model: dict[str, list[dict]] = {name: [] for name in models}
    bar = tqdm(total=len(seeds) * len(models), desc="protocol", disable=not progress, unit="run")
    for seed in seeds:
        src_idx, tgt_idx = sample_non_matching(n_items, n, seed)
        image_sim = None
        if len(models) > 1 and 4 * n * n <= image_sim_bytes:  # g does not depend on f: score images once
            image_sim = l2_normalize(image_feats[tgt_idx]) @ l2_normalize(image_feats[src_idx]).T
        for name, (src, tgt) in models.items():
            per_model[name].append(
                protocol_seed(src, tgt, image_feats, src_idx, tgt_idx, ks, ties=ties, max_rank=max_rank,
                              corr_pairs=corr_pairs, image_sim=image_sim, seed=seed, bootstrap=bootstrap,
                              level=level, retrieval=retrieval)
            )
            bar.update()
    bar.close()
    result: dict[str, Any] = {"n": n, "seeds": seeds, "ks": list(ks), "models": {}}
    for name, records in per_model.items():
        keys = [key for key in records[0] if key != "intervals"]
        result["models"][name] = {
            "per_seed": records,
            "mean": {key: float(np.mean([r[key] for r in records])) for key in keys},
            "std": {key: float(np.std([r[key] for r in records])) for key in keys},
        }
    if len(models) >= 2:
        result["correlation"] = correlate_over_models(per_model, ks)
    return result


def _undefined(entry: dict) -> str:
    """`` (k of n seeds)`` when the correlation was undefined in some seeds (a metric equal for every model)."""
    n = len(entry["per_seed"])
    return "" if entry.get("defined", n) == n else f" ({entry['defined']} of {n} seeds)"


def format_table(rows: Mapping[str, dict], k: int) -> str:
    """Markdown table in the layout of paper Table 1: one row per dataset/pair, from ``correlation``."""
    lines = [
        f"| Dataset (K={k}) | Pearson BkR | Pearson CORR | Spearman BkR | Spearman CORR |",
        "|---|---|---|---|---|",
    ]
    for label, corr in rows.items():
        e = corr[f"@{k}"]
        cells = [f"{e[kind][m]['mean']:.3f} ± {e[kind][m]['std']:.3f}" + _undefined(e[kind][m])
                 for kind in ("pearson", "spearman") for m in ("bkr", "corr")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
