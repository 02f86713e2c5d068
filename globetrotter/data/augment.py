"""Image transforms: SimCLR augmentations for training, a deterministic one for evaluation."""
from __future__ import annotations

import torch
from torchvision.transforms import v2

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def simclr_transform(size: int, scale_min: float = 0.2) -> v2.Compose:
    """Random resized crop, colour jitter (p=0.8), grayscale (p=0.2), Gaussian blur (SimCLR, paper B.1)."""
    blur_kernel = max(3, (size // 10) | 1)  # odd, about 10% of the side as in SimCLR
    return v2.Compose([
        v2.ToImage(),
        v2.RandomResizedCrop(size, scale=(scale_min, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        v2.RandomGrayscale(p=0.2),
        v2.RandomApply([v2.GaussianBlur(blur_kernel, sigma=(0.1, 2.0))], p=0.5),
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
