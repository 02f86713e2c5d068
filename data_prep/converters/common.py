"""What every source reader yields, and the text reading they share.

A reader turns one public layout into a stream of :class:`Caption` records (one per
caption) and :class:`~data_prep.converters.report.Issue` items (bad input it found while
parsing: non-UTF-8 bytes, malformed lines).
Everything after parsing (language codes, empty captions, duplicate keys, finding the
image, splits, decoding, writing) is done once, for all sources, by
:func:`data_prep.converters.pipeline.convert`.
"""
from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence, Union

from data_prep.errors import UserError

from .report import Issue

HELD_OUT_ORDER = ("train", "val", "test")  # a later one wins when sources disagree about an image


@dataclass(frozen=True)
class Caption:
    """One caption record as a source gives it.

    ``images``: where the image may be, tried in order: a path (absolute, or relative to
    an image folder) or a bare file name (looked up in the image folders by name, stem,
    then Flickr photo id). ``lang`` is the code as written in the source (checked later).
    ``key`` identifies the caption within its layout (a second record with the same key is
    a duplicate). ``split_hint`` is the split the source itself puts the image in, if any.
    ``exact``: the image is found by path or file name only, never by stem or Flickr photo id
    (the folder layout, whose names are the files' own). ``user_split``: ``split_hint`` is the user's own
    label (a caption table's split column), which no command-line split option may override.
    """

    images: tuple[str, ...]
    lang: str
    text: str
    file: str
    line: int | None
    key: tuple
    split_hint: str | None = None
    exact: bool = False
    user_split: bool = False

    @property
    def where(self) -> str:
        """``file:line`` of the record, or the file alone when it has no line number."""
        return f"{self.file}:{self.line}" if self.line else self.file


Record = Union[Caption, Issue]


@dataclass(frozen=True)
class Line:
    """One line of a text file: 1-based number and text (``None`` when its bytes are not UTF-8)."""

    number: int
    text: str | None
    error: str = ""


def open_binary(path: str | Path) -> io.BufferedIOBase:
    """Open a file for binary reading, gunzipping ``*.gz`` transparently."""
    path = Path(path)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_text_lines(path: str | Path) -> Iterator[Line]:
    """Yield the lines of a UTF-8 text file (``.gz`` allowed) without their line ending.

    A line whose bytes are not UTF-8 is yielded with ``text=None`` and the error (byte
    offset) instead of stopping the file; a UTF-8 byte-order mark is dropped. Raises
    ``OSError``/``EOFError`` for an unreadable file (callers report it).
    """
    with open_binary(path) as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            raw = raw.rstrip(b"\r\n")
            try:
                yield Line(number, raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                yield Line(number, None, f"invalid UTF-8 byte 0x{raw[err.start]:02x} at column {err.start + 1}")


def read_lines_or_issue(path: Path) -> tuple[list[Line], Issue | None]:
    """All lines of a file, or the lines read before it failed plus an ``unreadable_file`` issue."""
    lines: list[Line] = []
    try:
        for line in read_text_lines(path):
            lines.append(line)
    except (OSError, EOFError) as err:
        return lines, Issue("unreadable_file", str(path), len(lines) + 1 if lines else None,
                            f"cannot read past this point ({err})", records=0)
    return lines, None


@dataclass(frozen=True)
class AlignedFile:
    """A caption file whose line *i* captions line *i* of a split file (Multi30K, XTD10)."""

    path: Path
    lang: str
    key_extra: tuple = ()  # e.g. the Multi30K task 2 caption index


def read_aligned(
    names_path: Path,
    caption_files: Sequence[AlignedFile],
    source: str,
    split_hint: str | None,
) -> Iterator[Record]:
    """Pair each caption line with the image named on the same line of ``names_path``.

    Yields a :class:`Caption` per caption line with key ``(source, image name, lang,
    *key_extra)``, and issues for non-UTF-8 caption lines and split-file lines that are not
    UTF-8 or blank (one issue costing the captions aligned to that line in every caption
    file). A caption file with more or fewer lines than the split file is a one-line
    :class:`UserError` before any record is yielded: a line missing (or added) anywhere
    shifts every later caption onto another image, so no line of it can be trusted.
    """
    names, names_issue = read_lines_or_issue(names_path)
    if names_issue is not None:
        yield names_issue
    contents: list[tuple[AlignedFile, list[Line]]] = []
    complete: set[Path] = set()  # caption files read to their end (an unreadable one is reported as such)
    for cf in caption_files:
        lines, issue = read_lines_or_issue(cf.path)
        if issue is not None:
            yield issue
        else:
            complete.add(cf.path)
        contents.append((cf, lines))
    for cf, lines in contents:
        if names_issue is None and cf.path in complete and len(lines) != len(names):
            raise UserError(f"{cf.path}: has {len(lines)} line(s) but {names_path} lists {len(names)} image(s); line i "
                            f"captions image i only when the counts agree (a line missing or added anywhere shifts "
                            f"every later caption onto another image): fix the file, or move it out of the folder; "
                            f"nothing written")

    bad_names: dict[int, str] = {}
    for line in names:
        if line.text is None:
            bad_names[line.number] = f"non_utf8|{line.error}"
        elif not line.text.strip():
            bad_names[line.number] = "malformed_line|blank line in a split file (expected an image name)"
    for number, reason in bad_names.items():
        kind, message = reason.split("|", 1)
        cost = sum(1 for _, lines in contents if len(lines) >= number)
        yield Issue(kind, str(names_path), number, f"{message}; its {cost} aligned caption(s) skipped", records=cost)

    for cf, lines in contents:
        for line in lines:
            if line.number in bad_names:
                continue
            if line.text is None:
                yield Issue("non_utf8", str(cf.path), line.number, line.error)
                continue
            if line.number > len(names):  # after an unreadable split file's last readable line
                break
            name_text = names[line.number - 1].text
            if name_text is None:  # a non-UTF-8 name: in bad_names, skipped above
                continue
            name = name_text.strip()
            yield Caption((name,), cf.lang, line.text, str(cf.path), line.number,
                          (source, name, cf.lang, *cf.key_extra), split_hint)


def split_from_name(name: str) -> str | None:
    """Map a source's split name to ours: ``train*`` -> train, ``val*``/``dev*`` -> val, ``test*`` -> test."""
    lowered = name.lower()
    for prefix, split in (("train", "train"), ("val", "val"), ("dev", "val"), ("test", "test")):
        if lowered.startswith(prefix):
            return split
    return None
