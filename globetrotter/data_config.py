"""The ``data.*`` section of the training config (:class:`DataConfig`): where the shards are and how samples become
tensors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from data_prep.synth.config import SynthConfig


@dataclass
class DataConfig:
    """Where the shards are and how samples become tensors."""

    root: str = "data/synth"  # dataset folder with train/ val/ test/ split folders
    train_split: str = "train"
    # the languages of the train split that training reads (captions, and with them their samples: the loader,
    # neighbour batching, the image-pivot start, an adaptation's old captions); null = every language of the
    # split. Val and test stay whole: a language left out here can be evaluated, or adapted to (adapt.split=train)
    train_languages: list[str] | None = None
    # a fixed share of the train split's images that training reads (their captions only; 1 = all): a hash of
    # each image id picks them, so shares are nested and the same for every seed (learning curves:
    # experiments/study_images_per_language.py). The tokenizer and the feature cache stay those of the whole split; val and test stay whole
    train_image_share: float = 1.0
    # a split (e.g. the one-language train split): the share above is worked out at the start so that the run reads
    # exactly as many images per language as that split gives a language, on average over the run's languages (the
    # images-matched supervised twin on any dataset); the run's saved config holds the share it found
    match_images_of: str | None = None
    val_split: str = "val"  # BackRetrieval on it (no parallel data needed)
    test_split: str | None = "test"  # parallel split for ground-truth metrics; null to skip
    synth: SynthConfig | None = None  # generate the synthetic world into `root` when it is absent
    tokenizer: str | None = None  # tokenizer.json; default <root>/tokenizer.json, trained if absent
    # the split the shared BPE is trained on when the tokenizer file is absent: a one-language split, so that twins
    # trained on other splits (the supervised baseline's parallel split) share one BPE that saw no parallel text
    tokenizer_split: str = "train"
    # what the BPE sees: none = the text as written (the paper); uncased = lower case, Latin letters' accents stripped
    # and a space before every caption (docs/design.md section 11). Its default file is
    # <root>/tokenizer-uncased.json, and a tokenizer file made with another normalisation is refused
    tokenizer_normalization: Literal["none", "uncased"] = "none"
    vocab_size: int = 30000  # shared BPE vocabulary (paper: 30k)
    max_length: int = 32  # tokens per caption, sentence token included
    image_size: int = 64  # side of the square crops fed to the image encoder (paper: 224)
    crop_scale_min: float = 0.2  # RandomResizedCrop lower scale (SimCLR)
    colour_jitter: float = 0.4  # brightness/contrast/saturation jitter strength (SimCLR; 0 disables)
    hue_jitter: float = 0.1  # hue shift of the jitter (SimCLR); 0 keeps colour words true
    grayscale: float = 0.2  # probability of a grayscale view (SimCLR)
    hflip: bool = True  # random horizontal flips; false keeps "left"/"right" in captions true
    # where SimCLR's two views are made, with the settings above: cpu = in the data workers, one image at a time
    # (torchvision); device = the workers decode and resize, the training device makes the views of the whole
    # batch (globetrotter/data/device_augment.py), each sample still seeded on its own
    augment_on: Literal["cpu", "device"] = "cpu"
    # augment_on=device: the square side the workers resize every image to (aspect ignored; crops are drawn in
    # the image's own geometry). null: 2 × image_size (a crop of 1/4 of the area or more is never upsampled);
    # set the shards' stored side (pre-resized shards) to skip the resize
    device_source_size: int | None = None
    shuffle_buffer: int = 2000
    # random: the paper; pairs: B/2 translation pairs per batch (parallel split, supervised baseline);
    # neighbours: half the batch are anchors, half a caption of a visual nearest neighbour of each
    # anchor's image in another language (needs data.features; docs/design.md section 10)
    batching: Literal["random", "pairs", "neighbours"] = "random"
    neighbours_k: int = 10  # neighbours: the k nearest other-language images an anchor's mate is drawn from
    workers: int = 2  # data-loader processes per training process
    # Frozen backbone: read pooled backbone features from a cache instead of pixels (docs/design.md section 10).
    # null = pixels; auto = <root>/<split>/features (built at the first run); or a cache folder.
    features: str | None = None
    feature_views: int = 4  # augmented views cached per image (L_v contrasts two of them); the whole image is added
    feature_seed: int = 0  # seed of the cached views' augmentations
    max_bad_samples: int = 100  # distinct bad samples (truncated shard, undecodable image/json) a process may
    # skip before the run stops with an error naming the shard (TensorBoard data/bad_samples); 0: none allowed

    @property
    def source_side(self) -> int:
        """Side of the images the workers hand on with ``augment_on=device``."""
        return self.device_source_size or 2 * self.image_size

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``data.*`` key out of range or at odds with another; loading a config
        calls it."""
        from .tokenizer import MIN_VOCAB_SIZE

        if self.vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(f"data.vocab_size={self.vocab_size}: expected at least {MIN_VOCAB_SIZE} (the 256 byte "
                             f"symbols, the special tokens and a merge)")
        if self.val_split == self.test_split:
            raise ValueError(f"data.val_split={self.val_split!r} is also data.test_split: checkpoints are chosen on "
                             f"val, never on test")
        if self.train_languages is not None:
            if not self.train_languages:
                raise ValueError("data.train_languages is empty: name at least one language (or null for all)")
            if len(set(self.train_languages)) != len(self.train_languages):
                raise ValueError(f"data.train_languages has duplicates: {self.train_languages}")
        if not 0 < self.train_image_share <= 1:
            raise ValueError(f"data.train_image_share must be in (0, 1], got {self.train_image_share}")
        if self.match_images_of is not None and not self.match_images_of.strip():
            raise ValueError("data.match_images_of is empty: name a split of data.root (or null)")
        if self.device_source_size is not None and self.device_source_size < 1:
            raise ValueError(f"data.device_source_size must be >= 1 (or null), got {self.device_source_size}")
        if self.image_size < 1:
            raise ValueError(f"data.image_size must be >= 1 (the side of the crops in pixels), got {self.image_size}")
        if self.workers < 0:
            raise ValueError(f"data.workers must be >= 0 (0: load in the training process), got {self.workers}")
        if self.shuffle_buffer < 0:
            raise ValueError(f"data.shuffle_buffer must be >= 0 (samples held to shuffle), got {self.shuffle_buffer}")
        if self.max_bad_samples < 0:
            raise ValueError(f"data.max_bad_samples must be >= 0, got {self.max_bad_samples}")
        if self.max_length < 4:
            raise ValueError(f"data.max_length must be at least 4, got {self.max_length}")
        if not 0 < self.crop_scale_min <= 1:
            raise ValueError(f"data.crop_scale_min must be in (0, 1], got {self.crop_scale_min}")
        if self.colour_jitter < 0 or not 0 <= self.hue_jitter <= 0.5 or not 0 <= self.grayscale <= 1:
            raise ValueError(f"data.colour_jitter must be >= 0, data.hue_jitter in [0, 0.5], data.grayscale in [0, 1], got "
                             f"{self.colour_jitter}, {self.hue_jitter}, {self.grayscale}")
        if self.feature_views < 2:
            raise ValueError(f"data.feature_views must be >= 2 (L_v contrasts two cached views), got {self.feature_views}")
        if self.neighbours_k < 1:
            raise ValueError(f"data.neighbours_k must be >= 1, got {self.neighbours_k}")
        if self.batching == "neighbours" and not self.features:
            raise ValueError("data.batching=neighbours needs data.features (neighbours are mined on cached features)")
