"""The :class:`ScoringContext` every ranking of a set of sentences shares, and the :class:`SentenceScorer` of one."""
from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from backretrieval.errors import given, option, said
from backretrieval.hubness import neighbourhood_radii
from globetrotter.errors import UserError

from .late_interaction import LateInteraction, SentenceTokens, maxsim_group_starts
from .models import encode_texts_by_head
from .ranking import Ranking, needs_statistics
from .reference import ReferencePool
from .sentence import cosine_scores
from .tfidf import TfidfEncoder

SCORE_BLOCK = 1 << 22
"""Scores per block of :meth:`ScoringContext.row_blocks` (16 MiB of float32): its rows are at least this over N."""


class ScoringContext:
    """What every ranking of one set of sentences shares, computed once: the sentences' embeddings per head, the
    reference texts' embeddings, and the raw MaxSim matrices (which do not depend on the head or on W).

    ``reference`` None: transductive (every statistic from the sentences themselves). The reference may hold
    languages the sentences are not in: its idf counts them, CSLS's radii do not. The TF-IDF baseline's idf is
    fitted here, on the reference texts (or the sentences, transductive). ``queries`` = Q: a retrieval, the first Q
    sentences the queries, the others the candidates; a scorer then scores queries against candidates only, so
    MaxSim is computed for the query rows alone and each CSLS radius only in the languages it is read in (a query's
    among the candidates' languages, a candidate's among the queries'); it needs a ``reference`` (a transductive
    context with ``queries``, or Q outside 1 to N - 1, is a ``ValueError``). Default: every sentence against every
    sentence."""

    def __init__(self, encoder: Any, captions: Sequence[str], langs: Sequence[str] | np.ndarray,
                 reference: ReferencePool | None, batch_size: int = 256, *, queries: int | None = None) -> None:
        self.encoder, self.captions, self.batch_size = encoder, list(captions), batch_size
        self.retrieval = queries is not None
        self.queries = len(self.captions) if queries is None else queries
        if self.retrieval and reference is None:
            raise ValueError("a transductive context reads every sentence's MaxSim for its statistics: no queries=")
        if self.retrieval and not 0 < self.queries < len(self.captions):
            raise ValueError(f"queries={queries}: expected 1 to {len(self.captions) - 1} of {len(self.captions)} "
                             f"sentences (the rest are the candidates)")
        self.langs = np.asarray(langs).astype(str)
        self.reference = reference
        self.languages, self.lang_idx = np.unique(self.langs, return_inverse=True)
        if reference is not None:
            # each pool caption's language as a code of the sentences' languages, -1 for another: CSLS radii are
            # taken among the sentences' languages only; a pool may hold more (a translation's two languages are
            # scored with the idf of the whole pool its ranking was chosen with)
            pool_langs = np.asarray(reference.langs).astype(str)
            code = np.searchsorted(self.languages, pool_langs).clip(max=len(self.languages) - 1)
            self.pool_code = np.where(self.languages[code] == pool_langs, code, -1)
        self._statistics: dict = {}  # what depends on the reference texts only: shared by with_sentences
        self._maxsim_tail: tuple[int, np.ndarray] | None = None  # :meth:`maxsim_rows`' last product, for the next chunk
        self._embeddings: dict = {}
        if isinstance(encoder, TfidfEncoder):
            encoder.fit(self.captions if reference is None else reference.captions)

    def with_sentences(self, captions: Sequence[str], langs: Sequence[str] | np.ndarray, *,
                       queries: int | None = None) -> "ScoringContext":
        """A context of other sentences scored with this one's reference statistics (the pool's embeddings, MaxSim's
        idf and hubness), computed once for both: a translation's queries and candidates, a few at a time."""
        if self.reference is None:
            raise ValueError("a transductive context's statistics are its own sentences'; it shares none")
        other = ScoringContext(self.encoder, captions, langs, self.reference, self.batch_size, queries=queries)
        other._statistics = self._statistics
        return other

    @property
    def statistics(self) -> str:
        """Where statistics come from: ``inductive`` (the reference pool) or ``transductive`` (the sentences)."""
        return "transductive" if self.reference is None else "inductive"

    def embeddings(self, head: str) -> np.ndarray | sp.csr_matrix:
        """The sentences' embeddings by ``head``, computed once (kept by the context, not a class-wide cache: a
        translation makes a context per chunk of queries)."""
        self.encode((head,))
        return self._embeddings[head]

    def reference_embeddings(self, head: str) -> np.ndarray | sp.csr_matrix:
        """The reference texts' embeddings by ``head``, computed once; with no reference, the sentences' own
        (:meth:`embeddings`)."""
        if self.reference is None:
            return self.embeddings(head)
        self.encode((), (head,))
        return self._statistics[("embeddings", head)]

    def encode(self, heads: Sequence[str], reference_heads: Sequence[str] = ()) -> None:
        """Embed the sentences by each of ``heads`` and the reference texts by each of ``reference_heads`` (the
        sentences' own with no reference) that are not embedded yet, each set of texts in one pass of the encoder
        for all its heads (:func:`~.models.encode_texts_by_head`): candidates of several heads encode each text
        once."""
        if self.reference is None:
            heads, reference_heads = [*heads, *reference_heads], ()
        missing = [h for h in dict.fromkeys(heads) if h not in self._embeddings]
        if missing:
            self._embeddings.update(encode_texts_by_head(self.encoder, self.captions, self.langs, missing,
                                                         self.batch_size))
        missing = [h for h in dict.fromkeys(reference_heads) if ("embeddings", h) not in self._statistics]
        if missing and self.reference is not None:  # without one, its heads were the sentences' above
            found = encode_texts_by_head(self.encoder, self.reference.captions, self.reference.langs, missing,
                                         self.batch_size)
            self._statistics.update({("embeddings", h): emb for h, emb in found.items()})

    @property
    def late(self) -> LateInteraction:
        """Token statistics (idf, per-language hubness) of the reference texts, at weight 1."""
        if "late" not in self._statistics:
            self._statistics["late"] = self._late_interaction()
        return self._statistics["late"]

    def _late_interaction(self) -> LateInteraction:
        if not hasattr(self.encoder, "token_table"):
            raise UserError(f"{option('maxsim')} scores a trained model's token rows; this model has none "
                            "(the TF-IDF and ridge baselines embed whole captions)")
        texts, langs = ((self.captions, self.langs) if self.reference is None
                        else (self.reference.captions, self.reference.langs))
        source = "evaluated sentences (transductive)" if self.reference is None else self.reference.source
        try:
            return LateInteraction(self.encoder, 1.0, texts, languages=langs, source=source)
        except ValueError as err:
            raise UserError(f"{option('maxsim')}: {err} (the reference captions, {source}); give a reference split "
                            f"with more captions in it ({option('reference')}), or rank without MaxSim "
                            f"({given('maxsim', 0)})") from None

    @cached_property
    def maxsim_self(self) -> np.ndarray:
        """``[Q, N]`` MaxSim of the ``queries`` first sentences (default: all) against every sentence, held by the
        context: read by the transductive CSLS radii (which take every row) and then by the scores; a scorer reads
        :meth:`maxsim_rows` otherwise."""
        mine = self._sentence_bags
        return self.late.scorer(mine, mine)(np.arange(self.queries))

    def maxsim_rows(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), N]`` rows ``rows`` of :attr:`maxsim_self`, bit for bit, without it unless it is held: the
        sentences from the MaxSim product that holds the first of ``rows`` to the end of the one that holds the last
        (:func:`~.late_interaction.maxsim_group_starts`) are computed, the same products the whole makes. A
        :meth:`row_blocks` range is computed alone; of chunks of consecutive rows cut elsewhere, read in order
        (``eval.py sentence``: 1,024 at a time), the product a chunk ends in is kept for the next one."""
        if "maxsim_self" in self.__dict__:
            return self.maxsim_self[rows]
        rows = np.asarray(rows, dtype=np.int64)
        mine = self._sentence_bags
        if not len(rows):
            return self.late.scorer(mine, mine)(rows)
        starts = self._maxsim_starts
        before = np.searchsorted(starts, rows.min(), side="right") - 1  # the product holding the first row
        lo = int(starts[before]) if before >= 0 else 0  # rows before the first product hold no token
        after = np.searchsorted(starts, rows.max(), side="right")  # the next product's start, or the end
        hi = int(starts[after]) if after < len(starts) else self.queries
        kept, self._maxsim_tail = self._maxsim_tail, None
        if kept is not None and kept[0] == lo and lo + len(kept[1]) <= hi:  # the product the last chunk ended in
            block = np.concatenate([kept[1], self.late.scorer(mine, mine)(np.arange(lo + len(kept[1]), hi))])
        else:
            block = self.late.scorer(mine, mine)(np.arange(lo, hi))
        last = int(starts[after - 1]) if after > 0 else 0  # the product holding the last row
        if hi > rows.max() + 1 and last >= lo:  # it runs past the rows: the next chunk starts in it
            self._maxsim_tail = (last, block[last - lo:].copy())
        return block[rows - lo]

    @cached_property
    def _maxsim_starts(self) -> np.ndarray:
        """The sentences at which :attr:`maxsim_self` starts a product."""
        mine = self._sentence_bags
        return maxsim_group_starts(mine, mine, self.queries)

    def row_blocks(self, maxsim: bool, block: int = SCORE_BLOCK) -> list[np.ndarray]:
        """The ``queries`` first sentences (default: all) in ranges of consecutive rows, each at least ``block`` / N
        rows and 256 (one range when there are fewer than twice that), for a caller that scores them a block at a
        time rather than as one ``[Q, N]`` matrix (``eval.py select``: every ranking's scores, and MaxSim's once
        for all of them). With ``maxsim``, ranges end only where MaxSim starts a product
        (:func:`~.late_interaction.maxsim_group_starts`), so that :meth:`maxsim_rows` of each range is
        :attr:`maxsim_self`'s rows. A range's cosines are one product of its rows: the whole matrix's rows where BLAS
        rounds a product's entries alike whatever its number of rows (as it does for hundreds of rows, not for one or
        two); below twice ``least`` sentences (about 2,900 at the default block) the one range is the whole matrix."""
        q = self.queries
        least = max(256, block // max(1, len(self.captions)))
        cuts = self._maxsim_starts if maxsim else np.arange(q)
        edges, last = [0], 0
        for cut in cuts.tolist():
            if cut - last >= least and q - cut >= least:
                edges.append(cut)
                last = cut
        edges.append(q)
        return [np.arange(lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]

    @cached_property
    def radius_parts(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(rows, languages, among)``: the CSLS radii of sentences ``rows`` are read in ``languages`` (codes into
        ``languages``), among the pool rows ``among`` (the reference texts in those languages): every sentence in
        every language, or in a retrieval the queries in the candidates' languages and the candidates in the queries'.
        A language without reference texts is a :class:`UserError`."""
        n = len(self.captions)
        if self.retrieval:
            queries, candidates = np.arange(self.queries), np.arange(self.queries, n)
            parts = [(queries, np.unique(self.lang_idx[candidates])), (candidates, np.unique(self.lang_idx[queries]))]
        else:
            parts = [(np.arange(n), np.arange(len(self.languages)))]
        missing = sorted(set(self.languages[np.concatenate([codes for _, codes in parts])]) -
                         set(self.languages[np.unique(self.pool_code[self.pool_code >= 0])]))
        if missing:
            raise UserError(f"{_csls()}: no reference text in {', '.join(missing)} to take CSLS radii among")
        return [(rows, codes, np.flatnonzero(np.isin(self.pool_code, codes))) for rows, codes in parts]

    @cached_property
    def maxsim_reference(self) -> list[np.ndarray]:
        """Per radius part (:attr:`radius_parts`), ``[rows, among]`` MaxSim of its sentences against its pool rows,
        computed once for every ranking; the pool's bags are built once per set of languages and shared with
        :meth:`with_sentences`' contexts."""
        if self.reference is None:
            raise ValueError("a transductive context takes its CSLS radii among its own sentences, not a pool")
        late, tables = self.late, []
        for rows, codes, among in self.radius_parts:
            if len(among) == len(self.reference):
                pool = late.reference_bags
            else:
                key = ("bags",) + tuple(self.languages[codes])
                if key not in self._statistics:
                    self._statistics[key] = late.bags([self.reference.captions[i] for i in among],
                                                      np.asarray(self.reference.langs)[among])
                pool = self._statistics[key]
            tables.append(late.scorer(self._sentence_bags, pool)(rows))
        return tables

    @cached_property
    def _sentence_bags(self) -> SentenceTokens:
        late = self.late
        return late.reference_bags if self.reference is None else late.bags(self.captions, self.langs)

    def scorer(self, ranking: Ranking) -> "SentenceScorer":
        """A :class:`SentenceScorer` of these sentences under ``ranking``."""
        return SentenceScorer(self, ranking)


def _csls() -> str:
    """How a message names a CSLS ranking: ``--retrieval csls`` on the command line, ``csls=True`` in Python."""
    return said("--retrieval csls", "csls=True")


class SentenceScorer:
    """``scorer(rows) -> [len(rows), N]`` scores of sentences ``rows`` against every sentence under ``ranking``
    (:mod:`.ranking`), or in a retrieval context (``queries=``) of queries ``rows`` against the candidates,
    ``[len(rows), N - Q]``; ``matrix()`` all of them; ``record`` what a result says of the scoring."""

    def __init__(self, context: ScoringContext, ranking: Ranking) -> None:
        self.context, self.ranking = context, ranking
        self.emb = context.embeddings(ranking.head)
        self._cos = cosine_scores(self.emb)
        self.columns = slice(context.queries if context.retrieval else 0, None)  # the candidates
        self.radii = self._radii() if ranking.csls else None

    def _radii(self) -> np.ndarray:
        """``[N, languages]`` each sentence's CSLS radius among each language's pool rows (NaN where never read)."""
        c, r = self.context, self.ranking
        if c.reference is None:
            self._require_neighbours(c.lang_idx, np.arange(len(c.languages)))
        else:
            for _, codes, among in c.radius_parts:
                self._require_neighbours(c.pool_code[among], codes)
        try:
            if c.reference is None:
                extra = (lambda rows: r.maxsim * c.maxsim_self[rows]) if r.maxsim else None  # noqa: E731
                return neighbourhood_radii(self.emb, self.emb, r.csls_k, pool_groups=c.lang_idx, extra=extra,
                                           exclude=np.arange(len(c.captions)))
            radii = np.full((len(c.captions), len(c.languages)), np.nan, dtype=np.float32)
            pool_emb = c.reference_embeddings(r.head)
            for part, (rows, codes, among) in enumerate(c.radius_parts):
                table = c.maxsim_reference[part] if r.maxsim else None
                extra = (lambda block: r.maxsim * table[block]) if table is not None else None  # noqa: E731
                groups = np.searchsorted(codes, c.pool_code[among])  # 0..len(codes) - 1
                radii[np.ix_(rows, codes)] = neighbourhood_radii(self.emb[rows], pool_emb[among], r.csls_k,
                                                                 pool_groups=groups, extra=extra)
            return radii
        except ValueError as err:
            raise UserError(f"{_csls()}: {err} (fewer reference texts than {option('csls_k')} in a "
                            "language)") from None

    def _require_neighbours(self, pool_codes: np.ndarray, codes: np.ndarray) -> None:
        """A one-line error naming the first language of ``codes`` (into the context's languages) whose rows among
        ``pool_codes`` (each pool row's language code) are fewer than ``csls_k``: the reference captions in it, or,
        transductive, the evaluated sentences in it other than the query itself; with the remedy (a larger
        --reference-size where the pool's sample of its split cut the language below ``csls_k``, else another
        --reference, or a smaller --csls-k)."""
        c, k = self.context, self.ranking.csls_k
        counts = np.bincount(pool_codes[pool_codes >= 0], minlength=len(c.languages))
        for code in codes:
            lang, n = c.languages[code], int(counts[code])
            if c.reference is None and n - 1 < k:  # a query is never its own neighbour
                csls = said("--retrieval csls --transductive", "csls=True, transductive=True")
                raise UserError(f"{csls}: {given('csls_k', k)} neighbours exceed the {n - 1} "
                                f"evaluated sentences in {lang} besides the query's own ({n} in all); sample more "
                                f"groups ({option('n_groups')}) or lower {option('csls_k')}")
            if c.reference is not None and n < k:
                total = (c.reference.available or {}).get(lang, n)  # the split's, before --reference-size's sample
                where = c.reference.source if total == n else f"{c.reference.source}, a sample of its {total}"
                remedy = (f"raise {option('reference_size')} to {k} or more" if total >= k else
                          f"name a {option('reference')} with {k} or more {lang} captions")
                raise UserError(f"{_csls()}: {given('csls_k', k)} neighbours exceed the {n} reference captions in "
                                f"{lang} ({where}); {remedy}, or lower {option('csls_k')}")

    def cosine(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), N]`` cosines of sentences ``rows`` against every sentence, by this ranking's head."""
        return self._cos(np.asarray(rows))

    def __call__(self, rows: np.ndarray, *, cosine: np.ndarray | None = None,
                 maxsim: np.ndarray | None = None) -> np.ndarray:
        """The scores of sentences ``rows`` (class docstring); ``cosine`` (:meth:`cosine`) and ``maxsim``
        (:meth:`ScoringContext.maxsim_rows`) of these rows when the caller has them, for several rankings."""
        rows, cols = np.asarray(rows), self.columns
        scores: np.ndarray = np.asarray(self._cos(rows) if cosine is None else cosine, dtype=np.float32)[:, cols]
        if self.ranking.maxsim:  # rows a chunk at a time: never the [Q, N] MaxSim (the transductive radii hold it)
            block = self.context.maxsim_rows(rows) if maxsim is None else maxsim
            scores = scores + self.ranking.maxsim * block[:, cols]
        if self.radii is not None:
            idx = self.context.lang_idx
            scores = scores - (self.radii[rows][:, idx[cols]] + self.radii[cols][:, idx[rows]].T) / 2.0
        return scores

    def matrix(self) -> np.ndarray:
        """``[N, N]`` every score (for a few thousand sentences: the val split's BackRetrieval); ``[Q, N - Q]`` in a
        retrieval."""
        return self(np.arange(self.context.queries))

    @property
    def record(self) -> dict:
        """The ranking as result records give it: its fields and label, where its statistics come from (``none``:
        it reads none), the reference pool when it reads one, and MaxSim's and TF-IDF's settings where used."""
        c = self.context
        out = {**self.ranking.to_dict(), "label": self.ranking.label,
               "statistics": c.statistics if needs_statistics(c.encoder, self.ranking) else "none"}
        if self.ranking.needs_statistics:
            out["reference"] = "evaluated sentences" if c.reference is None else c.reference.record
        if self.ranking.maxsim:
            out["maxsim_tokens"] = c.late.record
        if isinstance(c.encoder, TfidfEncoder):
            out["tfidf"] = {**c.encoder.config,
                            "fitted_on": "evaluated sentences" if c.reference is None else c.reference.record}
        return out
