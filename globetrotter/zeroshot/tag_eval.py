"""Multilingual image tagging measured: ground truth from held-out captions, Precision@K, a frequency baseline.

XTD10 (section 3.3.2) shows tagging by examples only. To measure it, an image's true tags in a
language are the content words that most of its captions in that language share: a word is a
tag of image ``i`` when at least ``min_share`` of ``i``'s captions in the language contain it
(with one caption, every content word of it). Content words are the caption's lower-cased
words minus the language's stop words (spaCy's lists, which need no model and keep nouns such as
"man" that broader lists drop); Chinese is segmented into words by ``jieba``. Both are optional
(``pip install "globetrotter[tagging-eval]"``), imported only here.

A tagger is judged by Precision@K: the share of its first K tags that are true tags of the image,
averaged over the images that have at least one true tag. The frequency baseline tags every image
with the K most frequent content words of the training captions.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from backretrieval.errors import said
from backretrieval.uncertainty import bootstrap_means, percentile_interval
from data_prep.errors import install_hint
from globetrotter.errors import UserError

if TYPE_CHECKING:
    from .data import SplitFeatures

_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
SEGMENTED = ("zh", "ja")  # languages written without spaces: segmented by jieba (zh)


@lru_cache(maxsize=None)
def stop_words(lang: str) -> frozenset[str]:
    """The stop words of ``lang`` (ISO 639-1): spaCy's list for the language (no model needed); one-line error
    without spaCy or a list."""
    import importlib

    try:
        module = importlib.import_module(f"spacy.lang.{lang}.stop_words")
    except ImportError as err:
        if getattr(err, "name", "") in ("spacy", "spacy.lang"):
            raise UserError(f"tagging truth needs spaCy's stop-word lists: {install_hint('tagging-eval')}") from None
        raise UserError(f"spaCy has no stop-word list for language {lang!r}; leave it out of "
                        f"{said('--languages', 'the languages given (lang, langs)')}") from None
    return frozenset(w.lower() for w in module.STOP_WORDS)


def _segment(text: str, lang: str) -> list[str]:
    if lang not in SEGMENTED:
        return _WORD.findall(text)
    if lang != "zh":
        raise UserError(f"no word segmenter for {lang!r} (jieba segments zh); leave it out of "
                        f"{said('--languages', 'the languages given (lang, langs)')}")
    try:
        import jieba
    except ImportError:
        raise UserError(f"Chinese tagging truth needs jieba: {install_hint('tagging-eval')}") from None
    jieba.setLogLevel(60)
    return [w for w in jieba.lcut(text) if _WORD.fullmatch(w)]


def content_words(text: str, lang: str) -> list[str]:
    """The lower-cased words of ``text`` that are not stop words of ``lang``, in order, each once; a word of one
    letter ("T shirt") is dropped too, except in the :data:`SEGMENTED` languages, where one character is a word."""
    stops = stop_words(lang)
    min_len = 1 if lang in SEGMENTED else 2
    words = (w.lower() for w in _segment(text, lang))
    return list(dict.fromkeys(w for w in words if len(w) >= min_len and w not in stops))


def image_tag_truth(
    captions: Iterable[str], image_of: Iterable[int], lang: str, min_share: float = 0.5
) -> dict[int, set[str]]:
    """True tags per image: the content words in at least ``min_share`` of the image's captions in ``lang``.

    ``captions`` and ``image_of`` are row-aligned (caption text, its image). Images whose captions share
    no content word get an empty set."""
    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share must be in (0, 1], got {min_share}")
    counts: dict[int, Counter] = {}
    n_captions: Counter = Counter()
    for text, image in zip(captions, image_of):
        counts.setdefault(int(image), Counter()).update(content_words(text, lang))
        n_captions[int(image)] += 1
    return {image: {w for w, c in words.items() if c >= min_share * n_captions[image]}
            for image, words in counts.items()}


def frequent_words(captions: Iterable[str], lang: str, size: int) -> list[str]:
    """The ``size`` content words of ``lang`` in the most captions, most frequent first (ties: first seen)."""
    counts: Counter = Counter()
    for text in captions:
        counts.update(content_words(text, lang))
    return [w for w, _ in counts.most_common(size)]


def precision_at_k(predicted: Sequence[Sequence[str]], truth: Sequence[set[str]], k: int = 5) -> dict:
    """Precision@``k`` of row-aligned predictions against true tag sets, over the rows with a true tag.

    A row with fewer than ``k`` predictions counts the missing ones as wrong. Returns ``precision@k``,
    ``n_images`` (rows scored) and ``per_image`` (the scored rows' precisions, for bootstrap intervals)."""
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions but {len(truth)} truth sets")
    scores = np.array([len(set(list(p)[:k]) & t) / k for p, t in zip(predicted, truth) if t], dtype=np.float64)
    if not len(scores):
        raise UserError("no image has a true tag: cannot measure tagging precision")
    return {f"precision@{k}": float(scores.mean()), "n_images": int(len(scores)), "per_image": scores}


def precision_summary(per_image: np.ndarray, k: int, n_boot: int = 1000, seed: int = 0) -> dict[str, float]:
    """Precision@``k`` with its bootstrap interval over images: ``{"value", "lo", "hi", "se"}``."""
    reps = bootstrap_means(per_image, n_boot, seed)
    lo, hi = percentile_interval(reps)
    return {"value": float(np.mean(per_image)), "lo": lo, "hi": hi, "se": float(reps.std(ddof=1))}


def evaluate_tagging(
    split: SplitFeatures,
    langs: Sequence[str],
    vocabularies: Mapping[str, Sequence[str]],
    taggers: Mapping[str, Callable[[torch.Tensor, str], list[list[str]]]],
    k: int = 5,
    min_share: float = 0.5,
    n_boot: int = 1000,
) -> dict:
    """Precision@``k`` of each tagger and of the frequency baseline in each language of ``split``.

    ``taggers[name](image_features, lang) -> [[tag, ...] per image]`` (e.g. :func:`caption_transfer_tags` or the
    XTD10 eq. 5 tagger, with their adapter bound). ``vocabularies[lang]`` lists the candidate tags, most frequent
    first (:func:`frequent_words` of training captions): its first ``k`` are the baseline's tags for every image.
    The truth of an image in a language is :func:`image_tag_truth` of its captions there; images without a
    caption or true tag in a language are not scored in it. Returns ``{lang: {name: interval, ..., "frequency":
    interval, "n_images": n, "truth_words": mean true tags per scored image}}`` (intervals as
    :func:`precision_summary`).
    """
    missing = [lang for lang in langs if lang not in vocabularies]
    if missing:
        raise UserError(f"no tag vocabulary for {missing}")
    features = torch.from_numpy(split.image_features)
    out: dict = {}
    for lang in langs:
        rows = split.rows(lang)
        if not len(rows):
            raise UserError(f"no captions in {lang!r} to build its tag truth (languages: {sorted(set(split.langs))})")
        truth = image_tag_truth((split.texts[i] for i in rows), split.caption_image[rows], lang, min_share)
        images = sorted(i for i, tags in truth.items() if tags)
        gold = [truth[i] for i in images]
        scores: dict = {}
        for name, tagger in taggers.items():
            tags = tagger(features[images], lang)
            scores[name] = precision_summary(precision_at_k(tags, gold, k)["per_image"], k, n_boot)
        baseline = precision_at_k([list(vocabularies[lang][:k])] * len(images), gold, k)
        out[lang] = {**scores, "frequency": precision_summary(baseline["per_image"], k, n_boot),
                     "n_images": len(images), "truth_words": float(np.mean([len(g) for g in gold]))}
    return out
