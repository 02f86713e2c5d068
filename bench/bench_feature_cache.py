"""Frozen-backbone training: the feature cache against pixels, measured in the same run.

    python bench/bench_feature_cache.py --config configs/flickr8k.yaml [--steps 5] [--build-images 64] [key=value ...]

Prints (1) the cache build rate (images/s, each image through the backbone K+1 times: the whole
image and K augmented views) on ``--build-images`` images of the train split, and (2) end-to-end
training samples/s (next batch + forward, losses, backward, AdamW) of the config as it is, from
the cache, against the same config reading pixels (``data.features=null``, and ``data.batching=random``: neighbour
batches are mined on the cache), same batch size, and whether the
cached path meets its target of 10x the pixel path. The build rate includes the loader's start: a few hundred
``--build-images`` give the steady rate. With ``model.token_ngrams`` set, (3) the cached path at the
config's batch without the n-gram rows, to show what the subword-informed table costs a step. The config's cache
must exist (``python train.py --config ...`` or ``globetrotter-data features build`` builds it).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from globetrotter.argtypes import positive_int
from globetrotter.errors import run_cli

if TYPE_CHECKING:
    from globetrotter.config import TrainConfig


def train_rate(cfg: TrainConfig, steps: int) -> float:
    """Samples/s of ``steps`` training steps, batches drawn from the config's stream inside the timing."""
    from globetrotter.data.pipeline import train_loader_from_config
    from globetrotter.encoder import build_model
    from globetrotter.losses import mask_tokens
    from globetrotter.tokenizer import load_tokenizer, special_ids
    from globetrotter.training.objective import GlobetrotterObjective
    from globetrotter.training.tokenizer_file import tokenizer_path

    tok = load_tokenizer(tokenizer_path(cfg))
    specials = special_ids(tok)
    torch.manual_seed(0)
    model = build_model(cfg, tok.get_vocab_size(), tok).train()
    objective = GlobetrotterObjective(cfg.loss)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.optim.lr)
    it = iter(train_loader_from_config(cfg, tok, cfg.batch_size, seed=cfg.seed))

    def step() -> None:
        b = next(it)
        masked, labels = mask_tokens(b["input_ids"], b["attention_mask"], specials["mask"], tok.get_vocab_size(),
                                     list(specials.values()), p=cfg.loss.mask_prob)
        out = model(b["input_ids"], b["attention_mask"], masked, b.get("view1"), b.get("view2"), cloze_targets=labels != -100)
        loss, _ = objective(out, b, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up (and loader start)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * cfg.batch_size / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/flickr8k.yaml", help="training config (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps of each path, after one warm-up step (default %(default)s)")
    p.add_argument("--pixel-batch", type=positive_int, default=64, help="batch size of the cached and the pixel path compared "
                   "(the config's own batch size is timed on the cached path too) (default %(default)s)")
    p.add_argument("--build-images", type=positive_int, default=64, help="images for the cache-build timing (default %(default)s)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as train.py takes them")
    args = p.parse_args()

    from globetrotter.config import load_train_config
    from globetrotter.data.feature_cache import spec_from_config
    from globetrotter.data.feature_cache_build import build_feature_cache
    from globetrotter.models.image import create_image_backbone

    cfg = load_train_config(args.config, args.overrides)
    from globetrotter.data.feature_cache import SPEC, cache_dir_for
    from globetrotter.errors import UserError

    cache = cache_dir_for(cfg, cfg.data.train_split)
    if cache is None:  # data.features unset
        raise UserError(f"{args.config}: data.features is not set; nothing to compare (give a config that trains "
                        f"from a feature cache, or data.features=DIR)")

    if not (cache / SPEC).is_file():  # the timed runs would build the whole cache first (3,900 images: 10 minutes)
        raise UserError(f"{cache}: no feature cache there; this benchmark times a built one: build it first with "
                        f"`globetrotter-data features build {Path(cfg.data.root) / cfg.data.train_split} --config "
                        f"{args.config} --out {cache}` (or a training run)")
    spec = spec_from_config(cfg)
    backbone = create_image_backbone(cfg.model.image_backbone, cfg.model.image_pretrained, **cfg.model.image_backbone_args)
    with tempfile.TemporaryDirectory() as tmp:
        record = build_feature_cache(Path(cfg.data.root) / cfg.data.train_split, spec, Path(tmp) / "features", backbone,
                                     workers=cfg.data.workers, progress=False, max_images=args.build_images)
    cached_cfg = replace(cfg, batch_size=args.pixel_batch)
    pixel_cfg = replace(cached_cfg, data=replace(cfg.data, features=None, batching="random"))
    cached = train_rate(cached_cfg, args.steps)
    pixels = train_rate(pixel_cfg, args.steps)
    big = train_rate(cfg, args.steps) if cfg.batch_size != args.pixel_batch else cached
    plain = None
    if cfg.model.token_ngrams:  # what the n-gram rows cost a step
        plain = train_rate(replace(cfg, model=replace(cfg.model, token_ngrams=None)), args.steps)
    print(f"config {args.config} {' '.join(args.overrides)}  torch threads {torch.get_num_threads()}  "
          f"backbone {spec.backbone} at {spec.image_size}px, {spec.views} views + whole image")
    print(f"cache build:               {record['images_per_s']:8.1f} images/s ({record['images_per_s'] * (spec.views + 1):.1f} backbone passes/s)")
    print(f"training, pixels   (B={args.pixel_batch}): {pixels:8.1f} samples/s")
    print(f"training, cached   (B={args.pixel_batch}): {cached:8.1f} samples/s  ({cached / pixels:.1f}x pixels; "
          f"target 10x: {'met' if cached >= 10 * pixels else 'NOT met'})")
    print(f"training, cached   (B={cfg.batch_size}): {big:8.1f} samples/s  ({big / pixels:.1f}x pixels)")
    if plain is not None:
        print(f"  same, without model.token_ngrams: {plain:8.1f} samples/s  (the n-gram rows cost {1 - big / plain:.0%})")


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
