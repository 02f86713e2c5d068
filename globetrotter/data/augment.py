"""Image transforms: SimCLR augmentations for training, a deterministic one for evaluation."""
from __future__ import annotations

import torch
from torchvision.transforms import v2

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def blur_kernel(size: int) -> int:
    """Side of the Gaussian blur's kernel for views of ``size`` pixels: odd, about 10% of the side (SimCLR)."""
    return max(3, (size // 10) | 1)


def simclr_transform(size: int, scale_min: float = 0.2, jitter: float = 0.4, hue: float = 0.1,
                     grayscale: float = 0.2, hflip: bool = True) -> v2.Compose:
    """Random resized crop, flip, colour jitter (p=0.8), grayscale, Gaussian blur (SimCLR, paper B.1).

    ``jitter`` is the brightness/contrast/saturation strength and ``hue`` the hue shift
    (fraction of the colour wheel) of the jitter; ``grayscale`` its probability. Defaults are
    SimCLR's; captions that name colours or sides need ``hue=0``, ``grayscale=0``, ``hflip=False``.
    """
    return v2.Compose([
        v2.ToImage(),
        v2.RandomResizedCrop(size, scale=(scale_min, 1.0), antialias=True),
        v2.RandomHorizontalFlip(p=0.5 if hflip else 0.0),
        v2.RandomApply([v2.ColorJitter(jitter, jitter, jitter, hue)], p=0.8 if jitter or hue else 0.0),
        v2.RandomGrayscale(p=grayscale),
        v2.RandomApply([v2.GaussianBlur(blur_kernel(size), sigma=(0.1, 2.0))], p=0.5),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def eval_transform(size: int) -> v2.Compose:
    """Resize the shorter side, centre crop, normalise: the view every evaluation sees."""
    return v2.Compose([
        v2.ToImage(),
        v2.Resize(size, antialias=True),
        v2.CenterCrop(size),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
