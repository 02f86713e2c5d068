"""A new language from a new folder of captioned images, end to end (docs/training.md, "A new language from new
images"): image files and a TSV converted with ``globetrotter-data folder --all-to train``, the run adapted with
``train.py adapt.split=FOLDER`` (features cached for the new images only, beside them, with the run's backbone; the
run's train cache read, never rebuilt), and the new pair scored with ``eval.py sentence`` on a separate test folder
converted with ``--all-to test``. The base run: the tiny colour world's en/ru/ja; the new language: Arabic, a script
no training caption holds."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from data_prep.shards import read_captions
from globetrotter.config import load_train_config
from globetrotter.data.feature_cache import cache_dir_for, spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.data_cli import main as data_main
from globetrotter.evaluation.cli import main as eval_main
from globetrotter.training.cli import main as train_main
from globetrotter.training.trainer import train

from conftest import COLOURS, WORDS, make_tiny_world
from test_adapt import FAST, ColourPool

REPO = Path(__file__).resolve().parents[1]
AR = {"red": "أحمر", "green": "أخضر", "blue": "أزرق", "yellow": "أصفر", "_": "مربع"}
CAPTIONS = {**WORDS, "ar": AR}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A run trained on en/ru/ja (el held out of the world's train split) for 150 steps; its train cache built by the
    colour stand-in backbone."""
    from safetensors.torch import save_file

    from test_feature_cache import small_backbone

    world = make_tiny_world(tmp_path_factory.mktemp("world"), n_train=192, n_test=8, heldout=("el",), n_adapt=8)
    out = tmp_path_factory.mktemp("runs")
    weights = out / "small.safetensors"
    save_file(small_backbone().state_dict(), str(weights))
    cfg = load_train_config(None, [f"data.root={world}", f"data.tokenizer={out / 'tokenizer.json'}", f"output_dir={out}",
                                   "run_name=base", f"model.image_pretrained={weights}", *FAST, "steps=150"])
    build_feature_cache(world / "train", spec_from_config(cfg), cache_dir_for(cfg, "train"), ColourPool(), workers=0,
                        progress=False)
    train(cfg)
    return cfg.run_dir


@pytest.fixture
def stand_in_backbone(monkeypatch):
    """The adaptation builds the new folder's cache with the run's backbone: here the colour stand-in the base run's
    cache was built with (the same weights file, so the same spec)."""
    monkeypatch.setattr("globetrotter.models.image.create_image_backbone", lambda *a, **k: ColourPool())


def write_folder(folder: Path, first: int, n: int, languages: list[str]) -> Path:
    """``n`` photos (a coloured square on a dark background, seeds from ``first``) as PNG files under
    ``folder/images`` and their captions, one per language, in ``folder/captions.tsv``; returns the TSV."""
    names = list(COLOURS)
    rows = ["image\tlang\tcaption"]
    (folder / "images").mkdir(parents=True)
    for i in range(first, first + n):
        rng = np.random.default_rng(i)
        colour = names[i % len(names)]
        img = Image.new("RGB", (32, 32), tuple(int(v) for v in rng.integers(0, 60, 3)))
        x, y = rng.integers(2, 16, 2)
        ImageDraw.Draw(img).rectangle([x, y, x + 10, y + 10], fill=COLOURS[colour])
        img.save(folder / "images" / f"photo{i}.png")
        rows += [f"photo{i}.png\t{lang}\t{CAPTIONS[lang][colour]} {CAPTIONS[lang]['_']}" for lang in languages]
    tsv = folder / "captions.tsv"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tsv


def run(main, *argv: str, capsys=None) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines() if capsys else []
    return stop.value.code, err[-1] if err else ""


def convert(folder: Path, languages: list[str], first: int, n: int, split: str, out: str) -> None:
    """``globetrotter-data folder --images DIR --captions TSV --all-to SPLIT --out OUT``, as documented."""
    tsv = write_folder(folder, first, n, languages)
    code, _ = run(data_main, "folder", "--images", folder / "images", "--captions", tsv, "--all-to", split,
                  "--out", out, "--workers", "1", "--no-progress")
    assert code == 0


def fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """(mtime in ns, sha256) of every file under ``folder``."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def sentence(model: Path, split: str, out: str) -> dict:
    code, _ = run(eval_main, "sentence", "--model", model, "--split", split, "--languages", "en,ar", "--out", out)
    assert code == 0
    return json.loads(next(Path(out).glob("sentence-*.json")).read_text())["metrics"]


def test_a_new_language_from_a_new_folder_of_images(base, tmp_path, monkeypatch, stand_in_backbone):
    monkeypatch.chdir(tmp_path)  # the documented commands' relative paths
    world = Path(load_train_config(base / "config.yaml").data.root)
    train_cache = world / "train" / "features"
    before_files = fingerprint(world)
    # 1. the new photos with Arabic captions (files + TSV), all to one split; 2. a separate parallel test folder
    convert(tmp_path / "new", ["ar"], 10_000, 96, "train", "outputs/new-ar")
    convert(tmp_path / "test", ["en", "ar"], 20_000, 4, "test", "outputs/new-ar-test")  # a photo of each colour
    assert {m["lang"] for m in read_captions("outputs/new-ar/train")} == {"ar"}
    assert json.loads(Path("outputs/new-ar/train/manifest.json").read_text())["one_language_per_image"] is True
    # 3. adapt: the documented command, with more epochs for 96 captions
    code, _ = run(train_main, "--config", REPO / "configs" / "adapt.yaml", f"adapt.from={base}", "adapt.language=ar",
                  "adapt.split=outputs/new-ar/train", "adapt.epochs=30")
    assert code == 0
    adapted = base.parent / "base-ar"
    saved = load_train_config(adapted / "config.yaml")
    assert saved.adapt.split == str((tmp_path / "outputs/new-ar/train").resolve())  # the same folder from anywhere
    assert json.loads((adapted / "result.json").read_text())["step"] == 90  # 30 epochs x 96 captions / 32
    # features were cached for the new images only, beside them, with the run's backbone (the whole image: no views)
    record = json.loads(Path("outputs/new-ar/train/features/cache.json").read_text())
    assert record["images"] == 96 and record["spec"]["views"] == 0
    run_spec = spec_from_config(saved).__dict__
    assert all(record["spec"][k] == run_spec[k] for k in ("backbone", "weights", "weights_sha256", "image_size"))
    # the run's data, its train cache included, was read and not rebuilt or modified
    assert fingerprint(world) == before_files and (train_cache / "cache.json").is_file()
    # 4. the new pair on the separate test folder: the base run cannot read Arabic, the adapted run can
    before = sentence(base, "outputs/new-ar-test/test", "eval-before")
    after = sentence(adapted, "outputs/new-ar-test/test", "eval-after")
    # a caption names only the colour, so the test folder has one photo of each (chance: 1/4)
    assert after["sentence_translation"] == 1.0 and before["sentence_translation"] <= 0.5, (before, after)


def test_bad_adaptation_folders_are_one_line_errors_and_write_nothing(base, tmp_path, monkeypatch, capsys,
                                                                       stand_in_backbone):
    monkeypatch.chdir(tmp_path)
    convert(tmp_path / "new", ["en"], 30_000, 8, "train", "outputs/new-en")  # captions in a language the run has
    argv = ["--config", REPO / "configs" / "adapt.yaml", f"adapt.from={base}", f"output_dir={tmp_path / 'runs'}"]

    code, line = run(train_main, *argv, "adapt.language=ar", "adapt.split=outputs/new-en/train", capsys=capsys)
    folder = Path("outputs/new-en/train").resolve()
    assert code == 2 and line.startswith(f"error: adapt.language=ar: {folder} (adapt.split) has no caption in it: "
                                         f"0 of its 8 captions (by language: en 8; {base} was trained on en already)"), line
    # it suggested "e.g. en", a language the run knows: now it says the folder holds no new language
    assert line.endswith("caption its images in ar (the folder holds no language the run does not know)"), line
    convert(tmp_path / "mixed", ["en", "el"], 50_000, 4, "train", "outputs/mixed")
    code, line = run(train_main, *argv, "adapt.language=ar", "adapt.split=outputs/mixed/train", capsys=capsys)
    assert code == 2 and line.endswith("or set adapt.language to the folder's new language (el)"), line
    code, line = run(train_main, *argv, "adapt.language=en", "adapt.split=outputs/new-en/train", capsys=capsys)
    assert code == 2 and line.startswith("error: adapt.language=en:") and "trained on en already" in line
    assert "outputs/new-en/train has 8 en caption(s)" in line, line
    code, line = run(train_main, *argv, "adapt.language=ar", "adapt.split=outputs/nowhere/train", capsys=capsys)
    assert code == 2 and line.startswith("error: adapt.split=outputs/nowhere/train: no split folder"), line
    # a cache beside the new images built with another backbone setting than the run's is refused, not used
    convert(tmp_path / "ar", ["ar"], 40_000, 8, "train", "outputs/new-ar")
    other = spec_from_config(load_train_config(base / "config.yaml", ["data.image_size=16"]))
    build_feature_cache("outputs/new-ar/train", other, "outputs/new-ar/train/features", ColourPool(), workers=0,
                        progress=False)
    code, line = run(train_main, *argv, "adapt.language=ar", "adapt.split=outputs/new-ar/train", capsys=capsys)
    assert code == 2 and "feature cache of adapt.split was built with another backbone" in line, line
    assert "image_size=16 vs the run's 32" in line, line
    # nothing written: no run folder under output_dir, no cache beside the en folder
    assert not (tmp_path / "runs").exists()
    assert not Path("outputs/new-en/train/features").exists()
