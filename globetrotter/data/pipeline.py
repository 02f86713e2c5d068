"""The training data stream: WebDataset shards -> augmented views (or their device inputs) + tokenized captions.

Shards are resampled with replacement (an endless stream); each process and data worker
reads its own sequence, seeded by the run's seed, its rank and its worker, and each
sample's augmentations are seeded by its index, so a resumed run continues the very same
stream (:mod:`globetrotter.data.stream`). Bad samples and truncated shards are skipped and
counted. The loader is a plain ``WebLoader`` that accelerate must not wrap (docs/design.md section 6).
With ``data.augment_on: device`` the workers hand on each image at a fixed size with its views'
parameters and the trainer makes the views on its device (:mod:`globetrotter.data.device_augment`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch
import webdataset as wds
from tokenizers import Tokenizer

from data_prep.shards import shard_paths

from ..errors import UserError
from ..tokenizer import encode_batch
from .augment import simclr_transform
from .device_augment import DeviceSimCLR
from .stream import ResumableStream, StreamPosition
from .subset import keeps_caption
from .truth import truth_id
from .views import CpuViews, DeviceInputs

if TYPE_CHECKING:
    from ..config import TrainConfig
    from .feature_batches import FeatureBatches


@dataclass
class Collate:
    """Batches ``(tensors, meta)`` samples: tokenizes captions (padded), stacks each image tensor by its name."""

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
        for name in samples[0][0]:
            batch[name] = torch.stack([s[0][name] for s in samples])
        return batch


def pair_by_group(samples: Iterator, max_pending: int = 10000,
                  meta: Callable[[Any], dict] = lambda s: s[-1]) -> Iterator[tuple]:
    """Yield pairs ``(a, b)``: two captions of one ``group`` in different languages.

    For the supervised baseline on parallel data: a batch of B/2 pairs gives every
    caption exactly one true translation among the others. Samples without a group are
    dropped; a group's captions need not be adjacent (up to ``max_pending`` wait).
    ``meta(sample)`` is a sample's metadata (default: its last element).
    """
    pending: dict = {}
    for sample in samples:
        m = meta(sample)
        group = m.get("group")
        if group is None:
            continue
        other = pending.pop(group, None)
        if other is not None and meta(other)["lang"] != m["lang"]:
            yield other, sample
        else:
            pending[group] = sample
            if len(pending) > max_pending:
                pending.pop(next(iter(pending)))


def _unpair(pairs: Iterator[tuple]) -> Iterator:
    for a, b in pairs:
        yield a
        yield b


def _sample_meta(sample: dict) -> dict:
    return sample["meta"]


def random_order(samples: Iterator[dict], rng: random.Random, buffer: int) -> Iterator[dict]:
    """Shuffle through a buffer of ``buffer`` samples (the first after min(buffer, 500))."""
    return wds.shuffle(buffer, initial=min(buffer, 500), rng=rng)(samples)


def pairs_order(samples: Iterator[dict], rng: random.Random, buffer: int) -> Iterator[dict]:
    """Translation pairs (:func:`pair_by_group`) shuffled as pairs, then flattened: a, a', b, b', ...

    The samples are shuffled before they are paired: shards list a group's captions in one fixed language
    order, and pairing them as they come would always join the same languages (en-de, fr-es, ... : a
    supervised baseline trained on 4 of the synthetic world's 36 language pairs)."""
    pairs = pair_by_group(random_order(samples, rng, buffer), meta=_sample_meta)
    return _unpair(wds.shuffle(buffer // 2, initial=min(buffer // 2, 250), rng=rng)(pairs))


def only_kept(samples: Iterator[dict], rng: random.Random, order: Callable, languages: frozenset | None,
              image_share: float = 1.0) -> Iterator[dict]:
    """``order`` over the samples captioned in ``languages`` (``data.train_languages``; None: any) whose image is in
    ``image_share`` (``data.train_image_share``), the others dropped before their images are decoded and before
    the stream counts them (a resume skips the same ones)."""
    return order((s for s in samples if keeps_caption(s["meta"], languages, image_share)), rng)


def make_train_loader(
    split_dir: str,
    tokenizer: Tokenizer,
    local_batch: int,
    max_length: int,
    views: Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None,
    shuffle_buffer: int = 2000,
    workers: int = 2,
    seed: int = 0,
    batching: str = "random",
    rank: int = 0,
    position: StreamPosition | None = None,
    start_step: int = 0,
    max_bad: int = 100,
    languages: Sequence[str] | None = None,
    image_share: float = 1.0,
) -> wds.WebLoader:
    """Endless loader of batches of ``local_batch`` samples for the process of rank ``rank``.

    ``views`` makes a sample's image tensors from its decoded image and seed (:mod:`.views`: the
    two views, or the inputs of the device's; None: captions only, no images).
    ``batching="pairs"`` (parallel data, supervised baseline): each batch holds
    ``local_batch / 2`` pairs of translations (:func:`pair_by_group`). ``position`` (from a
    checkpoint written at ``start_step``) resumes the stream where it was; every batch
    carries ``stream/*`` fields for :meth:`StreamPosition.consume`. ``languages`` (``data.train_languages``):
    only the samples captioned in them are read (None: all); ``image_share`` (``data.train_image_share``): only
    those of the images in that share (:mod:`.subset`).
    """
    if batching == "pairs":
        _check_pairs(split_dir, local_batch, languages, image_share)
    order = partial(random_order if batching == "random" else pairs_order, buffer=shuffle_buffer)
    if languages is not None or image_share < 1:
        order = partial(only_kept, order=order, languages=None if languages is None else frozenset(languages),
                        image_share=image_share)
    position = StreamPosition(**position.to_dict()) if position else StreamPosition(workers=max(1, workers))
    dataset = ResumableStream(shard_paths(split_dir), Collate(tokenizer, max_length), local_batch, views, order,
                              seed=seed, rank=rank, position=position, offset=start_step, max_bad=max_bad)
    # the loader's own generator: creating its iterator must not draw from the global RNG (exact resume)
    return wds.WebLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=workers > 0,
                         prefetch_factor=4 if workers > 0 else None, generator=torch.Generator().manual_seed(seed))


def _check_pairs(split_dir: str, local_batch: int, languages: Sequence[str] | None, image_share: float) -> None:
    """What ``batching="pairs"`` needs, checked before streaming (else the stream would wait for a pair forever):
    an even batch (pairs never straddle two), and translation groups among the captions training reads."""
    from data_prep.shards import read_captions

    from .feature_batches import pair_groups

    if local_batch % 2:
        raise UserError(f"data.batching=pairs needs an even batch size per process, got {local_batch}")
    keep = None if languages is None else frozenset(languages)
    metas = [m for m in read_captions(split_dir) if keeps_caption(m, keep, image_share)]
    pair_groups([m.get("group") for m in metas], [m["lang"] for m in metas], split_dir)


def train_loader_from_config(cfg: "TrainConfig", tokenizer: Tokenizer, local_batch: int, seed: int, rank: int = 0,
                             position: StreamPosition | None = None, start_step: int = 0, world: int = 1,
                             log: Callable = print) -> FeatureBatches | wds.WebLoader:
    """The training batch stream of a run: from the feature cache when ``data.features`` is set
    (:class:`FeatureBatches`, index-based: batch ``s`` is a function of the seed and ``s``, so resuming at
    ``start_step`` is exact by construction), else :func:`make_train_loader` over pixels with the split,
    sizes, augmentations and batching of ``cfg`` (resumed from ``position``); with ``data.augment_on: device``
    its batches need :func:`device_augment_from_config`'s ``apply`` before the step."""
    d = cfg.data
    if d.features:
        from .feature_batches import FeatureBatches
        from .feature_cache_build import ensure_feature_cache

        cache = ensure_feature_cache(cfg, d.train_split, log) if cfg.loss.uses_images else None
        return FeatureBatches(Path(d.root) / d.train_split, cache, tokenizer, local_batch, d.max_length, seed=cfg.seed,
                              rank=rank, world=world, batching=d.batching, neighbours_k=d.neighbours_k,
                              start_step=start_step, languages=d.train_languages, image_share=d.train_image_share)
    if d.batching == "neighbours":
        raise UserError("data.batching=neighbours needs data.features (neighbours are mined on cached features)")
    views = None
    if cfg.loss.uses_images:
        augment = device_augment_from_config(cfg)
        views = CpuViews(simclr_transform(d.image_size, d.crop_scale_min, d.colour_jitter, d.hue_jitter, d.grayscale,
                                          d.hflip)) if augment is None else DeviceInputs(augment, d.source_side)
    return make_train_loader(str(Path(d.root) / d.train_split), tokenizer, local_batch, d.max_length, views,
                             shuffle_buffer=d.shuffle_buffer, workers=d.workers, seed=seed, batching=d.batching,
                             rank=rank, position=position, start_step=start_step, max_bad=d.max_bad_samples,
                             languages=d.train_languages, image_share=d.train_image_share)


def device_augment_from_config(cfg: "TrainConfig") -> DeviceSimCLR | None:
    """The batched SimCLR views of ``data.augment_on: device`` with the config's settings; None when the
    views are made on the CPU, or the run reads no pixels (cached features, or a loss without images)."""
    d = cfg.data
    if d.augment_on != "device" or d.features or not cfg.loss.uses_images:
        return None
    return DeviceSimCLR(d.image_size, d.crop_scale_min, d.colour_jitter, d.hue_jitter, d.grayscale, d.hflip)
