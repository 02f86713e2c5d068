"""Which captions ``more-captions`` adds: the splits to enrich as they are, each source caption matched to a
dataset image, and filed under it (in every enriched split that holds the image) when it is in a language the
image already has there and its text is new."""
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
from ..gather import checked_records, same_text
from ..images import flickr_photo_id, image_stem
from ..pipeline import KEY_UNSAFE, safe_id
from ..report import ConversionReport

PARALLEL = ("train-parallel",)  # splits that show an image in several languages (tied by group); the others, one


@dataclass
class EnrichedSplit:
    """One split to enrich: its images' languages, groups and texts, what it held and what is added."""

    name: str
    manifest: dict
    langs_of: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # image id -> its languages
    group_of: dict[str, str | None] = field(default_factory=dict)  # image id -> the group tying its captions
    texts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # image id -> same_text keys
    per_image_lang: Counter = field(default_factory=Counter)  # (image id, lang) -> captions so far
    samples: Counter = field(default_factory=Counter)  # image id -> samples in the original split
    keys: set[str] = field(default_factory=set)
    before: Counter = field(default_factory=Counter)  # lang -> captions in the original split
    added: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))  # image id -> (lang, text)

    def added_per_language(self) -> Counter:
        """Captions added to this split, per language."""
        return Counter(lang for caps in self.added.values() for lang, _ in caps)


def load_split(split_dir: Path, name: str) -> EnrichedSplit:
    """Read a split to enrich; one-line error when an image of a one-language split (train, val) has captions in
    two languages. A parallel split (train-parallel) keeps each image's languages and group."""
    manifest = read_manifest(split_dir)  # one-line UserError when the split is missing
    state = EnrichedSplit(name, manifest)
    for meta in read_captions(split_dir):
        image_id, lang = str(meta["image_id"]), meta["lang"]
        langs = state.langs_of[image_id]
        if name not in PARALLEL and langs and lang not in langs:
            raise UserError(f"{split_dir}: image {image_id!r} has captions in {next(iter(langs))} and {lang}; "
                            f"more-captions needs a {name} split with one language per image (convert with "
                            "--assign-languages)")
        langs.add(lang)
        state.group_of.setdefault(image_id, meta.get("group"))
        state.texts[image_id].add(same_text(meta["caption"]))
        state.per_image_lang[(image_id, lang)] += 1
        state.samples[image_id] += 1
        state.keys.add(meta["key"])
        state.before[lang] += 1
    return state


def split_of_images(data: Path, states: dict[str, EnrichedSplit]) -> dict[str, list[str]]:
    """Image id -> the splits holding it: the splits to enrich (train-parallel's images are train images too),
    else the first of the dataset's others (its captions are unused, not missing)."""
    split_of: dict[str, list[str]] = defaultdict(list)
    for name, st in states.items():
        for image_id in st.langs_of:
            split_of[image_id].append(name)
    for name in SPLITS:
        if name not in states and (data / name / MANIFEST).is_file():
            for image_id in {str(m["image_id"]) for m in read_captions(data / name)}:
                if image_id not in split_of:
                    split_of[image_id] = [name]
    return dict(split_of)


AMBIGUOUS = "\0ambiguous"  # Matcher.match: the name fits several images of the dataset
_CLASH = re.compile(r"^(?P<base>.+)-(?P<n>[2-9]|[1-9]\d+)$")  # a conversion's id for a second file of one stem


class Matcher:
    """Find the dataset image a caption names: by image id (= file stem), then by Flickr photo id.

    The shards keep no file names, so a stem that several files shared at conversion (``cat.jpg`` and
    ``cat.png`` became ids ``cat`` and ``cat-2``) names none of them for sure: such ids, and a photo id several
    images share (a name found only by it), match as :data:`AMBIGUOUS`, never as one of the images; a name that
    is one image's own id finds that image."""

    def __init__(self, split_of: dict[str, list[str]]) -> None:
        self.split_of = split_of
        self.ambiguous: set[str] = set()
        for image_id in split_of:
            clash = _CLASH.match(image_id)
            if clash is not None and clash.group("base") in split_of:
                self.ambiguous.update((image_id, clash.group("base")))
        self.by_photo: dict[str, str] = {}
        self.shared_photos: set[str] = set()  # photo ids of several images: a name matched by one fits them all
        for image_id in sorted(split_of):
            photo = flickr_photo_id(image_id)
            if photo is not None and self.by_photo.setdefault(photo, image_id) != image_id:
                self.shared_photos.add(photo)

    def match(self, candidates: Iterable[str]) -> str | None:
        """The image id the caption's image names, :data:`AMBIGUOUS`, or ``None`` (no image of the dataset)."""
        stems = [image_stem(os.path.basename(c)) for c in candidates if c]
        for stem in stems:
            # the id a conversion gives the stem; also the whole sanitised stem, as ids of over 64 characters were
            # before they were shortened
            for image_id in (stem, safe_id(stem), KEY_UNSAFE.sub("_", stem).strip("_")):
                if image_id in self.split_of:
                    return AMBIGUOUS if image_id in self.ambiguous else image_id
        for stem in stems:
            photo = flickr_photo_id(stem)
            if photo is not None and photo in self.by_photo:
                image_id = self.by_photo[photo]
                return AMBIGUOUS if photo in self.shared_photos or image_id in self.ambiguous else image_id
        return None


def gather(sources: Iterable[Iterable[Record]], states: dict[str, EnrichedSplit], matcher: Matcher,
           languages: list[str] | None, report: ConversionReport, progress: bool) -> None:
    """Check every record like a conversion does; file the captions to add under their image, in each enriched
    split that holds it in the caption's language. A record added to two splits (a train image's caption, also
    added to train-parallel) counts as written once and as an extra copy in the second, as the converters count
    train-parallel's copies of train captions. A caption whose image name fits several images is left out
    (``ambiguous_image_name``) with a warning naming the first."""
    ambiguous: list[str] = []
    for item in checked_records(sources, report, languages, progress):
        lang, text = item.lang, item.text
        image_id = matcher.match(item.images)
        if image_id is None:
            report.leave_out("image_not_in_dataset")
            continue
        if image_id == AMBIGUOUS:
            report.leave_out("ambiguous_image_name")
            ambiguous.append(f"{item.where} {item.images[0]!r}")
            continue
        targets = [states[name] for name in matcher.split_of[image_id] if name in states]
        if not targets:
            report.leave_out("image_in_other_split")
            continue
        key, added, reasons = same_text(text), 0, set()
        for state in targets:
            if lang not in state.langs_of[image_id]:
                reasons.add("other_language_of_image")
            elif key in state.texts[image_id]:
                reasons.add("caption_already_present")
            else:
                state.texts[image_id].add(key)
                state.added[image_id].append((lang, text))
                (report.extra_written if added else report.written)[(state.name, lang)] += 1
                added += 1
        if not added:  # a caption some split holds already is not new anywhere
            report.leave_out("caption_already_present" if "caption_already_present" in reasons
                             else "other_language_of_image")
    if ambiguous:
        report.note(f"{len(ambiguous)} caption(s) not added: their image name fits several images of the dataset "
                    f"(files of one stem, e.g. cat.jpg and cat.png, converted as cat, cat-2; the shards keep no file "
                    f"names), first {ambiguous[0]}")
