"""The Globetrotter split rule: train/val show each image in one language, test every image in every language."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from .errors import UserError
from .shards import read_captions, read_manifest


def images_by_language(metas: Iterable[dict]) -> dict[str, set[str]]:
    """Each language's distinct image ids (as strings) among the captions ``metas``."""
    out: dict[str, set[str]] = {}
    for m in metas:
        out.setdefault(m["lang"], set()).add(str(m["image_id"]))
    return out


def images_in_several_languages(metas: Iterable[dict]) -> dict[str, list[str]]:
    """The images captioned in more than one language, each with its sorted languages (insertion order):
    empty for a split that keeps the train/val rule (each image in exactly one language, no parallel text).
    Holds one language per image (and sets only for the images that break the rule): ``metas`` may stream."""
    first_lang: dict[str, str] = {}
    several: dict[str, set] = {}
    for m in metas:
        image, lang = str(m["image_id"]), m["lang"]
        seen = first_lang.setdefault(image, lang)
        if seen != lang:
            several.setdefault(image, {seen}).add(lang)
    return {image: sorted(several[image]) for image in first_lang if image in several}  # in order of first appearance


ONE_LANGUAGE_SPLITS = ("train", "val", "adapt")
PARALLEL_SPLITS = ("test", "train-parallel")


def check_split_rule(split_dir: str | Path, kind: str | None = None) -> str | None:
    """Raise :class:`UserError` if a split breaks the rule for its kind; return the rule checked (None: a kind
    with no rule, nothing checked).

    ``train``/``val``/``adapt``: every ``image_id`` appears in exactly one language.
    ``test``/``train-parallel``: every ``group`` has at least one caption in every language of the split
    (sources with several captions per image and language keep them all; evaluations
    that need one per language take the first).
    """
    manifest = read_manifest(split_dir)
    kind = kind or manifest.get("split")
    if kind not in ONE_LANGUAGE_SPLITS + PARALLEL_SPLITS:
        return None
    metas = read_captions(split_dir)
    if kind in ONE_LANGUAGE_SPLITS:
        bad = images_in_several_languages(metas)
        if bad:
            first, langs = next(iter(bad.items()))
            raise UserError(
                f"{split_dir}: {len(bad)} image(s) appear in more than one language in a {kind} split "
                f"(e.g. {first!r}: {langs})"
            )
    else:
        languages = set(manifest["languages"])
        by_group: dict[str, Counter] = defaultdict(Counter)
        for m in metas:
            if m.get("group") is None:
                raise UserError(f"{split_dir}: {kind} sample '{m['key']}' has no group")
            by_group[m["group"]][m["lang"]] += 1
        for group, counts in by_group.items():
            if set(counts) != languages:
                raise UserError(
                    f"{split_dir}: {kind} group {group!r} must have a caption in each of {sorted(languages)}, "
                    f"has {dict(counts)}"
                )
        return "every group captioned in every language"
    return "one language per image"
