"""How sure is a BkR / XLR / CORR figure? Bootstrap intervals over queries, paired tests between models.

Every Recall@K here is a mean of a per-query hit vector ``h`` (``h_q`` = 1 when query q's
image ranks within K, 0 otherwise; a fraction in [0, 1] under ``ties="expected"``). The
bootstrap resamples the *queries*, i.e. the hit vector, never the retrieval: a replicate
draws N queries with replacement, which is a vector of multiplicities ``w`` (multinomial,
sum N), and its recall is ``w . h / N``. All replicates of a chunk are one matrix product
``W @ h`` (``W``: replicates x queries), so B = 1000 replicates at N = 100k cost about a
second. The interval is the percentile interval of the replicates (Efron & Tibshirani
1993, ch. 13); ``seed`` fixes the draws, and the same seed gives the same ``W`` for two
models of the same queries (a *paired* bootstrap).

CORR (Spearman between text and image distances over source x target pairs) is
resampled by source query too: each query contributes the pairs it takes part in. The
ranks of the two distances are computed once on all pairs and held fixed; a replicate is
the Pearson correlation of those ranks with each pair weighted by its query's
multiplicity, from per-query sums (n, sum x, sum y, sum x^2, sum y^2, sum xy), again one
matrix product. Holding the ranks fixed is the usual first-order shortcut (re-ranking
every replicate would sort 10^6 pairs 1000 times); it changes the interval only through
the rank ties between resampled duplicates.

Comparing two models A and B on the *same* queries (``compare``):

* McNemar's exact test on binary hits: of the queries where A and B disagree, ``b`` hit
  with A only and ``c`` with B only; under H0 (same recall) ``b ~ Binomial(b + c, 1/2)``
  (scipy ``binomtest``). Exact, needs 0/1 hits (not ``ties="expected"``).
* Paired bootstrap of the difference ``mean(h_A - h_B)``: its percentile interval, and the
  two-sided p-value ``min(1, 2 min(P*(d <= 0), P*(d >= 0)))`` with the +1 correction
  ``(1 + #) / (B + 1)``.

:func:`better_beyond_noise` is the one-sided version a trainer uses for checkpoint
selection: keep the current best unless the new checkpoint's hits are better at level
``alpha``.
"""
from __future__ import annotations

from typing import Iterator, Sequence, Union

import numpy as np
from scipy import stats

from .errors import BackRetrievalError, option
from .files import is_whole, require_count
from .renamed import renamed_keywords

DEFAULT_BOOTSTRAP = 1000  # replicates; the percentile interval's Monte Carlo error is ~0.1 point at 95%
DEFAULT_LEVEL = 0.95
DEFAULT_ALPHA = 0.05
TESTS = ("mcnemar", "bootstrap")
_CHUNK_ENTRIES = 1 << 22  # replicates x queries held at once (4M float64 = 32 MiB)
Hits = Union[np.ndarray, Sequence[float]]  # per-query hits (N,): result["hits"][K], 0/1 or fractions in [0, 1]


def _hits(name: str, hits: Hits, bounded: bool = True) -> np.ndarray:
    if isinstance(hits, dict):  # a result's "hits" ({K: vector}), not one K's
        raise BackRetrievalError(f"{name}: expected one per-query hit vector, got a dict (K -> hits); "
                                 f"pick one K: result['hits'][K]")
    try:
        h = np.asarray(hits, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise BackRetrievalError(f"{name}: expected a vector of per-query hits (numbers), got "
                                 f"{type(hits).__name__}") from None
    if h.size == 0:
        raise BackRetrievalError(f"{name}: no queries (empty hit vector)")
    if not np.isfinite(h).all():
        raise BackRetrievalError(f"{name}: hit vector contains NaN or inf")
    outside = np.flatnonzero((h < 0) | (h > 1)) if bounded else np.zeros(0, dtype=np.int64)
    if len(outside):
        raise BackRetrievalError(f"{name}: {len(outside)} values outside [0, 1] (query {int(outside[0])}: "
                                 f"{h[outside[0]]:g}); hits are 0/1, or fractions with ties='expected' (not "
                                 "ranks)")
    return h


def check_tests(tests: Sequence[str] | str) -> tuple[str, ...]:
    """The paired tests to run, as a tuple: one name (``"mcnemar"``) or several; one-line error for none or an
    unknown one."""
    tests = (tests,) if isinstance(tests, str) else tuple(tests)
    if not tests or set(tests) - set(TESTS):
        raise BackRetrievalError(f"{option('tests')}: expected some of {', '.join(TESTS)}, got {list(tests)}")
    return tests


def check_whole_replicates(bootstrap: object) -> None:
    """One-line error when ``bootstrap`` is no integer (2.5 or 1e3 was a TypeError inside numpy's sampling, a bool
    read as 0 or 1 replicates). Internal: not exported by the package."""
    if not is_whole(bootstrap):
        raise BackRetrievalError(f"{option('bootstrap')}: expected a whole number of replicates, got {bootstrap!r}")


def check_interval_options(bootstrap: int, level: float) -> None:
    """One-line errors for the interval options a scoring call takes: ``bootstrap`` replicates (an integer >= 0; 0:
    no intervals) and their ``level`` (in (0, 1)). Internal: not exported by the package."""
    check_whole_replicates(bootstrap)
    if bootstrap < 0:
        raise BackRetrievalError(f"{option('bootstrap')}: expected a number of replicates >= 0 (0: no intervals), "
                                 f"got {bootstrap}")
    if not 0.0 < level < 1.0:
        raise BackRetrievalError(f"{option('level')}: expected an interval level in (0, 1), got {level}")


def _check(n_boot: int, level: float) -> None:
    check_whole_replicates(n_boot)
    if n_boot < 1:
        raise BackRetrievalError(f"bootstrap: the number of replicates must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise BackRetrievalError(f"{option('level')}: expected an interval level in (0, 1), got {level}")


def smallest_p(n_boot: int, two_sided: bool = True) -> float:
    """The smallest p-value the paired bootstrap gives with ``n_boot`` replicates: ``2 / (B + 1)`` two-sided (the
    +1 correction), ``1 / (B + 1)`` one-sided."""
    return (2.0 if two_sided else 1.0) / (int(n_boot) + 1)


def check_alpha(alpha: float, n_boot: int, two_sided: bool = True) -> None:
    """One-line error when the bootstrap's p-values cannot go below ``alpha`` (:func:`smallest_p`): no difference
    could ever be significant, whatever the data."""
    floor = smallest_p(n_boot, two_sided)
    if alpha <= floor:
        need = int(np.floor((2.0 if two_sided else 1.0) / alpha))
        while smallest_p(need, two_sided) >= alpha:  # the smallest B whose p-values go below alpha
            need += 1
        raise BackRetrievalError(
            f"{option('alpha')} {alpha:g} is not above the smallest p-value {n_boot} bootstrap replicates can give "
            f"({floor:.3g}), so no difference could be significant; raise {option('bootstrap')} to at least {need}")


def bootstrap_weights(n: int, n_boot: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Multiplicities of ``n`` queries in ``n_boot`` bootstrap replicates, float64 chunks ``(b, n)``.

    Each row sums to ``n`` (a resample with replacement). Chunks hold at most ~4M entries;
    the stream depends only on ``(n, n_boot, seed)``, so two models of the same queries get
    the same replicates (paired).
    """
    rng = np.random.default_rng(seed)
    per_chunk = max(1, _CHUNK_ENTRIES // max(n, 1))
    for b0 in range(0, n_boot, per_chunk):
        b = min(per_chunk, n_boot - b0)
        draws = rng.integers(0, n, size=(b, n))
        draws += np.arange(b)[:, None] * n  # one bincount for all rows of the chunk
        yield np.bincount(draws.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)


def bootstrap_means(values: np.ndarray, n_boot: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """``(n_boot,)`` bootstrap replicates of the mean of ``values`` (``(n,)`` or ``(n, m)`` -> ``(n_boot, m)``)."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    return np.concatenate([w @ values / n for w in bootstrap_weights(n, n_boot, seed)])


def percentile_interval(replicates: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap replicates."""
    lo, hi = np.quantile(replicates, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return float(lo), float(hi)


@renamed_keywords(n_boot="bootstrap")
def recall_interval(
    hits: Hits, bootstrap: int = DEFAULT_BOOTSTRAP, level: float = DEFAULT_LEVEL, seed: int = 0, bounded: bool = True
) -> dict[str, float]:
    """Bootstrap interval of a Recall@K from its per-query hit vector ``(N,)`` (values in [0, 1]: ranks refused;
    ``bounded=False``: any finite values, e.g. hits weighted so that their plain mean is a mean over languages).

    Returns ``{"value": mean(hits), "lo", "hi", "se"}`` (``se``: the replicates' std).
    """
    _check(bootstrap, level)
    h = _hits("hits", hits, bounded)
    reps = bootstrap_means(h, bootstrap, seed)
    lo, hi = percentile_interval(reps, level)
    return {"value": float(h.mean()), "lo": lo, "hi": hi, "se": float(reps.std(ddof=1)) if bootstrap > 1 else 0.0}


def recall_intervals(
    result: dict, n_boot: int = DEFAULT_BOOTSTRAP, level: float = DEFAULT_LEVEL, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Intervals of every Recall@K of a ``bkr_recall`` / ``xlr_recall`` result: ``{"bkr@K": {...}}``."""
    prefix = "xlr" if any(str(key).startswith("xlr@") for key in result) else "bkr"
    return {f"{prefix}@{k}": recall_interval(h, n_boot, level, seed) for k, h in result["hits"].items()}


@renamed_keywords(n_boot="bootstrap")
def corr_interval(
    text_dist: np.ndarray,
    image_dist: np.ndarray,
    query_of_pair: np.ndarray,
    n_queries: int,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> dict[str, float]:
    """Bootstrap-over-queries interval of CORR (Spearman of the pair distances; module doc).

    Args:
        text_dist, image_dist: ``(P,)`` distances of the pairs CORR was computed on.
        query_of_pair: ``(P,)`` source query index of each pair, in ``[0, n_queries)``.

    Returns ``{"value", "lo", "hi", "se"}``; ``value`` is the Spearman of all pairs. When the text or the image
    distances are all equal (a model that gives every caption one vector, captions of two languages with no word
    in common under a word model) they show no association: CORR is 0, the interval [0, 0] (scipy calls a rank
    correlation with a constant undefined; :func:`backretrieval.metric.corr_score` gives 0 too). A replicate
    that draws no pair, or only pairs of equal distances, is left out.
    """
    _check(bootstrap, level)
    text_dist, image_dist, q = (np.asarray(v) for v in (text_dist, image_dist, query_of_pair))
    if not text_dist.ndim == image_dist.ndim == q.ndim == 1 or not len(text_dist) == len(image_dist) == len(q):
        raise BackRetrievalError(f"text_dist, image_dist, query_of_pair: expected one value per pair (1-D, one length), "
                                 f"got shapes {text_dist.shape}, {image_dist.shape}, {q.shape}")  # numpy's errors
    if len(q) == 0:  # CORR 0 with numpy's 'Degrees of freedom <= 0' RuntimeWarning
        raise BackRetrievalError("text_dist, image_dist, query_of_pair: no pairs; expected at least one pair")
    n_queries = require_count(n_queries, "n_queries")  # 2.5 was bincount's TypeError
    if not (np.isfinite(text_dist).all() and np.isfinite(image_dist).all()):  # NaN ranks: CORR 0 in silence
        raise BackRetrievalError("text_dist, image_dist: contain NaN or inf; expected finite distances")
    if (q.dtype.kind not in "iu" or q.min() < 0 or q.max() >= n_queries):  # 0.5 was read as query 0
        raise BackRetrievalError(f"query_of_pair: expected query indices (integers) in [0, {n_queries}), got "
                                 f"{q.dtype} values in [{q.min()}, {q.max()}]")
    x = stats.rankdata(text_dist)
    y = stats.rankdata(image_dist)
    if not (x.std() > 0 and y.std() > 0):
        return {"value": 0.0, "lo": 0.0, "hi": 0.0, "se": 0.0}
    x = (x - x.mean()) / x.std()  # centred ranks: better conditioned sums
    y = (y - y.mean()) / y.std()
    q = q.astype(np.int64)
    terms = np.stack([np.bincount(q, weights=v, minlength=n_queries)
                      for v in (np.ones_like(x), x, y, x * x, y * y, x * y)], axis=1)  # (Nq, 6)
    sums = np.concatenate([w @ terms for w in bootstrap_weights(n_queries, bootstrap, seed)])
    n, sx, sy, sxx, syy, sxy = sums.T
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate with no pair, or with constant ranks
        cov = sxy / n - sx * sy / n**2
        var = np.maximum(sxx / n - (sx / n) ** 2, 0) * np.maximum(syy / n - (sy / n) ** 2, 0)
        reps = cov / np.sqrt(var)
    reps = reps[np.isfinite(reps)]
    value = float(np.mean(x * y))
    if len(reps) == 0:
        return {"value": value, "lo": float("nan"), "hi": float("nan"), "se": float("nan")}
    lo, hi = percentile_interval(reps, level)
    return {"value": value, "lo": lo, "hi": hi, "se": float(reps.std(ddof=1)) if len(reps) > 1 else 0.0}


def mcnemar_test(hits_a: Hits, hits_b: Hits) -> dict[str, float]:
    """McNemar's exact test of paired binary hits (module doc): ``{"b", "c", "p_value"}`` (two-sided)."""
    a, b = _paired(hits_a, hits_b)
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        raise BackRetrievalError("McNemar needs 0/1 hits; with ties='expected' use the paired bootstrap")
    only_a, only_b = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    p = 1.0 if only_a + only_b == 0 else float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)
    return {"b": only_a, "c": only_b, "p_value": p}


def paired_bootstrap(
    hits_a: Hits, hits_b: Hits, n_boot: int = DEFAULT_BOOTSTRAP, level: float = DEFAULT_LEVEL, seed: int = 0,
    bounded: bool = True
) -> dict[str, float]:
    """Paired bootstrap of ``mean(hits_a - hits_b)``: ``{"diff", "lo", "hi", "p_value", "p_greater"}``.

    ``p_value`` is two-sided (H0: no difference); ``p_greater`` the one-sided p-value of
    H1: A > B, ``(1 + #{d* <= 0}) / (B + 1)``. ``bounded``: as in :func:`recall_interval`.
    """
    _check(n_boot, level)
    a, b = _paired(hits_a, hits_b, bounded)
    d = a - b
    reps = bootstrap_means(d, n_boot, seed)
    lo, hi = percentile_interval(reps, level)
    p_le = (1 + np.count_nonzero(reps <= 0)) / (n_boot + 1)
    p_ge = (1 + np.count_nonzero(reps >= 0)) / (n_boot + 1)
    return {"diff": float(d.mean()), "lo": lo, "hi": hi, "p_value": float(min(1.0, 2 * min(p_le, p_ge))),
            "p_greater": float(p_le)}


def _paired(hits_a: Hits, hits_b: Hits, bounded: bool = True) -> tuple[np.ndarray, np.ndarray]:
    a, b = _hits("hits_a", hits_a, bounded), _hits("hits_b", hits_b, bounded)
    if a.shape != b.shape:
        raise BackRetrievalError(
            f"paired comparison needs the same queries: {len(a)} hits for A and {len(b)} for B"
        )
    return a, b


@renamed_keywords(n_boot="bootstrap")
def compare_hits(
    hits_a: Hits,
    hits_b: Hits,
    tests: Sequence[str] = TESTS,
    alpha: float = DEFAULT_ALPHA,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> dict:
    """Does model A beat model B on the same queries? (module doc).

    ``hits_a``, ``hits_b``: 1-D per-query hits in [0, 1] (``result["hits"][K]``); ``tests``: ``"mcnemar"``,
    ``"bootstrap"`` or both.

    Returns ``{"a", "b", "diff", "mcnemar": {...}, "bootstrap": {...}, "p_value", "verdict"}``;
    ``p_value`` is the largest of the tests run (conservative) and ``verdict`` is ``"A"``,
    ``"B"`` or ``"tie"`` (no difference at level ``alpha``). McNemar is skipped (None) when
    the hits are not 0/1 (with McNemar the only test, a :class:`~backretrieval.errors.BackRetrievalError`).
    """
    tests = check_tests(tests)
    if not 0 < alpha < 1:
        raise BackRetrievalError(f"{option('alpha')} must be in (0, 1), got {alpha}")
    for name, hits in (("hits_a", hits_a), ("hits_b", hits_b)):
        if np.ndim(hits) != 1 and not isinstance(hits, dict):
            raise BackRetrievalError(f"{name}: expected a 1-D per-query hit vector, got shape {np.shape(hits)}")
    a, b = _paired(hits_a, hits_b)  # values outside [0, 1] (ranks) refused
    if "bootstrap" in tests:
        _check(bootstrap, level)
        check_alpha(alpha, bootstrap)
    out: dict = {"a": float(a.mean()), "b": float(b.mean()), "diff": float(a.mean() - b.mean()), "n_queries": len(a)}
    p_values = []
    if "mcnemar" in tests:
        binary = np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()
        out["mcnemar"] = mcnemar_test(a, b) if binary else None
        if binary:
            p_values.append(out["mcnemar"]["p_value"])
    if "bootstrap" in tests:
        out["bootstrap"] = paired_bootstrap(a, b, bootstrap, level, seed)
        p_values.append(out["bootstrap"]["p_value"])
    if not p_values:
        raise BackRetrievalError("compare: McNemar needs 0/1 hits (ties='expected' gives fractions); add the bootstrap")
    out["p_value"] = max(p_values)
    out["verdict"] = "tie" if out["p_value"] >= alpha or out["diff"] == 0 else ("A" if out["diff"] > 0 else "B")
    return out


@renamed_keywords(n_boot="bootstrap")
def p_better(
    hits_new: Hits,
    hits_best: Hits,
    test: str = "mcnemar",
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> float:
    """One-sided p-value of "new > best" on paired per-query hits (H0: same recall).

    ``"mcnemar"``: exact one-sided binomial test on the discordant queries (1.0 when there
    are none; falls back to the bootstrap for fractional hits); ``"bootstrap"``: the paired
    bootstrap's ``p_greater`` (``bootstrap`` replicates, ``seed``).
    """
    if test not in TESTS:
        raise BackRetrievalError(f"test: expected None or one of {', '.join(TESTS)}, got {test!r}")
    new, best = _paired(hits_new, hits_best)
    binary = np.isin(new, (0.0, 1.0)).all() and np.isin(best, (0.0, 1.0)).all()
    if test == "mcnemar" and binary:
        only_new, only_best = int(np.sum((new == 1) & (best == 0))), int(np.sum((new == 0) & (best == 1)))
        if only_new + only_best == 0:
            return 1.0
        return float(stats.binomtest(only_new, only_new + only_best, 0.5, alternative="greater").pvalue)
    return float(paired_bootstrap(new, best, bootstrap, DEFAULT_LEVEL, seed)["p_greater"])


@renamed_keywords(n_boot="bootstrap")
def better_beyond_noise(
    hits_new: Hits,
    hits_best: Hits | None,
    alpha: float = DEFAULT_ALPHA,
    test: str | None = "mcnemar",
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> bool:
    """Checkpoint selection: should a new checkpoint replace the current best?

    ``hits_new`` / ``hits_best``: per-query hit vectors of the validation metric (for
    several language pairs, the pairs' hit vectors concatenated in a fixed order) of the
    new and of the best checkpoint, on the *same* queries. ``hits_best=None`` (no best
    yet) -> True. ``test=None`` is the plain maximum (True when the new mean is higher).
    Otherwise True only when the new mean is higher *and* the one-sided p-value of
    "new > best" (:func:`p_better`) is below ``alpha``.
    """
    if hits_best is None:
        return True
    new, best = _paired(hits_new, hits_best)
    if test is not None and test not in TESTS:
        raise BackRetrievalError(f"test: expected None or one of {', '.join(TESTS)}, got {test!r}")
    if new.mean() <= best.mean():
        return False
    if test is None:
        return True
    return p_better(new, best, test, bootstrap, seed) < alpha
