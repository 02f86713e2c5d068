"""BackRetrieval: judge cross-lingual text embeddings without parallel text, through images.

Fain, Twomey & Bollegala, SIGIR 2021 (../shared/papers/backretrieval.md). Standalone: this
package depends on numpy, scipy, faiss and torch only (timm for image features,
matplotlib for plots) and imports nothing from ``globetrotter``.

Main entry points::

    from backretrieval import bkr_recall, xlr_recall, corr_score, evaluate_pairs, run_protocol
    res = bkr_recall(src_text, src_img, tgt_text, tgt_img, ks=(1, 5, 10))   # res["bkr@10"], res["ranks"]
    recall_interval(res["hits"][10])                # bootstrap 95% interval over queries
    compare_hits(res_a["hits"][10], res_b["hits"][10])  # McNemar + paired bootstrap, p-value
    bkr_recall(..., retrieval="csls", approximate=True)  # hubness-corrected / large-N variants
    lists = image_neighbours(src_img, tgt_img)      # once per image set (save_image_neighbours to keep)
    bkr_recall(..., approximate=True, image_neighbours=lists)  # step 4 a lookup, for every text model
"""
from .embedders import NoisyEmbedder, RandomEmbedder, TextEmbedder, load_embedder, register_embedder
from .approximate import ApproxConfig
from .errors import BackRetrievalError
from .hubness import hubness_stats
from .image_index import ImageNeighbours, image_neighbours, load_image_neighbours, save_image_neighbours
from .metric import bkr_recall, corr_score, xlr_recall
from .pairs import evaluate_pairs
from .protocol import correlate_over_models, run_protocol, sample_non_matching
from .uncertainty import better_beyond_noise, compare_hits, corr_interval, p_better, recall_interval

__all__ = [
    "ApproxConfig",
    "BackRetrievalError",
    "ImageNeighbours",
    "NoisyEmbedder",
    "RandomEmbedder",
    "TextEmbedder",
    "better_beyond_noise",
    "bkr_recall",
    "compare_hits",
    "corr_interval",
    "correlate_over_models",
    "corr_score",
    "evaluate_pairs",
    "hubness_stats",
    "image_neighbours",
    "load_image_neighbours",
    "load_embedder",
    "p_better",
    "recall_interval",
    "register_embedder",
    "run_protocol",
    "save_image_neighbours",
    "sample_non_matching",
    "xlr_recall",
]
