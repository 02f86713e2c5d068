"""XTD10 (Aggarwal & Kale 2020, section 4.1.1): a 1K-image MSCOCO 2014 test set in 11 languages.

Layout of the public release (github.com/adobe-research/Cross-lingual-Test-Dataset-XTD10)::

    XTD10/test_image_names.txt          1000 COCO names, e.g. COCO_train2014_000000061844.jpg
    XTD10/test_1kcaptions_<lang>.txt    es, it, ko, pl, ru, tr, zh  (human translations of en)
    MIC/test_1kcaptions_<lang>.txt      en, de, fr                  (from the MIC dataset)
    STAIR/test_1kcaptions_jp.txt        Japanese (STAIR captions; *not* translations of en)

Line *i* of every caption file captions line *i* of ``test_image_names.txt``. The
Japanese file is named ``jp`` (Japan's country code); this reader maps it to the
ISO 639-1 code ``ja`` explicitly; any other file suffix must be an ISO 639-1 code. The
converter takes the folder holding ``XTD10/``, ``MIC/`` and ``STAIR/`` (or one flat folder
with all the files); caption files are looked for one folder deep. Images are found by
name in the COCO image folder(s) given with ``--images`` (subfolders such as
``train2014/`` are searched). Every image is a test image (split hint ``test``); its
captions in all languages form the parallel test split, tied by ``group``. Another file
whose name starts ``test_1kcaptions_`` (``test_1kcaptions_de.orig.txt``) is skipped with a
warning naming it.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterator

from data_prep.errors import UserError

from .common import AlignedFile, Record, read_aligned

NAMES_FILE = "test_image_names.txt"
# XTD10's file suffix -> ISO 639-1: only Japanese differs ("jp" is a country code, the language is "ja").
XTD10_LANGUAGE_ALIASES = {"jp": "ja"}
_CAPTION_FILE = re.compile(r"^test_1kcaptions_(?P<lang>[^.]+)\.txt$")


def read_xtd10(root: str | Path) -> Iterator[Record]:
    """Caption records of an XTD10 release folder (see module docstring).

    The files are located now (:class:`UserError` when ``test_image_names.txt`` or the
    caption files are not found) and read as the returned iterator is consumed.
    """
    root = Path(root)
    names = next((p for p in (root / NAMES_FILE, root / "XTD10" / NAMES_FILE) if p.is_file()), None)
    if names is None:
        raise UserError(f"{root}: {NAMES_FILE} not found (expected {root}/XTD10/{NAMES_FILE} or {root}/{NAMES_FILE})")
    paths = sorted(set(root.glob("test_1kcaptions_*.txt")) | set(root.glob("*/test_1kcaptions_*.txt")))
    files = []
    for path in paths:
        match = _CAPTION_FILE.match(path.name)
        if match is None:
            print(f"warning: {path}: not an XTD10 caption file (expected test_1kcaptions_<lang>.txt); skipped",
                  file=sys.stderr)
            continue
        code = match.group("lang")
        files.append(AlignedFile(path, XTD10_LANGUAGE_ALIASES.get(code, code)))
    if not files:
        raise UserError(f"{root}: no test_1kcaptions_<lang>.txt file found (looked in {root} and its subfolders)")
    return read_aligned(names, files, "xtd10", "test")
