"""The images g reads: paths, encoded bytes or PIL images, checked, decoded to 8-bit RGB and named for the feature
cache."""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Sequence, Union

import numpy as np
from PIL import Image

from .errors import BackRetrievalError
from .files import require_sequence

ImageSource = Union[str, os.PathLike, bytes, bytearray, Image.Image]  # what image_sources accepts


def rgb_image(img: Image.Image) -> Image.Image:
    """``img`` as 8-bit RGB. 16-bit greyscale (modes ``I;16``, ``I;16B``, ..., and ``I``, as which Pillow may open a
    16-bit PNG: values in [0, 65535]) is scaled to 8 bits first (divided by 257): ``convert("RGB")`` clips its values
    at 255, so the picture came out white."""
    if img.mode == "I" or img.mode.startswith("I;16"):
        pixels = np.asarray(img, dtype=np.float64) / 257.0
        img = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
    return img.convert("RGB")


def image_sources(images: Sequence[ImageSource], entries: bool = True) -> list[ImageSource]:
    """``images`` as a list; one-line errors for one image where a sequence is expected (a path was read as its
    characters) and, with ``entries``, for an entry that is no path, encoded bytes or PIL image (an array, None)."""
    require_sequence(images, "images", "images")
    if isinstance(images, (os.PathLike, Image.Image)):
        raise BackRetrievalError(f"images: expected a sequence of images, got one {type(images).__name__}; "
                                 "wrap it in a list")
    try:
        images = list(images)
    except TypeError:
        raise BackRetrievalError(f"images: expected a sequence of images, got {type(images).__name__}") from None
    for i, source in enumerate(images if entries else ()):
        if not isinstance(source, (str, os.PathLike, bytes, bytearray, Image.Image)):
            hint = "; convert arrays with PIL.Image.fromarray" if isinstance(source, np.ndarray) else ""
            raise BackRetrievalError(f"images[{i}]: expected a PIL image, a path or encoded bytes, got "
                                     f"{type(source).__name__}{hint}")
    return images


class UnreadableImage(BackRetrievalError):
    """An image that does not decode: ``index`` its position among the images given (None: not known), ``why``
    what PIL said; a caller that knows the images' names (a split's image ids) names it."""

    def __init__(self, message: str, index: int | None = None, why: str = "") -> None:
        super().__init__(message)
        self.index, self.why = index, why


def open_image(source: ImageSource, index: int | None = None) -> Image.Image:
    """``source`` decoded as an RGB image; :class:`UnreadableImage` (image ``index`` of those given) when it
    does not decode."""
    if isinstance(source, Image.Image):
        return rgb_image(source)
    try:
        img = Image.open(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)
        img.load()
    except (OSError, ValueError) as err:
        where = "image bytes" if isinstance(source, (bytes, bytearray)) else str(source)
        raise UnreadableImage(f"{where}: unreadable image ({err})", index, str(err)) from None
    return rgb_image(img)


def decode_image_file(path: str) -> tuple[Image.Image | None, str]:
    """``(image, "")``, the file decoded whole (``verify`` passes a JPEG cut short after a sound header), or
    ``(None, why)`` for a file PIL cannot decode."""
    try:
        with Image.open(path) as image:  # the pixels stay once the file is closed
            image.load()
    except Exception as err:  # PIL raises many kinds (UnidentifiedImageError, SyntaxError, OSError, ...)
        return None, str(err).splitlines()[0] if str(err) else type(err).__name__
    return image, ""


def default_image_ids(images: Sequence[ImageSource]) -> list[str]:
    """Identities for the cache: path + size + mtime for files, a content hash otherwise."""
    ids = []
    for src in images:
        if isinstance(src, (str, os.PathLike)):  # os.DirEntry too: no .tobytes() to hash
            try:
                st = os.stat(src)
            except OSError as err:
                raise BackRetrievalError(f"{src}: unreadable image ({err.strerror or err})") from None
            ids.append(f"{Path(src).resolve()}:{st.st_size}:{st.st_mtime_ns}")
        elif isinstance(src, (bytes, bytearray)):
            ids.append("sha256:" + hashlib.sha256(src).hexdigest())
        else:
            ids.append("pixels:" + hashlib.sha256(src.tobytes()).hexdigest())
    return ids
