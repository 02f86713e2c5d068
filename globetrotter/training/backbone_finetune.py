"""Round two of the recipe: the frozen image backbone fine-tuned to a trained model's reading of each image's captions.

A run trained on a frozen backbone's cached features (round one) reads the captions of each train image with its
cross-modal head; the mean of those embeddings is what the model understood the picture to show, in a space where the
languages already meet. Every layer of the run's backbone (from the weights it started from) is trained so that a
linear head on its pooled features predicts that vector from augmented views of the picture (cosine loss); the
fine-tuned backbone then builds a feature cache with the run's settings, which a second run of the same recipe trains
on (round two). No parallel text enters: each image meets only its own captions, as in L_x.

docs/training.md (*Round two*) gives the commands; docs/results.md measures the recipe on Flickr8k.
"""
from __future__ import annotations

import io
import json
import math
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, cast

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm import tqdm

from backretrieval.records import json_text
from data_prep.shards import rgb_image

from ..config import IMPORTED_BACKBONE, TrainConfig, load_train_config
from ..errors import UserError

TARGETS, WEIGHTS, FEATURES, RECORD = "targets", "backbone.safetensors", "features", "finetune.json"
"""What ``--out`` holds: the round-one readings (an imported feature cache), the fine-tuned backbone's weights, the
feature cache they build (round two's ``data.features``), and the record of the settings."""


@dataclass(frozen=True)
class FinetuneSettings:
    """How the backbone is fine-tuned (the defaults are the measured recipe's)."""

    epochs: int = 6
    batch_size: int = 32
    lr: float = 3e-4
    head_lr: float = 1e-3
    weight_decay: float = 0.05
    seed: int = 0


def own_captions(image_ids: list[str], metas: Iterable[dict]) -> list[list[tuple[str, str]]]:
    """Each image's ``(caption, language)`` pairs among the caption records ``metas``; a one-line error names the
    first image with none."""
    captions: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for meta in metas:
        captions[str(meta["image_id"])].append((meta["caption"], meta["lang"]))
    missing = next((image for image in image_ids if image not in captions), None)
    if missing is not None:
        raise UserError(f"image {missing}: no caption of it in the run's train split")
    return [captions[image] for image in image_ids]


def mean_embeddings(captions: list[list], encode: Callable[[list], np.ndarray]) -> np.ndarray:
    """The L2-normalised mean of each image's L2-normalised caption embeddings, float32 [images, D] (a caption is
    whatever ``encode`` reads: a string, or a (caption, language) pair)."""
    flat = [c for caps in captions for c in caps]
    owner = np.repeat(np.arange(len(captions)), [len(c) for c in captions])
    emb = np.asarray(encode(flat), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)
    out = np.zeros((len(captions), emb.shape[1]), dtype=np.float32)
    np.add.at(out, owner, emb)
    return out / np.linalg.norm(out, axis=1, keepdims=True).clip(1e-12)


def run_config(run: str | Path) -> TrainConfig:
    """The training config of a run folder; a one-line error when ``run`` is no trained run."""
    config = Path(run) / "config.yaml"
    if not Path(run).is_dir():
        raise UserError(f"{run}: run folder not found (expected a trained run folder, e.g. outputs/<run name>)")
    if not config.is_file():
        raise UserError(f"{run}: no config.yaml (expected a trained run folder)")
    return load_train_config(config)


def model_readings(run: str | Path, image_ids: list[str]) -> np.ndarray:
    """The mean cross-head embedding of each image's own captions (the run's train split, ``data.root`` /
    ``data.train_split``) under the trained model of ``run``, float32 [images, D]."""
    from data_prep.shards import read_captions

    from ..evaluation.models import encode_texts, load_model

    data = run_config(run).data
    captions = own_captions(image_ids, read_captions(Path(data.root) / data.train_split))
    encoder = load_model(str(run))
    return mean_embeddings(captions, lambda flat: encode_texts(encoder, [c for c, _ in flat],
                                                                [lang for _, lang in flat], head="cross"))


class EncodedImages(torch.utils.data.Dataset):
    """Image ``i`` (encoded bytes) through ``transform``, with its row ``i``."""

    def __init__(self, images: list[bytes], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.images, self.transform = images, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(rgb_image(Image.open(io.BytesIO(self.images[i])))), i


def unit_centred_targets(vectors: np.ndarray) -> torch.Tensor:
    """The target rows minus their mean, of unit length (float32)."""
    out = torch.as_tensor(np.asarray(vectors, dtype=np.float32))
    return F.normalize(out - out.mean(0), dim=1)


def check_enough_images(count: int, batch_size: int, where: str = "the split") -> None:
    """A one-line error when ``count`` images (of ``where``) make no full batch of ``batch_size``: the fine-tune
    drops the last partial batch, so it would take no step."""
    if count < batch_size:
        raise UserError(f"{where} has {count} images, fewer than one batch of {batch_size}: fine-tuning the backbone "
                        f"needs at least {batch_size}")


def fine_tune(backbone: torch.nn.Module, images: list[bytes], targets: np.ndarray,
              transform: Callable[[Image.Image], torch.Tensor],
              settings: FinetuneSettings = FinetuneSettings(), workers: int = 1, device: str = "cpu",
              progress: bool = True) -> tuple[torch.nn.Module, torch.nn.Linear, list[float]]:
    """Train every parameter of ``backbone`` and a linear head so that a view of image ``i`` (``transform``: an
    augmentation) predicts ``targets[i]`` (cosine loss on the centred unit targets; AdamW, ``head_lr`` for the head, a
    linear warm-up over the first tenth of the steps, then cosine decay). Returns the backbone and the head (on the
    CPU, in eval mode) and each epoch's mean loss."""
    s = settings
    if len(images) != len(targets):
        raise UserError(f"{len(images)} images but {len(targets)} targets: need one target per image")
    check_enough_images(len(images), s.batch_size)
    torch.manual_seed(s.seed)
    goal = unit_centred_targets(targets).to(device)
    # a timm backbone's width, a plain int (nn.Module's attribute lookup types it Tensor | Module)
    head = torch.nn.Linear(cast(int, backbone.num_features), goal.shape[1])
    backbone, head = backbone.to(device), head.to(device)
    loader = torch.utils.data.DataLoader(EncodedImages(images, transform), batch_size=s.batch_size, shuffle=True,
                                         drop_last=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(s.seed))
    optimiser = torch.optim.AdamW([{"params": backbone.parameters(), "lr": s.lr},
                                   {"params": head.parameters(), "lr": s.head_lr}], weight_decay=s.weight_decay)
    total = s.epochs * len(loader)
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda k: (k + 1) / warmup if k < warmup
        else 0.5 * (1 + math.cos(math.pi * (k - warmup) / max(1, total - warmup))))
    backbone.train()
    losses = []
    with tqdm(total=total, desc="fine-tune", unit="step", disable=not progress, dynamic_ncols=True) as bar:
        for _epoch in range(s.epochs):
            seen = []
            for x, rows in loader:
                rows = rows.to(device)
                loss = (1 - F.cosine_similarity(head(backbone(x.to(device))), goal[rows], dim=1)).mean()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                schedule.step()
                seen.append(float(loss.detach()))
                bar.set_postfix(loss=f"{seen[-1]:.4f}")
                bar.update(1)
            losses.append(float(np.mean(seen)))
    return backbone.cpu().eval(), head.cpu().eval(), losses


def round_two_config(cfg: TrainConfig, out: str | Path) -> TrainConfig:
    """``cfg`` on the fine-tuned backbone of ``out`` and its feature cache: round two's config."""
    out = Path(out)
    return replace(cfg, model=replace(cfg.model, image_pretrained=str(out / WEIGHTS)),
                   data=replace(cfg.data, features=str(out / FEATURES)))


def _check_run(cfg: TrainConfig, run: Path) -> None:
    m = cfg.model
    if m.image_backbone == IMPORTED_BACKBONE:
        raise UserError(f"{run}: trained on imported image vectors (model.image_backbone=imported): there is no "
                        "backbone to fine-tune")
    if not m.freeze_image_backbone or not cfg.data.features:
        raise UserError(f"{run}: its image backbone trains with the text (model.freeze_image_backbone=false); round "
                        "two fine-tunes a frozen backbone, as in a run on a feature cache (data.features)")


def _settled(out: Path, record: dict) -> bool:
    """True when ``out`` holds this fine-tune already; a one-line error when it holds another."""
    if not (out / RECORD).is_file():  # new, or a fine-tune interrupted before its record: done again
        leftovers = (TARGETS, WEIGHTS, f"{WEIGHTS}.tmp")
        others = sorted(p.name for p in out.iterdir() if p.name not in leftovers) if out.exists() else []
        if others:
            raise UserError(f"--out {out}: a folder that holds no fine-tune ({RECORD} missing) but {', '.join(others[:4])}; "
                            "choose a new or empty folder")
        return False
    have = json.loads((out / RECORD).read_text(encoding="utf-8"))
    unrecorded = [k for k in record if k not in have]
    if unrecorded:  # a fine-tune of a version that recorded less: what it read cannot be told
        raise UserError(f"--out {out}: holds a fine-tune whose {RECORD} does not record {', '.join(unrecorded)} "
                        "(made by an older version), so whether it read these weights cannot be told; choose a new "
                        "folder")
    diff = [f"{k}: {have.get(k)!r} there, {v!r} now" for k, v in record.items() if have.get(k) != v]
    if diff:
        raise UserError(f"--out {out}: holds a fine-tune of other settings ({'; '.join(diff)}); choose another "
                        "folder")
    return (out / WEIGHTS).is_file()


def finetune_backbone(split: str | Path, run: str | Path, out: str | Path, settings: FinetuneSettings = FinetuneSettings(),
                      workers: int = 1, device: str = "cpu", batch_images: int = 16,
                      log: Callable[[str], None] = print, progress: bool = True) -> TrainConfig:
    """Fine-tune the backbone of ``run`` to its reading of each image of ``split`` (the train split whose images
    round one's feature cache holds) and build that backbone's feature cache: ``out`` gets the readings
    (``targets``), the weights (``backbone.safetensors``), their cache (``features``) and ``finetune.json``. A
    finished step is not done again (an interrupted build resumes); ``out`` holding anything else is refused.
    Returns round two's config (the run's, on the new backbone and cache)."""
    from data_prep.shards import read_manifest
    from ..weights_file import save_weights

    from ..data.augment import simclr_transform
    from ..data.feature_cache import load_feature_cache, spec_from_config
    from ..data.feature_cache_build import build_feature_cache, unique_images
    from ..data.feature_import import import_embeddings
    from ..evaluation.models import current_checkpoint, fingerprint
    from ..evaluation.records import versions
    from ..models.image import create_image_backbone

    split, run, out = Path(split), Path(run), Path(out)
    cfg = run_config(run)
    _check_run(cfg, run)
    read_manifest(split)  # a folder that is no split: its one-line error before any work
    checkpoint = current_checkpoint(str(run))  # what model_readings loads: the weights the backbone learns from
    record = {"run": str(run.resolve()), **fingerprint(checkpoint), "split": str(split.resolve()), "settings": asdict(settings)}
    if not _settled(out, record):
        ids, images = [], []
        for image_id, _ext, data in unique_images(split):
            ids.append(image_id)
            images.append(data)
        check_enough_images(len(images), settings.batch_size, str(split))  # before --out gets anything
        log(f"reading the captions of {len(ids)} images with {run}")
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            np.save(Path(tmp) / "targets.npy", model_readings(run, ids))
            (Path(tmp) / "ids.json").write_text(json_text(ids))
            import_embeddings(split, Path(tmp) / "targets.npy", out / TARGETS, TARGETS, ids=Path(tmp) / "ids.json",
                              force=True, progress=progress, source_label=f"readings of {checkpoint}")
        stored = load_feature_cache(out / TARGETS)  # the readings as stored (float16): a rerun trains on the same
        targets = np.asarray(stored.features[stored.rows(ids, split), 0], dtype=np.float32)
        m, d = cfg.model, cfg.data
        torch.manual_seed(settings.seed)  # a backbone without weights starts from this seed's init
        backbone = create_image_backbone(m.image_backbone, m.image_pretrained, **m.image_backbone_args)
        transform = simclr_transform(d.image_size, d.crop_scale_min, d.colour_jitter, d.hue_jitter, d.grayscale,
                                     d.hflip)
        epochs = f"{settings.epochs} epoch{'' if settings.epochs == 1 else 's'}"
        log(f"fine-tuning {m.image_backbone} on {len(images)} images, {epochs} at {d.image_size} px")
        start = time.perf_counter()
        backbone, _head, losses = fine_tune(backbone, images, targets, transform, settings, workers=workers,
                                            device=device, progress=progress)
        save_weights({k: v.contiguous() for k, v in backbone.state_dict().items()}, out / f"{WEIGHTS}.tmp")
        (out / f"{WEIGHTS}.tmp").replace(out / WEIGHTS)
        (out / RECORD).write_text(json_text({**record, "losses": losses, "seconds": time.perf_counter() - start,
                                             "versions": versions()}, indent=2))
        log(f"loss per epoch: {', '.join(f'{x:.4f}' for x in losses)}")
    two = round_two_config(cfg, out)
    spec = spec_from_config(two)
    if (out / FEATURES / "cache.json").is_file():
        load_feature_cache(out / FEATURES, spec, split)  # refuses a cache of other settings
        log(f"{out / FEATURES}: up to date")
    else:
        backbone = create_image_backbone(two.model.image_backbone, two.model.image_pretrained,
                                         **two.model.image_backbone_args)
        build_feature_cache(split, spec, out / FEATURES, backbone, batch_images=batch_images, workers=workers,
                            device=device, progress=progress)
    return two
