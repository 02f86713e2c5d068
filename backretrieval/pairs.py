"""BkR (and XLR, CORR where possible) for every ordered language pair of one dataset.

This is what a trainer calls on a validation split: captions of many languages, each
with its image, and no parallel text needed. For a pair a -> b the source set is the
language-a captions and the target set the language-b captions. The metric assumes the
two sets do not match (paper 3.1: "a non-matching set of N documents"), so when the
languages share images (a test split captions the same images in every language) the
shared images are split at random into two halves, one for each side; a split that
already shows each image in one language (train/val) is used as it is. ``max_per_lang``
then subsamples each side. Ranks are over distinct source images (``image_ids``).

XLR needs parallel ground truth: with ``groups`` (the id tying the captions of one image
across languages), the groups captioned in both a and b give a row-aligned parallel set
(the first caption per group and language) on which XLR is computed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from .errors import BackRetrievalError, option
from .approximate import ApproxConfig
from .image_index import SourceImageIndex
from .files import check_matrix, is_whole, require_sequence
from .metric import DEFAULT_KS, bkr_recall, corr_with_interval, xlr_recall
from .metric_checks import approx_config, censored_max_rank, check_recall_options
from .pictures import distinct_images
from .ranking import DEFAULT_BLOCK_BYTES, progress_bar
from .renamed import renamed_keywords
from .vectors import as_float32
from .uncertainty import DEFAULT_LEVEL, check_interval_options, recall_intervals


def check_pair_options(max_per_lang: int | None, seed: int, bootstrap: int, level: float,
                       corr_pairs: int | None = None, block_bytes: int | None = None) -> None:
    """:func:`evaluate_pairs`' own options (``corr_pairs`` and ``block_bytes`` when given), checked before any work:
    one-line errors, where numpy would give its own messages, or nothing at all when no pair is scored. Internal:
    not exported by the package."""
    if max_per_lang is not None and (not is_whole(max_per_lang) or max_per_lang < 1):  # 2.5: numpy's TypeError
        raise BackRetrievalError(f"{option('max_per_lang')} {max_per_lang}: expected at least 1 caption per side")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BackRetrievalError(f"{option('seed')}: expected an integer >= 0, got {seed!r}")
    if corr_pairs is not None and corr_pairs < 1:
        raise BackRetrievalError(f"{option('corr_pairs')} {corr_pairs}: expected at least 1 pair sampled for CORR")
    check_interval_options(bootstrap, level)
    if block_bytes is not None and block_bytes < 1:
        raise BackRetrievalError(f"{option('block_bytes')} {block_bytes}: expected a positive number of bytes per block")


def _subsample(rows: np.ndarray, limit: int | None, rng: np.random.Generator) -> np.ndarray:
    if limit is None or len(rows) <= limit:
        return rows
    return np.sort(rng.choice(rows, size=limit, replace=False))


def non_matching_sides(
    src_rows: np.ndarray, tgt_rows: np.ndarray, image_ids: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Drop rows so that no image appears on both sides: shared images go half to each side."""
    shared = np.intersect1d(image_ids[src_rows], image_ids[tgt_rows])
    if len(shared) == 0:
        return src_rows, tgt_rows
    shared = rng.permutation(shared)
    to_src, to_tgt = shared[: (len(shared) + 1) // 2], shared[(len(shared) + 1) // 2:]
    src_keep = ~np.isin(image_ids[src_rows], to_tgt)
    tgt_keep = ~np.isin(image_ids[tgt_rows], to_src)
    return src_rows[src_keep], tgt_rows[tgt_keep]


def _take(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]``, a view without a copy when ``rows`` are consecutive (a dataset ordered by language)."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows) and bool((np.diff(rows) == 1).all()):
        return x[rows[0]:rows[-1] + 1]
    return x[rows]


def _pair_sides(rows_of: dict[str, np.ndarray], image_codes: np.ndarray, max_per_lang: int | None, seed: int
                ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.random.Generator]]:
    """Each ordered pair ``(i, j)`` of the languages of ``rows_of`` (their rows, in sorted order) with its source and
    target rows as :func:`evaluate_pairs` scores them (the images shown on both sides split between them, then each
    side subsampled to ``max_per_lang``) and the pair's seeded generator, for what else it draws."""
    names = list(rows_of)
    codes_of = {lang: np.unique(image_codes[rows]) for lang, rows in rows_of.items()}
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if a == b:
                continue
            rng = np.random.default_rng([seed, i, j])
            src, tgt = rows_of[a], rows_of[b]
            if len(np.intersect1d(codes_of[a], codes_of[b], assume_unique=True)):  # images on both sides
                src, tgt = non_matching_sides(src, tgt, image_codes, rng)
            src = _subsample(src, max_per_lang, rng)
            yield i, j, src, _subsample(tgt, max_per_lang, rng), rng


def fewest_source_images(langs: Sequence[str] | np.ndarray, image_ids: Sequence | np.ndarray,
                         max_per_lang: int | None = None, seed: int = 0) -> tuple[str, int]:
    """The ordered language pair (``"a->b"``) whose source side shows the fewest distinct images as
    :func:`evaluate_pairs` scores it with these ``max_per_lang`` and ``seed`` (a parallel split's images go half to
    each side), and that number: BkR ranks among them, so it must exceed the largest K. Internal: checked before any
    caption is embedded."""
    langs, image_ids = np.asarray(langs, dtype=object), np.asarray(image_ids, dtype=object)
    names = sorted(set(langs.tolist()))
    image_codes = np.unique(image_ids, return_inverse=True)[1].reshape(-1)
    rows_of = {lang: np.flatnonzero(langs == lang) for lang in names}
    sizes = ((f"{names[i]}->{names[j]}", len(np.unique(image_codes[src])))
             for i, j, src, _, _ in _pair_sides(rows_of, image_codes, max_per_lang, seed))
    return min(sizes, key=lambda pair: pair[1])


def first_per_group(rows: np.ndarray, groups: np.ndarray) -> dict:
    """Map group -> first row (in ``rows`` order) of that group; rows without a group are skipped."""
    out: dict = {}
    for r in rows:
        g = groups[r]
        if g is not None and g not in out:
            out[g] = r
    return out


def _checked_inputs(
    text_emb: np.ndarray | None, langs: Sequence[str] | np.ndarray, image_feats: np.ndarray,
    image_ids: Sequence | np.ndarray, groups: Sequence | np.ndarray | None,
    text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None, with_corr: bool, max_queries: int | None
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, list[str]]:
    """:func:`evaluate_pairs`' rows checked (one-line errors, every row named as given: not as a pair's
    ``src_text``, row of its subset, nor passed when left out of the sample) and read:
    ``(text_emb, langs, image_feats, image_ids, groups, names)``, the languages ``names`` sorted."""
    if text_scores is not None and (with_corr or groups is not None):
        raise BackRetrievalError("evaluate_pairs: text_scores gives BkR only (with_corr=False, no groups)")
    if text_emb is None and text_scores is None:
        raise BackRetrievalError("evaluate_pairs: give text_emb or text_scores")
    for name, value, what in (("langs", langs, "language codes"), ("image_ids", image_ids, "image ids"),
                              ("groups", groups, "group ids")):
        require_sequence(value, name, what)
    text_emb = None if text_emb is None else check_matrix("text_emb", text_emb)
    image_feats = check_matrix("image_feats", image_feats)
    n = len(langs) if text_emb is None else len(text_emb)
    langs = np.asarray(langs, dtype=object)
    image_ids = np.asarray(image_ids, dtype=object)
    if len(langs) != n or len(image_ids) != n or len(image_feats) != n:
        raise BackRetrievalError(
            f"evaluate_pairs: text_emb has {n} rows but langs/image_ids/image_feats have "
            f"{len(langs)}/{len(image_ids)}/{len(image_feats)}; they must be row-aligned"
        )
    if groups is not None:
        groups = np.asarray(groups, dtype=object)
        if len(groups) != n:
            raise BackRetrievalError(f"evaluate_pairs: groups has {len(groups)} entries, expected {n}")
    text_emb = None if text_emb is None else np.asarray(text_emb, dtype=np.float32)
    image_feats = np.asarray(image_feats)  # float16 kept as it is: each pair's rows are converted as they are read
    if max_queries is not None and max_queries < 1:
        raise BackRetrievalError(f"evaluate_pairs: max_queries must be >= 1 (or None: every caption), "
                                 f"got {max_queries}")
    names = sorted(set(langs.tolist()))
    if len(names) < 2:
        raise BackRetrievalError(f"evaluate_pairs: need captions in at least 2 languages, got {names}")
    return text_emb, langs, image_feats, image_ids, groups, names


def _sample_queries(src: np.ndarray, tgt: np.ndarray, max_queries: int | None,
                    rng: np.random.Generator) -> np.ndarray | None:
    """Positions in ``src`` of a seeded sample of ``max_queries`` queries (sorted); None: every source row queries
    (no more than ``max_queries`` of them, or a side is empty and no BkR is scored)."""
    if not (len(src) and len(tgt)) or max_queries is None or len(src) <= max_queries:
        return None
    return np.sort(rng.choice(len(src), size=max_queries, replace=False))


def _parallel_rows(in_a: dict, in_b: dict, limit: int | None,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """XLR's row-aligned parallel set of a pair a -> b: the first caption in a and in b (``in_a``, ``in_b``:
    :func:`first_per_group`) of each group captioned in both, at most ``limit`` of them (seeded)."""
    common = [g for g in in_a if g in in_b]
    keep = _subsample(np.arange(len(common)), limit, rng)
    return np.array([in_a[common[c]] for c in keep]), np.array([in_b[common[c]] for c in keep])


@dataclass
class _PairScorer:
    """BkR, CORR and XLR of one ordered pair's rows (:meth:`__call__`), with :func:`evaluate_pairs`' checked rows
    (``image_codes``: integer codes of the image ids) and options, as named there (``options``: those passed on to
    :func:`~backretrieval.metric.bkr_recall` and :func:`~backretrieval.metric.xlr_recall`)."""

    text_emb: np.ndarray | None
    image_feats: np.ndarray
    image_codes: np.ndarray
    ks: tuple[int, ...]
    options: dict
    approx: ApproxConfig | None
    text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    with_corr: bool
    corr_pairs: int
    bootstrap: int
    level: float
    seed: int
    _src_key: bytes = field(default=b"", init=False)  # the source rows whose features are kept
    _src_img: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32), init=False)
    _index: SourceImageIndex | None = field(default=None, init=False)

    def _source_images(self, src: np.ndarray) -> tuple[np.ndarray, SourceImageIndex | None]:
        """The float32 image features of the source rows ``src`` (and their ``pq`` source-image index, with the
        approximate mode's ``pq`` image side): a language's source rows serve all its pairs, so they are made once
        and kept while the source rows stay the same."""
        if self._src_key != src.tobytes():
            self._src_key, self._src_img, self._index = src.tobytes(), as_float32(_take(self.image_feats, src)), None
            if self.approx is not None and self.approx.image_side == "pq":
                first = distinct_images(self.image_codes[src], len(src))[0]
                self._index = SourceImageIndex(self._src_img[first], "pq", seed=self.approx.seed)
        return self._src_img, self._index

    def _embeddings(self) -> np.ndarray:
        """``text_emb``, given wherever it is read: BkR without ``text_scores``, CORR, XLR (:func:`_checked_inputs`)."""
        if self.text_emb is None:
            raise BackRetrievalError("evaluate_pairs: give text_emb or text_scores")
        return self.text_emb

    def __call__(self, src: np.ndarray, tgt: np.ndarray, queries: np.ndarray | None,
                 parallel: tuple[np.ndarray, np.ndarray] | None) -> tuple[dict, dict[int, np.ndarray]]:
        """BkR (and CORR) of the source rows ``src`` (``queries``: positions in ``src`` of the sampled queries;
        None: all) against the target rows ``tgt``, XLR on the rows ``parallel`` (None: no groups): the pair's entry
        in :func:`evaluate_pairs`' ``"pairs"`` and BkR's per-query hits by K (none when a side is empty)."""
        entry: dict = {"n_src": int(len(src)), "n_tgt": int(len(tgt))}
        intervals: dict = {}
        hits: dict[int, np.ndarray] = {}
        ks, options = self.ks, self.options
        if len(src) and len(tgt):
            src_img, index = self._source_images(src)
            tgt_img = _take(self.image_feats, tgt)  # bkr_recall reads the retrieved targets' rows only
            pair = {"src_image_ids": self.image_codes[src], "queries": queries, "source_index": index, **options}
            if self.text_scores is None:
                text_emb = self._embeddings()
                res = bkr_recall(_take(text_emb, src), src_img, _take(text_emb, tgt), tgt_img, ks, **pair)
            else:
                asked = src if queries is None else src[queries]
                res = bkr_recall(None, src_img, None, tgt_img, ks, text_sim=self.text_scores(asked, tgt), **pair)
            entry.update({f"bkr@{k}": res[f"bkr@{k}"] for k in ks})
            entry["hubness"] = res["hubness"]
            hits = {k: res["hits"][k] for k in ks}
            if self.bootstrap > 0:
                intervals.update(recall_intervals(res, self.bootstrap, self.level, self.seed))
            if self.with_corr:
                text_emb = self._embeddings()
                ci = corr_with_interval(text_emb[src], src_img, text_emb[tgt], as_float32(tgt_img),
                                        corr_pairs=self.corr_pairs, bootstrap=self.bootstrap, level=self.level,
                                        seed=self.seed)
                entry["corr"] = ci["value"]
                if self.bootstrap > 0:
                    intervals["corr"] = ci
        if parallel is not None:
            xs, xt = parallel
            entry["n_xlr"] = int(len(xs))
            if len(xs):
                text_emb = self._embeddings()
                res = xlr_recall(text_emb[xs], text_emb[xt], ks, **options)
                entry.update({f"xlr@{k}": res[f"xlr@{k}"] for k in ks})
                if self.bootstrap > 0:
                    intervals.update(recall_intervals(res, self.bootstrap, self.level, self.seed))
        if intervals:
            entry["intervals"] = intervals
        return entry, hits


@renamed_keywords(texts_emb="text_emb")
def evaluate_pairs(
    text_emb: np.ndarray | None,
    langs: Sequence[str] | np.ndarray,
    image_feats: np.ndarray,
    image_ids: Sequence | np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    groups: Sequence | np.ndarray | None = None,
    max_per_lang: int | None = None,
    seed: int = 0,
    *,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    with_corr: bool = True,
    corr_pairs: int = 200_000,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    bootstrap: int = 0,
    level: float = DEFAULT_LEVEL,
    retrieval: str = "cosine",
    csls_k: int = 10,
    approximate: bool | ApproxConfig = False,
    return_hits: bool = False,
    text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    max_queries: int | None = None,
    progress: bool = False,
) -> dict:
    """BkR Recall@K for every ordered language pair (module doc), XLR where ``groups`` allow.

    Args:
        text_emb: ``(N, d)`` text embeddings, one row per caption.
        langs: ``N`` language codes.
        image_feats: ``(N, D)`` image feature of each caption's image (row-aligned).
        image_ids: ``N`` image ids (rows with one id show one picture).
        ks: the K of Recall@K.
        groups: optional ``N`` group ids tying translations (None entries: no group).
        max_per_lang: at most this many source and target captions per pair (random, seeded).
        seed: seed of the non-matching split and of the subsampling.
        ties, max_rank, block_bytes: as in :func:`backretrieval.metric.bkr_recall` (``max_rank``
            = max(ks) gives the same Recall@K faster).
        with_corr, corr_pairs: also compute the CORR baseline on up to ``corr_pairs`` pairs.
        bootstrap, level: with ``bootstrap`` > 0 replicates, each pair's figures get a
            ``level`` interval over queries (``entry["intervals"]``, seeded with ``seed``).
        retrieval, csls_k, approximate: as in :func:`backretrieval.metric.bkr_recall`.
        text_scores: optional ``(src_rows, tgt_rows) -> (len(src_rows), len(tgt_rows))`` text similarity
            of rows of this dataset, for an f that is no cosine of ``text_emb`` (``text_emb`` may then be
            None; no CORR or XLR). BkR's step 2 retrieves each source row's best-scoring target.
        max_queries: BkR of a pair with more source captions than this from a seeded sample of this many
            queries, each against all of the pair's targets and ranked among all its source images: an unbiased
            estimate of the whole pair's BkR (standard error at most ``0.5 / sqrt(max_queries)``) at a fraction of
            the cost. With ``approximate`` (``image_side="pq"``), one source-image index per language serves
            every pair from it. None: every caption queries.
        return_hits: also return ``"hits": {"bkr@K": (Q,)}``, the per-query hits of every
            pair concatenated in pair order. For one ``seed`` the queries are the same for
            any text model, so two checkpoints' hits are paired (for
            :func:`backretrieval.uncertainty.better_beyond_noise`).
        progress: a bar over the language pairs, and the bars of :func:`~backretrieval.bkr_recall`, when the work
            is big (:func:`~backretrieval.ranking.progress_bar`).

    Returns:
        ``{"langs": [...], "ks": [...], "pairs": {"a->b": {"bkr@K", "xlr@K" (if groups),
        "corr", "n_src", "n_tgt", "n_xlr", "hubness", "intervals" (with bootstrap)}},
        "matrix": {"bkr@K": (L, L) array with NaN on the diagonal and where a pair could
        not be scored, "xlr@K": ...}, "mean": {metric: mean over the scored pairs},
        "hits" (with ``return_hits``)}``.
    """
    # the options first, as bkr_recall checks them: not only once a pair is scored (or never, when none is)
    ks = check_recall_options(ks, ties, max_rank, retrieval, csls_k)
    approx = approx_config(approximate, ks)
    censored_max_rank(max_rank, ks, option("approximate") if approx is not None else None)
    check_pair_options(max_per_lang, seed, bootstrap, level, corr_pairs if with_corr else None, block_bytes)
    text_emb, langs, image_feats, image_ids, groups, names = _checked_inputs(
        text_emb, langs, image_feats, image_ids, groups, text_scores, with_corr, max_queries)
    rows_of = {lang: np.flatnonzero(langs == lang) for lang in names}
    # integer codes of the image ids (their sorted order): the sides' overlap found fast, the same split as the ids'
    image_codes = np.unique(image_ids, return_inverse=True)[1].reshape(-1)
    first_of = {lang: first_per_group(rows_of[lang], groups) for lang in names} if groups is not None else {}
    options = {"ties": ties, "max_rank": max_rank, "block_bytes": block_bytes, "retrieval": retrieval,
               "csls_k": csls_k, "approximate": approximate, "progress": progress}
    score = _PairScorer(text_emb, image_feats, image_codes, ks, options, approx, text_scores, with_corr, corr_pairs,
                        bootstrap, level, seed)
    metrics = [f"bkr@{k}" for k in ks] + ([f"xlr@{k}" for k in ks] if groups is not None else [])
    metrics += ["corr"] if with_corr else []
    matrix = {m: np.full((len(names), len(names)), np.nan) for m in metrics}
    pairs: dict[str, dict] = {}
    all_hits: dict[str, list] = {f"bkr@{k}": [] for k in ks}
    sides = [len(rows_of[lang]) if max_per_lang is None else min(len(rows_of[lang]), max_per_lang) for lang in names]
    bar = progress_bar(len(names) * (len(names) - 1), "pairs", progress, sum(sides) ** 2 - sum(n * n for n in sides),
                       unit="pair")
    for i, j, src, tgt, rng in _pair_sides(rows_of, image_codes, max_per_lang, seed):
        a, b = names[i], names[j]
        queries = _sample_queries(src, tgt, max_queries, rng)
        parallel = None if groups is None else _parallel_rows(first_of[a], first_of[b], max_per_lang, rng)
        entry, hits = score(src, tgt, queries, parallel)
        for k, h in hits.items():
            all_hits[f"bkr@{k}"].append(h)
        for m in metrics:
            if m in entry:
                matrix[m][i, j] = entry[m]
        pairs[f"{a}->{b}"] = entry
        bar.update(1)
    bar.close()
    mean = {m: float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan") for m, v in matrix.items()}
    out = {"langs": names, "ks": list(ks), "pairs": pairs, "matrix": matrix, "mean": mean}
    if return_hits:
        out["hits"] = {m: np.concatenate(h) if h else np.zeros(0) for m, h in all_hits.items()}
    return out
