"""Clustering of the representation space (Globetrotter paper, appendix A.4, Fig. 10).

k-means (k = 50 in the paper; spherical, faiss) over the embeddings of parallel test
sentences, then how the clusters align with *language* versus *meaning* (the group, i.e.
the image a sentence describes):

- ``language_purity`` = Σ_c max_l n_{c,l} / N: the share of sentences whose cluster's
  majority language is their own. 1 when clusters are language-specific (the text-only
  model in Fig. 10); about 1/M when languages are mixed.
- ``meaning_purity`` = Σ_g max_c n_{g,c} / N: the share of sentences that sit in the
  cluster holding most of their group's translations. 1 when all translations of a
  caption fall in one cluster (the full model in Fig. 10); about 1/M when each language
  clusters apart.
- ``nmi_language`` / ``nmi_meaning``: normalised mutual information (arithmetic mean of
  entropies, as scikit-learn) between the clustering and the language / group labels.

Each is also reported for a seeded random shuffle of the cluster labels (same cluster
sizes) as the chance level.
"""
from __future__ import annotations

from typing import Sequence

import faiss
import numpy as np
from backretrieval.files import check_matrix, require_count
from scipy import sparse
from scipy.stats import entropy


def kmeans_labels(emb: np.ndarray, k: int = 50, seed: int = 0, niter: int = 25, nredo: int = 3) -> np.ndarray:
    """Cluster index (N,) of each row of ``emb`` by spherical k-means with ``k`` clusters (faiss),
    keeping the best of ``nredo`` seeded restarts."""
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    k = min(k, len(emb))
    km = faiss.Kmeans(emb.shape[1], k, niter=niter, nredo=nredo, seed=seed, spherical=True, verbose=False,
                      min_points_per_centroid=1)
    km.train(emb)
    _, labels = km.index.search(emb, 1)
    return labels.ravel().astype(np.int64)


def _contingency(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dense (n_a, n_b) count table of label pairs (labels are exact-value coded)."""
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    ai, bi = ai.reshape(-1), bi.reshape(-1)
    return sparse.coo_matrix((np.ones(len(ai)), (ai, bi)), shape=(ai.max() + 1, bi.max() + 1)).toarray()


def nmi(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised mutual information, ``MI / mean(H(a), H(b))`` (natural log)."""
    table = _contingency(a, b)
    p = table / table.sum()
    pa, pb = p.sum(1), p.sum(0)
    nz = p > 0
    mi = float((p[nz] * np.log(p[nz] / np.outer(pa, pb)[nz])).sum())
    h = 0.5 * (entropy(pa) + entropy(pb))
    return mi / h if h > 0 else 1.0


def purity_scores(labels: np.ndarray, langs: Sequence | np.ndarray, groups: Sequence | np.ndarray) -> dict:
    """Language purity, meaning purity and both NMIs of a clustering (see module docstring)."""
    labels, langs, groups = np.asarray(labels), np.asarray(langs), np.asarray(groups)
    n = len(labels)
    if n == 0 or langs.shape[:1] != (n,) or groups.shape[:1] != (n,):  # scipy's coo_matrix error
        raise ValueError(f"labels has shape {labels.shape}, langs {langs.shape}, groups {groups.shape}; expected one "
                         "label, language and group per sentence (at least one)")
    by_lang = _contingency(labels, langs)  # (clusters, languages)
    by_group = _contingency(groups, labels)  # (groups, clusters)
    return {
        "language_purity": float(by_lang.max(axis=1).sum() / n),
        "meaning_purity": float(by_group.max(axis=1).sum() / n),
        "nmi_language": nmi(labels, langs),
        "nmi_meaning": nmi(labels, groups),
    }


def cluster_analysis(
    emb: np.ndarray,
    langs: Sequence[str] | np.ndarray,
    groups: Sequence | np.ndarray,
    captions: Sequence[str] | None = None,
    k: int = 50,
    seed: int = 0,
    n_examples: int = 3,
) -> dict:
    """k-means (``k`` clusters) over ``emb`` (N, D) and its language/meaning purity.

    Returns the scores of :func:`purity_scores`, the same scores for shuffled cluster
    labels (``chance``), cluster sizes, and for the first ``n_examples`` clusters
    ``n_examples`` member sentences with their language (as the paper's Fig. 10).
    """
    require_count(k, "k")  # clusters
    emb = check_matrix("emb", emb, vectors=False)  # NaN rows, a 1-D array: one line, not faiss' assertion
    if len(langs) != len(emb) or len(groups) != len(emb) or captions is not None and len(captions) != len(emb):
        raise ValueError(f"emb has {len(emb)} rows but langs has {len(langs)}, groups {len(groups)}"
                         + ("" if captions is None else f" and captions {len(captions)}") + "; expected one each")
    labels = kmeans_labels(emb, k, seed)
    scores = purity_scores(labels, langs, groups)
    shuffled = np.random.default_rng(seed).permutation(labels)
    langs = np.asarray(langs)
    examples = []
    if captions is not None:
        for c in range(min(n_examples, labels.max() + 1)):
            members = np.flatnonzero(labels == c)[:n_examples]
            examples.append({"cluster": c, "sentences": [{"lang": str(langs[i]), "text": captions[i]} for i in members]})
    return {
        **scores,
        "chance": purity_scores(shuffled, langs, groups),
        "k": int(labels.max() + 1),
        "cluster_sizes": np.bincount(labels).tolist(),
        "examples": examples,
    }
