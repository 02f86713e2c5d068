"""The adaptation's objective: the Globetrotter losses on new-language batches, L_t also over the bank's frozen
old-language captions."""
from __future__ import annotations

import torch

from ..objective import GlobetrotterObjective, language_codes


class AdaptationObjective(GlobetrotterObjective):
    """The Globetrotter objective on new-language batches: L_t also contrasts them with the bank's
    frozen old-language captions (``old_*`` entries of the batch); the image side is fixed (no L_v)."""

    trains_images = False

    def _text_inputs(self, gathered: dict[str, torch.Tensor], truth: torch.Tensor,
                     batch: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None]:
        feats = {k: torch.cat([v, batch[f"old_{k}"].to(v)]) if f"old_{k}" in batch else v for k, v in gathered.items()}
        n_new, n_old = truth.shape[0], batch["old_truth"].shape[0]
        new = torch.arange(n_new + n_old, device=truth.device) < n_new
        return feats, torch.cat([truth, batch["old_truth"].to(truth)]), new[:, None] | new[None, :]

    def _language_codes(self, batch: dict, device: torch.device) -> torch.Tensor:
        return torch.cat([super()._language_codes(batch, device), language_codes(batch["old_langs"], device)])
