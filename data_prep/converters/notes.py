"""The warnings a conversion adds to its report, and why it found nothing usable, worded from what it read."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from .gather import GatheredImage
from .images import ImageResolver
from .report import ConversionReport, Issue
from .splits import ImageInfo, SplitPlan


def region_note(by_id: dict[str, GatheredImage]) -> str | None:
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


def lacking_note(incomplete: Sequence[str], infos: dict[str, ImageInfo], languages: Sequence[str]) -> str | None:
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


def encoding_note(report: ConversionReport) -> str | None:
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


def unbalanced_note(plan: SplitPlan, unreadable: set[str]) -> str | None:
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


def counts_by_kind(counter: Counter) -> str:
    """``"3 missing_image, 1 unknown_language"``: a counter's kinds, most records first."""
    return ", ".join(f"{n} {kind}" for kind, n in counter.most_common())


def first_issue(report: ConversionReport) -> Issue | None:
    """The first issue of the kind that cost the most records (of any kind when none cost a record)."""
    kinds = [kind for kind, _ in report.skipped.most_common()] or [k for k, v in report.issues.items() if v]
    return report.issues[kinds[0]][0] if kinds else None


def nothing_usable_message(report: ConversionReport, resolver: ImageResolver, source_args: dict) -> str:
    """Why no caption record is usable, in one line: the caption sources (``source_args``, as the summary lists them)
    when they hold none; else the records skipped or left out by kind, an example, and for images not found, some
    file names the image folders do hold."""
    if not report.records:
        given = [str(s) for key, values in source_args.items() if key not in ("caption_sha256", "multi30k_tasks")
                 for s in values]
        named = f" ({', '.join(given)})" if given else ""
        return f"nothing to convert: the caption sources{named} hold no caption record; nothing written"
    line = (f"nothing to convert: none of the {report.records} caption record(s) is usable "
            f"({counts_by_kind(report.skipped + report.unused)})")
    first = first_issue(report)
    if first is not None:
        line += f"; e.g. {first}"
    if first is not None and first.kind == "missing_image":
        names = resolver.some_names()
        roots = ", ".join(map(str, resolver.roots))
        line += (f"; the image folders hold e.g. {', '.join(map(repr, names))}" if names else
                 f"; the image folders ({roots}) hold no image file" if roots else
                 "; no --images folder was given (image names are read as paths from the caption file's folder)")
    return line + "; nothing written"
