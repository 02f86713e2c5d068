"""Japanese: no spaces; size and colour before the noun; objects counted with つ.

Two sentence forms, both natural in picture descriptions:
``count_after``  左に赤い丸が一つ、青い星が二つあります  (noun が count, then the verb);
``count_before`` 二つの赤い丸と青い星の絵                (count の noun, listed with と).
A background is a leading adverbial phrase: 縞模様の背景に….
"""
from __future__ import annotations

import numpy as np

from ..scene import Meaning, Mention
from .base import Grammar, Token


class Japanese(Grammar):
    """Japanese (``ja``, no spaces, no capitals): its own :meth:`tokens`, with the count after the noun or before it."""

    code = "ja"
    separator = ""
    cased = False

    def described_noun(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """Size, colour and shape of ``mention`` (no count, no position)."""
        out: list[Token] = []
        if mention.size:
            out += self.phrase_of("sizes", mention.size, rng)
        if mention.colour:
            out += self.phrase_of("colours", mention.colour, rng)
        return out + self.phrase_of("shapes", mention.shape, rng)

    def count(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """The count phrase of ``mention``: its number, or the lexicon's ``several``."""
        key = "1" if mention.count == 1 else ("several" if mention.count is None else str(mention.count))
        return self.phrase_of("counts", key, rng)

    def count_after(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """[左に]赤い丸が一つ"""
        where = self.phrase_of("positions", mention.position, rng) + [Token("に")] if mention.position else []
        return where + self.described_noun(mention, rng) + [Token("が")] + self.count(mention, rng)

    def count_before(self, mention: Mention, rng: np.random.Generator) -> list[Token]:
        """二つの赤い丸 / 左にある赤い丸 / (一つの)赤い丸"""
        if mention.position:  # a single object: the place says enough
            return self.phrase_of("positions", mention.position, rng) + [Token("にある")] + self.described_noun(mention, rng)
        if mention.count == 1 and rng.random() < 0.5:
            return self.described_noun(mention, rng)
        return self.count(mention, rng) + [Token("の")] + self.described_noun(mention, rng)

    def tokens(self, meaning: Meaning, rng: np.random.Generator) -> list[Token]:
        """The background first, then a template of either form (``count_after``, ``count_before``) around the mentions;
        with a background, templates marked ``background: false`` are not drawn."""
        options = [t for t in self.templates if not (meaning.background and t.get("background") is False)]
        template = self.pick(rng, options)
        mentions = self.shuffled(meaning, rng)
        if template["form"] == "count_after":
            objects = self.join_list([self.count_after(m, rng) for m in mentions], [Token(self.list_comma)])
        else:
            objects = self.join_list([self.count_before(m, rng) for m in mentions], self.phrase(self.lex["and"]))
        out: list[Token] = []
        if meaning.background:
            out += self.phrase_of("backgrounds", meaning.background, rng)
            if any(m.position for m in mentions):
                out.append(Token(self.list_comma))
        return out + self.fill(template, objects, plural=False)
