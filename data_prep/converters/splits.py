"""Deciding each image's split and, for train/val, its one language (Globetrotter paper, section 4).

The paper's rule: ``train`` and ``val`` show each image in exactly one language, so no
two languages ever share an image there (no parallel signal to learn from); ``test``
shows the same images in every language, as ground truth. Appendix B.4 makes the splits
by giving each language its own disjoint share of the images; we do the same per image:

- **split files** (``--split-file SPLIT=FILE``, ``--all-to SPLIT``): the images a file names go to
  its split, every other image to train (:func:`assign_from_split_files`); test images lacking a
  requested language are left out, as below. Exclusive with the fractions.
- **test**: with ``test_fraction`` set, ``round(test_fraction * n_images)`` images drawn
  (seeded) from those captioned in *every* requested language (fewer, with a warning, when fewer
  are; a :class:`UserError` when none is or the count rounds to 0); otherwise the images a
  source marks as test (Multi30K ``test_*`` split files, Globetrotter ``listing_test.txt``,
  all of XTD10), dropping those that lack a requested language.
- **val**: with ``val_fraction`` set, ``round(val_fraction * n_images)`` of the remaining
  images (seeded); otherwise those a source marks as val. Everything else is **train**.
- **language** (``assign_languages``): each train/val image gets exactly one of the
  requested languages it has captions in, greedily balancing the number of images per
  language: the most constrained images (fewest languages) choose first, each taking its
  least-used language (ties broken at random, seeded).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from data_prep.errors import UserError
from data_prep.shards import MANIFEST, read_captions

from .common import HELD_OUT_ORDER, read_text_lines

SPLIT_NAMES = ("train", "val", "test")
SPLIT_ALIASES = {"dev": "val"}  # Flickr8k calls its val split "dev" (Flickr_8k.devImages.txt)
NOT_CAPTIONED = "\0not-captioned"  # what a lookup returns for an image file that has no usable caption


@dataclass
class ImageInfo:
    """What the planner knows about one image: its languages and the split its sources suggest."""

    langs: frozenset[str]
    hint: str | None = None


@dataclass
class SplitPlan:
    """The outcome: split of each kept image, language of each train/val image (if assigned), and notes."""

    split_of: dict[str, str] = field(default_factory=dict)
    lang_of: dict[str, str] = field(default_factory=dict)
    incomplete_test: list[str] = field(default_factory=list)  # source test images lacking a language
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SplitFile:
    """``--split-file SPLIT=FILE``: the images named in ``path`` (one name or id per line) go to ``split``."""

    split: str
    path: Path

    def __str__(self) -> str:
        return f"{self.split}={self.path}"


def split_name(value: str) -> str:
    """``train``, ``val`` (or ``dev``) or ``test`` as a split name; ``ValueError`` otherwise."""
    name = SPLIT_ALIASES.get(value.strip().lower(), value.strip().lower())
    if name not in SPLIT_NAMES:
        raise ValueError(f"unknown split {value!r} (expected one of {', '.join(SPLIT_NAMES)})")
    return name


def parse_split_file(value: str) -> SplitFile:
    """``SPLIT=FILE`` (e.g. ``test=Flickr_8k.testImages.txt``); ``ValueError`` naming what is wrong."""
    split, sep, path = value.partition("=")
    if not sep or not path or not split:
        raise ValueError(f"expected SPLIT=FILE (e.g. test=Flickr_8k.testImages.txt), got {value!r}")
    if not Path(path).is_file() and not (Path(path) / MANIFEST).is_file():
        raise ValueError(f"split file (or split folder with {MANIFEST}) not found: {path}")
    return SplitFile(split_name(split), Path(path))


def read_split_file(split_file: SplitFile) -> list[tuple[int, str]]:
    """(line number, image name) of each name in a split file: one per line, surrounding whitespace dropped;
    blank lines and ``#`` comments skipped. A split folder (``manifest.json`` + shards) names its image ids. :class:`UserError` for a file that cannot be read, a line that
    is not UTF-8, or a file that names no image."""
    path = split_file.path
    if path.is_dir():  # a converted split: its image ids, in order (the same images as another dataset's split)
        ids = list(dict.fromkeys(str(meta["image_id"]) for meta in read_captions(path)))  # read_manifest refuses none
        return list(enumerate(ids, 1))
    names = []
    try:
        for line in read_text_lines(path):
            if line.text is None:
                raise UserError(f"{path}:{line.number}: split file line is not UTF-8 ({line.error})")
            name = line.text.strip()
            if name and not name.startswith("#"):
                names.append((line.number, name))
    except (OSError, EOFError) as err:
        raise UserError(f"{path}: cannot read the split file ({err})") from None
    if not names:
        raise UserError(f"{path}: the split file names no image (expected one image name or id per line)")
    return names


@dataclass
class FixedSplits:
    """The split of each image named by the split files, and what the summary says about them."""

    split_of: dict[str, str] = field(default_factory=dict)
    named: dict[str, int] = field(default_factory=dict)  # "split=file" -> images it names that are in the dataset
    not_captioned: int = 0  # names of image files that have no usable caption (left out like any such image)
    all_to: str | None = None

    def describe(self, planned: Mapping[str, str]) -> str:
        """One summary line: images per split and where their split came from (``planned``: id -> split)."""
        counts = Counter(planned.values())
        per_split = ", ".join(f"{s} {counts[s]}" for s in SPLIT_NAMES if counts[s])
        if self.all_to is not None:
            return f"splits: --all-to {self.all_to}: every image goes to {self.all_to} ({per_split} image(s))"
        files = "; ".join(f"{name}: {n} image(s)" for name, n in self.named.items())
        rest = sum(1 for i, s in planned.items() if s == "train" and i not in self.split_of)
        line = f"splits from --split-file ({per_split} image(s)): {files}"
        if rest:
            line += f"; {rest} image(s) named in no split file went to train"
        if self.not_captioned:
            line += f"; {self.not_captioned} named image file(s) have no usable caption (left out)"
        return line

    def limit_note(self, dropped: Iterable[str], limit: int) -> str | None:
        """The warning that ``--max-images`` left out images the split files name (``dropped``: the ids it left
        out), per split: the per-file counts of :meth:`describe` are the images named, not those kept. ``None``
        when it left out none of them (or the splits are ``--all-to``'s: every image is named there)."""
        if self.all_to is not None:
            return None
        named = Counter(self.split_of.values())
        lost = Counter(self.split_of[i] for i in dropped if i in self.split_of)
        if not lost:
            return None
        per_split = ", ".join(f"{s} {lost[s]} of {named[s]}" for s in SPLIT_NAMES if lost[s])
        return (f"--max-images {limit} left out {sum(lost.values())} of the {sum(named.values())} image(s) the split "
                f"files name ({per_split}): those splits hold fewer images than their files name; raise or drop "
                f"--max-images to keep them")


def examples(items: Sequence[str], limit: int = 3) -> str:
    """The first ``limit`` of ``items``, comma-separated, and how many more (for a one-line message)."""
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def assign_from_split_files(split_files: Sequence[SplitFile], find: Callable[[str], str | None]) -> FixedSplits:
    """The split of every image the split files name.

    ``find(name)`` returns the dataset's image id for a name or id on a line, :data:`NOT_CAPTIONED` for an
    image file that has no usable caption, or ``None`` when no image has that name. Raises a
    one-line :class:`UserError` (nothing has been written yet): for names that match no image (count per file,
    the first ones with file:line), and for images named in files of two different splits (count, the
    first ones with both places). A name repeated, or in two files of the same split, is harmless.
    """
    fixed = FixedSplits()
    where: dict[str, tuple[str, str]] = {}  # image id -> (split, "file:line") of its first mention
    unknown: dict[SplitFile, list[str]] = defaultdict(list)
    totals: dict[SplitFile, int] = {}
    clashes: list[str] = []
    for split_file in split_files:
        lines = read_split_file(split_file)
        totals[split_file] = len(lines)
        ids: set[str] = set()
        for number, name in lines:
            image_id = find(name)
            here = f"{split_file.path}:{number}"
            if image_id is None:
                unknown[split_file].append(f"{here} {name!r}")
                continue
            if image_id == NOT_CAPTIONED:
                fixed.not_captioned += 1
                continue
            first = where.get(image_id)
            if first is None:
                where[image_id] = (split_file.split, here)
                fixed.split_of[image_id] = split_file.split
            elif first[0] != split_file.split:
                clashes.append(f"{image_id} ({first[0]} at {first[1]}, {split_file.split} at {here})")
            ids.add(image_id)
        fixed.named[str(split_file)] = len(ids)
    if unknown:
        count = sum(len(v) for v in unknown.values())
        parts = "; ".join(f"{sf}: {len(v)} of {totals[sf]} line(s), e.g. {examples(v)}" for sf, v in unknown.items())
        raise UserError(f"--split-file: {count} name(s) match no image of the dataset ({parts}); nothing written")
    if clashes:
        raise UserError(f"--split-file: {len(clashes)} image(s) are named in split files of two splits: "
                        f"{examples(clashes)}; an image goes to one split only; nothing written")
    return fixed


def merge_hints(hints: Sequence[str | None]) -> str | None:
    """Combine the split hints of an image's captions: the most held-out one wins (test > val > train)."""
    known = [h for h in hints if h is not None]
    return max(known, key=HELD_OUT_ORDER.index) if known else None


def assign_languages(image_langs: Mapping[str, frozenset[str]], rng: np.random.Generator) -> dict[str, str]:
    """Give each image one of its languages, balancing images per language (see module docstring).

    ``image_langs`` maps image id -> the languages it has captions in (non-empty).
    Returns image id -> chosen language. Deterministic for a given ``rng`` state.
    """
    ids = list(image_langs)
    if not ids:
        return {}
    tiebreak = rng.permutation(len(ids))
    order = sorted(range(len(ids)), key=lambda i: (len(image_langs[ids[i]]), tiebreak[i]))
    counts: Counter = Counter()
    chosen: dict[str, str] = {}
    for i in order:
        options = sorted(image_langs[ids[i]])
        fewest = min(counts[lang] for lang in options)
        best = [lang for lang in options if counts[lang] == fewest]
        lang = best[int(rng.integers(len(best)))] if len(best) > 1 else best[0]
        counts[lang] += 1
        chosen[ids[i]] = lang
    return chosen


def _no_complete_image(images: Mapping[str, ImageInfo], wanted: frozenset[str], test_fraction: float,
                       n_test: int) -> str:
    """The one-line error for a ``--test-fraction`` that finds no image captioned in every requested language: the
    languages some images lack, with how many images each has, and what to do."""
    n = len(images)
    per_lang = Counter(lang for info in images.values() for lang in info.langs & wanted)
    lacking = sorted((lang for lang in wanted if per_lang[lang] < n), key=lambda lang: (per_lang[lang], lang))
    full = sorted(lang for lang in wanted if per_lang[lang] == n)
    keep = f", or keep only the languages every image has (--languages {','.join(full)})" if full else ""
    return (f"--test-fraction {test_fraction} asks for {n_test} test image(s), but none of the {n} image(s) has a "
            f"caption in every language of {','.join(sorted(wanted))} (a test image needs all of them); images per "
            f"language: {', '.join(f'{lang} {per_lang[lang]}' for lang in lacking)} (of {n}): add the missing "
            f"captions, correct their language codes{keep}; nothing written")


def plan_splits(
    images: Mapping[str, ImageInfo],
    languages: Sequence[str],
    test_fraction: float | None = None,
    val_fraction: float | None = None,
    assign: bool = False,
    seed: int = 0,
    fixed: Mapping[str, str] | None = None,
) -> SplitPlan:
    """Split ``images`` (id -> :class:`ImageInfo`) into train/val/test and assign languages.

    ``languages`` are the requested languages (every image's ``langs`` is a non-empty
    subset of them). See the module docstring for the rules. Images a source marks as
    test but that lack a requested language are listed in ``incomplete_test`` and get
    no split. ``fixed`` (image id -> split, from split files; exclusive with the fractions)
    replaces the sources' hints: an image it does not name goes to train. A ``test_fraction`` above 0 whose
    test split would be empty (no image captioned in every language, or the count rounds to 0) is a one-line
    :class:`UserError`.
    """
    if fixed is not None and (test_fraction is not None or val_fraction is not None):
        raise ValueError("plan_splits: fixed splits and fractions are exclusive")
    rng = np.random.default_rng(seed)
    plan = SplitPlan()
    ids = list(images)
    n = len(ids)
    wanted = frozenset(languages)
    hint = {i: (fixed.get(i, "train") if fixed is not None else images[i].hint) for i in ids}

    if test_fraction is not None:
        complete = [i for i in ids if images[i].langs >= wanted]
        n_test = int(round(test_fraction * n))
        if n_test and not complete:
            raise UserError(_no_complete_image(images, wanted, test_fraction, n_test))
        if test_fraction and not n_test:
            raise UserError(f"--test-fraction {test_fraction} of {n} image(s) rounds to 0 test images: raise it to at "
                            f"least {1 / n:.2g} (one image) or drop it; nothing written")
        if n_test > len(complete):
            plan.notes.append(f"--test-fraction {test_fraction} asks for {n_test} test images but only "
                              f"{len(complete)} have captions in all of {sorted(wanted)}; using those")
            n_test = len(complete)
        picked = rng.permutation(len(complete))[:n_test]
        test = {complete[j] for j in picked}
    else:
        test = set()
        for i in ids:
            if hint[i] == "test":
                if images[i].langs >= wanted:
                    test.add(i)
                else:
                    plan.incomplete_test.append(i)
    excluded = test | set(plan.incomplete_test)
    rest = [i for i in ids if i not in excluded]

    if val_fraction is not None:
        n_val = min(int(round(val_fraction * n)), len(rest))
        val = {rest[j] for j in rng.permutation(len(rest))[:n_val]}
    else:
        val = {i for i in rest if hint[i] == "val"}

    for i in ids:  # in input order, so everything downstream is deterministic
        if i in test:
            plan.split_of[i] = "test"
        elif i not in excluded:
            plan.split_of[i] = "val" if i in val else "train"

    if assign:
        for split in ("train", "val"):
            members = {i: images[i].langs for i in ids if plan.split_of.get(i) == split}
            plan.lang_of.update(assign_languages(members, rng))
    if not test and (fixed is None or "test" in set(fixed.values())):  # not where the splits given hold no test
        plan.notes.append("no test split: no complete image was marked test by a source or a split file, or "
                          "drawn by --test-fraction")
    return plan
