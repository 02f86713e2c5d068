"""Finding the image a caption names, and decoding / resizing / re-encoding it for a shard.

:class:`ImageResolver` looks a name up in the image folders given on the command line:
first as a path relative to each folder, then (from an index of every image file under
the folders, built once, on first need) by file name, by name without extension, and by
Flickr photo id. The last rule is what lets Multi30K / Flickr30k names (``<id>.jpg``) find
Flickr8k files (``<id>_<secret>.jpg``) and the reverse. The two loose rules are for those
datasets' naming only: a caption with ``exact`` set (the folder layout) matches by path or
file name, so ``dog.jpg`` never finds ``dog.png``, nor ``100.jpg`` ``100_1.jpg``; and a file name that
several files under the folders have (``x/same.jpg``, ``y/same.jpg``) finds none of them
(:meth:`ImageResolver.same_name` lists them), where the loose rules take the first.

:func:`prepare_image` runs in worker processes: it fully decodes the file (so a truncated
or corrupt JPEG is caught here, not at training time), optionally resizes it, and returns
JPEG bytes. Without resizing, a JPEG that needs no rotation is passed through byte for
byte (it was still decoded once to check it).
"""
from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from PIL import Image, ImageOps, UnidentifiedImageError

from ..shards import rgb_image

# what the image folders are searched for: Pillow's formats, and the phone and browser ones it may lack (.heic: an
# unreadable image, said so, where a caption naming it would otherwise read as a file not found)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".avif",
                  ".heic", ".heif")
RESIZE_MODES = ("shorter", "center-crop")
_PHOTO_ID = re.compile(r"^(\d+)(?:_[0-9a-fA-F]+)?$")  # Flickr: 1000268201 or 1000268201_693b08cb0e
_EXIF_ORIENTATION = 0x0112


def image_stem(name: str) -> str:
    """File name without an image extension (other suffixes are kept: ``"a.b"`` stays ``"a.b"``)."""
    stem, ext = os.path.splitext(name)
    return stem if ext.lower() in IMAGE_SUFFIXES else name


def flickr_photo_id(name: str) -> str | None:
    """The Flickr photo id in a file name (``"1000268201_693b08cb0e.jpg"`` -> ``"1000268201"``), else ``None``."""
    match = _PHOTO_ID.match(image_stem(name))
    return match.group(1) if match else None


class ImageResolver:
    """Find image files by path, name, stem or Flickr photo id under a list of folders.

    Results are cached per candidate tuple; the recursive index of the folders is built
    lazily, only when a candidate is not found as a direct path.
    """

    def __init__(self, roots: Sequence[str | Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._index: tuple[dict[str, Path], dict[str, Path], dict[str, Path], dict[str, list[Path]]] | None = None
        self._cache: dict[tuple[tuple[str, ...], bool], Path | None] = {}

    def _build_index(self) -> tuple[dict[str, Path], dict[str, Path], dict[str, Path], dict[str, list[Path]]]:
        """File name, stem and photo id -> the first file found (folders and files in sorted order), and file name ->
        every file of that name, for the names several files have."""
        by_name: dict[str, Path] = {}
        clashes: dict[str, list[Path]] = {}
        by_stem: dict[str, Path] = {}
        by_photo: dict[str, Path] = {}
        for root in self.roots:
            for folder, dirs, files in os.walk(root):
                dirs.sort()
                for name in sorted(files):
                    if not name.lower().endswith(IMAGE_SUFFIXES):
                        continue
                    path = Path(folder) / name
                    if name in by_name:
                        clashes.setdefault(name, [by_name[name]]).append(path)
                    by_name.setdefault(name, path)
                    by_stem.setdefault(image_stem(name), path)
                    photo = flickr_photo_id(name)
                    if photo is not None:
                        by_photo.setdefault(photo, path)
        return by_name, by_stem, by_photo, clashes

    def resolve(self, candidates: Sequence[str], exact: bool = False) -> Path | None:
        """The first existing file for ``candidates``, else ``None``.

        First pass: each candidate with a folder part is tried as an absolute path or a path
        relative to each image folder. Second pass (from the index): each candidate's file
        name, then (unless ``exact``) its stem, then its Flickr photo id. With ``exact``, a file name that several
        files have finds none (:meth:`same_name`).
        """
        key = (tuple(candidates), exact)
        if key not in self._cache:
            found = next(filter(None, map(self._direct, candidates)), None)
            self._cache[key] = found or next(filter(None, (self._indexed(c, exact) for c in candidates)), None)
        return self._cache[key]

    def same_name(self, candidates: Sequence[str]) -> list[Path]:
        """Every file under the folders named like the first of ``candidates`` whose file name several files have
        (why an ``exact`` lookup found none), else ``[]``."""
        if self._index is None:
            self._index = self._build_index()
        clashes = self._index[3]
        return next((clashes[name] for name in map(os.path.basename, candidates) if name in clashes), [])

    def some_names(self, most: int = 2) -> list[str]:
        """Up to ``most`` image file names under the folders, in index order (examples for a message)."""
        if self._index is None:
            self._index = self._build_index()
        return list(self._index[0])[:most]

    def _direct(self, cand: str) -> Path | None:
        if "/" not in cand and os.sep not in cand:
            return None
        path = Path(cand)
        if path.is_absolute():
            return path if path.is_file() else None
        return next((root / path for root in self.roots if (root / path).is_file()), None)

    def _indexed(self, cand: str, exact: bool = False) -> Path | None:
        if self._index is None:
            self._index = self._build_index()
        by_name, by_stem, by_photo, clashes = self._index
        name = os.path.basename(cand)
        if exact:
            return None if name in clashes else by_name.get(name)
        stem = image_stem(name)
        found = by_name.get(name) or by_stem.get(stem)
        if found is None:
            photo = flickr_photo_id(stem)
            found = by_photo.get(photo) if photo else None
        return found


@dataclass(frozen=True)
class ImageSpec:
    """How images are stored in the shards.

    ``resize``: target size in pixels, or ``None`` to keep the original size.
    ``mode``: ``"shorter"`` scales the shorter side to ``resize`` keeping the aspect ratio;
    ``"center-crop"`` does the same and then crops the centre ``resize`` x ``resize`` square
    (what the Globetrotter code does at evaluation: Resize + CenterCrop). Images are only
    scaled down, never up. ``quality``: JPEG quality of re-encoded images.
    """

    resize: int | None = None
    mode: str = "shorter"
    quality: int = 90

    def __post_init__(self) -> None:
        if self.mode not in RESIZE_MODES:
            raise ValueError(f"resize mode must be one of {RESIZE_MODES}, got {self.mode!r}")
        if self.resize is not None and self.resize < 1:
            raise ValueError(f"resize must be a positive number of pixels, got {self.resize}")


class ImageError(Exception):
    """An image file that cannot be used (missing, unreadable, truncated, not an image)."""


def _target_size(width: int, height: int, size: int) -> tuple[int, int]:
    scale = size / min(width, height)
    if scale >= 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def prepare_image(path: str | Path, spec: ImageSpec) -> tuple[bytes, tuple[int, int]]:
    """Decode ``path`` fully, resize per ``spec``, and return ``(jpeg_bytes, (height, width))``.

    Raises :class:`ImageError` for a file that is missing, truncated, or not an image.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        img: Image.Image = Image.open(io.BytesIO(data))
        source_format = img.format
        needs_rotation = img.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None)
        full_size = img.size
        if spec.resize is not None and source_format == "JPEG":
            # decode at a reduced DCT scale when the image is at least twice the target size
            img.draft("RGB", (spec.resize, spec.resize))
        img.load()
    except FileNotFoundError:
        raise ImageError("file not found") from None
    except UnidentifiedImageError:  # its message names the in-memory buffer, not the file
        raise ImageError("not an image file Pillow can read") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ImageError(f"{type(err).__name__}: {err}") from None

    if needs_rotation:
        img = ImageOps.exif_transpose(img)
    out_w, out_h = img.size
    if spec.resize is not None:
        out_w, out_h = _target_size(img.width, img.height, spec.resize)
        if spec.mode == "center-crop":
            out_w = out_h = min(out_w, out_h)
    if (out_w, out_h) == img.size == full_size and source_format == "JPEG" and not needs_rotation and img.mode in ("RGB", "L"):
        return data, (img.height, img.width)  # already right: keep the original bytes
    img = rgb_image(img)  # 16-bit greyscale scaled, not clipped to white
    if spec.resize is not None:
        new_w, new_h = _target_size(img.width, img.height, spec.resize)
        if (new_w, new_h) != img.size:
            img = img.resize((new_w, new_h), Image.Resampling.BICUBIC, reducing_gap=None)
        if spec.mode == "center-crop":
            side = min(img.width, img.height, spec.resize)
            left, top = (img.width - side) // 2, (img.height - side) // 2
            img = img.crop((left, top, left + side, top + side))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=spec.quality)
    return buf.getvalue(), (img.height, img.width)


def prepare_image_task(task: tuple[int, str, ImageSpec]) -> tuple[int, bytes | None, tuple[int, int] | None, str]:
    """Pool worker: ``(index, path, spec)`` -> ``(index, bytes or None, (h, w) or None, error message)``."""
    index, path, spec = task
    try:
        data, size = prepare_image(path, spec)
        return index, data, size, ""
    except ImageError as err:
        return index, None, None, str(err)
