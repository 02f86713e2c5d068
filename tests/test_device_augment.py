"""SimCLR views made batched on the device (data.augment_on=device): seeded per sample, the CPU path's settings."""
from __future__ import annotations

import random

import pytest
import torch
from torchvision.transforms.v2 import functional as F

from globetrotter.config import load_train_config
from globetrotter.data.augment import IMAGENET_MEAN, IMAGENET_STD, blur_kernel
from globetrotter.data.pipeline import device_augment_from_config, train_loader_from_config
from globetrotter.data.device_augment import (BLUR, BOX, FACTORS, FLIP, GRAY, JITTER, N_PARAMS, ORDER, SIGMA,
                                              DeviceSimCLR, crop_box)
from globetrotter.data.stream import derive_seed
from globetrotter.data.views import DeviceInputs
from globetrotter.errors import UserError
from globetrotter.tokenizer import load_tokenizer
from globetrotter.training.prepare import ensure_data
from globetrotter.training.tokenizer_file import tokenizer_path
from globetrotter.training.trainer import train

from test_training import tiny_cfg  # tests/ is on sys.path (rootless conftest dir)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIMCLR = DeviceSimCLR(16)  # SimCLR's defaults: every op on
PLAIN = DeviceSimCLR(32, jitter=0.0, hue=0.0, grayscale=0.0, hflip=False)


def _photo(seed: int, height: int = 64, width: int = 64) -> torch.Tensor:
    """A smooth random uint8 [3, H, W] image (blurred noise: every op changes it measurably)."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(1, 3, height // 8, width // 8, generator=g)
    return (torch.nn.functional.interpolate(noise, (height, width), mode="bilinear")[0] * 255).round().to(torch.uint8)


def _ramp(side: int = 64) -> torch.Tensor:
    """R = 4x, G = 4y, B = 0: a pixel's colour says where it was."""
    y, x = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    return torch.stack([4 * x, 4 * y, torch.zeros_like(x)]).to(torch.uint8)


def _params(box=(0.0, 0.0, 1.0, 1.0), **fields: float) -> torch.Tensor:
    """Both views' parameters [1, 2, N_PARAMS]: the given box and fields, every other op off."""
    p = torch.zeros(N_PARAMS)
    p[BOX] = torch.tensor(box)
    p[FACTORS], p[ORDER] = torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.arange(4.0)
    for name, value in fields.items():
        p[{"flip": FLIP, "jitter": JITTER, "gray": GRAY, "blur": BLUR, "sigma": SIGMA}[name]] = value
    return p.expand(1, 2, N_PARAMS).clone()


def _pixels(view: torch.Tensor) -> torch.Tensor:
    """A normalised view back in [0, 255]."""
    mean, std = torch.tensor(IMAGENET_MEAN).view(3, 1, 1), torch.tensor(IMAGENET_STD).view(3, 1, 1)
    return (view * std + mean) * 255


def _inputs(n: int, augment: DeviceSimCLR = SIMCLR, side: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    items = [DeviceInputs(augment, side)(_photo(i), derive_seed(0, 0, 0, 3, i)) for i in range(n)]
    return torch.stack([t["images"] for t in items]), torch.stack([t["view_params"] for t in items])


def test_same_seed_same_views_and_other_samples_differ():
    make = DeviceInputs(SIMCLR, 64)
    a, b, other = make(_photo(0), 7), make(_photo(0), 7), make(_photo(0), 8)
    assert torch.equal(a["view_params"], b["view_params"]) and not torch.equal(a["view_params"], other["view_params"])
    va, vb, vo = (SIMCLR.views(t["images"][None], t["view_params"][None]) for t in (a, b, other))
    assert torch.equal(va[0], vb[0]) and torch.equal(va[1], vb[1])
    assert not torch.allclose(va[0], vo[0]) and not torch.allclose(va[0], va[1])  # other seed; view 2 ≠ view 1
    assert va[0].shape == (1, 3, 16, 16) and va[0].dtype == torch.float32


def test_a_batch_equals_its_samples_one_by_one_in_any_composition():
    images, params = _inputs(12)
    view1, view2 = SIMCLR.views(images, params)
    for i in range(12):
        one1, one2 = SIMCLR.views(images[i:i + 1], params[i:i + 1])
        torch.testing.assert_close(one1[0], view1[i], atol=1e-5, rtol=0)
        torch.testing.assert_close(one2[0], view2[i], atol=1e-5, rtol=0)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))[:7]
    part1, part2 = SIMCLR.views(images[perm], params[perm])
    torch.testing.assert_close(part1, view1[perm], atol=1e-5, rtol=0)
    torch.testing.assert_close(part2, view2[perm], atol=1e-5, rtol=0)


def test_a_crop_lands_where_its_box_says():
    ramp = _ramp()[None]
    view, _ = PLAIN.views(ramp, _params(box=(0.25, 0.125, 0.75, 0.625)))  # x 16..48, y 8..40: 32 px, no resampling
    torch.testing.assert_close(_pixels(view[0]), ramp[0, :, 8:40, 16:48].float(), atol=1e-3, rtol=0)
    whole, _ = PLAIN.views(ramp, _params())  # 64 -> 32: each pixel the mean of its 2x2 source pixels
    expected = 8 * torch.arange(32.0) + 2
    torch.testing.assert_close(_pixels(whole[0])[0], expected.expand(32, 32), atol=1e-3, rtol=0)
    torch.testing.assert_close(_pixels(whole[0])[1], expected[:, None].expand(32, 32), atol=1e-3, rtol=0)


def test_flip_flips_and_grayscale_makes_the_channels_equal():
    image = _photo(3)[None]
    plain, flipped = PLAIN.views(image.expand(2, -1, -1, -1), torch.cat([_params(), _params(flip=1)]))[0]
    torch.testing.assert_close(flipped, plain.flip(-1))
    gray = _pixels(PLAIN.views(image, _params(gray=1))[0][0])
    torch.testing.assert_close(gray[0], gray[1], atol=1e-3, rtol=0)
    torch.testing.assert_close(gray[1], gray[2], atol=1e-3, rtol=0)
    assert (gray[0] - _pixels(plain)[0]).abs().max() > 10


def test_jitter_and_blur_are_torchvisions():
    """Factors, order and σ given: the same image as torchvision's functional ops (the CPU path's)."""
    image = _photo(5, 32, 32)
    factors, order, sigma = (1.3, 0.7, 1.4, 0.08), (2, 0, 3, 1), 1.2
    p = _params(jitter=1, blur=1, sigma=sigma)
    p[..., FACTORS], p[..., ORDER] = torch.tensor(factors), torch.tensor(order, dtype=torch.float32)
    augment = DeviceSimCLR(32)
    got = _pixels(augment.views(image[None], p)[0][0]) / 255
    ops = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)
    expected = image.float() / 255
    for k in order:
        expected = ops[k](expected, factors[k])
    expected = F.gaussian_blur(expected, [blur_kernel(32)] * 2, [sigma, sigma])
    torch.testing.assert_close(got, expected, atol=2e-3, rtol=0)


def test_resized_inputs_keep_the_original_crop():
    """A 48x96 image handed on at 64x64 (aspect ignored): its views are crops of the original's geometry."""
    wide = _photo(9, 48, 96)
    inputs = DeviceInputs(PLAIN, 64)(wide, 11)
    assert inputs["images"].shape == (3, 64, 64)
    view, _ = PLAIN.views(inputs["images"][None], inputs["view_params"][None])
    x0, y0, x1, y1 = inputs["view_params"][0, BOX].tolist()
    top, left, height, width = round(y0 * 48), round(x0 * 96), round((y1 - y0) * 48), round((x1 - x0) * 96)
    assert 0.75 * 0.95 <= width / height <= 4 / 3 * 1.05
    expected = F.resized_crop(wide.float(), top, left, height, width, [32, 32], antialias=True)
    assert (_pixels(view[0]) - expected).abs().mean() < 3  # resampled twice, within a few levels of 255


def test_drawn_parameters_follow_the_settings():
    rng = random.Random(0)
    views = torch.stack([DeviceSimCLR(32, scale_min=0.3).draw(50, 80, rng) for _ in range(3000)])
    box = views[:, BOX]
    area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
    aspect = (box[:, 2] - box[:, 0]) * 80 / ((box[:, 3] - box[:, 1]) * 50)
    assert box.min() >= 0 and box.max() <= 1 and area.min() > 0.28 and area.max() <= 1
    assert aspect.min() > 0.7 and aspect.max() < 1.4
    for column, rate in ((FLIP, 0.5), (JITTER, 0.8), (GRAY, 0.2), (BLUR, 0.5)):
        assert abs(views[:, column].mean() - rate) < 0.04, column
    jittered = views[views[:, JITTER] > 0]
    assert jittered[:, FACTORS][:, :3].min() >= 0.6 and jittered[:, FACTORS][:, :3].max() <= 1.4
    assert jittered[:, FACTORS][:, 3].abs().max() <= 0.1
    assert torch.equal(jittered[:, ORDER].sort(1).values, torch.arange(4.0).expand(len(jittered), 4))
    sigma = views[views[:, BLUR] > 0, SIGMA]
    assert sigma.min() >= 0.1 and sigma.max() <= 2
    quiet = torch.stack([DeviceSimCLR(32, hue=0.0, grayscale=0.0, hflip=False).draw(64, 64, rng) for _ in range(500)])
    assert quiet[:, FLIP].sum() == 0 and quiet[:, GRAY].sum() == 0 and quiet[:, FACTORS.start + 3].abs().sum() == 0


def test_config_rejects_an_unknown_place_in_one_line():
    with pytest.raises(UserError, match=r"'data.augment_on' expected one of 'cpu' \| 'device', got 'gpu'") as err:
        load_train_config(None, ["data.augment_on=gpu"])
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="data.device_source_size must be >= 1"):
        load_train_config(None, ["data.augment_on=device", "data.device_source_size=0"])


def test_the_loader_streams_the_cpu_paths_samples_as_device_inputs(tiny_world, tmp_path):
    cpu_cfg = tiny_cfg(tiny_world, tmp_path, "steps=1")
    device_cfg = tiny_cfg(tiny_world, tmp_path, "steps=1", "data.augment_on=device")
    ensure_data(cpu_cfg)
    tok = load_tokenizer(tokenizer_path(cpu_cfg))
    cpu = next(iter(train_loader_from_config(cpu_cfg, tok, 8, seed=3)))
    device, again = (next(iter(train_loader_from_config(device_cfg, tok, 8, seed=3))) for _ in range(2))
    assert torch.equal(cpu["input_ids"], device["input_ids"]) and "view1" not in device
    assert device["images"].dtype == torch.uint8 and device["images"].shape == (8, 3, 64, 64)
    assert device["view_params"].shape == (8, 2, N_PARAMS)
    assert torch.equal(device["images"], again["images"]) and torch.equal(device["view_params"], again["view_params"])
    batch = device_augment_from_config(device_cfg).apply(device, "cpu")
    assert batch["view1"].shape == batch["view2"].shape == cpu["view1"].shape == (8, 3, 32, 32)
    assert "images" not in batch and "view_params" not in batch
    assert device_augment_from_config(cpu_cfg) is None


def test_a_short_run_trains_with_views_made_on_the_device(tiny_world, tmp_path):
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=3", "checkpoint_every=3", "data.augment_on=device")
    assert cfg.data.source_side == 64
    result = train(cfg)
    assert result["step"] == 3 and result["bad_samples"] == 0


@pytest.mark.parametrize("height, width", [(1000, 1000), (1000, 100), (100, 1000)])
def test_a_crop_that_never_fits_falls_back_to_the_centred_crop_of_the_nearest_allowed_ratio(height, width):
    """scale_min=1 asks for the whole area at a ratio other than 1, which never fits a 1000-pixel image in 10 tries:
    torchvision's fallback is the centred, largest crop whose aspect ratio is clamped to [3/4, 4/3]."""
    x0, y0, x1, y1 = crop_box(height, width, 1.0, random.Random(0))
    w, h = (x1 - x0) * width, (y1 - y0) * height
    ratio = min(max(width / height, 3 / 4), 4 / 3)
    assert w / h == pytest.approx(ratio, abs=0.01)
    assert max(w / width, h / height) == pytest.approx(1.0)  # as large as fits
    assert (x0 + x1) / 2 == pytest.approx(0.5, abs=0.01) and (y0 + y1) / 2 == pytest.approx(0.5, abs=0.01)
