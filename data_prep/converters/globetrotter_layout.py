"""The Globetrotter dataset (Surís et al., paper section 4 and appendix B.4) in its released layout.

The paper gives the design: captions of Flickr30k, MSCOCO and Conceptual Captions,
machine-translated into 52 languages; each dataset split into 52 equal parts, one per
language; the English part translated into all 51 other languages and used only for
testing; the other parts split 80/20 into train and val. It does not give file names;
these follow the released ``dataset.tar.gz`` as the authors' loader reads it
(``dataset.py``, ``data/create_listdir.py`` of github.com/cvlab-columbia/globetrotter)::

    ROOT/COCO/annotations/        ROOT/flickr30k/entities/        ROOT/ConceptualCaptions/
        translated_independent/       (same)                           (same)
            listing_train.txt         each line "./<lang>/<name>.txt"
            listing_val.txt
            <lang>/<name>.txt         one caption per line (line i = caption i of the image)
        translated_alllangs/
            listing_test.txt          the test part: the same <name>.txt in every language
            <lang>/<name>.txt

``translated_independent`` holds each image in one language (train/val);
``translated_alllangs`` holds the test images in all languages. The image is given by the
number after the last ``_`` of ``<name>``:

- COCO: ``ROOT/COCO/{train,val}2014/COCO_{train,val}2014_<number:012d>.jpg`` (``val`` when
  the name contains ``val``);
- Flickr30k: ``ROOT/flickr30k/images/<number>.jpg``;
- Conceptual Captions: ``ROOT/ConceptualCaptions/train/<number:08d>.{jpg,jpeg,png}`` (a
  number of more than 8 digits loses its first digit, as the official loader does).

Assumptions (not checkable without the archive): language folders are named with Amazon
Translate codes (ISO 639-1 plus ``fa-AF`` for Dari), and a ``listing_<split>.txt`` line
may also be ``<lang>/<name>.txt`` without ``./``. When the images live elsewhere, give
their folders with ``--images``; names are then looked up by file name. Split hints come
from the listing file (``listing_train`` -> train, ...). Caption keys are
``(dataset, variant, lang, name, line)``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from data_prep.errors import UserError

from .common import Caption, Record, read_lines_or_issue
from .report import Issue

DATASETS = {"coco": "COCO/annotations", "flickr": "flickr30k/entities", "conceptual": "ConceptualCaptions"}
VARIANTS = ("translated_independent", "translated_alllangs")
LISTING_SPLITS = ("train", "val", "test")
CONCEPTUAL_EXTENSIONS = (".jpg", ".jpeg", ".png")


def image_candidates(dataset: str, name: str) -> tuple[str, ...] | None:
    """Image paths (relative to ROOT) for caption file ``name`` of ``dataset``, or ``None`` if it has no number."""
    stem = Path(name).stem
    try:
        number = int(stem.split("_")[-1])
    except ValueError:
        return None
    if dataset == "coco":
        part = "val" if "val" in stem else "train"
        return (f"COCO/{part}2014/COCO_{part}2014_{number:012d}.jpg",)
    if dataset == "flickr":
        return (f"flickr30k/images/{number}.jpg",)
    digits = str(number)
    if len(digits) > 8:
        number = int(digits[1:])
    return tuple(f"ConceptualCaptions/train/{number:08d}{ext}" for ext in CONCEPTUAL_EXTENSIONS)


def read_globetrotter(root: str | Path) -> Iterator[Record]:
    """Caption records of a Globetrotter dataset folder (see module docstring).

    The listings are located now (:class:`UserError` when ``root`` holds none of the three
    datasets' listings) and read as the returned iterator is consumed.
    """
    root = Path(root)
    listings = [(dataset, variant, split, root / sub / variant / f"listing_{split}.txt")
                for dataset, sub in DATASETS.items() for variant in VARIANTS for split in LISTING_SPLITS]
    listings = [entry for entry in listings if entry[3].is_file()]
    if not listings:
        raise UserError(f"{root}: no Globetrotter listing found (expected e.g. "
                        f"{root}/COCO/annotations/translated_independent/listing_train.txt)")
    return _records(listings)


def _records(listings: list[tuple[str, str, str, Path]]) -> Iterator[Record]:
    for dataset, variant, split, listing in listings:
        lines, issue = read_lines_or_issue(listing)
        if issue is not None:
            yield issue
        for line in lines:
            if line.text is None:
                yield Issue("non_utf8", str(listing), line.number, line.error, records=0)
                continue
            entry = line.text.strip()
            if not entry:
                continue
            parts = Path(entry).parts  # "./de/x.txt" -> ("de", "x.txt"): pathlib drops the "."
            candidates = image_candidates(dataset, parts[-1]) if len(parts) == 2 else None
            if candidates is None or not parts[1].endswith(".txt"):
                yield Issue("malformed_line", str(listing), line.number,
                            f"expected './<lang>/<name>_<number>.txt', got {entry[:80]!r}", records=0)
                continue
            lang, name = parts
            text_file = listing.parent / lang / name
            if not text_file.is_file():
                yield Issue("missing_caption_file", str(listing), line.number, f"{text_file} not found", records=0)
                continue
            captions, issue = read_lines_or_issue(text_file)
            for cap in captions:
                if cap.text is None:
                    yield Issue("non_utf8", str(text_file), cap.number, cap.error)
                    continue
                yield Caption(candidates, lang, cap.text, str(text_file), cap.number,
                              ("globetrotter", dataset, variant, lang, name, cap.number), split)
            if issue is not None:
                yield issue
