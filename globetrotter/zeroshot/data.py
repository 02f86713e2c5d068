"""Frozen features of a shard split, computed once and cached: what the adapter trains on.

Texts are embedded by a pluggable frozen text encoder (a :mod:`backretrieval.embedders`
spec: ``use``, ``st:MODEL``, ``npy:PATH``, ``globetrotter:CKPT``), images by a frozen timm
model (:class:`backretrieval.images.ImageFeatureExtractor`; ``efficientnet_lite0`` with the
offline ``package`` weights by default). Both are cached on disk, keyed by the encoder and
the exact inputs, so a second run over the same split reads them back.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from backretrieval.data import image_features, load_split
from backretrieval.embedders import embed_texts, is_positional, load_embedder
from backretrieval.errors import cli_option_names
from backretrieval.files import read_cache_entry
from backretrieval.images import ImageFeatureExtractor
from backretrieval.text_models import TextEmbedder

DEFAULT_CACHE = Path(os.environ.get("GLOBETROTTER_CACHE", "outputs/cache"))


@dataclass
class SplitFeatures:
    """Row-aligned captions of a split with their frozen features.

    ``text_features[i]`` embeds ``texts[i]`` (language ``langs[i]``, group ``groups[i]``), whose
    image is row ``caption_image[i]`` of ``image_features`` (named ``image_keys``).
    """

    texts: list[str]
    langs: np.ndarray
    groups: np.ndarray
    caption_image: np.ndarray
    image_keys: list[str]
    text_features: np.ndarray
    image_features: np.ndarray

    def rows(self, lang: str | Sequence[str]) -> np.ndarray:
        """Row indices of the captions in ``lang`` (one code or several)."""
        langs = [lang] if isinstance(lang, str) else list(lang)
        return np.flatnonzero(np.isin(self.langs, langs))

    def first_per_image(self, lang: str) -> np.ndarray:
        """Rows of the first caption of each image in ``lang`` (XTD10/Multi30K: one query per image)."""
        rows = self.rows(lang)
        _, first = np.unique(self.caption_image[rows], return_index=True)
        return rows[np.sort(first)]


def languages_the_encoder_lacks(spec: str, langs: Sequence[str]) -> list[str]:
    """Those of ``langs`` the text encoder ``spec`` was not trained on, where that is known (``use``: the
    multilingual USE's languages); sorted, empty when unknown."""
    from backretrieval.text_models import USEEmbedder

    known = USEEmbedder.languages if spec == "use" else None
    return sorted(set(langs) - known) if known is not None else []


def first_captions(caption_image: np.ndarray, langs: np.ndarray, n: int) -> np.ndarray:
    """The rows of the first ``n`` captions (row order) of each image in each language."""
    if n < 1:
        raise ValueError(f"max_captions_per_image must be >= 1, got {n}")
    seen: dict[tuple, int] = {}
    keep = []
    for row, key in enumerate(zip(np.asarray(caption_image).tolist(), np.asarray(langs).tolist())):
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= n:
            keep.append(row)
    return np.asarray(keep, dtype=np.int64)


def image_extractor(
    model_name: str, weights: str | None = None, cache_dir: str | Path | None = DEFAULT_CACHE,
    device: str = "cpu", batch_size: int = 32, progress: bool = True, online: bool = False,
) -> ImageFeatureExtractor:
    """The frozen image encoder: any timm model (pooled pre-logits features), cached under ``cache_dir`` (a damaged
    cache entry is computed again: :func:`backretrieval.files.read_cache_entry`)."""
    return ImageFeatureExtractor(
        model_name, weights, online=online, batch_size=batch_size,
        device=device, cache_dir=Path(cache_dir) / "images" if cache_dir else None, progress=progress,
    )


def _spec_fingerprint(spec: str) -> str:
    """The spec plus the modification time of the file or folder it names, if any (stale-cache guard)."""
    _, _, arg = spec.partition(":")
    path = Path(arg) if arg else None
    if path is not None and path.exists():
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        newest = max((p.stat().st_mtime_ns for p in files), default=0)
        return f"{spec}@{newest}"
    return spec


def embed_cached(
    text_encoder: str | TextEmbedder,
    texts: Sequence[str],
    cache_dir: str | Path | None = DEFAULT_CACHE,
    progress: bool = True,
    online: bool = False,
    loaded: dict[str, TextEmbedder] | None = None,
) -> np.ndarray:
    """Embed ``texts`` (each distinct text once), reading/writing ``cache_dir/text/<hash>.npy``.

    A positional embedder (``npy:`` without a ``.texts.json`` sidecar) gets ``texts`` as given: row i is text i.

    ``text_encoder`` is a spec string (loaded only on a cache miss, downloading only when ``online``) or an
    embedder object. ``loaded`` (spec -> embedder) lets one command's calls share a spec's model: one loaded here is
    added to it, and one found in it is not loaded again.
    The key hashes the spec or the embedder's name (with the modification time of a file or folder it names: a
    loaded ``globetrotter.Encoder`` is named ``globetrotter:CHECKPOINT``), and the texts in order.
    """
    texts = [str(t) for t in texts]
    key = _spec_fingerprint(text_encoder if isinstance(text_encoder, str) else text_encoder.name)
    path = None
    if cache_dir:
        digest = hashlib.sha256("\x1e".join([key, *texts]).encode("utf-8")).hexdigest()[:20]
        path = Path(cache_dir) / "text" / f"text-{digest}.npy"
        cached = read_cache_entry(path, len(texts))
        if cached is not None:
            return cached
    if isinstance(text_encoder, str):
        loaded = {} if loaded is None else loaded
        if text_encoder not in loaded:
            loaded[text_encoder] = load_embedder(text_encoder, online=online, progress=progress)
        embedder = loaded[text_encoder]
    else:
        embedder = text_encoder
    if is_positional(embedder):  # rows are the texts asked for, in order (npy: without a sidecar): no sort/dedupe
        emb = embed_texts(embedder, texts)
    else:
        distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        emb = embed_texts(embedder, [str(t) for t in distinct])[inverse.reshape(-1)]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, emb)
        os.replace(tmp, path)
    return emb


def load_split_features(
    split_dir: str | Path,
    text_encoder: str | TextEmbedder,
    extractor: ImageFeatureExtractor | None,
    langs: Sequence[str] | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE,
    progress: bool = True,
    max_captions_per_image: int | None = None,
    every_image: bool = False,
    online: bool = False,
    loaded: dict[str, TextEmbedder] | None = None,
) -> SplitFeatures:
    """Read a split (``manifest.json`` + shards) in ``langs`` and compute/load its frozen features.

    The images are those the ``langs`` captions show, or with ``every_image`` every image of the split (the
    retrieval gallery, the same whatever ``langs``). ``online`` lets the text encoder download (``st:`` models);
    ``loaded`` shares its model between calls (:func:`embed_cached`).

    ``max_captions_per_image`` keeps only the first N captions of each image in each language
    (file order), e.g. 1 for the Multi30K setting of one caption per image. Splits that store
    ``npy`` image features use them as they are (no image model needed).
    """
    data = load_split(split_dir, langs, every_image=every_image)
    keep = np.arange(len(data.texts))
    if max_captions_per_image is not None:
        keep = first_captions(data.image_index, data.langs, max_captions_per_image)
    texts = [data.texts[i] for i in keep]
    text_features = embed_cached(text_encoder, texts, cache_dir, progress, online, loaded)
    with cli_option_names(False):  # the zeroshot commands' image model is a config's image_encoder/image_weights:
        # backretrieval's --image-model/--image-weights are none of their flags
        images = image_features(data, None if data.image_format == "npy" else extractor)
    return SplitFeatures(
        texts=texts,
        langs=np.asarray(data.langs, dtype=object)[keep],
        groups=np.asarray(data.groups, dtype=object)[keep],
        caption_image=np.asarray(data.image_index, dtype=np.int64)[keep],
        image_keys=list(data.image_keys),
        text_features=np.asarray(text_features, dtype=np.float32),
        image_features=np.asarray(images, dtype=np.float32),
    )
