"""Flickr8k caption files: the official token file and the Flickr8k-CN files.

Both put an image name, a caption index and the caption on one line:

- ``Flickr8k.token.txt`` (Hodosh et al. 2013): ``<image>.jpg#<k><TAB><caption>``, k = 0..4;
- Flickr8k-CN (Li et al. 2016), e.g. ``flickr8kzhc.caption.txt`` (crowd-written Chinese):
  ``<image>#zhc#<k> <caption>``; the middle tag names the variant (``zhc`` crowd,
  ``zhb``/``zhm`` machine translations), and the image name may lack ``.jpg``.

Neither file says its language in a form we trust, so the language is given on the
command line (``--flickr8k FILE:LANG``). The key of a caption is ``(tag, image, k,
language)``: the same file given twice, or a line repeated, is reported as a duplicate,
while ``zhc`` and ``zhb`` captions of one image are not. Blank lines are not records;
any other line that does not match is reported as malformed. The files carry no split.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from .common import Caption, Record, read_lines_or_issue
from .report import Issue

# image, optional variant tag, caption index, then the caption (may be missing: an empty caption)
_LINE = re.compile(r"^(?P<image>[^#\s]+)#(?:(?P<tag>[^#\s]+)#)?(?P<k>\d+)(?:[\t ](?P<caption>.*))?$")


def read_flickr8k(path: str | Path, lang: str) -> Iterator[Record]:
    """Yield caption records of a Flickr8k token file or Flickr8k-CN caption file, all in ``lang``."""
    path = Path(path)
    lines, issue = read_lines_or_issue(path)
    for line in lines:
        if line.text is None:
            yield Issue("non_utf8", str(path), line.number, line.error)
            continue
        if not line.text.strip():
            continue
        match = _LINE.match(line.text)
        if match is None:
            yield Issue("malformed_line", str(path), line.number,
                        "expected '<image>#<k><TAB><caption>' or '<image>#<tag>#<k> <caption>', "
                        f"got {line.text[:60]!r}")
            continue
        image, tag, k = match.group("image"), match.group("tag") or "", match.group("k")
        candidates = (image,) if Path(image).suffix else (image + ".jpg", image)
        yield Caption(candidates, lang, match.group("caption") or "", str(path), line.number,
                      ("flickr8k", tag, image, int(k), lang))
    if issue is not None:
        yield issue
