"""``globetrotter-data tokenizer``: train the shared BPE tokenizer on a train split's captions.

A ``globetrotter-data`` sub-command registered from the globetrotter side (:mod:`globetrotter.data_cli`): it
trains :mod:`globetrotter.tokenizer`'s BPE, and ``data_prep`` imports nothing from ``globetrotter``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from data_prep.shards import read_manifest
from tokenizers import Tokenizer

from .argtypes import int_at_least, positive_int
from .errors import UserError
from .tokenizer import (MIN_VOCAB_SIZE, NORMALIZATIONS, default_file_name, other_split_warning,
                        refuse_held_out_split, train_tokenizer_on_split)


def build_tokenizer(split_dir: str | Path, out: str | Path, vocab_size: int = 30000, min_frequency: int = 2,
                    normalization: str = "none") -> Path:
    """Train on the captions of ``split_dir`` (a one-language train split) and save to ``out`` with its provenance.
    A val or test split is refused (one line, as training refuses it for ``data.tokenizer_split``); another kind than
    train (e.g. adapt) is trained on with a warning."""
    manifest = read_manifest(split_dir)
    refuse_held_out_split(split_dir, manifest)
    doubt = other_split_warning(split_dir, manifest)
    if doubt:
        print(f"warning: {doubt}")
    return train_tokenizer_on_split(split_dir, out, vocab_size, min_frequency, normalization)


def _run(args: argparse.Namespace) -> int:
    out = args.out or Path(args.split_dir).parent / default_file_name(args.normalization)  # where training looks
    if Path(out).is_dir():
        raise UserError(f"--out {out}: is a folder; expected the tokenizer file to write (e.g. {Path(out) / 'tokenizer.json'})")
    split = Path(args.split_dir).resolve()
    if split == Path(out).resolve().parent or split in Path(out).resolve().parents:
        raise UserError(f"--out {out}: is inside the split folder {args.split_dir}; write the tokenizer elsewhere "
                        f"(default: {Path(args.split_dir).parent / default_file_name(args.normalization)})")
    if Path(out).exists() and not args.overwrite:  # the runs of a data root start from its shared file
        raise UserError(f"--out {out}: a tokenizer is there already (runs of this data root read it); pass "
                        f"--overwrite to replace it, or give another --out")
    path = build_tokenizer(args.split_dir, out, args.vocab_size, args.min_frequency, args.normalization)
    size = Tokenizer.from_file(str(path)).get_vocab_size()
    print(f"wrote {path} ({size} tokens)")
    if size < args.vocab_size:
        print(f"note: {size} tokens, fewer than --vocab-size {args.vocab_size}: the captions hold no more pairs seen "
              f"--min-frequency {args.min_frequency} times")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``tokenizer`` sub-command."""
    p = sub.add_parser(
        "tokenizer",
        help="train the shared byte-level BPE tokenizer on a train split",
        description="Train one byte-level BPE vocabulary shared by all languages and scripts on the "
        "captions of a TRAIN split only (never val/test), with the special tokens <pad>, <mask> and the "
        "sentence token <s>, and save it as tokenizer.json for training and evaluation.",
    )
    p.add_argument("split_dir", help="train split folder (with manifest.json)")
    p.add_argument("--out", help="output file (default: tokenizer.json next to the split folder, "
                   "tokenizer-uncased.json with --normalization uncased: where training looks for it)")
    p.add_argument("--normalization", choices=NORMALIZATIONS, default="none",
                   help="none: the text as written; uncased: lower case, Latin accents stripped and a space before each "
                   "caption, as data.tokenizer_normalization (default %(default)s)")
    p.add_argument("--vocab-size", type=int_at_least(MIN_VOCAB_SIZE, "256 bytes, the special tokens, a merge"),
                   default=30000,
                   help=f"BPE vocabulary size, at least {MIN_VOCAB_SIZE} (paper: 30k; default %(default)s)")
    p.add_argument("--min-frequency", type=positive_int, default=2,
                   help="minimum pair frequency for a merge (default %(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a tokenizer file at --out (refused otherwise: runs of the data root read it; runs "
                   "already trained keep their own copy)")
    p.set_defaults(func=_run)
