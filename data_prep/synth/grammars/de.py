"""German: article or numeral, declined adjectives, noun, in the case the template asks for.

Singular after ``ein``: mixed declension (ein kleiner roter Kreis / einen kleinen roten
Kreis / einem kleinen roten Kreis); plural after zwei, drei, mehrere, einige: strong
declension (zwei rote Kreise / mit zwei roten Kreisen).
"""
from __future__ import annotations

import numpy as np

from ..scene import Mention
from .base import ListGrammar, Token

GENDERS = ("m", "f", "n")
ARTICLE = {"nom": ("ein", "eine", "ein"), "acc": ("einen", "eine", "ein"), "dat": ("einem", "einer", "einem")}
MIXED_ENDING = {"nom": ("er", "e", "es"), "acc": ("en", "e", "es"), "dat": ("en", "en", "en")}
STRONG_PLURAL_ENDING = {"nom": "e", "acc": "e", "dat": "en"}


def dative_plural(plural: str) -> str:
    """Dative plural adds -n unless the plural already ends in -n or -s (Kreise -> Kreisen)."""
    return plural if plural.endswith(("n", "s")) else plural + "n"


class German(ListGrammar):
    """German (``de``): article or numeral, adjectives and noun declined in the case the template asks for."""

    code = "de"

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """``ein`` with mixed declension (singular) or a numeral with strong declension (plural), size, colour, noun, in
        ``case``."""
        gender, singular, plural, *dative_singular = self.synonym("shapes", mention.shape, rng).split()
        g = GENDERS.index(gender)
        if mention.plural:
            noun = dative_plural(plural) if case == "dat" else plural
            ending = STRONG_PLURAL_ENDING[case]
            key = self.count_key(mention)
            numeral = self.synonym("counts", key, rng)
            if mention.count is None and case == "dat":
                numeral += "n"  # mehrere -> mehreren, einige -> einigen
            determiner = self.word(numeral, "counts", key)
        else:
            noun = dative_singular[0] if case == "dat" and dative_singular else singular
            ending = MIXED_ENDING[case][g]
            determiner = Token(ARTICLE[case][g])
        words = [determiner]
        if mention.size:
            words.append(self.word(self.synonym("sizes", mention.size, rng) + ending, "sizes", mention.size))
        if mention.colour:
            words.append(self.word(self.synonym("colours", mention.colour, rng) + ending, "colours", mention.colour))
        words.append(self.word(noun, "shapes", mention.shape))
        return words
