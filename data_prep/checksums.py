"""sha256 digests of files: one file's, and a split's shards' (the checksum its manifest records)."""
from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: str | Path, block: int = 1 << 22) -> str:
    """sha256 of a file's bytes, read in blocks: what a record ties itself to (a conversion's caption files, a
    tokenizer's provenance, an imported cache, an evaluation record's weights)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()


def content_checksum(split_dir: str | Path, shards: list[str]) -> str:
    """sha256 over the shard files' bytes, in manifest order."""
    digest = hashlib.sha256()
    for name in shards:
        with open(Path(split_dir) / name, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()
