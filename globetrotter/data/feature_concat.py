"""Several image encoders as one: ``globetrotter-data features concat``.

The whole-image rows of several feature caches of one split (built with ``features build``, imported with
``features import``), each centred on its mean over the split's images and scaled to unit length, so that every
encoder weighs the same, are concatenated into one imported cache (``model.image_backbone: imported``). The means are
kept beside it (``means.npz``): another split's images (new photos to adapt to, say) are joined in the same space with
``centre_like`` (``--centre-like``) naming that cache, instead of centring on their own mean. On Flickr8k
the three offline EfficientNet-Lite encoders (0, 1, 2) so joined carry more of what people say about a photo than
any one of them (docs/results.md).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..errors import UserError
from .feature_cache import FeatureCache, load_feature_cache
from .feature_import import CHUNK_ROWS, _Source, split_image_ids, write_imported

MEANS = "means.npz"


class _Concatenated(_Source):
    """The split's images in split order, each row the concatenation of every cache's centred unit whole-image row."""

    def __init__(self, split_dir: Path, paths: Sequence[Path], means: Sequence[np.ndarray] | None = None) -> None:
        if len(paths) < 2:
            raise UserError(f"features concat joins two or more caches, got {len(paths)}")
        if len(set(p.resolve() for p in paths)) != len(paths):
            raise UserError(f"features concat: a cache is named twice ({', '.join(map(str, paths))})")
        self.path, self.fmt = paths[0], "concat"
        self.ids = split_image_ids(split_dir)
        self.caches: list[FeatureCache] = [load_feature_cache(p, split_dir=split_dir) for p in paths]
        self.rows = [cache.rows(self.ids, split_dir) for cache in self.caches]
        dims = [int(cache.features.shape[-1]) for cache in self.caches]
        if means is None:
            self.means = [self._mean(cache, rows) for cache, rows in zip(self.caches, self.rows)]
        elif [len(m) for m in means] != dims:
            raise UserError(f"--centre-like: its means have {[len(m) for m in means]} dims, these caches {dims}")
        else:
            self.means = [np.asarray(m, dtype=np.float64) for m in means]
        self.dim = sum(dims)

    @staticmethod
    def _mean(cache: FeatureCache, rows: np.ndarray) -> np.ndarray:
        total = np.zeros(cache.features.shape[-1])
        for start in range(0, len(rows), CHUNK_ROWS):
            total += cache.features[rows[start: start + CHUNK_ROWS], 0].astype(np.float64).sum(axis=0)
        return total / max(len(rows), 1)

    def chunks(self) -> Iterator[np.ndarray]:
        for start in range(0, len(self.ids), CHUNK_ROWS):
            parts = []
            for cache, rows, mean in zip(self.caches, self.rows, self.means):
                x = cache.features[rows[start: start + CHUNK_ROWS], 0].astype(np.float64) - mean
                parts.append(x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12))
            yield np.concatenate(parts, axis=1).astype(np.float32)

    def record(self) -> dict:
        """What the concatenation was made of: each cache's folder and its record's spec and dim."""
        return {"format": "concat", "rows": len(self.ids), "dim": self.dim, "normalised": "centred, unit length",
                "sources": [{"path": str(c.path.resolve()), "spec": asdict(c.spec), "dim": int(c.features.shape[-1])}
                            for c in self.caches]}


def concat_caches(split_dir: str | Path, caches: Sequence[str | Path], out_dir: str | Path, name: str,
                  force: bool = False, progress: bool = True, centre_like: str | Path | None = None) -> dict:
    """Write the concatenation of ``caches`` (each centred and unit-length) for the split's images as the imported
    cache ``name`` in ``out_dir``, its means in ``out_dir/means.npz``; returns its ``cache.json`` record.
    ``centre_like``: an earlier concatenation whose means to centre on (its split's), instead of this split's."""
    split_dir, out_dir = Path(split_dir), Path(out_dir)
    source = _Concatenated(split_dir, [Path(c) for c in caches],
                           None if centre_like is None else read_means(Path(centre_like)))
    record = source.record()
    if centre_like is not None:
        record["centred_like"] = str(Path(centre_like).resolve())
    digest = hashlib.sha256(json.dumps(record["sources"], sort_keys=True).encode()).hexdigest()[:16]
    result = write_imported(split_dir, source, out_dir, name, digest, force, progress, record)
    np.savez(out_dir / MEANS, *source.means)
    return result


def read_means(folder: Path) -> list[np.ndarray]:
    """The per-cache means a concatenation in ``folder`` was centred on."""
    if not (folder / MEANS).is_file():
        raise UserError(f"--centre-like {folder}: no {MEANS} here (a cache written by features concat)")
    with np.load(folder / MEANS) as means:
        return [means[f"arr_{i}"] for i in range(len(means.files))]
