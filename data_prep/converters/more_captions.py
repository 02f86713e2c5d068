"""``globetrotter-data more-captions``: more same-language captions for the images of a converted dataset.

A conversion under ``--assign-languages`` gives each train (and val) image one language and
keeps only the captions the sources have for it in that language; with Multi30K task 1
that is one caption per image, while the sources often hold five or more for the same
image and language (Multi30K task 2: five independent en and de captions; the Flickr8k
token file: five en; Flickr8k-CN: five zh). More captions of an image *in its own
language* are still no parallel text (the Globetrotter rule: train/val show each image in
exactly one language), and they help a lot on real data.

This command reads an existing dataset (``--data``) and the same sources the converters
take (read by the same readers, images matched to the dataset's image ids by file name,
stem and Flickr photo id, as :class:`~data_prep.converters.images.ImageResolver` does),
and writes a new dataset folder (``--out``) whose enriched splits (``train``; ``val`` too
with ``--splits train,val``) hold every caption of the original split plus every caption
the sources have for each of its images in that image's language, once per text (case,
punctuation and spacing ignored, so ``"entry way."`` and ``"entry way ."`` count once).
Captions in another language of an image are never added (``check_split_rule`` still
passes). The images are not decoded again: each sample's image bytes are copied from the
original shards, so image ids and pixels are unchanged and a feature cache of the original
split (keyed by image id) serves the new one (``data.features: <data>/train/features``).
Everything else of ``--data`` (``val/``, ``test/``, ``train-parallel/``, ``tokenizer.json``...)
is linked (``--copy``: copied), so test figures stay comparable.

Every source caption record is accounted for as in a conversion: added, skipped (bad
input, with file and line) or unused (image not in an enriched split, another language,
same text already there).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from data_prep.errors import UserError
from data_prep.shards import MANIFEST, SPLITS, ShardWriter, check_split_rule, iter_raw, read_captions, read_manifest

from .cli import _existing_dir, _language_list, _sources, add_source_arguments
from .common import Record
from .images import _stem, flickr_photo_id
from .pipeline import _KEY_UNSAFE, SUMMARY, checked_records, safe_id
from .report import ConversionReport

COMMAND = "more-captions"
ENRICHABLE = ("train", "val")
_WORD = re.compile(r"\w+")

EXAMPLE = (
    "globetrotter-data more-captions --data outputs/flickr8k "
    "--multi30k ../shared/data/flickr8k/multi30k --multi30k-tasks 1,2 "
    "--flickr8k ../shared/data/flickr8k/flickr8k/Flickr8k.token.txt:en "
    "--flickr8k ../shared/data/flickr8k/flickr8kcn/flickr8kzhc.caption.txt:zh "
    "--out outputs/flickr8k-more"
)


def same_text(text: str) -> str:
    """What two captions must share to count as the same text: their words, case-folded (punctuation and spacing ignored)."""
    return " ".join(_WORD.findall(text.casefold()))


@dataclass
class _Split:
    """One split to enrich: its images' languages and texts, what it held and what is added."""

    name: str
    manifest: dict
    lang_of: dict[str, str] = field(default_factory=dict)  # image id -> its one language
    texts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # image id -> same_text keys
    per_image_lang: Counter = field(default_factory=Counter)  # (image id, lang) -> captions so far
    samples: Counter = field(default_factory=Counter)  # image id -> samples in the original split
    keys: set[str] = field(default_factory=set)
    before: Counter = field(default_factory=Counter)  # lang -> captions in the original split
    added: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))  # image id -> (lang, text)


def _load_split(split_dir: Path, name: str) -> _Split:
    manifest = read_manifest(split_dir)  # one-line UserError when the split is missing
    state = _Split(name, manifest)
    for meta in read_captions(split_dir):
        image_id, lang = str(meta["image_id"]), meta["lang"]
        first = state.lang_of.setdefault(image_id, lang)
        if first != lang:
            raise UserError(f"{split_dir}: image {image_id!r} has captions in {first} and {lang}; more-captions needs a "
                            f"{name} split with one language per image (convert with --assign-languages)")
        state.texts[image_id].add(same_text(meta["caption"]))
        state.per_image_lang[(image_id, lang)] += 1
        state.samples[image_id] += 1
        state.keys.add(meta["key"])
        state.before[lang] += 1
    return state


def _image_ids(split_dir: Path) -> set[str]:
    return {str(m["image_id"]) for m in read_captions(split_dir)}


class _Matcher:
    """Find the dataset image a caption names: by image id (= file stem), then by Flickr photo id."""

    def __init__(self, split_of: dict[str, str]) -> None:
        self.split_of = split_of
        self.by_photo: dict[str, str] = {}
        for image_id in sorted(split_of):
            photo = flickr_photo_id(image_id)
            if photo is not None:
                self.by_photo.setdefault(photo, image_id)

    def match(self, candidates: Iterable[str]) -> str | None:
        stems = [_stem(os.path.basename(c)) for c in candidates if c]
        for stem in stems:
            for image_id in (stem, safe_id(stem)):
                if image_id in self.split_of:
                    return image_id
        for stem in stems:
            photo = flickr_photo_id(stem)
            if photo is not None and photo in self.by_photo:
                return self.by_photo[photo]
        return None


def _gather(sources: Iterable[Iterable[Record]], states: dict[str, _Split], matcher: _Matcher,
            languages: list[str] | None, report: ConversionReport, progress: bool) -> None:
    """Check every record like a conversion does; file the captions to add under their image."""
    for item in checked_records(sources, report, languages, progress):
        lang, text = item.lang, item.text
        image_id = matcher.match(item.images)
        if image_id is None:
            report.leave_out("image_not_in_dataset")
            continue
        state = states.get(matcher.split_of[image_id])
        if state is None:
            report.leave_out("image_in_other_split")
            continue
        if state.lang_of[image_id] != lang:
            report.leave_out("other_language_of_image")
            continue
        key = same_text(text)
        if key in state.texts[image_id]:
            report.leave_out("caption_already_present")
            continue
        state.texts[image_id].add(key)
        state.added[image_id].append((lang, text))
        report.written[(state.name, lang)] += 1


def _new_key(state: _Split, image_id: str, lang: str) -> str:
    """``<image id>-<lang>-<n>``, the converters' scheme, n continuing after the image's captions in ``lang``."""
    base = f"{safe_id(image_id)}-{_KEY_UNSAFE.sub('_', lang)}"
    while True:
        n = state.per_image_lang[(image_id, lang)]
        state.per_image_lang[(image_id, lang)] += 1
        key = f"{base}-{n}"
        if key not in state.keys:
            state.keys.add(key)
            return key


_OWN_MANIFEST_KEYS = ("split", "source", "num_samples", "shards", "languages", "image_format", "checksum")


def _write_split(src: Path, dst: Path, state: _Split, shard_size: int, source_names: list[str],
                 report: ConversionReport, progress: bool) -> dict:
    """Copy every sample of ``src`` and, after the last sample of each image, its added captions (same image bytes)."""
    manifest = state.manifest
    fmt = manifest.get("image_format", "jpg")
    added = Counter(lang for caps in state.added.values() for lang, _ in caps)
    extra = {k: v for k, v in manifest.items() if k not in _OWN_MANIFEST_KEYS and k != "more_captions"}
    extra["more_captions"] = {
        "from": str(src.resolve()), "original_checksum": manifest.get("checksum"),
        "original_num_samples": manifest["num_samples"], "added": dict(sorted(added.items())),
        "sources": source_names, "same_text": "words compared case-folded, punctuation and spacing ignored",
        "note": "captions added only in each image's own language (no parallel text); image bytes copied "
                "from the original shards, so image ids and a feature cache of the original split carry over",
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
                writer.write(_new_key(state, image_id, lang), data, text, lang, image_id)
                bar.update()
    bar.close()
    report.images[state.name] = len(written_images)
    return read_manifest(dst)


def _check_paths(data: Path, out: Path, overwrite: bool) -> None:
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


def _format_table(state: _Split, report: ConversionReport) -> list[str]:
    langs = sorted(set(state.before) | {lang for (s, lang) in report.written if s == state.name})
    width = max([6] + [len(lang) for lang in langs])
    n_images = len(state.lang_of)
    with_added = sum(1 for caps in state.added.values() if caps)
    lines = [f"{state.name}: captions per language ({n_images} images, {with_added} got more captions)",
             f"  {'lang':<{width}}{'images':>9}{'before':>9}{'added':>9}{'after':>9}{'per img':>9}"]
    images_of = Counter(state.lang_of.values())
    rows = []
    for lang in langs:
        before, added = state.before[lang], report.written[(state.name, lang)]
        rows.append((lang, images_of[lang], before, added))
    rows.append(("total", n_images, sum(r[2] for r in rows), sum(r[3] for r in rows)))
    for lang, images, before, added in rows:
        per = f"{(before + added) / images:.2f}" if images else "-"
        lines.append(f"  {lang:<{width}}{images:>9}{before:>9}{added:>9}{before + added:>9}{per:>9}")
    return lines


def _format_rest(report: ConversionReport) -> list[str]:
    lines = [f"skipped (bad input): {report.total_skipped}"
             + "".join(f"\n  {k:<28} {n}" for k, n in sorted(report.skipped.items())),
             f"unused (by design): {report.total_unused}"
             + "".join(f"\n  {k:<28} {n}" for k, n in sorted(report.unused.items()))]
    verdict = "ok" if report.balance() == 0 else f"MISMATCH by {report.balance()}"
    lines.append(f"caption records: {report.records} = added {report.total_written} + skipped "
                 f"{report.total_skipped} + unused {report.total_unused} ({verdict})")
    lines.extend(f"warning: {note}" for note in report.notes)
    return lines


def more_captions(args: argparse.Namespace) -> int:
    """Run the command from parsed arguments (see module docstring); exit code 0, or 1 under --strict with bad input."""
    start = time.perf_counter()
    data, out = Path(args.data), Path(args.out)
    if not (args.multi30k or args.flickr8k or args.captions):
        raise UserError(f"{COMMAND} needs at least one source: --multi30k, --flickr8k or --captions")
    if args.shard_size < 1:
        raise UserError(f"--shard-size must be positive, got {args.shard_size}")
    _check_paths(data, out, args.overwrite)
    if args.images:
        print("note: --images is not used: image bytes are copied from the shards of --data", file=sys.stderr)

    states = {name: _load_split(data / name, name) for name in args.splits}
    split_of = {image_id: name for name, st in states.items() for image_id in st.lang_of}
    for name in SPLITS:  # images of the other splits: their captions are unused, not missing
        if name not in states and (data / name / MANIFEST).is_file():
            for image_id in _image_ids(data / name):
                split_of.setdefault(image_id, name)
    report = ConversionReport()
    sources, names = _sources(args)
    _gather(sources, states, _Matcher(split_of), args.langs, report, not args.quiet)
    report.timing["read_seconds"] = time.perf_counter() - start
    if report.total_written == 0:
        report.note("no caption to add: the new splits equal the original ones")

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
            manifest = _write_split(data / name, stage / name, state, args.shard_size, names, report,
                                    not args.quiet)
            if not args.no_check:
                check_split_rule(stage / name, name)
            splits_info[name] = {
                "images": len(state.lang_of),
                "images_with_added": sum(1 for caps in state.added.values() if caps),
                "before": dict(sorted(state.before.items())),
                "added": {lang: n for (s, lang), n in sorted(report.written.items()) if s == name},
                "after": manifest["languages"],
                "num_samples": {"before": state.manifest["num_samples"], "after": manifest["num_samples"]},
                "checksum": {"before": state.manifest.get("checksum"), "after": manifest["checksum"]},
            }
        report.timing["write_seconds"] = time.perf_counter() - t0
        for entry in sorted(data.iterdir()):
            if entry.name in states or entry.name == SUMMARY or entry.name.startswith("."):
                continue
            reused[entry.name] = _link_or_copy(entry, stage / entry.name, final, args.copy)
        report.timing["total_seconds"] = time.perf_counter() - start
        report.options = {
            "data": str(data), "out": str(out), "splits": list(args.splits), "languages": args.langs,
            "multi30k": [str(p) for p in args.multi30k], "multi30k_tasks": list(args.multi30k_tasks),
            "flickr8k": [f"{p}:{lang}" for p, lang in args.flickr8k], "captions": [str(p) for p in args.captions],
            "copy": args.copy, "shard_size": args.shard_size, "check": not args.no_check,
        }
        summary = {"command": COMMAND, "data": str(data.resolve()), "splits": splits_info, "reused": reused,
                   "original_summary": str((data / SUMMARY).resolve()) if (data / SUMMARY).is_file() else None,
                   **report.to_json()}
        (stage / SUMMARY).write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n",
                                     encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)  # checked above: empty, or an earlier more-captions output under --overwrite
        os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise

    issues = report.format_issues(args.show_issues)
    if issues:
        print(issues, file=sys.stderr)
    lines = []
    for state in states.values():
        lines.extend(_format_table(state, report))
    lines.extend(_format_rest(report))
    if reused:
        how = "copied" if args.copy else "linked"
        lines.append(f"{how} from {data}: {', '.join(reused)}")
    print("\n".join(lines))
    print(f"dataset: {out}  (summary: {out / SUMMARY}); {report.timing['total_seconds']:.1f} s")
    if "train" in states and (data / "train" / "features").is_dir():
        print(f"the feature cache of the original train split serves the new one (same image ids and bytes): "
              f"data.features={(data / 'train' / 'features').resolve()}")
    if args.strict and report.total_issues:
        print(f"--strict: {report.total_issues} bad-input issue(s), {report.total_skipped} caption record(s) "
              "skipped", file=sys.stderr)
        return 1
    return 0


def _splits(value: str) -> list[str]:
    names = list(dict.fromkeys(s.strip() for s in value.split(",") if s.strip()))
    bad = [s for s in names if s not in ENRICHABLE]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"expected train, val or train,val, got {value!r} (test stays as it is: parallel ground truth)")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``more-captions`` to ``globetrotter-data``."""
    description = textwrap.fill(
        "Give the train images of a converted dataset more captions in their own language. A conversion with "
        "--assign-languages keeps, for each train image, only its captions in the one language it was given; "
        "with Multi30K task 1 that is one caption per image, while the sources hold about five more per image "
        "and language (Multi30K task 2: five independent en and de; the Flickr8k token file: five en; "
        "Flickr8k-CN: five zh). More monolingual captions per image are no parallel text: each image is still "
        "shown in exactly one language (the Globetrotter rule holds and is checked), and more ways of saying "
        "what an image shows help a lot on real data.", width=88) + "\n\n" + textwrap.fill(
        "Writes a NEW dataset folder: its train split holds every caption of --data's train split plus every "
        "caption the sources have for each train image in that image's language, each text once (case, "
        "punctuation and spacing ignored); captions in other languages are never added. Image bytes are "
        "copied from the original shards (nothing is decoded again), so image ids are the same and the "
        "original train split's feature cache can be reused (data.features: <data>/train/features). val/, "
        "test/, train-parallel/ and tokenizer.json are symlinks to the originals (--copy: copies), so test "
        "figures stay comparable. Every source caption is accounted for: added, skipped (bad input, with file "
        "and line) or unused (image not in train, another language, same text already there).", width=88)
    parser = subparsers.add_parser(
        COMMAND, help="more captions per train image, in its own language only (no parallel text)",
        description=description, epilog="example:\n  " + " \\\n      --".join(EXAMPLE.split(" --")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", type=_existing_dir, required=True, metavar="DIR",
                        help="converted dataset (train/ with one language per image; val/, test/...)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="new dataset folder to write (must not exist, or be empty)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier more-captions output in --out")
    parser.add_argument("--copy", action="store_true",
                        help="copy val/, test/, train-parallel/, tokenizer.json... instead of linking them")
    parser.add_argument("--splits", type=_splits, default=["train"], metavar="train|train,val",
                        help="splits to enrich (default: train); the others are linked as they are")
    parser.add_argument("--langs", type=_language_list, default=None, metavar="CODES",
                        help="add captions only in these languages (default: every language)")
    src = parser.add_argument_group("sources (each repeatable; as in the converters)")
    add_source_arguments(src, ("multi30k", "flickr8k", "captions"))
    src.add_argument("--images", type=_existing_dir, action="append", default=[], metavar="DIR",
                     help="not needed (accepted so a converter command line can be reused): images are matched "
                          "to the dataset's image ids and their bytes come from its shards")
    parser.add_argument("--shard-size", type=int, default=2000, metavar="N",
                        help="samples per .tar shard (default 2000)")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when any bad input was found (the dataset is still written)")
    parser.add_argument("--show-issues", type=int, default=5, metavar="N",
                        help="print the first N issues of each kind (file:line) (default 5)")
    parser.add_argument("--no-check", action="store_true", help="skip re-reading the new splits to check the rule")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=more_captions, globetrotter=[], xtd10=[])
