"""Writing a conversion's shards: the samples each image gives (split, key, group), its images decoded in a pool."""
from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator, Sequence

from tqdm import tqdm

from data_prep.shard_writer import DuplicateKey, ShardWriter

from .common import Caption
from .gather import GatheredImage
from .images import ImageSpec, prepare_image_task
from .options import ConvertOptions
from .report import SUMMARY, ConversionReport, Issue
from .splits import SplitPlan


def _prepared_images(paths: Sequence[Path], spec: ImageSpec, workers: int) -> Iterator[tuple]:
    """Yield ``(index, bytes, size, error)`` per path, in order; decoded in a process pool when ``workers > 1``."""
    tasks = [(i, str(p), spec) for i, p in enumerate(paths)]
    if workers <= 1 or len(tasks) < 2:
        yield from map(prepare_image_task, tasks)
        return
    chunksize = max(1, min(16, len(tasks) // (workers * 8)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(prepare_image_task, tasks, chunksize=chunksize)


def plan_writes(by_id: dict[str, GatheredImage], plan: SplitPlan, parallel: frozenset[str],
                report: ConversionReport) -> dict[str, list[tuple[str, Caption, str, str | None]]]:
    """Per planned image, the samples to write: ``(split, caption, key, group)``; the rest counted as unused.

    Keys are ``<image id>-<lang>-<n>`` (n-th caption of the image in that language, in
    source order), the same in every split the caption goes to.
    """
    writes = {}
    for image_id, split in plan.split_of.items():
        counter: dict[str, int] = defaultdict(int)
        chosen = plan.lang_of.get(image_id)
        captions = by_id[image_id].captions
        with_parallel = bool(parallel) and split == "train" and parallel <= {c.lang for c in captions}
        todo: list[tuple[str, Caption, str, str | None]] = []
        for cap in captions:
            key = f"{image_id}-{cap.lang}-{counter[cap.lang]}"
            counter[cap.lang] += 1
            if split == "test":
                todo.append(("test", cap, key, image_id))
            elif chosen is None or cap.lang == chosen:
                todo.append((split, cap, key, None))
            else:
                report.leave_out("other_language_of_image")
            if with_parallel and cap.lang in parallel:
                todo.append(("train-parallel", cap, key, image_id))
        writes[image_id] = todo
    return writes


def write_shards(order: list[str], by_id: dict[str, GatheredImage], writes: dict[str, list], options: ConvertOptions,
                 report: ConversionReport, one_language: bool, out_dir: Path) -> set[str]:
    """Decode the images of ``order`` in a pool and write their samples, split by split, under ``out_dir``.
    Returns the ids of the images that could not be read (reported as ``unreadable_image``)."""
    unreadable: set[str] = set()
    writers: dict[str, ShardWriter] = {}
    sizes: dict[str, set] = defaultdict(set)
    paths = [by_id[i].path for i in order]
    t0 = time.perf_counter()
    bar = tqdm(total=len(order), desc="images", unit=" img", disable=not options.progress)
    for index, data, size, error in _prepared_images(paths, options.image, options.workers):
        bar.update()
        image_id = order[index]
        todo = writes[image_id]
        main = [t for t in todo if t[0] != "train-parallel"]
        if data is None:
            first = todo[0][1] if todo else None
            report.add(Issue("unreadable_image", str(by_id[image_id].path), None,
                             f"{error} (first caption at {first.where if first else '?'}; "
                             f"{len(main)} caption(s) skipped)", records=len(main)))
            unreadable.add(image_id)
            continue
        written_splits = set()
        for split, cap, key, group in todo:
            writer = writers.get(split)
            if writer is None:
                writer = writers[split] = ShardWriter(
                    out_dir / split, split=split, source=options.source_name, image_format="jpg",
                    maxcount=options.shard_size,
                    extra={"one_language_per_image": split in ("train", "val") and one_language,
                           "resize": options.image.resize, "resize_mode": options.image.mode,
                           "summary": f"../{SUMMARY}"})
            try:
                writer.write(key, data, cap.text, cap.lang, image_id, group)
            except DuplicateKey as err:  # a key clash: never expected, reported rather than fatal
                if split != "train-parallel":
                    report.add(Issue("duplicate_key", cap.file, cap.line, str(err)))
                continue
            if split == "train-parallel":
                report.extra_written[(split, cap.lang)] += 1
            else:
                report.written[(split, cap.lang)] += 1
            sizes[split].add(size)
            written_splits.add(split)
        for split in written_splits - {"train-parallel"}:
            report.images[split] += 1
    bar.close()
    for split, writer in writers.items():
        uniform = sizes[split]
        writer.extra["image_size"] = list(next(iter(uniform))) if len(uniform) == 1 else None
        writer.extra["conversion"] = report.manifest_counts()  # every image decoded: what was lost is known
        writer.close()
    elapsed = time.perf_counter() - t0
    report.timing.update(images=len(order), image_seconds=elapsed, workers=options.workers,
                         images_per_s=len(order) / elapsed if elapsed > 0 else 0.0)
    return unreadable
