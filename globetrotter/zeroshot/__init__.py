"""The XTD10 zero-shot system (Aggarwal et al. 2020) and BackRetrieval's Triplet/TripletXL case study.

- :mod:`.adapter`: frozen sentence embeddings -> frozen image-feature space (section 3.1).
- :mod:`.losses`: M3L (eq. 1) and PATR (eq. 2) with in-batch hard-negative mining (3.2).
- :mod:`.train`: the adapter's training loop over cached features, and its checkpoints.
- :mod:`.retrieval`: text->image Recall@K per language (Tables 2 and 3).
- :mod:`.tagging`: zero-shot multilingual image tagging (3.3.2, eqs. 3-5).
- :mod:`.triplet`: the siamese Triplet / TripletXL adapter of the BackRetrieval paper (3.2).
- :mod:`.case_study`: that paper's case study, Triplet and TripletXL judged by BackRetrieval (Fig. 3).
- :mod:`.cli`: the ``zeroshot`` command (train, retrieval, tag, tag-eval, triplet), a module per sub-command.
"""
from .adapter import TextToImageAdapter
from .config import AdapterConfig, LossConfig, OptimConfig, ZeroShotConfig
from .losses import M3Loss, PATRLoss, m3l_loss, mine_hard_negatives, patr_loss
from .retrieval import chance_recall, recall_at_k, zero_shot_recall
from .tagging import assign_target_tags, imagenet_class_names, tag_images
from .train import load_adapter, save_adapter, train_adapter
from .triplet import SiameseAdapter, TripletConfig, cross_lingual_knn_loss, train_siamese, triplet_loss

__all__ = [
    "TextToImageAdapter",
    "AdapterConfig",
    "LossConfig",
    "OptimConfig",
    "ZeroShotConfig",
    "M3Loss",
    "PATRLoss",
    "m3l_loss",
    "patr_loss",
    "mine_hard_negatives",
    "recall_at_k",
    "chance_recall",
    "zero_shot_recall",
    "assign_target_tags",
    "imagenet_class_names",
    "tag_images",
    "train_adapter",
    "save_adapter",
    "load_adapter",
    "SiameseAdapter",
    "TripletConfig",
    "triplet_loss",
    "cross_lingual_knn_loss",
    "train_siamese",
]
