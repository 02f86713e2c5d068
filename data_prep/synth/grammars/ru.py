"""Russian: numeral, adjectives and noun in the case the numeral governs (no articles).

один: nominative singular (красный круг); два/две, три: genitive singular noun with the
adjective in the genitive plural for masculine/neuter nouns (два красных круга) and the
nominative plural for feminine ones (две красные звезды); несколько: genitive plural
(несколько красных кругов). Lexicon adjectives: ``"nom.m nom.f nom.n nom.pl gen.pl"``.
"""
from __future__ import annotations

import numpy as np

from ..scene import Mention
from .base import ListGrammar, Token

GENDERS = ("m", "f", "n")
NOM_PL, GEN_PL = 3, 4


class Russian(ListGrammar):
    """Russian (``ru``, no articles): the numeral governs the case of the adjectives and the noun."""

    code = "ru"

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """Numeral (none for one), size, colour, noun, in the forms the numeral governs (``case`` unused)."""
        gender, nom_sg, gen_sg, gen_pl = self.synonym("shapes", mention.shape, rng).split()
        g = GENDERS.index(gender)
        words = []
        if mention.count == 1:
            adjective_form, noun = g, nom_sg
        else:
            key = self.count_key(mention)
            numeral = self.synonym("counts", key, rng).split()  # "два две"
            words.append(self.word(numeral[1] if gender == "f" and len(numeral) > 1 else numeral[0], "counts", key))
            if mention.count is None:
                adjective_form, noun = GEN_PL, gen_pl
            else:
                adjective_form, noun = (NOM_PL if gender == "f" else GEN_PL), gen_sg
        for section, concept in (("sizes", mention.size), ("colours", mention.colour)):
            if concept:
                words.append(self.word(self.synonym(section, concept, rng).split()[adjective_form], section, concept))
        words.append(self.word(noun, "shapes", mention.shape))
        return words
