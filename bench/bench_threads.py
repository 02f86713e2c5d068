"""Automatic intra-op threads against one thread, measured in the same run: ``train.py`` and the feature-cache
build at their defaults (no ``OMP_NUM_THREADS``: :mod:`globetrotter.threads` chooses), against the same command
with ``OMP_NUM_THREADS=1``, alone and beside one other training job (itself at defaults).

    python bench/bench_threads.py [--train-steps 60] [--build-images 24] [--repeats 1]

- train: ``train.py --config configs/quickstart.yaml`` for ``--train-steps`` steps (one validation, one
  checkpoint), wall time of the whole command as a user waits for it, start-up included;
- features: the feature-cache build of ``configs/flickr8k.yaml``'s train split as ``globetrotter-data features build``
  runs it (its thread choice, its decoding worker), on ``--build-images`` images; images/s.

Each row prints the threads the default chose and its rate as a ratio of the one-thread rate (≥ 1: the default is
no slower). The background job starts first and runs ``--settle`` seconds before the measurements, so the load
average that the automatic choice reads has seen it. Needs the synthetic world and its tokenizer (made once,
before any timing, when absent, as ``train.py`` would) and the Flickr8k split of ``configs/flickr8k.yaml``
(skipped when absent).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from globetrotter.argtypes import comma_separated, non_negative_float, one_of, positive_int
from globetrotter.errors import UserError, run_cli

REPO = Path(__file__).resolve().parents[1]
THREADS = re.compile(r"torch threads: (\d+)")
RATE = re.compile(r"images_per_s=([0-9.]+)")

BUILD = """
import sys
from pathlib import Path
from globetrotter.config import load_train_config
from globetrotter.data.feature_cache import spec_from_config
from globetrotter.data.feature_cache_build import build_feature_cache
from globetrotter.models.image import create_image_backbone
from globetrotter.threads import configure_threads
cfg = load_train_config("configs/flickr8k.yaml")
configure_threads(0, requested=cfg.threads, log=print)  # as globetrotter-data features build: light workers
backbone = create_image_backbone(cfg.model.image_backbone, cfg.model.image_pretrained, **cfg.model.image_backbone_args)
record = build_feature_cache(Path(cfg.data.root) / cfg.data.train_split, spec_from_config(cfg), Path(sys.argv[2]),
                             backbone, workers=1, progress=False, max_images=int(sys.argv[1]))
print(f"images_per_s={record['images_per_s']}")
"""

PREPARE = """
from globetrotter.config import load_train_config
from globetrotter.training.prepare import ensure_data
ensure_data(load_train_config("configs/quickstart.yaml"))
"""


def environment(one_thread: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    return env


def train_command(steps: int, out: Path, name: str) -> list[str]:
    return [sys.executable, "train.py", "--config", "configs/quickstart.yaml", f"steps={steps}", f"val.every={steps}",
            f"checkpoint_every={steps}", f"run_name={name}", f"output_dir={out}"]


def last_line(stderr: str) -> str:
    """The last line a failed subprocess wrote (its error), or ``"no message"``."""
    return (stderr.strip().splitlines() or ["no message"])[-1]


def prepare_world() -> None:
    """The quickstart's synthetic world and tokenizer, made when absent (as ``train.py`` would) before any timing:
    else the first measured run would time their generation too."""
    done = subprocess.run([sys.executable, "-c", PREPARE], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"the synthetic world of configs/quickstart.yaml could not be prepared: "
                        f"{last_line(done.stderr)}")


def wait_for_quiet(limit: float) -> None:
    """Wait (at most ``limit`` seconds) until the 1-minute load falls to 0.5, the level below which the automatic
    choice ignores it: else the previous measurement's own load would cap the next default."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] > 0.5 and time.monotonic() < deadline:
        time.sleep(5)


def measure(kind: str, one_thread: bool, args: argparse.Namespace, tmp: Path, tag: str) -> tuple[float, int]:
    """(rate, threads chosen): samples/s of a whole train.py run, or images/s of a cache build."""
    env = environment(one_thread)
    if kind == "train":
        cmd = train_command(args.train_steps, tmp, f"bench-{tag}")
    else:
        cmd = [sys.executable, "-c", BUILD, str(args.build_images), str(tmp / f"features-{tag}")]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        what = "train.py" if kind == "train" else "the feature-cache build"
        raise UserError(f"{what} ({'OMP_NUM_THREADS=1' if one_thread else 'default threads'}, {tag}) exited "
                        f"{done.returncode}: {last_line(done.stderr)}")
    found = THREADS.search(done.stdout + done.stderr)
    threads = int(found.group(1)) if found else -1
    if kind == "train":
        return args.train_steps * 64 / seconds, threads
    rate = RATE.search(done.stdout)
    if rate is None:
        raise UserError(f"the feature-cache build ({tag}) printed no images_per_s=: {last_line(done.stdout)}")
    return float(rate.group(1)), threads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-steps", type=positive_int, default=60, help="steps of each measured train.py run (default %(default)s)")
    p.add_argument("--build-images", type=positive_int, default=24, help="images of each measured cache build (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=1, help="measurements of each cell, their mean printed (default %(default)s)")
    p.add_argument("--settle", type=non_negative_float, default=75.0, help="seconds the background job runs before measuring (default %(default)s)")
    p.add_argument("--quiet-wait", type=non_negative_float, default=240.0,
                   help="alone: the most seconds to wait for the load to fall to 0.5 before each measurement "
                        "(default %(default)s)")
    p.add_argument("--skip", type=comma_separated(one_of("train", "features", "alone", "busy")), default=[],
                   metavar="S,S",
                   help="commands (train, features) or situations (alone, busy) not to measure, comma-separated; at "
                        "least one of each pair must stay (default: measure all)")
    args = p.parse_args()

    situations = [s for s in ("alone", "busy") if s not in args.skip]
    if not situations:
        raise UserError("--skip alone,busy: leaves no situation to measure in; keep one of them")
    kinds = [k for k in ("train", "features") if k not in args.skip]
    if "features" in kinds and not (REPO / "outputs/flickr8k-more/train/manifest.json").is_file():
        if "train" not in kinds:
            raise UserError("--skip train: leaves only features, and there is no Flickr8k split at "
                            "outputs/flickr8k-more (see docs/data.md): nothing to measure")
        print("features: skipped (no Flickr8k split at outputs/flickr8k-more; see docs/data.md)")
        kinds.remove("features")
    if not kinds:
        raise UserError("--skip train,features: leaves no command to measure; keep one of them")
    if "train" in kinds or "busy" in situations:  # the background job is a train.py run too
        prepare_world()
    print(f"{os.cpu_count()} cores; load before: {os.getloadavg()[0]:.1f}")
    print(f"{'beside':<8} {'command':<9} {'default threads':>15} {'default':>10} {'1 thread':>10} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for situation in situations:
            background = None
            if situation == "busy":
                background = subprocess.Popen(train_command(100_000, tmp, "bench-background"), cwd=REPO,
                                              env=environment(False), stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                time.sleep(args.settle)
            try:
                for kind in kinds:
                    rates: dict[bool, list[float]] = {False: [], True: []}
                    chosen: set[int] = set()
                    for r in range(args.repeats):
                        for one in (False, True):
                            if background is None:
                                wait_for_quiet(args.quiet_wait)
                            rate, threads = measure(kind, one, args, tmp, f"{situation}-{kind}-{int(one)}-{r}")
                            rates[one].append(rate)
                            if not one:
                                chosen.add(threads)
                    default, single = (sum(v) / len(v) for v in (rates[False], rates[True]))
                    unit = "samples/s" if kind == "train" else "images/s"
                    print(f"{'a job' if background else 'nothing':<8} {kind:<9} {'/'.join(map(str, sorted(chosen))):>15} "
                          f"{default:10.1f} {single:10.1f} {default / single:6.2f}x  ({unit})", flush=True)
            finally:
                if background is not None:
                    background.kill()
                    background.wait()


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
