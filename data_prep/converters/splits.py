"""Deciding each image's split and, for train/val, its one language (Globetrotter paper, section 4).

The paper's rule: ``train`` and ``val`` show each image in exactly one language, so no
two languages ever share an image there (no parallel signal to learn from); ``test``
shows the same images in every language, as ground truth. Appendix B.4 makes the splits
by giving each language its own disjoint share of the images; we do the same per image:

- **test**: with ``test_fraction`` set, ``round(test_fraction * n_images)`` images drawn
  (seeded) from those captioned in *every* requested language; otherwise the images a
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

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .common import HELD_OUT_ORDER


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


def plan_splits(
    images: Mapping[str, ImageInfo],
    languages: Sequence[str],
    test_fraction: float | None = None,
    val_fraction: float | None = None,
    assign: bool = False,
    seed: int = 0,
) -> SplitPlan:
    """Split ``images`` (id -> :class:`ImageInfo`) into train/val/test and assign languages.

    ``languages`` are the requested languages (every image's ``langs`` is a non-empty
    subset of them). See the module docstring for the rules. Images a source marks as
    test but that lack a requested language are listed in ``incomplete_test`` and get
    no split.
    """
    rng = np.random.default_rng(seed)
    plan = SplitPlan()
    ids = list(images)
    n = len(ids)
    wanted = frozenset(languages)

    if test_fraction is not None:
        complete = [i for i in ids if images[i].langs >= wanted]
        n_test = int(round(test_fraction * n))
        if n_test > len(complete):
            plan.notes.append(f"--test-fraction {test_fraction} asks for {n_test} test images but only "
                              f"{len(complete)} have captions in all of {sorted(wanted)}; using those")
            n_test = len(complete)
        picked = rng.permutation(len(complete))[:n_test]
        test = {complete[j] for j in picked}
    else:
        test = set()
        for i in ids:
            if images[i].hint == "test":
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
        val = {i for i in rest if images[i].hint == "val"}

    for i in ids:  # in input order, so everything downstream is deterministic
        if i in test:
            plan.split_of[i] = "test"
        elif i not in excluded:
            plan.split_of[i] = "val" if i in val else "train"

    if assign:
        for split in ("train", "val"):
            members = {i: images[i].langs for i in ids if plan.split_of.get(i) == split}
            plan.lang_of.update(assign_languages(members, rng))
    if not test:
        plan.notes.append("no test split: no complete image was marked test by a source or drawn by --test-fraction")
    return plan
