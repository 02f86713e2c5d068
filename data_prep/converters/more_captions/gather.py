"""Which captions ``more-captions`` adds: the splits to enrich as they are, each source caption matched to a
dataset image, and filed under it when it is in that image's language and its text is new."""
from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from data_prep.errors import UserError
from data_prep.shards import MANIFEST, SPLITS, read_captions, read_manifest

from ..common import Record
from ..images import _stem, flickr_photo_id
from ..pipeline import checked_records, safe_id
from ..report import ConversionReport

_WORD = re.compile(r"\w+")


def same_text(text: str) -> str:
    """What two captions must share to count as the same text: their words, case-folded (punctuation and spacing ignored)."""
    return " ".join(_WORD.findall(text.casefold()))


@dataclass
class EnrichedSplit:
    """One split to enrich: its images' languages and texts, what it held and what is added."""

    name: str
    manifest: dict
    lang_of: dict[str, str] = field(default_factory=dict)  # image id -> its one language
    texts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # image id -> same_text keys
    per_image_lang: Counter = field(default_factory=Counter)  # (image id, lang) -> captions so far
    samples: Counter = field(default_factory=Counter)  # image id -> samples in the original split
    keys: set[str] = field(default_factory=set)
    before: Counter = field(default_factory=Counter)  # lang -> captions in the original split
    added: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))  # image id -> (lang, text)


def load_split(split_dir: Path, name: str) -> EnrichedSplit:
    """Read a split to enrich; one-line error when one of its images has captions in two languages."""
    manifest = read_manifest(split_dir)  # one-line UserError when the split is missing
    state = EnrichedSplit(name, manifest)
    for meta in read_captions(split_dir):
        image_id, lang = str(meta["image_id"]), meta["lang"]
        first = state.lang_of.setdefault(image_id, lang)
        if first != lang:
            raise UserError(f"{split_dir}: image {image_id!r} has captions in {first} and {lang}; more-captions needs a "
                            f"{name} split with one language per image (convert with --assign-languages)")
        state.texts[image_id].add(same_text(meta["caption"]))
        state.per_image_lang[(image_id, lang)] += 1
        state.samples[image_id] += 1
        state.keys.add(meta["key"])
        state.before[lang] += 1
    return state


def split_of_images(data: Path, states: dict[str, EnrichedSplit]) -> dict[str, str]:
    """Image id -> split, over the splits to enrich and the dataset's others (their captions are unused, not
    missing)."""
    split_of = {image_id: name for name, st in states.items() for image_id in st.lang_of}
    for name in SPLITS:
        if name not in states and (data / name / MANIFEST).is_file():
            for image_id in {str(m["image_id"]) for m in read_captions(data / name)}:
                split_of.setdefault(image_id, name)
    return split_of


class Matcher:
    """Find the dataset image a caption names: by image id (= file stem), then by Flickr photo id."""

    def __init__(self, split_of: dict[str, str]) -> None:
        self.split_of = split_of
        self.by_photo: dict[str, str] = {}
        for image_id in sorted(split_of):
            photo = flickr_photo_id(image_id)
            if photo is not None:
                self.by_photo.setdefault(photo, image_id)

    def match(self, candidates: Iterable[str]) -> str | None:
        stems = [_stem(os.path.basename(c)) for c in candidates if c]
        for stem in stems:
            for image_id in (stem, safe_id(stem)):
                if image_id in self.split_of:
                    return image_id
        for stem in stems:
            photo = flickr_photo_id(stem)
            if photo is not None and photo in self.by_photo:
                return self.by_photo[photo]
        return None


def gather(sources: Iterable[Iterable[Record]], states: dict[str, EnrichedSplit], matcher: Matcher,
           languages: list[str] | None, report: ConversionReport, progress: bool) -> None:
    """Check every record like a conversion does; file the captions to add under their image."""
    for item in checked_records(sources, report, languages, progress):
        lang, text = item.lang, item.text
        image_id = matcher.match(item.images)
        if image_id is None:
            report.leave_out("image_not_in_dataset")
            continue
        state = states.get(matcher.split_of[image_id])
        if state is None:
            report.leave_out("image_in_other_split")
            continue
        if state.lang_of[image_id] != lang:
            report.leave_out("other_language_of_image")
            continue
        key = same_text(text)
        if key in state.texts[image_id]:
            report.leave_out("caption_already_present")
            continue
        state.texts[image_id].add(key)
        state.added[image_id].append((lang, text))
        report.written[(state.name, lang)] += 1
