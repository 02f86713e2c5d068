"""What every language's grammar shares: tokens that remember their dictionary concept,
phrase and template expansion, list joining, capitalisation.

A grammar turns a :class:`~data_prep.synth.scene.Meaning` into a caption. It builds a
list of :class:`Token` (a word, or a run of characters in languages written without
spaces); tokens that translate a concept (``colour:red``) carry it, which is how the
ground-truth dictionaries are made from exactly the words the captions use.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..scene import Meaning, Mention

# "[word]" marks a dictionary word of the phrase's concept, "[word|concept]" of another.
MARKED = re.compile(r"\[([^\]|]+)(?:\|([^\]]+))?\]")
# "{singular|plural}" in a template agrees with the number of what follows.
AGREEMENT = re.compile(r"\{([^{}|]*)\|([^{}|]*)\}")
OBJECTS = "{objects}"
PREFIX = {"shapes": "shape", "colours": "colour", "sizes": "size", "counts": "count",
          "positions": "position", "backgrounds": "background"}


@dataclass(frozen=True)
class Token:
    """A piece of caption text; ``concept`` when it is a dictionary word; ``glue``: no separator before it."""

    text: str
    concept: str | None = None
    glue: bool = False


@dataclass(frozen=True)
class Caption:
    """A caption as a grammar writes it: its text and the dictionary words it uses."""
    text: str
    words: tuple[tuple[str, str], ...]  # (concept, word as written) of each dictionary word used


class Grammar:
    """Base class: subclasses implement :meth:`tokens` for one language."""

    code = ""
    separator = " "  # between tokens; "" for languages written without spaces
    cased = True  # capitalise the first letter of a caption
    list_comma = ","

    def __init__(self, lexicon: dict) -> None:
        self.lex = lexicon
        self.templates = [t if isinstance(t, dict) else {"text": t} for t in lexicon["templates"]]
        self.list_comma = lexicon.get("list_comma", self.list_comma)

    # -- the public face -------------------------------------------------------------
    def caption(self, meaning: Meaning, rng: np.random.Generator) -> Caption:
        """Write ``meaning`` as one caption, choosing synonyms, order and phrasing with ``rng``."""
        tokens = [t for t in self.tokens(meaning, rng) if t.text]
        if self.cased and tokens:
            first = tokens[0]
            tokens[0] = Token(first.text[:1].upper() + first.text[1:], first.concept, first.glue)
        text = "".join((t.text if (i == 0 or t.glue) else self.separator + t.text) for i, t in enumerate(tokens))
        return Caption(text, tuple((t.concept, t.text) for t in tokens if t.concept))

    def tokens(self, meaning: Meaning, rng: np.random.Generator) -> list[Token]:
        """The caption's tokens for ``meaning``, choices drawn with ``rng``: what each language's grammar writes."""
        raise NotImplementedError

    # -- helpers for subclasses -------------------------------------------------------
    @staticmethod
    def pick(rng: np.random.Generator, options: Sequence) -> Any:
        """One of ``options``, drawn uniformly with ``rng``."""
        return options[int(rng.integers(len(options)))]

    def synonym(self, section: str, concept: str, rng: np.random.Generator) -> Any:
        """One synonym (a string or mapping, as written in the lexicon) of a concept."""
        return self.pick(rng, self.lex[section][concept])

    def word(self, text: str, section: str, concept: str | int) -> Token:
        """A dictionary word ``text`` translating ``concept`` of lexicon ``section`` (``colours``, ``red``:
        ``colour:red``)."""
        return Token(text, f"{PREFIX[section]}:{concept}")

    def phrase(self, text: str, concept: str | None = None) -> list[Token]:
        """Tokens of a lexicon phrase; bracketed parts become dictionary words (see module doc)."""
        out: list[Token] = []
        pos = 0
        for match in MARKED.finditer(text):
            out += self._plain(text[pos:match.start()])
            out.append(Token(match.group(1), match.group(2) or concept))
            pos = match.end()
        return out + self._plain(text[pos:])

    def _plain(self, text: str) -> list[Token]:
        if not self.separator:
            return [Token(text)] if text else []
        return [Token(p) for p in text.split()]

    def phrase_of(self, section: str, concept: str, rng: np.random.Generator) -> list[Token]:
        """Tokens of a random synonym of ``concept`` in lexicon ``section``, its dictionary words tagged with the
        concept."""
        return self.phrase(self.synonym(section, concept, rng), f"{PREFIX[section]}:{concept}")

    def shuffled(self, meaning: Meaning, rng: np.random.Generator) -> list[Mention]:
        """The mentioned kinds in a random order (captions are not aligned across languages)."""
        return [meaning.mentions[i] for i in rng.permutation(len(meaning.mentions))]

    def join_list(self, items: list[list[Token]], conjunction: list[Token]) -> list[Token]:
        """``A``; ``A and B``; ``A, B and C`` (the comma is the language's :attr:`list_comma`)."""
        out: list[Token] = []
        for i, item in enumerate(items):
            if i and i == len(items) - 1:
                out += conjunction
            elif i:
                out.append(Token(self.list_comma, glue=True))
            out += item
        return out

    def pick_template(self, rng: np.random.Generator, **require: object) -> dict:
        """A random phrasing template (mapping with ``text`` and grammar keys, e.g. ``case``)."""
        options = [t for t in self.templates if all(t.get(k) == v for k, v in require.items())]
        return self.pick(rng, options or self.templates)

    def fill(self, template: dict, objects: list[Token], plural: bool) -> list[Token]:
        """Put ``objects`` into the template's ``{objects}`` slot; ``{sg|pl}`` agrees with ``plural``."""
        text = AGREEMENT.sub(lambda m: m.group(2 if plural else 1), template["text"])
        before, _, after = text.partition(OBJECTS)
        return self.phrase(before) + objects + self.phrase(after)


class ListGrammar(Grammar):
    """Languages whose caption is a template around a list of noun phrases, with the
    background phrase at the end (en, de, fr, es, ru, el): subclasses write :meth:`noun_phrase`.
    """

    def tokens(self, meaning: Meaning, rng: np.random.Generator) -> list[Token]:
        """A template around the list of noun phrases (each with its position), in the template's case, then the
        background."""
        template = self.pick_template(rng)
        case = template.get("case", "nom")
        mentions = self.shuffled(meaning, rng)
        items = []
        for mention in mentions:
            item = self.noun_phrase(mention, case, rng)
            if mention.position:
                item += self.phrase_of("positions", mention.position, rng)
            items.append(item)
        objects = self.join_list(items, self.phrase(self.lex["and"]))
        out = self.fill(template, objects, self.plural_subject(mentions))
        if meaning.background:
            out += self.phrase_of("backgrounds", meaning.background, rng)
        return out

    def plural_subject(self, mentions: list[Mention]) -> bool:
        """Number of a verb before the list: coordinated subjects are plural."""
        return len(mentions) > 1 or mentions[0].plural

    def noun_phrase(self, mention: Mention, case: str, rng: np.random.Generator) -> list[Token]:
        """The tokens of ``mention`` in ``case`` (``nom``, ``acc`` or ``dat``, as the template asks): what each subclass
        writes."""
        raise NotImplementedError

    def count_key(self, mention: Mention) -> str:
        """The lexicon ``counts`` key of ``mention``: its number, or ``several`` when it is unsaid."""
        return "several" if mention.count is None else str(mention.count)
