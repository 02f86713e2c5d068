"""Training throughput: samples/s of a training step vs the data loader alone, same run.

    python bench/bench_train.py --config configs/quickstart.yaml [--steps 10] [key=value ...]

Prints the loader's batches/s (decode + two SimCLR views + tokenization, with the config's
workers), the model step's samples/s on batches already in memory (forward, the four
losses, backward, AdamW), and their ratio: the loader must be at least 2x the training
rate or the GPU/CPU waits on data. Also the peak GPU memory when run on a GPU.
"""
from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/quickstart.yaml")
    p.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps, which compile)")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()

    from globetrotter.config import load_train_config
    from globetrotter.data.pipeline import train_loader_from_config
    from globetrotter.encoder import build_model
    from globetrotter.losses import mask_tokens
    from globetrotter.tokenizer import load_tokenizer, special_ids
    from globetrotter.training.objective import GlobetrotterObjective
    from globetrotter.training.prepare import ensure_data, tokenizer_path
    from globetrotter.training.speed import CompiledForward

    cfg = load_train_config(args.config, args.overrides)
    ensure_data(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = load_tokenizer(tokenizer_path(cfg))
    specials = special_ids(tok)
    loader = train_loader_from_config(cfg, tok, cfg.batch_size, seed=cfg.seed)
    it = iter(loader)
    batches = [next(it) for _ in range(2)]
    t0 = time.perf_counter()
    for _ in range(args.steps):
        batches.append(next(it))
    loader_rate = args.steps * cfg.batch_size / (time.perf_counter() - t0)

    model = build_model(cfg, tok.get_vocab_size()).to(device).train()
    objective = GlobetrotterObjective(cfg.loss)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.mixed_precision)
    forward = CompiledForward(model, cfg.compile, print)  # compile=true: as the trainer does, eager on failure

    def step(batch: dict) -> None:
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

    t_warm = time.perf_counter()
    for b in batches[:2]:
        step(b)
    warm_s = time.perf_counter() - t_warm
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for b in batches[2:]:
        step(b)
    if device == "cuda":
        torch.cuda.synchronize()
    train_rate = args.steps * cfg.batch_size / (time.perf_counter() - t0)
    print(f"config {args.config} {' '.join(args.overrides)}  device {device}  batch {cfg.batch_size}  "
          f"torch threads {torch.get_num_threads()}  loader workers {cfg.data.workers}  "
          f"mixed_precision {cfg.mixed_precision}  compiled {forward.active}")
    print(f"2 warm-up steps:  {warm_s:8.1f} s (compilation included)")
    print(f"loader alone:     {loader_rate:8.1f} samples/s")
    print(f"training step:    {train_rate:8.1f} samples/s")
    print(f"loader / training: {loader_rate / train_rate:.2f}x ({'keeps up' if loader_rate >= 2 * train_rate else 'BOTTLENECK: data loading'})")
    if device == "cuda":
        print(f"peak GPU memory:  {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
