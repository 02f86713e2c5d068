"""Read a shard split (the project's WebDataset format) into what the metrics need.

Only the ``eval``/``correlate`` commands use this module (and ``--languages``, read as the
converters write a split's codes), and it imports ``data_prep`` (the data layer) lazily, so
the metric itself has no dependency on it. One caption is one
row: text, language, image id, group. Images are kept once per distinct image id, as
encoded bytes, or as float32 features when the split stores ``npy`` features.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .errors import BackRetrievalError
from .renamed import renamed_keywords

if TYPE_CHECKING:  # torch/timm are imported only when images need features
    from .images import ImageModel


@dataclass
class SplitData:
    """Captions of one split, row-aligned, with their distinct images."""

    split_dir: Path
    checksum: str
    texts: list[str]
    langs: np.ndarray  # (N,) object
    image_ids: np.ndarray  # (N,) object
    groups: np.ndarray  # (N,) object, None where absent
    image_keys: list[str]  # distinct image ids, in first-seen order
    image_index: np.ndarray  # (N,) row -> index into image_keys
    images: list  # per distinct image: encoded bytes, or a float32 feature vector
    image_format: str

    @property
    def has_groups(self) -> bool:
        """True when some caption has a ``group`` (tied to its translations)."""
        return any(g is not None for g in self.groups)


def language_code(code: str) -> str:
    """``code`` as a split holds it: the converters' form (``data_prep``'s ``normalize_language``: ``EN`` -> ``en``,
    ``pt_br`` -> ``pt-BR``), so ``--languages EN`` names the split's ``en``; a code the converters refuse (``xx``,
    ``jp``) is kept as given, and refused by the command as a language the split lacks."""
    from data_prep.converters.languages import normalize_language  # lazily, as the shard reader below

    return normalize_language(code) or code


def _reraise_user_error(err: Exception) -> None:
    # the data layer reports user mistakes with data_prep.errors.UserError: re-raised as our own
    from data_prep.errors import UserError

    if isinstance(err, UserError):
        raise BackRetrievalError(str(err)) from None
    raise err


@renamed_keywords(langs="languages")
def load_split(split_dir: str | os.PathLike, languages: Sequence[str] | None = None,
               every_image: bool = False) -> SplitData:
    """Read captions and distinct images of a split folder (``manifest.json`` + ``.tar`` shards).

    ``languages`` keeps the captions of those languages and, unless ``every_image``, only the images they show;
    with ``every_image`` the images are every image of the split (a retrieval gallery that does not depend on
    ``languages``).
    """
    from data_prep import shards  # the data layer, imported only by the commands that read shards

    split_dir = Path(split_dir)
    keep = set(languages) if languages else None
    texts, rows_lang, rows_img, rows_group = [], [], [], []
    image_pos: dict[str, int] = {}
    images: list = []
    fmt = None
    seen: set = set()
    try:
        manifest = shards.read_manifest(split_dir)
        for key, ext, data, meta in shards.iter_raw(split_dir):
            lang = meta.get("lang")
            seen.add(lang)
            wanted = keep is None or lang in keep
            if not (wanted or every_image):
                continue
            image_id = str(meta.get("image_id", key))
            if image_id not in image_pos:
                image_pos[image_id] = len(images)
                images.append(np.asarray(shards.decode_image(data, "npy"), dtype=np.float32) if ext == "npy" else data)
            fmt = fmt or ext
            if not wanted:
                continue
            texts.append(str(meta.get("caption", "")))
            rows_lang.append(lang)
            rows_img.append(image_id)
            rows_group.append(meta.get("group"))
    except Exception as err:  # noqa: BLE001 - only UserError is translated, the rest re-raised
        _reraise_user_error(err)
    if keep is not None and keep - seen:
        raise BackRetrievalError(
            f"{split_dir}: no captions in language(s) {sorted(keep - seen)}; the split has {sorted(map(str, seen))}"
        )
    if not texts:
        raise BackRetrievalError(f"{split_dir}: no captions" + (f" in languages {sorted(keep)}" if keep else ""))
    return SplitData(
        split_dir=split_dir,
        checksum=str(manifest.get("checksum", "")),
        texts=texts,
        langs=np.asarray(rows_lang, dtype=object),
        image_ids=np.asarray(rows_img, dtype=object),
        groups=np.asarray(rows_group, dtype=object),
        image_keys=list(image_pos),
        image_index=np.asarray([image_pos[i] for i in rows_img], dtype=np.int64),
        images=images,
        image_format=fmt or "",
    )


def stored_image_format(data: str | os.PathLike | SplitData) -> str | None:
    """The split's image format (``jpg``, ``png``, ``npy``...) from its ``manifest.json`` alone, without reading
    a shard; None when the manifest does not say (reading the split then reports what is wrong)."""
    if isinstance(data, SplitData):
        return data.image_format
    try:
        manifest = json.loads((Path(data) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fmt = manifest.get("image_format") if isinstance(manifest, dict) else None
    return fmt if isinstance(fmt, str) else None


def check_image_model(data: str | os.PathLike | SplitData, extractor: ImageModel | None) -> None:
    """Before any work: check a CNN g's weights (nothing loaded) when the split stores pixels, where it will be
    needed (a split of stored features is its own g)."""
    check = getattr(extractor, "check", None)
    if check is not None and stored_image_format(data) not in (None, "npy"):
        check()


def image_features(data: SplitData, extractor: ImageModel | None) -> np.ndarray:
    """``(n_distinct_images, D)`` features: stored ``npy`` features, or extracted (and cached).

    On a split that stores features, a CNN extractor is not needed (the stored features
    are g), the null g (``random``, kind ``"random"``) replaces them, and a ``thumbnail``
    g is an error: there are no pixels to shrink.
    """
    kind = getattr(extractor, "kind", "cnn")
    ids = [f"{data.checksum}:{key}" for key in data.image_keys]
    if data.image_format == "npy":
        if extractor is None or kind == "cnn":
            return np.stack(data.images).astype(np.float32)
        if kind == "random":
            return extractor.extract(data.images, ids=ids)
        raise BackRetrievalError(f"{data.split_dir}: the split stores image features, not pixels; "
                                 f"image model {extractor.name!r} needs pixels")
    if extractor is None:
        raise BackRetrievalError(f"{data.split_dir}: images are {data.image_format}; an image model is needed for g "
                                 "(e.g. extractor=backretrieval.image_feature_extractor(): efficientnet_lite0, offline)")
    from .image_inputs import UnreadableImage

    try:
        return extractor.extract(data.images, ids=ids)
    except UnreadableImage as err:  # named by its image id, not as "image bytes"
        if err.index is None:
            raise
        raise BackRetrievalError(f"{data.split_dir}: image {data.image_keys[err.index]!r} does not decode "
                                 f"({err.why}); expected {data.image_format} bytes (`globetrotter-data inspect "
                                 f"{data.split_dir} --check` names its shard and sample)") from None


def aligned_pair(data: SplitData, src_lang: str, tgt_lang: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parallel items of a language pair: (source caption rows, target caption rows, image index per item).

    One item per group captioned in both languages (first caption per group and
    language, in file order), as the protocol needs.
    """
    if not data.has_groups:
        raise BackRetrievalError(
            f"{data.split_dir}: no 'group' ids, so no parallel ground truth for XLR (use a test split)"
        )
    first: dict[str, dict] = {src_lang: {}, tgt_lang: {}}
    for row, (lang, group) in enumerate(zip(data.langs, data.groups)):
        if lang in first and group is not None and group not in first[lang]:
            first[lang][group] = row
    common = [g for g in first[src_lang] if g in first[tgt_lang]]
    if not common:
        raise BackRetrievalError(f"{data.split_dir}: no group has captions in both {src_lang} and {tgt_lang}")
    src_rows = np.asarray([first[src_lang][g] for g in common], dtype=np.int64)
    tgt_rows = np.asarray([first[tgt_lang][g] for g in common], dtype=np.int64)
    return src_rows, tgt_rows, data.image_index[src_rows]
