"""``globetrotter-data inspect``: languages, scripts, counts and samples of a split; a contact sheet."""
from __future__ import annotations

import argparse
import unicodedata
from collections import Counter, defaultdict
from itertools import islice
from pathlib import Path

from .shards import check_split_rule, iter_samples, read_captions, read_manifest


def script_of(text: str) -> str:
    """Dominant Unicode script of ``text`` (first word of the letters' Unicode names: LATIN, CJK, ...)."""
    counts: Counter = Counter()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            if name:
                word = name.split()[0]
                counts["CJK" if word in ("CJK", "HIRAGANA", "KATAKANA") else word] += 1
    return counts.most_common(1)[0][0] if counts else "NONE"


def summarize(split_dir: str | Path) -> dict:
    """Counts per language, script per language, images, groups of a split."""
    manifest = read_manifest(split_dir)
    metas = read_captions(split_dir)
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


def contact_sheet(split_dir: str | Path, out: str | Path, n: int = 24, cols: int = 6) -> Path:
    """Save a PNG grid of the first ``n`` samples with their language and caption."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = list(islice(iter_samples(split_dir), n))
    rows = max(1, -(-len(samples) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 2.6, rows * 2.9), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, s in zip(axes.flat, samples):
        if hasattr(s.image, "size"):
            ax.imshow(s.image)
        caption = s.caption if len(s.caption) <= 60 else s.caption[:57] + "..."
        ax.set_title(f"[{s.lang}] " + "\n".join(caption[i : i + 30] for i in range(0, len(caption), 30)), fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import warnings

    with warnings.catch_warnings():  # fonts without CJK/Arabic glyphs warn per missing glyph
        warnings.simplefilter("ignore")
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _run(args: argparse.Namespace) -> int:
    info = summarize(args.split_dir)
    print(f"split {info['split']} ({info['source']}): {info['samples']} captions, {info['images']} images"
          + (f", {info['groups']} groups" if info["groups"] else ""))
    print(f"{len(info['languages'])} languages, {len(set(info['scripts'].values()))} scripts")
    for lang, count in info["languages"].items():
        print(f"  {lang:>5}  {count:>7}  {info['scripts'][lang]}")
    if args.check:
        check_split_rule(args.split_dir)
        print(f"split rule holds for '{info['split']}'")
    shown: Counter = Counter()
    print("samples:")
    for m in read_captions(args.split_dir):
        if shown[m["lang"]] < args.samples:
            shown[m["lang"]] += 1
            print(f"  [{m['lang']}] {m['image_id']}: {m['caption']}")
        if len(shown) == len(info["languages"]) and min(shown.values()) >= args.samples:
            break
    if args.contact_sheet:
        print(f"wrote {contact_sheet(args.split_dir, args.contact_sheet, args.sheet_size)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="print a split's languages, scripts, counts and samples",
        description="Summarise a split folder: captions, images and groups; captions and dominant Unicode "
        "script per language; a few sample captions per language; optionally check the split rule "
        "(train/val: each image in one language; test: every group in all languages) and write a contact "
        "sheet PNG of images with their captions.",
    )
    p.add_argument("split_dir", help="split folder (with manifest.json)")
    p.add_argument("--samples", type=int, default=2, help="sample captions to print per language (default %(default)s)")
    p.add_argument("--check", action="store_true", help="verify the split rule for the split's kind")
    p.add_argument("--contact-sheet", metavar="PNG", help="write a grid of images with their captions")
    p.add_argument("--sheet-size", type=int, default=24, help="images on the contact sheet (default %(default)s)")
    p.set_defaults(func=_run)
