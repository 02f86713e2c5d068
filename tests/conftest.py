"""Shared pytest fixtures: small data made on the fly, and the optional real Flickr8k data."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

# the suite never downloads: a model hub asked for weights answers from the local cache or fails at once
os.environ["HF_HUB_OFFLINE"] = "1"

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GLOBETROTTER_SHARED", REPO.parent / "shared"))
FLICKR8K = SHARED / "data" / "flickr8k"


def load_experiment(name: str) -> ModuleType:
    """The module of the driver ``experiments/<name>.py`` (experiments/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses and pickling look their module up there
    spec.loader.exec_module(module)
    return module


def strict_json(text: str):
    """``text`` parsed as strict JSON: a bare ``NaN``/``Infinity``/``-Infinity`` (Python's default, which other JSON
    readers refuse) is a ValueError."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def load_bench(name: str) -> ModuleType:
    """The module of the benchmark ``bench/<name>.py`` (bench/ is no package), as :func:`load_experiment`."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def flickr8k_dir() -> Path:
    """The real Flickr8k data of ../shared; the test is skipped cleanly when it is absent."""
    missing = [name for name in ("images", "multi30k", "flickr8kcn", "flickr8k") if not (FLICKR8K / name).is_dir()]
    if missing:
        pytest.skip(f"real data not found at {FLICKR8K} (no {', '.join(missing)})")
    return FLICKR8K


# A tiny image-caption world in four made-up "languages" with disjoint alphabets: the
# caption names the colour of a square, so only the images can tie the languages together.
COLOURS = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (40, 60, 220), "yellow": (230, 220, 40)}
WORDS = {
    "en": {"red": "red", "green": "green", "blue": "blue", "yellow": "yellow", "_": "a square"},
    "ru": {"red": "красный", "green": "зелёный", "blue": "синий", "yellow": "жёлтый", "_": "квадрат"},
    "el": {"red": "κόκκινο", "green": "πράσινο", "blue": "μπλε", "yellow": "κίτρινο", "_": "τετράγωνο"},
    "ja": {"red": "赤い", "green": "緑の", "blue": "青い", "yellow": "黄色い", "_": "四角"},
}


# Training settings for the tiny world: a one-layer text transformer and a ResNet-18 narrowed to 16-128 channels
# (0.7 M weights instead of 11 M: a step costs a third as long, the suite's training tests most of their time)
TINY = ["data.synth=null", "data.vocab_size=300", "data.image_size=32", "data.workers=0", "data.shuffle_buffer=50",
        "model.d_model=32", "model.layers=1", "model.heads=2", "model.ffn=64", "model.embed_dim=16",
        "model.image_backbone_args={channels: [16, 32, 64, 128], stem_width: 16}",
        "batch_size=16", "log_every=2", "val.every=0", "optim.warmup_steps=2"]


def make_tiny_world(root: Path, n_train: int = 96, n_val: int = 32, n_test: int = 12, size: int = 32,
                    heldout: tuple[str, ...] = (), n_adapt: int = 64,
                    words: dict[str, dict[str, str]] | None = None) -> Path:
    """train/val (each image in one language) and a parallel test split, written with ShardWriter.

    ``heldout`` languages stay out of train/val; they caption the test split and an ``adapt`` split
    of ``n_adapt`` images, one held-out language each (as the synthetic world's ``--held-out``).
    ``words``: the languages and their caption words, as :data:`WORDS` (the default) spells them."""
    import numpy as np
    from PIL import Image, ImageDraw

    from data_prep.shard_writer import ShardWriter

    words = WORDS if words is None else words
    names, every = list(COLOURS), list(words)
    langs = [lang for lang in every if lang not in heldout]

    def scene(i: int) -> tuple[Image.Image, str]:
        rng = np.random.default_rng(i)
        colour = names[i % len(names)]
        img = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 60, 3)))
        x, y = rng.integers(2, size // 2, 2)
        ImageDraw.Draw(img).rectangle([x, y, x + size // 3, y + size // 3], fill=COLOURS[colour])
        return img, colour

    def caption(lang: str, colour: str) -> str:
        return f"{words[lang][colour]} {words[lang]['_']}"

    offset = 0
    splits = [("train", n_train, langs), ("val", n_val, langs)] + ([("adapt", n_adapt, list(heldout))] if heldout else [])
    for split, n, split_langs in splits:
        with ShardWriter(root / split, split=split, source="tiny", image_format="png", maxcount=40) as w:
            for i in range(offset, offset + n):
                img, colour = scene(i)
                lang = split_langs[(i // len(names)) % len(split_langs)]
                w.write(f"{split}-{i:05d}", img, caption(lang, colour), lang, f"img{i}")
        offset += n
    with ShardWriter(root / "test", split="test", source="tiny", image_format="png") as w:
        for i in range(offset, offset + n_test):
            img, colour = scene(i)
            for lang in every:
                w.write(f"test-{i:05d}-{lang}", img, caption(lang, colour), lang, f"img{i}", group=f"g{i}")
    return root


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """A tiny 4-language dataset folder with train/, val/ and test/ splits."""
    return make_tiny_world(tmp_path_factory.mktemp("tiny_world"))


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: one thread is fastest, and immune to oversubscribed CPUs (``pytestmark`` of a module)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_thin_reference(folder: Path, languages: tuple[str, ...] = ("en", "ru", "el", "ja"), n: int = 5) -> Path:
    """A train split of ``n`` captions in each of ``languages``: fewer than the grid's CSLS neighbours (10)."""
    import numpy as np

    from data_prep.shard_writer import ShardWriter

    with ShardWriter(folder, split="train", source="unit", image_format="npy") as writer:
        for i in range(n):
            for lang in languages:
                writer.write(f"r{i}{lang}", np.zeros(4, np.float32), f"{lang} caption {i}", lang, f"ref{i}")
    return folder


def write_repetitive_reference(folder: Path, languages: tuple[str, ...] = ("en", "ru"), n: int = 12) -> Path:
    """A train split of ``n`` captions in each of ``languages`` (as many as the grid's CSLS neighbours take), each
    ``red square`` or ``blue square``: no more distinct tokens than MaxSim's per-language hubness neighbours (10)."""
    import numpy as np

    from data_prep.shard_writer import ShardWriter

    with ShardWriter(folder, split="train", source="unit", image_format="npy") as writer:
        for i in range(n):
            for lang in languages:
                writer.write(f"r{i}{lang}", np.zeros(4, np.float32), ("red", "blue")[i % 2] + " square", lang,
                             f"ref{i}")
    return folder


@pytest.fixture(scope="session")
def tiny_run(tiny_world, tmp_path_factory) -> Path:
    """A run folder trained for 2 steps on the tiny world (a real checkpoint for the commands that load one)."""
    from globetrotter.config import load_train_config
    from globetrotter.training.trainer import train

    run_dir = tmp_path_factory.mktemp("tiny_run")
    cfg = load_train_config(None, [f"data.root={tiny_world}", f"data.tokenizer={run_dir / 'tokenizer.json'}",
                                   f"output_dir={run_dir}", *TINY, "steps=2"])
    train(cfg)
    return cfg.run_dir


def run_data_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``globetrotter-data ARGV`` in this process: (exit code, stdout, stderr). The build command sets this process's
    torch threads; the suite gets its own back."""
    from globetrotter.data_cli import main as data_main

    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as stop:
            data_main(argv)
    finally:
        torch.set_num_threads(threads)
    captured = capsys.readouterr()
    return stop.value.code, captured.out, captured.err


def truncate_image(split_dir: Path, key: str) -> Path:
    """Cut the image member of sample ``key`` in its shard of ``split_dir`` to its first half (a download or copy
    that stopped part-way; the manifest is left as it was); returns the shard."""
    import io
    import tarfile

    for shard in sorted(split_dir.glob("*.tar")):
        with tarfile.open(shard) as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
        if not any(m.name.startswith(f"{key}.") for m, _ in members):
            continue
        with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
            for member, data in members:
                if member.name.startswith(f"{key}.") and not member.name.endswith(".json"):
                    data = data[: len(data) // 2]
                    member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        return shard
    raise KeyError(f"no sample {key!r} in {split_dir}")
