"""One conversion, whatever the sources: records -> checked captions -> splits -> shards.

:func:`convert` takes any number of record streams (each from a reader such as
:func:`~data_prep.converters.multi30k.read_multi30k`), so several sources go into one
dataset. For each caption record it checks, in this order: the language code (ISO 639-1),
the text (not empty once runs of whitespace are collapsed to one space, which is how
captions are stored), the key (not seen before), the language (asked for), the image
(found; for the folder layout, by a file name only one file has); bad records are skipped
and reported with file and line. Then it plans the splits
(:mod:`~data_prep.converters.splits`: by fractions, by the sources' own splits, by the
split files a dataset publishes, or all to one split; a split file naming an unknown
image, or an image in two splits, stops the conversion here, before anything is written),
decodes and resizes each image once in a process pool, and writes every (image, caption)
sample of each split with :class:`~data_prep.shard_writer.ShardWriter` (sequentially; the pool
works ahead).

Output: ``out_dir/{train,val,test}/`` (shards + ``manifest.json``), optionally
``out_dir/train-parallel/`` (``--parallel-train``: the train images that have captions in
every language of a parallel set, all those captions, tied by ``group``; for the
supervised baseline; these images are *also* in ``train``, in one language), and
``out_dir/summary.json`` (the :class:`~data_prep.converters.report.ConversionReport`).
"""
from __future__ import annotations

import hashlib
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from data_prep.errors import UserError
from data_prep.out_folder import lock_out_folder, move_splits, remove_empty_folders
from data_prep.shards import MANIFEST
from data_prep.split_rule import check_split_rule

from .common import Record
from .gather import GatheredImage, gather_images
from .images import ImageResolver, flickr_photo_id
from .notes import (counts_by_kind, encoding_note, first_issue, lacking_note, nothing_usable_message, region_note,
                    unbalanced_note)
from .options import ConvertOptions
from .report import SUMMARY, ConversionReport
from .splits import (
    NOT_CAPTIONED, FixedSplits, ImageInfo, assign_from_split_files, examples, merge_hints, plan_splits,
)
from .write import plan_writes, write_shards

OUTPUT_SPLITS = ("train", "val", "test", "train-parallel")
STAGING = ".converting"  # under --out: the dataset being written, moved into place once complete
KEY_UNSAFE = re.compile(r"[^0-9A-Za-z_-]+")


MAX_ID = 64
"""Characters of an image id: its samples' keys (``<id>-<lang>-<n>.json``) fit a tar name
(:data:`data_prep.shard_writer.MAX_MEMBER_NAME`)."""


def safe_id(stem: str) -> str:
    """The image id a file stem gets (characters outside ``[0-9A-Za-z_-]`` become ``_``); a longer one than
    :data:`MAX_ID` keeps its start and ends in a hash of the whole stem (so two long names stay two ids)."""
    image_id = KEY_UNSAFE.sub("_", stem).strip("_") or "image"
    if len(image_id) <= MAX_ID:
        return image_id
    return f"{image_id[:MAX_ID - 11]}-{hashlib.sha256(stem.encode('utf-8')).hexdigest()[:10]}"


def _assign_image_ids(images: Iterable[GatheredImage]) -> dict[str, str]:
    """Readable, unique ids from file stems (``1000268201_693b08cb0e``); ``-2``, ``-3``... on clashes, in the order
    the images come. Returns file path -> id of the images so renamed."""
    used: set[str] = set()
    renamed: dict[str, str] = {}
    for img in images:
        base = safe_id(img.path.stem)
        image_id, n = base, 1
        while image_id in used:
            n += 1
            image_id = f"{base}-{n}"
        used.add(image_id)
        img.image_id = image_id
        if n > 1:
            renamed[str(img.path)] = image_id
    return renamed


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """One-line :class:`UserError`, before anything is read, for an ``--out`` that is (or lies under) a file, or
    that holds a dataset already (unless ``overwrite``)."""
    nearest = next((p for p in (out_dir, *out_dir.parents) if p.exists() or p.is_symlink()), None)
    if nearest is not None and not nearest.is_dir():
        what = "exists and is not a folder" if nearest == out_dir else f"{nearest} is a file, not a folder"
        raise UserError(f"--out {out_dir}: {what}")
    existing = [out_dir / s for s in OUTPUT_SPLITS if (out_dir / s / MANIFEST).is_file()]
    if (out_dir / SUMMARY).is_file():
        existing.append(out_dir / SUMMARY)
    if existing and not overwrite:
        raise UserError(f"{out_dir}: already holds a converted dataset ({existing[0].name}); "
                        f"pass --overwrite to replace it")


def _clear_out_dir(out_dir: Path) -> None:
    """Remove what a previous conversion wrote (shards, manifests, summary), nothing else."""
    for split in OUTPUT_SPLITS:
        folder = out_dir / split
        if not (folder / MANIFEST).is_file():
            continue
        for tar in folder.glob(f"{split}-*.tar"):
            tar.unlink()
        (folder / MANIFEST).unlink()
        if not any(folder.iterdir()):
            folder.rmdir()
    (out_dir / SUMMARY).unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)


def _remove_tree(folder: Path) -> None:
    """Remove ``folder`` and what it holds, if it exists."""
    if folder.is_dir():
        shutil.rmtree(folder)


def convert(sources: Iterable[Iterable[Record]], options: ConvertOptions) -> ConversionReport:
    """Convert caption records from ``sources`` into shards under ``options.out_dir``.

    Returns the :class:`ConversionReport` (also written to ``out_dir/summary.json``). Raises
    :class:`~globetrotter.errors.UserError` for an output folder that already holds a
    dataset (unless ``overwrite``) or is a file, and when nothing could be written (no usable
    record, every one left out, or every image unreadable): then nothing is left behind; and while another command
    writes ``out_dir`` (:func:`~data_prep.out_folder.lock_out_folder`).
    """
    start = time.perf_counter()
    out_dir = Path(options.out_dir)
    with lock_out_folder(out_dir):  # a second conversion (or synth) into out_dir is refused while this one runs
        _check_out_dir(out_dir, options.overwrite)
        return _convert(sources, options, out_dir, start)


def _convert(sources: Iterable[Iterable[Record]], options: ConvertOptions, out_dir: Path,
             start: float) -> ConversionReport:
    """:func:`convert`, with ``out_dir`` locked."""
    report = ConversionReport()
    resolver = ImageResolver(options.image_roots)
    images = gather_images(sources, options, report, resolver)
    report.timing["read_seconds"] = time.perf_counter() - start
    if not images:
        raise UserError(nothing_usable_message(report, resolver, options.source_args))
    encoding = encoding_note(report)
    if encoding:
        report.note(encoding)
    report.renamed_ids = _assign_image_ids(images.values())
    if report.renamed_ids:
        report.note(f"{len(report.renamed_ids)} image file(s) share their id with an earlier file's (the stem, "
                    f"characters outside A-Z a-z 0-9 _ - made _) and got ids ending -2, -3...: "
                    f"{examples([f'{path} is {i}' for path, i in report.renamed_ids.items()])}; key your own "
                    f"embeddings of them by these ids (every one in summary.json's renamed_ids)")
    by_id = {img.image_id: img for img in images.values()}

    found_langs = sorted({c.lang for img in by_id.values() for c in img.captions})
    languages = list(options.languages) if options.languages else found_langs
    absent = [lang for lang in languages if lang not in found_langs]
    if absent:
        raise UserError(f"--languages {','.join(languages)}: no usable caption in {','.join(absent)} (the usable "
                        f"captions are in {','.join(found_langs)}): remove {','.join(absent)} from --languages, or add "
                        f"captions in {'that language' if len(absent) == 1 else 'those languages'}; nothing written")
    region = region_note(by_id)
    if region:
        report.note(region)

    if options.parallel_train and not set(options.parallel_train) <= set(languages):
        raise UserError(f"--parallel-train {','.join(options.parallel_train)} must be a subset of the languages "
                        f"kept ({','.join(languages)})")

    fixed = _fixed_splits(options, by_id, resolver)  # before anything is written: a bad split file stops here
    rng = np.random.default_rng(options.seed)
    if options.limit_images is not None and len(by_id) > options.limit_images:
        keep = set(rng.permutation(len(by_id))[: options.limit_images].tolist())
        dropped = [image_id for idx, image_id in enumerate(by_id) if idx not in keep]
        for image_id in dropped:
            report.leave_out("beyond_image_limit", len(by_id.pop(image_id).captions))
        note = None if fixed is None else fixed.limit_note(dropped, options.limit_images)
        if note:  # the split files' counts (fixed.describe) are of the images they name, not of those kept
            report.note(note)

    infos = {i: ImageInfo(frozenset(c.lang for c in img.captions), merge_hints([c.split_hint for c in img.captions]))
             for i, img in by_id.items()}
    plan = plan_splits(infos, languages, options.test_fraction, options.val_fraction,
                       options.assign_languages, options.seed,
                       fixed=None if fixed is None else {i: fixed.split_of.get(i, "train") for i in infos})
    if fixed is not None:
        report.split_lines.append(fixed.describe(plan.split_of))
    for note in plan.notes:
        report.note(note)
    for image_id in plan.incomplete_test:
        report.leave_out("test_image_missing_language", len(by_id[image_id].captions))
    lacking = lacking_note(plan.incomplete_test, infos, languages)
    if lacking:
        report.note(lacking)
    one_language = options.assign_languages or all(len(infos[i].langs) == 1 for i, s in plan.split_of.items() if s != "test")
    if not one_language and any(split != "test" for split in plan.split_of.values()):
        report.note("without --assign-languages, train/val keep every language of each image: this breaks the "
                    "Globetrotter rule (check_split_rule fails on train/val); pass --assign-languages to train Globetrotter")

    writes = plan_writes(by_id, plan, frozenset(options.parallel_train or ()), report)
    if not any(writes.values()):
        need = (f"; a test image needs a caption in each of {','.join(languages)}"
                if report.unused["test_image_missing_language"] else "")
        raise UserError(f"nothing to convert: all {report.records - report.total_skipped} usable caption record(s) "
                        f"were left out ({counts_by_kind(report.unused)}){need}; nothing written")
    ids = list(writes)
    order = [ids[i] for i in rng.permutation(len(ids))]  # mix languages and sources across shards
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # deepest first
    staging, done = out_dir / STAGING, False
    try:  # the new dataset is written aside: a dataset being replaced stays whole until it is complete
        _remove_tree(staging)  # what a killed conversion left
        unreadable = write_shards(order, by_id, writes, options, report, one_language, staging)
        if not report.total_written:
            raise UserError(f"nothing to convert: none of the {len(order)} image(s) could be written "
                            f"({counts_by_kind(report.skipped)}); e.g. {first_issue(report)}; nothing written")
        if options.check:
            for split in ("train", "val", "test"):
                if report.images[split] and (split == "test" or one_language):
                    check_split_rule(staging / split, split)
        _clear_out_dir(out_dir)
        move_splits(staging, out_dir)
        done = True
    finally:
        _remove_tree(staging)
        if not done:  # failed or interrupted before the swap: take away the folders it made
            remove_empty_folders(created)
    unbalanced = unbalanced_note(plan, unreadable) if options.assign_languages else None
    if unbalanced:
        report.note(unbalanced)
    report.timing["total_seconds"] = time.perf_counter() - start
    report.options = {k: (v if isinstance(v, (int, float, bool, str, type(None))) else str(v) if isinstance(v, Path)
                          else [str(x) for x in v]) for k, v in vars(options).items()
                      if k not in ("image", "progress", "source_args")}
    report.options.update(resize=options.image.resize, resize_mode=options.image.mode,
                          jpeg_quality=options.image.quality, languages_used=languages, **options.source_args)
    report.write_json(out_dir / SUMMARY)
    return report


def _image_lookup(by_id: dict[str, GatheredImage], resolver: ImageResolver) -> Callable[[str], str | None]:
    """``find(name)`` for split files: the image id a line names, :data:`NOT_CAPTIONED`, or ``None``.

    A line is tried as an image id, then as the captions' image names are (a path, a file name, its stem or
    its Flickr photo id, under the image folders: so Multi30K's ``<id>.jpg`` finds Flickr8k's
    ``<id>_<secret>.jpg``), then by file name, stem or photo id among the images of the dataset (captions may
    name files outside the image folders)."""
    id_of_path = {img.path: image_id for image_id, img in by_id.items()}
    by_name: dict[str, str] = {}
    for image_id, img in by_id.items():
        for key in (img.path.name, img.path.stem, flickr_photo_id(img.path.name)):
            if key is not None:
                by_name.setdefault(key, image_id)

    def find(name: str) -> str | None:
        if name in by_id:
            return name
        path = resolver.resolve((name,))
        if path is not None:
            return id_of_path.get(path, NOT_CAPTIONED)
        base = Path(name).name
        return by_name.get(base) or by_name.get(Path(base).stem) or by_name.get(flickr_photo_id(base) or "\0")

    return find


def _fixed_splits(options: ConvertOptions, by_id: dict[str, GatheredImage],
                  resolver: ImageResolver) -> FixedSplits | None:
    """The splits given by ``--split-file`` / ``--all-to`` (None: fractions or the sources' own splits)."""
    if options.all_to is not None:
        return FixedSplits(split_of={i: options.all_to for i in by_id}, all_to=options.all_to)
    if not options.split_files:
        return None
    return assign_from_split_files(options.split_files, _image_lookup(by_id, resolver))
