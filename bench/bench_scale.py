"""How each stage grows with the data: generated corpora of N captions, every stage timed with its peak memory.

    .venv/bin/python bench/bench_scale.py --sizes 10000,100000,1000000 --out bench_out/scale

A corpus of N captions is N images, each captioned once in one of the built-in world's nine languages (the
paper's train/val rule). Captions come from the world's grammars (a pool of ``--pool`` scenes, reused with fresh
image ids); each image has a tiny encoded picture (its background and first object's colour) and a generated
``--dim``-wide embedding (the sum of vectors of the scene's object kinds plus noise, float16 as clip-retrieval
writes). Stages, each in a fresh process so its peak RSS is its own:

- ``shards``: writing the N captions and pictures as WebDataset shards (``ShardWriter``);
- ``tokenizer``: training the shared BPE on them (``train_tokenizer_on_split``, the config's vocabulary size);
- ``import``: ``import_embeddings`` of the ``.npy`` embeddings and their id list into a feature cache;
- ``neighbours``: other-language visual neighbours of every image (``other_language_neighbours``, k = 10);
- ``batches``: the trainer's batch stream set-up (captions read and tokenized once, ``FeatureBatches``);
- ``train``: ``--train-steps`` (200) training steps of the quickstart model from the imported embeddings (samples/s
  reported), at ``--threads`` (2) intra-op threads;
- ``validation``: the trainer's first validation (``Validator``, load included) on every caption of the N-caption
  split (``val.max_per_lang: null``), with the model just built and g the imported embeddings
  (``val.image_features: features``, no picture decoded); up to 100k captions also the estimate it makes
  (sampled queries, approximate image side) against the exact BkR@10 of every caption, on embeddings with signal;
  at ``--threads`` intra-op threads;
- ``index``: the sentence-translation index over N sentence vectors of the paper's width D = 128 (a fixed random
  projection of the generated embeddings; ``translate.build_index``) and 10,000 queries.

Prints one row per stage and size (seconds of the stage's work, after its imports; its process's peak anonymous
resident memory, sampled every 50 ms, and its peak RSS with the pages of memory-mapped files, which the system
can drop; a process holding only torch and the model is measured alike). ``scale.json`` in ``--out`` is updated
after each stage (an interrupted run keeps what it measured), with each run's command and settings. With two sizes
or more measured for a stage (this run's or earlier ones' in the folder), also the log-log slope of each stage
between consecutive sizes and the plot ``scale.png``.

A later run in the same ``--out`` updates the stages it runs (``--stages validation``): each size's folder
records the ``--dim``, ``--pool`` and seed its data was made with, and a run with other ones is refused (use
another ``--out``). A stage run alone needs the stages before it to have run in that folder (``import`` needs
``shards``; ``neighbours`` needs ``shards import``; ``batches``, ``train`` and ``validation`` need
``shards tokenizer import``).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # the project, and scale_stages beside this file

from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import comma_separated, one_of, output_folder, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from scale_stages import (NEIGHBOURS_K, THREADS, TRAIN_STEPS, languages_of, made, make_pool,  # noqa: E402
                          prepare_embeddings, run_stage)

STAGES = ("shards", "tokenizer", "import", "neighbours", "batches", "train", "validation", "index")
SEED = 0  # the generated pool's and embeddings' seed, recorded with the data
DATA_RECORD = "data.json"  # in each size's folder: what generated its data
# the stages whose output each stage reads (``index`` reads only the embeddings, made whenever missing)
NEEDS = {"tokenizer": ("shards",), "import": ("shards",), "neighbours": ("shards", "import"),
         "batches": ("shards", "tokenizer", "import"), "train": ("shards", "tokenizer", "import"),
         "validation": ("shards", "tokenizer", "import")}


def size_problem(n: int, stages: list[str]) -> str | None:
    """Why a corpus of ``n`` captions is too small for ``stages``, or None: the validation stage needs two languages,
    the neighbours stage :data:`NEIGHBOURS_K` images in other languages than each language's."""
    from data_prep.synth.config import DEFAULT_LANGUAGES

    counts = np.bincount(languages_of(n, len(DEFAULT_LANGUAGES)), minlength=len(DEFAULT_LANGUAGES))
    held = [(DEFAULT_LANGUAGES[i], int(c)) for i, c in enumerate(counts) if c]
    if "validation" in stages and len(held) < 2:
        return f"its captions are in one language ({held[0][0]}), and the validation stage needs two or more"
    if "neighbours" in stages:
        lang, most = max(held, key=lambda h: h[1])
        if n - most < NEIGHBOURS_K:
            return (f"{n - most} of its images are captioned in a language other than {lang!r}, and the neighbours "
                    f"stage mines {NEIGHBOURS_K} of them per image")
    return None


def check_sizes(sizes: list[int], stages: list[str]) -> None:
    """Refuse (:class:`UserError`) a size too small for the stages, naming the smallest size from which every size
    up to 100 more is accepted."""
    for n in sizes:
        problem = size_problem(n, stages)
        if problem:
            fine = next(s for s in range(n + 1, n + 10_000) if all(size_problem(m, stages) is None
                                                                   for m in range(s, s + 100)))
            raise UserError(f"--sizes {n}: a corpus of {n} caption(s) is too small: {problem}; give sizes of at "
                            f"least {fine}")


def data_settings(dim: int, pool: int) -> dict:
    """What generates a size's data (shards, embeddings; the tokenizer and cache made from them)."""
    return {"dim": dim, "pool": pool, "seed": SEED}


def _differing(recorded: dict, settings: dict) -> str | None:
    """The first setting ``recorded`` holds otherwise than ``settings`` (``--dim 64, not 32``), else None."""
    for key, value in settings.items():
        if recorded.get(key) != value:
            flag = "seed" if key == "seed" else f"--{key}"
            was = "none recorded (an older bench_scale)" if recorded.get(key) is None else recorded[key]
            return f"{flag} {was}, not {value}"
    return None


def check_folder(out: Path, sizes: list[int], stages: list[str], settings: dict) -> tuple[dict[int, dict], list[dict]]:
    """The figures of earlier runs in ``out`` by size and those runs' records (empty if none), after refusing (:class:`UserError`) data or
    figures made with other ``settings``, and a stage whose inputs neither exist nor are made by this run."""
    again = "give the same settings, or another --out for a new table"
    results: dict[int, dict] = {}
    runs: list[dict] = []
    if (out / "scale.json").is_file():
        saved = json.loads((out / "scale.json").read_text())
        differ = _differing(saved.get("settings", {"dim": saved.get("dim")}), settings)
        if differ:
            raise UserError(f"{out}: its scale.json holds figures made with {differ}; {again}")
        results = {int(n): r for n, r in saved["results"].items()}
        runs = saved.get("runs", [])
    for n in sizes:
        work = out / f"n{n}"
        record = work / DATA_RECORD
        if record.is_file():
            differ = _differing(json.loads(record.read_text()), settings)
            if differ:
                raise UserError(f"{work}: its data was generated with {differ}; {again}")
        elif any((work / name).exists() for name in ("embeddings.npy", "train", "cache")):
            raise UserError(f"{work}: data of unknown settings (no {DATA_RECORD}: an older bench_scale, or an "
                            f"interrupted generation, made it); remove it, or give another --out")
        for i, name in enumerate(stages):
            missing = [need for need in NEEDS.get(name, ()) if need not in stages[:i] and not made(work, need)]
            if missing:
                run = [s for s in STAGES if s in missing or s in stages]
                raise UserError(f"--stages {name} at size {n}: {work} has no output of the stage(s) "
                                f"{','.join(missing)} yet; run them first (--stages {','.join(run)})")
    return results, runs


def save(out: Path, results: dict[int, dict], settings: dict, runs: list[dict]) -> None:
    """``scale.json``: the figures by size and stage, the data's settings and each run's command and options."""
    (out / "scale.json").write_text(json_text({"sizes": sorted(results), "dim": settings["dim"],
                                               "settings": settings, "runs": runs,
                                               "results": {n: results[n] for n in sorted(results)}}, indent=2))


def slope(t0: float, t1: float, n0: int, n1: int) -> float:
    return float(np.log(t1 / t0) / np.log(n1 / n0))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=comma_separated(positive_int), default=[10_000, 100_000, 1_000_000], metavar="N,N",
                   help="captions (= images) per generated corpus, comma-separated, one folder n<SIZE> each (default: "
                        "10000,100000,1000000)")
    p.add_argument("--dim", type=positive_int, default=512, help="width of the generated image embeddings (default %(default)s)")
    p.add_argument("--pool", type=positive_int, default=20_000, help="distinct generated scenes (default %(default)s)")
    p.add_argument("--stages", type=comma_separated(one_of(*STAGES)), default=list(STAGES), metavar="STAGE,STAGE",
                   help=f"stages to run, comma-separated, in this order ({','.join(STAGES)}; default: all)")
    p.add_argument("--threads", type=positive_int, default=THREADS,
                   help="torch intra-op threads of the train and validation stages (default %(default)s, as the "
                        "documented figures used; OMP_NUM_THREADS does not change it); recorded in scale.json")
    p.add_argument("--train-steps", type=positive_int, default=TRAIN_STEPS,
                   help="timed steps of the train stage, after 5 untimed ones (default %(default)s, as documented)")
    p.add_argument("--out", type=output_folder, default="bench_out/scale",
                   help="work folder, table and plot (default %(default)s)")
    return p


def main() -> int:
    args = build_parser().parse_args()
    out = Path(args.out)
    stages = [s for s in STAGES if s in args.stages]  # each stage's inputs before it, as the help lists them
    settings = data_settings(args.dim, args.pool)
    check_sizes(args.sizes, stages)
    results, runs = check_folder(out, args.sizes, stages, settings)  # a run of some stages updates those in place
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {out}: cannot create the folder ({err.strerror or err})") from None
    runs.append({"command": shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "sizes": args.sizes,
                 "stages": stages, "threads": args.threads, "train_steps": args.train_steps,
                 "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")})
    pool = None
    for n in args.sizes:
        work = out / f"n{n}"
        work.mkdir(exist_ok=True)
        results.setdefault(n, {})
        if not (work / "embeddings.npy").is_file() or "shards" in stages:
            if pool is None:
                t = time.perf_counter()
                pool = make_pool(args.pool, args.dim, SEED)
                print(f"pool of {args.pool} scenes in {time.perf_counter() - t:.1f} s", flush=True)
            prepare_embeddings(work, n, pool, SEED)
            (work / DATA_RECORD).write_text(json_text(settings, indent=2))
        for name in stages:
            extra = {"shards": (pool,), "tokenizer": (args.dim,), "batches": (args.dim,),
                     "train": (args.dim, args.threads, args.train_steps),
                     "validation": (args.dim, args.threads)}.get(name, ())
            r = run_stage(name, work, n, *extra)
            results[n][name] = r
            save(out, results, settings, runs)  # after each stage: an interrupted run keeps what it measured
            figures = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                                if k not in ("seconds", "rss_mb", "rss_total_mb"))
            print(f"{n:>9} {name:<11} {r['seconds']:>8.1f} s  peak RSS {r['rss_mb']:>6.0f} MiB "
                  f"({r['rss_total_mb']:>6.0f} with mapped files)  {figures}", flush=True)
        if made(work, "tokenizer"):  # the model needs the tokenizer's size
            base = run_stage("baseline", work, n, args.dim)["rss_mb"]
            results[n]["model_process_rss_mb"] = base
            save(out, results, settings, runs)
            print(f"{n:>9} the model's own process (torch, the model, no data): peak RSS {base:.0f} MiB", flush=True)
        else:
            print(f"{n:>9} the model's own process: not measured (no tokenizer yet: the tokenizer stage makes it)")
    sizes = sorted(results)
    measured = {s: [n for n in sizes if s in results[n]] for s in STAGES}  # this run's sizes and earlier ones'
    shown = {s: ns for s, ns in measured.items() if len(ns) > 1}
    if shown:
        print("\nlog-log slope of each stage's seconds (train: of 1 / samples per second)")
        for name, ns in shown.items():
            cells = []
            for a, b in zip(ns, ns[1:]):
                ra, rb = results[a][name], results[b][name]
                ta, tb = ((1 / ra["samples_per_s"], 1 / rb["samples_per_s"]) if name == "train"
                          else (ra["seconds"], rb["seconds"]))
                cells.append(f"{a}->{b}: {slope(ta, tb, a, b):.2f}")
            print(f"  {name:<11} " + "  ".join(cells))
        plot(results, shown, out / "scale.png")
    else:
        print(f"no stage measured at two sizes in {out / 'scale.json'}: no slopes and no scale.png (they need two "
              "sizes or more)")
    return 0


def plot(results: dict, stages: dict[str, list[int]], path: Path) -> None:
    """``scale.png``: each stage's seconds and peak RSS at the sizes it was measured at (``stages``: name -> sizes)."""
    from globetrotter.evaluation.plots import save_figure  # sets the Agg backend, before pyplot

    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, sizes in stages.items():
        ax.loglog(sizes, [results[n][name]["seconds"] for n in sizes], marker="o", label=name)
        ax2.semilogx(sizes, [results[n][name]["rss_mb"] / 1024 for n in sizes], marker="o", label=name)
    if "shards" in stages:  # a line of slope 1 through the first shard-writing time
        ref = np.array(stages["shards"], dtype=float)
        ax.loglog(ref, results[stages["shards"][0]]["shards"]["seconds"] * ref / ref[0], "k:", label="linear")
    ax.set(xlabel="captions (= images)", ylabel="seconds", title="time per stage")
    ax2.set(xlabel="captions (= images)", ylabel="GiB", title="peak RSS per stage (own process)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(run_cli(lambda _argv: main()))
