"""``globetrotter-data {multi30k,flickr8k,globetrotter,xtd10,folder}``: convert public layouts to shards.

All five sub-commands share one set of options, and every source option is repeatable,
so any combination of sources goes into one dataset; a sub-command only says which
source it needs at least (and which example its ``--help`` shows).
"""
from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path
from typing import Sequence

from data_prep.errors import UserError

from ..checksums import file_sha256
from .flickr8k import read_flickr8k
from .folder import read_caption_table
from .globetrotter_layout import read_globetrotter
from .images import RESIZE_MODES, ImageSpec
from .languages import normalize_language, parse_language_list
from .multi30k import TASKS, read_multi30k
from .options import ConvertOptions
from .pipeline import convert
from .splits import SPLIT_NAMES, SplitFile, parse_split_file, split_name
from .xtd10 import read_xtd10

FLICKR8K_5LANG_COMMAND = (
    "globetrotter-data flickr8k --images ../shared/data/flickr8k/images "
    "--multi30k ../shared/data/flickr8k/multi30k "
    "--flickr8k ../shared/data/flickr8k/flickr8kcn/flickr8kzhc.caption.txt:zh "
    "--languages en,de,fr,cs,zh --assign-languages --test-fraction 0.1 --val-fraction 0.25 "
    "--parallel-train en,de,fr,cs --resize 224 --out outputs/flickr8k"
)
"""The command of docs/data.md (the project's copy of the data under ../shared); --help shows it with the paths as
FLICKR8K/... placeholders (:data:`FLICKR8K_FOLDERS`)."""
FLICKR8K_FOLDERS = ("FLICKR8K stands for the folder of your copy of the data: images/ (the Flickr8k photos), "
                    "multi30k/ (Multi30K's data folder) and flickr8kcn/ (the Flickr8k-CN caption files).")


def with_placeholders(command: str) -> str:
    """``command`` with the project machine's data paths (``../shared/data/flickr8k/``) as ``FLICKR8K/``."""
    return command.replace("../shared/data/flickr8k/", "FLICKR8K/")


_COMMANDS = {
    "multi30k": dict(
        needs="multi30k",
        help="Multi30K task 1 (parallel en/de/fr/cs) and task 2 (independent en/de) with Flickr30k/Flickr8k images",
        example="globetrotter-data multi30k --multi30k multi30k-dataset/data --multi30k-tasks 1,2 "
                "--images flickr30k-images --assign-languages --out data/multi30k",
    ),
    "flickr8k": dict(
        needs="flickr8k",
        help="the Flickr8k token file and Flickr8k-CN caption files (language given per file)",
        example=with_placeholders(FLICKR8K_5LANG_COMMAND),
        note=FLICKR8K_FOLDERS + " This is the five-language dataset of docs/data.md: en/de/fr/cs from Multi30K task 1 "
        "(translations of each other, so the test split is true parallel ground truth), zh written by native "
        "speakers (Flickr8k-CN). Add '--multi30k-tasks 1,2' for the five independent en and de captions of "
        "task 2, or '--flickr8k .../Flickr8k.token.txt:en' for the five original English captions per image. "
        "For Flickr8k's official splits, replace the fractions with '--split-file test=Flickr_8k.testImages.txt "
        "--split-file val=Flickr_8k.devImages.txt' (the other images go to train).",
    ),
    "globetrotter": dict(
        needs="globetrotter",
        help="the Globetrotter dataset layout (translated_independent/, translated_alllangs/, listing_*.txt)",
        example="globetrotter-data globetrotter --globetrotter globetrotter_dataset "
                "--assign-languages --resize 256 --out data/globetrotter",
    ),
    "xtd10": dict(
        needs="xtd10",
        help="XTD10 (test_image_names.txt + test_1kcaptions_<lang>.txt) with a COCO images folder",
        example="globetrotter-data xtd10 --xtd10 Cross-lingual-Test-Dataset-XTD10 --images coco "
                "--resize 256 --out data/xtd10",
    ),
    "folder": dict(
        needs="captions",
        help="a generic images folder plus captions as TSV or JSONL (image, lang, caption[, split])",
        example="globetrotter-data folder --images photos --captions captions.tsv --assign-languages "
                "--test-fraction 0.1 --out data/mine",
    ),
}


def existing_dir(value: str) -> Path:
    """argparse type: the path of a folder that exists."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a file, expected a folder" if path.exists() else
                                         f"folder not found: {value}")
    return path


def _existing_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value} is a folder, expected a file" if path.is_dir() else
                                         f"file not found: {value}")
    return path


def _file_and_language(value: str) -> tuple[Path, str]:
    path, sep, code = value.rpartition(":")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"expected FILE:LANG (e.g. Flickr8k.token.txt:en), got {value!r}")
    lang = normalize_language(code)
    if lang is None:
        raise argparse.ArgumentTypeError(f"unknown language code {code!r} in {value!r} (expected ISO 639-1)")
    return _existing_file(path), lang


def language_list(value: str) -> list[str]:
    """argparse type: comma-separated language codes (:func:`parse_language_list`), normalised."""
    try:
        return parse_language_list(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _tasks(value: str) -> list[int]:
    try:
        tasks = sorted({int(t) for t in value.split(",") if t.strip()})
    except ValueError:
        tasks = []
    if not tasks or any(t not in TASKS for t in tasks):
        raise argparse.ArgumentTypeError(f"expected 1, 2 or 1,2, got {value!r}")
    return tasks


def _fraction(value: str) -> float:
    try:
        f = float(value)
    except ValueError:
        f = -1.0
    if not 0.0 <= f <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {value!r}")
    return f


def non_negative_int(value: str) -> int:
    """argparse type: an integer >= 0 (a count that may be zero), as globetrotter's ``non_negative_int``."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value!r}")
    return n


def _split_file(value: str) -> SplitFile:
    try:
        return parse_split_file(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _split(value: str) -> str:
    try:
        return split_name(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


CAPTION_SOURCES = ("multi30k", "flickr8k", "globetrotter", "xtd10", "captions")


CAPTIONS_IMAGE = "image is a path or file name (no stem or photo id match)"
"""How a converter finds the image a ``--captions`` row names (:mod:`.folder`)."""


def add_source_arguments(group: argparse._ArgumentGroup, sources: Sequence[str] = CAPTION_SOURCES,
                         captions_image: str = CAPTIONS_IMAGE) -> None:
    """The caption-source options (each repeatable) of ``sources`` (``multi30k`` brings ``--multi30k-tasks``);
    ``captions_image``: how the command finds the image a ``--captions`` row names (its --help words)."""
    if "multi30k" in sources:
        group.add_argument("--multi30k", type=existing_dir, action="append", default=[], metavar="DIR",
                           help="Multi30K data folder holding task1/ and/or task2/ (image_splits/ + raw/)")
        group.add_argument("--multi30k-tasks", type=_tasks, default=[1], metavar="1|2|1,2",
                           help="which Multi30K tasks to read: 1 = parallel en/de/fr/cs, 2 = five independent "
                                "en and de captions per image (default: 1)")
    if "flickr8k" in sources:
        group.add_argument("--flickr8k", type=_file_and_language, action="append", default=[], metavar="FILE:LANG",
                           help="a Flickr8k token file (img.jpg#k<TAB>caption) or Flickr8k-CN caption file "
                                "(img#zhc#k caption) and the language of its captions, e.g. Flickr8k.token.txt:en")
    if "globetrotter" in sources:
        group.add_argument("--globetrotter", type=existing_dir, action="append", default=[], metavar="ROOT",
                           help="Globetrotter dataset root (COCO/annotations/, flickr30k/entities/, ConceptualCaptions/ "
                                "with translated_independent/ and translated_alllangs/); also searched for images")
    if "xtd10" in sources:
        group.add_argument("--xtd10", type=existing_dir, action="append", default=[], metavar="DIR",
                           help="XTD10 release folder (XTD10/test_image_names.txt, */test_1kcaptions_<lang>.txt; "
                                "'jp' is read as ISO 639-1 'ja')")
    if "captions" in sources:
        group.add_argument("--captions", type=_existing_file, action="append", default=[], metavar="FILE",
                           help="caption table: TSV (image<TAB>lang<TAB>caption[<TAB>split]) or JSONL "
                                "({\"image\", \"lang\", \"caption\"[, \"split\"]}), .gz allowed; " + captions_image)


def _shared_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    src = parent.add_argument_group("sources (each repeatable; combine any of them into one dataset)")
    add_source_arguments(src)
    src.add_argument("--images", type=existing_dir, action="append", default=[], metavar="DIR",
                     help="image folder (searched recursively by path, file name, and Flickr photo id, so "
                          "<id>.jpg finds <id>_<secret>.jpg); required with --multi30k, --flickr8k, --xtd10")

    out = parent.add_argument_group("output")
    out.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="dataset folder to write: train/, val/, test/ (shards + manifest.json), "
                          "train-parallel/ (with --parallel-train) and summary.json")
    out.add_argument("--overwrite", action="store_true", help="replace a dataset already in --out")
    out.add_argument("--languages", type=language_list, default=None, metavar="CODES",
                     help="comma-separated ISO 639-1 languages to keep (default: every language found); "
                          "test images need a caption in each of them")
    out.add_argument("--shard-size", type=int, default=2000, metavar="N", help="samples per .tar shard (default 2000)")

    spl = parent.add_argument_group("splits (Globetrotter rule: train/val one language per image, test all languages)")
    spl.add_argument("--assign-languages", action="store_true",
                     help="give each train/val image exactly one of its languages (balanced images per language, "
                          "seeded) and keep only its captions in that language; without it train/val keep every "
                          "caption and break the rule")
    spl.add_argument("--test-fraction", type=_fraction, default=None, metavar="F",
                     help="hold out this fraction of all images, drawn from those captioned in every language, as "
                          "the parallel test split (default: use the sources' own test splits; exclusive with --split-file, --all-to)")
    spl.add_argument("--val-fraction", type=_fraction, default=None, metavar="F",
                     help="fraction of all images for val, drawn from the non-test images "
                          "(default: the sources' own val splits; exclusive with --split-file, --all-to)")
    spl.add_argument("--split-file", type=_split_file, action="append", default=[], metavar="SPLIT=FILE",
                     help=f"a dataset's official split list: the images FILE names (one image name or id per line, "
                          f"e.g. Flickr_8k.testImages.txt, Multi30K image_splits/test_2016_flickr.txt) go to SPLIT "
                          f"({', '.join(SPLIT_NAMES)}; 'dev' is val); FILE may be a converted split folder, whose images "
                          f"go to SPLIT (e.g. test=outputs/flickr8k/test: the same test images as that dataset); "
                          f"repeatable; images named in no file go to train. "
                          "A name that matches no image, or an image in files of two splits, stops the conversion")
    spl.add_argument("--all-to", type=_split, default=None, metavar="SPLIT",
                     help="put every image in SPLIT (e.g. test: a whole dataset as an evaluation set)")
    spl.add_argument("--parallel-train", type=language_list, default=None, metavar="CODES",
                     help="also write train-parallel/: the train images captioned in all these languages, with all "
                          "those captions tied by group (for the supervised baseline), e.g. en,de,fr,cs")
    spl.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    spl.add_argument("--max-images", type=int, default=None, metavar="N",
                     help="keep a random subset of N images (quick trials)")

    img = parent.add_argument_group("images")
    img.add_argument("--resize", type=int, default=None, metavar="PX",
                     help="scale images down so the shorter side is PX pixels (never up); default: keep the size "
                          "and, for JPEG input, the original bytes")
    img.add_argument("--resize-mode", choices=RESIZE_MODES, default="shorter",
                     help="shorter: keep aspect ratio; center-crop: then crop the central PX x PX square "
                          "(default: shorter)")
    img.add_argument("--jpeg-quality", type=int, default=90, metavar="Q", help="quality of re-encoded JPEGs (default 90)")
    img.add_argument("--workers", type=int, default=_default_workers(), metavar="N",
                     help="processes decoding and resizing images, at least 1 (0 is refused); 1: in this process, "
                          "no pool (default: the number of cores this process may use)")

    rep = parent.add_argument_group("report")
    rep.add_argument("--strict", action="store_true",
                     help="exit with status 1 when any bad input was found (the good samples are still written)")
    rep.add_argument("--show-issues", type=non_negative_int, default=5, metavar="N",
                     help="print the first N issues of each kind (file:line) before the counts (default 5)")
    rep.add_argument("--no-check", action="store_true",
                     help="skip re-reading the written splits to verify the split rule")
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parent


def _format_example(command: str) -> str:
    """One option per line, shell continuation backslashes, so the example can be pasted."""
    first, *rest = command.split(" --")
    return " \\\n      --".join([f"  {first}", *rest])


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the converter sub-commands to ``globetrotter-data``."""
    shared = _shared_options()
    for name, spec in _COMMANDS.items():
        description = textwrap.fill(
            f"Convert {spec['help']} to the shard format. Bad input (missing or unreadable image, empty caption, "
            "caption file cut short, unknown language code, duplicate key, non-UTF-8 bytes) is reported with file "
            "and line and skipped; a complete line-aligned caption file whose line count differs from its split "
            "file's is refused (exit 2, nothing written). The summary accounts for every caption record "
            "(read = written + skipped + unused) and gives the throughput in images/s. Every source option "
            "works with every sub-command, so several sources go into one dataset.", width=88)
        epilog = "example:\n" + _format_example(spec["example"])
        if spec.get("note"):
            epilog += "\n\n" + textwrap.fill(spec["note"], width=88)
        parser = subparsers.add_parser(
            name, parents=[shared], help=f"convert {spec['help']}", description=description, epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(func=run, command_name=name, needs=spec["needs"])


def source_options(args: argparse.Namespace) -> dict:
    """The caption sources of parsed arguments as a summary's options list them: each source option as given
    (folders and files), and ``caption_sha256``: the sha256 of each caption file (``--flickr8k FILE``,
    ``--captions FILE``; a folder source is named, not hashed), so the summary ties the dataset to the files read."""
    options: dict = {}  # the sources given only: a command's other source options are empty lists
    if getattr(args, "multi30k", None):
        options.update(multi30k=[str(p) for p in args.multi30k], multi30k_tasks=list(args.multi30k_tasks))
    if getattr(args, "flickr8k", None):
        options["flickr8k"] = [f"{p}:{lang}" for p, lang in args.flickr8k]
    for name in ("globetrotter", "xtd10", "captions"):
        if getattr(args, name, None):
            options[name] = [str(p) for p in getattr(args, name)]
    files = [p for p, _ in getattr(args, "flickr8k", [])] + list(getattr(args, "captions", []))
    options["caption_sha256"] = {str(p): file_sha256(p) for p in files}
    return options


def caption_sources(args: argparse.Namespace) -> tuple[list, list[str]]:
    """The caption readers the source options of ``args`` name, and the names of their kinds (each once)."""
    sources, names = [], []
    for root in args.multi30k:
        sources.append(read_multi30k(root, args.multi30k_tasks))
        names.append("multi30k")
    for path, lang in args.flickr8k:
        sources.append(read_flickr8k(path, lang))
        names.append("flickr8k")
    for root in args.globetrotter:
        sources.append(read_globetrotter(root))
        names.append("globetrotter")
    for root in args.xtd10:
        sources.append(read_xtd10(root))
        names.append("xtd10")
    for path in args.captions:
        sources.append(read_caption_table(path))
        names.append("folder")
    return sources, list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    """Run one conversion from parsed arguments; exit code 0, or 1 (bad input under --strict); nothing to write is a
    :class:`UserError`."""
    if not getattr(args, args.needs):
        given = [(name, spec["needs"]) for name, spec in _COMMANDS.items() if getattr(args, spec["needs"], None)]
        other = f"; for --{given[0][1]} alone run `globetrotter-data {given[0][0]}`" if len(given) == 1 else ""
        raise UserError(f"globetrotter-data {args.command_name} needs --{args.needs.replace('_', '-')}{other}")
    if (args.multi30k or args.flickr8k or args.xtd10) and not args.images:
        raise UserError("--images DIR is required with --multi30k, --flickr8k and --xtd10 (the folder of the photos)")
    if args.resize is not None and args.resize < 1:
        raise UserError(f"--resize must be a positive number of pixels, got {args.resize}")
    if not 1 <= args.jpeg_quality <= 100:
        raise UserError(f"--jpeg-quality must be in 1..100, got {args.jpeg_quality}")
    if args.shard_size < 1:
        raise UserError(f"--shard-size must be positive, got {args.shard_size}")
    sources, names = caption_sources(args)
    options = ConvertOptions(
        out_dir=args.out,
        image_roots=list(args.images) + list(args.globetrotter),
        languages=args.languages,
        assign_languages=args.assign_languages,
        test_fraction=args.test_fraction,
        val_fraction=args.val_fraction,
        split_files=list(args.split_file),
        all_to=args.all_to,
        parallel_train=args.parallel_train,
        seed=args.seed,
        limit_images=args.max_images,
        image=ImageSpec(args.resize, args.resize_mode, args.jpeg_quality),
        workers=args.workers,
        shard_size=args.shard_size,
        overwrite=args.overwrite,
        check=not args.no_check,
        progress=not args.no_progress,
        source_name="+".join(names),
        source_args=source_options(args),
    )
    report = convert(sources, options)
    report.print_issues(args.show_issues)
    print(report.format_summary())
    print(f"dataset: {args.out}  (summary: {args.out / 'summary.json'})")
    return report.print_closing(args.strict)  # the last line
