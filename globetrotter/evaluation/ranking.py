"""How evaluated sentences are compared: a :class:`Ranking` (the head that embeds them, late interaction, CSLS)
and the :class:`~.scoring.SentenceScorer` that applies it, with its statistics taken from reference texts.

The score of query ``x`` (language a) and candidate ``y`` (language b) is

    cos(x, y) + W · MaxSim(x, y) − [r_b(x) + r_a(y)] / 2          (the last term with CSLS only)

``cos`` of the sentence embeddings of ``Ranking.head``; MaxSim over the model's token rows
(:mod:`.late_interaction`), weighted by ``W = Ranking.maxsim``; ``r_b(x)`` the mean of x's ``csls_k`` highest
scores (cosine + W · MaxSim) among the reference texts of language b (CSLS of the pair's two languages, Conneau
et al. 2018; :func:`backretrieval.hubness.neighbourhood_radii`). MaxSim's idf and token hubness come from the same
reference texts. With a :class:`~.reference.ReferencePool` (inductive, the default) a pair's score depends on the
two sentences, the model and the pool only; without one (transductive) every statistic is taken from the evaluated
sentences themselves, each a neighbour of the others but not of itself.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Real
from pathlib import Path
from typing import Any

from backretrieval.files import is_whole

from globetrotter.errors import UserError

from .tfidf import TfidfEncoder, is_tfidf_spec

HEADS = ("text", "cross")


@dataclass(frozen=True)
class Ranking:
    """``head``: the head embedding the sentences (``text``: the text-text head; ``cross``: the cross-modal one);
    ``maxsim``: the weight W of late interaction (0: off); ``csls``: CSLS per language pair with ``csls_k``
    neighbours."""

    head: str = "text"
    maxsim: float = 0.0
    csls: bool = False
    csls_k: int = 10

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise UserError(f"ranking head {self.head!r}: expected one of {', '.join(HEADS)}")
        if not isinstance(self.maxsim, Real) or isinstance(self.maxsim, bool) or not 0 <= self.maxsim < float("inf"):
            raise UserError(f"ranking maxsim {self.maxsim!r}: expected a weight >= 0")  # "1" was TypeError: '<='
        if not isinstance(self.csls, bool):  # "no" was read as true
            raise UserError(f"ranking csls {self.csls!r}: expected True or False")
        if not is_whole(self.csls_k) or self.csls_k < 1:  # 2.5 was numpy's 'Partition index must be integer'
            raise UserError(f"ranking csls_k {self.csls_k!r}: expected a number of neighbours >= 1")

    @property
    def label(self) -> str:
        """Short name for tables: ``cosine``, ``csls``, ``maxsim 4 + csls``, ... and the head when not ``text``."""
        parts = ([f"maxsim {self.maxsim:g}"] if self.maxsim else []) + (["csls"] if self.csls else [])
        name = " + ".join(parts) or "cosine"
        return name if self.head == "text" else f"{name} ({self.head} head)"

    @property
    def needs_statistics(self) -> bool:
        """Whether the scores use corpus statistics (and so a reference pool)."""
        return self.csls or self.maxsim > 0

    def to_dict(self) -> dict:
        """The ranking's fields as a dict: the form :meth:`from_dict` reads."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str = "ranking record") -> "Ranking":
        """A ranking from its record (the ``chosen`` entry of ``eval.py select``'s JSON); a field of the wrong type
        or value is a one-line error naming ``source``."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: the ranking is {type(data).__name__}, expected an object of head, maxsim, "
                            f"csls, csls_k")
        unknown = sorted(set(data) - {"head", "maxsim", "csls", "csls_k"})
        if unknown:
            raise UserError(f"{source}: unknown ranking keys {unknown} (expected head, maxsim, csls, csls_k)")
        types = {"head": (str,), "maxsim": (int, float), "csls": (bool,), "csls_k": (int,)}
        for key, value in data.items():  # bool is an int: refused where a number is expected
            if not isinstance(value, types[key]) or (key != "csls" and isinstance(value, bool)):
                raise UserError(f"{source}: ranking {key} {value!r} is {type(value).__name__}, expected "
                                f"{' or '.join(t.__name__ for t in types[key])}")
        try:
            return cls(**data)
        except UserError as err:  # a value out of range: named with the record it is in
            raise UserError(f"{source}: {err}") from None


def needs_statistics(encoder: Any, ranking: Ranking) -> bool:
    """Whether scoring with ``encoder`` (loaded, or a model spec not loaded yet) under ``ranking`` reads corpus
    statistics (the TF-IDF baseline's idf, CSLS's radii, MaxSim's idf and hubness), and so a reference pool or the
    transductive form."""
    if isinstance(encoder, (str, Path)):
        return ranking.needs_statistics or is_tfidf_spec(str(encoder))
    return ranking.needs_statistics or isinstance(encoder, TfidfEncoder)
