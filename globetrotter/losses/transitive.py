"""L_t: the text–text contrastive loss with transitive soft targets α (paper eqs. 1–2).

Two captions i, j (in any languages) are pulled together when each matches its own
image and the two images look alike: α_ij is built from the cross-modal similarity
α^x (caption ↔ its image) and the visual similarity α^v (image ↔ image), without
gradient, and weights the text–text contrastive loss. Two variants:

``paper`` (Globetrotter eq. 2, appendix B.1)
    Cosine similarities are mapped to [0, 1] by (cos + 1)/2, then
    α_ij = f(α^x_ii · α^v_ij · α^x_jj),  f(x) = max(0, x − m)/(1 − m),  m = 0.4.
    Note that with this mapping unrelated (orthogonal) images still have α^v = 0.5, so
    two perfectly captioned images give α = f(0.5) = 1/6; a pair reaches α = 0 only
    when α^x_ii·α^v_ij·α^x_jj ≤ m.

``official`` (the authors' released code, ``compute_xlang_loss``)
    Raw cosines (the code never maps them to [0, 1]; with the mapping every unrelated
    pair would pass the margin after the max-division below). The cross-modal factor
    P_ij = α^x_ii·α^x_jj is min–max rescaled over the batch matrix (diagonal included,
    as in the code) into [0.75, 1.25]; a = α^v ⊙ P; a is divided by its largest
    off-diagonal value; α = max(0, a − m)/(1 − m). Degenerate batches, where the code
    would divide by zero, are handled: a constant P becomes 1, and a non-positive maximum
    gives α = 0.

Either α weights eq. 1's sum, divided by the batch's total α (as the released code
normalises it): each pair pulls in proportion to its α, and the loss does not grow with
the number of positive pairs.

In both variants the diagonal is 0 (a caption is never its own positive) and α is
symmetric (the paper variant up to float32 rounding, about 1e-7: its products are taken in
another order for α_ij and α_ji).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["transitive_alpha", "TransitiveTextLoss", "alpha_stats", "supervised_alpha"]

Variant = Literal["paper", "official"]
_VARIANTS = ("paper", "official")


def _check_variant(variant: str) -> None:
    if variant not in _VARIANTS:
        raise ValueError(f"transitive variant must be one of {_VARIANTS}, got {variant!r}")


def _check_margin(margin: float) -> None:
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")


def _off_diagonal(n: int, device: torch.device) -> Tensor:
    return ~torch.eye(n, dtype=torch.bool, device=device)


@torch.no_grad()
def transitive_alpha(
    text_x: Tensor,
    img_x: Tensor,
    img_v: Tensor,
    margin: float = 0.4,
    variant: Variant = "paper",
    official_xm_range: tuple[float, float] = (0.75, 1.25),
    pairs: Tensor | None = None,
) -> Tensor:
    """Transitive soft targets α [N, N] for L_t, computed without gradient (paper eq. 2).

    Args:
        text_x: [N, D] caption features in the cross-modal space (text head of L_x).
        img_x: [N, D] image features in the cross-modal space (image head of L_x), first view.
        img_v: [N, D] image features in the visual space (image head of L_v), first view.
        margin: m of f(x) = max(0, x − m)/(1 − m) (paper: 0.4).
        variant: ``"paper"`` or ``"official"`` (see the module docstring).
        official_xm_range: interval the ``official`` variant rescales α^x_ii·α^x_jj into.
        pairs: optional boolean [N, N] mask of the pairs that may be positive (symmetric): the others
            get α = 0 and take no part in the ``official`` variant's batch statistics (its min–max
            and maximum). Adaptation to a new language leaves out the pairs of two frozen old captions.

    Inputs are L2-normalised here. Returns a float32 symmetric matrix (to float32 rounding) in [0, 1] with a
    zero diagonal, on the inputs' device; pass the global batch.
    """
    _check_variant(variant)
    _check_margin(margin)
    n = text_x.shape[0]
    if not (text_x.dim() == img_x.dim() == img_v.dim() == 2 and img_x.shape[0] == n and img_v.shape[0] == n):
        raise ValueError(
            f"expected [N, D] features with one N, got {tuple(text_x.shape)}, {tuple(img_x.shape)}, {tuple(img_v.shape)}"
        )
    t = F.normalize(text_x.detach().float(), dim=-1)
    ix = F.normalize(img_x.detach().float(), dim=-1)
    iv = F.normalize(img_v.detach().float(), dim=-1)
    xm = (t * ix).sum(-1)  # α^x_ii as a cosine, [N]
    vis = iv @ iv.T  # α^v_ij as a cosine, [N, N]
    off = _off_diagonal(n, t.device)
    if pairs is not None:
        if pairs.shape != (n, n):
            raise ValueError(f"pairs must be [N, N] = {(n, n)}, got {tuple(pairs.shape)}")
        off = off & pairs.to(device=t.device, dtype=torch.bool)

    if variant == "paper":
        ax, av = (xm + 1) / 2, (vis + 1) / 2  # appendix B.1: similarities mapped to [0, 1]
        path = ax[:, None] * av * ax[None, :]
    else:
        lo, hi = official_xm_range
        factor = xm[:, None] * xm[None, :]
        counted = factor if pairs is None else factor[off | torch.eye(n, dtype=torch.bool, device=t.device)]
        low = counted.min()
        span = counted.max() - low
        unit = (factor - low) / span.clamp_min(torch.finfo(span.dtype).tiny)
        factor = torch.where(span > 0, lo + (hi - lo) * unit, torch.full_like(factor, (lo + hi) / 2))
        path = vis * factor
        top = path.masked_fill(~off, float("-inf")).amax() if bool(off.any()) else path.new_tensor(0.0)
        path = torch.where(top > 0, path / top.clamp_min(torch.finfo(path.dtype).tiny), torch.zeros_like(path))

    alpha = (path - margin).clamp_min(0) / (1 - margin)
    return alpha.clamp_max(1.0) * off


class TransitiveTextLoss(nn.Module):
    """Soft-target contrastive loss between captions (Globetrotter eq. 1).

    With β_ij = cos(z_i, z_j) between the L2-normalised text features and the
    text–text log-probability over the other captions of the batch

        log p_ij = β_ij/τ − log Σ_{k≠i} exp(β_ik/τ),   ℓ_ij = −log p_ij,

    eq. 1 is L_t = Σ_i Σ_{j≠i} α_ij ℓ_ij. It is divided by the batch's α mass Σ_ij α_ij
    (the released code's normalisation): a weighted mean over the positive pairs, each
    pulling in proportion to its α, whose scale does not grow with their number.

    α is treated as a constant (detached). A batch without positives gives 0 (still
    connected to the graph, so every parameter receives a gradient). Pass the global
    batch; computed in float32.

    Args:
        temperature: τ (official code: 0.1).
        margin: m used by :meth:`alpha` (paper: 0.4).
        variant: ``"paper"`` or ``"official"``: the α of :meth:`alpha`.
    """

    def __init__(
        self,
        temperature: float = 0.1,
        margin: float = 0.4,
        variant: Variant = "paper",
    ) -> None:
        super().__init__()
        _check_variant(variant)
        _check_margin(margin)
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.margin = margin
        self.variant = variant

    def alpha(self, text_x: Tensor, img_x: Tensor, img_v: Tensor) -> Tensor:
        """:func:`transitive_alpha` with this loss's margin and variant."""
        return transitive_alpha(text_x, img_x, img_v, margin=self.margin, variant=self.variant)

    def forward(self, text_t: Tensor, alpha: Tensor) -> Tensor:
        """text_t: [N, D] text features (text head of L_t); alpha: [N, N] targets. Returns a scalar."""
        n = text_t.shape[0]
        if text_t.dim() != 2 or alpha.shape != (n, n):
            raise ValueError(f"expected text [N, D] and alpha [N, N], got {tuple(text_t.shape)} and {tuple(alpha.shape)}")
        z = F.normalize(text_t.float(), dim=-1)
        if n < 2:  # no other caption to contrast with
            return z.sum() * 0.0
        self_pairs = torch.eye(n, dtype=torch.bool, device=z.device)
        logits = (z @ z.T / self.temperature).masked_fill(self_pairs, float("-inf"))
        nll = -logits.log_softmax(dim=-1).masked_fill(self_pairs, 0.0)  # ℓ_ij, 0 on the diagonal
        weights = alpha.detach().float().masked_fill(self_pairs, 0.0)
        return (weights * nll).sum() / weights.sum().clamp_min(torch.finfo(weights.dtype).tiny)


@torch.no_grad()
def alpha_stats(alpha: Tensor, truth: Tensor | None = None) -> dict[str, float]:
    """Summary of a transitive target matrix, for logging.

    Over the off-diagonal pairs (i ≠ j) of ``alpha`` [N, N]:

    * ``alpha/positive_fraction``: share of pairs with α > 0;
    * ``alpha/mean``: mean α;
    * with ``truth`` (a boolean [N, N], True where i and j are translations of each
      other), ``alpha/precision``: share of the α > 0 pairs that are true, and
      ``alpha/recall``: share of the true pairs with α > 0 (NaN when undefined: no
      positive, or no true pair).
    """
    n = alpha.shape[0]
    off = _off_diagonal(n, alpha.device)
    values = alpha.detach()[off].float()
    positive = values > 0
    count = max(values.numel(), 1)
    stats = {
        "alpha/positive_fraction": positive.sum().item() / count,
        "alpha/mean": values.sum().item() / count,
    }
    if truth is not None:
        if truth.shape != alpha.shape:
            raise ValueError(f"truth must have alpha's shape {tuple(alpha.shape)}, got {tuple(truth.shape)}")
        true = truth.to(device=alpha.device, dtype=torch.bool)[off]
        hits = (positive & true).sum().item()
        n_pos, n_true = positive.sum().item(), true.sum().item()
        stats["alpha/precision"] = hits / n_pos if n_pos else float("nan")
        stats["alpha/recall"] = hits / n_true if n_true else float("nan")
    return stats


def supervised_alpha(groups: Tensor) -> Tensor:
    """Targets of the fully supervised baseline (paper section 5.1): α_ij = 1 for true pairs.

    ``groups`` [N] holds integer ids tying the captions of one image across languages;
    α_ij = 1 where groups[i] == groups[j] and i ≠ j, else 0. Negative ids mean "no
    group" and never match. Returns float32 [N, N]; also the ``truth`` of :func:`alpha_stats`
    (as ``> 0``).
    """
    if groups.dim() != 1:
        raise ValueError(f"groups must be [N], got {tuple(groups.shape)}")
    same = (groups[:, None] == groups[None, :]) & (groups[:, None] >= 0)
    return (same & _off_diagonal(groups.shape[0], groups.device)).float()
