"""What the adaptation's steps read, computed once: the bank (the old languages' training captions encoded by
the starting model, without gradient, and their images' features), the new language's captions as tokens and
its images as backbone features; and the endless batches drawn from them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from data_prep.shards import decode_sample_image

from ...config import TrainConfig
from ...data.augment import eval_transform
from ...data.feature_cache_build import unique_samples
from ...data.truth import truth_id
from ...embeddings import Encoder
from ...errors import UserError
from ...models import GlobetrotterModel
from ...tokenizer import encode_batch
from ..train_set import train_captions
from .start import start_train_config
from . import split


@dataclass
class Precomputed:
    """The bank (``bank``: features by head, ``bank_truth``, ``bank_langs``) and the new language's captions
    (``ids``, ``mask``, ``truth``) with their images' backbone features (``images``; None without an image side)."""

    bank: dict[str, torch.Tensor]
    bank_truth: torch.Tensor
    bank_langs: np.ndarray
    ids: torch.Tensor
    mask: torch.Tensor
    truth: torch.Tensor
    images: torch.Tensor | None


@torch.no_grad()
def image_features(cfg: TrainConfig, model: GlobetrotterModel, split_dir: Path, image_ids: list[str],
                   device: str | torch.device, progress: bool) -> torch.Tensor:
    """Pooled backbone features [n, F] of the whole images ``image_ids`` of the split folder ``split_dir``, in that
    order: a feature cache's row 0 with ``data.features`` (the run's cache, or the split's own:
    :func:`.split.features`), else the pixels through ``model``'s backbone."""
    if cfg.data.features:
        cache = split.features(cfg, split_dir, image_ids)
        return torch.from_numpy(np.asarray(cache.features[cache.rows(image_ids, split_dir), 0], dtype=np.float32))
    unique = list(dict.fromkeys(image_ids))
    row = {i: r for r, i in enumerate(unique)}
    transform = eval_transform(cfg.data.image_size)
    out: list[torch.Tensor] = [torch.empty(0)] * len(unique)
    seen: set[int] = set()
    pending: list[tuple[int, torch.Tensor]] = []
    backbone = model.image
    assert backbone is not None  # pixels are read for a model with an image side only (precompute checks)

    def flush() -> None:
        feats = backbone(torch.stack([x for _, x in pending]).to(device)).float().cpu()
        for (r, _), f in zip(pending, feats):
            out[r] = f
        bar.update(len(pending))
        pending.clear()

    with tqdm(total=len(unique), desc=f"adapt: {split_dir.name} image features", unit="img", disable=not progress,
              dynamic_ncols=True) as bar:
        for image_id, ext, data, shard, key in unique_samples(split_dir):
            r = row.get(image_id)
            if r is None:
                continue
            seen.add(r)
            image = decode_sample_image(data, ext, shard, key)
            if isinstance(image, np.ndarray):  # the split's and the run's checks leave npy samples to data.features
                raise UserError(f"{shard}: sample '{key}' is precomputed image features (npy), not a picture, and an "
                                f"adaptation without data.features reads pictures")
            pending.append((r, transform(image.convert("RGB"))))
            if len(pending) == 256:
                flush()
        if pending:
            flush()
    if len(seen) < len(unique):
        missing = next(i for i in unique if row[i] not in seen)
        raise UserError(f"{split_dir}: image {missing!r} not found in the shards")
    return torch.stack(out)[torch.tensor([row[i] for i in image_ids])]


def _encode(encoder: Encoder, texts: list[str], head: str, progress: bool, what: str) -> torch.Tensor:
    chunks = range(0, len(texts), 1024)
    return torch.from_numpy(np.concatenate([encoder.encode_text(texts[i: i + 1024], head=head)
                                            for i in tqdm(chunks, desc=f"adapt: {what}", disable=not progress,
                                                          dynamic_ncols=True)]))


@torch.no_grad()
def precompute(cfg: TrainConfig, start: Encoder, model: GlobetrotterModel, tokenizer: Tokenizer,
               device: str | torch.device, progress: bool = True) -> Precomputed:
    """Encode, once: the bank (``adapt.old_captions`` of the old-language training captions, or all, by the
    starting model ``start`` on ``device``, and their images by ``model``), the new language's captions as tokens
    and its images as backbone features."""
    a = cfg.adapt
    old = train_captions(start_train_config(cfg, start.cfg))  # data.train_languages: the languages it was trained on
    if a.old_captions is not None and a.old_captions < len(old):
        keep = np.sort(np.random.default_rng([cfg.seed, 11]).choice(len(old), a.old_captions, replace=False))
        old = [old[i] for i in keep]
    texts = [m["caption"] for m in old]
    bank: dict[str, torch.Tensor] = {}
    if model.text_head_t is not None:
        bank["text_t"] = _encode(start, texts, "text", progress, "old captions, text-text head")
    if model.text_head_x is not None:
        bank["text_x"] = _encode(start, texts, "cross", progress, "old captions, cross-modal head")
    if model.image is not None:
        feats = image_features(cfg, model, Path(cfg.data.root) / start.cfg.data.train_split,
                               [str(m["image_id"]) for m in old], device, progress).to(device)
        bank.update({k: v.float().cpu() for k, v in model.image_outputs(feats).items()})
    new = split.new_captions(cfg)
    ids, mask = encode_batch(tokenizer, [m["caption"] for m in new], cfg.data.max_length)
    return Precomputed(
        bank=bank, bank_truth=torch.tensor([truth_id(m) for m in old], dtype=torch.long),
        bank_langs=np.array([m["lang"] for m in old]),
        ids=torch.tensor(ids, dtype=torch.long), mask=torch.tensor(mask, dtype=torch.long),
        truth=torch.tensor([truth_id(m) for m in new], dtype=torch.long),
        images=(image_features(cfg, model, split.split_dir(cfg), [str(m["image_id"]) for m in new], device, progress)
                if model.image is not None else None))


def batches(pre: Precomputed, cfg: TrainConfig, old_batch: int, local_batch: int, rank: int = 0,
            world: int = 1) -> Iterator[dict]:
    """Endless batches for process ``rank``: its slice of the step's new-language captions (seeded
    per-epoch permutations), their images' features (``view1``), and the step's ``old_batch`` bank
    entries (``old_*``, the same on every process: they join the gathered global batch)."""
    n, b = len(pre.ids), local_batch * world
    mine = slice(rank * local_batch, (rank + 1) * local_batch)
    step = 0
    order = np.zeros(0, dtype=np.int64)
    while True:
        while len(order) < (step + 1) * b:
            epoch = len(order) // n
            order = np.concatenate([order, np.random.default_rng([cfg.seed, 12, epoch]).permutation(n)])
        index = torch.from_numpy(order[step * b: (step + 1) * b][mine])
        width = int(pre.mask[index].sum(1).max())
        old = torch.from_numpy(np.random.default_rng([cfg.seed, 13, step]).choice(
            len(pre.bank_truth), old_batch, replace=False))
        batch = {"input_ids": pre.ids[index, :width], "attention_mask": pre.mask[index, :width],
                 "truth": pre.truth[index], "langs": [cfg.adapt.language] * len(index),
                 "old_truth": pre.bank_truth[old], "old_langs": pre.bank_langs[old.numpy()].tolist(),
                 **{f"old_{k}": v[old] for k, v in pre.bank.items()}}
        if pre.images is not None:
            batch["view1"] = pre.images[index]
        yield batch
        step += 1
