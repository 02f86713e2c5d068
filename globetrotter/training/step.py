"""One optimisation step: the AdamW parameter groups (:func:`param_groups`) and :class:`Stepper`, which seeds the
cloze masks, and skips a step whose loss is non-finite (:class:`NonFiniteLoss` after :data:`MAX_BAD_STEPS` in a row)."""
from __future__ import annotations

import torch
from accelerate import Accelerator
from tokenizers import Tokenizer
from torch.optim.lr_scheduler import LambdaLR

from ..config import TrainConfig
from ..losses import mask_tokens
from ..tokenizer import special_ids
from ..data.stream import StreamPosition, too_many_bad
from . import checkpoint as ckpt
from .logs import Log
from .objective import GlobetrotterObjective
from .resume import mask_seed
from .speed import CompiledForward

MAX_BAD_STEPS = 5  # consecutive non-finite losses before the run stops


class NonFiniteLoss(RuntimeError):
    """The loss stayed NaN/inf for several steps; the weights were never updated with it."""


TOKEN_TABLES = ("text.token_embedding.weight", "text.subword.ngram_embedding.weight", "text.word_embedding.weight")
"""The text encoders' token tables (transformer, its n-gram rows, Sigurdsson baseline): ``optim.embedding_lr_scale``
applies to them."""


def param_groups(model: torch.nn.Module, weight_decay: float, lr: float | None = None,
                 embedding_lr_scale: float = 1.0) -> list[dict]:
    """AdamW groups: no weight decay on biases, norms and embeddings. With ``embedding_lr_scale`` != 1 the
    text encoder's token embeddings (tied to the cloze decoder; the Sigurdsson baseline's per-language word
    tables) get their own group at ``lr × scale``: each row is updated only by the captions holding its
    token, far more rarely than the layers above it."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    tokens: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if embedding_lr_scale != 1.0 and name in TOKEN_TABLES:
            tokens.append(p)
        else:
            (no_decay if p.ndim < 2 or "embedding" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if tokens:
        if lr is None:
            raise ValueError("param_groups: embedding_lr_scale needs the base lr")
        groups.append({"params": tokens, "weight_decay": 0.0, "lr": lr * embedding_lr_scale})
    return groups


class Stepper:
    """One optimisation step at a time. The cloze masks are seeded from (seed, rank, step); every process learns
    whether the loss was finite everywhere and how many bad samples the worst stream met. A non-finite loss
    skips the step with the weights and the running statistics (BatchNorm, the features head's centre) as they
    were; :data:`MAX_BAD_STEPS` in a row stop the run."""

    def __init__(self, cfg: TrainConfig, accelerator: Accelerator, model: torch.nn.Module, forward: CompiledForward,
                 objective: GlobetrotterObjective, optimizer: torch.optim.Optimizer, scheduler: LambdaLR,
                 tokenizer: Tokenizer, log: Log) -> None:
        self.cfg, self.accelerator, self.model, self.forward = cfg, accelerator, model, forward
        self.objective, self.optimizer, self.scheduler, self.log = objective, optimizer, scheduler, log
        self.unwrapped = accelerator.unwrap_model(model)
        self.buffers = list(self.unwrapped.buffers())  # running statistics a forward moves
        self.specials, self.vocab_size = special_ids(tokenizer), tokenizer.get_vocab_size()
        self.generator = torch.Generator()  # cloze masks: reseeded every step
        self.bad_steps = 0
        self.rank = accelerator.process_index

    def cloze_inputs(self, batch: dict, step: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The masked ids and their labels (-100 where not masked), on the CPU, or ``(None, None)`` without the cloze
        loss. Drawn by a CPU generator, so every device gets the same masks; the training loop calls it on the
        loader's batch before the batch moves to the device (a batch already there is copied back first)."""
        if self.cfg.loss.cloze <= 0:
            return None, None
        loss = self.cfg.loss
        self.generator.manual_seed(mask_seed(self.cfg.seed, self.rank, step))
        return mask_tokens(batch["input_ids"].cpu(), batch["attention_mask"].cpu(), self.specials["mask"],
                           self.vocab_size, list(self.specials.values()), p=loss.mask_prob,
                           generator=self.generator, corrupt_other=loss.corrupt_other)

    def __call__(self, batch: dict, cloze: tuple[torch.Tensor | None, torch.Tensor | None], step: int,
                 position: StreamPosition) -> tuple[dict | None, int]:
        """Step on ``batch`` with its ``cloze`` inputs (:meth:`cloze_inputs`), both on the device:
        ``(logs, bad_samples)``, logs None when the step was skipped; ``position`` is this process's stream (its bad
        samples so far)."""
        accelerator = self.accelerator
        masked, labels = cloze
        lang_ids = self.unwrapped.language_ids(batch["langs"], accelerator.device) if self.unwrapped.per_language else None
        kept = [b.clone() for b in self.buffers]  # put back if the step is skipped
        with accelerator.autocast():
            out = self.forward(batch["input_ids"], batch["attention_mask"], masked, batch.get("view1"),
                               batch.get("view2"), cloze_targets=None if labels is None else labels != -100,
                               lang_ids=lang_ids)
        loss, logs = self.objective(out, batch, labels)
        health = accelerator.gather(torch.tensor([[float(torch.isfinite(loss)), position.bad_total]], device=accelerator.device))
        finite, bad_samples = int(health[:, 0].sum()), int(health[:, 1].max())  # bad: the most any process met
        if bad_samples > self.cfg.data.max_bad_samples:  # every process agrees: all stop
            raise too_many_bad(bad_samples, self.cfg.data.max_bad_samples, position.bad_shard)
        if finite < accelerator.num_processes:
            self._skip(kept, logs, step)
            return None, bad_samples
        self.bad_steps = 0
        accelerator.backward(loss)
        if self.cfg.optim.grad_clip > 0 and accelerator.sync_gradients:
            logs["grad_norm"] = float(accelerator.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip))
        self.optimizer.step()
        logs["lr"] = self.scheduler.get_last_lr()[0]  # the rate this step trained with, before the schedule moves on
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return logs, bad_samples

    def _skip(self, kept: list[torch.Tensor], logs: dict, step: int) -> None:
        self.bad_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():  # nor the running statistics, which a non-finite forward would have poisoned
            for buffer, value in zip(self.buffers, kept):
                buffer.copy_(value)
        losses = ", ".join(f"{k}={v:.4g}" for k, v in logs.items() if k.startswith("loss/"))
        self.log(f"step {step}: non-finite loss ({losses}); step skipped, weights unchanged")
        if self.bad_steps >= MAX_BAD_STEPS:
            latest = ckpt.checkpoint_root(self.cfg.run_dir) / ckpt.LATEST
            raise NonFiniteLoss(f"loss non-finite for {self.bad_steps} consecutive steps at step {step}; lower optim.lr "
                                f"or use mixed_precision=bf16/no; last good checkpoint: {latest}")
