"""The training data stream: WebDataset shards -> augmented views + tokenized captions.

Shards are resampled with replacement (an endless stream), seeded per rank and worker by
WebDataset (``rank * 1000 + worker``) plus the run's seed and the step the stream starts at,
so each process and worker reads its own sequence and a resumed run gets a fresh one.
The loader is a plain ``WebLoader`` that accelerate must not wrap (DESIGN.md section 6).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import webdataset as wds
from tokenizers import Tokenizer

from data_prep.shards import shard_paths

from ..errors import UserError
from ..tokenizer import encode_batch
from .augment import simclr_transform

if TYPE_CHECKING:
    from ..config import TrainConfig


def truth_id(meta: dict) -> int:
    """Id of a caption's language-independent content, for α precision and the supervised α.

    Synthetic data carries ``meaning`` (captions with equal meaning are translations);
    parallel data carries ``group``. -1 when neither is known.
    """
    key = meta.get("meaning") or meta.get("group")
    return zlib.crc32(str(key).encode("utf-8")) if key is not None else -1


@dataclass
class Collate:
    """Batches samples: tokenizes captions (padded), stacks the two views."""

    tokenizer: Tokenizer
    max_length: int

    def __call__(self, samples: list[tuple[Any, ...]]) -> dict[str, Any]:
        metas = [s[-1] for s in samples]
        ids, mask = encode_batch(self.tokenizer, [m["caption"] for m in metas], self.max_length)
        batch = {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
            "truth": torch.tensor([truth_id(m) for m in metas], dtype=torch.long),
            "langs": [m["lang"] for m in metas],
        }
        if len(samples[0]) == 3:
            batch["view1"] = torch.stack([s[0] for s in samples])
            batch["view2"] = torch.stack([s[1] for s in samples])
        return batch


def pair_by_group(samples: Iterator[tuple], max_pending: int = 10000) -> Iterator[tuple]:
    """Yield pairs ``(a, b)``: two captions of one ``group`` in different languages.

    For the supervised baseline on parallel data: a batch of B/2 pairs gives every
    caption exactly one true translation among the others. Samples without a group are
    dropped; a group's captions need not be adjacent (up to ``max_pending`` wait).
    """
    pending: dict = {}
    for sample in samples:
        meta = sample[-1]
        group = meta.get("group")
        if group is None:
            continue
        other = pending.pop(group, None)
        if other is not None and other[-1]["lang"] != meta["lang"]:
            yield other, sample
        else:
            pending[group] = sample
            if len(pending) > max_pending:
                pending.pop(next(iter(pending)))


def _unpair(pairs: Iterator[tuple]) -> Iterator[tuple]:
    for a, b in pairs:
        yield a
        yield b


def _two_views(sample: tuple, transform) -> tuple:
    image, meta = sample
    return transform(image), transform(image), meta


def make_train_loader(
    split_dir: str,
    tokenizer: Tokenizer,
    local_batch: int,
    max_length: int,
    transform: Callable | None,
    shuffle_buffer: int = 2000,
    workers: int = 2,
    seed: int = 0,
    batching: str = "random",
) -> wds.WebLoader:
    """Endless loader of batches of ``local_batch`` samples for one training process.

    ``transform`` makes each of an image's two views (None: captions only, no images).
    ``batching="pairs"`` (parallel data, supervised baseline): each batch holds
    ``local_batch / 2`` pairs of translations (:func:`pair_by_group`).
    """
    with_images = transform is not None
    stages: list = [
        wds.ResampledShards(shard_paths(split_dir), seed=seed, deterministic=True),
        wds.tarfile_to_samples(),
    ]
    if batching == "random":
        stages.append(wds.detshuffle(shuffle_buffer, initial=min(shuffle_buffer, 500), seed=seed))
    stages += [wds.decode("pil"), wds.to_tuple("png;jpg", "json")] if with_images else [wds.decode(), wds.to_tuple("json")]
    if batching == "pairs":
        stages += [pair_by_group, wds.detshuffle(shuffle_buffer // 2, initial=min(shuffle_buffer // 2, 250), seed=seed), _unpair]
    if with_images:
        stages.append(wds.map(partial(_two_views, transform=transform)))
    stages.append(wds.batched(local_batch, collation_fn=Collate(tokenizer, max_length), partial=False))
    pipeline = wds.DataPipeline(*stages)
    return wds.WebLoader(pipeline, batch_size=None, num_workers=workers, persistent_workers=workers > 0,
                         prefetch_factor=4 if workers > 0 else None)


def train_loader_from_config(cfg: "TrainConfig", tokenizer: Tokenizer, local_batch: int, seed: int,
                             start_step: int = 0, rank: int = 0, world: int = 1, log: Callable = print):
    """The training batch stream of a run: from the feature cache when ``data.features`` is set
    (:class:`FeatureBatches`, index-based from ``start_step``), else :func:`make_train_loader` over
    pixels with the split, sizes, augmentations and batching of ``cfg``."""
    d = cfg.data
    if d.features:
        from .feature_batches import FeatureBatches
        from .feature_cache import ensure_feature_cache

        cache = ensure_feature_cache(cfg, d.train_split, log) if cfg.loss.uses_images else None
        return FeatureBatches(Path(d.root) / d.train_split, cache, tokenizer, local_batch, d.max_length, seed=cfg.seed,
                              rank=rank, world=world, batching=d.batching, neighbours_k=d.neighbours_k,
                              start_step=start_step)
    if d.batching == "neighbours":
        raise UserError("data.batching=neighbours needs data.features (neighbours are mined on cached features)")
    transform = None
    if cfg.loss.uses_images:
        transform = simclr_transform(d.image_size, d.crop_scale_min, d.colour_jitter, d.hue_jitter, d.grayscale, d.hflip)
    return make_train_loader(str(Path(d.root) / d.train_split), tokenizer, local_batch, d.max_length, transform,
                             shuffle_buffer=d.shuffle_buffer, workers=d.workers, seed=seed, batching=d.batching)
