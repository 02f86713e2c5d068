"""What the ``eval.py`` sub-commands share: common options, model loading, writing records."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from backretrieval.cli.common import inputs
from globetrotter.argtypes import language_codes, non_negative_int, output_folder, positive_int, torch_device

from .. import models
from ..records import DEFAULT_OUT, Result, record_path

if TYPE_CHECKING:
    from globetrotter.embeddings import Encoder

    from ..pivot_ridge import PivotRidgeEncoder
    from ..tfidf import TfidfEncoder


DEVICE_HELP = "torch device of the model: cpu, cuda, cuda:1, ... (default cpu)"


def common_options(seed: int | None = 0, seed_help: str = "seed of every sample (default 0)", *,
                   device_help: str = DEVICE_HELP, with_seed: bool = True, name: bool = True,
                   batch_size: bool = True) -> argparse.ArgumentParser:
    """The options evaluation sub-commands share, as a parent parser of one sub-command (``seed_help`` and
    ``device_help`` say what ``--seed`` and ``--device`` do in it): ``--out`` and ``--device`` always; ``--seed``,
    ``--name`` (a record's model name) and ``--batch-size`` unless a command has no use for them (it is then refused
    rather than ignored)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=output_folder, default=DEFAULT_OUT, help="folder for JSON records, plots and indexes (default %(default)s)")
    if batch_size:
        common.add_argument("--batch-size", type=positive_int, default=256, help="encoding batch size (default %(default)s)")
    if with_seed:
        common.add_argument("--seed", type=non_negative_int, default=seed, help=seed_help)
    if name:
        common.add_argument("--name", help="model name in records and file names (default: from the model path)")
    common.add_argument("--device", type=torch_device, default="cpu", help=device_help)
    return common


def add_model(p: argparse.ArgumentParser, required: bool = True, baselines: bool = False) -> None:
    """``--model``: a run or checkpoint folder (``baselines``: or tfidf, ridge:TRAIN_SPLIT), ``required`` or not."""
    extra = "; or a baseline: tfidf (character n-gram TF-IDF) or ridge:TRAIN_SPLIT (linear image pivot)" if baselines else ""
    p.add_argument("--model", required=required,
                   help=f"trained model: a run folder (its best, else latest checkpoint) or a checkpoint folder{extra}")


def add_split(p: argparse.ArgumentParser, required: bool = True, what: str = "parallel test split folder",
              detail: str = "shards + manifest.json; groups tie translations") -> None:
    """``--split`` (``what`` it is, then ``detail`` in brackets: what the folder holds) and ``--languages``."""
    p.add_argument("--split", required=required, help=f"{what} ({detail})")
    p.add_argument("--languages", type=language_codes, metavar="CODES",
                   help="comma-separated language codes to use (default: all of the split)")


def load(args: argparse.Namespace) -> Encoder | TfidfEncoder | PivotRidgeEncoder:
    """The encoder ``--model`` names, on ``--device``."""
    return models.load_model(args.model, device=args.device)


def model_entry(args: argparse.Namespace, encoder: Any = None) -> dict:
    """The record's model entry of ``--model`` (with the checkpoint ``encoder``, its loaded form, holds)."""
    return models.model_info(args.model, args.name, encoder) if getattr(args, "model", None) else {}


def plot_prefix(args: argparse.Namespace, task: str) -> Path:
    """``--out/<task>-<model name>``: the stem of a command's plots."""
    return Path(args.out) / f"{task}-{models.model_name(args.model, args.name)}"


def write(result: Result, args: argparse.Namespace, plots: Sequence[Path] = ()) -> Path:
    """Write ``result`` (with ``plots``) into ``--out`` and say where; its ``inputs`` list every option of the command
    line (as BackRetrieval's records list them), beside the settings its ``config`` resolved."""
    result.plots = [str(p) for p in plots]
    result.inputs = inputs(args)
    earlier = _earlier_model(record_path(args.out, result.task, result.model.get("name")))
    path = result.write(args.out)
    note = ""
    if earlier is not None:
        whose = ("this model" if earlier == result.model.get("path") else
                 f"another model, {earlier}, with this name" if earlier else
                 "an unknown model (the file does not read as a record)")
        note = (f" (it replaces an earlier record of {whose}; every record's summary is also in "
                f"{Path(args.out) / 'results.jsonl'}: --name keeps records apart)")
    print(f"wrote {path}{note}")
    return path


def _earlier_model(path: Path) -> str | None:
    """The model path of the record already at ``path`` ("" when it cannot be read), None when there is none."""
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("model", {}).get("path", ""))
    except (OSError, ValueError, AttributeError):
        return ""
