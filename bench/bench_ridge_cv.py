"""The image-pivot start of a training run (``model.token_init: image_pivot``) with its ridge-strength search run one
fit at a time against ``--threads`` (2 or more) fits at a time, measured in the same run on the same split.

    python bench/bench_ridge_cv.py [--config configs/flickr8k.yaml] [--threads 2] [KEY=VALUE ...]

``train.py`` runs the start (:func:`globetrotter.training.token_init.init_from_config`) after setting torch's
threads; the cross-validation of the strength (the config's candidates × ``model.token_init_folds`` folds, scikit-learn
``GridSearchCV``) then runs that many fits at a time, in separate processes. Each fit is deterministic, so the
chosen strength, every candidate's held-out error and the token rows must come out the same: the benchmark checks
it. Needs the config's data and feature cache (the README's Flickr8k conversion and a first run).

Prints each start's log lines, then one line: the seconds with one thread and with ``--threads``, their ratio, and
whether the strength, errors and rows came out the same.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from globetrotter.argtypes import int_at_least  # noqa: E402
from globetrotter.config import TrainConfig, load_train_config  # noqa: E402
from globetrotter.encoder import build_model  # noqa: E402
from globetrotter.errors import run_cli  # noqa: E402
from globetrotter.models.text import TextEncoder  # noqa: E402
from globetrotter.tokenizer import load_tokenizer  # noqa: E402
from globetrotter.training import token_init  # noqa: E402
from globetrotter.training.tokenizer_file import tokenizer_path  # noqa: E402


def start(cfg: TrainConfig, threads: int) -> tuple[float, dict, torch.Tensor]:
    """Seconds of the image-pivot start at ``threads`` torch threads, its record and the token rows it set."""
    torch.set_num_threads(threads)
    tokenizer = load_tokenizer(tokenizer_path(cfg))
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, tokenizer.get_vocab_size(), tokenizer)
    began = time.perf_counter()
    record = token_init.init_from_config(model, cfg, tokenizer, log=lambda line: print("  " + line))
    assert isinstance(model.text, TextEncoder)  # init_from_config refused any other text encoder
    return time.perf_counter() - began, record, model.text.token_embedding.weight.detach().clone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/flickr8k.yaml",
                        help="training config, relative to the repository (default %(default)s)")
    parser.add_argument("--threads", type=int_at_least(2, "compared against one thread"), default=2,
                        help="threads (and fits at a time) against one (default %(default)s)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as train.py takes them")
    args = parser.parse_args()
    cfg = load_train_config(REPO / args.config, args.overrides)
    if cfg.model.token_init != "image_pivot":  # it timed the fit all the same
        from globetrotter.errors import UserError

        raise UserError(f"model.token_init={cfg.model.token_init}: this benchmark times the image-pivot start's ridge "
                        f"fit; give a config that uses it (model.token_init=image_pivot)")
    runs = []  # a list: each run kept, so the check compares two runs
    for threads in (1, args.threads):
        print(f"{threads} thread(s):")
        runs.append(start(cfg, threads))
    (one, rec_one, rows_one), (many, rec_many, rows_many) = runs
    same = rec_one == rec_many and torch.equal(rows_one, rows_many)
    print(f"image-pivot start: {one:.1f} s with 1 thread, {many:.1f} s with {args.threads} "
          f"({one / many:.2f}x); the same strength, errors and rows: {same}")


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
