"""The :class:`TextsCut` warning: texts cut to a run's ``data.max_length`` tokens, said once a call or a command."""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

import numpy as np
from tokenizers import Tokenizer

from backretrieval.errors import BackRetrievalWarning

from .errors import Notice
from .tokenizer import encode_batch


class TextsCut(Notice, BackRetrievalWarning):
    """Texts longer than the run's ``data.max_length`` tokens were cut to it (as in training) by an encoding call:
    one warning per call, saying how many of how many; every command line prints it as one ``warning:`` line (a
    BackRetrieval warning too, for ``backretrieval ... --model globetrotter:RUN``)."""


_CUT_TALLY: ContextVar[dict[int, tuple[set[str], list[np.ndarray]]] | None] = ContextVar("texts_cut_tally",
                                                                                          default=None)
"""Inside :func:`texts_cut_once`: ``max_length -> (texts cut, hashes of the texts encoded)`` over every call: the cut
ones (few) as strings, the others as one int64 each, so a command's millions of captions are not all kept alive."""


def _cut_message(cut: int, total: int, max_length: int) -> str:
    return (f"{cut} of {total} text(s) are longer than data.max_length={max_length} tokens and were cut to it, as in "
            f"training: the tokens past it do not change their embeddings")


def warn_cut(cut: Sequence[str], texts: Sequence[str], max_length: int) -> None:
    """One :class:`TextsCut` warning for a call that cut the texts ``cut`` of its ``texts`` (none when nothing was
    cut); the same count again from the same place is shown once (Python's default filter), so a validation repeated
    through a run says it once. Inside :func:`texts_cut_once` the call is tallied instead, and said at the block's
    end. The warning points at the caller of the method that calls this one, a method wrapped by ``torch.no_grad``."""
    tally = _CUT_TALLY.get()
    if tally is not None:  # a text encoded again (in another list, by another head or model) counts once
        cut_texts, seen = tally.setdefault(max_length, (set(), []))
        cut_texts.update(cut)
        seen.append(np.unique(np.fromiter((hash(t) for t in texts), np.int64, len(texts))))
    elif cut:
        warnings.warn(_cut_message(len(cut), len(texts), max_length), TextsCut,
                      stacklevel=4)  # the caller of encode_text: past this function, the method and no_grad's wrapper


def encode_noting_cut(tokenizer: Tokenizer, texts: list[str], max_length: int,
                      cut: list[str]) -> tuple[list[list[int]], list[list[int]]]:
    """:func:`~.tokenizer.encode_batch` of ``texts``; those longer than ``max_length`` tokens appended to ``cut``."""
    at: list[int] = []
    ids, mask = encode_batch(tokenizer, texts, max_length, at)
    cut.extend(texts[i] for i in at)
    return ids, mask


@contextmanager
def texts_cut_once(tally: dict[int, tuple[set[str], list[np.ndarray]]] | None = None,
                   say: bool = True) -> Iterator[None]:
    """One command's :class:`TextsCut` notice: the encoding calls within this block (per split, language, head or
    model) are one warning at its end, ``CUT of TOTAL text(s)`` over the distinct texts encoded (a text in several
    calls counts once; one warning per ``data.max_length`` where models differ), not one per call. ``tally`` (an
    empty ``{}`` the caller keeps) counts several blocks apart in time as one, said by the one with ``say`` (the
    last): an adaptation's before and after figures."""
    tally = {} if tally is None else tally
    token = _CUT_TALLY.set(tally)
    try:
        yield
    finally:
        _CUT_TALLY.reset(token)
        for max_length, (cut, seen) in sorted(tally.items()):
            if cut and say:
                warnings.warn(_cut_message(len(cut), len(np.unique(np.concatenate(seen))), max_length), TextsCut,
                              stacklevel=3)
