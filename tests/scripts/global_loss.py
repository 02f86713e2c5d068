"""Compute the Globetrotter loss and gradients on one fixed global batch, split over the processes.

Run with ``accelerate launch --cpu --num_processes N tests/scripts/global_loss.py OUT.json``;
process 0 writes the loss terms and a gradient fingerprint. The same numbers must come
out for N = 1 and N = 2 (tests/test_training.py).
"""
import json
import sys

import torch
from accelerate import Accelerator

from globetrotter.config import load_train_config
from globetrotter.encoder import build_model
from globetrotter.training.objective import GlobetrotterObjective

GLOBAL_BATCH, LENGTH, VOCAB, SIZE = 8, 6, 50, 32


def main(out_path: str) -> None:
    acc = Accelerator(cpu=True)
    cfg = load_train_config(None, ["model.d_model=32", "model.layers=1", "model.heads=2", "model.ffn=64",
                                   "model.embed_dim=16", "model.dropout=0.0", "data.max_length=8"])
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB).eval()  # eval: no dropout, BatchNorm with running statistics
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (GLOBAL_BATCH, LENGTH), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[::3, -2:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    masked = ids.clone()
    masked[:, 2] = 1
    views = torch.randn(2, GLOBAL_BATCH, 3, SIZE, SIZE, generator=g)
    truth = torch.arange(GLOBAL_BATCH) % 3

    n = GLOBAL_BATCH // acc.num_processes
    part = slice(acc.process_index * n, (acc.process_index + 1) * n)
    model = acc.prepare(model)
    objective = GlobetrotterObjective(cfg.loss)
    out = model(ids[part], mask[part], masked[part], views[0, part], views[1, part])
    loss, logs = objective(out, {"truth": truth[part]}, labels[part])
    acc.backward(loss)
    grads = {name: p.grad.double().flatten()[:8].tolist() + [float(p.grad.double().norm())]
             for name, p in acc.unwrap_model(model).named_parameters() if p.grad is not None}
    if acc.is_main_process:
        with open(out_path, "w") as fh:
            json.dump({"logs": logs, "grads": grads, "processes": acc.num_processes}, fh)


if __name__ == "__main__":
    main(sys.argv[1])
