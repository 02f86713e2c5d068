"""Reference texts: the unlabelled captions whose statistics score evaluated sentences (inductive scoring).

A ranking that corrects for hubness or weighs tokens needs corpus statistics: CSLS's neighbourhood radii, MaxSim's
idf and token hubness, the TF-IDF baseline's idf. Taken from the evaluated sentences themselves (transductive),
one pair's score depends on which other sentences happen to be evaluated, and the test sentences shape their own
ranking. Taken from a reference pool, a pair's score depends on the two sentences, the model and the pool only:
what a user has at inference time is unlabelled text of their languages, such as the train split's captions
(no groups, no images: nothing parallel is read). That is the default of every evaluation.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

import numpy as np

from backretrieval.errors import given, option
from backretrieval.files import is_whole, require_sequence
from backretrieval.renamed import renamed_keywords
from globetrotter.errors import UserError

from .records import dataset_info

DEFAULT_SIZE = 2000
"""Reference captions per language (a fixed sample of larger splits): enough for k = 10 neighbourhoods and idf,
and a bounded cost at any split size."""

SAMPLE_SEED = 0
"""The seed of every language's sample: a pool depends on its split, languages and cap only, never on an evaluation's
seed, so that a ranking chosen on val with one seed is scored on test with the very statistics it was chosen with."""


@dataclass(frozen=True)
class ReferencePool:
    """Captions and their languages, read from ``source`` (a split folder, whose manifest ``checksum`` it names);
    ``available``: each language's captions in that split before the per-language sample (None: not known)."""

    captions: list[str]
    langs: np.ndarray
    source: str
    checksum: str | None = None
    available: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.captions)

    @property
    def record(self) -> dict:
        """What a result record says of the pool, with a checksum of its captions (``sha256``: two records used the
        same statistics when they agree) and of its split's manifest (``checksum``, as a record's ``dataset``)."""
        counts = dict(zip(*np.unique(self.langs, return_counts=True)))
        text = "\n".join(f"{lang}\t{caption}" for lang, caption in zip(self.langs.tolist(), self.captions))
        return {"split": self.source, "captions": len(self), "per_language": {str(k): int(v) for k, v in counts.items()},
                "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "checksum": self.checksum}


def default_reference(split: str | Path) -> Path:
    """The split beside ``split`` named ``train`` (``outputs/flickr8k/test`` → ``outputs/flickr8k/train``)."""
    return Path(split).parent / "train"


def reference_split(evaluated: str | Path, reference: str | Path | None = None,
                    evaluated_images: Collection[str] | None = None) -> Path:
    """``reference``, else :func:`default_reference` of ``evaluated``; a one-line error when it is the evaluated split
    itself (its statistics would come from the evaluated sentences: the transductive form), a test split
    (:func:`refuse_test_split`), or a split that shows an image of the evaluated split (a copy of it, or another
    draw's train split holding its images: their captions would give the statistics). ``evaluated_images``: the
    evaluated split's image ids when the caller has read them (else the split is read for them)."""
    return checked_reference(evaluated, reference, evaluated_images).split


def checked_reference(evaluated: str | Path, reference: str | Path | None = None,
                      evaluated_images: Collection[str] | None = None,
                      languages: Sequence[str] = ()) -> ReferenceCaptions:
    """:func:`reference_split`'s split, checked as it says, with its captions in ``languages`` kept from the same
    pass over it (:meth:`ReferenceCaptions.pool` samples them): the reference split is read once."""
    chosen = Path(reference) if reference is not None else default_reference(evaluated)
    if chosen.resolve() == Path(evaluated).resolve():
        if reference is None:  # the default beside a split named train: no --reference was given
            raise UserError(f"{evaluated}: the default reference split (the train split beside it) is the evaluated "
                            f"split itself: the statistics would come from the evaluated sentences; name another split "
                            f"with {given('reference', 'SPLIT')}")
        raise UserError(f"{given('reference', chosen)} is the evaluated split {evaluated}: the statistics would come "
                        f"from the evaluated sentences; name another split (e.g. the train split)")
    refuse_test_split(chosen, "reference")
    if not languages and evaluated_images is None and not (Path(evaluated) / "manifest.json").is_file():
        return ReferenceCaptions(chosen, (), None)  # no captions asked for, no evaluated images to compare: no read
    captions = read_captions_once(chosen, languages)
    shared = shared_images(chosen, evaluated, evaluated_images, captions.images)
    if shared:
        named = given("reference", chosen) if reference is not None else f"{chosen} (the default reference split)"
        raise UserError(f"{named}: shows {len(shared)} images of the evaluated split {evaluated} (e.g. "
                        f"{sorted(shared)[0]!r}), whose captions would give the statistics; name a split of other "
                        f"images{' with ' + given('reference', 'SPLIT') if reference is None else ''} (e.g. the train split of "
                        f"the same conversion)")
    return captions


def shared_images(split: str | Path, other: str | Path, other_images: Collection[str] | None = None,
                  split_images: Collection[str] | None = None) -> set[str]:
    """The image ids two splits both show; ``other_images`` and ``split_images``: ``other``'s and ``split``'s image
    ids, when the caller has read them (that folder is then not read). A folder whose ids are not given and that
    holds no split shows none."""
    shown: list[set[str]] = []
    for folder, ids in ((split, split_images), (other, other_images)):
        if ids is None and not (Path(folder) / "manifest.json").is_file():
            return set()
        shown.append(set(ids) if ids is not None else set(read_captions_once(folder).images))
    return shown[0] & shown[1]


def refuse_test_split(split: str | Path, flag: str) -> None:
    """A one-line error when ``split`` is a test split (its manifest names it ``test``, or its folder is ``test``): a
    choice is made on val, and reads neither the test captions nor statistics taken from them. ``flag`` names the
    option that gave it: a parameter name (``val``, named as :func:`~backretrieval.errors.given` says) or a script's
    own flag (``--val``); the advice is the split it takes (``val``: a val split; else the train split)."""
    from data_prep.shards import read_manifest

    split = Path(split)
    role = read_manifest(split).get("split") if (split / "manifest.json").is_file() else None
    if role == "test" or split.name == "test":
        instead = ("a val split (e.g. the val split beside it)" if flag.lstrip("-") == "val"
                   else "another split (e.g. the train split)")
        named = f"{flag} {split}" if flag.startswith("-") else given(flag, split)
        raise UserError(f"{named}: a test split; choices are made on val and read nothing of test, not even "
                        f"its captions' statistics: name {instead}")


def choice_reference(val: str | Path, reference: str | Path | None = None) -> Path:
    """The reference split of a choice made on ``val`` (:func:`reference_split`); a one-line error when ``val`` or the
    reference is a test split (:func:`refuse_test_split`)."""
    refuse_test_split(val, "val")
    return reference_split(val, reference)


@dataclass(frozen=True)
class ReferenceCaptions:
    """One pass over a split (:func:`read_captions_once`): the image ids it shows, the languages it has and its
    captions in ``languages``, by language in shard order; ``by_language`` is None when nothing was read (``split``
    holds no split)."""

    split: Path
    languages: tuple[str, ...]
    by_language: dict[str, list[str]] | None
    found: frozenset[str] = frozenset()
    images: frozenset[str] = frozenset()

    def pool(self, max_per_lang: int | None = DEFAULT_SIZE, languages: Sequence[str] | None = None) -> ReferencePool:
        """:func:`read_reference`'s pool of these captions, with its one-line errors; ``languages``: some of the
        languages read (default: all), the pool :func:`read_reference` gives of them (each language is sampled on
        its own)."""
        languages = self.languages if languages is None else tuple(languages)
        if self.by_language is None:
            raise UserError(f"{self.split}: no split here (expected manifest.json) to take the reference statistics "
                            f"from; name one with {given('reference', 'SPLIT')} (unlabelled captions of the evaluated "
                            "languages)")
        unread = sorted(set(languages) - set(self.languages))
        if unread:
            raise ValueError(f"{self.split}: the captions in {','.join(unread)} were not read")
        missing = sorted(set(languages) - self.found)
        if missing:
            raise UserError(f"{self.split}: no caption in {','.join(missing)} for the reference statistics "
                            f"({option('reference')}; the split has {','.join(sorted(self.found)) or 'none'})")
        captions, langs = [], []
        for lang in sorted(set(languages)):
            texts = self.by_language[lang]
            if max_per_lang is not None and len(texts) > max_per_lang:
                rng = np.random.default_rng(SAMPLE_SEED)
                texts = [texts[i] for i in np.sort(rng.choice(len(texts), max_per_lang, replace=False))]
            captions += texts
            langs += [lang] * len(texts)
        return ReferencePool(captions, np.array(langs), str(self.split), dataset_info(self.split)["checksum"],
                             {lang: len(self.by_language[lang]) for lang in sorted(set(languages))})


def read_captions_once(split: str | Path, languages: Sequence[str] = ()) -> ReferenceCaptions:
    """The image ids, languages and captions in ``languages`` of ``split``, in one pass over its shards (nothing is
    read when the folder holds no split)."""
    from data_prep.shards import iter_metas

    split = Path(split)
    if not (split / "manifest.json").is_file():
        return ReferenceCaptions(split, tuple(languages), None)
    by_lang: dict[str, list[str]] = {lang: [] for lang in languages}  # the captions of these languages kept
    found, images = set(), set()
    for m in iter_metas(split):
        found.add(m["lang"])
        images.add(str(m["image_id"]))
        texts = by_lang.get(m["lang"])
        if texts is not None:
            texts.append(m["caption"])
    return ReferenceCaptions(split, tuple(languages), by_lang, frozenset(found), frozenset(images))


@renamed_keywords(max_per_language="max_per_lang")
def read_reference(split: str | Path, languages: Sequence[str],
                   max_per_lang: int | None = DEFAULT_SIZE) -> ReferencePool:
    """The captions of ``split`` in ``languages``: at most ``max_per_lang`` each, a sample drawn per language
    with :data:`SAMPLE_SEED`, so that a language's captions are the same whichever other languages are read.

    One-line errors: no split at ``split``; a language of ``languages`` with no caption there (its radii and token
    statistics could not be taken), a ``max_per_lang`` that is no positive integer."""
    require_sequence(languages, "languages", "language codes")  # "en" was read as the languages 'e' and 'n'
    if max_per_lang is not None and (not is_whole(max_per_lang) or max_per_lang < 1):  # numpy's error, or no captions
        raise UserError(f"max_per_lang: expected a positive integer, got {max_per_lang!r}")
    return read_captions_once(split, languages).pool(max_per_lang)
