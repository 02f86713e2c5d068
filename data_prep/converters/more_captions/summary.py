"""What ``more-captions`` prints: captions per language of each enriched split, before, added and after, and
the account of every source caption record."""
from __future__ import annotations

from collections import Counter

from ..report import ConversionReport
from .gather import EnrichedSplit


def format_table(state: EnrichedSplit, report: ConversionReport) -> list[str]:
    """The table of ``state``'s captions per language: images, before, added, after, per image."""
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


def format_rest(report: ConversionReport) -> list[str]:
    """Skipped and unused records by reason, the balance of all records, and the warnings."""
    lines = [f"skipped (bad input): {report.total_skipped}"
             + "".join(f"\n  {k:<28} {n}" for k, n in sorted(report.skipped.items())),
             f"unused (by design): {report.total_unused}"
             + "".join(f"\n  {k:<28} {n}" for k, n in sorted(report.unused.items()))]
    verdict = "ok" if report.balance() == 0 else f"MISMATCH by {report.balance()}"
    lines.append(f"caption records: {report.records} = added {report.total_written} + skipped "
                 f"{report.total_skipped} + unused {report.total_unused} ({verdict})")
    lines.extend(f"warning: {note}" for note in report.notes)
    return lines
