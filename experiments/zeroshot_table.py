"""The zero-shot retrieval table: rows of adapter configs x seeds, each chosen by val, test scored once per row.

    .venv/bin/python experiments/zeroshot_table.py --train outputs/flickr8k-en/train --val outputs/flickr8k-en/val \\
        --test outputs/flickr8k/test --languages en,de,fr,zh,cs --seeds 0,1 --out eval_out/zeroshot

Every row is a config (the defaults or a ``configs/zeroshot/*.yaml`` file, plus ``KEY=VALUE`` overrides; the rows
are listed at the end of ``--help``, numbered as ``--rows`` takes them). Each row is trained
once per seed on the train split's English captions, keeping the epoch with the best English text->image Recall@10
on val; the row's val figure is that best score, its test figures (Recall@1/5/10 with 95% bootstrap intervals and
the median rank, per language) are measured once. The default config is the row with the best mean val figure
(``docs/zeroshot.md`` keeps the table). Frozen features come from the splits' caches; ``--save-bundle FILE``
writes them to one ``.npz`` and ``--bundle FILE`` reads them back instead of the splits (to move the work to a GPU
machine that has no copy of the data). Records already in ``--out`` are reused, so an interrupted table resumes;
a record measured on other split contents (manifest checksums), bundle, languages or row config is refused.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from globetrotter.argtypes import (comma_separated, language_codes, non_negative_int, output_file,  # noqa: E402
                                   output_folder, torch_device)
from globetrotter.config_io import load_config  # noqa: E402
from backretrieval.errors import BackRetrievalError  # noqa: E402
from backretrieval.records import json_text  # noqa: E402
from globetrotter.errors import UserError  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402
from globetrotter.zeroshot.cli.common import check_no_shared_images  # noqa: E402
from globetrotter.zeroshot.config import ZeroShotConfig  # noqa: E402
from globetrotter.zeroshot.data import (DEFAULT_CACHE, SplitFeatures, first_captions, image_extractor,  # noqa: E402
                                        load_split_features)
from globetrotter.zeroshot.retrieval import DEFAULT_KS, split_recall  # noqa: E402
from globetrotter.zeroshot.train import train_on_split, train_rows, validation_recall  # noqa: E402

XTD10 = str(ROOT / "configs" / "zeroshot" / "xtd10.yaml")
RECIPE = str(ROOT / "configs" / "zeroshot" / "recipe.yaml")
M3L = str(ROOT / "configs" / "zeroshot" / "m3l.yaml")
# label -> (config file or None for the defaults, overrides)
ROWS: dict[str, tuple[str | None, list[str]]] = {
    "xtd10 adapter, PATR (paper)": (XTD10, []),
    "reference recipe": (RECIPE, []),
    "system (defaults)": (None, []),
    "system, margin 1x": (None, ["loss.margin_scale=1"]),
    "system, margin 4x": (None, ["loss.margin_scale=4"]),
    "system, margin 16x": (None, ["loss.margin_scale=16"]),
    "system, L2 ranking": (None, ["metric=l2"]),
    "system, xtd10 adapter": (None, ["adapter.form=xtd10", "adapter.hidden_dims=[1024,2048]",
                                     "adapter.dropout=[0.2,0.1,0.0]"]),
    "system, width 2048": (None, ["adapter.hidden_dims=[2048]"]),
    "system, no dropout": (None, ["adapter.dropout=[0,0,0]"]),
    "system, batch 512": (None, ["optim.batch_size=512"]),
    "system, beta1 0.99": (None, ["optim.beta1=0.99"]),
    "system, 1 caption per image": (None, ["max_captions_per_image=1"]),
    "M3L as written (anchor text term, rho 4)": (None, ["loss.name=m3l", "loss.text_term=anchor"]),
    "M3L, image text term, rho 4": (None, ["loss.name=m3l"]),
    "M3L, image text term, rho 1": (None, ["loss.name=m3l", "loss.rho=1"]),
    "M3L (configs/zeroshot/m3l.yaml)": (M3L, []),
    "M3L, hardest negatives": (M3L, ["loss.negatives=hardest"]),
    "M3L, anchor text term": (M3L, ["loss.text_term=anchor"]),
    "M3L, outputs not normalised": (M3L, ["adapter.normalize_output=false"]),
}


def rows_help() -> str:
    """The ``--help`` epilog: every row of :data:`ROWS` with its number (what ``--rows`` takes), config and overrides."""
    lines = ["rows (--rows takes their numbers):"]
    for i, (label, (path, overrides)) in enumerate(ROWS.items()):
        config = "defaults" if path is None else Path(path)
        if isinstance(config, Path) and config.is_relative_to(ROOT):
            config = config.relative_to(ROOT)
        lines.append(f"  {i:2d}  {label}: {config}" + (f" + {' '.join(overrides)}" if overrides else ""))
    return "\n".join(lines)


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label.lower()).strip("-")


def save_bundle(path: Path, splits: dict[str, SplitFeatures]) -> None:
    """The frozen features of ``splits`` in one ``.npz`` (float16 features; texts kept)."""
    arrays = {}
    for name, s in splits.items():
        arrays.update({f"{name}/text_features": s.text_features.astype(np.float16),
                       f"{name}/image_features": s.image_features.astype(np.float16),
                       f"{name}/caption_image": s.caption_image, f"{name}/langs": np.asarray(s.langs, dtype=str),
                       f"{name}/groups": np.asarray(s.groups, dtype=str), f"{name}/texts": np.asarray(s.texts, dtype=str),
                       f"{name}/image_keys": np.asarray(s.image_keys, dtype=str)})
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]  # numpy>=2.1's stub: a **dict may name allow_pickle


def load_bundle(path: Path) -> dict[str, SplitFeatures]:
    data = np.load(path)
    names = sorted({key.split("/")[0] for key in data.files})
    return {name: SplitFeatures(
        texts=data[f"{name}/texts"].tolist(), langs=data[f"{name}/langs"].astype(object),
        groups=data[f"{name}/groups"].astype(object), caption_image=data[f"{name}/caption_image"],
        image_keys=data[f"{name}/image_keys"].tolist(),
        text_features=data[f"{name}/text_features"].astype(np.float32),
        image_features=data[f"{name}/image_features"].astype(np.float32)) for name in names}


def load_splits(args: argparse.Namespace, config: ZeroShotConfig) -> dict[str, SplitFeatures]:
    """The frozen features of train, val and test (or of ``--bundle``); a language a split lacks (of ``--languages`` for
    test) is refused first, from the manifests, before any feature is extracted."""
    if args.bundle:
        splits = load_bundle(Path(args.bundle))
        missing = [lang for lang in args.languages if lang not in set(splits["test"].langs)]
        if missing:
            raise UserError(f"--languages: {args.bundle}'s test split has no captions in {', '.join(missing)}")
        return splits
    from data_prep.shards import read_manifest

    if Path(args.val).resolve() == Path(args.train).resolve():  # each row's epoch would be chosen on training data
        raise UserError(f"--val {args.val}: is the --train split; give a split of other images")
    for flag, split_langs in (("--test", args.languages), ("--val", config.train_langs),
                              ("--train", config.train_langs)):
        split = getattr(args, flag[2:])  # its manifest only, before any feature is extracted
        missing = [lang for lang in split_langs if lang not in read_manifest(split)["languages"]]
        if missing:
            raise UserError(f"{flag} {split}: no captions in {', '.join(missing)}"
                            + (" (--languages)" if flag == "--test" else " (the config's train_langs)"))
    extractor = image_extractor(config.image_encoder, config.image_weights, args.cache_dir, "cpu")
    loaded: dict = {}  # the text encoder, loaded once for the three splits
    splits = {"train": load_split_features(args.train, config.text_encoder, extractor, config.train_langs,
                                           args.cache_dir, loaded=loaded),
              "val": load_split_features(args.val, config.text_encoder, extractor, config.train_langs, args.cache_dir,
                                         every_image=True, loaded=loaded),
              "test": load_split_features(args.test, config.text_encoder, extractor, args.languages, args.cache_dir,
                                          every_image=True, loaded=loaded)}
    check_no_shared_images(f"--val {args.val}", splits["val"].image_keys, splits["train"].image_keys,
                           f"--train {args.train} images the adapters train on", "give a split of other images")
    return splits


def measure(label: str, seed: int, splits: dict[str, SplitFeatures], args: argparse.Namespace) -> dict:
    path, overrides = ROWS[label]
    config = load_config(ZeroShotConfig, path, [*overrides, f"optim.seed={seed}"])
    train = splits["train"]
    rows = train_rows(train, config.train_langs)
    if config.max_captions_per_image is not None:  # as load_split_features keeps them
        rows = rows[first_captions(train.caption_image[rows], train.langs[rows], config.max_captions_per_image)]
    validate = validation_recall(splits["val"], config.train_langs, 10, config.metric)
    adapter, trained = train_on_split(train, rows, config, validate, device=args.device, progress=False)
    adapter.cpu()
    test = split_recall(adapter, splits["test"], args.languages, metric=config.metric, where="test")
    return {"row": label, "config": path, "overrides": overrides, "seed": seed, "metric": config.metric,
            "val_recall@10": max(trained["history"]["val"]), **{k: v for k, v in trained.items() if k != "history"},
            "best_epoch": trained["history"]["best_epoch"], "train_s": trained["history"]["train_s"], "test": test}


def measured_on(args: argparse.Namespace) -> dict:
    """What a row's figures depend on besides its config and seed: the splits (each with its manifest's content
    checksum, so a split rewritten in place is told apart) or the bundle (with its file's sha256), and the languages."""
    from data_prep.shards import read_manifest

    if args.bundle:
        digest = hashlib.sha256(Path(args.bundle).read_bytes()).hexdigest()
        return {"bundle": {"path": str(Path(args.bundle).resolve()), "sha256": digest}, "langs": list(args.languages)}
    return {**{name: {"path": str(Path(getattr(args, name)).resolve()),
                      "checksum": read_manifest(getattr(args, name)).get("checksum")}
               for name in ("train", "val", "test")},
            "langs": list(args.languages)}


def row_config_sha256(label: str, seed: int) -> str:
    """The sha256 of the row's resolved config (its file and overrides as loaded now, with the seed): a record
    written under other values is not this row's."""
    path, overrides = ROWS[label]
    config = load_config(ZeroShotConfig, path, [*overrides, f"optim.seed={seed}"])
    return hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode("utf-8")).hexdigest()


def stale_inputs(recorded: dict | None, current: dict) -> str | None:
    """None when a record's ``measured_on`` (:func:`measured_on`) is ``current``; else which differ, e.g. ``train (recorded {...}, now {...})``."""
    recorded = recorded if isinstance(recorded, dict) else {}
    keys = [k for k in dict.fromkeys([*current, *recorded]) if recorded.get(k) != current.get(k)]
    if not keys:
        return None
    return "; ".join(f"{k} (recorded {recorded.get(k)}, now {current.get(k)})" for k in keys)


def _figure(value: float | None, spec: str) -> str:
    """A table cell: ``value`` formatted, or ``–`` for a figure a record holds as null (a NaN when it was written)."""
    return "–" if value is None else format(value, spec)


def table(records: list[dict], langs: list[str]) -> str:
    key = "image_retrieval_recall@10"
    lines = ["| row | val en R@10 | " + " | ".join(f"{lang} R@10" for lang in langs) + f" | median rank ({langs[0]}) |",
             "|---|---|" + "---|" * len(langs) + "---|"]
    for label in dict.fromkeys(r["row"] for r in records):
        rs = [r for r in records if r["row"] == label]
        val = " / ".join(_figure(r["val_recall@10"], ".3f") for r in rs)
        cells = [" / ".join(_figure(r["test"]["metrics"][lang][key], ".3f") for r in rs) for lang in langs]
        med = " / ".join(_figure(r["test"]["metrics"][langs[0]]["median_rank"], ".0f") for r in rs)
        lines.append(f"| {label} | {val} | " + " | ".join(cells) + f" | {med} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=rows_help())
    p.add_argument("--train", default="outputs/flickr8k-en/train",
                   help="the split the adapters train on, its train_langs captions (default: %(default)s)")
    p.add_argument("--val", default="outputs/flickr8k-en/val",
                   help="the split each row's epoch is chosen on (default: %(default)s)")
    p.add_argument("--test", default="outputs/flickr8k/test",
                   help="the split each row is scored on once, in --languages (default: %(default)s)")
    p.add_argument("--languages", default="en,de,fr,zh,cs", type=language_codes,
                   help="comma-separated test languages, the first the table's median rank (default: %(default)s)")
    p.add_argument("--seeds", default="0,1", type=comma_separated(int),
                   help="comma-separated seeds of every row (default: %(default)s)")
    p.add_argument("--rows", type=comma_separated(non_negative_int), default=None,
                   help="comma-separated row numbers to run, as listed below (default: all)")
    p.add_argument("--out", default="eval_out/zeroshot", type=output_folder,
                   help="folder of the records (one per row and seed, reused when there) and table.md "
                        "(default: %(default)s)")
    p.add_argument("--device", type=torch_device, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device the adapters train on (default: cuda when there is one, else cpu)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE),
                   help="where frozen text and image features are cached, shared with globetrotter-zeroshot "
                        "(default: $GLOBETROTTER_CACHE or outputs/cache, relative to the current folder)")
    p.add_argument("--bundle", help="read the frozen features from this .npz instead of the splits")
    p.add_argument("--save-bundle", type=output_file, help="write the splits' frozen features to this .npz and stop")
    args = p.parse_args(argv)
    labels = list(ROWS)
    if args.rows:  # checked before any feature is loaded
        if max(args.rows) >= len(labels):
            p.error(f"--rows {','.join(map(str, args.rows))}: expected comma-separated row numbers "
                    f"0-{len(labels) - 1}")
        labels = [labels[i] for i in args.rows]
    if args.bundle and not Path(args.bundle).is_file():
        p.error(f"--bundle {args.bundle}: no such file (write one with --save-bundle)")
    try:
        splits = load_splits(args, load_config(ZeroShotConfig, None, []))
    except (UserError, BackRetrievalError) as err:  # a missing split, a text encoder not installed: one line
        print(f"error: {err}", file=sys.stderr)
        return 2
    n_test, k = len(splits["test"].image_keys), max(DEFAULT_KS)
    if n_test <= k and not args.save_bundle:  # refused before any row trains: every Recall@K would be 1
        print(f"error: --test: {n_test} image(s), not more than the table's largest K ({k}): every Recall@{k} would "
              f"be 1; give a test split with more images", file=sys.stderr)
        return 2
    if args.save_bundle:
        save_bundle(Path(args.save_bundle), splits)
        print(f"wrote {args.save_bundle}", file=sys.stderr)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    inputs = measured_on(args)
    for label in labels:
        for seed in args.seeds:
            path = out / f"{slug(label)}-s{seed}.json"
            row_inputs = {**inputs, "config_sha256": row_config_sha256(label, seed)}
            if path.is_file():  # reused only when measured on the same split contents, languages and row config
                record = json.loads(path.read_text())
                # a record written before every command's record named its options "inputs" held these there
                stale = stale_inputs(record.get("measured_on", record.get("inputs")), row_inputs)
                if stale:
                    print(f"error: {path} was measured on other inputs: {stale}; delete it or use another --out",
                          file=sys.stderr)
                    return 2
                records.append(record)
                continue
            start = time.perf_counter()
            record = {**measure(label, seed, splits, args), "measured_on": row_inputs,
                      "inputs": vars(args), "versions": versions()}  # as every command's record
            path.write_text(json_text(record, indent=1, default=float) + "\n")
            records.append(record)
            print(f"{label} seed {seed}: val {record['val_recall@10']:.3f}, test {args.languages[0]} R@10 "
                  f"{record['test']['metrics'][args.languages[0]]['image_retrieval_recall@10']:.3f} "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    text = table(records, args.languages)
    (out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
