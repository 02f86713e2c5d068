"""The training loop, top to bottom, with HF Accelerate doing the devices.

CPU, one GPU, many GPUs or nodes run the same code (``accelerate launch train.py ...``).
Each process reads its own resampled WebDataset stream of ``batch_size / world_size``
samples; the losses see the global batch through all-gathered features. A checkpoint holds
everything that decides the rest of the run (weights, optimizer, scheduler, RNG states, each
process's data-stream position; the cloze masks are seeded per step), so ``--resume latest``
continues the uninterrupted run exactly (bit for bit on CPU at a fixed thread count).

:func:`train` reads in the order a run happens: refuse what cannot start, prepare the data and the
config, build the model and its start, restore a checkpoint, then step (:class:`~.step.Stepper`), validate
and choose ``best`` (:func:`~.validation_step.validate`), and save (:class:`~.progress.Checkpoints`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Collection, Iterable

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import ProjectConfiguration, set_seed
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from backretrieval.errors import BackRetrievalError
from backretrieval.outputs import writable_dir
from backretrieval.records import json_text

from ..config import TrainConfig
from ..config_checks import warn_ignored_keys
from ..config_io import save_config
from ..embeddings import Encoder
from ..encoder import build_model
from ..errors import UserError
from ..models import GlobetrotterModel
from ..threads import ENV as THREADS_ENV
from ..threads import ThreadChoice, apply_threads, choose_threads, load_average, using_threads
from ..tokenizer import load_tokenizer
from ..data.pipeline import device_augment_from_config, train_loader_from_config
from ..evaluation.records import versions
from . import adapt, token_init
from . import checkpoint as ckpt
from .logs import Log, Scalars, log_training
from .objective import GlobetrotterObjective
from .prepare import COMPLETED_KEYS, ensure_data, with_imported_dim, with_matched_image_share, with_text_languages
from .progress import Checkpoints, restore_progress
from .resume import (hold_run_folder, newly_ignored, refuse_changed_config, refuse_changed_tokenizer,
                     refuse_finished, refuse_foreign_files, refuse_used_folder)
from .report import splits_read
from .scheduler import warmup_cosine, warmup_warning
from .speed import CompiledForward, resolve_mixed_precision, warn_launcher_precision
from .step import Stepper, param_groups
from .tokenizer_file import tokenizer_path
from .validation_step import build_validator, validate


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

    progress = restore_progress(cfg, accelerator, source, log)
    if main:  # once the checkpoint loaded: a resume that cannot start leaves the run's config.yaml as it was
        save_config(cfg, cfg.run_dir / "config.yaml")
    # built after the model's init and the start: its g's network draws from the seeded RNG
    validator = build_validator(cfg, accelerator, log) if cfg.val.every > 0 and main else None
    if main:  # TensorBoard's purge_step hides what an earlier try logged from that step on: a resumed run's killed one
        # after its checkpoint, a fresh run's failed one (a folder it left before its first checkpoint) from the start
        accelerator.init_trackers(cfg.run_name, init_kwargs={"tensorboard": {
            "purge_step": progress.step + 1 if progress.step else 0}})
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
            log_training(cfg, scalars, bar, logs, progress.bad_samples, seen / max(train_time, 1e-9), done)
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
        raise UserError(adapt.start.resume_refused())
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
