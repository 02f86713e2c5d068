"""Word translation by retrieval (Globetrotter paper, section 5.3 and appendix B.2; MUSE).

Ground truth comes either from a lexicon (the synthetic world writes
``dictionary/<src>-<tgt>.txt`` in MUSE format) or from the paper's tf-idf builder over a
parallel split (:func:`tfidf_dictionary`, appendix B.2, eqs. 6–7): for a token ``t_i`` of
language A, its "document" ``d_i`` is every token (with repetition) of the B translations
of the A sentences that contain ``t_i``;

    tf_{j,d} = f_{j,d} / Σ_{j'} f_{j',d}      (eq. 6)
    idf_j    = log(|D| / |{d ∈ D : t_j ∈ d}|)  (eq. 7)

and ``(t_i, t_j)`` is kept iff ``t_j`` is in the top 5 of ``tf·idf(i, ·)`` and ``t_i`` in
the top 5 of the reverse score ``tf·idf(j, ·)``. On small vocabularies where every token
co-occurs with every other (the synthetic world), eq. 7 is 0 for all tokens and ranks
nothing; ``idf="smooth"`` (the default, scikit-learn's ``log((1+|D|)/(1+df)) + 1``) keeps
the ranking by tf in that case and agrees with eq. 7 on the order of rare tokens.

Metrics, per ordered language pair (both directions): Recall@10 over dictionary pairs
(paper Fig. 5: share of pairs whose target is in the source word's 10 nearest target
words), with and without pairs whose two tokens are identical; and MUSE's P@1/5/10 per
unique source word (a hit if any valid translation is in the top k), ranked by nearest
neighbour (cosine) or CSLS (Lample et al., 2018b):

    CSLS(x, y) = 2 cos(x, y) − r_T(x) − r_S(y),

``r_T(x)`` the mean cosine of ``x`` to its 10 nearest target words, ``r_S(y)`` of ``y``
to its 10 nearest source words. Nearest neighbours use faiss and query chunks in
float32: no vocabulary × vocabulary matrix is ever held.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

import numpy as np
from scipy import sparse

from backretrieval.hubness import neighbourhood_radii
from globetrotter.errors import UserError
from globetrotter.token_stats import smoothed_idf

from .procrustes import knn, normalize_rows, refine_multi, refine_pairwise

SPACE = "▁"  # stands for the space a byte-level BPE token carries, so tokens fit MUSE's "src tgt" lines
Idf = Literal["smooth", "paper"]
Method = Literal["nn", "csls"]
_WORD_RE = re.compile(r"\w+", re.UNICODE)


# ----------------------------------------------------------------------------- tokens


def token_key(decoded: str) -> str:
    """A decoded BPE token as a whitespace-free dictionary entry (``" car"`` → ``"▁car"``)."""
    return decoded.replace(" ", SPACE)


def is_fragment(key: str) -> bool:
    """Whether a key stands for a byte fragment (``⟨raw⟩``, see :func:`vocab_keys`)."""
    return key.startswith("⟨") and key.endswith("⟩")


def key_text(key: str) -> str:
    """The text a dictionary entry stands for (``"▁car"`` → ``" car"``)."""
    return key.replace(SPACE, " ")


def vocab_keys(tokenizer) -> list[str]:
    """Dictionary key of every token id of a HF tokenizer: the decoded text (see
    :func:`token_key`), or ``⟨raw⟩`` (the vocabulary entry) for a byte fragment that does
    not decode to text on its own; ``""`` for special tokens."""
    vocab = tokenizer.get_vocab()
    keys = [""] * (max(vocab.values()) + 1)
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    for tok, i in vocab.items():
        if tok in specials:
            continue
        decoded = tokenizer.decode([i])
        keys[i] = token_key(decoded) if decoded and "\ufffd" not in decoded else f"⟨{tok}⟩"
    return keys


def row_keys(tokenizer, tokens: Sequence[str]) -> list[str]:
    """Dictionary key of each row of ``Encoder.token_embeddings()`` (``tokens`` = its strings).

    When the rows are the non-special ids in ascending order (checked against the decoded
    strings), keys come from :func:`vocab_keys`, byte fragments included; otherwise from
    the strings, and rows that do not decode to text get ``""``.
    """
    if tokenizer is not None:
        keys = vocab_keys(tokenizer)
        ids = [i for i, k in enumerate(keys) if k]
        if len(ids) == len(tokens) and all(tokenizer.decode([i]) == t for i, t in zip(ids, tokens)):
            return [keys[i] for i in ids]
    return [token_key(t) if t and "\ufffd" not in t else "" for t in tokens]


class CaptionTokenizer:
    """Turns captions into lists of dictionary keys: BPE tokens of a HF ``tokenizers.Tokenizer``,
    or, with ``tokenizer=None``, lower-cased ``\\w+`` words (for space-separated scripts)."""

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer
        self.keys = vocab_keys(tokenizer) if tokenizer is not None else None

    @property
    def kind(self) -> str:
        return "bpe" if self.tokenizer is not None else "words"

    def __call__(self, captions: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is None:
            return [_WORD_RE.findall(c.lower()) for c in captions]
        encs = self.tokenizer.encode_batch(list(captions), add_special_tokens=False)
        keys = self.keys
        return [[keys[i] for i in e.ids if i < len(keys) and keys[i]] for e in encs]


# ----------------------------------------------------------------------------- tf-idf ground truth


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


def tfidf_dictionary(
    src_sents: Sequence[Sequence[str]],
    tgt_sents: Sequence[Sequence[str]],
    top_k: int = 5,
    idf: Idf = "smooth",
    min_count: int = 1,
) -> list[tuple[str, str, float]]:
    """Ground-truth token translations from aligned tokenised sentences (appendix B.2).

    ``src_sents[s]`` and ``tgt_sents[s]`` are translations of each other. Tokens seen in
    fewer than ``min_count`` sentences are left out. Returns ``(src, tgt, score)`` for
    every mutual top-``top_k`` pair (paper: 5), sorted by source token then score.
    """
    if len(src_sents) != len(tgt_sents):
        raise ValueError(f"{len(src_sents)} source sentences but {len(tgt_sents)} target sentences")
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
    i, j = both // n_t, both % n_t
    scores = np.asarray(forward[i, j]).ravel()
    order = np.lexsort((-scores, i))
    return [(str(src_vocab[i[o]]), str(tgt_vocab[j[o]]), float(scores[o])) for o in order]


def build_dictionaries(
    tokenized: Mapping[str, Sequence[Sequence[str]]],
    top_k: int = 5,
    idf: Idf = "smooth",
    min_count: int = 1,
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


# ----------------------------------------------------------------------------- dictionaries


def read_dictionary(path: str | Path) -> list[tuple[str, str]]:
    """MUSE dictionary: one ``src tgt`` pair per line (tab or whitespace separated)."""
    path = Path(path)
    pairs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: unreadable dictionary ({err})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.rstrip("\n").split("\t") if "\t" in line else line.split()
        if len(fields) < 2:
            raise UserError(f"{path}:{lineno}: expected 'source target' (MUSE format), got {line!r}")
        pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs


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


# ----------------------------------------------------------------------------- retrieval


def translate_words(
    queries: np.ndarray,
    targets: np.ndarray,
    k: int = 10,
    method: Method = "nn",
    sources: np.ndarray | None = None,
    csls_k: int = 10,
    chunk_size: int = 512,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k target rows for each query row: ``(idx, scores)`` each (n_queries, k), best first.

    ``queries``/``targets``/``sources`` are L2-normalised (n, d) float arrays. ``method="nn"``
    ranks by cosine (faiss, exact); ``"csls"`` by CSLS, where ``r_S`` is taken over
    ``sources`` (the whole source vocabulary; defaults to ``queries``). Memory: a
    (chunk_size, n_targets) float32 block at a time.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    targets = np.ascontiguousarray(targets, dtype=np.float32)
    k = min(k, len(targets))
    if method == "nn":
        scores, idx = knn(queries, targets, k)
        return idx, scores
    if method != "csls":
        raise ValueError(f"method must be 'nn' or 'csls', got {method!r}")
    sources = queries if sources is None else np.ascontiguousarray(sources, dtype=np.float32)
    r_tgt_of_query = neighbourhood_radii(queries, targets, min(csls_k, len(targets)))  # r_T(x)
    r_src_of_target = neighbourhood_radii(targets, sources, min(csls_k, len(sources)))  # r_S(y)
    idx = np.empty((len(queries), k), dtype=np.int64)
    out = np.empty((len(queries), k), dtype=np.float32)
    for start in range(0, len(queries), chunk_size):
        q = slice(start, start + chunk_size)
        block = 2.0 * (queries[q] @ targets.T) - r_src_of_target[None, :] - r_tgt_of_query[q, None]
        part = np.argpartition(-block, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(block, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        idx[q] = np.take_along_axis(part, order, axis=1)
        out[q] = np.take_along_axis(vals, order, axis=1)
    return idx, out


@dataclass
class WordSpace:
    """The candidate words of one language and their L2-normalised embeddings (row i = words[i])."""

    words: list[str]
    emb: np.ndarray

    def __post_init__(self) -> None:
        self.emb = normalize_rows(self.emb)
        self.index = {w: i for i, w in enumerate(self.words)}


def _subset_scores(top: np.ndarray, src_idx: np.ndarray, tgt_idx: np.ndarray, ks: Sequence[int], recall_k: int) -> dict:
    """Recall@recall_k over pairs and P@k per unique source word, from the top lists of each source."""
    if len(src_idx) == 0:
        return {"n_pairs": 0, "n_sources": 0, f"recall@{recall_k}": float("nan"), **{f"precision@{k}": float("nan") for k in ks}}
    uniq, inv = np.unique(src_idx, return_inverse=True)
    rank_hit = top[src_idx] == tgt_idx[:, None]  # (n_pairs, K) position of the pair's target
    pair_hit = rank_hit[:, :recall_k].any(axis=1)
    out = {"n_pairs": int(len(src_idx)), "n_sources": int(len(uniq)), f"recall@{recall_k}": float(pair_hit.mean())}
    for k in ks:
        hit = np.zeros(len(uniq), dtype=bool)
        np.logical_or.at(hit, inv.reshape(-1), rank_hit[:, :k].any(axis=1))
        out[f"precision@{k}"] = float(hit.mean())
    return out


def word_translation_scores(
    src: WordSpace,
    tgt: WordSpace,
    pairs: Sequence[tuple[str, str]],
    method: Method = "nn",
    ks: Sequence[int] = (1, 5, 10),
    recall_k: int = 10,
    csls_k: int = 10,
) -> dict:
    """Recall@10 (paper) and P@k (MUSE) of source→target word translation for one direction.

    ``pairs`` are the ground-truth ``(src_word, tgt_word)``; pairs with a word missing
    from a space are counted in ``coverage`` and left out. Returns ``{"all": {...},
    "no_identical": {...}, "coverage", "chance_recall"}`` (fractions in [0, 1]); the
    ``no_identical`` subset drops pairs whose two strings are equal (paper Fig. 5, right).
    """
    known = [(src.index[s], tgt.index[t], s == t) for s, t in pairs if s in src.index and t in tgt.index]
    coverage = len(known) / max(len(pairs), 1)
    result = {"coverage": coverage, "chance_recall": min(1.0, recall_k / max(len(tgt.words), 1)),
              "n_targets": len(tgt.words)}
    if not known:
        return {**result, "all": _subset_scores(np.zeros((0, 1)), np.array([]), np.array([]), ks, recall_k),
                "no_identical": _subset_scores(np.zeros((0, 1)), np.array([]), np.array([]), ks, recall_k)}
    s_idx, t_idx, same = (np.array(v) for v in zip(*known))
    queries = np.unique(s_idx)
    kmax = max(max(ks), recall_k)
    top_q, _ = translate_words(src.emb[queries], tgt.emb, kmax, method, sources=src.emb, csls_k=csls_k)
    top = np.full((len(src.words), top_q.shape[1]), -1, dtype=np.int64)
    top[queries] = top_q
    result["all"] = _subset_scores(top, s_idx, t_idx, ks, recall_k)
    result["no_identical"] = _subset_scores(top, s_idx[~same], t_idx[~same], ks, recall_k)
    return result


def word_translation(
    spaces: Mapping[str, WordSpace],
    dictionaries: Mapping[tuple[str, str], Sequence[tuple[str, str]]],
    method: Method = "nn",
    procrustes: Literal["none", "pairwise", "multi"] = "none",
    ks: Sequence[int] = (1, 5, 10),
    recall_k: int = 10,
    csls_k: int = 10,
    procrustes_k: int = 5,
    procrustes_iter: int = 10,
) -> dict:
    """Word translation over every ordered language pair that has a dictionary.

    ``spaces[lang]`` candidate words and embeddings per language; ``dictionaries[(a, b)]``
    ground-truth pairs (give both directions, see :func:`both_directions`). With
    ``procrustes="pairwise"`` each source space is first mapped onto the target by
    iterated Procrustes (:func:`~.procrustes.refine_pairwise`); with ``"multi"`` every
    language gets one map into a shared space (:func:`~.procrustes.refine_multi`).
    Returns per-pair results, the recall matrix (row = source, column = target)
    with and without identical tokens, averages over pairs and the Procrustes logs.
    """
    languages = sorted({lang for pair in dictionaries for lang in pair if lang in spaces})
    mapped = dict(spaces)
    logs: dict = {}
    if procrustes == "multi":
        res = refine_multi([spaces[l].emb for l in languages], k=procrustes_k, n_iter=procrustes_iter)
        mapped = {l: WordSpace(spaces[l].words, spaces[l].emb @ m.astype(np.float32)) for l, m in zip(languages, res.maps)}
        logs["multi"] = res.log
    elif procrustes not in ("none", "pairwise"):
        raise ValueError(f"procrustes must be 'none', 'pairwise' or 'multi', got {procrustes!r}")
    per_pair = {}
    n = len(languages)
    pos = {l: i for i, l in enumerate(languages)}
    matrix = np.full((n, n), np.nan)
    matrix_noid = np.full((n, n), np.nan)
    for (a, b), pairs in sorted(dictionaries.items()):
        if a not in pos or b not in pos or a == b:
            continue
        src = mapped[a]
        if procrustes == "pairwise":
            res = refine_pairwise(spaces[a].emb, spaces[b].emb, k=procrustes_k, n_iter=procrustes_iter)
            src = WordSpace(spaces[a].words, spaces[a].emb @ res.w.astype(np.float32))
            logs[f"{a}-{b}"] = res.log
        scores = word_translation_scores(src, mapped[b], pairs, method, ks, recall_k, csls_k)
        per_pair[f"{a}-{b}"] = scores
        matrix[pos[a], pos[b]] = scores["all"][f"recall@{recall_k}"]
        matrix_noid[pos[a], pos[b]] = scores["no_identical"][f"recall@{recall_k}"]

    def mean_of(subset: str, key: str) -> float:
        vals = [p[subset][key] for p in per_pair.values() if p[subset]["n_pairs"]]
        return float(np.mean(vals)) if vals else float("nan")

    summary = {}
    for subset in ("all", "no_identical"):
        suffix = "" if subset == "all" else "_no_identical"
        summary[f"recall@{recall_k}{suffix}"] = mean_of(subset, f"recall@{recall_k}")
        for k in ks:
            summary[f"precision@{k}{suffix}"] = mean_of(subset, f"precision@{k}")
    return {
        **summary,
        "method": method,
        "procrustes": procrustes,
        "languages": languages,
        "matrix": matrix,
        "matrix_no_identical": matrix_noid,
        "pairs": per_pair,
        "procrustes_log": logs,
    }


# ----------------------------------------------------------------------------- embeddings


def input_word_embeddings(
    words: Sequence[str],
    tokens: Sequence[str],
    matrix: np.ndarray,
    tokenizer=None,
    token_counts: Counter | None = None,
) -> tuple[list[str], np.ndarray]:
    """Input-token-embedding vectors for ``words`` (the paper's choice).

    ``tokens``/``matrix`` as ``Encoder.token_embeddings()`` gives them (rows matched to
    keys by :func:`row_keys`). A token key (``"▁car"``, a fragment) gets its row. A plain
    word is tokenised on its own, in its in-sentence form ``" word"`` and its bare form
    ``"word"`` (and is its own token when it is one); the form whose first token is most
    frequent in ``token_counts`` (the language's captions) is used (without counts: the
    word's own row if it is a token, else the in-sentence form), and the word's vector is
    the mean of its tokens' rows.
    Words with no usable token are dropped: returns the kept words and their (n, d) matrix.
    """
    row_of = {}
    for r, key in enumerate(row_keys(tokenizer, tokens)):
        if key:
            row_of.setdefault(key, r)
    keys = vocab_keys(tokenizer) if tokenizer is not None else None
    counts = token_counts or {}
    kept, rows = [], []
    for word in words:
        token_rows = [row_of[word]] if word in row_of else []
        if token_rows and (tokenizer is None or token_counts is None or SPACE in word or is_fragment(word)):
            kept.append(word)
            rows.append(matrix[token_rows[0]])
            continue
        if tokenizer is None:
            continue
        # candidate forms: (frequency of the first token, prefer the in-sentence form, rows)
        forms = [(counts.get(word, 0), False, token_rows)] if token_rows else []
        for in_sentence, text in ((True, " " + word), (False, word)):
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            form_rows = [row_of[keys[i]] for i in ids if i < len(keys) and keys[i] in row_of]
            if form_rows:
                forms.append((counts.get(keys[ids[0]], 0), in_sentence, form_rows))
        if forms:
            _, _, best = max(forms, key=lambda f: (f[0], f[1]))
            kept.append(word)
            rows.append(matrix[best].mean(axis=0))
    return kept, (np.stack(rows).astype(np.float32) if rows else np.zeros((0, matrix.shape[1]), np.float32))
