"""One grammar per language of the synthetic world; :func:`get_grammar` builds it with its lexicon."""
from __future__ import annotations

from functools import lru_cache

from ..lexicon import load_lexicon
from .ar import Arabic
from .base import Caption, Grammar, Token
from .de import German
from .el import Greek
from .en import English
from .ja import Japanese
from .romance import French, Spanish
from .ru import Russian
from .zh import Chinese

GRAMMARS: dict[str, type[Grammar]] = {
    cls.code: cls for cls in (English, German, French, Spanish, Russian, Greek, Japanese, Chinese, Arabic)
}


@lru_cache(maxsize=None)
def get_grammar(code: str) -> Grammar:
    """The grammar of language ``code`` with its lexicon loaded (cached per process)."""
    return GRAMMARS[code](load_lexicon(code))


__all__ = ["Caption", "GRAMMARS", "Grammar", "Token", "get_grammar"]
