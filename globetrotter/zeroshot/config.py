"""Configuration of the XTD10 zero-shot system: every constant a key; the defaults are this project's system
(``configs/zeroshot/xtd10.yaml``: the paper's, as described).

Loaded from YAML with ``key.sub=value`` overrides by :func:`globetrotter.config_io.load_config`,
e.g. ``loss.name=patr optim.epochs=10``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from backretrieval.files import is_whole


@dataclass
class AdapterConfig:
    """The adapter (adapter.py): its form, widths and dropout.

    ``dropout`` is a list of one rate per block: its length is the number of blocks (``[0.1]`` builds one block,
    the default ``[0.1, 0.1, 0.1]`` three; a single number is refused).
    ``residual``: one width (``hidden_dims: [W]``) and one pre-norm residual MLP block per ``dropout`` rate.
    ``xtd10`` (XTD10 3.1): FC -> dropout -> ReLU -> L2-norm blocks of widths ``hidden_dims`` and the image-feature
    size, one ``dropout`` rate per block (the paper: ``hidden_dims: [1024, 2048]``, ``dropout: [0.2, 0.1, 0.0]``).
    """

    form: Literal["residual", "xtd10"] = "residual"
    hidden_dims: list[int] = field(default_factory=lambda: [1024])
    # one rate per block, so its length is the number of blocks: [0.1] builds a 1-block adapter
    dropout: list[float] = field(default_factory=lambda: [0.1, 0.1, 0.1])
    # fixed multiplier of the output (adapter.py). null: 1 for residual; for xtd10, or with normalize_output,
    # the mean L2 norm of the training images' features (1.0 = the paper literally)
    output_scale: float | None = None
    # scale each output to unit length before output_scale: outputs on the images' sphere (what M3L needs)
    normalize_output: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``adapter.*`` key out of range or not matching the form."""
        for key, value in (("adapter.hidden_dims", self.hidden_dims), ("adapter.dropout", self.dropout)):
            if not isinstance(value, (list, tuple)):  # as YAML refuses it: a bare number was a TypeError here
                raise ValueError(f"{key} expected a list (one entry per block), got {value!r}")
        if self.form == "xtd10" and len(self.dropout) != len(self.hidden_dims) + 1:
            raise ValueError(
                f"adapter.dropout needs {len(self.hidden_dims) + 1} rates (one per block), got {self.dropout}"
            )
        if self.form == "residual" and len(self.hidden_dims) != 1:
            raise ValueError(f"adapter.hidden_dims of the residual form is one width [W], got {self.hidden_dims}")
        if not self.dropout:
            raise ValueError("adapter.dropout needs one rate per block, got none")
        if any(not 0.0 <= p < 1.0 for p in self.dropout):
            raise ValueError(f"adapter.dropout rates must be in [0, 1), got {self.dropout}")
        if any(w <= 0 for w in self.hidden_dims):
            raise ValueError(f"adapter.hidden_dims must be positive, got {self.hidden_dims}")
        if self.output_scale is not None and not 0 < self.output_scale < math.inf:
            raise ValueError(f"adapter.output_scale must be > 0 and finite, or null, got {self.output_scale}")


@dataclass
class LossConfig:
    """XTD10 section 3.2: M3L (eq. 1) or PATR (eq. 2), both with in-batch hard negatives."""

    name: Literal["m3l", "patr"] = "patr"
    rho: float = 4.0  # eq. (1) sensitivity exponent
    alpha1: float = 0.5  # eq. (1) weight of the negative image
    alpha2: float = 1.0  # eq. (1) weight of the negative text
    # eq. (1)'s negative-text ratio d(a, p) / d(x, n_txt): x = the positive image (image) or, as the paper
    # writes it, the anchor caption (anchor), which settles at chance (losses.py)
    text_term: Literal["image", "anchor"] = "image"
    # M3L's negatives: the hardest in the batch (the paper) or a random other image's; PATR always mines the hardest
    negatives: Literal["hardest", "random"] = "hardest"
    # eq. (2) eta, a squared distance, so it depends on the image encoder's scale: the paper's
    # 1100 fits ResNet-152 features (set loss.margin=1100 with them). null = margin_scale times
    # the mean squared distance between two random training images.
    margin: float | None = None
    margin_scale: float = 8.0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``loss.*`` key out of range (NaN included)."""
        # written as `not 0 < x < inf` so that NaN (every comparison False) is refused too
        if not 0 < self.rho < math.inf:
            raise ValueError(f"loss.rho must be > 0 and finite, got {self.rho}")
        for key, value in (("loss.alpha1", self.alpha1), ("loss.alpha2", self.alpha2)):
            if not 0 <= value < math.inf:
                raise ValueError(f"{key} must be >= 0 and finite, got {value}")
        if self.margin is not None and not 0 <= self.margin < math.inf:
            raise ValueError(f"loss.margin must be >= 0 and finite, or null, got {self.margin}")
        if not 0 < self.margin_scale < math.inf:
            raise ValueError(f"loss.margin_scale must be > 0 and finite, got {self.margin_scale}")


@dataclass
class OptimConfig:
    """Adam, lr 1e-3, batch 128, 20 epochs (XTD10 3.2: beta1 0.99, 50 epochs; configs/zeroshot/xtd10.yaml)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    batch_size: int = 128  # large, so the batch holds hard negatives
    epochs: int = 20
    seed: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``optim.*`` key out of range (NaN included)."""
        if not is_whole(self.batch_size) or self.batch_size < 2:  # 2.5 (a config made in Python): a slice error
            raise ValueError(f"optim.batch_size must be an integer >= 2 (negatives come from the batch), got "
                             f"{self.batch_size}")
        if not is_whole(self.epochs) or self.epochs < 1:
            raise ValueError(f"optim.epochs must be an integer >= 1, got {self.epochs}")
        if not is_whole(self.seed):  # 1.5: torch's manual_seed error
            raise ValueError(f"optim.seed must be an integer, got {self.seed}")
        if not 0 < self.lr < math.inf:  # NaN fails every comparison, so it is refused here too
            raise ValueError(f"optim.lr must be > 0 and finite, got {self.lr}")
        if not 0 <= self.weight_decay < math.inf:
            raise ValueError(f"optim.weight_decay must be >= 0 and finite, got {self.weight_decay}")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError("optim.beta1 and optim.beta2 must be in [0, 1)")


@dataclass
class ZeroShotConfig:
    """The whole system: encoders (frozen), adapter, loss, optimiser and training languages."""

    text_encoder: str = "use"  # a backretrieval embedder spec: use | npy:PATH | st:MODEL | globetrotter:CKPT
    image_encoder: str = "efficientnet_lite0"  # any timm model name (pooled pre-logits features)
    image_weights: str | None = None  # package | FILE | hub; null: 'package' (offline) for efficientnet_lite0
    train_langs: list[str] = field(default_factory=lambda: ["en"])  # zero-shot: train on English only
    max_captions_per_image: int | None = None  # first N training captions per image and language (null: all)
    metric: Literal["cosine", "l2"] = "cosine"  # how images are ranked: in validation, and `retrieval`'s default
    adapter: AdapterConfig = field(default_factory=AdapterConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def validate(self) -> None:
        """Raise ``ValueError`` for no or repeated ``train_langs``, or ``max_captions_per_image`` below 1."""
        if not isinstance(self.train_langs, (list, tuple)):  # a bare "en" was read as the languages e and n
            raise ValueError(f"train_langs expected a list of language codes, got {self.train_langs!r}")
        if not self.train_langs:
            raise ValueError("train_langs must name at least one language")
        repeated = sorted({lang for lang in self.train_langs if self.train_langs.count(lang) > 1})
        if repeated:  # as --languages refuses them: each caption would be counted once whatever the repeats
            raise ValueError(f"train_langs names {', '.join(repeated)} more than once, got {self.train_langs}")
        if self.max_captions_per_image is not None and self.max_captions_per_image < 1:
            raise ValueError(f"max_captions_per_image must be >= 1 or null, got {self.max_captions_per_image}")
