"""How sentence translation grows with the training images per language: the full model against the supervised one.

    cd /path/to/repo && OMP_NUM_THREADS=1 .venv/bin/python experiments/study_images_per_language.py \\
        --out runs/images-curve                           # 12 Flickr8k trainings, then their evals

For every model (``--model LABEL=CONFIG``: by default the full model, ``configs/flickr8k.yaml``, and its supervised
twin, ``configs/flickr8k-supervised.yaml``), every share of the train split's images (``--shares``: the config key
``data.train_image_share``, fixed nested subsets picked by a hash of the image id, so that share 0.25 holds half the
images of share 0.5 in every language and every seed) and every seed, it trains

    train.py --config CONFIG seed=SEED data.train_image_share=SHARE run_name=PREFIX-LABEL-shSHARE-sSEED

unless that run already has a ``result.json`` (its ``config.yaml`` must be that one: a run of another config is
refused; ``--run LABEL:SHARE:SEED=DIR`` names an existing finished run
instead, e.g. share-1 runs trained before), then chooses the run's ranking on val with ``eval.py select`` (no
parallel text, statistics from the train captions) and scores the checkpoint BackRetrieval chose once with
``eval.py sentence --ranking`` on the test split (``--split``, ``--languages``, ``--n-groups``). A relative CONFIG or
``--split`` is the working folder's when it is there, else the repo's (the defaults work from any folder); the
folders written (``--runs-dir``, ``--out``) and ``--run`` folders are the working folder's; a relative
``data.root`` in a run's ``config.yaml`` is the repo's, where train.py and eval.py run. Writes ``curve.json`` (every
run), ``table.md`` (per model and share: images per language, translation per seed and mean, and the full / supervised
ratio of the means) and ``curve.png`` (translation against images per language, log-log, one line per model; and
the ratio). "Images per language" counts the distinct images of the run's train split whose captions in a language
training reads, averaged over those languages, as the run folder's own ``config.yaml`` sets them (for a ``--run``
too): the full model's split gives each image one language, the supervised twin's parallel split every language.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axis import Axis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo's packages, however installed

from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import (comma_separated, language_codes, non_negative_int, output_folder,  # noqa: E402
                                   positive_int)
from globetrotter.evaluation.records import versions  # noqa: E402

DEFAULT_MODELS = ("full=configs/flickr8k.yaml", "supervised=configs/flickr8k-supervised.yaml")


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict; a one-line error (exit 2) for an item without ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            sys.exit(f"error: {what}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def images_per_language(config: str | Path, share: float | None = None) -> float:
    """Mean over the trained languages of the distinct train images holding a caption in that language, for the
    train config ``config`` (a run folder's ``config.yaml``: the split and share that run trained on), its
    ``data.train_image_share`` set to ``share`` unless None. A relative ``data.root`` is read in the repo, as
    train.py and eval.py read it (they run there), whatever the working folder."""
    from data_prep.split_rule import images_by_language
    from globetrotter.config import load_train_config
    from globetrotter.training.train_set import train_captions

    overrides = [] if share is None else [f"data.train_image_share={share}"]
    cfg = load_train_config(config, overrides)
    # a relative data.root is the repo's: train.py trained the run there, and eval.py scores it there (:func:`run`)
    cfg = replace(cfg, data=replace(cfg.data, root=str(ROOT / cfg.data.root)))
    by_lang = images_by_language(train_captions(cfg))
    return float(np.mean([len(v) for v in by_lang.values()]))


def run_images_per_language(run_dir: Path, cache: dict[str, float]) -> float:
    """:func:`images_per_language` of the run folder's own ``config.yaml`` (what it trained on, not the ``--model``
    config: a ``--run`` may come from another config or split), memoised by the config's text in ``cache``."""
    from globetrotter.errors import UserError

    config = Path(run_dir) / "config.yaml"
    if not config.is_file():
        raise UserError(f"{run_dir}: no config.yaml (expected a run folder trained by train.py)")
    text = config.read_text(encoding="utf-8")
    if text not in cache:
        cache[text] = images_per_language(config)
    return cache[text]


def refuse_other_run(run_dir: Path, config: str, share: float, seed: int) -> None:
    """One-line error when the finished run the study would reuse at ``run_dir`` was trained with another config than
    the one it trains there (``config`` at ``seed`` and ``data.train_image_share=share``; the keys of a run's own
    settings, such as steps, aside): its figure would stand in the table for a run it is not."""
    from globetrotter.config import load_train_config
    from globetrotter.errors import UserError
    from globetrotter.training.prepare import COMPLETED_KEYS
    from globetrotter.training.resume import config_changes

    cfg = load_train_config(config, [f"seed={seed}", f"data.train_image_share={share:g}"])
    skip = tuple(k for k in COMPLETED_KEYS if k != "data.train_image_share" or cfg.data.match_images_of)
    changed = config_changes(run_dir / "config.yaml", cfg, skip)
    if changed:
        raise UserError(f"{run_dir}: a finished run of another config than {config} seed={seed} "
                        f"data.train_image_share={share:g} ({changed}); delete it to train it again, or pass another "
                        f"--prefix or --runs-dir")


def input_path(value: str, here: Path) -> Path:
    """An input the user names (a ``--model`` config, the ``--split`` folder) as an absolute path, the same for the
    study and for train.py / eval.py (which run in the repo): the working folder's when it is there, else the repo's
    (so the documented repo-relative defaults work from any folder); an absolute path as it is."""
    path = here / Path(value).expanduser()  # an absolute value stays itself
    return path if path.exists() else ROOT / Path(value).expanduser()


def run(cmd: list[str], log: Path) -> None:
    """Run ``cmd`` in the repo, its output into ``log``; stop with the log's last line on failure."""
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode:
        last = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: {' '.join(cmd[:4])} ... failed (exit {proc.returncode}; {log}): {last[0]}")


def translation(run_dir: Path, args: argparse.Namespace, name: str, logs: Path) -> float:
    """The share of translations found on test by the run's chosen checkpoint, with the ranking ``eval.py select``
    chose on val (as every sentence figure of the project)."""
    out = Path(args.out_dir) / "eval"
    languages = ",".join(args.languages)
    run([sys.executable, "eval.py", "select", "--model", str(run_dir), "--languages", languages,
         "--out", str(out), "--name", name], logs / f"select-{name}.log")
    run([sys.executable, "eval.py", "sentence", "--model", str(run_dir), "--split", args.split, "--languages",
         languages, "--n-groups", str(args.n_groups), "--ranking", str(out / f"select-{name}.json"),
         "--out", str(out), "--name", name], logs / f"eval-{name}.log")
    record = json.loads((out / f"sentence-{name}.json").read_text(encoding="utf-8"))
    return float(record["metrics"]["sentence_translation"])


def table(rows: list[dict], labels: list[str], shares: list[float]) -> str:
    """Markdown: per model and share, images per language, translation by seed and mean; the full/supervised ratio."""
    lines = ["| model | share | images per language | translation by seed | mean |", "|---|---|---|---|---|"]
    means: dict[tuple[str, float], float] = {}
    for label in labels:
        for share in shares:
            got = [r for r in rows if r["model"] == label and r["share"] == share]
            if not got:
                continue
            means[label, share] = float(np.mean([r["translation"] for r in got]))
            seeds = " / ".join(f"{100 * r['translation']:.2f}%" for r in sorted(got, key=lambda r: r["seed"]))
            lines.append(f"| {label} | {share:g} | {got[0]['images_per_language']:.0f} | {seeds} | "
                         f"{100 * means[label, share]:.2f}% |")
    if len(labels) >= 2:
        a, b = labels[0], labels[1]
        lines += ["", f"| share | {a} / {b} (means) |", "|---|---|"]
        lines += [f"| {s:g} | {means[a, s] / means[b, s]:.3f} |" for s in shares if (a, s) in means and (b, s) in means]
    return "\n".join(lines) + "\n"


def log2_ticks(axis: Axis, values: Iterable[float]) -> None:
    """Label a base-2 log ``axis``: at powers of 2 when ``values`` span an octave or more, else (no power of 2 may
    fall among them) at up to 4 values spread evenly in log between the smallest and largest, 3 significant
    digits (whole numbers from 100 up)."""
    from matplotlib import ticker

    values = [v for v in values if v > 0 and np.isfinite(v)]
    if values and max(values) < 2 * min(values):
        lo, hi = min(values), max(values)
        spread = np.geomspace(lo, hi, 1 if hi == lo else min(4, len(set(values))))
        ticks = sorted({float(round(v)) if v >= 100 else float(f"{v:.3g}") for v in spread})
        axis.set_major_locator(ticker.FixedLocator(ticks))
        axis.set_minor_locator(ticker.NullLocator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 100 else f"{v:.3g}"))


def plot(rows: list[dict], labels: list[str], path: Path) -> None:
    """Translation against images per language (log-log, seed means and their range), and the first/second ratio
    with half (0.5) marked."""
    from globetrotter.evaluation.plots import save_figure  # sets the Agg backend, before pyplot

    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    means, xs, ys_all = {}, [], []
    for label in labels:
        shares = sorted({r["share"] for r in rows if r["model"] == label})
        x = [next(r["images_per_language"] for r in rows if r["model"] == label and r["share"] == s) for s in shares]
        ys = [[100 * r["translation"] for r in rows if r["model"] == label and r["share"] == s] for s in shares]
        mean = np.array([np.mean(y) for y in ys])
        err = np.array([[m - min(y), max(y) - m] for m, y in zip(mean, ys)]).T
        ax.errorbar(x, mean, yerr=err, marker="o", capsize=3, label=label)
        means[label] = dict(zip(shares, mean))
        xs += x
        ys_all += [v for y in ys for v in y]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    log2_ticks(ax.xaxis, xs)
    log2_ticks(ax.yaxis, ys_all)
    ax.set_xlabel("training images per language")
    ax.set_ylabel("sentence translation (%)")
    ax.set_title("Translation against images per language")
    ax.legend()
    if len(labels) >= 2:
        a, b = labels[0], labels[1]
        common = sorted(set(means[a]) & set(means[b]))
        bx.plot(common, [means[a][s] / means[b][s] for s in common], marker="o")
        bx.set_xscale("log", base=2)
        log2_ticks(bx.xaxis, common)
        bx.axhline(0.5, color="grey", linestyle="--", linewidth=1)
        lo, hi = bx.get_ylim()
        above = 0.5 < lo + 0.85 * (hi - lo)  # else the label would leave the axes: under the line
        bx.annotate(f"0.5: half of {b}", (1.0, 0.5), xycoords=("axes fraction", "data"),
                    xytext=(-4, 3 if above else -3), textcoords="offset points", ha="right",
                    va="bottom" if above else "top", fontsize=8, color="0.35")
        bx.set_xlabel("data.train_image_share")
        bx.set_ylabel(f"{a} / {b}")
        bx.set_title("Ratio of the seed means")
    save_figure(fig, path)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``experiments/study_images_per_language.py``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", nargs="+", default=list(DEFAULT_MODELS), metavar="LABEL=CONFIG",
                        help="models to compare, the first against the second in the ratio (default: full, supervised)")
    parser.add_argument("--shares", type=comma_separated(float), default=[0.25, 0.5, 1.0], metavar="SHARE,SHARE",
                        help="data.train_image_share values, comma-separated (default: 0.25,0.5,1)")
    parser.add_argument("--seeds", type=comma_separated(non_negative_int), default=[0, 1], metavar="SEED,SEED",
                        help="training seeds of each model and share, comma-separated (default: 0,1)")
    parser.add_argument("--run", nargs="*", default=[], metavar="LABEL:SHARE:SEED=DIR",
                        help="existing run folders to use instead of training (e.g. full:1:0=runs/flickr8k)")
    parser.add_argument("--runs-dir", default="runs", help="output_dir of the runs this trains (default: runs)")
    parser.add_argument("--prefix", default="curve", help="run_name prefix of the runs this trains (default: curve)")
    parser.add_argument("--split", default="outputs/flickr8k/test",
                        help="the parallel split each run's translation is scored on (default: %(default)s)")
    parser.add_argument("--languages", type=language_codes, default="en,de,fr,cs", metavar="CODES",
                        help="comma-separated languages of the selection and the score (default: %(default)s)")
    parser.add_argument("--n-groups", type=positive_int, default=600,
                        help="groups of --split scored (eval.py sentence --n-groups; default: %(default)s)")
    parser.add_argument("--out", dest="out_dir", required=True, type=output_folder, metavar="DIR",
                        help="curve.json, table.md, curve.png and the logs go here")
    return parser


def main(argv: list[str] | None = None) -> None:
    from globetrotter.errors import UserError

    try:
        study(build_parser().parse_args(argv))
    except UserError as err:  # a missing config, a bad share: one line, exit 2
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def study(args: argparse.Namespace) -> None:
    """Train (or reuse) every run, score it and write the table and the plot."""
    from globetrotter.errors import UserError

    models = parse_pairs(args.model, "--model")
    # the folders given are the user's, relative to the working folder; train.py and eval.py run in the repo, so they
    # get them absolute (a relative --runs-dir was trained into the repo's and looked for in the working folder's)
    here = Path.cwd()
    args.runs_dir, args.out_dir = str(here / args.runs_dir), str(here / args.out_dir)
    # the inputs: the working folder's, else the repo's (both the study and train.py / eval.py read the same file)
    for label, config in models.items():
        models[label] = str(input_path(config, here))
        if not Path(models[label]).is_file():  # before any training, not after the first model's
            where = "" if Path(config).expanduser().is_absolute() else f" (in the working folder {here} or the repo)"
            raise UserError(f"--model {label}={config}: config file not found{where}")
    args.split = str(input_path(args.split, here))
    given = {}
    for key, folder in parse_pairs(args.run, "--run").items():
        label, share, seed = (key.split(":") + ["", ""])[:3]
        try:
            given[label, float(share), int(seed)] = here / folder
        except ValueError:
            sys.exit(f"error: --run: expected LABEL:SHARE:SEED=DIR, got {key!r}")
    out = Path(args.out_dir)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    counted: dict[str, float] = {}
    for label, config in models.items():
        for share in args.shares:
            for seed in args.seeds:
                name = f"{args.prefix}-{label}-sh{share:g}-s{seed}"
                run_dir = given.get((label, share, seed), Path(args.runs_dir) / name)
                if (label, share, seed) in given and not (run_dir / "result.json").is_file():
                    sys.exit(f"error: --run {label}:{share:g}:{seed}={run_dir}: no result.json (not a finished run)")
                if (label, share, seed) not in given and (run_dir / "result.json").is_file():
                    refuse_other_run(run_dir, config, share, seed)  # a finished run of another config: not reused
                if not (run_dir / "result.json").is_file():
                    print(f"training {name} ...", flush=True)
                    run([sys.executable, "train.py", "--config", config, f"seed={seed}",
                         f"data.train_image_share={share:g}", f"run_name={name}", f"output_dir={args.runs_dir}"],
                        logs / f"train-{name}.log")
                images = run_images_per_language(run_dir, counted)  # the run used, trained or given
                value = translation(run_dir, args, name, logs)
                rows.append({"model": label, "share": share, "seed": seed, "run": str(run_dir),
                             "images_per_language": images, "translation": value})
                print(f"{name}: {images:.0f} images per language, {100 * value:.2f}%", flush=True)
    (out / "curve.json").write_text(json_text({"inputs": vars(args), "rows": rows, "versions": versions()}, indent=2),
                                    encoding="utf-8")
    text = table(rows, list(models), args.shares)
    (out / "table.md").write_text(text, encoding="utf-8")
    plot(rows, list(models), out / "curve.png")
    print(text + f"wrote {out / 'curve.json'}, {out / 'table.md'}, {out / 'curve.png'}")


if __name__ == "__main__":
    main()
