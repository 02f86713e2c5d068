"""What a data worker makes of a training sample's image: its two views (CPU) or the inputs of the device's.

Both take the decoded image and the sample's own seed (:mod:`globetrotter.data.stream`) and return
the tensors the batch stacks under their names. :class:`CpuViews` (``data.augment_on: cpu``) makes
the two augmented views; :class:`DeviceInputs` (``data.augment_on: device``) hands on the image at a
fixed square side and the two views' parameters, which :class:`~.device_augment.DeviceSimCLR` turns
into views on the training device.
"""
from __future__ import annotations

import io
import random
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2.functional import resize

try:  # deprecated in torchvision 0.29 for TorchCodec, and to be removed: PIL decodes the same pixels, slower
    from torchvision.io import ImageReadMode, decode_image
except ImportError:  # pragma: no cover - a torchvision without its image decoders
    decode_image = None

from .device_augment import DeviceSimCLR


def decode_rgb(data: bytes) -> torch.Tensor:
    """An encoded jpg/png image as uint8 [3, H, W] RGB (torchvision.io: libjpeg-turbo/libpng).

    The same pixels as PIL's decode of the shards' JPEGs, at 1.1-2.4x its rate on one thread
    (``bench/bench_decode.py``); a truncated or unreadable image raises (``RuntimeError``; ``OSError`` from PIL). A
    torchvision that no longer has its decoders (deprecated since 0.29) falls back to PIL (:func:`decode_rgb_pil`).
    """
    if decode_image is None:
        return decode_rgb_pil(data)
    return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)


def decode_rgb_pil(data: bytes) -> torch.Tensor:
    """:func:`decode_rgb` through PIL: the same uint8 [3, H, W] RGB tensor of a jpg/png image."""
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image.convert("RGB"))
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()


@dataclass
class CpuViews:
    """The two views of ``transform`` (e.g. :func:`~.augment.simclr_transform`): ``view1``, ``view2``.

    torchvision's transforms draw from the global torch RNG; it is seeded with the sample's seed
    inside ``fork_rng``, so the caller's RNG state is untouched.
    """

    transform: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, image: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return {"view1": self.transform(image), "view2": self.transform(image)}


@dataclass
class DeviceInputs:
    """``images``: the image resized to ``side`` x ``side`` (uint8, aspect ignored), and ``view_params``:
    [2, N_PARAMS] for ``augment``, drawn in the image's own geometry (so the crops are those of the
    original image; only its resolution changes) from a generator seeded with the sample's seed."""

    augment: DeviceSimCLR
    side: int

    def __call__(self, image: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
        height, width = image.shape[-2:]
        rng = random.Random(seed)
        params = torch.stack([self.augment.draw(height, width, rng) for _ in range(2)])
        if (height, width) != (self.side, self.side):
            image = resize(image, [self.side, self.side], antialias=True)
        return {"images": image, "view_params": params}
