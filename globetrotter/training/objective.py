"""The Globetrotter objective: Total = L_t + λ1 L_v + λ2 L_x + λ3 L_c over the global batch.

Features are all-gathered across processes with gradient (open_clip's ``gather_with_grad``),
so every process computes the same global contrastive losses. Cloze is a per-token mean
over the global batch: each process contributes its token sum divided by the global token
count, times the world size (DDP averages gradients over processes).
"""
from __future__ import annotations

import zlib
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

from ..config import LossConfig
from ..losses import (
    CrossModalLoss,
    NTXentLoss,
    TransitiveTextLoss,
    alpha_stats,
    cloze_sums,
    gather_many,
    supervised_alpha,
    transitive_alpha,
    world_size,
)


def language_codes(langs: Sequence[str], device: torch.device | str = "cpu") -> torch.Tensor:
    """An integer code per language code (CRC-32), equal for equal languages on every process."""
    return torch.tensor([zlib.crc32(lang.encode()) for lang in langs], device=device)


class GlobetrotterObjective(nn.Module):
    """Computes the weighted loss and a dict of logged scalars from model outputs and the batch."""

    trains_images = True  # False: the image side is fixed (adaptation), L_v has nothing to train

    def __init__(self, cfg: LossConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.image_loss = NTXentLoss(cfg.temperature)
        self.cross_loss = CrossModalLoss(cfg.temperature)
        self.text_loss = TransitiveTextLoss(cfg.temperature, cfg.margin, cfg.transitive)

    def _cloze(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global per-token cross-entropy and accuracy (as process-local terms that average to the global value)."""
        total, count, correct = cloze_sums(logits, labels)
        stats = torch.stack([count, correct]).to(total.dtype)
        if world_size() > 1:
            dist.all_reduce(stats)
        global_count = stats[0].clamp_min(1)
        return total / global_count * world_size(), stats[1] / global_count

    def _text_inputs(self, gathered: dict[str, torch.Tensor], truth: torch.Tensor,
                     batch: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None]:
        """What L_t contrasts: the features (``text_t``, ``text_x``, ``image_x1``, ``image_v1``...) and truth
        ids of its N captions, and a boolean [N, N] mask of the pairs that count (None: all). Here the global
        batch; adaptation appends the old languages' frozen features (:mod:`.adapt`)."""
        return gathered, truth, None

    def _language_codes(self, batch: dict, device: torch.device) -> torch.Tensor:
        """An integer code of each of L_t's captions' language, in :meth:`_text_inputs`'s order."""
        return gather_many([language_codes(batch["langs"], device)])[0]

    @staticmethod
    def _cross_language_share(alpha: torch.Tensor, codes: torch.Tensor) -> float:
        """Share of α's positive pairs whose captions are in different languages (the pairs that transfer)."""
        positive = alpha > 0
        n_pos = int(positive.sum())
        return float((positive & (codes[:, None] != codes[None, :])).sum()) / n_pos if n_pos else float("nan")

    def forward(self, out: dict[str, torch.Tensor], batch: dict, cloze_labels: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, float]]:
        """The weighted total of the loss terms over the global batch, and the scalars to log (each term, α's
        statistics, cloze accuracy)."""
        cfg = self.cfg
        keys = [k for k in ("text_t", "text_x", "image_v1", "image_v2", "image_x1", "image_x2", "image_raw1") if k in out]
        gathered: dict[str, torch.Tensor] = dict(zip(keys, gather_many([out[k].float() for k in keys])))
        truth = gather_many([batch["truth"]])[0]
        terms: dict[str, torch.Tensor] = {}
        logs: dict[str, float] = {}
        if cfg.image > 0 and self.trains_images:
            terms["image"] = self.image_loss(gathered["image_v1"], gathered["image_v2"])
        if cfg.cross > 0:
            second = gathered.get("image_x2") if cfg.transitive == "official" else None
            terms["cross"] = self.cross_loss(gathered["text_x"], gathered["image_x1"], second)
        if cfg.text > 0:
            feats, text_truth, keep = self._text_inputs(gathered, truth, batch)
            if cfg.alpha_source == "supervised":
                alpha = supervised_alpha(text_truth) if keep is None else supervised_alpha(text_truth) * keep
            else:
                visual = feats.get("image_v1", feats.get("image_x1", feats.get("image_raw1")))
                # a transitive α has image features (LossConfig.uses_images: the model's image side, the batch's views)
                assert visual is not None
                if "text_x" in feats:
                    text_x, image_x = feats["text_x"], feats["image_x1"]
                else:  # no L_x: no cross-modal confidence, a factor of 1 for every caption
                    text_x = image_x = torch.ones_like(visual[:, :1])
                alpha = transitive_alpha(text_x, image_x, visual, margin=cfg.margin, variant=cfg.transitive, pairs=keep)
            terms["text"] = self.text_loss(feats["text_t"], alpha)
            known = text_truth >= 0
            truth_matrix = (text_truth[:, None] == text_truth[None, :]) if bool(known.all()) else None
            logs.update({k: float(v) for k, v in alpha_stats(alpha, truth_matrix).items()})
            if "langs" in batch:
                logs["alpha/cross_language_share"] = self._cross_language_share(alpha, self._language_codes(batch, truth.device))
        if cfg.cloze > 0 and cloze_labels is not None:
            terms["cloze"], accuracy = self._cloze(out["cloze_logits"], cloze_labels)
            logs["cloze/accuracy"] = float(accuracy)
        weights = {"text": cfg.text, "image": cfg.image, "cross": cfg.cross, "cloze": cfg.cloze}
        total = sum(weights[k] * v for k, v in terms.items())
        # never the empty sum 0: LossConfig.validate keeps a weight > 0, cloze labels come with loss.cloze > 0, and an
        # adaptation whose only loss is L_v (no image term here) is refused at its start
        assert isinstance(total, torch.Tensor)
        for k, v in terms.items():
            value = v.detach()
            if k == "cloze" and world_size() > 1:
                value = value / world_size()
                dist.all_reduce(value)
            logs[f"loss/{k}"] = float(value)
        return total, logs
