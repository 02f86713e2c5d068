"""Translation by retrieval for users: a saved faiss index of a target-language corpus.

A corpus (sentences, or the vocabulary for word translation) is embedded once and stored
as one faiss index per language, with its texts and a ``meta.json`` that records what it
was built from (model, corpus signature). Reopening the folder with the same model and
corpus loads the index instead of re-encoding. Small corpora use an exact inner-product
index (``IndexFlatIP``); from ``ivf_min`` vectors on, an inverted-file index
(``IndexIVFFlat``, ``nlist ≈ 4·√n`` cells, ``nprobe`` searched), which trades a little
recall for speed (bench/bench_eval.py measures both).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import faiss
import numpy as np
from tqdm import tqdm

from backretrieval.errors import said
from backretrieval.records import json_text
from data_prep.errors import read_utf8
from globetrotter.errors import UserError

META = "meta.json"
DEFAULT_IVF_MIN = 100_000
DEFAULT_NPROBE = 16


def build_index(
    emb: np.ndarray,
    ivf_min: int = DEFAULT_IVF_MIN,
    nlist: int | None = None,
    nprobe: int = DEFAULT_NPROBE,
    train_size: int | None = None,
    seed: int = 0,
) -> faiss.Index:
    """Inner-product faiss index over L2-normalised rows ``emb`` (n, d).

    Exact (``IndexFlatIP``) below ``ivf_min`` rows; otherwise ``IndexIVFFlat`` with
    ``nlist`` cells (default ``4·√n``, at most n/39) trained by k-means on ``train_size`` random rows
    (default ``64·nlist``) and searched with ``nprobe`` cells.
    """
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    n, dim = emb.shape
    if n < ivf_min:
        flat = faiss.IndexFlatIP(dim)
        flat.add(emb)
        return flat
    nlist = nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))  # faiss wants >= 39 points per cell
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    train_size = min(n, train_size or 64 * nlist)
    sample = emb[np.random.default_rng(seed).choice(n, size=train_size, replace=False)] if train_size < n else emb
    index.train(sample)
    index.add(emb)
    index.nprobe = nprobe
    return index


def set_nprobe(index: faiss.Index, nprobe: int) -> None:
    """Set the number of IVF cells searched (no-op for exact indexes)."""
    try:
        faiss.extract_index_ivf(index).nprobe = nprobe
    except RuntimeError:
        pass


@dataclass
class CorpusIndex:
    """A searchable corpus of one language: ``texts[i]`` is row ``i`` of ``index``."""

    index: faiss.Index
    texts: list[str]
    lang: str
    meta: dict = field(default_factory=dict)

    def search(self, queries: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        """Top-k ``(text, cosine)`` for each L2-normalised query row, best first."""
        k = min(k, self.index.ntotal)
        scores, idx = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        return [[(self.texts[i], float(s)) for i, s in zip(row_i, row_s) if i >= 0] for row_i, row_s in zip(idx, scores)]

    def save(self, folder: str | Path) -> None:
        """Write ``<lang>.faiss`` and ``<lang>.jsonl`` (texts) into ``folder`` atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{self.lang}.faiss.tmp"
        faiss.write_index(self.index, str(tmp))
        os.replace(tmp, folder / f"{self.lang}.faiss")
        tmp = folder / f"{self.lang}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            for text in self.texts:
                fh.write(json_text(text, ensure_ascii=False) + "\n")
        os.replace(tmp, folder / f"{self.lang}.jsonl")

    @classmethod
    def load(cls, folder: str | Path, lang: str) -> "CorpusIndex":
        """Read the index of ``lang`` saved in ``folder``."""
        folder = Path(folder)
        path = folder / f"{lang}.faiss"
        if not path.is_file():
            raise UserError(f"{path}: no saved index for language {lang!r}")
        rebuild = f"rebuild it ({said('--rebuild', 'rebuild=True')})"
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as err:  # faiss's C++ error: several lines ending in what failed
            lines = [line for line in str(err).splitlines() if line.strip()]
            raise UserError(f"{path}: not a readable faiss index ({lines[-1].strip()[:120] if lines else 'no detail'}); "
                            f"{rebuild}") from None
        texts_path = folder / f"{lang}.jsonl"
        texts = []
        lines = read_utf8(texts_path, "one JSON string per line").split("\n")  # not splitlines: U+2028 is text
        for number, line in enumerate(lines[:-1] if lines[-1] == "" else lines, start=1):
            try:
                text = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{texts_path}:{number}: not JSON ({err.msg}); expected one JSON string per line; "
                                f"{rebuild}") from None
            if not isinstance(text, str):
                raise UserError(f"{texts_path}:{number}: a JSON {type(text).__name__}, expected one JSON string per "
                                f"line; {rebuild}")
            texts.append(text)
        if len(texts) != index.ntotal:
            raise UserError(f"{folder}: index of {lang!r} holds {index.ntotal} vectors but {len(texts)} texts; "
                            f"{rebuild}")
        return cls(index, texts, lang, read_meta(folder))


def read_meta(folder: str | Path) -> dict:
    """The ``meta.json`` of an index folder; ``{}`` (its indexes are built again) when there is none or it is
    damaged: not UTF-8 JSON, not an object, or its ``languages`` not an object."""
    path = Path(folder) / META
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # not JSON, or not UTF-8
        return {}
    return meta if isinstance(meta, dict) and isinstance(meta.get("languages", {}), dict) else {}


def open_or_build(
    folder: str | Path | None,
    lang: str,
    signature: dict,
    texts_fn: Callable[[], Sequence[str]],
    encode_fn: Callable[[Sequence[str]], np.ndarray],
    rebuild: bool = False,
    ivf_min: int = DEFAULT_IVF_MIN,
    nprobe: int = DEFAULT_NPROBE,
    log: Callable[[str], None] = print,
    encode_chunk: int = 8192,
    progress: bool | None = None,
) -> CorpusIndex:
    """Load the saved index of ``lang`` when ``meta.json`` matches ``signature`` (same model,
    same corpus); otherwise embed ``texts_fn()`` with ``encode_fn`` (deduplicated, order
    kept; ``encode_chunk`` texts per call, with a progress bar on stderr when ``progress``), build
    (:func:`build_index`) and save it. ``folder`` None: build it and keep it in memory only (nothing read or
    written). The note that a saved index was built goes to ``log``; ``progress`` None shows the bar only with
    the default ``log``: a ``log`` of one's own (``lambda _: None``: quiet) shows none."""
    folder = Path(folder) if folder is not None else None
    if folder is not None and folder.exists() and not folder.is_dir():  # FileExistsError once the corpus was encoded
        raise UserError(f"{folder}: a file, not a folder; expected the folder the index is saved in (or none yet)")
    meta = read_meta(folder) if folder is not None else {}
    entry = meta.get("languages", {}).get(lang)
    if (not rebuild and entry is not None and meta.get("signature") == signature and folder is not None
            and (folder / f"{lang}.faiss").is_file()):
        corpus = CorpusIndex.load(folder, lang)
        set_nprobe(corpus.index, nprobe)
        return corpus
    texts = list(dict.fromkeys(t for t in texts_fn() if t.strip()))
    if not texts:
        raise UserError(f"corpus has no text in language {lang!r}")
    start = time.perf_counter()
    steps = range(0, len(texts), encode_chunk)
    progress = log is print if progress is None else progress  # a log of the caller's own: no bar either
    emb = np.concatenate([
        encode_fn(texts[i : i + encode_chunk])
        for i in tqdm(steps, desc=f"encoding {lang} corpus", unit="chunk", disable=not progress or len(steps) <= 1)
    ])
    encoded = time.perf_counter()
    index = build_index(emb, ivf_min=ivf_min, nprobe=nprobe)
    built = time.perf_counter()
    corpus = CorpusIndex(index, texts, lang)
    if folder is None:
        return corpus
    corpus.save(folder)
    if meta.get("signature") != signature:
        meta = {"signature": signature, "languages": {}}
    meta["languages"][lang] = {
        "count": len(texts),
        "index": type(index).__name__,
        "encode_s": round(encoded - start, 3),
        "build_s": round(built - encoded, 3),
    }
    tmp = folder / (META + ".tmp")
    tmp.write_text(json_text(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, folder / META)
    log(f"built {type(index).__name__} index of {len(texts)} {lang} entries (sentences or words) in {folder} "
        f"(encode {encoded - start:.1f}s, index {built - encoded:.1f}s)")
    corpus.meta = meta
    return corpus


def file_signature(path: str | Path) -> dict:
    """What identifies a corpus or model file cheaply: resolved path, size, mtime."""
    path = Path(path).resolve()
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def read_text_corpus(path: str | Path) -> list[str]:
    """One sentence per line (blank lines skipped), UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: corpus file not found")
    return [line.strip() for line in read_utf8(path, "one sentence per line").splitlines() if line.strip()]
