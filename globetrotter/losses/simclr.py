"""L_v: SimCLR's NT-Xent loss between two augmented views of each image (paper eq. 3)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NTXentLoss"]


class NTXentLoss(nn.Module):
    """Normalised temperature-scaled cross-entropy over the 2N views of N images.

    The two batches of views are stacked into z_1..z_2N (z_k and z_{k+N} are views of
    image k) and L2-normalised. With s_ij = z_i·z_j (cosine similarity) and the
    positive p(i) = the other view of the same image (Chen et al. 2020; Globetrotter
    eq. 3 with α^v_ij = sim(z^v_i, z^v_j))::

        ℓ_i = -log  exp(s_{i,p(i)}/τ) / Σ_{k≠i} exp(s_ik/τ)
        L_v = 1/(2N) Σ_{i=1}^{2N} ℓ_i

    Every other view (2(N-1) of them) is a negative. Pass the *global* batch (see
    :mod:`globetrotter.losses.gather`); computed in float32.

    Args:
        temperature: τ (paper and official code: 0.1).
    """

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """z1, z2: [N, D] features of the first and second views. Returns a scalar."""
        if z1.shape != z2.shape or z1.dim() != 2:
            raise ValueError(f"expected two [N, D] tensors of one shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
        n = z1.shape[0]
        z = F.normalize(torch.cat([z1, z2]).float(), dim=-1)
        self_pairs = torch.eye(2 * n, dtype=torch.bool, device=z.device)
        logits = (z @ z.T / self.temperature).masked_fill(self_pairs, float("-inf"))
        idx = torch.arange(n, device=z.device)
        positives = torch.cat([idx + n, idx])
        return F.cross_entropy(logits, positives)
