"""Greek: article or numeral, adjectives and noun agreeing in gender, number and case.

ένας μικρός κόκκινος κύκλος / μια εικόνα με έναν μικρό κόκκινο κύκλο / τρία κόκκινα
τρίγωνα. Lexicon adjectives: ``"m f n m.pl f.pl n.pl m.acc m.acc.pl"`` or one invariable
word (μπλε); nouns: ``"gender nom.sg nom.pl [acc.sg acc.pl]"``; numerals ``"m f n m.acc"``.
"""
from __future__ import annotations

import numpy as np

from ..scene import Mention
from .base import ListGrammar, Token

GENDERS = ("m", "f", "n")


def adjective_slot(g: int, plural: bool, accusative: bool) -> int:
    """Index into the 8 lexicon forms; feminine and neuter accusatives equal the nominative."""
    if accusative and g == 0:
        return 7 if plural else 6
    return g + (3 if plural else 0)


class Greek(ListGrammar):
    """Greek (``el``): article or numeral, adjectives and noun agreeing in gender, number and case."""

    code = "el"

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """Numeral (the article for one), size, colour, noun, agreeing in gender, number and ``case`` (``acc``, else
        nominative)."""
        gender, nom_sg, nom_pl, *acc = self.synonym("shapes", mention.shape, rng).split()
        g = GENDERS.index(gender)
        accusative = case == "acc"
        plural = mention.plural
        noun = (acc[1] if plural else acc[0]) if accusative and acc else (nom_pl if plural else nom_sg)
        key = self.count_key(mention)
        numeral = self.synonym("counts", key, rng).split()
        numeral = numeral[min(3 if accusative and g == 0 else g, len(numeral) - 1)]
        words = [Token(numeral) if mention.count == 1 else self.word(numeral, "counts", key)]
        for section, concept in (("sizes", mention.size), ("colours", mention.colour)):
            if concept:
                forms = self.synonym(section, concept, rng).split()
                form = forms[adjective_slot(g, plural, accusative)] if len(forms) == 8 else forms[0]
                words.append(self.word(form, section, concept))
        words.append(self.word(noun, "shapes", mention.shape))
        return words
