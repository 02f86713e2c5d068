"""L_x: symmetric InfoNCE between each caption and its image (paper eq. 4)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CrossModalLoss"]


def _symmetric_infonce(text: Tensor, image: Tensor, temperature: float) -> Tensor:
    """Mean of the text→image and image→text cross-entropies; inputs already normalised."""
    logits = text @ image.T / temperature
    targets = torch.arange(text.shape[0], device=text.device)
    return 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets))


class CrossModalLoss(nn.Module):
    """Symmetric caption–image contrastive loss (CLIP-style InfoNCE).

    With t_i, v_i the L2-normalised caption and image features and α^x_ij = v_i·t_j
    (Globetrotter eq. 4, averaged over the N samples instead of summed)::

        L_x = 1/(2N) Σ_i [ -log exp(α^x_ii/τ) / Σ_j exp(α^x_ij/τ)
                           -log exp(α^x_ii/τ) / Σ_j exp(α^x_ji/τ) ]

    i.e. the image→text and text→image cross-entropies, each a mean over the batch.
    When ``image2`` (the second augmented view) is given, the caption is contrasted with
    both views in both directions, as the authors' code does, and the two symmetric
    losses are averaged: L_x = ½ (L_x(t, v¹) + L_x(t, v²)). (The released code puts
    both views into one 2N-way softmax, where the other view of the same image competes
    as a negative; here each view is its own N-way problem, so a perfect match can reach
    zero loss.) Pass the *global* batch; computed in float32.

    Args:
        temperature: τ (official code: 0.1).
    """

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature

    def forward(self, text: Tensor, image: Tensor, image2: Tensor | None = None) -> Tensor:
        """text, image, image2: [N, D] (image2 optional). Returns a scalar."""
        if text.shape != image.shape or text.dim() != 2 or (image2 is not None and image2.shape != image.shape):
            shapes = [tuple(t.shape) for t in (text, image, image2) if t is not None]
            raise ValueError(f"expected [N, D] tensors of one shape, got {shapes}")
        t = F.normalize(text.float(), dim=-1)
        loss = _symmetric_infonce(t, F.normalize(image.float(), dim=-1), self.temperature)
        if image2 is not None:
            loss = 0.5 * (loss + _symmetric_infonce(t, F.normalize(image2.float(), dim=-1), self.temperature))
        return loss
