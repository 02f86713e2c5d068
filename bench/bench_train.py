"""Training throughput: the data loader, the step and both together, views made on the CPU or on the device.

    python bench/bench_train.py --config configs/quickstart.yaml [key=value ...] [--steps 10] [--threads 1,2]

For each intra-op thread count of ``--threads`` (the training process's ``torch.set_num_threads``;
the loader's worker processes always run one thread) and each place SimCLR's views are made
(``data.augment_on`` cpu, then device), prints samples/s of:

- loader: the batch stream alone (decode, tokenization, and the two views on the CPU path; on the
  device path the fixed-size uint8 images and the views' parameters), with the config's workers;
- step: what the training process does per batch once it has it: on the device path the views
  made on the device, then forward, the four losses, backward and AdamW (batches already in memory);
- full: both in turn, as the trainer runs them (next batch, device views, step).

Every figure is followed by its ratio to the same figure of the first row (views on the CPU at the
first thread count), measured in the same run; ``views`` is the device views alone, and
``loader/step`` says whether the loader keeps up (at least 2x). Also the peak GPU memory on a GPU.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Literal

import torch

from globetrotter.argtypes import comma_separated, positive_int
from globetrotter.errors import run_cli

if TYPE_CHECKING:
    from globetrotter.data.device_augment import DeviceSimCLR

PATHS: tuple[Literal["cpu", "device"], ...] = ("cpu", "device")  # data.augment_on


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/quickstart.yaml", help="training config (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=10, help="timed batches per figure, after 2 warm-up ones (default %(default)s)")
    p.add_argument("--threads", type=comma_separated(positive_int), default=[1, 2], metavar="N,N",
                   help="intra-op thread counts to compare, comma-separated (default: 1,2)")
    p.add_argument("overrides", nargs="*", help="config overrides key=value")
    args = p.parse_args()

    from globetrotter.config import load_train_config
    from globetrotter.data.pipeline import device_augment_from_config, train_loader_from_config
    from globetrotter.encoder import build_model
    from globetrotter.losses import mask_tokens
    from globetrotter.tokenizer import load_tokenizer, special_ids
    from globetrotter.training.objective import GlobetrotterObjective
    from globetrotter.training.prepare import ensure_data
    from globetrotter.training.tokenizer_file import tokenizer_path
    from globetrotter.training.speed import CompiledForward

    cfg = load_train_config(args.config, args.overrides)
    ensure_data(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = load_tokenizer(tokenizer_path(cfg))
    specials = special_ids(tok)
    torch.manual_seed(0)
    model = build_model(cfg, tok.get_vocab_size(), tok).to(device).train()
    objective = GlobetrotterObjective(cfg.loss)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.mixed_precision)
    forward = CompiledForward(model, cfg.compile, print)  # compile=true: as the trainer does, eager on failure

    def step(batch: dict, views: DeviceSimCLR | None) -> None:
        if views is not None:
            batch = views.apply(dict(batch), device)
        b = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        masked, labels = mask_tokens(batch["input_ids"], batch["attention_mask"], specials["mask"], tok.get_vocab_size(),
                                     list(specials.values()), p=cfg.loss.mask_prob)
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            out = forward(b["input_ids"], b["attention_mask"], masked.to(device), b.get("view1"), b.get("view2"),
                          cloze_targets=(labels != -100).to(device))
        loss, _ = objective(out, b, labels.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def timed(fn: Callable[[], object], n: int) -> float:
        """Samples/s of ``n`` calls of ``fn`` (one batch each)."""
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return n * cfg.batch_size / (time.perf_counter() - t0)

    rows, warm_s = [], None
    for threads in args.threads:
        torch.set_num_threads(threads)
        for path in PATHS:
            run_cfg = replace(cfg, data=replace(cfg.data, augment_on=path))
            views = device_augment_from_config(run_cfg)
            it = iter(train_loader_from_config(run_cfg, tok, cfg.batch_size, seed=cfg.seed))
            batches = [next(it) for _ in range(2)]  # the workers' start, not timed
            loader = timed(lambda: batches.append(next(it)), args.steps)
            t_warm = time.perf_counter()
            for b in batches[:2]:
                step(b, views)
            warm_s = warm_s if warm_s is not None else time.perf_counter() - t_warm
            ready = iter(batches[2:])
            augment = timed(lambda: views.apply(dict(next(ready)), device), args.steps) if views else None
            ready = iter(batches[2:])
            train = timed(lambda: step(next(ready), views), args.steps)
            full = timed(lambda: step(next(it), views), args.steps)
            rows.append((path, threads, loader, augment, train, full))
            it = iter(())  # the loader's iterator dropped: its workers end (the lambdas above read `it` late)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30

    print(f"config {args.config} {' '.join(args.overrides)}  device {device}  batch {cfg.batch_size}  "
          f"image {cfg.data.image_size} (device path: from {cfg.data.source_side})  loader workers {cfg.data.workers}  "
          f"steps {args.steps}  mixed_precision {cfg.mixed_precision}  compiled {forward.active}  "
          f"first 2 steps {warm_s:.1f} s")
    print(f"{'views on':9s} {'threads':>7s} {'loader/s':>16s} {'views/s':>9s} {'step/s':>16s} {'full/s':>16s}  loader/step")
    base = rows[0]
    for path, threads, loader, augment, train, full in rows:
        cells = [f"{v:7.0f} ({v / b:5.2f}x)" for v, b in ((loader, base[2]), (train, base[4]), (full, base[5]))]
        verdict = "keeps up" if loader >= 2 * train else "BOTTLENECK: data loading"
        print(f"{path:9s} {threads:7d} {cells[0]:>16s} {'-' if augment is None else f'{augment:.0f}':>9s} "
              f"{cells[1]:>16s} {cells[2]:>16s}  {loader / train:.2f}x {verdict}")
    if device == "cuda":
        print(f"peak GPU memory:  {peak:.2f} GiB")


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
