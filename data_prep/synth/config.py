"""The synthetic world's config: sizes of the splits, languages, and how much a caption says.

Loaded with ``data_prep.config_io.load_config(SynthConfig, path, overrides)``; every
field has a default sized so the whole world is generated in seconds and a small CPU
model can learn from it (docs/design.md section 4).
"""
from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LANGUAGES = ["en", "de", "fr", "es", "ru", "el", "ja", "zh", "ar"]


@dataclass
class SynthConfig:
    """Everything that decides the synthetic world; the same config gives byte-identical shards."""

    seed: int = 0
    languages: list[str] = field(default_factory=lambda: list(DEFAULT_LANGUAGES))
    heldout_languages: list[str] = field(default_factory=list)  # never in train/val; in test and adapt/
    image_size: int = 64  # side of the square images, pixels
    train_images: int = 12000  # each captioned in ONE training language (balanced)
    val_images: int = 600  # each captioned in ONE training language (balanced)
    test_images: int = 300  # each captioned in ALL languages, tied by group
    parallel_train_images: int = 0  # extra train-parallel/ scenes in all training languages (supervised baseline)
    adapt_images: int = 2000  # adapt/ scenes captioned in one held-out language (only with heldout_languages)
    max_objects: int = 3  # objects per scene (1..max_objects), at most 3 of one kind
    image_format: str = "jpg"  # jpg (quality 90: smaller and faster to encode than png) or png
    shard_size: int = 2000  # samples per .tar shard
    workers: int = 0  # rendering processes; 0 = all cores, 1 = in-process
    chunk_size: int = 250  # scenes per worker task
    # Probability that a caption mentions each attribute (the shape is always named).
    p_mention_object: float = 0.7  # each object kind of the scene (at least one is mentioned)
    p_mention_colour: float = 0.8
    p_mention_size: float = 0.5
    p_mention_count: float = 0.8  # exact number for a kind seen 2-3 times (else "several")
    p_mention_position: float = 0.4  # left/right/top/bottom/centre of a single object, when clear
    p_mention_background: float = 0.3
    pixel_noise: float = 6.0  # maximum std of the Gaussian pixel noise added to a scene (0-255 scale)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field."""
        from .lexicon import known_languages  # local: lexicons are data files

        known = known_languages()
        if self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed}")
        for key in ("languages", "heldout_languages"):
            for code in getattr(self, key):
                if code not in known:
                    raise ValueError(f"{key}: unknown language code {code!r} (known: {', '.join(known)})")
        if len(set(self.languages)) != len(self.languages):
            raise ValueError(f"languages: duplicate codes in {self.languages}")
        if len(set(self.heldout_languages)) != len(self.heldout_languages):
            raise ValueError(f"heldout_languages: duplicate codes in {self.heldout_languages}")
        if not self.train_languages:
            raise ValueError("languages: need at least one training language that is not held out")
        if not 16 <= self.image_size <= 1024:
            raise ValueError(f"image_size: expected 16..1024 pixels, got {self.image_size}")
        for key in ("train_images", "val_images", "test_images"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: expected at least 1, got {getattr(self, key)}")
        for key in ("parallel_train_images", "adapt_images", "workers"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: expected >= 0, got {getattr(self, key)}")
        if self.heldout_languages and self.adapt_images < 1:
            raise ValueError("adapt_images: expected at least 1 when heldout_languages is set")
        if not 1 <= self.max_objects <= 6:
            raise ValueError(f"max_objects: expected 1..6, got {self.max_objects}")
        if self.image_format not in ("png", "jpg"):
            raise ValueError(f"image_format: expected 'png' or 'jpg', got {self.image_format!r}")
        for key in ("shard_size", "chunk_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: expected at least 1, got {getattr(self, key)}")
        for key in ("p_mention_object", "p_mention_colour", "p_mention_size", "p_mention_count",
                    "p_mention_position", "p_mention_background"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"{key}: expected a probability in [0, 1], got {getattr(self, key)}")
        if not 0.0 <= self.pixel_noise <= 64.0:
            raise ValueError(f"pixel_noise: expected 0..64, got {self.pixel_noise}")

    @property
    def train_languages(self) -> list[str]:
        """Languages of train/val captions: ``languages`` minus the held-out ones."""
        return [code for code in self.languages if code not in self.heldout_languages]

    @property
    def all_languages(self) -> list[str]:
        """Every language of the world: training languages, then held-out ones."""
        return self.train_languages + [c for c in self.heldout_languages if c not in self.train_languages]
