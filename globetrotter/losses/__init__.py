"""The four Globetrotter losses (paper eq. 5: L_t + λ1 L_v + λ2 L_x + λ3 L_c) and feature gathering.

Contrastive losses are computed on the global batch: gather the features of all
processes first (one collective for all of them)::

    t_t, t_x, x1, x2, v1, v2 = gather_many([text_t, text_x, img_x1, img_x2, img_v1, img_v2])
    alpha = transitive_alpha(t_x, x1, v1, margin=0.4, variant="paper")   # no grad
    loss = (TransitiveTextLoss()(t_t, alpha) + lam_v * NTXentLoss()(v1, v2)
            + lam_x * CrossModalLoss()(t_x, x1, x2) + lam_c * ClozeLoss()(logits, labels))

(x1/x2: cross-modal image features of the two views, v1/v2: visual ones.) The
loss weights live in the training config; the cloze loss is per sample (not gathered).
"""
from globetrotter.losses.cloze import IGNORE_INDEX, ClozeLoss, cloze_accuracy, cloze_sums, mask_tokens
from globetrotter.losses.crossmodal import CrossModalLoss
from globetrotter.losses.gather import gather_features, gather_many, rank, rank_offset, world_size
from globetrotter.losses.simclr import NTXentLoss
from globetrotter.losses.transitive import TransitiveTextLoss, alpha_stats, supervised_alpha, transitive_alpha

__all__ = [
    "IGNORE_INDEX",
    "ClozeLoss",
    "CrossModalLoss",
    "NTXentLoss",
    "TransitiveTextLoss",
    "alpha_stats",
    "cloze_accuracy",
    "cloze_sums",
    "gather_features",
    "gather_many",
    "mask_tokens",
    "rank",
    "rank_offset",
    "supervised_alpha",
    "transitive_alpha",
    "world_size",
]
