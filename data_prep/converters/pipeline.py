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
import multiprocessing
import re
import shutil
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from data_prep.errors import UserError
from data_prep.out_folder import lock_out_folder, move_splits, remove_empty_folders
from data_prep.shard_writer import DuplicateKey, ShardWriter
from data_prep.shards import MANIFEST
from data_prep.split_rule import check_split_rule

from .common import Caption, Record
from .images import ImageResolver, ImageSpec, flickr_photo_id, prepare_image_task
from .languages import normalize_language
from .report import ConversionReport, Issue
from .splits import (
    NOT_CAPTIONED, FixedSplits, ImageInfo, SplitFile, SplitPlan, assign_from_split_files, examples, merge_hints,
    plan_splits, split_name,
)

OUTPUT_SPLITS = ("train", "val", "test", "train-parallel")
SUMMARY = "summary.json"
STAGING = ".converting"  # under --out: the dataset being written, moved into place once complete
_KEY_UNSAFE = re.compile(r"[^0-9A-Za-z_-]+")
_WORD = re.compile(r"\w+")


@dataclass
class ConvertOptions:
    """Everything a conversion needs besides its sources (command-line flags of the same names)."""

    out_dir: Path
    image_roots: list[Path] = field(default_factory=list)
    languages: list[str] | None = None  # None: every language found
    assign_languages: bool = False
    test_fraction: float | None = None
    val_fraction: float | None = None
    split_files: list[SplitFile] = field(default_factory=list)  # --split-file SPLIT=FILE (exclusive with fractions)
    all_to: str | None = None  # --all-to SPLIT: every image to one split
    parallel_train: list[str] | None = None
    seed: int = 0
    limit_images: int | None = None
    image: ImageSpec = field(default_factory=ImageSpec)
    workers: int = 1
    shard_size: int = 2000
    overwrite: bool = False
    check: bool = True
    progress: bool = True
    source_name: str = "converted"
    source_args: dict = field(default_factory=dict)  # the sources as given, with caption files' sha256 (summary)

    def __post_init__(self) -> None:
        for name in ("test_fraction", "val_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise UserError(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
        if (self.test_fraction or 0.0) + (self.val_fraction or 0.0) > 1.0:
            raise UserError("--test-fraction plus --val-fraction must not exceed 1")
        given = self.split_options()
        if len(given) > 1 and not all(name.endswith("-fraction") for name in given):
            raise UserError(f"{' and '.join(given)} are exclusive: give the splits either by fractions "
                            "(--test-fraction/--val-fraction), by split files (--split-file SPLIT=FILE, repeatable) "
                            "or all to one split (--all-to SPLIT)")
        if self.all_to is not None:
            try:
                self.all_to = split_name(self.all_to)
            except ValueError as err:
                raise UserError(f"--all-to: {err}") from None
        if self.limit_images is not None and self.limit_images < 1:
            raise UserError(f"--max-images must be positive, got {self.limit_images}")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1, got {self.workers}")

    def split_options(self) -> list[str]:
        """The command-line split options given: ``--split-file``, ``--all-to``, then the fractions."""
        fractions = [f"--{n.replace('_', '-')}" for n in ("test_fraction", "val_fraction") if getattr(self, n) is not None]
        lists = (["--split-file"] if self.split_files else []) + (["--all-to"] if self.all_to is not None else [])
        return lists + fractions


@dataclass
class _Image:
    """An image with its accepted captions, in arrival order."""

    path: Path
    captions: list[Caption] = field(default_factory=list)
    image_id: str = ""


def checked_records(sources: Iterable[Iterable[Record]], report: ConversionReport, languages: Sequence[str] | None,
                    progress: bool) -> Iterator[Caption]:
    """The records of ``sources`` that pass a conversion's checks, language code normalised and whitespace
    collapsed. Bad input (reader issues, unknown language, empty caption, duplicate key) is filed in
    ``report`` with file and line; a language outside ``languages`` is counted as left out."""
    wanted = set(languages) if languages else None
    seen: dict[tuple, str] = {}
    bar = tqdm(desc="reading captions", unit=" rec", disable=not progress, mininterval=1.0)
    for source in sources:
        for item in source:
            bar.update()
            if isinstance(item, Issue):
                report.records += item.records
                report.add(item)
                continue
            report.records += 1
            lang = normalize_language(item.lang)
            if lang is None:
                report.add(Issue("unknown_language", item.file, item.line,
                                 f"language code {item.lang!r} is not ISO 639-1"))
                continue
            text = " ".join(item.text.split())
            if not text:
                report.add(Issue("empty_caption", item.file, item.line, "caption is empty or whitespace"))
                continue
            first = seen.get(item.key)
            if first is not None:
                report.add(Issue("duplicate_key", item.file, item.line, f"same caption key as {first}"))
                continue
            seen[item.key] = item.where
            if wanted is not None and lang not in wanted:
                report.leave_out("language_not_requested")
                continue
            yield replace(item, lang=lang, text=text)
    bar.close()


def same_text(text: str) -> str:
    """What two captions must share to count as the same text: their words, case-folded (punctuation and spacing ignored)."""
    return " ".join(_WORD.findall(text.casefold()))


def _gather(sources: Iterable[Iterable[Record]], options: ConvertOptions, report: ConversionReport,
            resolver: ImageResolver) -> dict[Path, _Image]:
    """Check every record; keep good captions grouped by image file. A caption the user labelled with a split
    (a caption table's split column) while a command-line split option is given is a one-line :class:`UserError`:
    the option would re-split the images the user split (a test image could land in train)."""
    images: dict[Path, _Image] = {}
    given = options.split_options()
    kept: dict[tuple[Path, str, str], tuple[str, str]] = {}  # (image, lang, same_text) -> (file, where) of the kept
    repeats: list[str] = []
    for item in checked_records(sources, report, options.languages, options.progress):
        if item.user_split and item.split_hint is not None and given:
            raise UserError(f"{item.where}: the caption table's split column already splits the images (this row: "
                            f"{item.split_hint}), and {' and '.join(given)} would re-split them (an image labelled "
                            f"test could go to train): drop {' and '.join(given)} to keep the column's splits, or "
                            f"leave the column out (or empty) to split by {' and '.join(given)}; nothing written")
        path = resolver.resolve(item.images, item.exact)
        clash = resolver.same_name(item.images) if path is None and item.exact else []
        if clash:
            report.add(Issue("ambiguous_image", item.file, item.line,
                             f"image name {item.images[0]!r} fits several files under the image folders "
                             f"({examples(list(map(str, clash)))}): give the path of one, relative to its image "
                             f"folder"))
            continue
        if path is None:
            how = " (by path or file name)" if item.exact else ""
            report.add(Issue("missing_image", item.file, item.line,
                             f"image {item.images[0]!r} not found in the image folders{how}"))
            continue
        text_key = (path, item.lang, same_text(item.text))
        first = kept.get(text_key) if text_key[2] else None
        if first is not None and first[0] != str(item.file):  # overlapping sources (Multi30K tasks 1 and 2, ...);
            report.leave_out("caption_already_present")      # one file's own repeats are its annotators' and stay
            repeats.append(f"{item.where} repeats {first[1]}")
            continue
        kept.setdefault(text_key, (str(item.file), item.where))
        images.setdefault(path, _Image(path)).captions.append(item)
    if repeats:
        report.note(f"{len(repeats)} caption(s) repeat a text their image already has in that language from another "
                    f"source file (case, punctuation and spacing ignored: overlapping sources) and were kept once "
                    f"(unused: caption_already_present); first: {repeats[0]}")
    return images


MAX_ID = 64
"""Characters of an image id: its samples' keys (``<id>-<lang>-<n>.json``) fit a tar name
(:data:`data_prep.shard_writer.MAX_MEMBER_NAME`)."""


def safe_id(stem: str) -> str:
    """The image id a file stem gets (characters outside ``[0-9A-Za-z_-]`` become ``_``); a longer one than
    :data:`MAX_ID` keeps its start and ends in a hash of the whole stem (so two long names stay two ids)."""
    image_id = _KEY_UNSAFE.sub("_", stem).strip("_") or "image"
    if len(image_id) <= MAX_ID:
        return image_id
    return f"{image_id[:MAX_ID - 11]}-{hashlib.sha256(stem.encode('utf-8')).hexdigest()[:10]}"


def _assign_image_ids(images: Iterable[_Image]) -> None:
    """Readable, unique ids from file stems (``1000268201_693b08cb0e``); ``-2``, ``-3``... on clashes."""
    used: set[str] = set()
    for img in images:
        base = safe_id(img.path.stem)
        image_id, n = base, 1
        while image_id in used:
            n += 1
            image_id = f"{base}-{n}"
        used.add(image_id)
        img.image_id = image_id


def _region_note(by_id: dict[str, _Image]) -> str | None:
    """The warning for languages with a region or script subtag beside their base code (``fr-FR`` and ``fr``): kept
    apart on purpose (:mod:`~data_prep.converters.languages`), but often one language written two ways. ``None``
    when there is none."""
    per_lang = Counter(lang for img in by_id.values() for lang in {c.lang for c in img.captions})
    pairs = [(lang, lang.split("-")[0]) for lang in sorted(per_lang) if "-" in lang and lang.split("-")[0] in per_lang]
    if not pairs:
        return None
    named = "; ".join(f"{tagged} ({per_lang[tagged]} image(s)) beside {base} ({per_lang[base]} image(s))"
                      for tagged, base in pairs)
    return (f"{named}: kept as separate languages (a region or script subtag makes its own language, e.g. fa-AF "
            f"Dari beside fa Persian); if they are one language, write one code in the captions")


def _lacking_note(incomplete: Sequence[str], infos: dict[str, ImageInfo], languages: Sequence[str]) -> str | None:
    """The warning for source test images left out for lacking a requested language: which languages they lack
    (most first, with counts) and the ``--languages`` that keeps them. ``None`` when none was left out."""
    if not incomplete:
        return None
    lacking = Counter(lang for i in incomplete for lang in languages if lang not in infos[i].langs)
    named = ", ".join(f"{lang} {n}" for lang, n in lacking.most_common())
    keep = [lang for lang in languages if lang not in lacking]
    hint = (f"--languages {','.join(keep)} keeps them (or complete those languages' captions)" if keep
            else "complete those languages' captions")
    return (f"{len(incomplete)} source test image(s) left out in every language, as they lack a caption in {named} "
            f"(images per language): {hint}")


def _encoding_note(report: ConversionReport) -> str | None:
    """The advice for caption lines skipped as not UTF-8: most often a whole file saved in a legacy encoding, whose
    lines with accents are lost and whose plain-ASCII lines are kept (a language can vanish this way)."""
    issues = report.issues.get("non_utf8", [])
    if not issues:
        return None
    files = sorted({issue.file for issue in issues})
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (f"{len(issues)} caption line(s) of {shown} are not UTF-8 and were skipped (their captions are lost): "
            f"if a file is in another encoding (Latin-1, cp1252...), convert it first, e.g. "
            f"iconv -f latin1 -t utf-8 {files[0]} > converted.txt")


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


def _prepared_images(paths: Sequence[Path], spec: ImageSpec, workers: int) -> Iterator[tuple]:
    """Yield ``(index, bytes, size, error)`` per path, in order; decoded in a process pool when ``workers > 1``."""
    tasks = [(i, str(p), spec) for i, p in enumerate(paths)]
    if workers <= 1 or len(tasks) < 2:
        yield from map(prepare_image_task, tasks)
        return
    chunksize = max(1, min(16, len(tasks) // (workers * 8)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(prepare_image_task, tasks, chunksize=chunksize)


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
    images = _gather(sources, options, report, resolver)
    report.timing["read_seconds"] = time.perf_counter() - start
    if not images:
        raise UserError(_nothing_usable(report, resolver, options.source_args))
    encoding = _encoding_note(report)
    if encoding:
        report.note(encoding)
    _assign_image_ids(images.values())
    by_id = {img.image_id: img for img in images.values()}

    found_langs = sorted({c.lang for img in by_id.values() for c in img.captions})
    languages = list(options.languages) if options.languages else found_langs
    absent = [lang for lang in languages if lang not in found_langs]
    if absent:
        raise UserError(f"--languages {','.join(languages)}: no usable caption in {','.join(absent)} (the usable "
                        f"captions are in {','.join(found_langs)}): remove {','.join(absent)} from --languages, or add "
                        f"captions in {'that language' if len(absent) == 1 else 'those languages'}; nothing written")
    region = _region_note(by_id)
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
    lacking = _lacking_note(plan.incomplete_test, infos, languages)
    if lacking:
        report.note(lacking)
    one_language = options.assign_languages or all(len(infos[i].langs) == 1 for i, s in plan.split_of.items() if s != "test")
    if not one_language and any(split != "test" for split in plan.split_of.values()):
        report.note("without --assign-languages, train/val keep every language of each image: this breaks the "
                    "Globetrotter rule (check_split_rule fails on train/val); pass --assign-languages to train Globetrotter")

    writes = _plan_writes(by_id, plan, frozenset(options.parallel_train or ()), report)
    if not any(writes.values()):
        need = (f"; a test image needs a caption in each of {','.join(languages)}"
                if report.unused["test_image_missing_language"] else "")
        raise UserError(f"nothing to convert: all {report.records - report.total_skipped} usable caption record(s) "
                        f"were left out ({_counts(report.unused)}){need}; nothing written")
    ids = list(writes)
    order = [ids[i] for i in rng.permutation(len(ids))]  # mix languages and sources across shards
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # deepest first
    staging, done = out_dir / STAGING, False
    try:  # the new dataset is written aside: a dataset being replaced stays whole until it is complete
        _remove_tree(staging)  # what a killed conversion left
        unreadable = _write_shards(order, by_id, writes, options, report, one_language, staging)
        if not report.total_written:
            raise UserError(f"nothing to convert: none of the {len(order)} image(s) could be written "
                            f"({_counts(report.skipped)}); e.g. {_first_issue(report)}; nothing written")
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
    unbalanced = _unbalanced_note(plan, unreadable) if options.assign_languages else None
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


def _unbalanced_note(plan: SplitPlan, unreadable: set[str]) -> str | None:
    """The images per language that train and val hold when some of the images ``--assign-languages`` gave a
    language could not be read (the balance is struck before any image is decoded), or None when none was lost."""
    lost = unreadable & set(plan.lang_of)
    if not lost:
        return None
    parts = []
    for split in ("train", "val"):
        ids = [i for i, s in plan.split_of.items() if s == split and i in plan.lang_of]
        if lost.intersection(ids):
            kept = Counter(plan.lang_of[i] for i in ids if i not in lost)
            langs = sorted({plan.lang_of[i] for i in ids})
            parts.append(f"{split} " + ", ".join(f"{lang} {kept[lang]}" for lang in langs))
    return (f"--assign-languages balanced the images per language before they were decoded; {len(lost)} of them "
            f"could not be read (unreadable_image) and were left out after, so the images per language are: "
            f"{'; '.join(parts)}; fix or remove the unreadable images and convert again for an even balance")


def _counts(counter: Counter) -> str:
    """``"3 missing_image, 1 unknown_language"``: a counter's kinds, most records first."""
    return ", ".join(f"{n} {kind}" for kind, n in counter.most_common())


def _first_issue(report: ConversionReport) -> Issue | None:
    """The first issue of the kind that cost the most records (of any kind when none cost a record)."""
    kinds = [kind for kind, _ in report.skipped.most_common()] or [k for k, v in report.issues.items() if v]
    return report.issues[kinds[0]][0] if kinds else None


def _nothing_usable(report: ConversionReport, resolver: ImageResolver, source_args: dict) -> str:
    """Why no caption record is usable, in one line: the caption sources (``source_args``, as the summary lists them)
    when they hold none; else the records skipped or left out by kind, an example, and for images not found, some
    file names the image folders do hold."""
    if not report.records:
        given = [str(s) for key, values in source_args.items() if key not in ("caption_sha256", "multi30k_tasks")
                 for s in values]
        named = f" ({', '.join(given)})" if given else ""
        return f"nothing to convert: the caption sources{named} hold no caption record; nothing written"
    line = (f"nothing to convert: none of the {report.records} caption record(s) is usable "
            f"({_counts(report.skipped + report.unused)})")
    first = _first_issue(report)
    if first is not None:
        line += f"; e.g. {first}"
    if first is not None and first.kind == "missing_image":
        names = resolver.some_names()
        roots = ", ".join(map(str, resolver.roots))
        line += (f"; the image folders hold e.g. {', '.join(map(repr, names))}" if names else
                 f"; the image folders ({roots}) hold no image file" if roots else
                 "; no --images folder was given (image names are read as paths from the caption file's folder)")
    return line + "; nothing written"


def _image_lookup(by_id: dict[str, _Image], resolver: ImageResolver) -> Callable[[str], str | None]:
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


def _fixed_splits(options: ConvertOptions, by_id: dict[str, _Image], resolver: ImageResolver) -> FixedSplits | None:
    """The splits given by ``--split-file`` / ``--all-to`` (None: fractions or the sources' own splits)."""
    if options.all_to is not None:
        return FixedSplits(split_of={i: options.all_to for i in by_id}, all_to=options.all_to)
    if not options.split_files:
        return None
    return assign_from_split_files(options.split_files, _image_lookup(by_id, resolver))


def _plan_writes(by_id: dict[str, _Image], plan: SplitPlan, parallel: frozenset[str],
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


def _write_shards(order: list[str], by_id: dict[str, _Image], writes: dict[str, list], options: ConvertOptions,
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
