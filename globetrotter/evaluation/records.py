"""The JSON record every evaluation writes: :class:`Result` (task, dataset, model, metrics, languages, config,
details, plots), as MUSE and CLIP_benchmark write one record per run so results collect into a table."""
from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from backretrieval.records import json_ready, json_text
from backretrieval.renamed import RenamedMethod


DEFAULT_OUT = "eval_out"  # where the eval.py sub-commands write their records unless --out says otherwise


def record_path(out: str | Path, task: str, model_name: str | None = None) -> Path:
    """``out/<task>-<model name>.json`` (``out/<task>.json`` without a name): where a record is written."""
    return Path(out) / (f"{task}-{model_name}.json" if model_name else f"{task}.json")


def jsonable(obj: Any) -> Any:
    """numpy → plain Python; NaN/inf → None (strict JSON); paths → strings (BackRetrieval's records do the same)."""
    return json_ready(obj)


def matrix_dict(matrix: np.ndarray, languages: Sequence[str]) -> dict:
    """Row-major ``{row_lang: {col_lang: value}}`` view of a language-pair matrix (diagonal left out)."""
    return {a: {b: matrix[i, j] for j, b in enumerate(languages) if i != j} for i, a in enumerate(languages)}


def dataset_info(split: str | Path) -> dict:
    """What a record says of a shard split: its path, kind, source, checksum and size (from its manifest)."""
    from data_prep.shards import read_manifest

    manifest = read_manifest(split)
    return {"path": str(Path(split).resolve()), "split": manifest.get("split"), "source": manifest.get("source"),
            "checksum": manifest.get("checksum"), "num_samples": manifest.get("num_samples")}


def versions() -> dict:
    """The versions a record was made with: :func:`data_prep.versions.versions`'s (the package, numpy, Python; the
    package's from ``globetrotter.__version__``, so a checkout that was never pip-installed names it too) and
    torch's."""
    import torch

    from data_prep.versions import versions as data_versions
    from globetrotter import __version__

    return {**data_versions(), "globetrotter": __version__, "torch": torch.__version__}


@dataclass
class Result:
    """One evaluation's outcome: ``metrics`` (what a table shows), ``details`` (everything needed to read them) and
    the ``config`` that reproduces it. ``to_record`` is the JSON record (``to_dict``: its old name, deprecated),
    with the keys every command's record shares (docs/evaluation.md, "The JSON records"): ``inputs`` (the command line's options),
    ``seed`` (the config's, lifted out of it), ``versions`` and ``created``."""

    task: str
    metrics: dict
    languages: list[str]
    model: dict = field(default_factory=dict)  # {"path", "name"}
    dataset: dict | None = None
    config: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)  # every option of the command line (eval.py's write sets them)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    arrays: dict = field(default_factory=dict, repr=False)  # numpy results for plots; not part of the record

    def to_record(self) -> dict:
        """The strict-JSON record (numpy values converted, NaN as null)."""
        record = asdict(self)
        del record["arrays"]
        if "seed" in record["config"]:
            record["seed"] = record["config"].pop("seed")
        record["versions"] = versions()
        return jsonable(record)

    to_dict = RenamedMethod("to_record")  # the old name, for one release

    @property
    def name(self) -> str:
        """``<task>-<model name>``: the record's file name without ``.json``."""
        return record_path("", self.task, self.model.get("name")).stem

    def write(self, out: str | Path) -> Path:
        """Write ``out/<task>-<model>.json`` (atomically) and append the summary to ``out/results.jsonl``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        record = self.to_record()
        path = record_path(out, self.task, self.model.get("name"))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json_text(record, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        summary = {k: record[k] for k in ("task", "dataset", "model", "metrics", "languages", "config", "created",
                                       "inputs", "seed") if k in record}
        with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json_text(summary, ensure_ascii=False) + "\n")
        return path
