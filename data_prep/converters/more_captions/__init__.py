"""``globetrotter-data more-captions``: more same-language captions for the images of a converted dataset.

A conversion under ``--assign-languages`` gives each train (and val) image one language and
keeps only the captions the sources have for it in that language; with Multi30K task 1
that is one caption per image, while the sources often hold five or more for the same
image and language (Multi30K task 2: five independent en and de captions; the Flickr8k
token file: five en; Flickr8k-CN: five zh). More captions of an image *in its own
language* are still no parallel text (the Globetrotter rule: train/val show each image in
exactly one language), and they help a lot on real data.

``--splits`` may also name ``train-parallel``, the supervised twins' split (each train image
in several languages, tied by group): each of its images gains the captions the sources have
in the languages it already has there, tied to its group, so the twins see as many captions per
image and language as the full model. The shipped twins do not use it: with alpha = 1 for any two
captions of one image, most of their pairs are then not translations (docs/results.md).

This command reads an existing dataset (``--data``) and the same sources the converters
take (read by the same readers, images matched to the dataset's image ids by file name,
stem and Flickr photo id, as :class:`~data_prep.converters.images.ImageResolver` does; a
stem that several converted files shared, ids ``cat`` and ``cat-2``, matches none of them),
and writes a new dataset folder (``--out``) whose enriched splits (``train``; ``val`` too
with ``--splits train,val``) hold every caption of the original split plus every caption
the sources have for each of its images in that image's language, once per text (case,
punctuation and spacing ignored, so ``"entry way."`` and ``"entry way ."`` count once).
Captions in another language of an image are never added (``check_split_rule`` still
passes). The images are not decoded again: each sample's image bytes are copied from the
original shards, so image ids and pixels are unchanged and a feature cache of the original
split (keyed by image id) serves the new one (``data.features: <data>/train/features``).
Everything else of ``--data`` (``test/``, ``val/`` and ``train-parallel/`` unless ``--splits`` names them,
``tokenizer.json``...) is linked (``--copy``: copied), so test figures stay comparable.

Every source caption record is accounted for as in a conversion: added, skipped (bad
input, with file and line) or unused (image not in an enriched split, another language,
same text already there).

The modules: :mod:`.gather` (which captions are added), :mod:`.write` (the new dataset),
:mod:`.summary` (what is printed); this one holds the command.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

from data_prep.errors import UserError
from data_prep.out_folder import lock_out_folder
from data_prep.shards import MANIFEST, read_manifest

from ..cli import (add_source_arguments, caption_sources, existing_dir, language_list, non_negative_int,
                   source_options)
from ..gather import same_text
from ..report import SUMMARY, ConversionReport
from .gather import Matcher, gather, load_split, split_of_images
from .summary import format_rest, format_table
from .write import COMMAND, check_paths, write_dataset

__all__ = ["COMMAND", "ENRICHABLE", "more_captions", "register", "same_text"]

ENRICHABLE = ("train", "val", "train-parallel")

EXAMPLE = (
    "globetrotter-data more-captions --data outputs/flickr8k "
    "--multi30k FLICKR8K/multi30k --multi30k-tasks 1,2 "
    "--flickr8k FLICKR8K/flickr8k/Flickr8k.token.txt:en "
    "--flickr8k FLICKR8K/flickr8kcn/flickr8kzhc.caption.txt:zh "
    "--out outputs/flickr8k-more"
)
EXAMPLE_FOLDERS = ("FLICKR8K stands for the folder of your copy of the data: multi30k/ (Multi30K's data folder), "
                   "flickr8k/ (the Flickr8k token file) and flickr8kcn/ (the Flickr8k-CN caption files).")


def more_captions(args: argparse.Namespace) -> int:
    """Run the command from parsed arguments (see module docstring); exit code 0, or 1 under --strict with bad input.
    A second command writing the same ``--out`` meanwhile is refused (:func:`~data_prep.out_folder.lock_out_folder`)."""
    with lock_out_folder(args.out):
        return _more_captions(args)


def _more_captions(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    data, out = Path(args.data), Path(args.out)
    if not (args.multi30k or args.flickr8k or args.captions):
        raise UserError(f"{COMMAND} needs at least one source: --multi30k, --flickr8k or --captions")
    if args.shard_size < 1:
        raise UserError(f"--shard-size must be positive, got {args.shard_size}")
    check_paths(data, out, args.overwrite)
    if args.images:
        print("note: --images is not used: image bytes are copied from the shards of --data", file=sys.stderr)

    check_splits(data, args.splits)
    states = {name: load_split(data / name, name) for name in args.splits}
    matcher = Matcher(split_of_images(data, states))
    report = ConversionReport()
    sources, names = caption_sources(args)
    gather(sources, states, matcher, args.languages, report, not args.no_progress)
    check_usable(report, [*map(str, args.multi30k), *(str(f) for f, _ in args.flickr8k), *map(str, args.captions)])
    report.timing["read_seconds"] = time.perf_counter() - start
    if report.total_written == 0:
        report.note("no caption to add: the new splits equal the original ones")
    report.options = {
        "data": str(data), "out": str(out), "splits": list(args.splits), "languages": args.languages,
        **source_options(args), "copy": args.copy, "shard_size": args.shard_size, "check": not args.no_check,
    }
    reused = write_dataset(data, out, states, report, names, args.shard_size, start, check=not args.no_check,
                           copy=args.copy, progress=not args.no_progress)

    report.print_issues(args.show_issues)
    lines = []
    for state in states.values():
        lines.extend(format_table(state))
    lines.extend(format_rest(report))
    if reused:
        how = "copied" if args.copy else "linked"
        lines.append(f"{how} from {data}: {', '.join(reused)}")
    print("\n".join(lines))
    print(f"dataset: {out}  (summary: {out / SUMMARY}); {report.timing['total_seconds']:.1f} s")
    if "train" in states and (data / "train" / "features").is_dir():
        print(feature_cache_line(data / "train", out / "train"))
    return report.print_closing(args.strict)  # the last line


def feature_cache_line(original: Path, enriched: Path) -> str:
    """What to say of the feature cache in ``original/features``: that it serves ``enriched`` (same image ids and
    bytes) when its ``cache.json`` records the checksum of ``original`` or of ``enriched`` (the splits a trainer
    accepts it for) or none (a cache older than the record), else how to rebuild it, training refusing it: a folder
    without a readable ``cache.json`` is no cache, and one built from another split (a train split converted again
    with ``--overwrite`` keeps its old cache folder) holds other images."""
    cache = original / "features"
    rebuild = f"rebuild it with globetrotter-data features build {original} --config CONFIG --out {cache} --overwrite"
    try:
        record = json.loads((cache / "cache.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        return f"note: {cache} holds no readable cache.json, so it is no feature cache: training refuses it; {rebuild}"
    built = record.get("split_checksum")
    current = {read_manifest(original).get("checksum"), read_manifest(enriched).get("checksum")}
    if built is None or built in current:
        return (f"the feature cache of the original train split serves the new one (same image ids and bytes): "
                f"data.features={cache.resolve()}")
    return (f"note: the feature cache {cache} was built from a split of checksum {built}, neither {original}'s nor "
            f"the new train split's: training refuses it; {rebuild}")


def check_splits(data: Path, splits: list[str]) -> None:
    """One-line error naming --data (or --splits) when a split to enrich is not in ``data``."""
    for name in splits:
        if (data / name / MANIFEST).is_file():
            continue
        if (data / MANIFEST).is_file():
            raise UserError(f"--data {data}: is a split folder itself; give the converted dataset folder holding "
                            f"{name}/ (its parent, {data.resolve().parent})")
        if name != "train" and (data / "train" / MANIFEST).is_file():
            raise UserError(f"--splits names {name}, but --data {data} has no {name}/ split")
        raise UserError(f"--data {data}: no {name}/{MANIFEST} (expected a converted dataset: train/, val/, test/ "
                        "split folders written by globetrotter-data)")


def check_usable(report: ConversionReport, sources: list[str]) -> None:
    """One-line error when the sources gave no usable caption record at all (empty, or every record bad input:
    a file of another format), before anything is written."""
    if report.total_written or report.total_unused:
        return
    if not report.records:
        raise UserError(f"{', '.join(sources)}: no caption record read (empty source?)")
    first = next(issue for issues in report.issues.values() for issue in issues)
    raise UserError(f"none of the {report.records} caption record(s) of {', '.join(sources)} is usable, all bad input "
                    f"(a file of another format?); first: {first}")


def _splits(value: str) -> list[str]:
    names = list(dict.fromkeys(s.strip() for s in value.split(",") if s.strip()))
    bad = [s for s in names if s not in ENRICHABLE]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected some of train, val, train-parallel (comma-separated), got {value!r} (test stays as it is: "
            "parallel ground truth)")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``more-captions`` to ``globetrotter-data``."""
    description = textwrap.fill(
        "Give the train images of a converted dataset more captions in their own language. A conversion with "
        "--assign-languages keeps, for each train image, only its captions in the one language it was given; "
        "with Multi30K task 1 that is one caption per image, while the sources hold about five more per image "
        "and language (Multi30K task 2: five independent en and de; the Flickr8k token file: five en; "
        "Flickr8k-CN: five zh). More monolingual captions per image are no parallel text: each image is still "
        "shown in exactly one language (the Globetrotter rule holds and is checked); what they change on real data "
        "is in docs/results.md. --splits train,train-parallel gives the supervised twins' "
        "split the same (each of its images more captions in the languages it already has, tied to its group), "
        "so the twins see as many captions per image and language as the full model (a control: the shipped twins "
        "train on translations alone, docs/results.md).", width=88) + "\n\n" + textwrap.fill(
        "Writes a NEW dataset folder: each split named in --splits (default: train) holds every caption of "
        "--data's split plus every caption the sources have for each of its images in that image's language, "
        "each text once (case, punctuation and spacing ignored); captions in other languages are never added. "
        "Image bytes are copied from the original shards (nothing is decoded again), so image ids are the same "
        "and the original train split's feature cache can be reused (data.features: <data>/train/features). "
        "Everything else of --data (test/, val/ and train-parallel/ unless named in --splits, tokenizer.json...) "
        "is a symlink to the original (--copy: a copy), so test figures stay comparable. Every source caption is accounted "
        "for: added, skipped (bad input, with file and line) or unused (image not in an enriched split, another "
        "language, same text already there).", width=88)
    parser = subparsers.add_parser(
        COMMAND, help="more captions per train image, in its own language only (no parallel text)",
        description=description, epilog="example:\n  " + " \\\n      --".join(EXAMPLE.split(" --")) + "\n\n" +
        textwrap.fill(EXAMPLE_FOLDERS, 88),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", type=existing_dir, required=True, metavar="DIR",
                        help="converted dataset (train/ with one language per image; val/, test/...)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="new dataset folder to write (must not exist, or be empty)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier more-captions output in --out")
    parser.add_argument("--copy", action="store_true",
                        help="copy everything of --data not in --splits (test/, tokenizer.json...) instead of linking it")
    parser.add_argument("--splits", type=_splits, default=["train"], metavar="SPLITS",
                        help="splits to enrich, comma-separated: train, val, train-parallel (default: train); the "
                             "others are linked as they are")
    parser.add_argument("--languages", type=language_list, default=None, metavar="CODES",
                        help="comma-separated languages to add captions in (default: every language)")
    src = parser.add_argument_group("sources (each repeatable; as in the converters)")
    add_source_arguments(src, ("multi30k", "flickr8k", "captions"),
                         captions_image="image is matched to the dataset's image ids by its file stem or Flickr photo "
                                        "id, as the other sources' images are; a split column is ignored (the "
                                        "dataset's splits stand)")
    src.add_argument("--images", type=existing_dir, action="append", default=[], metavar="DIR",
                     help="not needed (accepted so a converter command line can be reused): images are matched "
                          "to the dataset's image ids and their bytes come from its shards")
    parser.add_argument("--shard-size", type=int, default=2000, metavar="N",
                        help="samples per .tar shard (default 2000)")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when any bad input was found (the dataset is still written)")
    parser.add_argument("--show-issues", type=non_negative_int, default=5, metavar="N",
                        help="print the first N issues of each kind (file:line) (default 5)")
    parser.add_argument("--no-check", action="store_true", help="skip re-reading the new splits to check the rule")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=more_captions, globetrotter=[], xtd10=[])
