"""Word-translation ground truth (Globetrotter paper, appendix B.2; MUSE): the paper's tf-idf dictionary built
from a parallel split, and dictionary files in MUSE format.

The tf-idf builder (:func:`tfidf_dictionary`, eqs. 6–7): for a token ``t_i`` of language A, its "document" ``d_i``
is every token (with repetition) of the B translations of the A sentences that contain ``t_i``;

    tf_{j,d} = f_{j,d} / Σ_{j'} f_{j',d}      (eq. 6)
    idf_j    = log(|D| / |{d ∈ D : t_j ∈ d}|)  (eq. 7)

and ``(t_i, t_j)`` is kept iff ``t_j`` is in the top 5 of ``tf·idf(i, ·)`` and ``t_i`` in
the top 5 of the reverse score ``tf·idf(j, ·)``. On small vocabularies where every token
co-occurs with every other (the synthetic world), eq. 7 is 0 for all tokens and ranks
nothing; ``idf="smooth"`` (the default, scikit-learn's ``log((1+|D|)/(1+df)) + 1``) keeps
the ranking by tf in that case and agrees with eq. 7 on the order of rare tokens.

Lexicons (the synthetic world writes ``dictionary/<src>-<tgt>.txt``) are read and written as MUSE files: one
``src tgt`` pair per line.
"""
from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

import numpy as np
from scipy import sparse

from backretrieval.errors import BackRetrievalWarning, given, option
from backretrieval.files import require_count
from data_prep.errors import read_utf8
from globetrotter.errors import UserError
from globetrotter.token_stats import smoothed_idf

Idf = Literal["smooth", "paper"]


def _sentence_matrix(sents: Sequence[Sequence[str]]) -> tuple[sparse.csr_matrix, np.ndarray]:
    """(S, V) token-count matrix and its vocabulary (sorted unique tokens)."""
    flat = [t for s in sents for t in s]
    vocab, cols = np.unique(np.array(flat, dtype=object), return_inverse=True) if flat else (np.array([], dtype=object), np.array([], dtype=np.int64))
    rows = np.repeat(np.arange(len(sents)), [len(s) for s in sents])
    mat = sparse.csr_matrix((np.ones(len(flat), dtype=np.float64), (rows, cols.reshape(-1))), shape=(len(sents), len(vocab)))
    mat.sum_duplicates()
    return mat, vocab


def tfidf_scores(src: sparse.csr_matrix, tgt: sparse.csr_matrix, idf: Idf = "smooth") -> sparse.csr_matrix:
    """tf·idf (appendix B.2, eqs. 6–7) of target token j in the document of source token i: (V_src, V_tgt).

    ``src``/``tgt`` are aligned (S, V) count matrices (row s = sentence s and its translation).
    """
    counts = ((src > 0).astype(np.float64).T @ tgt).tocsr()  # f_{j,d_i}
    row_sum = np.asarray(counts.sum(axis=1)).ravel()
    tf = sparse.diags(1.0 / np.maximum(row_sum, 1e-12)) @ counts  # eq. 6
    n_docs = int((row_sum > 0).sum())
    df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.float64)
    if idf == "paper":
        idf_vec = np.log(n_docs / np.maximum(df, 1))  # eq. 7
    elif idf == "smooth":
        idf_vec = smoothed_idf(df, n_docs)
    else:
        raise ValueError(f"idf must be 'smooth' or 'paper', got {idf!r}")
    return (tf @ sparse.diags(idf_vec)).tocsr()


def row_topk(mat: sparse.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` of the k largest stored entries of each row (ties: lower column first)."""
    mat = mat.tocsr()
    rows = np.repeat(np.arange(mat.shape[0]), np.diff(mat.indptr))
    order = np.lexsort((mat.indices, -mat.data, rows))
    rank = np.arange(len(order)) - mat.indptr[rows[order]]
    keep = order[rank < k]
    return rows[keep], mat.indices[keep]


TOP_K, MIN_COUNT = 5, 1
IDF: Idf = "smooth"
"""The tf-idf rule's defaults: mutual top-k (the paper's 5), idf, the fewest sentences a token is seen in."""


def tfidf_dictionary(
    src_sents: Sequence[Sequence[str]],
    tgt_sents: Sequence[Sequence[str]],
    top_k: int = TOP_K,
    idf: Idf = IDF,
    min_count: int = MIN_COUNT,
) -> list[tuple[str, str, float]]:
    """Ground-truth token translations from aligned tokenised sentences (appendix B.2).

    ``src_sents[s]`` and ``tgt_sents[s]`` are translations of each other. Tokens seen in
    fewer than ``min_count`` sentences are left out. Returns ``(src, tgt, score)`` for
    every mutual top-``top_k`` pair (paper: 5), sorted by source token then score.
    """
    if len(src_sents) != len(tgt_sents):
        raise ValueError(f"{len(src_sents)} source sentences but {len(tgt_sents)} target sentences")
    for name, sents in (("src_sents", src_sents), ("tgt_sents", tgt_sents)):
        at = next((i for i, sent in enumerate(sents) if isinstance(sent, str)), None)
        if at is not None:  # its characters were read as the tokens
            raise TypeError(f"{name}[{at}]: expected a sentence's list of tokens, got a str ({sents[at][:40]!r}); "
                            "split it into tokens")
    require_count(top_k, "top_k")
    require_count(min_count, "min_count")  # 2.5 was taken as 3, in silence
    src_mat, src_vocab = _sentence_matrix(src_sents)
    tgt_mat, tgt_vocab = _sentence_matrix(tgt_sents)
    if min_count > 1:
        keep_s = np.asarray((src_mat > 0).sum(axis=0)).ravel() >= min_count
        keep_t = np.asarray((tgt_mat > 0).sum(axis=0)).ravel() >= min_count
        src_mat, src_vocab = src_mat[:, keep_s], src_vocab[keep_s]
        tgt_mat, tgt_vocab = tgt_mat[:, keep_t], tgt_vocab[keep_t]
    if src_mat.shape[1] == 0 or tgt_mat.shape[1] == 0:
        return []
    forward = tfidf_scores(src_mat, tgt_mat, idf)  # (Vs, Vt)
    backward = tfidf_scores(tgt_mat, src_mat, idf)  # (Vt, Vs)
    fi, fj = row_topk(forward, top_k)
    bj, bi = row_topk(backward, top_k)
    n_t = tgt_mat.shape[1]
    both = np.intersect1d(fi.astype(np.int64) * n_t + fj, bi.astype(np.int64) * n_t + bj)
    if not len(both):  # no mutual pair (the paper's idf is 0 for a token in every sentence): no scores to index
        return []
    i, j = both // n_t, both % n_t
    scores = np.asarray(forward[i, j]).ravel()
    order = np.lexsort((-scores, i))
    return [(str(src_vocab[i[o]]), str(tgt_vocab[j[o]]), float(scores[o])) for o in order]


def build_dictionaries(
    tokenized: Mapping[str, Sequence[Sequence[str]]],
    top_k: int = TOP_K,
    idf: Idf = IDF,
    min_count: int = MIN_COUNT,
) -> dict[tuple[str, str], list[tuple[str, str, float]]]:
    """:func:`tfidf_dictionary` for every language pair, both directions.

    ``tokenized[lang][s]`` is the tokenised sentence ``s`` of a parallel set (same ``s``
    = translations). The ``b-a`` dictionary holds the same pairs as ``a-b``, swapped (the
    mutual top-k rule is symmetric); scores are the ``a→b`` tf·idf.
    """
    langs = sorted(tokenized)
    out = {}
    for ai, a in enumerate(langs):
        for b in langs[ai + 1:]:
            pairs = tfidf_dictionary(tokenized[a], tokenized[b], top_k, idf, min_count)
            out[(a, b)] = pairs
            out[(b, a)] = sorted(((t, s, sc) for s, t, sc in pairs), key=lambda p: (p[0], -p[2]))
    return out



def why_empty(tokenized: Mapping[str, Sequence[Sequence[str]]], top_k: int, min_count: int) -> str:
    """Why :func:`build_dictionaries` of ``tokenized`` found no pair at all, in words (for a one-line error)."""
    if len(tokenized) < 2:
        return f"it needs at least 2 languages, got {sorted(tokenized)}"
    n = len(next(iter(tokenized.values())))
    df = {lang: Counter(t for s in sents for t in set(s)) for lang, sents in tokenized.items()}
    bare = sorted(lang for lang, c in df.items() if not any(v >= min_count for v in c.values()))
    if bare:
        most = max((v for lang in bare for v in df[lang].values()), default=0)
        return (f"no {'/'.join(bare)} token is in at least {given('min_count', min_count)} of the {n} sentences "
                f"(the most frequent: {most})")
    return f"no token pair is in each other's tf-idf top {given('top_k', top_k)}"


def read_dictionary(path: str | Path) -> list[tuple[str, str]]:
    """MUSE dictionary: one ``src tgt`` pair per line, exactly two fields (tab or whitespace separated); a line of
    one field or of three or more is a :class:`UserError` naming ``file:line``. A UTF-8 byte-order mark is no part of
    the first word; a pair given again is kept once (a :class:`~backretrieval.errors.BackRetrievalWarning` names the
    file and how many were dropped: each would count twice)."""
    path = Path(path)
    pairs: dict[tuple[str, str], None] = {}
    try:
        lines = read_utf8(path, "a MUSE dictionary ('source target' per line)").splitlines()
    except OSError as err:
        raise UserError(f"{path}: unreadable dictionary ({err})") from None
    given = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split()  # exactly two: a third field is no part of either word ("ice cream Eis")
        if len(fields) != 2:
            raise UserError(f"{path}:{lineno}: expected 'source target' (MUSE format), got {line!r}")
        pairs[(fields[0], fields[1])] = None
        given += 1
    if given > len(pairs):
        warnings.warn(f"{path}: {given - len(pairs)} duplicate pair(s) dropped (each pair counts once)",
                      BackRetrievalWarning, stacklevel=2)
    return list(pairs)


def write_dictionary(path: str | Path, pairs: Iterable[Sequence]) -> Path:
    """Write ``(src, tgt, ...)`` pairs as a MUSE dictionary (``src tgt`` per line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(f"{p[0]} {p[1]}\n" for p in pairs), encoding="utf-8")
    tmp.replace(path)
    return path


def read_dictionaries(folder: str | Path, languages: Sequence[str] | None = None) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Every ``<src>-<tgt>.txt`` of ``folder`` (restricted to ``languages`` when given)."""
    folder = Path(folder)
    if folder.is_file():
        raise UserError(f"{folder}: a file; {option('dictionary')} takes the folder of <src>-<tgt>.txt files (e.g. its folder, "
                        f"{folder.resolve().parent})")
    if not folder.is_dir():
        raise UserError(f"{folder}: dictionary folder not found (expected <src>-<tgt>.txt files)")
    out = {}
    for path in sorted(folder.glob("*-*.txt")):
        src, _, tgt = path.stem.partition("-")
        if languages is None or (src in languages and tgt in languages):
            out[(src, tgt)] = read_dictionary(path)
    if not out:
        raise UserError(f"{folder}: no <src>-<tgt>.txt dictionary for languages {list(languages or [])}")
    return out


def both_directions(dicts: Mapping[tuple[str, str], list[tuple[str, str]]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Every ordered pair: a missing ``b-a`` dictionary is the inverse of ``a-b``."""
    out = {key: list(pairs) for key, pairs in dicts.items()}
    for (a, b), pairs in dicts.items():
        out.setdefault((b, a), [(t, s) for s, t in pairs])
    return out
