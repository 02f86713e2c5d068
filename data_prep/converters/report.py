"""What a conversion read, wrote, skipped and left out: every caption record accounted for.

A *caption record* is one caption a source offers: a non-blank line of a caption file
(every line, blank or not, of a line-aligned caption file such as Multi30K's or XTD10's).
Each record ends in exactly one of three places:

- **written** to a split (counted per split and language);
- **skipped** because the input is bad (counted per :data:`SKIP_KINDS` kind, each
  :class:`Issue` naming the file and line);
- **unused** by design (counted per :data:`UNUSED_REASONS` reason: a language that was
  not asked for, the other languages of a training image under ``--assign-languages``...).

So ``records == written + skipped + unused`` always holds; :meth:`ConversionReport.balance`
checks it, the summary prints it, and the tests assert it.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..strict_json import json_text

SUMMARY = "summary.json"

# Bad input, by kind: what the user reads in the summary.
SKIP_KINDS: dict[str, str] = {
    "missing_image": "image named by a caption not found in the image folders",
    "ambiguous_image": "image name fits several files under the image folders (give its path)",
    "unreadable_image": "image file unreadable, truncated or not an image",
    "empty_caption": "caption empty or only whitespace",
    "unknown_language": "language code not ISO 639-1 (mistyped or unknown)",
    "duplicate_key": "the same caption key appears twice (second one skipped)",
    "non_utf8": "line is not valid UTF-8",
    "malformed_line": "line does not follow the layout's format",
    "missing_caption_file": "a listing names a caption file that does not exist",
    "unreadable_file": "caption file cannot be read (e.g. corrupt gzip)",
}

# Records left out on purpose, by reason.
UNUSED_REASONS: dict[str, str] = {
    "language_not_requested": "caption in a language not given to --languages",
    "other_language_of_image": "train/val image assigned another of its languages (--assign-languages)",
    "test_image_missing_language": "source's test image lacks a caption in some requested language",
    "beyond_image_limit": "image left out by --max-images",
    "caption_already_present": "the image already has this text (case, punctuation and spacing ignored)",
    # globetrotter-data more-captions
    "image_not_in_dataset": "caption of an image that is in no split of the dataset",
    "image_in_other_split": "caption of an image in a split not being enriched (val/test)",
    "ambiguous_image_name": "caption's image name fits several images of the dataset (e.g. cat.jpg, cat.png)",
}


@dataclass(frozen=True)
class Issue:
    """One problem in the input: its kind, where (file and 1-based line, if any), and how many records it costs."""

    kind: str
    file: str
    line: int | None
    message: str
    records: int = 1

    def __post_init__(self) -> None:
        if self.kind not in SKIP_KINDS:
            raise ValueError(f"unknown issue kind {self.kind!r}")

    @property
    def where(self) -> str:
        """``file:line`` of the issue, or the file alone when it has no line number."""
        return f"{self.file}:{self.line}" if self.line else str(self.file)

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.message}"


class ConversionReport:
    """Counters and issues of one conversion; turns into the printed summary and ``summary.json``."""

    def __init__(self) -> None:
        self.records = 0
        self.issues: dict[str, list[Issue]] = defaultdict(list)
        self.skipped: Counter = Counter()  # kind -> records
        self.unused: Counter = Counter()  # reason -> records
        self.written: Counter = Counter()  # (split, lang) -> samples
        self.extra_written: Counter = Counter()  # (split, lang) -> samples of extra views (train-parallel)
        self.images: Counter = Counter()  # split -> images written
        self.notes: list[str] = []
        self.renamed_ids: dict[str, str] = {}  # image file -> its id, where the file stem's was taken (-2, -3...)
        self.split_lines: list[str] = []  # where the splits came from (--split-file, --all-to), with counts
        self.timing: dict[str, float] = {}
        self.options: dict[str, Any] = {}

    # -- recording ---------------------------------------------------------------------------
    def add(self, issue: Issue) -> None:
        """File an issue; its records count as skipped under its kind."""
        self.issues[issue.kind].append(issue)
        if issue.records:
            self.skipped[issue.kind] += issue.records

    def leave_out(self, reason: str, records: int = 1) -> None:
        """Count records left out on purpose."""
        if reason not in UNUSED_REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        self.unused[reason] += records

    def note(self, message: str) -> None:
        """A warning for the user (printed with the summary)."""
        self.notes.append(message)

    # -- totals ------------------------------------------------------------------------------
    @property
    def total_written(self) -> int:
        """Samples written over every split and language (the extra views, ``extra_written``, not counted)."""
        return sum(self.written.values())

    @property
    def total_skipped(self) -> int:
        """Records skipped, over every issue kind."""
        return sum(self.skipped.values())

    @property
    def total_issues(self) -> int:
        """Issues filed, of every kind."""
        return sum(len(v) for v in self.issues.values())

    @property
    def total_unused(self) -> int:
        """Records left out on purpose, over every reason."""
        return sum(self.unused.values())

    def balance(self) -> int:
        """``records - written - skipped - unused``: zero when every record is accounted for."""
        return self.records - self.total_written - self.total_skipped - self.total_unused

    # -- output ------------------------------------------------------------------------------
    def format_issues(self, max_examples: int = 5) -> str:
        """The first ``max_examples`` issues of each kind with file:line, then how many more."""
        if max_examples < 0:  # all but the last, then "... and N+1 more" of N: as --show-issues refuses it
            raise ValueError(f"max_examples must be >= 0, got {max_examples}")
        out = []
        for kind in SKIP_KINDS:
            issues = self.issues.get(kind)
            if not issues:
                continue
            out.append(f"{kind} ({SKIP_KINDS[kind]}): {len(issues)} issue(s), {self.skipped[kind]} record(s) skipped")
            out.extend(f"  {issue}" for issue in issues[:max_examples])
            if len(issues) > max_examples:
                out.append(f"  ... and {len(issues) - max_examples} more")
        return "\n".join(out)

    def format_skipped(self) -> str:
        """The skipped records: their total, then per kind its count, what it means and where its first issue is
        (file:line), so that the summary at the end says what was lost and why, not only the issues printed
        before it."""
        lines = [f"skipped (bad input): {self.total_skipped}"]
        for kind, n in sorted(self.skipped.items()):
            issues = self.issues.get(kind, [])
            first = f"; first at {issues[0].where}" if issues else ""
            more = f" ({len(issues)} issue(s))" if len(issues) not in (0, n) else ""
            lines.append(f"  {kind:<28} {n}  {SKIP_KINDS[kind]}{more}{first}")
        return "\n".join(lines)

    def closing_line(self, strict: bool) -> str | None:
        """The last line of a conversion that skipped bad input: how many records, and what the exit status says
        (``--strict``: 1; otherwise 0, the good samples written). None when nothing was skipped."""
        if not self.total_issues:
            return None
        what = (f"{self.total_skipped} caption record(s) skipped as bad input ({self.total_issues} issue(s), by kind "
                f"above; their files and lines in the issues printed before and in summary.json)")
        if strict:
            return f"--strict: {what}; exit status 1"
        return f"note: {what}; the rest was written and the exit status is 0 (--strict makes it 1)"

    def format_account(self, written: str = "written") -> list[str]:
        """The end of a summary: the skipped records (:meth:`format_skipped`), the unused ones by reason, and the
        balance of every caption record (``written``: what the summary calls the written ones, e.g. ``added``)."""
        verdict = "ok" if self.balance() == 0 else f"MISMATCH by {self.balance()}"
        return [self.format_skipped(),
                f"unused (by design): {self.total_unused}"
                + "".join(f"\n  {k:<28} {n}" for k, n in sorted(self.unused.items())),
                f"caption records: {self.records} = {written} {self.total_written} + skipped {self.total_skipped} "
                f"+ unused {self.total_unused} ({verdict})"]

    def print_issues(self, max_examples: int) -> None:
        """Print :meth:`format_issues` on stderr, before the summary (nothing when there is none)."""
        issues = self.format_issues(max_examples)
        if issues:
            print(issues, file=sys.stderr)

    def print_closing(self, strict: bool) -> int:
        """Print the :meth:`closing_line`, when there is one, as the command's last line (stderr with ``--strict``,
        else stdout); returns the exit status: 1 when bad input was skipped under ``--strict``, else 0."""
        closing = self.closing_line(strict)
        if closing:
            print(closing, file=sys.stderr if strict else sys.stdout)
        return 1 if strict and self.total_issues else 0

    def format_summary(self) -> str:
        """A table of written samples per language and split, then skipped and unused counts."""
        splits = [s for s in ("train", "val", "test") if any(k[0] == s for k in self.written)]
        langs = sorted({lang for _, lang in self.written})
        width = max([6] + [len(lang) for lang in langs])
        lines = ["samples written (caption, image pairs):"]
        header = f"  {'lang':<{width}}" + "".join(f"{s:>9}" for s in splits) + f"{'total':>9}"
        lines.append(header)
        for lang in langs:
            row = [self.written[(s, lang)] for s in splits]
            lines.append(f"  {lang:<{width}}" + "".join(f"{n:>9}" for n in row) + f"{sum(row):>9}")
        totals = [sum(self.written[(s, lang)] for lang in langs) for s in splits]
        lines.append(f"  {'total':<{width}}" + "".join(f"{n:>9}" for n in totals) + f"{sum(totals):>9}")
        lines.append(f"  {'images':<{width}}" + "".join(f"{self.images[s]:>9}" for s in splits)
                     + f"{sum(self.images[s] for s in splits):>9}")
        if self.extra_written:
            extra = ", ".join(f"{s}/{lang} {n}" for (s, lang), n in sorted(self.extra_written.items()))
            lines.append(f"extra views (copies of train images, not counted above): {extra}")
        lines.extend(self.format_account())
        lines.extend(self.split_lines)
        if "images_per_s" in self.timing:
            lines.append(f"images: {self.timing['images']:.0f} decoded in {self.timing['image_seconds']:.1f} s "
                         f"({self.timing['images_per_s']:.1f} images/s, {self.timing.get('workers', 1):.0f} worker(s))")
        lines.extend(f"warning: {note}" for note in self.notes)
        return "\n".join(lines)

    def manifest_counts(self) -> dict[str, Any]:
        """The conversion's account, for each split's ``manifest.json`` (``"conversion"``): caption records read,
        written (to every split), skipped as bad input (in total and per kind) and unused by design; the issues
        themselves are in ``summary.json``."""
        return {"caption_records": self.records, "written": self.total_written, "skipped": self.total_skipped,
                "skipped_by_kind": dict(sorted(self.skipped.items())), "unused": self.total_unused}

    def to_json(self, max_examples: int = 20) -> dict:
        """Everything in the summary, plus up to ``max_examples`` issues per kind, as a JSON-able dict."""
        written: dict[str, dict[str, int]] = defaultdict(dict)
        for (split, lang), n in sorted(self.written.items()):
            written[split][lang] = n
        extra: dict[str, dict[str, int]] = defaultdict(dict)
        for (split, lang), n in sorted(self.extra_written.items()):
            extra[split][lang] = n
        return {
            "records": self.records,
            "written": dict(written),
            "written_total": self.total_written,
            "images": dict(self.images),
            "extra_views": dict(extra),
            "skipped": dict(self.skipped),
            "skipped_total": self.total_skipped,
            "unused": dict(self.unused),
            "unused_total": self.total_unused,
            "balanced": self.balance() == 0,
            "issues": {kind: {"count": len(v), "examples": [asdict(i) for i in v[:max_examples]]}
                       for kind, v in self.issues.items()},
            "notes": list(self.notes),
            "renamed_ids": dict(self.renamed_ids),
            "split_sources": list(self.split_lines),
            "timing": dict(self.timing),
            "options": dict(self.options),
        }

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8, indented), with the :func:`~data_prep.versions.versions` it was
        made with."""
        from ..versions import versions

        record = {**self.to_json(), "versions": versions()}
        Path(path).write_text(json_text(record, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
