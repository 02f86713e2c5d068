"""What a conversion is asked to do besides its sources: :class:`ConvertOptions`, checked as it is made."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from data_prep.errors import UserError

from .images import ImageSpec
from .splits import SplitFile, split_name


@dataclass
class ConvertOptions:
    """Everything a conversion needs besides its sources (command-line flags of the same names)."""

    out_dir: Path
    image_roots: list[Path] = field(default_factory=list)
    languages: list[str] | None = None  # None: every language found
    assign_languages: bool = False
    test_fraction: float | None = None
    val_fraction: float | None = None
    split_files: list[SplitFile] = field(default_factory=list)  # --split-file SPLIT=FILE (exclusive with fractions)
    all_to: str | None = None  # --all-to SPLIT: every image to one split
    parallel_train: list[str] | None = None
    seed: int = 0
    limit_images: int | None = None
    image: ImageSpec = field(default_factory=ImageSpec)
    workers: int = 1
    shard_size: int = 2000
    overwrite: bool = False
    check: bool = True
    progress: bool = True
    source_name: str = "converted"
    source_args: dict = field(default_factory=dict)  # the sources as given, with caption files' sha256 (summary)

    def __post_init__(self) -> None:
        for name in ("test_fraction", "val_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise UserError(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
        if (self.test_fraction or 0.0) + (self.val_fraction or 0.0) > 1.0:
            raise UserError("--test-fraction plus --val-fraction must not exceed 1")
        given = self.split_options()
        if len(given) > 1 and not all(name.endswith("-fraction") for name in given):
            raise UserError(f"{' and '.join(given)} are exclusive: give the splits either by fractions "
                            "(--test-fraction/--val-fraction), by split files (--split-file SPLIT=FILE, repeatable) "
                            "or all to one split (--all-to SPLIT)")
        if self.all_to is not None:
            try:
                self.all_to = split_name(self.all_to)
            except ValueError as err:
                raise UserError(f"--all-to: {err}") from None
        if self.limit_images is not None and self.limit_images < 1:
            raise UserError(f"--max-images must be positive, got {self.limit_images}")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1, got {self.workers}")

    def split_options(self) -> list[str]:
        """The command-line split options given: ``--split-file``, ``--all-to``, then the fractions."""
        fractions = [f"--{n.replace('_', '-')}" for n in ("test_fraction", "val_fraction") if getattr(self, n) is not None]
        lists = (["--split-file"] if self.split_files else []) + (["--all-to"] if self.all_to is not None else [])
        return lists + fractions
