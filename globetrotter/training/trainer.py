"""The training loop, top to bottom, with HF Accelerate doing the devices.

CPU, one GPU, many GPUs or nodes run the same code (``accelerate launch train.py ...``).
Each process reads its own resampled WebDataset stream of ``batch_size / world_size``
samples; the losses see the global batch through all-gathered features. A checkpoint holds
everything that decides the rest of the run (weights, optimizer, scheduler, RNG states, each
process's data-stream position; the cloze masks are seeded per step), so ``--resume latest``
continues the uninterrupted run exactly (bit for bit on CPU at a fixed thread count).

:func:`train` reads in the order a run happens: refuse what cannot start, prepare the data and the
config, build the model and its start, restore a checkpoint, then step (:class:`Stepper`), validate
and choose ``best`` (:func:`validate`), and save (:class:`Checkpoints`).
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Iterator, TypeVar

import numpy as np
import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import ProjectConfiguration, set_seed
from tokenizers import Tokenizer
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm

from backretrieval.errors import BackRetrievalError
from backretrieval.files import json_text, writable_dir

from ..config import TrainConfig
from ..config_checks import warn_ignored_keys
from ..config_io import save_config
from ..embeddings import Encoder
from ..encoder import build_model
from ..texts_cut import TextsCut, texts_cut_once
from ..errors import UserError, error_line
from ..losses import mask_tokens
from ..models import GlobetrotterModel
from ..threads import ENV as THREADS_ENV
from ..threads import ThreadChoice, apply_threads, choose_threads, load_average, using_threads
from ..tokenizer import copy_tokenizer, load_tokenizer, special_ids
from ..data.pipeline import device_augment_from_config, train_loader_from_config
from ..data.stream import StreamPosition, too_many_bad
from ..evaluation.records import versions
from . import adapt, token_init
from . import checkpoint as ckpt
from .objective import GlobetrotterObjective
from .prepare import (COMPLETED_KEYS, ensure_data, tokenizer_path, with_imported_dim, with_matched_image_share,
                      with_text_languages)
from .resume import (hold_run_folder, mask_seed, newly_ignored, refuse_changed_config, refuse_changed_tokenizer,
                     refuse_finished, refuse_foreign_files, refuse_used_folder, resume_position)
from .report import splits_read
from .scheduler import warmup_cosine, warmup_warning
from .selection import Verdict, judge, load_hits, save_hits
from .speed import CompiledForward, resolve_mixed_precision, warn_launcher_precision

if TYPE_CHECKING:
    from .validation import Validator

MAX_BAD_STEPS = 5  # consecutive non-finite losses before the run stops

Log = Callable[[str], None]


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


@dataclass
class Progress:
    """Where the run stands besides its weights: the next step, the best checkpoint (and its selection hits,
    main process), the bad samples met, and the data stream's position and seed."""

    position: StreamPosition
    loader_seed: int
    step: int = 0
    best: dict | None = None
    best_hits: np.ndarray | None = None
    bad_samples: int = 0


def train(cfg: TrainConfig, resume: str | None = None, written: Collection[str] | None = None) -> dict:
    """Train per ``cfg``; ``resume`` is ``"latest"`` or a checkpoint folder. Returns the final metrics.

    ``written``: the dotted keys the user set (the ``--config`` file itself and the overrides,
    :func:`~data_prep.config_io.written_keys`), the only ones a fresh run warns about when it ignores them
    (:mod:`..config_checks`); None: every key of ``cfg``.

    The run sets torch's intra-op threads for itself (:mod:`globetrotter.threads`); the caller's count is put back
    when it ends, also on an error."""
    if not cfg.output_dir.strip():  # as data.root: here, not in the config's checks (a saved run loads without it)
        raise UserError("output_dir is empty: name the folder the runs are written to (the run goes to "
                        "output_dir/run_name; output_dir=. for the working folder)")
    _check_run_folder(cfg.run_dir)  # before any work: a run that could never save is no run
    cpu = _no_accelerator()
    process = PartialState(cpu=cpu)  # the device, before Accelerate fixes the precision
    # using_threads: the caller's count back afterwards; hold_run_folder: one train.py at a time in a run folder
    with using_threads(torch.get_num_threads()), hold_run_folder(cfg.run_dir, process.is_main_process):
        return _train(cfg, resume, cpu, process, written)


def _train(cfg: TrainConfig, resume: str | None, cpu: bool, process: PartialState,
           written: Collection[str] | None) -> dict:
    """:func:`train` once the run folder is held."""
    log = tqdm.write if process.is_main_process else (lambda *a, **k: None)
    if resume and process.is_main_process:
        ckpt.restore_best(cfg.run_dir, log)  # a run stopped while it replaced best/ left it as best.old
    process.wait_for_everyone()
    adapting = bool(cfg.adapt.from_run)  # adaptation to a new language (paper A.2, :mod:`.adapt`)
    source = resume_source(cfg, resume, adapting)
    threads = _configure_threads(cfg, process, source, log)
    warn_launcher_precision(cfg.mixed_precision, log)
    precision = resolve_mixed_precision(cfg.mixed_precision, process.device, log)
    accelerator = Accelerator(cpu=cpu, mixed_precision=precision, log_with="tensorboard",
                              project_config=ProjectConfiguration(str(cfg.run_dir), logging_dir=str(cfg.run_dir / "tensorboard")))
    ckpt.save_without_tied_aliases(accelerator)  # the cloze decoder's tie to the token embeddings, saved once
    main = accelerator.is_main_process
    if cfg.batch_size % accelerator.num_processes:
        raise UserError(f"batch_size {cfg.batch_size} must be divisible by the number of processes ({accelerator.num_processes})")
    local_batch = cfg.batch_size // accelerator.num_processes
    cfg = _prepare(cfg, accelerator, source, adapting, log, written)
    # seeded once the data is prepared: a run that builds its feature cache (random views, a backbone's init) or
    # tokenizer trains exactly as the same run that finds them
    set_seed(cfg.seed, device_specific=True)
    tokenizer = load_tokenizer(tokenizer_path(cfg))
    cut = _captions_cut(cfg, tokenizer, log) if main and not adapting else None
    model = _build_model(cfg, tokenizer, main, start=not resume and not adapting, log=log)
    adaptation = adapt.Adaptation(cfg, model, log) if adapting else None  # before the optimizer: freezes the image side
    objective = adaptation.objective() if adaptation is not None else GlobetrotterObjective(cfg.loss)
    beta1, beta2 = cfg.optim.betas  # two: OptimConfig.validate
    optimizer = torch.optim.AdamW(param_groups(model, cfg.optim.weight_decay, cfg.optim.lr, cfg.optim.embedding_lr_scale),
                                  lr=cfg.optim.lr, betas=(beta1, beta2))
    scheduler = warmup_cosine(optimizer, cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio)
    short = warmup_warning(cfg.optim.warmup_steps, cfg.steps, cfg.optim.lr)  # e.g. an adaptation of a few hundred
    if short and main:  # captions: one epoch is a few steps, under the starting run's warm-up
        log(short)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)  # stepped by us once per step (not per process)
    forward = CompiledForward(model, cfg.compile, log)  # the training forward; `model` stays eager for saving

    progress = _restore(cfg, accelerator, source, log)
    if main:  # once the checkpoint loaded: a resume that cannot start leaves the run's config.yaml as it was
        save_config(cfg, cfg.run_dir / "config.yaml")
    # built after the model's init and the start: its g's network draws from the seeded RNG
    validator = _validator(cfg, accelerator, log) if cfg.val.every > 0 and main else None
    if main:  # a resumed run hides what the killed one logged after its checkpoint (TensorBoard's purge_step)
        accelerator.init_trackers(cfg.run_name, init_kwargs={"tensorboard": {"purge_step": progress.step + 1}}
                                  if progress.step else {})
    rank, unwrapped = accelerator.process_index, accelerator.unwrap_model(model)
    loader: Iterable[dict]
    if adaptation is not None:
        adaptation.precompute(unwrapped, tokenizer, accelerator.device, main=main)
        loader = adaptation.batches(local_batch, rank, accelerator.num_processes)
    else:
        loader = train_loader_from_config(cfg, tokenizer, local_batch, seed=progress.loader_seed, rank=rank,
                                          position=progress.position, start_step=progress.step,
                                          world=accelerator.num_processes, log=log)
    batches = iter(loader)
    device_views = None if adapting else device_augment_from_config(cfg)  # data.augment_on=device: views made here
    stepper = Stepper(cfg, accelerator, model, forward, objective, optimizer, scheduler, tokenizer, log)
    scalars = Scalars(accelerator, log)
    checkpoints = Checkpoints(cfg, accelerator, tokenizer, progress, threads, log)
    progress.bad_samples = progress.position.bad_total

    model.train()
    metrics: dict = {}
    seen, t0, paused = 0, time.perf_counter(), 0.0  # paused: validation and checkpoint time, not training's
    bar = tqdm(range(progress.step, cfg.steps), initial=progress.step, total=cfg.steps, disable=not main,
               desc="train", dynamic_ncols=True)
    for step in bar:
        batch = progress.position.consume(next(batches), cfg.data.max_bad_samples)
        cloze = stepper.cloze_inputs(batch, step)  # on the loader's CPU batch: no device→host copy of the ids
        if device_views is not None:
            batch = device_views.apply(batch, accelerator.device)
        batch = {k: v.to(accelerator.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        masked, labels = (None if t is None else t.to(accelerator.device) for t in cloze)
        logs, progress.bad_samples = stepper(batch, (masked, labels), step, progress.position)
        if logs is None:  # a non-finite loss: the step was skipped
            continue
        seen += cfg.batch_size
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            train_time = time.perf_counter() - t0 - paused
            _log_training(cfg, scalars, bar, logs, progress.bad_samples, seen / max(train_time, 1e-9), done)
            seen, t0, paused = 0, time.perf_counter(), 0.0
        pause = time.perf_counter()
        if cfg.val.every > 0 and (done % cfg.val.every == 0 or done == cfg.steps):
            metrics, accept, hits = validate(cfg, accelerator, validator, unwrapped, tokenizer, progress, done, log,
                                             scalars)
            if accept:
                previous = progress.best
                progress.best = {"metric": cfg.val.select_by, "value": metrics[cfg.val.select_by], "step": done}
                if checkpoints.save(done, metrics, as_best=True, hits=hits):
                    progress.best_hits = hits
                else:
                    progress.best = previous  # best/ still holds the previous one
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            checkpoints.save(done, metrics)
        paused += time.perf_counter() - pause
    accelerator.end_training()
    saved = ckpt.saved_steps(cfg.run_dir)  # what a failed write left: the final checkpoint may be missing
    best = progress.best if progress.best and progress.best.get("step") == saved["best"] else None
    result = {"step": cfg.steps, "metrics": metrics, "best": best, "checkpoints": saved,
              "bad_samples": progress.bad_samples, "run_dir": str(cfg.run_dir), "mixed_precision": precision,
              "compiled": forward.active, "threads": threads.threads, "threads_source": threads.reason,
              "data": _splits_read(cfg, adaptation), "versions": versions()}
    if cut is not None:
        result["captions_cut"] = cut
    if main and cfg.model.token_init == "image_pivot" and (cfg.run_dir / token_init.RECORD).is_file():
        result["token_init"] = json.loads((cfg.run_dir / token_init.RECORD).read_text())
    if main and adaptation is not None:
        unwrapped.eval()
        result["adapt"] = adaptation.report(Encoder(unwrapped, tokenizer, cfg, device=str(accelerator.device)))
    if main:
        (cfg.run_dir / "result.json").write_text(json_text(result, indent=2))
    return result


def _splits_read(cfg: TrainConfig, adaptation: adapt.Adaptation | None) -> dict:
    """result.json's ``data``: the splits the run read. An adaptation's steps train on ``adapt.split``, so that is its
    ``train`` (what ``train`` means in every run's record); the starting run's train split, whose old-language
    captions are the bank each batch is contrasted with, is ``old_captions`` (its ``data.train_split``)."""
    root = Path(cfg.data.root)
    folders = {"train": root / cfg.data.train_split}
    if adaptation is not None:  # both already name their folder (under its data.root, or a path of its own)
        folders = {"train": adapt.split_dir(cfg), "old_captions": Path(adaptation.old_split)}
    return splits_read({**folders, "val": root / cfg.data.val_split,
                        "test": root / cfg.data.test_split if cfg.data.test_split else None})


def resume_source(cfg: TrainConfig, resume: str | None, adapting: bool) -> Path | None:
    """The checkpoint ``--resume`` names (None for a fresh run), found and checked before anything is written:
    a run that cannot start leaves nothing. Refuses a fresh run into a used folder, a resume into another run's
    folder, a finished run and the resume of an adaptation."""
    if adapting and resume:
        raise UserError(adapt.start.RESUME_REFUSED)
    source = ckpt.to_resume(cfg.run_dir, resume) if resume else None
    if source is None:
        if adapting:  # into the starting run's folder: said as such, not as a used folder to delete (below)
            adapt.start.refuse_starting_folder(cfg, adapt.starting_checkpoint(cfg.adapt.from_run))
        refuse_used_folder(cfg.run_dir, resumable=not adapting)  # a fresh run there would mix two runs' checkpoints
        refuse_foreign_files(cfg)  # nor overwrite a user's files
    else:
        if source.resolve().parent != ckpt.checkpoint_root(cfg.run_dir).resolve():  # another run's checkpoint
            refuse_used_folder(cfg.run_dir)  # continued into run_name's folder: never over a run it holds
            refuse_foreign_files(cfg)
        refuse_finished(source, cfg.steps)  # nothing to train, and result.json keeps the run's metrics
    return source


def _prepare(cfg: TrainConfig, accelerator: Accelerator, source: Path | None, adapting: bool, log: Log,
             written: Collection[str] | None) -> TrainConfig:
    """The data the run reads, made on the main process (tokenizer, feature cache, an adapted run's new rows), and
    the config completed with what they decide (saved with every checkpoint); every process returns the same."""
    if adapting:
        cfg = adapt.resolve_config(cfg)
    if accelerator.is_main_process:
        if source is not None:  # before the data is made (a world generated, a feature cache built) for nothing
            refuse_changed_config(source, cfg, skip=COMPLETED_KEYS)
        # the user's keys set away from their defaults that this run never reads: one line each; a resumed run's
        # config is the checkpoint's, whose start warned, but for the keys a changed run key makes ignored
        warn_ignored_keys(cfg, log, written if source is None else newly_ignored(source, cfg))
        if adapting:
            adapt.ensure_features(cfg, log)  # a new folder's images: their whole-image features, beside the split
            adapt.write_tokenizer(cfg, log)
        ensure_data(cfg, log, device=accelerator.device)  # a missing feature cache is built on the training device
        cfg = with_matched_image_share(cfg, log)  # data.match_images_of: the share
        cfg = with_text_languages(cfg)  # the Sigurdsson baseline's tables
        cfg = with_imported_dim(cfg)  # imported embeddings' width
        if source is not None:
            refuse_changed_config(source, cfg)  # before the run folder's config.yaml is rewritten
            refuse_changed_tokenizer(source, tokenizer_path(cfg))
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        cfg = with_imported_dim(with_text_languages(with_matched_image_share(cfg, log=lambda *_: None)))
    return cfg


def _captions_cut(cfg: TrainConfig, tokenizer: Tokenizer, log: Log) -> dict:
    """How many of the captions training reads are longer than ``data.max_length`` tokens (the loader cuts them in
    silence), counted on a seeded sample of the train split's shards (:func:`~..data.caption_lengths.captions_cut`);
    one line says it when any is."""
    from ..data.caption_lengths import captions_cut

    d = cfg.data
    cut = captions_cut(Path(d.root) / d.train_split, tokenizer, d.max_length, seed=cfg.seed,
                       languages=d.train_languages, image_share=d.train_image_share)
    if cut["cut"]:
        sample = (f"counted on a seeded sample, {cut['shards_read']} of the split's {cut['shards']} shards"
                  if cut["sample"] else "counted on every shard")
        log(f"warning: {cut['cut']} of {cut['of']} train captions ({100 * cut['share']:.1f}%, {sample}) are longer "
            f"than data.max_length={d.max_length} tokens; training reads their first {d.max_length} tokens only")
    return cut


def _check_run_folder(run_dir: Path) -> None:
    """A one-line error for a run folder that could not be created or written into (``output_dir``/``run_name``)."""
    try:
        writable_dir(run_dir, "the run folder")
    except BackRetrievalError as err:
        raise UserError(f"output_dir/run_name: {err}") from None


def _build_model(cfg: TrainConfig, tokenizer: Tokenizer, main: bool, start: bool, log: Log) -> GlobetrotterModel:
    """The model, its run folder (made once the model is built: a start that fails leaves no folder) and, for a fresh
    run with ``model.token_init=image_pivot``, the closed-form start on every process (its record, with the ridge
    strength chosen, in the run folder)."""
    model = build_model(cfg, tokenizer.get_vocab_size(), tokenizer)
    if main:
        try:
            cfg.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # one the early check could not foresee (a pseudo file system, say)
            raise UserError(f"output_dir/run_name: cannot create the run folder {cfg.run_dir} ({err.strerror})") from None
    if cfg.model.token_init == "image_pivot" and start:
        record = token_init.init_from_config(model, cfg, tokenizer, log)
        if main:
            (cfg.run_dir / token_init.RECORD).write_text(json_text(record, indent=2))
    return model


def _restore(cfg: TrainConfig, accelerator: Accelerator, source: Path | None, log: Log) -> Progress:
    """A fresh run's progress, or the checkpoint's: its state (weights, optimizer, scheduler, RNG) loaded, its step,
    best and data-stream position; a stream that cannot continue gets a fresh seed, different from the first."""
    progress = Progress(StreamPosition(max(1, cfg.data.workers)), loader_seed=cfg.seed)
    if source is None:
        return progress
    _load_state(accelerator, source, log)
    state = ckpt.read_state(source)
    progress.step, progress.best = state["step"], state.get("best")
    log(f"resumed from {source} at step {progress.step}")
    if progress.best and source.resolve().parent != ckpt.checkpoint_root(cfg.run_dir).resolve():
        log(f"another run's checkpoint: its best (step {progress.best.get('step')}) stays in that run; this run's "
            f"best is chosen among its own validations")  # its best/ is not here: a best reported, none to load
        progress.best = None
    if accelerator.is_main_process:
        progress.best_hits = load_hits(ckpt.checkpoint_root(cfg.run_dir) / "best", progress.best)
    saved = resume_position(source, accelerator.process_index, cfg.data.workers, log, accelerator.num_processes)
    if saved is None:
        progress.loader_seed = cfg.seed * 1_000_003 + progress.step
    else:
        progress.position = saved
    return progress


def _load_state(accelerator: Accelerator, source: Path, log: Log) -> None:
    """``accelerator.load_state`` of checkpoint ``source``; a damaged file is a one-line error naming it, and RNG
    states that cannot be read (Accelerate goes on without them, saying so at info level) are one logged line."""
    rng = source / f"random_states_{accelerator.process_index}.pkl"
    why = ckpt.unreadable(rng) if rng.is_file() else "missing"
    if why:
        log(f"{rng}: cannot restore the RNG states ({why}); the run goes on from other random numbers, so this "
            f"resume is not exact")
    try:
        accelerator.load_state(str(source))
    except ckpt.LOAD_ERRORS as err:
        damaged = ckpt.damaged_file(source)
        what = f"{damaged[0].name} is damaged ({damaged[1]})" if damaged else error_line(err)
        others = sorted(p.name for p in source.parent.glob("step-*") if p.is_dir() and p.name != source.name)
        remedy = (f"resume from another one of the run's checkpoints ({', '.join(others)}: --resume "
                  f"{source.parent / others[-1]})" if others else "the run holds no other checkpoint to resume from")
        raise UserError(f"--resume {source}: cannot load the checkpoint: {what}; {remedy}") from None


def _validator(cfg: TrainConfig, accelerator: Accelerator, log: Log) -> Validator:
    """The validation hook (main process); warns when val is too small for a BkR@K to tell checkpoints apart."""
    from .validation import Validator

    validator = Validator(cfg, device=str(accelerator.device))
    if validator.note:  # e.g. the languages a per-language model cannot encode, left out
        log(validator.note)
    warning = validator.val.saturation_warning()
    if warning:  # the best checkpoint would then be chosen by a tie
        log(warning)
    return validator


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


UNDEFINED_BECAUSE = {
    "alpha/precision": "no pair with α > 0 in the batch",
    "alpha/cross_language_share": "no pair with α > 0 in the batch",
    "alpha/recall": "no true translation pair in the batch",
}
"""Why a statistic of :func:`~..losses.alpha_stats` (or the objective) is NaN: a share of an empty set."""


class Scalars:
    """Writes a step's scalars to TensorBoard (``accelerator.log``), leaving out the statistics that are undefined
    there (NaN: a share of an empty set, such as ``alpha/precision`` of a batch without a pair with α > 0), which
    would break the plots; the first time a statistic is left out, one line says which and why. A loss or
    ``grad_norm`` is always written as it is: a non-finite one is divergence, not an undefined statistic (the
    :class:`Stepper` skips the steps whose loss is non-finite)."""

    ALWAYS = ("loss/", "grad_norm")

    def __init__(self, accelerator: Accelerator, log: Log) -> None:
        self.accelerator, self.log = accelerator, log
        self.said: set[str] = set()

    def __call__(self, values: dict[str, float], step: int) -> None:
        undefined = [k for k, v in values.items() if isinstance(v, float) and math.isnan(v) and not k.startswith(self.ALWAYS)]
        new = [k for k in undefined if k not in self.said]
        if new:
            why = "; ".join(f"{k} ({UNDEFINED_BECAUSE.get(k, 'NaN')})" for k in new)
            self.log(f"step {step}: undefined, so not plotted at this step nor any other where it is undefined "
                     f"(said once): {why}")
            self.said.update(new)
        self.accelerator.log({k: v for k, v in values.items() if k not in undefined}, step=step)


class Checkpoints:
    """Saves the run's checkpoints: ``step-N/`` (then ``latest`` points at it, and old ones are pruned to
    ``keep_checkpoints``) or ``best/``, each with its config, tokenizer, state (step, best, metrics, bad samples,
    threads), every process's stream position and, in ``best/``, the selection hits."""

    def __init__(self, cfg: TrainConfig, accelerator: Accelerator, tokenizer: Tokenizer, progress: Progress,
                 threads: ThreadChoice, log: Log) -> None:
        self.cfg, self.accelerator, self.progress, self.threads, self.log = cfg, accelerator, progress, threads, log
        self.root = ckpt.checkpoint_root(cfg.run_dir)
        self.tokenizer_file = tokenizer_path(cfg)

    def save(self, step: int, metrics: dict, as_best: bool = False, hits: np.ndarray | None = None) -> bool:
        """Write the checkpoint of ``step`` (``best/`` with ``as_best``); False when it could not be written."""
        progress, rank = self.progress, self.accelerator.process_index

        def fill(folder: Path, is_main: bool) -> None:
            ckpt.write_stream_position(folder, rank, progress.position.to_dict())
            if is_main:
                save_hits(folder, hits if as_best else None)
                save_config(self.cfg, folder / "config.yaml")
                copy_tokenizer(self.tokenizer_file, folder / "tokenizer.json")
                state = {"step": step, "best": progress.best, "metrics": metrics, "bad_samples": progress.bad_samples,
                         "threads": self.threads.threads}
                (folder / ckpt.STATE).write_text(json_text(state, indent=2))

        name = "best" if as_best else ckpt.step_name(step)
        return ckpt.write(self.accelerator, self.root, name, fill, latest=not as_best, keep=self.cfg.keep_checkpoints,
                          log=self.log)


@contextmanager
def texts_cut_said_once(said: set[str], log: Log) -> Iterator[None]:
    """Every validation encodes the same val captions: the :class:`~..texts_cut.TextsCut` warning of its encoding calls
    is logged once per run (``said``: the messages logged so far), not at each validation; other warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TextsCut)
        yield
    for w in caught:
        if not issubclass(w.category, TextsCut):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in said:
            said.add(str(w.message))
            log(f"warning: validation: {w.message} (said once)")


def validate(cfg: TrainConfig, accelerator: Accelerator, validator: Validator | None, unwrapped: GlobetrotterModel,
             tokenizer: Tokenizer, progress: Progress, done: int, log: Log,
             scalars: Scalars) -> tuple[dict, bool, np.ndarray | None]:
    """Validate after step ``done`` on the main process and judge the checkpoint against ``best``
    (:func:`.selection.judge`); every process gets ``(metrics, accept)``, the main one the selection hits too. The
    metrics go to TensorBoard through ``scalars``."""
    key, verdict, hits = cfg.val.select_by, Verdict(False), None
    metrics: dict = {}
    if accelerator.is_main_process:
        assert validator is not None  # the main process builds one whenever val.every > 0, which calls this
        unwrapped.eval()
        with texts_cut_said_once(validator.texts_cut_said, log), texts_cut_once():  # val and test texts: one line
            metrics, all_hits = validator.evaluate(Encoder(unwrapped, tokenizer, cfg, device=str(accelerator.device)))
        unwrapped.train()
        hits = all_hits.get(key)
        if key and key in metrics:
            verdict = judge(metrics[key], hits, progress.best, progress.best_hits, cfg.val.select_test,
                            cfg.val.select_alpha, cfg.seed)
        scalars({**metrics, **_selection_logs(verdict)}, done)
        log(f"step {done}: " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if verdict.note:
            log(f"step {done}: {verdict.note}")
    metrics, accept = _broadcast((metrics, verdict.accept), accelerator)
    return metrics, accept, hits


def _log_training(cfg: TrainConfig, scalars: Scalars, bar: tqdm, logs: dict, bad_samples: int,
                  samples_per_s: float, done: int) -> None:
    """The step's losses, learning rate (the one it trained with), throughput (samples per second of training since
    the last log: validation and checkpoint writes left out) and bad samples to TensorBoard and the progress bar."""
    logs["samples_per_s"] = samples_per_s
    logs["data/bad_samples"] = bad_samples
    logs["loss/total"] = sum(getattr(cfg.loss, k.split("/")[1]) * v for k, v in logs.items()
                             if k.startswith("loss/") and k != "loss/total")
    scalars(logs, done)
    bar.set_postfix(loss=f"{logs['loss/total']:.3f}", sps=f"{logs['samples_per_s']:.0f}")


def _no_accelerator() -> bool:
    """True where torch sees no GPU (nor another accelerator): Accelerate is then told ``cpu=True``, without which
    the N processes of ``accelerate launch --multi_gpu`` on CPU (gloo) each trained alone as a run of one process,
    all writing into one run folder."""
    probe = getattr(torch, "accelerator", None)  # torch >= 2.6
    return not (probe.is_available() if probe is not None else torch.cuda.is_available())


def _configure_threads(cfg: TrainConfig, process: PartialState, source: Path | None, log: Log) -> ThreadChoice:
    """Torch's intra-op threads for this process (:mod:`globetrotter.threads`): ``cfg.threads``, else
    ``OMP_NUM_THREADS``, else the cores' share of each process and data worker on this machine. A resumed run
    with automatic threads keeps the count its checkpoint was trained with, so it continues exactly."""
    processes = int(os.environ.get("LOCAL_WORLD_SIZE") or process.num_processes)
    choice = choose_threads(cfg.data.workers, processes, cfg.threads, load=load_average())
    saved = ckpt.read_state(source).get("threads") if source is not None else None
    if choice.source == "automatic" and source is not None and saved and saved != choice.threads:
        choice = ThreadChoice(int(saved), "checkpoint", f"the count {source.name} was trained with, so that the "
                              f"resumed run continues exactly (automatic would be {choice.threads})")
    apply_threads(choice.threads)
    log(f"{choice}; set threads=N in the config or {THREADS_ENV}=N to choose")
    return choice


def _selection_logs(verdict: Verdict) -> dict[str, float]:
    """TensorBoard scalars of a selection test: its p-value and whether a higher value was rejected as noise."""
    if verdict.p_value is None:
        return {}
    return {"val/select_p_value": verdict.p_value, "val/select_rejected": float(verdict.noise)}


_T = TypeVar("_T")


def _broadcast(obj: _T, accelerator: Accelerator) -> _T:
    """The main process's ``obj`` (picklable) on every process (checkpoint selection must agree)."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    box = [obj]
    broadcast_object_list(box, from_process=0)
    return box[0]
