"""BackRetrieval: judge cross-lingual text embeddings without parallel text, through images.

Fain, Twomey & Bollegala, SIGIR 2021 (../shared/papers/backretrieval.md). Standalone: this
package depends on numpy, scipy, faiss and torch only (timm for image features,
matplotlib for plots) and imports nothing from ``globetrotter``.

Main entry points::

    from backretrieval import bkr_recall, xlr_recall, corr_score, evaluate_pairs, run_protocol
    res = bkr_recall(src_text, src_img, tgt_text, tgt_img, ks=(1, 5, 10))   # res["bkr@10"], res["ranks"]
"""
from .embedders import NoisyEmbedder, RandomEmbedder, TextEmbedder, load_embedder, register_embedder
from .errors import BackRetrievalError
from .metric import bkr_recall, corr_score, xlr_recall
from .pairs import evaluate_pairs
from .protocol import correlate_over_models, run_protocol, sample_non_matching

__all__ = [
    "BackRetrievalError",
    "NoisyEmbedder",
    "RandomEmbedder",
    "TextEmbedder",
    "bkr_recall",
    "correlate_over_models",
    "corr_score",
    "evaluate_pairs",
    "load_embedder",
    "register_embedder",
    "run_protocol",
    "sample_non_matching",
    "xlr_recall",
]
