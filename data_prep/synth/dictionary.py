"""Ground-truth word dictionaries of the synthetic world, in the MUSE format.

``dictionary/<src>-<tgt>.txt`` holds one ``src_word tgt_word`` pair per line for every
ordered language pair: all combinations of the synonyms and inflected forms that the
captions actually used for the same concept (``colour:red``: red ~ rot, rote, roten, …).
``dictionary/concepts.json`` keeps the same ground truth by concept:
``{concept: {lang: [words]}}``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from ..strict_json import json_text


def dictionary_pairs(src_words: Mapping[str, set[str]], tgt_words: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """Sorted unique (source, target) word pairs over the concepts both languages used."""
    pairs = {(s, t) for concept, sources in src_words.items() if concept in tgt_words
             for s in sources for t in tgt_words[concept]}
    return sorted(pairs)


def write_dictionaries(words: Mapping[str, Mapping[str, set[str]]], languages: Sequence[str],
                       out_dir: str | Path) -> int:
    """Write ``<src>-<tgt>.txt`` for every ordered pair of ``languages`` and ``concepts.json``;
    ``words[lang][concept]`` is the set of words used. Returns the number of pair files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for src in languages:
        for tgt in languages:
            if src == tgt:
                continue
            name = f"{src}-{tgt}.txt"
            wanted.add(name)
            lines = [f"{s} {t}\n" for s, t in dictionary_pairs(words.get(src, {}), words.get(tgt, {}))]
            _write_atomic(out_dir / name, "".join(lines))
    for stale in out_dir.glob("*-*.txt"):
        if stale.name not in wanted:
            stale.unlink()
    concepts: dict[str, dict[str, list[str]]] = {}
    for lang in languages:
        for concept, used in words.get(lang, {}).items():
            concepts.setdefault(concept, {})[lang] = sorted(used)
    _write_atomic(out_dir / "concepts.json", json_text(dict(sorted(concepts.items())), ensure_ascii=False, indent=1))
    return len(wanted)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
