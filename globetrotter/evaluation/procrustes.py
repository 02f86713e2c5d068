"""Procrustes refinement of word-level alignment (Globetrotter paper, section 3.4).

Pairwise: anchors are the mutual k-nearest neighbours (k = 5, as the paper) between the
mapped source space ``X W`` and the target space ``Y``; ``W`` is then the orthogonal
Procrustes solution (Schönemann, 1966) ``argmin_{WᵀW=I} ‖X_A W − Y_A‖_F = U Vᵀ`` with
``U Σ Vᵀ = svd(X_Aᵀ Y_A)``, and the two steps alternate until the map stops changing.

Multi-language (the generalised version of Taitelbaum et al., 2019): one orthogonal map
``W_a`` per language into a shared space, minimising the sum over language pairs of the
anchor distances ``Σ_{a<b} (1/|A_ab|) ‖X_a[A_ab] W_a − X_b[A_ba] W_b‖²_F``. With anchors
fixed, each ``W_a`` has a closed-form Procrustes update given the others (block
coordinate descent, which never increases the objective); anchors are then recomputed
as mutual nearest neighbours in the mapped spaces. The maps are expressed relative to a
reference language (its map is the identity).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import faiss
import numpy as np
from backretrieval.files import as_array, check_matrix, is_whole, require_count
from scipy.linalg import orthogonal_procrustes

Pairs = tuple[np.ndarray, np.ndarray]


def orthogonal_map(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Orthogonal ``W`` (d, d) minimising ``‖diag(√w)(x W − y)‖_F`` for row pairs ``x[i] ↔ y[i]``."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != x.shape[:1] or not (np.isfinite(w) & (w >= 0)).all():  # numpy's broadcast error, scipy's NaN one
            raise ValueError(f"weights: expected {len(x)} finite weights >= 0 (one per row of x), got shape {w.shape}"
                             + ("" if w.shape != x.shape[:1] else f", values in [{w.min()}, {w.max()}]"))
        s = np.sqrt(w)[:, None]
        x, y = x * s, y * s
    w, _ = orthogonal_procrustes(x, y)
    return w


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """float32 copy of ``x`` with unit-norm rows (zero rows stay zero)."""
    x = np.array(x, dtype=np.float32, copy=True)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def word_vectors(name: str, x: object, dim: int | None = None, dim_of: str = "") -> np.ndarray:
    """``x`` checked as ``(words, dim)`` finite vectors (:func:`~backretrieval.files.check_matrix`: a 1-D array,
    NaN rows or another width than ``dim_of``'s are one line naming ``name``); no words (0 rows) is allowed."""
    x = as_array(name, x)
    if x.ndim == 2 and len(x) == 0 and dim in (None, x.shape[1]):
        return x
    return check_matrix(name, x, dim=dim, dim_of=dim_of, vectors=False)


def check_pairs(name: str, pairs: Pairs, n_x: int, n_y: int) -> tuple[np.ndarray, np.ndarray]:
    """Known pairs ``(i, j)`` as two int arrays of one length, ``i`` rows of a space of ``n_x`` words and ``j`` of
    one of ``n_y``; a one-line ``ValueError`` naming ``name`` otherwise (numpy's IndexError, scipy's shape error)."""
    try:
        i, j = (np.asarray(side).reshape(-1) for side in pairs)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected two sequences of row indices (i, j)") from None
    if len(i) != len(j):
        raise ValueError(f"{name}: expected as many target rows as source rows, got {len(i)} and {len(j)}")
    for side, n in ((i, n_x), (j, n_y)):
        if len(side) and (side.dtype.kind not in "iu" or side.min() < 0 or side.max() >= n):
            raise ValueError(f"{name}: expected row indices (integers) in [0, {n}), got {side.dtype} values in "
                             f"[{side.min()}, {side.max()}]")
    return i.astype(np.int64), j.astype(np.int64)


def knn(queries: np.ndarray, base: np.ndarray, k: int, exact_below: int = 2_000_000) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product k-NN: ``(sims, idx)`` each (n_queries, k), best first.

    faiss (``IndexFlatIP``) at scale; a numpy product when ``n_queries · n_base`` is
    below ``exact_below`` (faiss' threading costs more than it saves on tiny problems).
    """
    base = np.ascontiguousarray(base, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, base.shape[0])
    if len(queries) * len(base) < exact_below:
        sims = queries @ base.T
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < base.shape[0] else np.tile(np.arange(k), (len(queries), 1))
        vals = np.take_along_axis(sims, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        return np.take_along_axis(vals, order, axis=1), np.take_along_axis(part, order, axis=1).astype(np.int64)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return index.search(queries, k)


def mutual_nearest_neighbors(x: np.ndarray, y: np.ndarray, k: int = 5, one_per_word: bool = True) -> Pairs:
    """Anchor pairs ``(i, j)``: ``y_j`` is among the k nearest of ``x_i`` and ``x_i`` among those of ``y_j``.

    Cosine similarity on L2-normalised rows (normalised here). With ``one_per_word``
    (default) each source and each target word keeps only its most similar mutual
    partner, so a dense neighbourhood does not add k² near-miss anchors; otherwise
    every mutual pair is returned. Returns two int arrays.
    """
    k = require_count(k, "k")
    x = word_vectors("x", x)
    xn, yn = normalize_rows(x), normalize_rows(word_vectors("y", y, x.shape[1], "x"))
    sims, x_to_y = knn(xn, yn, k)  # (nx, k)
    _, y_to_x = knn(yn, xn, k)  # (ny, k)
    back = y_to_x[x_to_y]  # (nx, k, k): neighbours of each candidate y
    mutual = (back == np.arange(len(xn))[:, None, None]).any(axis=2)
    i, m = np.nonzero(mutual)
    j, s = x_to_y[i, m], sims[i, m]
    if one_per_word and len(i):
        order = np.argsort(-s, kind="stable")
        i, j = i[order], j[order]
        _, first_i = np.unique(i, return_index=True)  # best partner of each source
        i, j = i[np.sort(first_i)], j[np.sort(first_i)]
        _, first_j = np.unique(j, return_index=True)  # then best source of each target
        keep = np.sort(first_j)
        i, j = i[keep], j[keep]
    return i.astype(np.int64), j.astype(np.int64)


@dataclass
class ProcrustesResult:
    """A pairwise map ``W`` (apply as ``x @ W``), its final anchors and the convergence log."""

    w: np.ndarray
    anchors: Pairs
    log: list[dict] = field(default_factory=list)


def refine_pairwise(
    x: np.ndarray,
    y: np.ndarray,
    k: int = 5,
    n_iter: int = 10,
    seed_pairs: Pairs | None = None,
    tol: float = 1e-6,
) -> ProcrustesResult:
    """Iterated Procrustes from source ``x`` (n, d) to target ``y`` (m, d).

    Starts from the identity (the Globetrotter spaces are already shared) or, with
    ``seed_pairs = (i, j)``, from the Procrustes map of those known pairs; then alternates
    mutual-k-NN anchors (paper: k = 5) and the Procrustes solution until ``‖ΔW‖_F < tol``
    or ``n_iter`` rounds. Each log entry: iteration, anchors, mean anchor cosine, delta.
    """
    require_count(k, "k")
    require_count(n_iter, "n_iter")  # 2.5 was range's TypeError
    x = word_vectors("x", x)
    xn, yn = normalize_rows(x), normalize_rows(word_vectors("y", y, x.shape[1], "x"))
    if seed_pairs is not None:
        si, sj = check_pairs("seed_pairs", seed_pairs, len(xn), len(yn))
        w = orthogonal_map(xn[si], yn[sj])
    else:
        w = np.eye(xn.shape[1])
    log: list[dict] = []
    anchors: Pairs = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    for it in range(1, n_iter + 1):
        anchors = mutual_nearest_neighbors(xn @ w.astype(np.float32), yn, k)
        if len(anchors[0]) < 2:
            log.append({"iteration": it, "anchors": int(len(anchors[0])), "mean_cosine": float("nan"), "delta": 0.0})
            break
        w_new = orthogonal_map(xn[anchors[0]], yn[anchors[1]])
        cos = float(np.mean(np.sum((xn[anchors[0]] @ w_new) * yn[anchors[1]], axis=1)))
        delta = float(np.linalg.norm(w_new - w))
        w = w_new
        log.append({"iteration": it, "anchors": int(len(anchors[0])), "mean_cosine": cos, "delta": delta})
        if delta < tol:
            break
    return ProcrustesResult(w=w, anchors=anchors, log=log)


@dataclass
class MultiProcrustesResult:
    """One map per language (apply as ``spaces[a] @ maps[a]``) and the convergence log."""

    maps: list[np.ndarray]
    log: list[dict] = field(default_factory=list)


def _multi_objective(spaces: Sequence[np.ndarray], maps: Sequence[np.ndarray], anchors: Mapping) -> float:
    total, n_pairs = 0.0, 0
    for (a, b), (ia, ib) in anchors.items():
        if len(ia):
            diff = spaces[a][ia] @ maps[a] - spaces[b][ib] @ maps[b]
            total += float(np.mean(np.sum(diff * diff, axis=1)))
            n_pairs += 1
    return total / max(n_pairs, 1)


def _block_update(spaces: Sequence[np.ndarray], maps: list[np.ndarray], anchors: Mapping[tuple[int, int], Pairs],
                  n_lang: int) -> None:
    """One sweep of closed-form per-language Procrustes updates (others fixed), in place."""
    for a in range(n_lang):
        xs, ys, ws = [], [], []
        for (p, q), (ip, iq) in anchors.items():
            if not len(ip) or a not in (p, q):
                continue
            mine, other, other_lang = (ip, iq, q) if p == a else (iq, ip, p)
            xs.append(spaces[a][mine])
            ys.append(spaces[other_lang][other] @ maps[other_lang])
            ws.append(np.full(len(mine), 1.0 / len(mine)))
        if xs:
            maps[a] = orthogonal_map(np.concatenate(xs), np.concatenate(ys), np.concatenate(ws))


def refine_multi(
    spaces: Sequence[np.ndarray],
    k: int = 5,
    n_iter: int = 10,
    inner_iter: int = 5,
    seed_pairs: Mapping[tuple[int, int], Pairs] | None = None,
    reference: int = 0,
    tol: float = 1e-6,
) -> MultiProcrustesResult:
    """Generalised (multi-language) Procrustes: one orthogonal map per language.

    ``spaces[a]`` (n_a, d) word embeddings of language ``a``. Outer rounds recompute the
    mutual k-NN anchors (paper: k = 5) between every pair of mapped spaces; inner rounds
    are ``inner_iter`` block-coordinate sweeps of per-language Procrustes updates.
    ``seed_pairs[(a, b)] = (i, j)`` optionally gives known pairs to start from. Maps
    are re-expressed so that ``maps[reference]`` is the identity. Stops when the largest
    ``‖ΔW_a‖_F < tol`` or when a round finds the same anchors as the one before. Each log entry: iteration,
    objective before and after each inner sweep (mean squared anchor distance over pairs; non-increasing within a
    round), mean anchors per pair, max delta.
    """
    if len(spaces) < 2:
        raise ValueError(f"spaces: need at least 2 languages, got {len(spaces)}")
    for name, count in (("k", k), ("n_iter", n_iter), ("inner_iter", inner_iter)):  # 2.5: range's TypeError
        require_count(count, name)
    first = word_vectors("spaces[0]", spaces[0])
    spaces = [normalize_rows(word_vectors(f"spaces[{a}]", s, first.shape[1], "spaces[0]")).astype(np.float64)
              for a, s in enumerate(spaces)]
    n_lang, dim = len(spaces), spaces[0].shape[1]
    if not is_whole(reference) or not -n_lang <= reference < n_lang:
        raise ValueError(f"reference: expected a language's position in spaces (0 to {n_lang - 1}), got {reference!r}")
    maps = [np.eye(dim) for _ in range(n_lang)]
    if seed_pairs:
        seeds = {}
        for (a, b), pairs in dict(seed_pairs).items():
            if not (0 <= a < n_lang and 0 <= b < n_lang):  # IndexError: list index out of range
                raise ValueError(f"seed_pairs: key {(a, b)!r} names no pair of the {n_lang} spaces (0 to {n_lang - 1})")
            seeds[(a, b)] = check_pairs(f"seed_pairs[{(a, b)!r}]", pairs, len(spaces[a]), len(spaces[b]))
        for _ in range(inner_iter):
            _block_update(spaces, maps, seeds, n_lang)
        maps = [m @ maps[reference].T for m in maps]
    log: list[dict] = []
    previous_anchors: dict | None = None
    for it in range(1, n_iter + 1):
        mapped = [(s @ m).astype(np.float32) for s, m in zip(spaces, maps)]
        anchors = {
            (a, b): mutual_nearest_neighbors(mapped[a], mapped[b], k)
            for a in range(n_lang)
            for b in range(a + 1, n_lang)
        }
        stable = previous_anchors is not None and all(
            np.array_equal(anchors[p][0], previous_anchors[p][0]) and np.array_equal(anchors[p][1], previous_anchors[p][1])
            for p in anchors
        )
        previous_anchors = anchors
        previous = [m.copy() for m in maps]
        objectives = [_multi_objective(spaces, maps, anchors)]
        for _ in range(inner_iter):
            _block_update(spaces, maps, anchors, n_lang)
            objectives.append(_multi_objective(spaces, maps, anchors))
        maps = [m @ maps[reference].T for m in maps]
        delta = max(float(np.linalg.norm(m - p)) for m, p in zip(maps, previous))
        log.append({
            "iteration": it,
            "objective": objectives,
            "anchors_per_pair": float(np.mean([len(i) for i, _ in anchors.values()])),
            "delta": delta,
        })
        if delta < tol or stable:
            break
    return MultiProcrustesResult(maps=maps, log=log)
