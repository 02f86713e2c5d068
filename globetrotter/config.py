"""The training config: every constant of a Globetrotter run, with the paper's values as defaults.

Load with :func:`load_train_config` (YAML + ``key.sub=value`` overrides, validated);
the resolved config is saved beside every checkpoint and result. Its ``data.*`` and ``model.*`` sections are
:mod:`globetrotter.data_config` and :mod:`globetrotter.model_config`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

from .config_io import load_config, read_yaml
from .data_config import DataConfig
from .errors import UserError
from .model_config import ModelConfig

# model.image_backbone of imported image embeddings (globetrotter-data features import): no image network, the
# cache's vectors are the image features; model.image_pretrained names them
IMPORTED_BACKBONE = "imported"


# the one-line error for a network of the offline package given arguments (checked when a config loads)
PACKAGE_ARGS = ("model.image_backbone_args must be empty with model.image_pretrained=package (the package's network "
                "takes no arguments), got {args} (e.g. a config's ResNet arguments, kept when model.image_backbone "
                "changed): add the override model.image_backbone_args={{}}")


@dataclass
class LossConfig:
    """Total = L_t + λ1 L_v + λ2 L_x + λ3 L_c (paper eq. 5); a weight of 0 removes the loss. The λ default to the
    released code's 1 (the paper's appendix B.1: 0.2 each, as configs/globetrotter-paper.yaml sets them)."""

    temperature: float = 0.1  # τ of every contrastive loss
    margin: float = 0.4  # m of f(x) = max(0, x - m) / (1 - m) (paper section 3.2)
    transitive: Literal["paper", "official"] = "paper"  # α as the paper writes it, or as the released code
    alpha_source: Literal["transitive", "supervised"] = "transitive"  # supervised: α from true pairs
    text: float = 1.0  # weight of L_t
    image: float = 1.0  # λ1, L_v (SimCLR)
    cross: float = 1.0  # λ2, L_x (cross-modal)
    cloze: float = 1.0  # λ3, L_c (token cloze)
    mask_prob: float = 1 / 6  # cloze: p of choosing a token (80/10/10)
    corrupt_other: float = 0.0  # cloze: official code corrupts non-targets with 0.2

    @property
    def uses_images(self) -> bool:
        """Whether training reads images: L_v or L_x has a weight, or L_t takes its α from the images
        (``transitive``)."""
        return self.image > 0 or self.cross > 0 or (self.text > 0 and self.alpha_source == "transitive")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``loss.*`` key out of range; loading a config calls it."""
        for key in ("text", "image", "cross", "cloze"):
            if getattr(self, key) < 0:
                raise ValueError(f"loss.{key} must be >= 0 (a weight; 0 removes the loss), got {getattr(self, key)}")
        if self.text + self.image + self.cross + self.cloze == 0:
            raise ValueError("at least one loss weight must be > 0")
        if not 0 <= self.margin < 1:
            raise ValueError(f"loss.margin must be in [0, 1), got {self.margin}")
        if not self.temperature > 0:
            raise ValueError(f"loss.temperature must be > 0, got {self.temperature}")
        if not 0 < self.mask_prob <= 1:
            raise ValueError(f"loss.mask_prob must be in (0, 1] (the cloze's share of tokens chosen), got {self.mask_prob}")
        if not 0 <= self.corrupt_other <= 1:
            raise ValueError(f"loss.corrupt_other must be in [0, 1] (a probability), got {self.corrupt_other}")


@dataclass
class OptimConfig:
    """AdamW with linear warm-up and cosine decay; gradient clipping."""

    lr: float = 1e-4
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 100
    min_lr_ratio: float = 0.0  # cosine floor as a fraction of lr
    grad_clip: float = 1.0  # max global grad norm; 0 disables
    embedding_lr_scale: float = 1.0  # the text encoder's token embeddings learn at lr × this (1 = one group)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``optim.*`` key out of range; loading a config calls it."""
        if not self.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")
        for key in ("weight_decay", "warmup_steps", "grad_clip"):
            if getattr(self, key) < 0:
                raise ValueError(f"optim.{key} must be >= 0, got {getattr(self, key)}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")


@dataclass
class ValConfig:
    """The validation hook: BackRetrieval on val (no parallel data), which also chooses the best checkpoint."""

    every: int = 500  # steps; 0 disables
    bkr_ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    # val captions per language for BackRetrieval (a seeded sample); null: every val caption (past 150,000 queries
    # each pair's BkR is estimated from a seeded sample of its queries against all its captions, docs/scale.md)
    max_per_lang: int | None = 200
    # 0 (default): training never reads the test split. N > 0: also log sentence translation on N test groups at
    # every validation (and an adaptation's before/after), for a run that asks for it; never used to choose anything
    test_groups: int = 0
    select_by: str = "val/bkr@10"  # val/bkr@K (K in bkr_ks) choosing the best checkpoint; "" keeps none
    # BackRetrieval's image similarity g: pixels | features (the run's image-feature cache, data.features: no
    # picture decoded) | features:PATH (another cache) | timm:NAME[:WEIGHTS]
    image_features: str = "pixels"
    # Keep the best checkpoint unless a new one is better beyond noise on the same val queries:
    # null = plain max of select_by (as before); mcnemar (exact, on the per-query hits) | bootstrap
    # (paired, 1000 replicates); needs select_by = val/bkr@K with K in bkr_ks (backretrieval.p_better)
    select_test: Literal["mcnemar", "bootstrap"] | None = None
    select_alpha: float = 0.05  # one-sided level of "new > best" for select_test

    @property
    def selection_keys(self) -> list[str]:
        """The metrics ``select_by`` may name: ``val/bkr@K`` for K in ``bkr_ks``."""
        return [f"val/bkr@{k}" for k in self.bkr_ks]

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``val.*`` key out of range or at odds with another; loading a config
        calls it."""
        if self.every < 0:
            raise ValueError(f"val.every must be >= 0 (steps between validations; 0 disables), got {self.every}")
        if not all(k >= 1 for k in self.bkr_ks) or len(set(self.bkr_ks)) != len(self.bkr_ks):
            raise ValueError(f"val.bkr_ks must be distinct integers >= 1 (BackRetrieval@K), got {self.bkr_ks}")
        g = self.image_features
        if g not in ("pixels", "features") and not g.startswith(("features:", "timm:")):
            raise ValueError(f"val.image_features={g!r}: expected pixels, features, features:PATH or "
                             "timm:NAME[:WEIGHTS]")
        if self.max_per_lang is not None and self.max_per_lang < 1:
            raise ValueError(f"val.max_per_lang must be >= 1, or null for every val caption, got {self.max_per_lang}")
        if self.test_groups < 0:
            raise ValueError(f"val.test_groups must be >= 0 (0: never read the test split), got {self.test_groups}")
        if self.select_by.startswith("test/"):
            raise ValueError(f"val.select_by={self.select_by!r}: checkpoints are chosen on val, never on test "
                             f"(expected one of {self.selection_keys})")
        if self.select_by and self.select_by not in self.selection_keys:
            raise ValueError(f"val.select_by={self.select_by!r}: unknown metric (expected one of {self.selection_keys}, "
                             f"or \"\" to keep no best checkpoint)")
        if not 0 < self.select_alpha < 1:
            raise ValueError(f"val.select_alpha must be in (0, 1), got {self.select_alpha}")
        if self.select_test and not self.select_by:
            raise ValueError(f"val.select_test={self.select_test} needs val.select_by = val/bkr@K with K in val.bkr_ks "
                             f"{list(self.bkr_ks)} (the test reads per-query hits), got {self.select_by!r}")


@dataclass
class AdaptConfig:
    """Adaptation of a trained run to a language it never saw (Globetrotter paper, appendix A.2).

    ``adapt.from=RUN adapt.language=CODE`` starts from RUN's checkpoint (its best, else latest) and saved
    config, precomputes the old languages' caption and image features once (frozen), and fine-tunes the
    text side on the new language's captions with the same losses (:mod:`globetrotter.training.adapt`).
    """

    from_run: str | None = field(default=None, metadata={"key": "from"})  # key `adapt.from`: run folder or
    # checkpoint to adapt; null = an ordinary run from scratch
    language: str | None = None  # the new language; must not be one of the run's training languages
    split: str = "adapt"  # split under data.root holding the new language's captions and images (others ignored); the
    # train split itself for a language the run left out of it (data.train_languages); or the path of any split folder
    # (absolute, or relative to the working directory): new images, their features cached in <split>/features
    epochs: float | None = 1.0  # passes over the new language's captions (paper: one); sets `steps`; null: `steps`
    old_batch: int | None = None  # precomputed old-language captions beside each step's batch in L_t; null: batch_size
    old_captions: int | None = None  # old-language training captions precomputed (a seeded sample); null: all
    vocab_size: int = 1000  # BPE learnt on the new language's captions; its tokens that no old training caption
    # contains are appended to the vocabulary (a new script is otherwise bytes: 10x the tokens); 0 keeps it
    # text: the whole text side trains (the paper fine-tunes the model); new-tokens: only the embeddings (and cloze
    # biases) of the new language's tokens that no old training caption holds (the appended ones, and those a shared
    # BPE already had: a language left out by data.train_languages), so every old training caption is encoded as before
    train: Literal["text", "new-tokens"] = "new-tokens"

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first ``adapt.*`` key out of range or at odds with another; loading a config
        calls it."""
        if self.from_run and not self.language:
            raise ValueError("adapt.from needs adapt.language (the new language's code)")
        if self.epochs is not None and self.epochs <= 0:
            raise ValueError(f"adapt.epochs must be > 0 (or null to use steps), got {self.epochs}")
        if (self.old_batch is not None and self.old_batch < 1) or (self.old_captions is not None and self.old_captions < 1):
            raise ValueError(f"adapt.old_batch and adapt.old_captions must be >= 1 (or null), got {self.old_batch} and "
                             f"{self.old_captions}")
        from .tokenizer import MIN_VOCAB_SIZE

        if self.vocab_size != 0 and self.vocab_size < MIN_VOCAB_SIZE:  # a BPE below it has no merge: no new token
            raise ValueError(f"adapt.vocab_size={self.vocab_size}: expected 0 (no new token) or at least "
                             f"{MIN_VOCAB_SIZE} (the 256 byte symbols, the special tokens and a merge)")


@dataclass
class TrainConfig:
    """A whole run."""

    seed: int = 0
    run_name: str = "globetrotter"
    output_dir: str = "runs"
    steps: int = 10000
    batch_size: int = 128  # global batch (split evenly over processes)
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"  # autocast via Accelerate; bf16 without support: float32
    compile: bool = False  # torch.compile the training forward (CPU too); falls back to eager if compiling fails
    # torch intra-op threads per process; null = automatic: OMP_NUM_THREADS if set, else this machine's cores shared by
    # the processes and their data workers, never more than the load leaves free (globetrotter/threads.py; result.json
    # records the count used)
    threads: int | None = None
    log_every: int = 20
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2  # step checkpoints kept besides best/
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    val: ValConfig = field(default_factory=ValConfig)
    adapt: AdaptConfig = field(default_factory=AdaptConfig)

    @property
    def scores_test(self) -> bool:
        """Whether the run scores ``val.test_groups`` test groups: at its validations, or in an adaptation's report."""
        return self.val.test_groups > 0 and (self.val.every > 0 or bool(self.adapt.from_run))

    @property
    def run_dir(self) -> Path:
        """The run folder, ``output_dir/run_name``."""
        return Path(self.output_dir) / self.run_name

    def validate(self) -> None:
        """Raise ``ValueError`` for the first key out of range, or keys that do not go together (e.g. ``data.features``
        with a backbone that trains); loading a config calls it."""
        if self.steps <= 0:
            raise ValueError(f"steps must be > 0, got {self.steps}")
        if self.batch_size <= 1:
            raise ValueError(f"batch_size must be > 1 (a contrastive batch needs negatives), got {self.batch_size}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if not self.run_name or Path(self.run_name).name != self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"run_name={self.run_name!r}: expected a folder name, without '/' (the run is written to "
                             f"output_dir/run_name; set output_dir for another place)")
        for key in ("log_every", "checkpoint_every", "keep_checkpoints"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, or null (automatic), got {self.threads}")
        if self.optim.embedding_lr_scale <= 0:
            raise ValueError(f"optim.embedding_lr_scale must be > 0, got {self.optim.embedding_lr_scale}")
        if self.adapt.from_run and self.model.text_encoder != "transformer":
            raise ValueError("adapt.from: only the shared transformer text encoder adapts to a new language "
                             f"(model.text_encoder={self.model.text_encoder} has one word table per training language)")
        if self.model.text_encoder == "sigurdsson" and self.loss.cloze > 0:
            raise ValueError("model.text_encoder=sigurdsson is a bag of words with no language model to train: "
                             "set loss.cloze=0")
        if self.scores_test and not self.data.test_split:
            raise ValueError(f"val.test_groups={self.val.test_groups} scores translation on the test split, but "
                             "data.test_split is null; name the split, or set val.test_groups=0")
        if self.val.image_features == "features" and not self.data.features:
            raise ValueError("val.image_features=features reads the run's image-feature cache: set data.features "
                             "(auto, or the folder of a cache or of imported embeddings)")
        if self.model.token_init == "image_pivot":
            if not (self.data.features and self.loss.uses_images) or self.model.text_encoder != "transformer":
                raise ValueError("model.token_init=image_pivot maps captions to their images' cached features: it needs "
                                 "data.features, a loss that uses images and model.text_encoder=transformer")
            alpha = self.model.token_init_alpha
            alphas = alpha if isinstance(alpha, list) else [alpha]
            if not alphas or any(a <= 0 for a in alphas) or len(set(alphas)) != len(alphas):
                raise ValueError(f"model.token_init_alpha must be > 0, or a list of distinct values > 0 to "
                                 f"cross-validate, got {alpha}")
            if isinstance(alpha, list) and self.model.token_init_folds < 2:
                raise ValueError(f"model.token_init_folds must be >= 2, got {self.model.token_init_folds}")
            if self.model.token_init_std is not None and self.model.token_init_std <= 0:
                raise ValueError(f"model.token_init_std must be > 0 (or null), got {self.model.token_init_std}")
        if self.model.image_pretrained == "package" and self.model.image_backbone_args:
            raise ValueError(PACKAGE_ARGS.format(args=self.model.image_backbone_args))
        if self.data.features and self.loss.uses_images:
            if not self.model.freeze_image_backbone:
                raise ValueError("data.features reads cached backbone features: set model.freeze_image_backbone=true "
                                 "(a backbone that trains needs pixels)")
            if not self.model.image_pretrained and self.model.image_backbone == IMPORTED_BACKBONE:
                raise ValueError("model.image_backbone=imported needs model.image_pretrained: the imported embeddings' "
                                 "name (globetrotter-data features import --name)")
            if self.model.image_pretrained == "hub":
                raise ValueError("data.features needs model.image_pretrained package or a weights file, not hub: the "
                                 "cache records its weights by their file's checksum (save timm's weights to a file "
                                 "and name it)")
            if not self.model.image_pretrained:
                raise ValueError("data.features needs model.image_pretrained (package or a weights file): the cache and "
                                 "the saved model must hold the same frozen backbone, which a random init does not fix")
        if self.model.image_backbone == IMPORTED_BACKBONE and self.loss.uses_images:
            if not self.data.features:
                raise ValueError("model.image_backbone=imported reads imported embeddings: set data.features (auto or "
                                 "the folder globetrotter-data features import wrote)")
            if self.loss.image > 0:
                raise ValueError(f"loss.image={self.loss.image}: imported embeddings hold one row per image, and L_v "
                                 "(SimCLR) contrasts two augmented views; set loss.image=0 with model.image_backbone=imported")


def load_train_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Load a :class:`TrainConfig` from YAML with ``key.sub=value`` overrides (an empty file is refused)."""
    refuse_empty_config(path)
    return load_config(TrainConfig, path, overrides)


def refuse_empty_config(path: str | Path | None) -> None:
    """One-line error for a config file that holds no key (empty, or comments only): read as the defaults, a run's
    emptied config.yaml loaded a checkpoint as the default model (a size mismatch) or resumed the default run."""
    if path is not None and Path(path).is_file() and not read_yaml(path):
        raise UserError(f"{path}: the config file is empty (no key); expected a YAML mapping of training keys")
