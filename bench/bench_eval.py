"""Benchmark of the evaluation package on random embeddings (no model needed).

1. Sentence translation (paper 5.2) for 200 groups x M languages, against a baseline
   measured in the same run: the full N x N similarity matrix with a full argsort.
2. Word translation over a V-word vocabulary per language (default 30k, d=512 as the
   input token embeddings), NN and CSLS, with the peak traced numpy memory next to the
   size of the V x V float64 matrix it never allocates.
3. Translation index: an IVF index over N sentence embeddings made from repeated
   captions (a pool of distinct captions, each repeated with a small paraphrase jitter),
   build time, queries/s and recall@10 of IVF against exact search (the baseline, same run).
4. Rankings (``eval.py sentence --retrieval csls --maxsim W``): sentence translation of G groups x 4 languages
   of ~12-token captions under CSLS per language pair, MaxSim over token rows and both, their statistics taken
   from R reference captions per language, against the cosine ranking alone (same run), with the peak traced
   memory (MaxSim is made a chunk of queries at a time: next to it the [N, N] MaxSim that is not held).
5. Translation under a chosen ranking (``eval.py translate --ranking``): Q queries, each one's 50 nearest corpus
   sentences re-scored under MaxSim and MaxSim + CSLS with the statistics of a 4-language reference pool, against
   the cosine search alone (same run).

    nice -n 10 python bench/bench_eval.py                 # the defaults
    nice -n 10 python bench/bench_eval.py --index-n 1000000 --distinct 50000   # docs/results.md's index figure
"""
from __future__ import annotations

import argparse
import time
import tracemalloc
from typing import Any, Callable, Sequence, TypeVar

import faiss
import numpy as np

from globetrotter.argtypes import comma_separated, non_negative_int, one_of, positive_int
from globetrotter.errors import UserError, run_cli
from globetrotter.evaluation import Ranking, ReferencePool, ScoringContext
from globetrotter.evaluation.procrustes import normalize_rows
from globetrotter.evaluation.sentence import sentence_translation
from globetrotter.evaluation.tasks.translate import rerank_hits
from globetrotter.evaluation.translate import CorpusIndex, build_index
from globetrotter.evaluation.word import WordSpace, word_translation_scores

T = TypeVar("T")


def timed(fn: Callable[..., T], *args: Any, repeat: int = 1, **kwargs: Any) -> tuple[float, T]:
    """The best seconds of ``repeat`` calls ``fn(*args, **kwargs)``, and what the last one returned."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best, out


def naive_sentence_translation(emb: np.ndarray, langs: np.ndarray, groups: np.ndarray) -> float:
    """Baseline: whole N x N matrix, full argsort per row."""
    n_lang = len(np.unique(langs))
    sims = emb @ emb.T
    sims[langs[:, None] == langs[None, :]] = -np.inf
    top = np.argsort(-sims, axis=1)[:, : n_lang - 1]
    return float((groups[top] == groups[:, None]).mean())


def bench_sentence(n_groups: int, languages: list[int], dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"\n[sentence translation] {n_groups} groups, D={dim}")
    for m in languages:
        langs = np.tile(np.array([f"l{i:02d}" for i in range(m)]), n_groups)
        groups = np.repeat(np.arange(n_groups), m)
        meaning = rng.normal(size=(n_groups, dim))
        emb = normalize_rows(meaning[groups] + 2.0 * rng.normal(size=(len(groups), dim)))
        t_ours, res = timed(sentence_translation, emb, langs, groups, repeat=2)
        t_naive, acc = timed(naive_sentence_translation, emb, langs, groups)
        assert abs(acc - res["accuracy"]) < 1e-3, (acc, res["accuracy"])
        print(f"  M={m:3d} N={len(groups):6d}: {t_ours:6.2f} s (naive full sort {t_naive:6.2f} s, "
              f"{t_naive / t_ours:4.1f}x)  accuracy {100 * res['accuracy']:.1f}%")


def bench_word(vocab: int, dim: int, n_pairs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"\n[word translation] vocabulary {vocab} per language, d={dim}, {n_pairs} dictionary pairs")
    meaning = rng.normal(size=(vocab, dim)).astype(np.float32)
    src = WordSpace([f"s{i}" for i in range(vocab)], meaning + 1.5 * rng.normal(size=(vocab, dim)).astype(np.float32))
    tgt = WordSpace([f"t{i}" for i in range(vocab)], meaning + 1.5 * rng.normal(size=(vocab, dim)).astype(np.float32))
    pick = rng.choice(vocab, n_pairs, replace=False)
    pairs = [(f"s{i}", f"t{i}") for i in pick]
    full_gb = vocab * vocab * 8 / 1e9
    for method in ("nn", "csls"):
        tracemalloc.start()
        t, res = timed(word_translation_scores, src, tgt, pairs, method=method)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"  {method:4s}: {t:6.2f} s, peak traced memory {peak / 1e6:7.1f} MB "
              f"(a {vocab}x{vocab} float64 matrix: {full_gb * 1e3:7.1f} MB, {full_gb * 1e9 / peak:5.1f}x more)  "
              f"R@10 {100 * res['all']['recall@10']:.1f}%  P@1 {100 * res['all']['precision@1']:.1f}%")


def bench_index(n: int, distinct: int, dim: int, n_queries: int, nprobes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"\n[translation index] {n} sentences from {distinct} distinct captions, D={dim}, {n_queries} queries")
    topics = rng.normal(size=(max(distinct // 50, 1), dim)).astype(np.float32)
    captions = normalize_rows(topics[rng.integers(0, len(topics), distinct)] + 0.6 * rng.normal(size=(distinct, dim)).astype(np.float32))
    emb = np.empty((n, dim), np.float32)
    for start in range(0, n, 100_000):  # repeated captions with a paraphrase jitter, in chunks
        stop = min(start + 100_000, n)
        emb[start:stop] = captions[rng.integers(0, distinct, stop - start)] + 0.05 * rng.normal(size=(stop - start, dim)).astype(np.float32)
    faiss.normalize_L2(emb)
    queries = emb[rng.choice(n, n_queries, replace=False)] + 0.05 * rng.normal(size=(n_queries, dim)).astype(np.float32)
    faiss.normalize_L2(queries)

    t_flat_build, flat = timed(build_index, emb, ivf_min=n + 1)
    t_flat, (_, exact) = timed(flat.search, queries, 10)
    print(f"  exact IndexFlatIP: build {t_flat_build:6.2f} s, {n_queries / t_flat:9.0f} queries/s (batch)")
    t_build, ivf = timed(build_index, emb, ivf_min=1)
    ivf_core = faiss.extract_index_ivf(ivf)
    print(f"  IVF (nlist={ivf_core.nlist}): build {t_build:6.2f} s (k-means training + adding)")
    for nprobe in nprobes:
        ivf_core.nprobe = nprobe
        t, (_, approx) = timed(ivf.search, queries, 10, repeat=2)
        single, _ = timed(lambda: [ivf.search(queries[i : i + 1], 10) for i in range(min(200, n_queries))])
        recall = float(np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)]))
        print(f"  IVF nprobe={nprobe:3d}: {n_queries / t:9.0f} queries/s batch ({t_flat / t:5.1f}x exact), "
              f"{min(200, n_queries) / single:7.0f} queries/s one at a time, recall@10 vs exact {recall:.3f}")


class _RandomModel:
    """Caption ``"s<i>"``: embedding row ``i`` and token ids ``ids[i]`` of a random token table."""

    def __init__(self, emb: np.ndarray, ids: list[np.ndarray], table: np.ndarray) -> None:
        self.emb, self.ids, self.table = emb, ids, table

    def encode_text(self, texts: Sequence[str], batch_size: int = 256, head: str = "text") -> np.ndarray:
        return self.emb[[int(t[1:]) for t in texts]]

    def token_table(self) -> tuple[np.ndarray, np.ndarray]:
        return self.table, np.arange(len(self.table))

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self.ids[int(t[1:])] for t in texts]


def bench_late_interaction(n_groups: int, reference: int, vocab: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = np.array(["l0", "l1", "l2", "l3"])
    n, n_ref = 4 * n_groups, 4 * reference
    langs, groups = np.tile(names, n_groups), np.repeat(np.arange(n_groups), 4)
    print(f"\n[ranking] {n_groups} groups x 4 languages scored with statistics of {reference} reference captions per "
          f"language; vocabulary {vocab}, d={dim}")
    table = rng.normal(size=(vocab, dim)).astype(np.float32)
    ids = [rng.integers(0, vocab, rng.integers(6, 19)) for _ in range(n + n_ref)]
    model = _RandomModel(normalize_rows(rng.normal(size=(n + n_ref, dim))), ids, table)
    texts = [f"s{i}" for i in range(n)]
    pool = ReferencePool([f"s{i}" for i in range(n, n + n_ref)], np.tile(names, reference), "random")
    t_cos, _ = timed(lambda: sentence_translation(model.emb[:n], langs, groups))
    print(f"  cosine ranking {t_cos:6.2f} s ({n / t_cos:8.0f} sentences/s): the baseline")
    for ranking in (Ranking(csls=True), Ranking(maxsim=4.0), Ranking(maxsim=4.0, csls=True)):
        def run() -> dict:
            scorer = ScoringContext(model, texts, langs, pool).scorer(ranking)
            return sentence_translation(scorer, langs, groups)
        tracemalloc.start()
        t, _ = timed(run)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        held = f", the [N, N] MaxSim not held: {n * n * 4 / 1e6:.1f} MB" if ranking.maxsim else ""
        print(f"  {ranking.label:<16} {t:6.2f} s ({n / t:8.0f} sentences/s, {t / t_cos:6.1f}x the cosine ranking), "
              f"statistics included; peak traced memory {peak / 1e6:.1f} MB{held}")


def bench_translate(n_queries: int, corpus: int, reference: int, vocab: int, dim: int, rerank: int,
                    seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = np.array(["l0", "l1", "l2", "l3"])
    n = n_queries + corpus + 4 * reference
    print(f"\n[translate] {n_queries} queries, the {rerank} nearest of {corpus} corpus sentences re-scored with the "
          f"statistics of {reference} reference captions per language x 4; vocabulary {vocab}, d={dim}")
    table = rng.normal(size=(vocab, dim)).astype(np.float32)
    model = _RandomModel(normalize_rows(rng.normal(size=(n, dim))),
                         [rng.integers(0, vocab, rng.integers(6, 19)) for _ in range(n)], table)
    queries = [f"s{i}" for i in range(n_queries)]
    found = CorpusIndex(build_index(model.emb[n_queries:n_queries + corpus]),
                        [f"s{i}" for i in range(n_queries, n_queries + corpus)], "l1")
    pool = ReferencePool([f"s{i}" for i in range(n_queries + corpus, n)], np.tile(names, reference), "random")
    t_cos, hits = timed(lambda: found.search(model.emb[:n_queries], rerank), repeat=3)
    print(f"  cosine search  {t_cos:7.3f} s ({n_queries / t_cos:8.0f} queries/s): the baseline")
    for ranking in (Ranking(maxsim=4.0), Ranking(maxsim=4.0, csls=True)):
        t, _ = timed(lambda: rerank_hits(model, ranking, pool, queries, "l0", "l1", hits, 256))
        print(f"  {ranking.label:<14} {t:7.3f} s ({n_queries / t:8.0f} queries/s, {t / t_cos:6.0f}x the cosine search), "
              f"statistics included")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=positive_int, default=200,
                        help="sentence translation: groups of captions, one per language (default %(default)s)")
    parser.add_argument("--n-languages", type=comma_separated(positive_int), default=[8, 52], metavar="M,M",
                        help="sentence translation: numbers of languages M to time, comma-separated, one timing each "
                             "(default: 8,52)")
    parser.add_argument("--dim", type=positive_int, default=128,
                        help="sentence embedding width D, for the sentence, index and ranking timings "
                             "(default %(default)s)")
    parser.add_argument("--vocab", type=positive_int, default=30000,
                        help="word translation: words per language V (default %(default)s)")
    parser.add_argument("--word-dim", type=positive_int, default=512,
                        help="word translation: word vector width (default %(default)s)")
    parser.add_argument("--pairs", type=positive_int, default=5000,
                        help="word translation: dictionary pairs, distinct words, at most --vocab "
                             "(default %(default)s)")
    parser.add_argument("--index-n", type=positive_int, default=200_000,
                        help="translation index: sentences in the index (default %(default)s; docs/results.md's "
                             "figure used 1000000, with --distinct 50000)")
    parser.add_argument("--distinct", type=positive_int, default=20_000,
                        help="translation index: distinct captions repeated to --index-n (default %(default)s)")
    parser.add_argument("--queries", type=positive_int, default=1000,
                        help="translation index: queries, distinct sentences of the index, at most --index-n "
                             "(default %(default)s)")
    parser.add_argument("--nprobe", type=comma_separated(positive_int), default=[4, 16, 64], metavar="N,N",
                        help="translation index: IVF lists searched per query, comma-separated, one timing each "
                             "(default: 4,16,64)")
    parser.add_argument("--late-groups", type=positive_int, default=600,
                        help="rankings: groups x 4 languages for the ranking timing (default %(default)s)")
    parser.add_argument("--reference", type=positive_int, default=2000,
                        help="rankings and translate: reference captions per language (default %(default)s)")
    parser.add_argument("--translate-queries", type=positive_int, default=64,
                        help="translate: queries for the translate timing (default %(default)s)")
    parser.add_argument("--skip", type=comma_separated(one_of("sentence", "word", "index", "late", "translate")),
                        default=[], metavar="T,T",
                        help="timings not to run, comma-separated: sentence, word, index, late, translate")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random embeddings (default 0)")
    args = parser.parse_args()
    if "word" not in args.skip and args.pairs > args.vocab:  # distinct words: checked before any timing
        raise UserError(f"--pairs {args.pairs} is more than --vocab {args.vocab} (each pair is a distinct word): "
                        f"give --pairs at most {args.vocab}, or a larger --vocab")
    if "index" not in args.skip and args.queries > args.index_n:
        raise UserError(f"--queries {args.queries} is more than --index-n {args.index_n} (each query is a distinct "
                        f"sentence of the index): give --queries at most {args.index_n}, or a larger --index-n")
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads")
    if "sentence" not in args.skip:
        bench_sentence(args.groups, args.n_languages, args.dim, args.seed)
    if "word" not in args.skip:
        bench_word(args.vocab, args.word_dim, args.pairs, args.seed)
    if "index" not in args.skip:
        bench_index(args.index_n, args.distinct, args.dim, args.queries, args.nprobe, args.seed)
    if "late" not in args.skip:
        bench_late_interaction(args.late_groups, args.reference, 8000, args.dim, args.seed)
    if "translate" not in args.skip:
        bench_translate(args.translate_queries, 20_000, args.reference, 8000, args.dim, 50, args.seed)


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
