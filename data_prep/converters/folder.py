"""A generic layout: a folder of images plus a caption table in TSV or JSONL.

TSV (``.tsv``, ``.txt``): one caption per line, ``<image><TAB><lang><TAB><caption>``,
optionally a fourth column ``split`` (train, val or test, in any case, surrounding spaces
ignored); a first line ``image<TAB>lang<TAB>caption[<TAB>split]`` is a header and skipped.
Every row of a TSV table has the same columns: a table where only some rows carry the split
(a tab inside a caption, or a missing split field) is refused, naming the first row that differs.
JSONL (``.jsonl``, ``.json``): one object per line with string fields ``image``, ``lang``,
``caption`` and optionally ``split``. Either may be gzipped (``captions.jsonl.gz``).

``image`` is a path relative to an ``--images`` folder (or to the caption file's folder),
an absolute path, or a bare file name found anywhere under the image folders; nothing
else (no stem or Flickr photo id match: a caption naming ``dog.jpg`` when only ``dog.png``
exists is a missing image). The path is normalised before it is matched (``./a.jpg`` and
``b/../a.jpg`` are ``a.jpg``), so two spellings of one file are one image. Blank lines are not
records; any other line that does not follow the format is reported as malformed. The key of a
caption is ``(image, lang, caption)`` as they are compared once normalised (the path, the
language code, the caption's whitespace): a repeated row is a duplicate. A table's split column is the user's
own split: given with a command-line split option (``--test-fraction``...), a conversion refuses it, as it
refuses an image whose rows name two splits.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Iterator

from data_prep.errors import UserError

from .common import Caption, Line, Record, read_lines_or_issue
from .languages import normalize_language
from .report import Issue

FIELDS = ("image", "lang", "caption")
SPLIT_VALUES = ("train", "val", "test")
JSONL_SUFFIXES = (".jsonl", ".json")


def _parse_tsv(text: str) -> tuple[dict | None, str]:
    cols = text.split("\t")
    if len(cols) not in (3, 4):
        return None, f"expected 3 or 4 tab-separated columns (image, lang, caption[, split]), got {len(cols)}"
    return dict(zip(FIELDS + ("split",), cols)), ""


def _check_tsv_columns(path: Path, lines: list[Line]) -> None:
    """One-line :class:`UserError` when some rows of a TSV table (header included) have 3 columns and others 4:
    a tab inside a caption makes a 4th field read as the split, a row missing its split field has 3."""
    first: dict[int, int] = {}  # columns -> first line with that many
    rows: Counter = Counter()
    for line in lines:
        if line.text is not None and line.text.strip():
            columns = len(line.text.split("\t"))
            if columns in (3, 4):
                first.setdefault(columns, line.number)
                rows[columns] += 1
    if len(first) == 2:
        odd = max(first, key=first.__getitem__)  # the columns of the first line that differs from those before it
        usual = 3 if odd == 4 else 4
        raise UserError(f"{path}:{first[odd]}: {odd} tab-separated columns, but {path}:{first[usual]} has "
                        f"{usual}: only some rows carry a split column ({rows[3]} row(s) with 3 columns, {rows[4]} "
                        f"with 4); a tab inside a caption or a missing split field is the likely cause: give every "
                        f"row the same columns; nothing written")


def _parse_jsonl(text: str) -> tuple[dict | None, str]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"invalid JSON ({err.msg} at column {err.colno})"
    if not isinstance(obj, dict):
        return None, "expected a JSON object"
    missing = [f for f in FIELDS if not isinstance(obj.get(f), str)]
    if missing:
        return None, f"missing or non-string field(s) {missing}"
    return obj, ""


def _caption_key(image: str, lang: str, caption: str) -> tuple:
    """The duplicate key of a row: its image path, language and caption as the conversion normalises them."""
    return ("folder", os.path.normpath(image), normalize_language(lang) or lang.strip(), " ".join(caption.split()))


def read_caption_table(path: str | Path) -> Iterator[Record]:
    """Yield caption records of a TSV or JSONL caption table, gzipped or not (see module docstring)."""
    path = Path(path)
    name = path.stem if path.suffix == ".gz" else path.name  # read gunzipped (common.open_binary)
    is_jsonl = Path(name).suffix.lower() in JSONL_SUFFIXES
    lines, issue = read_lines_or_issue(path)
    if not is_jsonl:
        _check_tsv_columns(path, lines)
    for line in lines:
        if line.text is None:
            yield Issue("non_utf8", str(path), line.number, line.error)
            continue
        if not line.text.strip():
            continue
        if not is_jsonl and line.number == 1 and line.text.strip().lower().split("\t")[:3] == list(FIELDS):
            continue
        row, error = (_parse_jsonl if is_jsonl else _parse_tsv)(line.text)
        raw_split = (row or {}).get("split")
        split = (raw_split.strip().lower() if isinstance(raw_split, str) else raw_split) or None
        if row is not None and split is not None and split not in SPLIT_VALUES:
            row, error = None, f"split must be one of {SPLIT_VALUES}, got {raw_split!r}"
        if row is None:
            yield Issue("malformed_line", str(path), line.number, error)
            continue
        image = row["image"].strip()
        image = os.path.normpath(image) if image else ""  # one file, one image: "a/../a/b.jpg" is "a/b.jpg"
        candidates = (image, str(path.resolve().parent / image)) if image else ("",)
        yield Caption(candidates, row["lang"].strip(), row["caption"], str(path), line.number,
                      _caption_key(image, row["lang"], row["caption"]), split, exact=True, user_split=True)
    if issue is not None:
        yield issue
