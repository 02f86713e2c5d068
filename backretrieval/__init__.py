"""BackRetrieval: judge cross-lingual text embeddings without parallel text, through images.

Fain, Twomey & Bollegala, "BackRetrieval: An Image-Pivoted Evaluation Metric for Cross-Lingual Text
Representations Without Parallel Corpora", SIGIR 2021. Standalone: this
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

What each ``backretrieval`` command runs, as functions returning results whose ``to_record()``
is the command's JSON record::

    score("en.npy", "de.npy", src_img="en_img.npy", tgt_img="de_img.npy")   # score: arrays or .npy paths
    compare(a_en, a_de, b_en, b_de, src_img=..., tgt_img=...)            # compare: A vs B, paired tests
    g = image_feature_extractor()   # the commands' default g: efficientnet_lite0, offline ImageNet weights
    evaluate_split("outputs/flickr8k/val", ["USE=use", "random:512"], extractor=g)  # eval: every language pair
    correlate_split("outputs/flickr8k/test", specs, extractor=g, pairs=["en-de"])   # correlate: the paper's protocol
    np.save("en_img.npy", g.extract(["photos/1.jpg", "photos/2.jpg"]))  # score's --src-img from your own photos
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

# Each submodule -> the public names it defines, imported on first use (PEP 562): ``import backretrieval`` (and
# ``import globetrotter``, through ``backretrieval.errors``) loads neither numpy, scipy.stats nor faiss until a name
# that needs them is asked for.
_EXPORTS = {
    "approximate": ("ApproxConfig",),
    "comparison": ("CompareResult", "compare"),
    "data": ("load_split",),
    "embedders": ("embed_captions", "load_embedder", "parse_model_specs", "register_embedder"),
    "errors": ("BackRetrievalError", "BackRetrievalWarning"),
    "evaluate": ("SplitCorrelation", "SplitEvaluation", "correlate_split", "evaluate_split"),
    "hubness": ("hubness_stats",),
    "images": ("image_feature_extractor",),  # numpy and PIL only: torch and timm load with the first CNN
    "image_index": ("ImageNeighbours", "image_neighbours"),
    "image_index_file": ("image_neighbours_file", "load_image_neighbours", "save_image_neighbours"),
    "metric": ("bkr_recall", "corr_score", "xlr_recall"),
    "pairs": ("evaluate_pairs",),
    "protocol": ("correlate_over_models", "run_protocol", "sample_non_matching"),
    "scoring": ("ScoreResult", "score"),
    "text_models": ("NoisyEmbedder", "RandomEmbedder", "TextEmbedder"),
    "uncertainty": ("better_beyond_noise", "compare_hits", "corr_interval", "p_better", "recall_interval"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

# what a type checker sees of the lazy names: each as its submodule defines it, exported by the literal __all__ below
# (a checker reads no computed one); tests/test_types.py keeps both equal to _EXPORTS
if TYPE_CHECKING:
    from .approximate import ApproxConfig
    from .comparison import CompareResult, compare
    from .data import load_split
    from .embedders import embed_captions, load_embedder, parse_model_specs, register_embedder
    from .errors import BackRetrievalError, BackRetrievalWarning
    from .evaluate import SplitCorrelation, SplitEvaluation, correlate_split, evaluate_split
    from .hubness import hubness_stats
    from .image_index import ImageNeighbours, image_neighbours
    from .image_index_file import image_neighbours_file, load_image_neighbours, save_image_neighbours
    from .images import image_feature_extractor
    from .metric import bkr_recall, corr_score, xlr_recall
    from .pairs import evaluate_pairs
    from .protocol import correlate_over_models, run_protocol, sample_non_matching
    from .scoring import ScoreResult, score
    from .text_models import NoisyEmbedder, RandomEmbedder, TextEmbedder
    from .uncertainty import better_beyond_noise, compare_hits, corr_interval, p_better, recall_interval

__all__ = ["ApproxConfig", "BackRetrievalError", "BackRetrievalWarning", "CompareResult", "ImageNeighbours",
           "NoisyEmbedder", "RandomEmbedder", "ScoreResult", "SplitCorrelation", "SplitEvaluation", "TextEmbedder",
           "better_beyond_noise", "bkr_recall", "compare", "compare_hits", "corr_interval", "corr_score",
           "correlate_over_models", "correlate_split", "embed_captions", "evaluate_pairs", "evaluate_split",
           "hubness_stats", "image_feature_extractor", "image_neighbours", "image_neighbours_file", "load_embedder",
           "load_image_neighbours", "load_split", "p_better", "parse_model_specs", "recall_interval",
           "register_embedder", "run_protocol", "sample_non_matching", "save_image_neighbours", "score", "xlr_recall"]


def __getattr__(name: str) -> object:
    """A public name, imported from its submodule on first use and kept (PEP 562); a submodule's name imports it
    (``backretrieval.embedders.X`` after ``import backretrieval``, as when this package imported them all)."""
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    elif name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
