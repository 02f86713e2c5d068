"""The run's tokenizer file: where it is (:func:`tokenizer_path`), and the checks that it is one the run may use (its
normalisation, its provenance: trained on a one-language train split, as it is now)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from data_prep.checksums import file_sha256
from data_prep.shards import MANIFEST, read_manifest

from ..config import TrainConfig
from ..errors import UserError
from ..tokenizer import (
    default_file_name,
    load_tokenizer,
    normalization_of,
    provenance_path,
    read_provenance,
    refuse_held_out_split,
    shows_parallel_text,
)


def tokenizer_path(cfg: TrainConfig) -> Path:
    """``data.tokenizer``, or ``<root>/tokenizer.json`` (``tokenizer-uncased.json`` for ``data.tokenizer_normalization:
    uncased``, so that twins of both settings can share one data root)."""
    if cfg.data.tokenizer:
        return Path(cfg.data.tokenizer)
    return Path(cfg.data.root) / default_file_name(cfg.data.tokenizer_normalization)


def check_tokenizer(cfg: TrainConfig, path: Path, log: Callable[[str], None] = print) -> None:
    """One-line errors when the tokenizer file at ``path`` was made with another normalisation than
    ``data.tokenizer_normalization`` asks for (never a silent reuse), or, for a run without parallel text (any
    ``loss.alpha_source`` but ``supervised``), when its provenance record says it was trained on captions that
    show an image in more than one language: such a BPE carries translation pairs into the model. A file with no
    provenance record, or one that lacks what the checks below need (:func:`unchecked_provenance`), is refused for a
    run without parallel text (its origin cannot be checked) and used with a warning by a supervised one. The record
    must describe this very file (its ``tokenizer_sha256``: not a record left beside a file copied over it), the
    split it names must still be ``data.tokenizer_split`` as it was (its checksum: not a split rewritten since, nor
    another split or data root), and its vocabulary size must be ``data.vocab_size`` (the saved config names the
    size the run uses)."""
    found = normalization_of(load_tokenizer(path))
    again = f"delete it (and {provenance_path(path).name}) to train it again with the run"
    if found != cfg.data.tokenizer_normalization:
        raise UserError(f"{path}: tokenizer made with normalization {found}, but data.tokenizer_normalization is "
                        f"{cfg.data.tokenizer_normalization}; point data.tokenizer elsewhere or delete the file to "
                        f"train a new one")
    provenance = read_provenance(path)
    split_dir = Path(cfg.data.root) / cfg.data.tokenizer_split
    if provenance is None:
        if cfg.loss.alpha_source != "supervised":
            raise UserError(f"{path}: the tokenizer records no provenance (the split it was trained on), so a run "
                            f"without parallel text cannot check it saw none; {again} on {split_dir}")
        log(f"warning: {path} records no provenance (the split it was trained on); {again} on {split_dir}")
        return
    recorded = provenance.get("tokenizer_sha256")
    if recorded is not None and recorded != file_sha256(path):
        raise UserError(f"{path}: its provenance record {provenance_path(path).name} describes another tokenizer file "
                        f"(sha256 {recorded[:12]}, this one {file_sha256(path)[:12]}: copied over?); {again}")
    if cfg.loss.alpha_source != "supervised" and shows_parallel_text(provenance):
        split = next(s for s in provenance["splits"] if s.get("images_in_several_languages", 0) > 0)
        raise UserError(f"{path}: tokenizer trained on {split['path']}, which captions images in several languages; "
                        f"a run without parallel text needs one trained on a one-language split (data.tokenizer_split)")
    gaps = unchecked_provenance(provenance)
    if gaps:  # as unchecked as no record at all
        what = f"its provenance record {provenance_path(path).name} lacks {', '.join(gaps)}"
        if cfg.loss.alpha_source != "supervised":
            raise UserError(f"{path}: {what}, so a run without parallel text cannot check it saw none; {again} on "
                            f"{split_dir}")
        log(f"warning: {path}: {what}; {again} on {split_dir}")
    manifest = read_manifest(split_dir)
    checksums = (manifest.get("checksum"), (manifest.get("more_captions") or {}).get("original_checksum"))
    now = {c for c in checksums if c is not None}
    trained_on = [s["checksum"] for s in provenance.get("splits", []) if s.get("checksum")]
    if now and trained_on and not now & set(trained_on):
        where = ", ".join(str(s.get("path")) for s in provenance["splits"])
        from ..data.feature_cache import same_folder

        if any(s.get("path") and same_folder(s["path"], split_dir) for s in provenance["splits"]):
            why = f"{split_dir} was rewritten since; {again}"
        else:  # another split's tokenizer: deleting it would take it from the runs of that split
            default = Path(cfg.data.root) / default_file_name(cfg.data.tokenizer_normalization)
            why = (f"another split's tokenizer; move it (and {provenance_path(path).name}) elsewhere, and the run "
                   f"trains one on {split_dir} in its place, or point data.tokenizer at one trained on {split_dir}"
                   if path.resolve() == default.resolve() else
                   f"another split's tokenizer; point data.tokenizer at one trained on {split_dir} (or leave it unset: "
                   f"the run trains one at {default})")
        raise UserError(f"{path}: tokenizer trained on {where} (checksum {str(trained_on[0])[:12]}), not on "
                        f"{split_dir} as it is now (checksum {sorted(now)[0][:12]}): {why}")
    size = provenance.get("vocab_size")
    if size is not None and size != cfg.data.vocab_size:
        raise UserError(f"{path}: tokenizer trained with vocab_size {size}, but data.vocab_size is "
                        f"{cfg.data.vocab_size}; set data.vocab_size={size} or {again}")


def unchecked_provenance(provenance: dict) -> list[str]:
    """What a tokenizer's provenance record lacks for :func:`check_tokenizer` to check it: the file's sha256, a
    checksum of the split it was trained on, its vocabulary size (not asked of an adapted tokenizer's record: it grew
    past its run's). Empty for a record the tokenizer was saved with."""
    gaps = [] if provenance.get("tokenizer_sha256") else ["tokenizer_sha256"]
    if not any(s.get("checksum") for s in provenance.get("splits", [])):
        gaps.append("a split checksum (splits[].checksum)")
    if provenance.get("vocab_size") is None and "adapt" not in provenance:
        gaps.append("vocab_size")
    return gaps


def check_tokenizer_split(cfg: TrainConfig) -> None:
    """One-line error when ``data.tokenizer_split`` is the run's val or test split (``data.val_split``,
    ``data.test_split``), or a split its manifest calls val or test: the shared tokenizer sees train captions only."""
    name = cfg.data.tokenizer_split
    held = {cfg.data.val_split: "data.val_split", cfg.data.test_split: "data.test_split"}
    if name in held:
        raise UserError(f"data.tokenizer_split={name!r} is also {held[name]}: the shared tokenizer is trained on a "
                        f"train split's captions only, never val or test; name a train split, e.g. "
                        f"data.tokenizer_split={cfg.data.train_split}")
    split_dir = Path(cfg.data.root) / name
    if (split_dir / MANIFEST).is_file():
        try:
            refuse_held_out_split(split_dir, read_manifest(split_dir))
        except UserError as err:
            raise UserError(f"data.tokenizer_split={name!r}: {err}") from None
