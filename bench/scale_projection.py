"""The paper's training run projected onto GPUs from the model's counted step FLOPs.

    .venv/bin/python bench/scale_projection.py --config configs/globetrotter-paper.yaml

Counts the floating-point operations of one training step (forward, the four losses, backward) of the config's
model with ``torch.utils.flop_counter`` on a small batch of ``--tokens``-token captions (and, for the pixel path,
two views at the config's image size), per sample, for both image paths: pixels through the trainable backbone,
and cached or imported features (frozen backbone: the text encoder and heads only). Then the time of the paper's
schedule (``--epochs`` over ``--samples`` captions) on 1 and 8 GPUs at ``--peak-tflops`` and a model-FLOPs
utilisation of ``--mfu``: assumptions, printed with the result. Data loading is not in the FLOPs: the pixel path
also needs ``samples x epochs`` decoded and augmented images (docs/scale.md).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from globetrotter.argtypes import positive_float, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402

if TYPE_CHECKING:
    from globetrotter.config import TrainConfig


def step_flops(cfg: TrainConfig, tokens: int, batch: int, features: bool) -> float:
    """FLOPs of one training step on ``batch`` samples (counted, not estimated)."""
    from torch.utils.flop_counter import FlopCounterMode

    from globetrotter.encoder import build_model
    from globetrotter.losses import mask_tokens
    from globetrotter.training.objective import GlobetrotterObjective

    vocab = cfg.data.vocab_size
    cfg = replace(cfg, model=replace(cfg.model, image_pretrained=None))  # counting needs no weights (never a download)
    if features:  # what a cache or imported embeddings hand the model: pooled backbone features
        cfg = replace(cfg, model=replace(cfg.model, freeze_image_backbone=True))
    torch.manual_seed(0)
    model = build_model(cfg, vocab).train()
    objective = GlobetrotterObjective(cfg.loss)
    ids = torch.randint(5, vocab, (batch, tokens))
    mask = torch.ones_like(ids)
    if features:
        assert model.image is not None  # main refused a model that reads no images
        width = cast(int, model.image.num_features)  # an int in timm and ImportedFeatures; nn.Module's typing can't see
        views = [torch.randn(batch, width) for _ in range(2)]
    else:
        views = [torch.randn(batch, 3, cfg.data.image_size, cfg.data.image_size) for _ in range(2)]
    masked, labels = mask_tokens(ids, mask, 4, vocab, [0, 1, 2, 3, 4], p=cfg.loss.mask_prob)
    b = {"input_ids": ids, "attention_mask": mask, "truth": torch.arange(batch), "langs": ["en", "de"] * (batch // 2),
         "view1": views[0], "view2": views[1]}
    with FlopCounterMode(display=False) as counter:
        out = model(ids, mask, masked, views[0], views[1], cloze_targets=labels != -100)
        loss, _ = objective(out, b, labels)
        loss.backward()
    return float(counter.get_total_flops())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/globetrotter-paper.yaml",
                   help="training config whose model is counted (default %(default)s)")
    p.add_argument("--tokens", type=positive_int, default=32, help="tokens per caption (default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=8, help="samples of the counted step (default %(default)s)")
    p.add_argument("--samples", type=positive_float, default=3.15e6, help="training captions (default %(default)g, the paper's 3.15M)")
    p.add_argument("--epochs", type=positive_float, default=200, help="epochs (default %(default)g, the paper's)")
    p.add_argument("--peak-tflops", type=positive_float, default=989.0, help="GPU dense bf16 peak TFLOP/s (default %(default)g, an H100 SXM's data-sheet peak)")
    p.add_argument("--mfu", type=positive_float, default=0.3, help="assumed model-FLOPs utilisation (default %(default)s)")
    args = p.parse_args()

    from globetrotter.config import load_train_config

    cfg = load_train_config(args.config, ["data.synth=null"])
    if not cfg.loss.uses_images:  # no backbone: the features path has none to read (a traceback after the first row)
        raise UserError(f"--config {args.config}: its model reads no images (loss.image and loss.cross are 0, no "
                        f"transitive loss.text); this projection counts the two image paths of a model that does")
    if cfg.model.token_ngrams:  # the n-gram rows need the tokenizer's tokens; they are lookups and sums, no matmul
        cfg = replace(cfg, model=replace(cfg.model, token_ngrams=None))
        print("model.token_ngrams: counted without the n-gram rows (embedding lookups and sums, no tokenizer read)")
    total_samples = args.samples * args.epochs
    rate = args.peak_tflops * 1e12 * args.mfu
    print(f"{args.config}: d_model {cfg.model.d_model}, {cfg.model.layers} layers, vocabulary {cfg.data.vocab_size}, "
          f"backbone {cfg.model.image_backbone} at {cfg.data.image_size} px; {args.tokens} tokens per caption")
    print(f"schedule: {args.epochs:g} epochs x {args.samples:.3g} captions = {total_samples:.3g} samples; "
          f"GPU rate assumed {args.peak_tflops:g} TFLOP/s peak x {args.mfu:g} utilisation")
    print(f"{'image path':<34} {'GFLOP/sample':>13} {'1 GPU (h)':>10} {'8 GPUs (h)':>11}")
    for label, features in (("pixels, trainable backbone", False), ("cached / imported features", True)):
        per_sample = step_flops(cfg, args.tokens, args.batch, features) / args.batch
        hours = total_samples * per_sample / rate / 3600
        print(f"{label:<34} {per_sample / 1e9:>13.2f} {hours:>10.1f} {hours / 8:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
