"""Writing a split: :class:`ShardWriter` (samples into ``.tar`` shards plus ``manifest.json``) and its folder check."""
from __future__ import annotations

import io
import json
import os
import tarfile
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Callable, Iterable

import numpy as np
from PIL import Image

from .checksums import content_checksum
from .errors import UserError
from .shards import IMAGE_EXTS, MANIFEST, REQUIRED_FIELDS, encode_image
from .strict_json import json_text

# what ShardWriter.close() derives from the samples it wrote; image_size / feature_dim are not among them, since a
# writer given encoded bytes cannot know them, so a rewrite of a split carries the original's
DERIVED_MANIFEST_KEYS = ("split", "source", "num_samples", "shards", "languages", "image_format", "checksum")


MAX_MEMBER_NAME = 100
"""Bytes of a tar member's name in the shards' USTAR format (a key plus its extension)."""


class DuplicateKey(ValueError):
    """:meth:`ShardWriter.write` given a key it has written already (a converter reports it and goes on; any other
    refusal of the writer is a bug of its caller)."""


class ShardWriter:
    """Write samples of one split into ``out_dir/<split>-%06d.tar`` and a manifest.

    Use as a context manager; :meth:`close` writes ``manifest.json``. Keys must be
    unique within the split (a duplicate raises ``ValueError``; converters catch it and
    report the offending input line). Writing is sequential (tar streams).

    Example::

        with ShardWriter("data/synth/train", split="train", source="synthetic") as w:
            w.write("s0", pil_image, "a red circle", "en", image_id="img0")
    """

    def __init__(
        self,
        out_dir: str | Path,
        split: str,
        source: str,
        image_format: str = "jpg",
        maxcount: int = 2000,
        extra: dict | None = None,
    ) -> None:
        if image_format not in IMAGE_EXTS:
            raise ValueError(f"image_format must be one of {IMAGE_EXTS}, got {image_format!r}")
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for old in self.out_dir.glob(f"{split}-*.tar"):
            old.unlink()
        self.split, self.source, self.image_format = split, source, image_format
        self.maxcount = maxcount
        self.extra = dict(extra or {})
        self._keys: set[str] = set()
        self._langs: Counter = Counter()
        self._shards: list[str] = []
        self._tar: tarfile.TarFile | None = None
        self._in_shard = 0
        self._image_shape: list[int] | None = None
        self.count = 0

    def _next_shard(self) -> tarfile.TarFile:
        if self._tar is not None:
            self._tar.close()
        name = f"{self.split}-{len(self._shards):06d}.tar"
        self._shards.append(name)
        self._tar = tarfile.open(self.out_dir / name, "w", format=tarfile.USTAR_FORMAT)
        self._in_shard = 0
        return self._tar

    def _add(self, tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = 0  # deterministic bytes: same content, same checksum
        info.mode = 0o444
        tar.addfile(info, io.BytesIO(data))

    def write(
        self,
        key: str,
        image: Image.Image | np.ndarray | bytes,
        caption: str,
        lang: str,
        image_id: str,
        group: str | None = None,
        extra: dict | None = None,
    ) -> None:
        """Append one sample. ``image`` is PIL, a uint8 HxWx3 array, encoded bytes, or a feature vector. ``key``:
        unique, without ``.`` or ``/``, and short enough that ``key.json`` fits a tar name (:data:`MAX_MEMBER_NAME`
        bytes, UTF-8).

        ``caption``, ``lang`` and ``image_id`` are strings, not empty (nor only whitespace), and so is ``group`` unless
        None: a ``ValueError`` naming the key and the value otherwise, since every reader refuses such a sample
        (:func:`check_meta`); nothing is converted (an image id 7 is refused, not written as "7").
        ``extra`` adds fields to the sample's json (e.g. the synthetic world's ``meaning``), never those four.
        """
        if key in self._keys:
            raise DuplicateKey(f"duplicate key {key!r}")
        for field, value in (("caption", caption), ("lang", lang), ("image_id", image_id), ("group", group)):
            if (value is not None or field != "group") and not (isinstance(value, str) and value.strip()):
                raise ValueError(f"{field} {repr(value)[:40]} of key {key!r} must be a non-empty string"
                                 + (" or None" if field == "group" else ""))
        clash = [field for field in (*REQUIRED_FIELDS, "group") if field in (extra or {})]
        if clash:
            raise ValueError(f"extra of key {key!r} sets {', '.join(clash)}: the sample's own fields, given as "
                             f"arguments")
        if "." in key or "/" in key:
            raise ValueError(f"key {key!r} must not contain '.' or '/'")
        longest = max(len(f"{key}.{ext}".encode("utf-8")) for ext in (self.image_format, "json"))
        if longest > MAX_MEMBER_NAME:  # checked before either file is added: never half a sample in the shard
            raise ValueError(f"key {key[:40]!r}... is too long: with its extension a shard member name takes {longest} "
                             f"bytes, and a tar (USTAR) name holds at most {MAX_MEMBER_NAME}; shorten the key")
        tar = self._tar
        if tar is None or self._in_shard >= self.maxcount:
            tar = self._next_shard()
        if self._image_shape is None:
            if self.image_format == "npy":
                self._image_shape = list(np.asarray(image).shape)
            elif isinstance(image, Image.Image):
                self._image_shape = [image.height, image.width]
            elif isinstance(image, np.ndarray):
                self._image_shape = list(image.shape[:2])
            else:  # encoded bytes: the size from the header, nothing decoded
                with Image.open(io.BytesIO(image)) as picture:
                    self._image_shape = [picture.height, picture.width]
        meta = {"caption": caption, "lang": lang, "image_id": image_id, "group": group, **(extra or {})}
        self._add(tar, f"{key}.{self.image_format}", encode_image(image, self.image_format))
        self._add(tar, f"{key}.json", json_text(meta, ensure_ascii=False).encode("utf-8"))
        self._keys.add(key)
        self._langs[lang] += 1
        self._in_shard += 1
        self.count += 1

    def close(self) -> dict:
        """Close the last shard and write ``manifest.json``; returns the manifest."""
        if self._tar is not None:
            self._tar.close()
            self._tar = None
        manifest = {
            "split": self.split,
            "source": self.source,
            "num_samples": self.count,
            "shards": list(self._shards),
            "languages": dict(sorted(self._langs.items())),
            "image_format": self.image_format,
            ("feature_dim" if self.image_format == "npy" else "image_size"): self._image_shape,
            "checksum": content_checksum(self.out_dir, self._shards),
            **self.extra,
        }
        tmp = self.out_dir / (MANIFEST + ".tmp")
        tmp.write_text(json_text(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.out_dir / MANIFEST)
        return manifest

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def carried_manifest_fields(manifest: dict) -> dict:
    """The fields of a split's manifest that a :class:`ShardWriter` rewriting the split does not derive itself (its
    ``extra``)."""
    return {k: v for k, v in manifest.items() if k not in DERIVED_MANIFEST_KEYS}


def check_new_split_folder(out: str | Path, read: Iterable[str | Path], own: Callable[[dict], bool],
                           flag: str = "--out") -> None:
    """Refuse (one-line :class:`UserError`, nothing created) a folder ``out`` that a :class:`ShardWriter` is about to
    write a split into when that would destroy or mix with data: ``out`` is one of the folders ``read`` (the input
    splits), lies inside one or holds one; or it exists and is neither an empty folder nor an earlier output of the
    same writer (its ``manifest.json`` passes ``own``). A ShardWriter clears the shards of its split's name in
    ``out`` before anything is read."""
    out = Path(out)
    target = out.resolve()
    for folder in read:
        source = Path(folder).resolve()
        if target == source or source in target.parents or target in source.parents:
            how = "is" if target == source else "lies inside" if source in target.parents else "holds"
            raise UserError(f"{flag} {out} {how} the split read ({folder}): writing there would delete or mix with "
                            f"its shards; choose a new folder outside it")
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise UserError(f"{flag} {out}: exists and is not a folder")
    if not any(out.iterdir()):
        return
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or not own(manifest):
        raise UserError(f"{flag} {out}: exists, is not empty and is not an earlier output of this command; "
                        f"choose a new or empty folder (it is never cleared)")
