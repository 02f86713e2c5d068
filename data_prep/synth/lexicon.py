"""The languages of the synthetic world and their hand-written lexicons.

Each language has ``lexicons/<code>.yaml`` (words: shapes, colours, sizes, counts,
positions, backgrounds, phrasing templates, with 1-3 synonyms each and the inflected
forms its grammar needs) and a grammar in :mod:`data_prep.synth.grammars`.

Phrases in a lexicon mark their dictionary words with brackets: ``"on the [left] side"``
says that ``left`` translates the phrase's concept (``position:left``);
``"[background|background]"`` names another concept explicitly. The brackets never
reach a caption.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

LEXICON_DIR = Path(__file__).with_name("lexicons")


@dataclass(frozen=True)
class Language:
    """A language of the synthetic world: its English name and its script."""
    name: str
    script: str


# code -> (name, script). Order is fixed: it seeds each language's caption stream.
LANGUAGES: dict[str, Language] = {
    "en": Language("English", "Latin"),
    "de": Language("German", "Latin"),
    "fr": Language("French", "Latin"),
    "es": Language("Spanish", "Latin"),
    "ru": Language("Russian", "Cyrillic"),
    "el": Language("Greek", "Greek"),
    "ja": Language("Japanese", "Japanese"),
    "zh": Language("Chinese", "Han"),
    "ar": Language("Arabic", "Arabic"),
}

# Sections every lexicon has; each maps a concept id to a list of synonyms.
SECTIONS = ("shapes", "colours", "sizes", "counts", "positions", "backgrounds")


def known_languages() -> list[str]:
    """Codes of the languages the synthetic world can write, in registry order."""
    return list(LANGUAGES)


@lru_cache(maxsize=None)
def load_lexicon(code: str) -> dict:
    """The parsed lexicon of language ``code`` (cached per process)."""
    if code not in LANGUAGES:
        raise KeyError(f"unknown language {code!r} (known: {', '.join(LANGUAGES)})")
    path = LEXICON_DIR / f"{code}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    missing = [s for s in SECTIONS + ("templates",) if s not in data]
    if missing:
        raise ValueError(f"{path}: lexicon lacks section(s) {missing}")
    return data
