"""Metric-learning losses of the XTD10 paper, with online hard-negative mining.

Aggarwal et al. 2020, section 3.2. For each caption (the anchor text) and its image (the
positive), the hardest negative image inside the mini-batch is mined online (the image
closest to the anchor that is not its own), and the caption paired with that image in the
batch is the negative text. ``d(x, y)`` is the *squared* Euclidean distance throughout.

- M3L, eq. (1): ``alpha1 * d(a, p)^rho / d(a, n_img)^rho + alpha2 * d(a, p)^rho / d(a, n_txt)^rho``
  with rho = 4, alpha1 = 0.5, alpha2 = 1 (the paper's best).
- PATR, eq. (2): ``d(a, p) + max(0, eta - d(a, n_img))`` with eta = 1100 (the paper's value,
  for un-normalised ResNet-152 features; eta is a squared distance, so it must be set for
  the scale of the image features in use: see :func:`typical_squared_distance`).

Observed behaviour of M3L as written (Flickr8k, frozen mUSE -> EfficientNet-Lite0 features):
text->image distances stay about as large as the spread between random images (a modality
gap), while an adapter that retrieves well maps similar captions close together, so its
``d(a, p) / d(a, n_txt)`` ratios are > 1 and rho = 4 turns them into huge losses. Measured on
training batches, the negative-text term scores a chance-level adapter far better than the
PATR adapter that retrieves well, so the optimiser settles at chance; with alpha2 = 0
the outputs grow instead until every ratio is 1. What makes M3L train is in
docs/zeroshot.md (M3L; ``configs/zeroshot/m3l.yaml``). PATR learns with its defaults.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

PAPER_RHO, PAPER_ALPHA1, PAPER_ALPHA2 = 4.0, 0.5, 1.0  # eq. (1)
PAPER_ETA = 1100.0  # eq. (2), ResNet-152 pooled features
TextTerm = Literal["image", "anchor"]
Negatives = Literal["hardest", "random"]


def squared_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-wise squared Euclidean distance ``sum((x - y)^2, -1)``: ``[B, D], [B, D] -> [B]``."""
    return (x - y).pow(2).sum(-1)


def pairwise_squared_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """All squared Euclidean distances ``[N, D], [M, D] -> [N, M]`` (clamped at 0)."""
    dist = (x * x).sum(-1, keepdim=True) - 2.0 * x @ y.T + (y * y).sum(-1)
    return dist.clamp_min_(0.0)


@torch.no_grad()
def mine_hard_negatives(
    text: torch.Tensor, image: torch.Tensor, image_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the hardest in-batch negative image for each anchor text.

    ``text`` and ``image`` are ``[B, D]`` and row ``i`` is a (caption, image) pair. The
    negative of anchor ``i`` is ``argmin_j d(text_i, image_j)`` over the rows ``j`` whose
    image differs from row ``i``'s (``image_ids`` ``[B]`` says which rows share an image;
    without it only ``j == i`` is excluded). Its negative text is ``text[j]``, the caption
    paired with that image. Returns ``(index [B] long, valid [B] bool)``; ``valid`` is False
    for a row with no negative at all (every row shows its image), whose index is itself.
    """
    batch = text.shape[0]
    dist = pairwise_squared_distance(text.float(), image.float())
    if image_ids is None:
        same = torch.eye(batch, dtype=torch.bool, device=text.device)
    else:
        same = image_ids[:, None] == image_ids[None, :]
    dist = dist.masked_fill(same, float("inf"))
    index = dist.argmin(dim=1)
    valid = torch.isfinite(dist.gather(1, index[:, None]).squeeze(1))
    index = torch.where(valid, index, torch.arange(batch, device=text.device))
    return index, valid


@torch.no_grad()
def random_negatives(batch: int, image_ids: torch.Tensor | None = None, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random in-batch negative for each row: row ``(i + u) mod B`` with ``u`` uniform in ``[1, B)`` (never the
    row itself), valid when its image differs (``image_ids``). Same return as :func:`mine_hard_negatives`."""
    index = (torch.arange(batch, device=device) + torch.randint(1, max(batch, 2), (batch,), device=device)) % batch
    if image_ids is None:
        valid = index != torch.arange(batch, device=device)
    else:
        valid = image_ids[index] != image_ids
    return index, valid


def m3l_loss(
    anchor: torch.Tensor,
    positive: torch.Tensor,
    negative_image: torch.Tensor,
    negative_text: torch.Tensor,
    rho: float = PAPER_RHO,
    alpha1: float = PAPER_ALPHA1,
    alpha2: float = PAPER_ALPHA2,
    eps: float = 1e-8,
    text_term: TextTerm = "image",
) -> torch.Tensor:
    """Multi-modal Metric Loss, XTD10 eq. (1), per row ``[B]``.

    ``alpha1 * (d(a,p) / d(a,n_img))^rho + alpha2 * (d(a,p) / d(x,n_txt))^rho`` with ``d``
    the squared distance; written as a ratio raised to rho (the same value as the paper's
    ratio of powers, without overflow). Denominators are clamped at ``eps``. ``x`` is the
    positive image with ``text_term="image"`` (the default: the image must be nearer its own
    caption than another image's caption) and the anchor caption with ``"anchor"`` (the paper as
    written, which can settle at chance: module docstring).
    """
    if text_term not in ("image", "anchor"):
        raise ValueError(f"unknown M3L text term {text_term!r}; expected 'image' or 'anchor'")
    d_pos = squared_distance(anchor, positive)
    d_neg_image = squared_distance(anchor, negative_image).clamp_min(eps)
    d_neg_text = squared_distance(positive if text_term == "image" else anchor, negative_text).clamp_min(eps)
    return alpha1 * (d_pos / d_neg_image).pow(rho) + alpha2 * (d_pos / d_neg_text).pow(rho)


def patr_loss(
    anchor: torch.Tensor, positive: torch.Tensor, negative_image: torch.Tensor, margin: float = PAPER_ETA
) -> torch.Tensor:
    """Positive-Aware Triplet Ranking loss, XTD10 eq. (2), per row ``[B]``:
    ``d(a, p) + max(0, eta - d(a, n_img))`` with ``d`` the squared distance and ``eta = margin``."""
    return squared_distance(anchor, positive) + (margin - squared_distance(anchor, negative_image)).clamp_min(0.0)


class _MinedLoss(nn.Module):
    """Shared forward: pick a negative in the batch (the hardest, or a random one), then average a per-row loss."""

    negatives: Negatives = "hardest"

    def forward(
        self, text: torch.Tensor, image: torch.Tensor, image_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``text`` = adapter outputs ``[B, D]``, ``image`` = frozen image features ``[B, D]``
        (row ``i`` a pair); ``image_ids`` ``[B]`` marks rows that share an image. Returns the
        mean loss over the rows that have a negative (0 when none has)."""
        if self.negatives == "random":
            index, valid = random_negatives(text.shape[0], image_ids, text.device)
        else:
            index, valid = mine_hard_negatives(text.detach(), image, image_ids)
        per_row = self.per_row(text, image, image[index], text[index])
        if not bool(valid.any()):
            return per_row.sum() * 0.0
        return per_row[valid].mean()

    def per_row(self, anchor: torch.Tensor, positive: torch.Tensor, negative_image: torch.Tensor,
                negative_text: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """The loss of each row ``[B]`` from the anchor texts, their images and the negatives (each ``[B, D]``)."""
        raise NotImplementedError


class M3Loss(_MinedLoss):
    """XTD10 eq. (1) with in-batch hard negatives (image and its caption); see :func:`m3l_loss`."""

    def __init__(
        self, rho: float = PAPER_RHO, alpha1: float = PAPER_ALPHA1, alpha2: float = PAPER_ALPHA2, eps: float = 1e-8,
        text_term: TextTerm = "image", negatives: Negatives = "hardest",
    ) -> None:
        super().__init__()
        self.rho, self.alpha1, self.alpha2, self.eps, self.text_term = rho, alpha1, alpha2, eps, text_term
        self.negatives = negatives

    def per_row(self, anchor: torch.Tensor, positive: torch.Tensor, negative_image: torch.Tensor,
                negative_text: torch.Tensor) -> torch.Tensor:
        """M3L of each row ``[B]`` (:func:`m3l_loss`) from ``[B, D]`` anchor texts, positive images and negatives."""
        return m3l_loss(anchor, positive, negative_image, negative_text, self.rho, self.alpha1, self.alpha2, self.eps,
                        self.text_term)


class PATRLoss(_MinedLoss):
    """XTD10 eq. (2) with the in-batch hard-negative image; see :func:`patr_loss`."""

    def __init__(self, margin: float = PAPER_ETA) -> None:
        super().__init__()
        self.margin = margin

    def per_row(self, anchor: torch.Tensor, positive: torch.Tensor, negative_image: torch.Tensor,
                negative_text: torch.Tensor) -> torch.Tensor:
        """PATR of each row ``[B]`` (:func:`patr_loss`) from ``[B, D]`` rows; ``negative_text`` is not used."""
        return patr_loss(anchor, positive, negative_image, self.margin)


@torch.no_grad()
def typical_squared_distance(image_features: torch.Tensor, sample: int = 2048, seed: int = 0) -> float:
    """Mean squared distance between two different random images: a scale for PATR's eta.

    The paper's eta = 1100 suits ResNet-152 features; with other image encoders the same role
    (push the negative image out to about the distance of an unrelated image) needs eta on
    that encoder's scale. Uses at most ``sample`` images (fixed seed).
    """
    gen = torch.Generator().manual_seed(seed)
    n = image_features.shape[0]
    if n < 2:
        raise ValueError("need at least two images to measure a typical distance")
    idx = torch.randperm(n, generator=gen)[:sample]
    feats = image_features[idx].float()
    dist = pairwise_squared_distance(feats, feats)
    m = feats.shape[0]
    return float(dist.sum() / (m * (m - 1)))
