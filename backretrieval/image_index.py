"""Image-side neighbour lists: BkR's step 4 for Recall@K as a lookup, computed once per image set.

Step 4 asks, for a query q with retrieved target t = T_T*(q): do fewer than K distinct source
images score at least as high as the query's own image in the row g(I_t, .)? That row depends
on the images only, never on the text model under evaluation. So the C best source images of
every target image (their column ids and exact scores, best first) answer step 4 for every
text model and every K < C (one entry past K shows whether an image beyond the K-th ties with the
own one):

* :func:`neighbour_counts`: the own score g(I_t, I_S^q) (one dot product, as in
  :func:`backretrieval.ranking.count_ranks`; the listed score when the own image is in the
  list), and the list entries other than the own image scoring above (or at least) it. With
  exact lists (``method="flat"``) these are the counts of ``count_ranks`` with ``max_rank =
  max(ks)``: an image missing from an exact list scores at most the list's last entry, so a
  query whose count stays below C sees every better image. Ties of the own image with
  images beyond the list's end change only ``ties="expected"``'s hit (K - G) / (E + 1): a query
  whose own image ties with the list's last entry is counted exactly by ``count_ranks``. With
  approximate lists a better image the index missed turns a miss into a hit, and an own
  image it missed turns a hit into a miss.
* :func:`image_neighbours` builds them:

  - ``"flat"`` (the function's default, what the exact metric uses): an exact faiss
    ``IndexFlatIP`` search over the L2-normalised source images, N_t x N_s x D: about one
    uncapped exact pass of the image side.
  - ``"pq"`` (the default of ``--approximate --image-index``): the approximate mode's text
    candidate index (:class:`backretrieval.approximate.ANNIndex`) over the source images,
    4-bit codes of their 64 uncentred principal directions, every source image scanned;
    ``candidates`` (256) of them per target image re-scored exactly with the full features,
    the best C kept. The exact re-scoring makes every listed score exact and the order
    exact among the candidates, so an error is only a better image missing from the
    candidates (a miss counted as a hit). Much faster to build than ``flat`` at large N;
    its cost and accuracy against the exact count are measured by
    ``bench/bench_backretrieval.py --methods capped,lists-flat,lists`` (docs/results.md,
    benchmarks). Features whose signal is buried in isotropic noise need more candidates, hence
    256; on less noisy features fewer would do (``candidates``).
  - ``"hnsw"``: faiss ``IndexHNSWFlat`` (optionally over PCA-reduced features), re-scored the
    same way; on noise-dominated features it misses more better images than ``pq``.
* :func:`~backretrieval.image_index_file.save_image_neighbours` /
  :func:`~backretrieval.image_index_file.load_image_neighbours` keep them in an ``.npz`` with
  the image counts, the feature dimension and a fingerprint of the features, so that lists of
  other images (another N, dimension or content) are refused with a one-line error.

Per model the lookup costs one dot product per query and a ``(Q, C)`` comparison.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Sequence

import faiss
import numpy as np

from .approximate import PCA_ROWS, ANNIndex, ApproxConfig, normalise_and_project, pca_basis, rescore
from .errors import BackRetrievalError
from .files import check_matrix
from .pictures import distinct_images
from .ranking import TIES, count_ranks, progress_bar
from .scorers import Scorer, VectorScorer, column_groups
from .vectors import as_float32, l2_normalize

DEFAULT_NEIGHBOURS = 32  # C: enough for Recall@K up to K = 31 (a list reaches one past K)
METHODS = ("flat", "pq", "hnsw")
PQ_CANDIDATES = 256  # ``pq``: source images fetched per target image and re-scored exactly
PQ_PCA_DIM = 64  # ``pq``: principal directions the codes quantize
_CHUNK = 8192  # target images searched at once
_FINGERPRINT_ROWS = 64


@dataclass(frozen=True)
class ImageNeighbours:
    """The ``C`` best distinct source images of each target image by g, best first.

    Attributes:
        ids: ``(Nt, C)`` int64 source-image columns (distinct images), -1 where fewer were found.
        scores: ``(Nt, C)`` float32 exact g scores of those images (-inf for -1).
        n_sources: number of distinct source images the ids index.
        dim: image feature dimension D.
        fingerprint: :func:`image_fingerprint` of the features the lists were built from.
        method: how they were built (``flat``: exact; ``pq``, ``hnsw``: approximate).
        origin: what error messages call them (the file once loaded).
    """

    ids: np.ndarray
    scores: np.ndarray
    n_sources: int
    dim: int
    fingerprint: str
    method: str = "flat"
    origin: str = "image_neighbours"

    @property
    def n_targets(self) -> int:
        """Nt: the number of target images (rows of ``ids``)."""
        return len(self.ids)

    @property
    def n_neighbours(self) -> int:
        """C: the neighbours listed per target image."""
        return self.ids.shape[1]


def image_fingerprint(tgt_img: np.ndarray, src_img: np.ndarray, rows: int = _FINGERPRINT_ROWS) -> str:
    """Short sha1 of both matrices' shapes and ``rows`` evenly spaced rows of each: names an image set cheaply."""
    digest = hashlib.sha1()
    for x in (tgt_img, src_img):
        picked = np.unique(np.linspace(0, len(x) - 1, min(rows, len(x))).astype(np.int64))
        digest.update(np.asarray(x.shape, dtype=np.int64).tobytes())
        digest.update(as_float32(np.asarray(x[picked])).tobytes())
    return digest.hexdigest()[:16]


def features_digest(x: np.ndarray) -> str:
    """Short blake2b of ``x``'s shape and every value as float32, read in row blocks (a memmap is never read whole):
    names a feature matrix exactly, where :func:`image_fingerprint` samples rows; a small cost beside building a
    ``pq`` :class:`SourceImageIndex` over them."""
    digest = hashlib.blake2b(np.asarray(x.shape, dtype=np.int64).tobytes(), digest_size=8)
    for start in range(0, len(x), 65_536):
        digest.update(as_float32(np.asarray(x[start:start + 65_536])).data)  # the buffer, not a copy
    return digest.hexdigest()



def image_neighbours(
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    n_neighbours: int = DEFAULT_NEIGHBOURS,
    *,
    src_image_ids: Sequence | None = None,
    method: str = "flat",
    candidates: int | None = None,
    pca_dim: int | None = None,
    hnsw_m: int = 32,
    ef_search: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> ImageNeighbours:
    """The ``n_neighbours`` best source images of every target image by cosine g (module doc).

    Args:
        src_img: ``(Ns, D)`` source image features, as given to :func:`~backretrieval.bkr_recall`.
        tgt_img: ``(Nt, D)`` target image features (one row per target text).
        n_neighbours: C, list length; Recall@K can then be read for every K < C.
        src_image_ids: the same ids as given to ``bkr_recall``: the lists hold distinct images.
        method: ``"flat"`` (exact search), ``"pq"`` (4-bit codes of principal directions, every
            source image scanned, approximate) or ``"hnsw"`` (graph search, approximate).
        candidates: with ``pq`` / ``hnsw``, neighbours fetched and re-scored exactly (default
            ``PQ_CANDIDATES`` = 256 / ``2 C``; at least C).
        pca_dim: with ``pq`` / ``hnsw``, index features projected on this many principal
            directions (default ``PQ_PCA_DIM`` = 64 / 0; 0: the full features).
        hnsw_m: HNSW links per node; ``ef_search``: its search width (default ``candidates``).
        seed: seed of the PCA (and quantizer) sample.
        progress: a bar over the target images when they are many (:meth:`SourceImageIndex.lists`).
    """
    src = as_float32(check_matrix("src_img", src_img))  # NaN rows were listed as neighbour -1, in silence
    check_matrix("tgt_img", tgt_img, dim=src.shape[1], dim_of="src_img")  # another width: faiss' bare AssertionError
    if src_image_ids is not None:
        src = as_float32(src[distinct_images(src_image_ids, len(src))[0]])
    index = SourceImageIndex(src, method, candidates=candidates, pca_dim=pca_dim, hnsw_m=hnsw_m, ef_search=ef_search,
                             seed=seed)
    return index.lists(tgt_img, n_neighbours, progress=progress)


class SourceImageIndex:
    """The search over distinct source images that :func:`image_neighbours` builds, kept to list any target images
    later: built once per source image set, then searched for each model's retrieved targets
    (:func:`~backretrieval.bkr_recall`'s ``source_index``). Arguments as in :func:`image_neighbours`;
    ``fingerprint``: :func:`features_digest` of the images it was built over, compared by :func:`check_source_index`."""

    def __init__(self, src_img: np.ndarray, method: str = "pq", *, candidates: int | None = None,
                 pca_dim: int | None = None, hnsw_m: int = 32, ef_search: int | None = None, seed: int = 0) -> None:
        if method not in METHODS:
            raise BackRetrievalError(f"image_neighbours: method must be one of {', '.join(METHODS)}, got {method!r}")
        self.src, self.method, self.candidates = as_float32(src_img), method, candidates
        self.fingerprint = features_digest(self.src)
        if pca_dim is None:
            pca_dim = PQ_PCA_DIM if method == "pq" else 0
        ef = max(int(ef_search or 0), int(candidates or 0), PQ_CANDIDATES if method == "pq" else 2 * DEFAULT_NEIGHBOURS)
        self._search = _source_search(self.src, method, pca_dim, hnsw_m, ef, seed)

    def lists(self, tgt_img: np.ndarray, n_neighbours: int = DEFAULT_NEIGHBOURS,
              progress: bool = False) -> ImageNeighbours:
        """The ``n_neighbours`` best source images of every row of ``tgt_img``, exactly re-scored, best first;
        ``progress``: a bar over the target chunks when the search is big
        (:func:`~backretrieval.ranking.progress_bar`)."""
        tgt, src = as_float32(tgt_img), self.src
        n_neighbours = min(int(n_neighbours), len(src))
        default_fetch = {"flat": n_neighbours, "pq": PQ_CANDIDATES, "hnsw": 2 * n_neighbours}[self.method]
        fetch = n_neighbours if self.method == "flat" else max(int(self.candidates or default_fetch), n_neighbours)
        scorer = VectorScorer(tgt, src)
        ids = np.empty((len(tgt), n_neighbours), dtype=np.int64)
        scores = np.empty((len(tgt), n_neighbours), dtype=np.float32)
        with progress_bar(len(tgt), "image lists", progress, len(tgt) * len(src)) as bar:
            for s in range(0, len(tgt), _CHUNK):
                found = self._search(tgt[s:s + _CHUNK], min(fetch, len(src)))
                exact = rescore(scorer, np.arange(s, s + len(found)), found)
                order = np.argsort(-exact, axis=1, kind="stable")[:, :n_neighbours]
                ids[s:s + _CHUNK] = np.take_along_axis(found, order, axis=1)
                scores[s:s + _CHUNK] = np.take_along_axis(exact, order, axis=1)
                bar.update(len(found))
        return ImageNeighbours(ids, scores, len(src), src.shape[1], image_fingerprint(tgt, src), self.method)



def _source_search(src: np.ndarray, method: str, pca_dim: int, hnsw_m: int, ef_search: int,
                   seed: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """``search(target rows, k) -> (R, k)`` source ids, best first by the method's index over the source rows."""
    if method == "pq":  # the text side's candidate index (approximate mode), over the images
        return ANNIndex(src, ApproxConfig(index="pq", pca_dim=pca_dim, seed=seed)).search
    proj = None
    if method == "hnsw" and 0 < pca_dim < src.shape[1]:
        rng = np.random.default_rng(seed)
        sample = np.sort(rng.choice(len(src), size=min(len(src), PCA_ROWS), replace=False))
        _, proj = pca_basis(l2_normalize(src[sample]), pca_dim, rng, center=False)
    dim = src.shape[1] if proj is None else proj.shape[1]
    index: faiss.Index
    if method == "flat":
        index = faiss.IndexFlatIP(dim)
    else:
        index = hnsw = faiss.IndexHNSWFlat(dim, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efSearch = ef_search
    for s in range(0, len(src), _CHUNK):
        index.add(normalise_and_project(src[s:s + _CHUNK], proj))

    def search(x: np.ndarray, k: int) -> np.ndarray:
        return index.search(normalise_and_project(x, proj), k)[1]

    return search


def check_image_neighbours(
    neighbours: ImageNeighbours, tgt_img: np.ndarray, src_img: np.ndarray, max_k: int
) -> None:
    """One-line errors when the lists do not belong to these images (counts, dimension, content) or are too short."""
    n_tgt, (n_src, dim) = len(tgt_img), src_img.shape
    where = neighbours.origin
    if (neighbours.n_targets, neighbours.n_sources, neighbours.dim) != (n_tgt, n_src, dim):
        raise BackRetrievalError(
            f"{where}: neighbour lists of {neighbours.n_targets} target and {neighbours.n_sources} source images "
            f"of dim {neighbours.dim}, but the data has {n_tgt} target and {n_src} distinct source images of dim {dim}"
        )
    if neighbours.n_neighbours < min(max_k + 1, n_src):  # one past K: an image tied at the end of a K-list is seen
        raise BackRetrievalError(
            f"{where}: {neighbours.n_neighbours} neighbours per target image, too few for the largest K ({max_k}): "
            f"a list needs K + 1 to see ties at its end; rebuild it with at least {max_k + 1}"
        )
    if neighbours.fingerprint != image_fingerprint(tgt_img, src_img):
        raise BackRetrievalError(
            f"{where}: built from other image features of the same size ({n_tgt} target, {n_src} source images, "
            f"dim {dim}); rebuild it for these"
        )


def check_source_index(index: SourceImageIndex, src_img: np.ndarray) -> None:
    """One-line errors when ``index`` was not built over ``src_img``, the distinct source images it is to rank: their
    number, dimension or content (:func:`features_digest`) differ."""
    (n_src, dim), (n_built, dim_built) = src_img.shape, index.src.shape
    if (n_built, dim_built) != (n_src, dim):
        raise BackRetrievalError(
            f"source_index: built over {n_built} source images of dim {dim_built}, but the data has {n_src} distinct "
            f"source images of dim {dim}; build it over the distinct source images (one row per src_image_ids id)"
        )
    if index.fingerprint != features_digest(src_img):
        raise BackRetrievalError(
            f"source_index: built over other image features of the same size ({n_src} distinct source images, "
            f"dim {dim}); build it over these"
        )


def neighbour_counts(
    neighbours: ImageNeighbours,
    scorer: Scorer,
    row_of_query: np.ndarray,
    col_of_query: np.ndarray,
    ties: str = "pessimistic",
    targets: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """:func:`~backretrieval.ranking.count_ranks`' counts from the lists: ``{"gt"|"ge": (Q,) int64}``.

    ``scorer`` (rows: target images, columns: distinct source images) scores the own image of
    the queries whose list lacks it, in row ``targets[q]`` (default ``row_of_query[q]``: lists
    built for every target image, in the scorer's order). Listed copies of the own image (the
    scorer's ``col_groups``) tie with it, as in ``count_ranks``. Counts are read from the list
    (at most C), except under ``ties="expected"`` for the queries whose own image ties with the
    list's last entry (equal score, or a copy of it): more tied images may lie past the list's
    end, and the expected hit (K - G) / (E + 1) needs all of them, so those queries are counted
    exactly by :func:`~backretrieval.ranking.count_ranks` (stopped at C better images).
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    rows = np.asarray(row_of_query, dtype=np.int64)
    cols = np.asarray(col_of_query, dtype=np.int64)[:, None]
    ids, scores = neighbours.ids[rows], neighbours.scores[rows]
    listed = ids == cols
    own = np.where(listed, scores, -np.inf).max(axis=1)  # the listed score: compared in one arithmetic
    missing = ~listed.any(axis=1)
    score_rows = rows if targets is None else np.asarray(targets, dtype=np.int64)
    own[missing] = rescore(scorer, score_rows[missing], cols[missing])[:, 0]  # the arithmetic of the listed scores
    own, others = own[:, None], ~listed
    groups = column_groups(scorer)
    if groups is None:
        copies = np.zeros_like(listed)
    else:  # listed copies of the own image: tied with it whatever their rounded scores
        copies = others & (ids >= 0) & (groups[np.maximum(ids, 0)] == groups[cols])
    out = {}
    if ties in ("optimistic", "expected"):
        out["gt"] = np.count_nonzero((scores > own) & others & ~copies, axis=1).astype(np.int64)
    if ties in ("pessimistic", "expected"):
        out["ge"] = np.count_nonzero(((scores >= own) | copies) & others, axis=1).astype(np.int64)
    if ties == "expected" and neighbours.n_neighbours < scorer.n_cols:
        last = neighbours.n_neighbours - 1
        full = ids[:, last] >= 0
        at_end = full & ((scores[:, last] == own[:, 0]) | copies[:, last] | listed[:, last])
        recount = np.flatnonzero(at_end)
        if len(recount):  # ties may run past the list's end: count those queries exactly
            exact = count_ranks(scorer, score_rows[recount], cols[recount, 0], ties, neighbours.n_neighbours)
            for key in out:
                out[key][recount] = exact[key]
    return out
