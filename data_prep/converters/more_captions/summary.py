"""What ``more-captions`` prints: captions per language of each enriched split, before, added and after, and
the account of every source caption record."""
from __future__ import annotations

from collections import Counter

from ..report import ConversionReport
from .gather import EnrichedSplit


def format_table(state: EnrichedSplit) -> list[str]:
    """The table of ``state``'s captions per language: images, before, added, after, per image."""
    added_of = state.added_per_language()
    langs = sorted(set(state.before) | set(added_of))
    width = max([6] + [len(lang) for lang in langs])
    n_images = len(state.langs_of)
    with_added = sum(1 for caps in state.added.values() if caps)
    lines = [f"{state.name}: captions per language ({n_images} images, {with_added} got more captions)",
             f"  {'lang':<{width}}{'images':>9}{'before':>9}{'added':>9}{'after':>9}{'per img':>9}"]
    images_of = Counter(lang for langs_of_image in state.langs_of.values() for lang in langs_of_image)
    rows = []
    for lang in langs:
        rows.append((lang, images_of[lang], state.before[lang], added_of[lang]))
    rows.append(("total", n_images, sum(r[2] for r in rows), sum(r[3] for r in rows)))  # images, not image-languages
    for lang, images, before, added in rows:
        per = f"{(before + added) / images:.2f}" if images else "-"
        lines.append(f"  {lang:<{width}}{images:>9}{before:>9}{added:>9}{before + added:>9}{per:>9}")
    return lines


def format_rest(report: ConversionReport) -> list[str]:
    """Skipped and unused records by reason, the balance of all records, and the warnings."""
    lines = report.format_account(written="added")
    if report.extra_written:
        copies = ", ".join(f"{split}/{lang} {n}" for (split, lang), n in sorted(report.extra_written.items()))
        lines.append(f"  and added records copied into a second split that holds their image: {copies}")
    lines.extend(f"warning: {note}" for note in report.notes)
    return lines
