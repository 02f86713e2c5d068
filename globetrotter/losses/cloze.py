"""L_c: token cloze (BERT's masked-language-model objective, paper section 3.3)."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["mask_tokens", "ClozeLoss", "cloze_accuracy", "cloze_sums", "IGNORE_INDEX"]

IGNORE_INDEX = -100  # label of positions that are not predicted (PyTorch's cross-entropy default)


def mask_tokens(
    input_ids: Tensor,
    attention_mask: Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    p: float = 1 / 6,
    generator: torch.Generator | None = None,
    corrupt_other: float = 0.0,
    mask_share: float = 0.8,
    random_share: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """Choose and corrupt cloze targets, BERT-style (Devlin et al. 2019; Globetrotter L_c).

    Every real (``attention_mask`` 1), non-special token is chosen independently with
    probability ``p`` (paper: 1/6); a sentence with at least one such token but none
    chosen gets one chosen uniformly among them, so each sentence has ≥ 1 target. A
    chosen token is replaced by ``mask_id`` with probability ``mask_share`` (0.8), by a
    uniformly drawn non-special token with probability ``random_share`` (0.1), and left
    unchanged otherwise (0.1). With ``corrupt_other`` > 0 (official code: 0.2) each
    non-chosen eligible token is corrupted the same way with that probability, but is
    not predicted. Vectorised over the batch; deterministic for a given ``generator``
    (which must live on the device of ``input_ids``).

    Args:
        input_ids: [B, L] token ids. attention_mask: [B, L], 1 for real tokens, 0 for padding.
        mask_id: id of the mask token. vocab_size: number of token ids.
        special_ids: ids never chosen nor drawn as random replacements (pad, sentence token, mask, unk...).

    Returns:
        (masked_ids [B, L], labels [B, L]): labels hold the original id at the chosen
        positions and ``IGNORE_INDEX`` (-100) elsewhere.
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"expected input_ids and attention_mask [B, L], got {tuple(input_ids.shape)}, {tuple(attention_mask.shape)}")
    if not (0.0 < p <= 1.0 and 0.0 <= corrupt_other <= 1.0 and mask_share >= 0 and random_share >= 0
            and mask_share + random_share <= 1.0):
        raise ValueError(f"bad masking probabilities: p={p}, corrupt_other={corrupt_other}, "
                         f"mask_share={mask_share}, random_share={random_share}")
    device = input_ids.device
    specials = torch.as_tensor(list(special_ids), dtype=input_ids.dtype, device=device)
    eligible = attention_mask.bool() & ~torch.isin(input_ids, specials)

    def uniform() -> Tensor:
        return torch.rand(input_ids.shape, generator=generator, device=device)

    chosen = (uniform() < p) & eligible
    # ≥ 1 target per sentence: where none was drawn, take the eligible token with the highest random score
    needs_one = eligible.any(dim=1) & ~chosen.any(dim=1)
    pick = uniform().masked_fill(~eligible, -1.0).argmax(dim=1)
    forced = torch.zeros_like(chosen)
    forced[torch.arange(input_ids.shape[0], device=device), pick] = True
    chosen |= forced & needs_one[:, None]

    corrupted = chosen | ((uniform() < corrupt_other) & eligible)
    how = uniform()
    to_mask = corrupted & (how < mask_share)
    to_random = corrupted & (how >= mask_share) & (how < mask_share + random_share)

    allowed = torch.ones(vocab_size, dtype=torch.bool, device=device)
    allowed[specials[(specials >= 0) & (specials < vocab_size)]] = False
    allowed_ids = allowed.nonzero().squeeze(1).to(input_ids.dtype)
    if allowed_ids.numel() == 0:
        raise ValueError("every token id is special: no random replacement can be drawn")
    draws = torch.randint(allowed_ids.numel(), input_ids.shape, generator=generator, device=device)
    random_ids = allowed_ids[draws]

    masked = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def cloze_sums(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Summed cross-entropy, number of targets and number predicted right (arg-max) at the cloze targets: the terms
    of L_c and of its accuracy, for sums over processes (the trainer) or a mean over one (:class:`ClozeLoss`).

    ``logits``: [B, L, V] aligned with ``labels`` [B, L], or [n_targets, V], the rows of the targets alone in
    row-major order (what a model that decodes only the masked positions gives). The cross-entropy is float32."""
    targets = labels != IGNORE_INDEX
    picked = logits if logits.dim() == 2 else logits[targets]
    wanted = labels[targets]
    if picked.shape[:-1] != wanted.shape:
        raise ValueError(f"logits {tuple(logits.shape)} are neither [B, L, V] nor [n_targets, V] for labels "
                         f"{tuple(labels.shape)} with {wanted.numel()} target(s)")
    total = F.cross_entropy(picked.float(), wanted, reduction="sum")
    return total, targets.sum(), (picked.argmax(dim=-1) == wanted).sum()


class ClozeLoss(nn.Module):
    """Cross-entropy of the token predictions at the cloze targets.

    L_c = −(1/|T|) Σ_{(b,l)∈T} log softmax(logits[b, l])[labels[b, l]], where T are the
    positions whose label is not ``IGNORE_INDEX``. ``logits`` and ``labels`` must be
    aligned (same [B, L]: drop the outputs of any token prepended by the model). A batch
    without targets gives 0, connected to the graph. The mean is over this process's
    targets (every sample's cloze loss is independent of the others, so nothing is gathered).
    """

    def forward(self, logits: Tensor, labels: Tensor) -> Tensor:
        """logits: [B, L, V]; labels: [B, L]. Returns a scalar."""
        if logits.shape[:-1] != labels.shape:
            raise ValueError(f"logits [B, L, V] and labels [B, L] disagree: {tuple(logits.shape)} vs {tuple(labels.shape)}")
        total, count, _ = cloze_sums(logits, labels)
        return total / count.clamp_min(1)


@torch.no_grad()
def cloze_accuracy(logits: Tensor, labels: Tensor) -> Tensor:
    """Share of cloze targets whose arg-max prediction is the original token (NaN without targets)."""
    _, count, correct = cloze_sums(logits, labels)
    return correct.float() / count.float()
