"""The Globetrotter objective: Total = L_t + λ1 L_v + λ2 L_x + λ3 L_c over the global batch.

Features are all-gathered across processes with gradient (open_clip's ``gather_with_grad``),
so every process computes the same global contrastive losses. Cloze is a per-token mean
over the global batch: each process contributes its token sum divided by the global token
count, times the world size (DDP averages gradients over processes).
"""
from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
from torch import nn

from ..config import LossConfig
from ..losses import (
    ClozeLoss,
    CrossModalLoss,
    NTXentLoss,
    TransitiveTextLoss,
    alpha_stats,
    gather_many,
    supervised_alpha,
    transitive_alpha,
    world_size,
)


class GlobetrotterObjective(nn.Module):
    """Computes the weighted loss and a dict of logged scalars from model outputs and the batch."""

    def __init__(self, cfg: LossConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.image_loss = NTXentLoss(cfg.temperature)
        self.cross_loss = CrossModalLoss(cfg.temperature)
        self.text_loss = TransitiveTextLoss(cfg.temperature, cfg.margin, cfg.transitive)
        self.cloze_loss = ClozeLoss()

    def _cloze(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global per-token cross-entropy and accuracy (as process-local terms that average to the global value)."""
        targets = labels != -100
        picked = logits if logits.dim() == 2 else logits[targets]  # [n_targets, V] already, or [B, L, V]
        total = torch.nn.functional.cross_entropy(picked.float(), labels[targets], reduction="sum")
        count = targets.sum().to(total.dtype)
        correct = (picked.argmax(-1) == labels[targets]).sum().to(total.dtype)
        stats = torch.stack([count, correct])
        if world_size() > 1:
            dist.all_reduce(stats)
        global_count = stats[0].clamp_min(1)
        return total / global_count * world_size(), stats[1] / global_count

    @staticmethod
    def _cross_language_share(alpha: torch.Tensor, langs: list[str], device: torch.device) -> float:
        """Share of α's positive pairs whose captions are in different languages (the pairs that transfer)."""
        codes = gather_many([torch.tensor([zlib.crc32(lang.encode()) for lang in langs], device=device)])[0]
        positive = alpha > 0
        n_pos = int(positive.sum())
        return float((positive & (codes[:, None] != codes[None, :])).sum()) / n_pos if n_pos else float("nan")

    def forward(self, out: dict[str, torch.Tensor], batch: dict, cloze_labels: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.cfg
        keys = [k for k in ("text_t", "text_x", "image_v1", "image_v2", "image_x1", "image_x2", "image_raw1") if k in out]
        gathered = dict(zip(keys, gather_many([out[k].float() for k in keys])))
        truth = gather_many([batch["truth"]])[0]
        terms: dict[str, torch.Tensor] = {}
        logs: dict[str, float] = {}
        if cfg.image > 0:
            terms["image"] = self.image_loss(gathered["image_v1"], gathered["image_v2"])
        if cfg.cross > 0:
            second = gathered.get("image_x2") if cfg.transitive == "official" else None
            terms["cross"] = self.cross_loss(gathered["text_x"], gathered["image_x1"], second)
        if cfg.text > 0:
            if cfg.alpha_source == "supervised":
                alpha = supervised_alpha(truth)
            else:
                visual = gathered.get("image_v1", gathered.get("image_x1", gathered.get("image_raw1")))
                if "text_x" in gathered:
                    text_x, image_x = gathered["text_x"], gathered["image_x1"]
                else:  # no L_x: no cross-modal confidence, a factor of 1 for every caption
                    text_x = image_x = torch.ones_like(visual[:, :1])
                alpha = transitive_alpha(text_x, image_x, visual, margin=cfg.margin, variant=cfg.transitive)
            terms["text"] = self.text_loss(gathered["text_t"], alpha)
            known = truth >= 0
            truth_matrix = (truth[:, None] == truth[None, :]) if bool(known.all()) else None
            logs.update({k: float(v) for k, v in alpha_stats(alpha, truth_matrix).items()})
            if "langs" in batch:
                logs["alpha/cross_language_share"] = self._cross_language_share(alpha, batch["langs"], truth.device)
        if cfg.cloze > 0 and cloze_labels is not None:
            terms["cloze"], accuracy = self._cloze(out["cloze_logits"], cloze_labels)
            logs["cloze/accuracy"] = float(accuracy)
        weights = {"text": cfg.text, "image": cfg.image, "cross": cfg.cross, "cloze": cfg.cloze}
        total = sum(weights[k] * v for k, v in terms.items())
        for k, v in terms.items():
            value = v.detach()
            if k == "cloze" and world_size() > 1:
                value = value / world_size()
                dist.all_reduce(value)
            logs[f"loss/{k}"] = float(value)
        return total, logs
