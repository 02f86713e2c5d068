"""Arabic: noun first, adjectives after it agreeing in gender and number (all nominative).

One object: singular (دائرة حمراء كبيرة); two: the dual, adjectives in the dual
(دائرتان حمراوان); three: the numeral of the gender opposite to the singular's, the noun
in the plural (ثلاث دوائر, ثلاثة مربعات); several: عدة + plural. Non-human plurals take
feminine singular adjectives (دوائر حمراء). The conjunction و is joined to the next word.
Lexicon nouns: ``"gender singular dual plural"``; adjectives ``"m f m.dual f.dual"``.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..scene import Meaning, Mention
from .base import Grammar, Token

MASCULINE, FEMININE, DUAL_M, DUAL_F = range(4)


class Arabic(Grammar):
    """Arabic (``ar``, no capitals): its own :meth:`tokens` (no list template); و glued to the noun phrase after it."""

    code = "ar"
    cased = False

    def noun_phrase(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """Numeral (none for one or two: singular, dual), noun, its agreeing adjectives in either order, position."""
        gender, singular, dual, plural = self.synonym("shapes", mention.shape, rng).split()
        feminine = gender == "f"
        numeral: list[Token] = []
        if mention.count == 1:
            noun, slot = singular, (FEMININE if feminine else MASCULINE)
        elif mention.count == 2:
            noun, slot = dual, (DUAL_F if feminine else DUAL_M)
        else:
            noun, slot = plural, FEMININE  # non-human plural: feminine singular agreement
            key = "several" if mention.count is None else str(mention.count)
            forms = self.synonym("counts", key, rng).split()  # "ثلاثة ثلاث": opposite gender
            numeral = [self.word(forms[1] if feminine and len(forms) > 1 else forms[0], "counts", key)]
        adjectives = [self.word(self.synonym(section, concept, rng).split()[slot], section, concept)
                      for section, concept in (("colours", mention.colour), ("sizes", mention.size)) if concept]
        if rng.random() < 0.5:
            adjectives.reverse()  # colour and size may come in either order
        out = numeral + [self.word(noun, "shapes", mention.shape)] + adjectives
        if mention.position:
            out += self.phrase_of("positions", mention.position, rng)
        return out

    def tokens(self, meaning: Meaning, rng: np.random.Generator) -> list[Token]:
        """A template around the mentions' noun phrases, each after the first led by و, then the background."""
        objects: list[Token] = []
        for i, mention in enumerate(self.shuffled(meaning, rng)):
            item = self.noun_phrase(mention, rng)
            if i:
                objects += [Token(self.lex["and"])] + [replace(item[0], glue=True)] + item[1:]
            else:
                objects += item
        out = self.fill(self.pick_template(rng), objects, plural=False)
        if meaning.background:
            out += self.phrase_of("backgrounds", meaning.background, rng)
        return out
