"""English: determiner, size, colour, noun (``a small red circle``, ``two big blue stars``)."""
from __future__ import annotations

import numpy as np

from ..scene import Mention
from .base import ListGrammar, Token


class English(ListGrammar):
    """English (``en``): a verb before the list agrees with its first noun phrase only."""

    code = "en"

    def plural_subject(self, mentions: list[Mention]) -> bool:
        """The number of the first mention: "there is a circle and two stars"."""
        return mentions[0].plural  # "there is a circle and two stars": agrees with the first

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """``a``/``an`` or a numeral, size, colour, noun (``case`` unused)."""
        singular, plural = self.synonym("shapes", mention.shape, rng).split()
        words = []
        if mention.size:
            words.append(self.word(self.synonym("sizes", mention.size, rng), "sizes", mention.size))
        if mention.colour:
            words.append(self.word(self.synonym("colours", mention.colour, rng), "colours", mention.colour))
        words.append(self.word(plural if mention.plural else singular, "shapes", mention.shape))
        if mention.count == 1:
            determiner = Token("an" if words[0].text[0] in "aeiou" else "a")
        else:
            key = self.count_key(mention)
            determiner = self.word(self.synonym("counts", key, rng), "counts", key)
        return [determiner] + words
