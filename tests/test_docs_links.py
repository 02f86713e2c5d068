"""Relative links of README.md and docs/*.md resolve: the linked file exists and its ``#anchor`` is a heading there.

Anchors follow GitHub's rule (lower case; letters, digits, spaces, ``-`` and ``_`` kept, the rest dropped; spaces
become ``-``; a repeated heading gets ``-1``, ``-2``, ...). Headings inside fenced code blocks are not headings.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of a markdown text, fenced code blocks left out."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> set[str]:
    """Every anchor that a heading of ``path`` defines."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = re.match(r"#{1,6}\s+(.*)", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links() -> list[tuple[str, Path, str]]:
    """(file:line, linked file, anchor or '') of every relative link in the docs."""
    links = []
    for doc in DOC_FILES:
        for number, line in prose_lines(doc.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path_part, _, anchor = target.partition("#")
                linked = (doc.parent / path_part).resolve() if path_part else doc
                links.append((f"{doc.relative_to(ROOT)}:{number}", linked, anchor))
    return links


def test_slug_follows_github_rule():
    assert slug("What bounds the full model: its image features") == "what-bounds-the-full-model-its-image-features"
    assert slug("Zero-shot cross-lingual retrieval (XTD10 system)") == "zero-shot-cross-lingual-retrieval-xtd10-system"
    assert slug("Would a better g make val's choices?") == "would-a-better-g-make-vals-choices"
    assert slug("Sentence correspondence transfer (`eval.py correspondence`)") == (
        "sentence-correspondence-transfer-evalpy-correspondence")


def test_anchors_skip_code_blocks_and_number_repeats(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n```bash\n# not a heading\n```\n\n## Part\n\n## Part\n", encoding="utf-8")
    assert anchors(page) == {"title", "part", "part-1"}


@pytest.mark.parametrize("where,linked,anchor", relative_links(), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_relative_link_resolves(where, linked, anchor):
    assert linked.exists(), f"{where}: links to {linked.relative_to(ROOT)}, which does not exist"
    if anchor and linked.suffix == ".md":
        assert anchor in anchors(linked), f"{where}: no heading of {linked.relative_to(ROOT)} has the anchor #{anchor}"
