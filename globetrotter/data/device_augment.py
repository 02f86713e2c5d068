"""SimCLR's two views as batched tensor ops on the training device (``data.augment_on: device``).

The CPU path (:func:`~globetrotter.data.augment.simclr_transform`) makes every view in a data
worker, one image at a time. Here a worker only decodes the image, resizes it to a fixed square
side and draws its two views' parameters (:meth:`DeviceSimCLR.draw`: scalar draws from a
``random.Random`` seeded with the sample's own seed, :mod:`globetrotter.data.stream`), so a
sample's views depend on the run's seed and the sample's place in the stream, never on the batch
it lands in, the number of workers or the device. The trainer moves the uint8 batch to the device
and :meth:`DeviceSimCLR.views` makes both views of the whole batch there, with the CPU path's
settings, each view with its own parameters:

- random resized crop: area in [scale_min, 1] of the image, aspect ratio in [3/4, 4/3]
  (torchvision's rule, drawn in the image's own geometry), resized with
  ``torchvision.ops.roi_align``, which averages ceil(crop/out)² bilinear samples per output
  pixel: an area-style antialias, as the CPU path's antialiased resize;
- horizontal flip, p=0.5 (``hflip``);
- colour jitter, p=0.8: brightness, contrast and saturation factors uniform in [1-j, 1+j] and a
  hue shift uniform in [-hue, hue] (fraction of the colour wheel), applied in a random order
  per view with torchvision's formulas (kornia's ``adjust_brightness_accumulative``,
  ``adjust_contrast_with_mean_subtraction``, ``adjust_saturation_with_gray_subtraction``,
  ``adjust_hue``);
- grayscale with probability ``grayscale`` (kornia ``rgb_to_grayscale``, BT.601);
- Gaussian blur, p=0.5, σ uniform in [0.1, 2], kernel about 10% of the side, reflected
  borders (kornia ``gaussian_blur2d`` with one σ per view);
- scaled to [0, 1] and normalised with ImageNet's mean and std.

Unlike the CPU path the ops work in float32 throughout (no rounding to 8 bits between them).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable

import torch
from kornia.color import rgb_to_grayscale
from kornia.enhance import (adjust_brightness_accumulative, adjust_contrast_with_mean_subtraction, adjust_hue,
                            adjust_saturation_with_gray_subtraction)
from kornia.filters import gaussian_blur2d
from torchvision.ops import roi_align

from .augment import IMAGENET_MEAN, IMAGENET_STD, blur_kernel

# One view's parameters, a float32 vector of N_PARAMS (see DeviceSimCLR.draw)
BOX = slice(0, 4)  # crop box x0, y0, x1, y1 as fractions of the image's width and height
FLIP, JITTER = 4, 5  # 1: flipped; 1: colour-jittered
FACTORS = slice(6, 10)  # brightness, contrast, saturation factors and hue shift (turns)
ORDER = slice(10, 14)  # ORDER[slot] = the jitter op (index into FACTORS) applied at that slot
GRAY, BLUR, SIGMA = 14, 15, 16  # 1: grayscale; 1: blurred; the blur's σ (pixels of the view)
N_PARAMS = 17
RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's aspect-ratio range


def crop_box(height: int, width: int, scale_min: float, rng: random.Random) -> list[float]:
    """torchvision's ``RandomResizedCrop`` rule with ``rng``: up to 10 tries of an area in [scale_min, 1]
    and a log-uniform aspect ratio in [3/4, 4/3], else a centre crop; the box as [x0, y0, x1, y1] fractions."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(scale_min, 1.0)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top, left = rng.randint(0, height - h), rng.randint(0, width - w)
            break
    else:
        ratio = width / height
        if ratio < RATIO[0]:
            w, h = width, round(width / RATIO[0])
        elif ratio > RATIO[1]:
            w, h = round(height * RATIO[1]), height
        else:
            w, h = width, height
        top, left = (height - h) // 2, (width - w) // 2
    return [left / width, top / height, (left + w) / width, (top + h) / height]


def _hue(image: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    return adjust_hue(image, turns * (2 * math.pi))  # kornia's hue is an angle in radians


JITTER_OPS: tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], ...] = (
    adjust_brightness_accumulative, adjust_contrast_with_mean_subtraction, adjust_saturation_with_gray_subtraction, _hue)


def _on_rows(x: torch.Tensor, rows: torch.Tensor, op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``x`` with ``op(x[i], i)`` written into the rows ``i`` where the CPU mask ``rows`` holds (no device sync)."""
    index = rows.nonzero().squeeze(1)
    if len(index):
        on_device = index.to(x.device, non_blocking=True)
        x[on_device] = op(x[on_device], index)
    return x


@dataclass(frozen=True)
class DeviceSimCLR:
    """SimCLR's views of uint8 image batches on their device (module docstring); the settings of
    :func:`~globetrotter.data.augment.simclr_transform`, with ``size`` the side of the views."""

    size: int
    scale_min: float = 0.2
    jitter: float = 0.4
    hue: float = 0.1
    grayscale: float = 0.2
    hflip: bool = True

    def draw(self, height: int, width: int, rng: random.Random) -> torch.Tensor:
        """One view's parameters for an image of ``height`` x ``width`` pixels: float32 [N_PARAMS]
        (layout: the module's ``BOX`` ... ``SIGMA``), drawn from ``rng`` only."""
        p = [0.0] * N_PARAMS
        p[BOX] = crop_box(height, width, self.scale_min, rng)
        p[FLIP] = float(self.hflip and rng.random() < 0.5)
        p[FACTORS], p[ORDER] = [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]
        if (self.jitter or self.hue) and rng.random() < 0.8:
            low, high = max(0.0, 1 - self.jitter), 1 + self.jitter
            p[JITTER] = 1.0
            p[FACTORS] = [rng.uniform(low, high) for _ in range(3)] + [rng.uniform(-self.hue, self.hue)]
            p[ORDER] = rng.sample(range(4), 4)
        p[GRAY] = float(rng.random() < self.grayscale)
        if rng.random() < 0.5:
            p[BLUR], p[SIGMA] = 1.0, rng.uniform(0.1, 2.0)
        return torch.tensor(p, dtype=torch.float32)

    @torch.no_grad()
    def views(self, images: torch.Tensor, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both views of a batch: ``images`` uint8 [B, 3, S, S] on the device, ``params`` [B, 2, N_PARAMS]
        on the CPU (:meth:`draw`, views 1 and 2 of each sample) -> two float32 [B, 3, size, size], normalised."""
        b, side = images.shape[0], images.shape[-1]
        p = params.transpose(0, 1).reshape(2 * b, N_PARAMS).float()  # rows: view 1 of every sample, then view 2
        boxes = torch.cat([torch.arange(b).repeat(2)[:, None].float(), p[:, BOX] * side], dim=1)
        x = roi_align(images.float().div_(255), boxes.to(images.device, non_blocking=True), self.size,
                      sampling_ratio=-1, aligned=True)
        x = _on_rows(x, p[:, FLIP] > 0, lambda v, i: v.flip(-1))
        used = [k for k in range(4) if (self.hue if k == 3 else self.jitter) > 0]
        for slot in range(4):
            for k in used:
                x = _on_rows(x, (p[:, JITTER] > 0) & (p[:, ORDER.start + slot] == k),
                             lambda v, i: JITTER_OPS[k](v, p[i, FACTORS.start + k]))  # run now: this k
        x = _on_rows(x, p[:, GRAY] > 0, lambda v, i: rgb_to_grayscale(v).expand(-1, 3, -1, -1))
        kernel = blur_kernel(self.size)
        x = _on_rows(x, p[:, BLUR] > 0, lambda v, i: gaussian_blur2d(v, kernel, p[i][:, [SIGMA, SIGMA]], "reflect"))
        mean, std = (torch.tensor(s, device=x.device).view(1, 3, 1, 1) for s in (IMAGENET_MEAN, IMAGENET_STD))
        x = (x - mean) / std
        return x[:b], x[b:]

    def apply(self, batch: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
        """A worker's batch with its ``images`` and ``view_params`` replaced by ``view1``/``view2`` made on ``device``."""
        images = batch.pop("images").to(device, non_blocking=True)
        batch["view1"], batch["view2"] = self.views(images, batch.pop("view_params"))
        return batch
