"""Chinese: no spaces; numeral + classifier 个, colour (的), size, noun: 两个红色的大圆形.

Without positions a caption is a template around the list (图中有一个红色的圆形和两个星星);
objects with a position become clauses (左边有一个红色的圆形，还有两个蓝色的星星).
A background leads: 在条纹背景上有….
"""
from __future__ import annotations

import numpy as np

from ..scene import Meaning, Mention
from .base import Grammar, Token


class Chinese(Grammar):
    """Chinese (``zh``, no spaces, no capitals): its own :meth:`tokens`, one clause per object with a position."""

    code = "zh"
    separator = ""
    cased = False

    def noun_phrase(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """Numeral with its classifier, colour, size, noun (the position is written by :meth:`tokens`)."""
        key = "1" if mention.count == 1 else ("several" if mention.count is None else str(mention.count))
        out = self.phrase_of("counts", key, rng)
        if mention.colour:
            out += self.phrase_of("colours", mention.colour, rng)
        if mention.size:
            out += self.phrase_of("sizes", mention.size, rng)
        return out + self.phrase_of("shapes", mention.shape, rng)

    def listing(self, mentions: list[Mention], rng: np.random.Generator) -> list[Token]:
        """The noun phrases of ``mentions`` joined as a list with the lexicon's ``and``."""
        return self.join_list([self.noun_phrase(m, rng) for m in mentions], self.phrase(self.lex["and"]))

    def tokens(self, meaning: Meaning, rng: np.random.Generator) -> list[Token]:
        """Without positions, a template around the list (with a background: the background, 有, the list); with them, a
        有 clause per placed object, the rest after ``also``, the background first."""
        mentions = self.shuffled(meaning, rng)
        placed = [(m, m.position) for m in mentions if m.position]
        rest = [m for m in mentions if not m.position]
        exist = Token(self.lex["exist"])
        background = self.phrase_of("backgrounds", meaning.background, rng) if meaning.background else []
        if not placed:
            if background:
                return background + [exist] + self.listing(rest, rng)
            return self.fill(self.pick_template(rng), self.listing(rest, rng), plural=False)
        clauses = [self.phrase_of("positions", position, rng) + [exist] + self.noun_phrase(m, rng)
                   for m, position in placed]
        if rest:
            clauses.append(self.phrase(self.lex["also"]) + self.listing(rest, rng))
        out: list[Token] = []
        for i, clause in enumerate(clauses):
            out += ([Token(self.lex["clause_comma"])] if i else []) + clause
        if background:
            return background + [Token(self.lex["clause_comma"])] + out
        return out
