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
        return F.normalize(self.net(x), dim=-1)
