"""``globetrotter-data inspect``: languages, scripts, counts and samples of a split; a contact sheet."""
from __future__ import annotations

import argparse
import sys
import unicodedata
from collections import Counter, defaultdict
from itertools import islice
from pathlib import Path
from typing import Callable

from .errors import UserError
from .shards import check_manifest_counts, check_samples, iter_samples, read_captions, read_manifest
from .split_rule import check_split_rule


def script_of(text: str) -> str:
    """Dominant Unicode script of ``text`` (first word of the letters' Unicode names: LATIN, CJK, ...); text with
    kana is JAPANESE, its kanji included (CJK alone is Chinese characters)."""
    counts: Counter = Counter()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            if name:
                counts[name.split()[0]] += 1
    if counts["HIRAGANA"] or counts["KATAKANA"]:
        return "JAPANESE"
    return counts.most_common(1)[0][0] if counts else "NONE"


def summarize(split_dir: str | Path) -> dict:
    """Counts per language, script per language, images, groups of a split."""
    manifest = read_manifest(split_dir)
    metas = read_captions(split_dir, check_counts=False)  # counted from the shards; --check compares the manifest
    scripts: dict[str, Counter] = defaultdict(Counter)
    for m in metas:
        scripts[m["lang"]][script_of(m["caption"])] += 1
    return {
        "split": manifest.get("split"),
        "source": manifest.get("source"),
        "samples": len(metas),
        "images": len({m["image_id"] for m in metas}),
        "groups": len({m["group"] for m in metas if m.get("group") is not None}),
        "languages": dict(sorted(Counter(m["lang"] for m in metas).items())),
        "scripts": {lang: c.most_common(1)[0][0] for lang, c in sorted(scripts.items())},
        "manifest": manifest,
    }


# Fonts with glyphs for scripts the default font (DejaVu Sans) lacks, CJK first, tried before any other
# installed font: Debian/Ubuntu fonts-noto-cjk, fonts-wqy-*, fonts-ipafont, fonts-droid-fallback, macOS, Windows.
PREFERRED_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR", "Noto Sans SC",
                   "Noto Sans JP", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback",
                   "IPAGothic", "IPAexGothic", "TakaoGothic", "VL Gothic", "AR PL UMing CN", "Hiragino Sans",
                   "PingFang SC", "Microsoft YaHei", "MS Gothic", "Arial Unicode MS", "Noto Sans Arabic",
                   "Noto Naskh Arabic", "Noto Sans", "Unifont")
NOT_GLYPHS = ("Last Resort",)  # fonts whose "glyphs" are boxes naming a Unicode block (matplotlib ships one)
FONT_HINT = "install a CJK font (Debian/Ubuntu: apt-get install fonts-noto-cjk) to draw them"


def choose_fallback_fonts(chars_by_lang: dict[str, set[str]], default: frozenset[int],
                          candidates: list[tuple[str, frozenset[int]]], most: int = 3) -> tuple[list[str], list[str]]:
    """Fonts to draw captions the default font cannot, and the languages still left with boxes.

    ``chars_by_lang``: the characters of each language's captions; ``default``: the code points the default
    font has; ``candidates``: (family, code points) of the other fonts, in order of preference. Greedy: the
    candidate covering most of the still-missing characters (the earlier on a tie), up to ``most`` fonts.
    Returns (families, languages some of whose characters no font has)."""
    missing = {ord(c) for chars in chars_by_lang.values() for c in chars if not c.isspace()} - default
    chosen: list[str] = []
    while missing and len(chosen) < most:
        best = max(candidates, key=lambda fc: len(missing & fc[1]), default=None)
        if best is None or not missing & best[1]:
            break
        chosen.append(best[0])
        missing -= best[1]
        candidates = [fc for fc in candidates if fc[0] != best[0]]
    boxes = sorted(lang for lang, chars in chars_by_lang.items() if any(ord(c) in missing for c in chars))
    return chosen, boxes


def _charset(path: str) -> frozenset[int]:
    from matplotlib import ft2font

    try:
        return frozenset(ft2font.FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def candidate_fonts() -> list[tuple[str, frozenset[int]]]:
    """(family, code points) of the installed fonts matplotlib can use, :data:`PREFERRED_FONTS` first. Fonts that
    ``fc-list`` knows for CJK but matplotlib's font cache does not (installed after it was built) are added."""
    import shutil
    import subprocess

    from matplotlib import font_manager

    known = {entry.fname for entry in font_manager.fontManager.ttflist}
    if shutil.which("fc-list"):
        for lang in ("zh", "ja", "ko"):
            try:
                listed = subprocess.run(["fc-list", "--format", "%{file}\\n", f":lang={lang}"], capture_output=True,
                                        text=True, timeout=20).stdout.splitlines()
            except (OSError, subprocess.SubprocessError):
                listed = []
            for path in listed:
                if path not in known and path.lower().endswith((".ttf", ".otf", ".ttc")):
                    try:
                        font_manager.fontManager.addfont(path)
                        known.add(path)
                    except (OSError, RuntimeError, ValueError):
                        pass
    families: dict[str, str] = {}  # family -> one file (a regular weight when there is one)
    for entry in font_manager.fontManager.ttflist:
        if entry.name.startswith(NOT_GLYPHS):
            continue
        if entry.name not in families or (entry.weight in (400, "normal") and entry.style == "normal"):
            families[entry.name] = entry.fname
    rank = {name: i for i, name in enumerate(PREFERRED_FONTS)}
    ordered = sorted(families, key=lambda name: (rank.get(name, len(rank)), name))
    return [(name, _charset(families[name])) for name in ordered]


def caption_fonts(chars_by_lang: dict[str, set[str]], warn: Callable[[str], None]) -> list[str]:
    """The font family list that draws these captions (matplotlib falls back glyph by glyph along it); one
    ``warn`` line naming the languages that will still show as boxes, when no installed font has their glyphs."""
    from matplotlib import font_manager

    default_path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"))
    default = _charset(default_path)
    needed = {ord(c) for chars in chars_by_lang.values() for c in chars if not c.isspace()}
    if needed <= default:
        return ["DejaVu Sans"]
    fallbacks, boxes = choose_fallback_fonts(chars_by_lang, default, candidate_fonts())
    if boxes:
        warn(f"warning: contact sheet: no installed font has the glyphs of the {', '.join(boxes)} captions, which "
             f"will show as boxes; {FONT_HINT}")
    return ["DejaVu Sans", *fallbacks]


def display_width(text: str) -> int:
    """Columns ``text`` takes: 2 for a wide or full-width character (CJK, East Asian width ``W``/``F``), 0 for a
    combining mark, else 1."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def shorten_to_width(text: str, width: int) -> str:
    """``text`` when it takes at most ``width`` columns (:func:`display_width`), else cut to ``width - 3`` columns
    and ``...``."""
    if display_width(text) <= width:
        return text
    out, used = "", 0
    for c in text:
        if used + display_width(c) > width - 3:
            break
        out, used = out + c, used + display_width(c)
    return out.rstrip() + "..."


def wrap_to_width(text: str, width: int) -> str:
    """``text`` wrapped into lines of at most ``width`` columns (:func:`display_width`, so a line of CJK holds half
    as many characters as one of Latin): at spaces where it has them, a word wider than a line cut by columns.
    ``width`` is at least 2, the columns of one CJK character (ValueError otherwise)."""
    if width < 2:
        raise ValueError(f"wrap_to_width: width must be at least 2 columns (one CJK character), got {width}")
    lines, line = [], ""
    for word in text.split():
        while display_width(word) > width:  # text without spaces (zh, ja): cut by columns
            head, used = "", 0
            room = width - display_width(line) - (1 if line else 0)
            if room < 2:
                lines.append(line)
                line, room = "", width
            for c in word:
                if used + display_width(c) > room:
                    break
                head, used = head + c, used + display_width(c)
            line = f"{line} {head}" if line else head
            lines.append(line)
            line, word = "", word[len(head):]
        if line and display_width(line) + 1 + display_width(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return "\n".join(lines)


def contact_sheet(split_dir: str | Path, out: str | Path, n: int = 24, cols: int = 6,
                  warn: Callable[[str], None] | None = None) -> Path:
    """Save a PNG grid of the first ``n`` samples with their language and caption.

    Captions in scripts the default font lacks (zh, ja, ...) are drawn with an installed font that has
    them (:func:`caption_fonts`); when there is none, the sheet is drawn anyway and ``warn`` (default:
    stderr) gets one line naming the languages that show as boxes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    warn = warn or (lambda line: print(line, file=sys.stderr))
    samples = list(islice(iter_samples(split_dir), n))
    titles = []
    chars_by_lang: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        caption = shorten_to_width(s.caption, 60)
        titles.append(f"[{s.lang}] " + wrap_to_width(caption, 30))  # by columns: a CJK character takes two
        chars_by_lang[s.lang].update(caption)
    families = caption_fonts(chars_by_lang, warn)
    rows = max(1, -(-len(samples) // cols))
    import warnings

    with matplotlib.rc_context({"font.family": families}), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a glyph no font has warns once per character: said once above
        fig, axes = plt.subplots(rows, cols, figsize=(cols * 2.6, rows * 2.9), squeeze=False)
        for ax in axes.flat:
            ax.axis("off")
        for ax, s, title in zip(axes.flat, samples, titles):
            if hasattr(s.image, "size"):
                ax.imshow(s.image)
            ax.set_title(title, fontsize=7)
        fig.tight_layout()
        out = Path(out) if Path(out).suffix else Path(out).with_suffix(".png")  # the file matplotlib writes
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _run(args: argparse.Namespace) -> int:
    if args.sheet_size < 1:
        raise UserError(f"--sheet-size must be a positive number of captions, got {args.sheet_size}")
    if args.contact_sheet and Path(args.contact_sheet).is_dir():
        raise UserError(f"--contact-sheet {args.contact_sheet}: is a folder, expected the path of a PNG file to write")
    info = summarize(args.split_dir)
    print(f"split {info['split']} ({info['source']}): {info['samples']} captions, {info['images']} images"
          + (f", {info['groups']} groups" if info["groups"] else ""))
    print(f"{len(info['languages'])} languages, {len(set(info['scripts'].values()))} scripts")
    for lang, count in info["languages"].items():
        print(f"  {lang:>5}  {count:>7}  {info['scripts'][lang]}")
    if args.check:
        print(f"manifest counts hold: {check_manifest_counts(args.split_dir, info['languages'])}")
        rule = check_split_rule(args.split_dir)
        print(f"split rule holds for '{info['split']}': {rule}" if rule else
              f"no split rule for a '{info['split']}' split: nothing checked")
        print(f"samples hold: {check_samples(args.split_dir)}")
    shown: Counter = Counter()
    print("samples:")
    for m in read_captions(args.split_dir, check_counts=False):
        if shown[m["lang"]] < args.samples:
            shown[m["lang"]] += 1
            print(f"  [{m['lang']}] {m['image_id']}: {m['caption']}")
        if len(shown) == len(info["languages"]) and min(shown.values()) >= args.samples:
            break
    if args.contact_sheet:
        print(f"wrote {contact_sheet(args.split_dir, args.contact_sheet, args.sheet_size)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``inspect`` sub-command."""
    p = sub.add_parser(
        "inspect",
        help="print a split's languages, scripts, counts and samples",
        description="Summarise a split folder: captions, images and groups; captions and dominant Unicode "
        "script per language; a few sample captions per language; optionally check the manifest's counts "
        "(num_samples and per language) against the shards, the split rule (train/val: each image in one "
        "language; test: every group in all languages), that every image decodes and that no caption is empty; "
        "and write a contact sheet PNG of images with their captions.",
    )
    p.add_argument("split_dir", help="split folder (with manifest.json)")
    p.add_argument("--samples", type=int, default=2, help="sample captions to print per language (default %(default)s)")
    p.add_argument("--check", action="store_true",
                   help="verify the manifest's sample counts, the split rule for the split's kind, that every "
                   "image decodes and that no caption is empty")
    p.add_argument("--contact-sheet", metavar="PNG", help="write a grid of images with their captions")
    p.add_argument("--sheet-size", type=int, default=24, metavar="N",
                   help="captions on the contact sheet, the split's first N, each with its image (a test split "
                        "shows each image once per language; default %(default)s)")
    p.set_defaults(func=_run)
