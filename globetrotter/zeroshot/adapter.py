"""The text adapter of the zero-shot system: frozen sentence embeddings -> a frozen image-embedding space.

Aggarwal et al., "Towards Zero-shot Cross-lingual Image Retrieval and Tagging", section 3.1:
the sentence embedding of a caption goes through stacked blocks of

    fully connected -> dropout -> ReLU -> L2-norm

and the last block has no L2-norm, "to be consistent with ResNet output features" (pooled
CNN features are non-negative and not unit length). The paper's best model has three blocks
of widths 1024, 2048, 2048 (the last one is the image-feature size of ResNet-152) with
dropout 0.2, 0.1, 0.0. Neither encoder is trained: only this adapter is. Besides that form
(``form="xtd10"``) the adapter has a residual form (``form="residual"``, the default of
:class:`~globetrotter.zeroshot.config.AdapterConfig`): pre-norm residual MLP blocks of one width.

``output_scale`` multiplies the last block's output by a fixed constant (a buffer, never
trained). 1.0 is the paper literally. Because every block but the last ends in an L2-norm,
a freshly initialised adapter outputs vectors of norm ~0.3 that barely differ between texts,
while pooled CNN features have norms ~16 (EfficientNet-Lite0) to ~30 (ResNet-152): Adam at
lr 1e-3 then spends thousands of steps just growing the last layer. Setting the scale to the
mean norm of the image features (``AdapterConfig.output_scale: null``) expresses the target
in units the adapter starts at; squared-distance rankings are unchanged.
"""
from __future__ import annotations

from typing import Iterable, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import nn

PAPER_HIDDEN_DIMS = (1024, 2048)  # section 3.1; the third FC has the image-feature width
PAPER_DROPOUT = (0.2, 0.1, 0.0)  # section 3.2
Form = Literal["residual", "xtd10"]


class L2Norm(nn.Module):
    """Scale each row to unit Euclidean length: ``x / max(||x||, eps)``."""

    def __init__(self, eps: float = 1e-12) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Each row of ``x`` scaled to unit length."""
        return F.normalize(x, dim=-1, eps=self.eps)


class AdapterBlock(nn.Sequential):
    """One XTD10 block: ``Linear -> Dropout -> ReLU [-> L2Norm]``."""

    def __init__(self, in_dim: int, out_dim: int, dropout: float, l2_norm: bool) -> None:
        layers: list[nn.Module] = [nn.Linear(in_dim, out_dim), nn.Dropout(dropout), nn.ReLU()]
        if l2_norm:
            layers.append(L2Norm())
        super().__init__(*layers)


class ResidualBlock(nn.Module):
    """``x + Linear(Dropout(ReLU(Linear(LayerNorm(x)))))``: a pre-norm residual MLP block of constant width."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the block's MLP of ``x``."""
        return x + self.mlp(x)


class TextToImageAdapter(nn.Module):
    """Map frozen text embeddings ``[B, text_dim]`` to image features ``[B, image_dim]``.

    ``form="xtd10"`` (XTD10 3.1): ``hidden_dims`` are the widths of all blocks but the last, whose width is
    ``image_dim``; ``dropout`` has one rate per block (``len(hidden_dims) + 1`` values). Every block but the
    last ends with an L2-norm; the output is non-negative (the last block keeps its ReLU), like the pooled CNN
    features it is compared with.

    ``form="residual"``: a linear map to the width ``hidden_dims[0]`` (one width), one pre-norm
    :class:`ResidualBlock` per ``dropout`` rate, then ``LayerNorm`` and a linear map to ``image_dim``. The skips
    keep the sentence embedding's information intact through the depth, and the output is unconstrained.

    Both multiply the output by the fixed ``output_scale`` (module docstring); with ``normalize_output`` the
    output is first scaled to unit length, so every output lies on the sphere of radius ``output_scale``. A
    ratio loss (M3L) needs that: its ratios of distances are scale-free, and unbounded outputs escape to a
    norm far above the images', where every ratio is 1 and retrieval is at chance (``losses.py``).
    """

    output_scale: torch.Tensor  # a buffer (register_buffer), declared so mypy reads it as a tensor

    def __init__(
        self,
        text_dim: int,
        image_dim: int,
        hidden_dims: Sequence[int] = PAPER_HIDDEN_DIMS,
        dropout: Sequence[float] = PAPER_DROPOUT,
        output_scale: float = 1.0,
        form: Form = "xtd10",
        normalize_output: bool = False,
    ) -> None:
        super().__init__()
        for name, value, what in (("hidden_dims", hidden_dims, "widths"), ("dropout", dropout, "rates, one per block")):
            if isinstance(value, str) or not isinstance(value, Iterable):  # a bare 0.1 was a TypeError further on
                raise ValueError(f"{name} expected a sequence of {what}, got {value!r}")
        if form not in ("xtd10", "residual"):
            raise ValueError(f"unknown adapter form {form!r}; expected 'residual' or 'xtd10'")
        if form == "residual" and len(hidden_dims) != 1:
            raise ValueError(f"the residual adapter has one width (hidden_dims: [W]), got {list(hidden_dims)}")
        widths = [int(text_dim), *map(int, hidden_dims), int(image_dim)]
        if form == "xtd10" and len(dropout) != len(widths) - 1:
            raise ValueError(f"dropout needs one rate per block ({len(widths) - 1}), got {list(dropout)}")
        if not dropout:
            raise ValueError("dropout needs one rate per block, got none")
        if any(w <= 0 for w in widths):
            raise ValueError(f"layer widths must be positive, got {widths}")
        if any(not 0.0 <= p < 1.0 for p in dropout):
            raise ValueError(f"dropout rates must be in [0, 1), got {list(dropout)}")
        if not output_scale > 0:
            raise ValueError(f"output_scale must be > 0, got {output_scale}")
        self.form, self.normalize_output = form, bool(normalize_output)
        self.text_dim, self.image_dim = widths[0], widths[-1]
        self.hidden_dims, self.dropout = [int(w) for w in hidden_dims], [float(p) for p in dropout]
        if form == "xtd10":
            n_blocks = len(widths) - 1
            self.blocks = nn.Sequential(
                *(
                    AdapterBlock(widths[i], widths[i + 1], float(dropout[i]), l2_norm=i < n_blocks - 1)
                    for i in range(n_blocks)
                )
            )
        else:
            width = widths[1]
            self.blocks = nn.Sequential(
                nn.Linear(widths[0], width),
                *(ResidualBlock(width, float(p)) for p in dropout),
                nn.LayerNorm(width),
                nn.Linear(width, widths[-1]),
            )
        self.register_buffer("output_scale", torch.tensor(float(output_scale)))

    def forward(self, text_embeddings: torch.Tensor) -> torch.Tensor:
        """Text embeddings mapped into the image-feature space: the blocks, unit length with ``normalize_output``, times
        ``output_scale``."""
        out = self.blocks(text_embeddings)
        if self.normalize_output:
            out = F.normalize(out, dim=-1)
        return out * self.output_scale

    @torch.no_grad()
    def embed(self, text_embeddings: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
        """Project many embeddings in eval mode (no dropout, no gradient), in batches."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        out = [
            self(text_embeddings[i : i + batch_size].to(device=device, dtype=torch.float32)).cpu()
            for i in range(0, len(text_embeddings), batch_size)
        ]
        self.train(was_training)
        if not out:
            return torch.empty(0, self.image_dim)
        return torch.cat(out)
