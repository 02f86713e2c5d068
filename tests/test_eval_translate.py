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


def _saved_index(folder, texts=("a dog", "a cat", "a car")):
    """An index of ``texts`` saved in ``folder`` by :func:`open_or_build`, and its encode calls."""
    table = dict(zip(texts, normalize_rows(np.random.default_rng(0).normal(size=(len(texts), 8)))))
    calls = []

    def encode(batch):
        calls.append(list(batch))
        return np.stack([table[t] for t in batch])

    build = lambda: open_or_build(folder, "en", {"model": "m1"}, lambda: list(texts), encode,  # noqa: E731
                                  log=lambda s: None)
    build()
    return build, calls


@pytest.mark.parametrize("damage", [b"\xff\xfe{}", b"[1, 2]", b'"meta"',
                                    b'{"signature": {"model": "m1"}, "languages": [1]}'])
def test_a_damaged_meta_json_has_the_index_built_again(tmp_path, damage):
    """A meta.json that is not UTF-8, not an object or whose languages are no object is no record of the index: it
    is built again and the record rewritten (it was a UnicodeDecodeError or AttributeError traceback)."""
    build, calls = _saved_index(tmp_path)
    (tmp_path / "meta.json").write_bytes(damage)
    assert build().texts == ["a dog", "a cat", "a car"] and len(calls) == 2
    build()
    assert len(calls) == 2  # the rewritten record serves the next call


@pytest.mark.parametrize("name, damage, said", [
    ("en.faiss", b"", r"en\.faiss: not a readable faiss index \(.+\); rebuild it \(rebuild=True\)$"),
    ("en.faiss", b"\x00\x01\x02\x03" * 8, r"en\.faiss: not a readable faiss index"),
    ("en.jsonl", b'"a dog"\n"a c', r"en\.jsonl:2: not JSON \(.+\); expected one JSON string per line; rebuild it"),
    ("en.jsonl", b'"a dog"\n\xff\n"a car"\n', r"en\.jsonl:2:1: invalid UTF-8 byte 0xff"),
    ("en.jsonl", b'"a dog"\n["a cat"]\n"a car"\n', r"en\.jsonl:2: a JSON list, expected one JSON string per line"),
    ("en.jsonl", b'"a dog"\n"a cat"\n', r": index of 'en' holds 3 vectors but 2 texts; rebuild it \(rebuild=True\)$"),
])
def test_a_damaged_saved_index_is_one_line_naming_the_file(tmp_path, name, damage, said):
    """A saved index or texts file cut short, binary, not UTF-8 or of other JSON: one line naming the file (and
    line), saying to rebuild (it was faiss's RuntimeError, a JSONDecodeError or a UnicodeDecodeError traceback)."""
    build, _ = _saved_index(tmp_path)
    (tmp_path / name).write_bytes(damage)
    with pytest.raises(UserError, match=said) as err:
        build()
    assert "\n" not in str(err.value)


def test_a_saved_text_with_a_line_separator_reads_back_whole(tmp_path):
    """Texts are one JSON string per line: a U+2028 inside one (written as is) is no line end."""
    build, calls = _saved_index(tmp_path, texts=("a dog\u2028here", "a cat"))
    assert build().texts == ["a dog\u2028here", "a cat"] and len(calls) == 1


def test_an_index_is_exact_below_ivf_min_rows_and_ivf_from_it():
    """The documented threshold: ``IndexFlatIP`` below ``ivf_min`` rows, ``IndexIVFFlat`` at ``ivf_min`` and above."""
    emb = normalize_rows(np.random.default_rng(0).normal(size=(100, 8)))
    assert type(build_index(emb[:99], ivf_min=100)).__name__ == "IndexFlatIP"
    assert type(build_index(emb, ivf_min=100)).__name__ == "IndexIVFFlat"


def test_no_saved_index_or_no_corpus_text_is_one_line(tmp_path):
    with pytest.raises(UserError, match=rf"^{tmp_path / 'de.faiss'}: no saved index for language 'de'$"):
        CorpusIndex.load(tmp_path, "de")
    encode = lambda batch: pytest.fail("nothing to encode")  # noqa: E731
    with pytest.raises(UserError, match="^corpus has no text in language 'en'$"):
        open_or_build(tmp_path, "en", {"model": "m1"}, lambda: ["", "  \t"], encode, log=lambda s: None)
    assert not (tmp_path / "en.faiss").exists()


def test_open_or_build_shows_its_bar_only_with_the_default_log(capsys):
    """As evaluate_generation: a log of one's own (quiet) took the note but the encoding bar still showed."""
    texts = ["a dog", "a cat", "a car"]
    encode = lambda batch: normalize_rows(np.ones((len(batch), 4), dtype=np.float32))  # noqa: E731
    open_or_build(None, "en", {}, lambda: texts, encode, encode_chunk=1)  # three chunks: a bar
    assert "encoding en corpus" in capsys.readouterr().err
    open_or_build(None, "en", {}, lambda: texts, encode, encode_chunk=1, log=lambda _: None)
    assert capsys.readouterr().err == ""
    open_or_build(None, "en", {}, lambda: texts, encode, encode_chunk=1, log=lambda _: None, progress=True)
    assert "encoding en corpus" in capsys.readouterr().err
