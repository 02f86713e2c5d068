"""The ``model.*`` section of the training config (:class:`ModelConfig`): the text transformer and the image
encoder."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class ModelConfig:
    """Text transformer (paper: 4 layers, 4 heads, d=512, FFN 1024) and ResNet image encoder."""

    d_model: int = 512
    layers: int = 4
    heads: int = 4
    ffn: int = 1024
    dropout: float = 0.1
    embed_dim: int = 128  # D of every head's output (paper: 128)
    image_backbone: str = "resnet18"  # any timm model name, or "imported" (imported embeddings in data.features)
    image_pretrained: str | None = None  # local weights file (.safetensors/.pth), "package" (offline ImageNet
    # EfficientNet-Lite0/1/2, with image_backbone=efficientnet_lite0/1/2), "hub" (timm's ImageNet weights, downloaded
    # from the Hugging Face hub: the one value that downloads) or null = random init; with image_backbone=imported:
    # the imported embeddings' name (globetrotter-data features import --name)
    # extra timm.create_model kwargs; with image_backbone=imported, {num_features: D}, set by training from the cache
    image_backbone_args: dict[str, Any] = field(default_factory=dict)
    freeze_image_backbone: bool = False  # keep the (pretrained) backbone fixed, in eval mode; train its heads only
    # L_x's image side: mlp = a learned projection head (the paper); features = the frozen backbone's own
    # features, centred and L2-normalised (no learned image head; the caption head x outputs their width)
    image_head_x: Literal["mlp", "features"] = "mlp"
    text_pooling_t: Literal["sentence", "mean"] = "sentence"  # features for L_t (official code: mean)
    text_pooling_x: Literal["sentence", "mean"] = "sentence"  # features for L_x (official code: the sentence token)
    # where the text encoder's final LayerNorm acts for the heads: token = on every token state, then pool (the
    # paper's encoder); pooled = pool the residual stream, then LayerNorm the pooled vector, which keeps the tokens'
    # relative weights (the image-pivot rows carry idf in their norms)
    text_pool_norm: Literal["token", "pooled"] = "token"
    # the transformer blocks' output projections (attention and FFN): default = PyTorch's init; zero = every block
    # starts as the identity (as timm's zero_init_last), so the model starts as the bag of its token embeddings
    residual_init: Literal["default", "zero"] = "default"
    # the token embeddings' start: random (the paper), or image_pivot = the rows of a closed-form ridge map from
    # caption token bags to their own images' cached features (globetrotter/training/token_init.py; needs
    # data.features and the transformer text encoder); token_init_alpha is the ridge's L2 strength, or a list of
    # candidates of which the one with the lowest held-out squared error is taken: token_init_folds-fold
    # cross-validation that keeps each image's captions in one fold (no parallel text; the choice goes to the log and
    # the run's token_init.json)
    token_init: Literal["random", "image_pivot"] = "random"
    token_init_alpha: float | list[float] = 3.0
    token_init_folds: int = 5
    # the image-pivot rows' standard deviation; null = the random table's (0.02). Larger rows keep their weight in the
    # residual stream against what the blocks learn to add (docs/design.md section 11)
    token_init_std: float | None = None
    # subword-informed token vectors: a token's input vector is its row plus the rows of its character n-grams of
    # these lengths (e.g. [2, 4]; globetrotter/models/subword.py), so rare forms and cognates share what their
    # n-grams learnt from every language's captions; null = the paper's plain table
    token_ngrams: list[int] | None = None
    # transformer: the method's shared encoder. sigurdsson: the Sigurdsson et al. (2020) baseline as the
    # paper extends it (section 5.1): one word table and adapting layer per language over the shared
    # vocabulary, max-pooled over words (layers/heads/ffn unused); needs loss.cloze=0
    text_encoder: Literal["transformer", "sigurdsson"] = "transformer"
    languages: list[str] = field(default_factory=list)  # sigurdsson: one table each; empty = the train manifest's

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``model.*`` key out of range or at odds with another; loading a config
        calls it."""
        if len(set(self.languages)) != len(self.languages):
            raise ValueError(f"model.languages has duplicates: {self.languages}")
        if self.token_ngrams is not None:
            if (len(self.token_ngrams) != 2 or not all(isinstance(n, int) for n in self.token_ngrams)
                    or not 1 <= self.token_ngrams[0] <= self.token_ngrams[1]):
                raise ValueError(f"model.token_ngrams must be [min, max] character n-gram lengths with 1 <= min <= max "
                                 f"(or null), got {self.token_ngrams}")
            if self.text_encoder != "transformer":
                raise ValueError("model.token_ngrams composes the shared transformer's token table; "
                                 f"model.text_encoder={self.text_encoder} has none")
        for key in ("d_model", "embed_dim", "layers", "heads", "ffn"):
            if getattr(self, key) < 1:
                raise ValueError(f"model.{key} must be >= 1, got {getattr(self, key)}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.text_encoder == "sigurdsson":
            return  # no transformer to check
        if self.d_model % self.heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
