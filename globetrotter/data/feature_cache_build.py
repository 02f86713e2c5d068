"""Building a feature cache: each image of a split run once through the frozen backbone, whole and in seeded views."""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from backretrieval.records import json_text
from data_prep.out_folder import lock_out_folder
from data_prep.shards import decode_sample_image, iter_split, read_manifest

from ..config import IMPORTED_BACKBONE
from ..errors import UserError
from .augment import eval_transform, simclr_transform
from .feature_cache import (FEATURES, IMAGE_IDS, SPEC, CacheSpec, FeatureCache, cache_dir_for, load_feature_cache,
                            spec_from_config)
from .feature_cache_write import cache_write, check_cache_folder

if TYPE_CHECKING:
    from ..config import TrainConfig


def require_pictures(split_dir: str | Path, manifest: dict, reader: str) -> None:
    """A one-line error when a split's samples are precomputed image features (``npy``), which ``reader`` cannot
    read: pictures reach the model through its backbone, vectors only through a feature cache."""
    dim = manifest.get("feature_dim")
    if dim is not None:
        dim = "x".join(map(str, dim)) if isinstance(dim, (list, tuple)) else dim
        raise UserError(f"{split_dir}: its samples are precomputed image features (npy, {dim} dims), not pictures, "
                        f"and {reader} reads pictures; vectors reach a model only as a feature cache "
                        f"(`globetrotter-data features import`, then train with model.image_backbone=imported "
                        f"data.features=FOLDER)")


def unique_samples(split_dir: Path) -> Iterator[tuple[str, str, bytes, str, str]]:
    """(image id, image format, encoded bytes, shard, sample key) of each image of a split, once (its first sample),
    in shard order."""
    seen: set[str] = set()
    for shard, key, ext, data, meta in iter_split(split_dir):  # read whole: the manifest's counts are checked
        image_id = str(meta["image_id"])
        if image_id not in seen:
            seen.add(image_id)
            yield image_id, ext, data, shard, key


def unique_images(split_dir: Path) -> Iterator[tuple[str, str, bytes]]:
    """(image id, image format, encoded bytes) of each image of a split, once, in shard order."""
    for image_id, ext, data, _shard, _key in unique_samples(split_dir):
        yield image_id, ext, data


class _Views(torch.utils.data.Dataset):
    """Image ``i`` -> ([views + 1, 3, S, S]: the evaluation view, then seeded augmented views; ""). An image that
    does not decode gives zeros and the one-line error naming its shard and sample (``places[i]``: (shard, key),
    format ``exts[i]``), which the builder raises: an exception raised in a loader worker would come back as a
    traceback."""

    def __init__(self, images: list[bytes], spec: CacheSpec, exts: list[str], places: list[tuple[str, str]]) -> None:
        self.images, self.exts, self.places = images, exts, places
        self.spec = spec
        self.whole = eval_transform(spec.image_size)
        self.augment = simclr_transform(spec.image_size, spec.crop_scale_min, spec.colour_jitter, spec.hue_jitter,
                                        spec.grayscale, spec.hflip)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, str]:
        try:
            image = decode_sample_image(self.images[i], self.exts[i], *self.places[i])
        except UserError as err:
            size = self.spec.image_size
            return torch.zeros(self.spec.views + 1, 3, size, size), str(err)
        state = torch.get_rng_state()
        torch.manual_seed(self.spec.seed * 1_000_003 + i)  # the views depend on (seed, image), not on the worker
        views = [self.whole(image)] + [self.augment(image) for _ in range(self.spec.views)]
        torch.set_rng_state(state)
        return torch.stack(views), ""


def build_feature_cache(split_dir: str | Path, spec: CacheSpec, out_dir: str | Path, backbone: torch.nn.Module,
                        batch_images: int = 16, workers: int = 1, device: str = "cpu",
                        progress: bool = True, max_images: int | None = None, label: str = "") -> dict:
    """Run the frozen ``backbone`` once over every image of a split and write the cache to ``out_dir``.

    ``backbone`` maps [B, 3, S, S] to pooled features [B, dim] (timm, ``num_classes=0``). The
    folder is written under a temporary name and renamed into place. Returns the cache's
    ``cache.json`` content (with ``images_per_s`` of the build). ``max_images`` caps the images
    (benchmarks; such a cache lacks the rest of the split). ``label`` names where ``out_dir`` was given in errors
    (``--out``, ``data.features``); a second writer of ``out_dir`` is refused (:func:`cache_write`).
    """
    if max_images is not None and max_images < 1:  # no image: no features file to write (was an AttributeError)
        raise ValueError(f"max_images must be >= 1 or None, got {max_images}")
    split_dir, out_dir = Path(split_dir), Path(out_dir)
    manifest = read_manifest(split_dir)
    require_pictures(split_dir, manifest, "a feature cache's backbone")
    check_cache_folder(out_dir, label)  # before any work: a folder that is no cache is never replaced
    ids: list[str] = []
    blobs, exts, places = [], [], []
    for image_id, ext, data, shard, key in unique_samples(split_dir):
        if max_images is not None and len(ids) >= max_images:
            break
        ids.append(image_id)
        blobs.append(data)
        exts.append(ext)
        places.append((shard, key))
    dataset = _Views(blobs, spec, exts, places)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_images, num_workers=workers,
                                         prefetch_factor=4 if workers else None)
    backbone = backbone.eval().to(device).to(memory_format=torch.channels_last)
    with cache_write(out_dir, label) as tmp:
        feats = None
        row = 0
        start = time.perf_counter()
        with torch.inference_mode(), tqdm(total=len(ids), desc=f"features {split_dir.name}", unit="img",
                                          disable=not progress, dynamic_ncols=True) as bar:
            for batch, errors in loader:
                bad = next((error for error in errors if error), None)
                if bad is not None:  # one line naming the shard and sample, nothing written
                    raise UserError(bad)
                b, v = batch.shape[:2]
                x = batch.flatten(0, 1).to(device).contiguous(memory_format=torch.channels_last)
                out = backbone(x).float().reshape(b, v, -1)
                if feats is None:
                    feats = np.lib.format.open_memmap(tmp / FEATURES, mode="w+", dtype=np.float16,
                                                      shape=(len(ids), v, out.shape[-1]))
                feats[row: row + b] = out.cpu().numpy().astype(np.float16)
                row += b
                bar.update(b)
        elapsed = time.perf_counter() - start
        assert feats is not None  # a batch was read: read_manifest refuses an empty split, max_images is >= 1
        feats.flush()
        del feats
        record = {"spec": asdict(spec), "split": str(split_dir.resolve()), "split_checksum": manifest.get("checksum"),
                  "images": len(ids), "dim": int(out.shape[-1]), "images_per_s": len(ids) / max(elapsed, 1e-9),
                  "build_seconds": elapsed, "device": str(device)}
        (tmp / IMAGE_IDS).write_text(json_text(ids))
        (tmp / SPEC).write_text(json_text(record, indent=2))
    return record


def ensure_feature_cache(cfg: "TrainConfig", split: str, log: Callable[[str], None] = print,
                         device: str | torch.device = "cpu") -> FeatureCache:
    """The run's cache for ``split``: built (on the main process, the backbone on ``device``: the training's) when
    absent, checked against the config. While another command writes it, this one waits and then reads it."""
    path = cache_dir_for(cfg, split)
    if path is None:
        raise UserError("data.features is not set: this run reads pixels")
    spec = spec_from_config(cfg)
    if not (path / SPEC).is_file() and spec.backbone == IMPORTED_BACKBONE:
        raise UserError(f"{path}: no imported embeddings here (data.features); write them first: globetrotter-data "
                        f"features import {Path(cfg.data.root) / split} --embeddings FILE --name {spec.weights} --out {path} "
                        f"(or join several encoders' caches: features concat ... --name {spec.weights})")
    if not (path / SPEC).is_file():
        with lock_out_folder(path, "data.features", wait=log):
            pass  # another run building this cache (seeds started together): wait for it, then read what it wrote
    if not (path / SPEC).is_file():
        check_cache_folder(path, "data.features")  # a folder that is no cache (a dataset root) is never replaced
        from ..models.image import create_image_backbone
        from ..threads import choose_threads, load_average, using_threads

        device = torch.device(device)
        # the build's own threads, not the training's share: its decoding workers are light (globetrotter/threads.py)
        choice = choose_threads(0, requested=cfg.threads, load=load_average())
        where = f"on {device}" if device.type != "cpu" else str(choice)
        log(f"building the image-feature cache {path} ({spec.backbone}, {spec.views} views + the whole image; {where}) ...")
        backbone = create_image_backbone(cfg.model.image_backbone, cfg.model.image_pretrained, **cfg.model.image_backbone_args)
        with using_threads(choice.threads):
            record = build_feature_cache(Path(cfg.data.root) / split, spec, path, backbone, workers=cfg.data.workers,
                                         device=str(device), label="data.features")
        log(f"feature cache: {record['images']} images in {record['build_seconds']:.0f} s "
            f"({record['images_per_s']:.1f} images/s)")
    return load_feature_cache(path, spec, Path(cfg.data.root) / split)
