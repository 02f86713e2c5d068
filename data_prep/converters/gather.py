"""A conversion's caption records checked one by one, and the good ones gathered by image file."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tqdm import tqdm

from data_prep.errors import UserError

from .common import Caption, Record
from .images import ImageResolver
from .languages import normalize_language
from .options import ConvertOptions
from .report import ConversionReport, Issue
from .splits import examples

_WORD = re.compile(r"\w+")


@dataclass
class GatheredImage:
    """An image with its accepted captions, in arrival order."""

    path: Path
    captions: list[Caption] = field(default_factory=list)
    image_id: str = ""


def checked_records(sources: Iterable[Iterable[Record]], report: ConversionReport, languages: Sequence[str] | None,
                    progress: bool) -> Iterator[Caption]:
    """The records of ``sources`` that pass a conversion's checks, language code normalised and whitespace
    collapsed. Bad input (reader issues, unknown language, empty caption, duplicate key) is filed in
    ``report`` with file and line; a language outside ``languages`` is counted as left out."""
    wanted = set(languages) if languages else None
    seen: dict[tuple, str] = {}
    bar = tqdm(desc="reading captions", unit=" rec", disable=not progress, mininterval=1.0)
    for source in sources:
        for item in source:
            bar.update()
            if isinstance(item, Issue):
                report.records += item.records
                report.add(item)
                continue
            report.records += 1
            lang = normalize_language(item.lang)
            if lang is None:
                report.add(Issue("unknown_language", item.file, item.line,
                                 f"language code {item.lang!r} is not ISO 639-1"))
                continue
            text = " ".join(item.text.split())
            if not text:
                report.add(Issue("empty_caption", item.file, item.line, "caption is empty or whitespace"))
                continue
            first = seen.get(item.key)
            if first is not None:
                report.add(Issue("duplicate_key", item.file, item.line, f"same caption key as {first}"))
                continue
            seen[item.key] = item.where
            if wanted is not None and lang not in wanted:
                report.leave_out("language_not_requested")
                continue
            yield replace(item, lang=lang, text=text)
    bar.close()


def same_text(text: str) -> str:
    """What two captions must share to count as the same text: their words, case-folded (punctuation and spacing ignored)."""
    return " ".join(_WORD.findall(text.casefold()))


def _check_one_split(item: Caption, image: GatheredImage | None) -> None:
    """One-line :class:`UserError` when a caption table labels ``item``'s image with another split than an earlier
    row did: an image is in one split, and the most held-out label would win in silence (splits.merge_hints)."""
    other = next((c for c in image.captions if c.user_split and c.split_hint not in (None, item.split_hint)),
                 None) if image is not None else None
    if other is not None:
        raise UserError(f"{item.where}: image {item.images[0]!r} is labelled {item.split_hint} here but "
                        f"{other.split_hint} at {other.where}: an image belongs to one split; give every row of an "
                        f"image the same split; nothing written")


def gather_images(sources: Iterable[Iterable[Record]], options: ConvertOptions, report: ConversionReport,
                  resolver: ImageResolver) -> dict[Path, GatheredImage]:
    """Check every record; keep good captions grouped by image file. A caption the user labelled with a split
    (a caption table's split column) while a command-line split option is given is a one-line :class:`UserError`:
    the option would re-split the images the user split (a test image could land in train); so is an image whose
    rows the user labelled with two splits."""
    images: dict[Path, GatheredImage] = {}
    given = options.split_options()
    kept: dict[tuple[Path, str, str], tuple[str, str]] = {}  # (image, lang, same_text) -> (file, where) of the kept
    repeats: list[str] = []
    for item in checked_records(sources, report, options.languages, options.progress):
        if item.user_split and item.split_hint is not None and given:
            raise UserError(f"{item.where}: the caption table's split column already splits the images (this row: "
                            f"{item.split_hint}), and {' and '.join(given)} would re-split them (an image labelled "
                            f"test could go to train): drop {' and '.join(given)} to keep the column's splits, or "
                            f"leave the column out (or empty) to split by {' and '.join(given)}; nothing written")
        path = resolver.resolve(item.images, item.exact)
        clash = resolver.same_name(item.images) if path is None and item.exact else []
        if clash:
            report.add(Issue("ambiguous_image", item.file, item.line,
                             f"image name {item.images[0]!r} fits several files under the image folders "
                             f"({examples(list(map(str, clash)))}): give the path of one, relative to its image "
                             f"folder"))
            continue
        if path is None:
            how = " (by path or file name)" if item.exact else ""
            report.add(Issue("missing_image", item.file, item.line,
                             f"image {item.images[0]!r} not found in the image folders{how}"))
            continue
        if item.user_split and item.split_hint is not None:
            _check_one_split(item, images.get(path))
        text_key = (path, item.lang, same_text(item.text))
        first = kept.get(text_key) if text_key[2] else None
        if first is not None and first[0] != str(item.file):  # overlapping sources (Multi30K tasks 1 and 2, ...);
            report.leave_out("caption_already_present")      # one file's own repeats are its annotators' and stay
            repeats.append(f"{item.where} repeats {first[1]}")
            continue
        kept.setdefault(text_key, (str(item.file), item.where))
        images.setdefault(path, GatheredImage(path)).captions.append(item)
    if repeats:
        report.note(f"{len(repeats)} caption(s) repeat a text their image already has in that language from another "
                    f"source file (case, punctuation and spacing ignored: overlapping sources) and were kept once "
                    f"(unused: caption_already_present); first: {repeats[0]}")
    return images
