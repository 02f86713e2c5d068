"""The training stream's image decoder: torchvision's (deprecated since torchvision 0.29) and PIL's, which
:func:`~globetrotter.data.views.decode_rgb` falls back to, give the same uint8 [3, H, W] RGB pixels."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import globetrotter.data.views as views


def _encoded(mode: str, fmt: str) -> bytes:
    rng = np.random.default_rng(0)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (24, 40, channels), dtype=np.uint8).squeeze(-1) if channels == 1 else \
        rng.integers(0, 256, (24, 40, channels), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, mode).save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("mode, fmt", [("RGB", "JPEG"), ("L", "JPEG"), ("RGB", "PNG"), ("RGBA", "PNG"), ("L", "PNG")])
def test_pil_decodes_the_pixels_of_torchvision(mode, fmt):
    data = _encoded(mode, fmt)
    ours = views.decode_rgb_pil(data)
    assert ours.dtype == torch.uint8 and ours.shape == (3, 24, 40) and ours.is_contiguous()
    if views.decode_image is not None:
        assert torch.equal(ours, views.decode_rgb(data))


def test_without_torchvisions_decoders_the_stream_decodes_with_pil(monkeypatch):
    data = _encoded("RGB", "JPEG")
    expected = views.decode_rgb_pil(data)
    monkeypatch.setattr(views, "decode_image", None)
    assert torch.equal(views.decode_rgb(data), expected)
    with pytest.raises(Exception):
        views.decode_rgb(data[: len(data) // 3])  # truncated: an error the stream skips as a bad sample
