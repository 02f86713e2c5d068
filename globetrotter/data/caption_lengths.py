"""How many training captions are longer than ``data.max_length`` tokens: the loader cuts them in silence."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from .subset import keeps_caption

SAMPLE_CAPTIONS = 5000
"""Whole shards are read (in a seeded order) until this many captions are found: the count costs a few shards'
reading whatever the split's size."""


def captions_cut(split_dir: str | Path, tokenizer: Tokenizer, max_length: int, seed: int = 0,
                 languages: Sequence[str] | None = None, image_share: float = 1.0,
                 sample: int = SAMPLE_CAPTIONS) -> dict:
    """The share of the captions training reads from ``split_dir`` (those of ``languages``, whose image is in
    ``image_share``, as the loader keeps them) that are longer than ``max_length`` tokens: ``{"cut", "of", "share",
    "max_length", "sample", "shards_read", "shards"}``. Shards are read whole, in an order drawn from ``seed``, until
    ``sample`` kept captions are found; ``sample`` is False when every shard was read (the count is exact)."""
    from data_prep.shards import iter_raw, shard_paths

    from ..tokenizer import encode_batch

    shards = shard_paths(split_dir)
    order = np.random.default_rng(seed).permutation(len(shards))
    keep = None if languages is None else frozenset(languages)
    captions: list[str] = []
    read = 0
    for index in order:
        if len(captions) >= sample:
            break
        read += 1
        captions.extend(meta["caption"] for _, _, _, meta in iter_raw(split_dir, [shards[index]], on_bad=lambda e: None)
                        if keeps_caption(meta, keep, image_share))
    cut: list[int] = []  # positions within each chunk: only their number is kept
    for start in range(0, len(captions), 4096):
        encode_batch(tokenizer, captions[start:start + 4096], max_length, cut)
    return {"cut": len(cut), "of": len(captions), "share": len(cut) / len(captions) if captions else 0.0,
            "max_length": max_length, "sample": read < len(shards), "shards_read": read, "shards": len(shards)}
