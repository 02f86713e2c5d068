"""French and Spanish: article or numeral, noun, adjectives agreeing in gender and number.

French puts size adjectives before the noun and colours after it (un petit cercle rouge,
trois grandes étoiles jaunes); Spanish puts both after it, colour first (un círculo rojo
pequeño, dos estrellas amarillas grandes). Lexicon adjectives are ``"m f m.pl f.pl"`` or
one invariable word.
"""
from __future__ import annotations

import numpy as np

from ..scene import Mention
from .base import ListGrammar, Token


def agree(entry: str, feminine: bool, plural: bool) -> str:
    """The form of lexicon adjective ``entry`` (``"m f m.pl f.pl"``) for the gender and number, or its one form."""
    forms = entry.split()
    return forms[(2 if plural else 0) + (1 if feminine else 0)] if len(forms) == 4 else forms[0]


class Romance(ListGrammar):
    """What French and Spanish share (no language of its own): ``size_before_noun`` puts the size before the noun."""

    size_before_noun = False

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """Article or numeral, then noun, colour, size or size, noun, colour (``size_before_noun``); ``case`` unused."""
        gender, singular, plural = self.synonym("shapes", mention.shape, rng).split()
        feminine = gender == "f"
        key = self.count_key(mention)
        numeral = self.synonym("counts", key, rng).split()  # "un une", "deux", "varios varias"
        numeral = numeral[1] if feminine and len(numeral) > 1 else numeral[0]
        determiner = Token(numeral) if mention.count == 1 else self.word(numeral, "counts", key)
        noun = self.word(plural if mention.plural else singular, "shapes", mention.shape)
        size = colour = []
        if mention.size:
            form = agree(self.synonym("sizes", mention.size, rng), feminine, mention.plural)
            size = [self.word(form, "sizes", mention.size)]
        if mention.colour:
            form = agree(self.synonym("colours", mention.colour, rng), feminine, mention.plural)
            colour = [self.word(form, "colours", mention.colour)]
        if self.size_before_noun:
            return [determiner] + size + [noun] + colour
        return [determiner, noun] + colour + size


class French(Romance):
    """French (``fr``): the size before the noun, the colour after it (un petit cercle rouge)."""

    code = "fr"
    size_before_noun = True


class Spanish(Romance):
    """Spanish (``es``): colour then size, both after the noun (un círculo rojo pequeño)."""

    code = "es"
