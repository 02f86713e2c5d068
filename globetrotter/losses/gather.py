"""Feature gathering across processes, so every contrastive loss sees the GLOBAL batch.

Globetrotter's contrastive losses (L_v, L_x, L_t and the transitive targets α) compare
every sample with every other sample of the batch, so in a multi-process run each
process all-gathers the features of all processes and computes the *full* global loss
(mean over the global samples). One process with the concatenated batch and W
processes with one shard each then report the same loss value.

Gradient semantics (open_clip's ``gather_with_grad``), with DDP averaging the
parameter gradients over the W ranks after ``backward``:

* ``gather_with_grad=True`` (default): the gather is differentiable. In backward the
  gradients that all ranks computed for the gathered tensor are summed (all-reduce)
  and each rank keeps the rows of its own samples. Every rank computes the same global
  loss, so rank r receives W·∂L/∂z_s for its samples s, and DDP's average over ranks
  gives exactly the single-process gradient ∂L/∂θ.
* ``gather_with_grad=False``: the other ranks' rows are constants and only the local
  rows (put back at this rank's slot) carry gradient. Rank r receives ∂L/∂z_s for its
  own samples only; the SUM over ranks is the single-process gradient, so after DDP's
  average the gradient is ∂L/∂θ / W (a learning rate W times smaller). Cheaper, but
  use it only knowingly.

Local batches may differ in size between ranks (e.g. the last batch of an epoch); the
sizes are exchanged first and the rows are concatenated in rank order. Without
``torch.distributed`` initialised, or with world size 1, everything is the identity.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["gather_features", "gather_many", "rank_offset", "world_size", "rank"]


def world_size() -> int:
    """Number of processes of the default group, 1 when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def rank() -> int:
    """Rank of this process in the default group, 0 when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _collective_device(like: Tensor | None = None) -> torch.device:
    """Device for small bookkeeping tensors: NCCL needs CUDA, other backends take CPU."""
    if like is not None:
        return like.device
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_sizes(local: int, device: torch.device) -> list[int]:
    """Local batch size of every rank, in rank order."""
    size = torch.tensor([local], dtype=torch.long, device=device)
    sizes = [torch.empty_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    return [int(s.item()) for s in sizes]


def rank_offset(local_batch: int, device: torch.device | None = None) -> int:
    """Index of this process's first sample in the gathered (global) batch.

    ``global[rank_offset(n) : rank_offset(n) + n]`` are this process's rows of a tensor
    gathered with :func:`gather_features`. A collective: every rank must call it. 0 when
    not distributed.
    """
    if world_size() == 1:
        return 0
    sizes = _all_sizes(local_batch, device if device is not None else _collective_device())
    return sum(sizes[: rank()])


def _gather_rows(x: Tensor, sizes: list[int]) -> list[Tensor]:
    """All-gather ``x`` ([n_r, ...] on rank r) into a list of W tensors (no autograd)."""
    longest = max(sizes)
    if x.shape[0] < longest:  # all_gather needs equal shapes: pad, then trim
        pad = x.new_zeros((longest - x.shape[0], *x.shape[1:]))
        x = torch.cat([x, pad])
    parts = [torch.empty_like(x) for _ in sizes]
    dist.all_gather(parts, x.contiguous())
    return [p[:n] for p, n in zip(parts, sizes)]


class _GatherWithGrad(torch.autograd.Function):
    """Differentiable all-gather: backward all-reduces (sums) the gradient and keeps the local rows."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, sizes: list[int]) -> Tensor:
        r = rank()
        ctx.start = sum(sizes[:r])
        ctx.stop = ctx.start + sizes[r]
        return torch.cat(_gather_rows(x.detach(), sizes))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start : ctx.stop], None


def gather_features(x: Tensor, gather_with_grad: bool = True) -> Tensor:
    """Concatenate ``x`` ([n_r, ...] on rank r) over all processes, in rank order.

    Returns [Σ_r n_r, ...]. The identity when ``torch.distributed`` is not initialised
    or the world size is 1. With ``gather_with_grad`` the gradient of every rank's loss
    flows back to the rank that produced each row (see the module docstring for the
    exact gradient each option gives after DDP averaging); otherwise only this rank's
    rows carry gradient. Tensors that do not require grad (integer group ids, targets)
    are simply gathered. A collective: every rank must call it in the same order (and,
    with ``gather_with_grad``, run ``backward`` through it, as DDP training does).
    """
    if world_size() == 1:
        return x
    sizes = _all_sizes(x.shape[0], _collective_device(x))
    if x.requires_grad and gather_with_grad:
        return _GatherWithGrad.apply(x, sizes)
    parts = _gather_rows(x.detach(), sizes)
    if x.requires_grad:  # put the local tensor back so gradient reaches the local rows
        parts[rank()] = x
    return torch.cat(parts)


def gather_many(tensors: Sequence[Tensor], gather_with_grad: bool = True) -> list[Tensor]:
    """:func:`gather_features` for several tensors of the same batch, in one collective.

    The tensors (each [n, ...], same n, dtype and device) are flattened per row,
    concatenated along the feature axis, gathered once, and split back, so a training
    step pays one all-gather (plus the size exchange) instead of one per tensor.
    """
    tensors = list(tensors)
    if world_size() == 1 or not tensors:
        return tensors
    first = tensors[0]
    same = all(t.shape[0] == first.shape[0] and t.dtype == first.dtype and t.device == first.device for t in tensors)
    if not same:
        return [gather_features(t, gather_with_grad) for t in tensors]
    n = first.shape[0]
    flat = [t.reshape(n, -1) for t in tensors]
    widths = [f.shape[1] for f in flat]
    gathered = gather_features(torch.cat(flat, dim=1), gather_with_grad)
    pieces = torch.split(gathered, widths, dim=1)
    return [p.reshape(gathered.shape[0], *t.shape[1:]) for p, t in zip(pieces, tensors)]
