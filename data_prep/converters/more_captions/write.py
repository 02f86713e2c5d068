"""The dataset ``more-captions`` writes: each enriched split copied with its added captions (the same image
bytes), the rest of ``--data`` linked or copied, and a summary, staged beside ``--out`` and moved into place."""
from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from data_prep.errors import UserError
from data_prep.shard_writer import ShardWriter, carried_manifest_fields
from data_prep.shards import LINKED_CHECKSUMS, MANIFEST, iter_raw, read_manifest
from data_prep.split_rule import check_split_rule
from data_prep.strict_json import json_text

from ..pipeline import KEY_UNSAFE, safe_id
from ..report import SUMMARY, ConversionReport
from .gather import EnrichedSplit

COMMAND = "more-captions"


def _new_key(state: EnrichedSplit, image_id: str, lang: str) -> str:
    """``<image id>-<lang>-<n>``, the converters' scheme, n continuing after the image's captions in ``lang``."""
    base = f"{safe_id(image_id)}-{KEY_UNSAFE.sub('_', lang)}"
    while True:
        n = state.per_image_lang[(image_id, lang)]
        state.per_image_lang[(image_id, lang)] += 1
        key = f"{base}-{n}"
        if key not in state.keys:
            state.keys.add(key)
            return key


def write_split(src: Path, dst: Path, state: EnrichedSplit, shard_size: int, source_names: list[str],
                report: ConversionReport, progress: bool) -> dict:
    """Copy every sample of ``src`` and, after the last sample of each image, its added captions (same image bytes)."""
    manifest = state.manifest
    fmt = manifest.get("image_format", "jpg")
    added = state.added_per_language()
    extra = {k: v for k, v in carried_manifest_fields(manifest).items() if k != "more_captions"}
    extra["more_captions"] = {
        "from": str(src.resolve()), "original_checksum": manifest.get("checksum"),
        "original_num_samples": manifest["num_samples"], "added": dict(sorted(added.items())),
        "sources": source_names, "same_text": "words compared case-folded, punctuation and spacing ignored",
        "note": "captions added only in languages an image already has in this split (in train and val, its "
                "one language: no parallel text); image bytes copied from the original shards, so image ids and a "
                "feature cache of the original split carry over",
    }
    source = f"{manifest.get('source', 'converted')}+{COMMAND}"
    written_images: set[str] = set()
    remaining = Counter(state.samples)  # image id -> its original samples still to come (added ones follow the last)
    bar = tqdm(total=manifest["num_samples"] + sum(added.values()), desc=f"writing {state.name}", unit=" smp",
               disable=not progress, mininterval=1.0)
    with ShardWriter(dst, split=state.name, source=source, image_format=fmt, maxcount=shard_size,
                     extra=extra) as writer:
        for key, ext, data, meta in iter_raw(src):
            if ext != fmt:
                raise UserError(f"{src}: sample '{key}' has a .{ext} image but the manifest says {fmt}")
            image_id = str(meta["image_id"])
            other = {k: v for k, v in meta.items() if k not in ("caption", "lang", "image_id", "group")}
            writer.write(key, data, meta["caption"], meta["lang"], image_id, meta.get("group"), extra=other or None)
            bar.update()
            written_images.add(image_id)
            remaining[image_id] -= 1
            if remaining[image_id]:
                continue
            for lang, text in state.added.get(image_id, ()):
                writer.write(_new_key(state, image_id, lang), data, text, lang, image_id, state.group_of.get(image_id))
                bar.update()
    bar.close()
    report.images[state.name] = len(written_images)
    return read_manifest(dst)


def check_paths(data: Path, out: Path, overwrite: bool) -> None:
    """``--out`` must be a new folder outside ``--data``, an empty one, or (``overwrite``) an earlier output."""
    data_real, out_real = data.resolve(), out.resolve()
    if out_real == data_real or data_real in out_real.parents or out_real in data_real.parents:
        raise UserError(f"--out {out} must be a new folder outside --data {data} (and not holding it)")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise UserError(f"--out {out}: exists and is not a folder")
        if any(out.iterdir()):
            if not overwrite:
                raise UserError(f"{out}: already exists and is not empty; pass --overwrite to replace it")
            try:
                summary = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                summary = {}
            if summary.get("command") != COMMAND:
                raise UserError(f"{out}: not a dataset written by {COMMAND} (no {SUMMARY} saying so); "
                                "--overwrite only replaces those, remove it yourself or pick another --out")


def _link_or_copy(entry: Path, dst: Path, final: Path, copy: bool) -> str:
    if copy:
        if entry.is_dir():
            shutil.copytree(entry, dst, symlinks=False)
        else:
            shutil.copy2(entry, dst)
        return "copied"
    target = os.path.relpath(entry.resolve(), final.parent.resolve() / final.name)
    os.symlink(target, dst, target_is_directory=entry.is_dir())
    return "linked"


def write_dataset(data: Path, out: Path, states: dict[str, EnrichedSplit], report: ConversionReport,
                  source_names: list[str], shard_size: int, start: float, check: bool = True, copy: bool = False,
                  progress: bool = True) -> dict[str, str]:
    """Write the new dataset: the enriched ``states`` (checked against the split rule unless ``check`` is off),
    every other entry of ``data`` linked (``copy``: copied) and the summary (with ``report``; its times count from
    ``start``), in a staging folder beside ``out`` that replaces ``out`` at the end (removed on any error).
    Returns how each other entry was reused (``linked``/``copied``)."""
    final = out
    stage = out.parent / f".{out.name}.partial-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    splits_info, reused = {}, {}
    try:
        t0 = time.perf_counter()
        for name, state in states.items():
            manifest = write_split(data / name, stage / name, state, shard_size, source_names, report, progress)
            if check:
                check_split_rule(stage / name, name)
            splits_info[name] = {
                "images": len(state.langs_of),
                "images_with_added": sum(1 for caps in state.added.values() if caps),
                "before": dict(sorted(state.before.items())),
                "added": dict(sorted(state.added_per_language().items())),
                "after": manifest["languages"],
                "num_samples": {"before": state.manifest["num_samples"], "after": manifest["num_samples"]},
                "checksum": {"before": state.manifest.get("checksum"), "after": manifest["checksum"]},
            }
        report.timing["write_seconds"] = time.perf_counter() - t0
        for entry in sorted(data.iterdir()):
            if entry.name in states or entry.name == SUMMARY or entry.name.startswith("."):
                continue
            reused[entry.name] = _link_or_copy(entry, stage / entry.name, final, copy)
        report.timing["total_seconds"] = time.perf_counter() - start
        linked = {name: read_manifest(data / name).get("checksum") for name, how in reused.items()
                  if how == "linked" and (data / name / MANIFEST).is_file()}
        summary = {"command": COMMAND, "data": str(data.resolve()), "splits": splits_info, "reused": reused,
                   LINKED_CHECKSUMS: linked,
                   "original_summary": str((data / SUMMARY).resolve()) if (data / SUMMARY).is_file() else None,
                   **report.to_json()}
        (stage / SUMMARY).write_text(json_text(summary, indent=2, ensure_ascii=False, default=str) + "\n",
                                     encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)  # checked above: empty, or an earlier more-captions output under --overwrite
        os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return reused
