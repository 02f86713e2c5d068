"""Projection heads: one per job (paper section 3, appendix B.1)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ProjectionHead(nn.Module):
    """dense -> GELU -> LayerNorm -> linear to ``out_dim``, L2-normalised: (B, in_dim) -> (B, out_dim)."""

    def __init__(self, in_dim: int, out_dim: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, in_dim), nn.GELU(), nn.LayerNorm(in_dim), nn.Linear(in_dim, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The projection of ``x``, scaled to unit length."""
        return F.normalize(self.net(x), dim=-1)


class CentredFeatureHead(nn.Module):
    """No learned projection: the frozen backbone's own features, centred and L2-normalised.

    The centre is a running mean of the features seen in training (the first batch sets it,
    then an exponential average with ``momentum``), kept as a buffer so a checkpoint carries
    it; evaluation uses it as it stands. With ``model.image_head_x: features`` L_x pulls each
    caption towards this fixed description of its image: a learned image head over frozen
    features can instead learn to tell the few thousand training images apart, which the
    captions then memorise (docs/design.md section 11).
    """

    mean: torch.Tensor  # buffers (register_buffer), declared so mypy reads them as tensors
    seen: torch.Tensor

    def __init__(self, dim: int, momentum: float = 0.01) -> None:
        super().__init__()
        self.momentum = momentum
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` L2-normalised, less the centre, L2-normalised again; in training the batch first moves the centre."""
        x = F.normalize(x.float(), dim=-1)
        if self.training:
            with torch.no_grad():
                batch_mean = x.mean(0)
                if int(self.seen) == 0:
                    self.mean.copy_(batch_mean)
                else:
                    self.mean.lerp_(batch_mean, self.momentum)
                self.seen += 1
        return F.normalize(x - self.mean, dim=-1)
