"""Translation index: exact and IVF faiss indexes, saved once and reloaded."""
from __future__ import annotations

import numpy as np
import pytest

from globetrotter.errors import UserError
from globetrotter.evaluation.procrustes import normalize_rows
from globetrotter.evaluation.translate import CorpusIndex, build_index, open_or_build, read_text_corpus


def _clustered(n: int, dim: int = 32, centres: int = 50, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = normalize_rows(rng.normal(size=(centres, dim)))
    return normalize_rows(c[rng.integers(0, centres, n)] + 0.1 * rng.normal(size=(n, dim)))


def test_exact_index_returns_the_true_nearest_sentences(tmp_path):
    emb = normalize_rows(np.eye(4, dtype=np.float32) + 0.01)
    corpus = CorpusIndex(build_index(emb), ["ein Hund", "eine Katze", "ein Auto", "ein Baum"], "de")
    hits = corpus.search(emb[[2]], k=2)[0]
    assert hits[0][0] == "ein Auto" and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    corpus.save(tmp_path)
    again = CorpusIndex.load(tmp_path, "de")
    assert again.search(emb[[2]], k=2) == corpus.search(emb[[2]], k=2)


def test_ivf_index_above_threshold_agrees_with_exact_search():
    emb = _clustered(5000)
    queries = normalize_rows(emb[:100] + 0.05 * np.random.default_rng(1).normal(size=(100, 32)))
    ivf = build_index(emb, ivf_min=1000, nprobe=8)
    flat = build_index(emb)
    assert "IVF" in type(ivf).__name__ and type(flat).__name__ == "IndexFlatIP"
    _, exact = flat.search(queries, 10)
    _, approx = ivf.search(queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)])
    assert recall > 0.9


def test_open_or_build_encodes_once_and_reloads(tmp_path):
    calls = []
    texts = ["a dog", "a cat", "a dog", "a car"]  # duplicate kept once
    rng = np.random.default_rng(0)
    table = {t: v for t, v in zip(sorted(set(texts)), normalize_rows(rng.normal(size=(3, 8))))}

    def encode(batch):
        calls.append(list(batch))
        return np.stack([table[t] for t in batch])

    sig = {"model": "m1", "corpus": "c1"}
    first = open_or_build(tmp_path, "en", sig, lambda: texts, encode, log=lambda s: None)
    second = open_or_build(tmp_path, "en", sig, lambda: texts, encode, log=lambda s: None)
    assert len(calls) == 1 and calls[0] == ["a dog", "a cat", "a car"]
    assert second.texts == first.texts
    assert second.search(table["a cat"][None], 1)[0][0][0] == "a cat"
    open_or_build(tmp_path, "en", {"model": "m2", "corpus": "c1"}, lambda: texts, encode, log=lambda s: None)
    assert len(calls) == 2  # another model: rebuilt


def test_text_corpus_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_text_corpus(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(UserError, match=rf"^{bad}:2:1: invalid UTF-8 byte 0xff; expected one sentence per line"):
        read_text_corpus(bad)
