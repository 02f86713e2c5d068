"""Several image encoders as one: ``globetrotter-data features concat``.

The whole-image rows of several feature caches of one split (built with ``features build``, imported with
``features import``), each centred on its mean over the split's images and scaled to unit length, so that every
encoder weighs the same, are concatenated into one imported cache (``model.image_backbone: imported``). The means are
kept beside it (``means.npz``): another split's images (new photos to adapt to, say) are joined in the same space with
``centre_like`` (``--centre-like``) naming that cache, instead of centring on their own mean; its caches must be
of the same encoders, in the same order (compared by what their whole-image rows depend on: backbone, its
arguments, weights and their checksum, image size; imported embeddings by name), else refused naming both. On Flickr8k
the three offline EfficientNet-Lite encoders (0, 1, 2) so joined carry more of what people say about a photo than
any one of them (docs/results.md).
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..config import IMPORTED_BACKBONE
from ..errors import UserError, error_line
from .feature_cache import MEANS, ROW0_FIELDS, SPEC, FeatureCache, load_feature_cache
from .feature_cache_write import check_cache_folder
from .feature_import import CHUNK_ROWS, FeatureSource, split_image_ids, write_imported


def _encoder(spec: dict, dim: int) -> tuple:
    """What a cache's whole-image rows depend on (imported embeddings: their name), and their width."""
    spec = {"backbone_args": "{}", **spec}  # a spec of before backbone_args: built with none
    fields = ROW0_FIELDS[:2] if spec.get("backbone") == IMPORTED_BACKBONE else ROW0_FIELDS
    return tuple((k, spec.get(k)) for k in fields) + (("dim", int(dim)),)


def _describe(encoders: list[tuple]) -> str:
    def one(encoder: tuple) -> str:
        d = dict(encoder)
        if d["backbone"] == IMPORTED_BACKBONE:
            return f"imported {d['weights']!r} ({d['dim']} dims)"
        sha = f" sha256 {d['weights_sha256']}" if d.get("weights_sha256") else ""
        args = f" args {d['backbone_args']}" if d.get("backbone_args") not in (None, "{}") else ""
        return f"{d['backbone']} ({d['weights']}{sha}, {d['image_size']} px{args}, {d['dim']} dims)"

    return " + ".join(one(e) for e in encoders)


class _Concatenated(FeatureSource):
    """The split's images in split order, each row the concatenation of every cache's centred unit whole-image row."""

    def __init__(self, split_dir: Path, paths: Sequence[Path], means: Sequence[np.ndarray] | None = None,
                 like: tuple[Path, list[dict]] | None = None) -> None:
        if len(paths) < 2:
            raise UserError(f"features concat joins two or more caches, got {len(paths)}")
        if len(set(p.resolve() for p in paths)) != len(paths):
            raise UserError(f"features concat: a cache is named twice ({', '.join(map(str, paths))})")
        self.path, self.fmt = paths[0], "concat"
        self.ids = split_image_ids(split_dir)
        self.caches: list[FeatureCache] = [load_feature_cache(p, split_dir=split_dir) for p in paths]
        self.rows = [cache.rows(self.ids, split_dir) for cache in self.caches]
        dims = [int(cache.features.shape[-1]) for cache in self.caches]
        if like is not None:  # (folder, its record's sources): the same encoders in the same order
            folder, sources = like
            theirs = [_encoder(s.get("spec") or {}, s.get("dim", 0)) for s in sources]
            mine = [_encoder(asdict(c.spec), d) for c, d in zip(self.caches, dims)]
            if theirs != mine:
                raise UserError(f"--centre-like {folder}: it joined {_describe(theirs)}, but these caches are "
                                f"{_describe(mine)}; give the caches of the same encoders, in the same order")
        if means is None:
            self.means = [self._mean(cache, rows) for cache, rows in zip(self.caches, self.rows)]
        elif [len(m) for m in means] != dims:
            where = f"--centre-like {like[0]}: its {MEANS}" if like is not None else "--centre-like: its means"
            raise UserError(f"{where} has means of {[len(m) for m in means]} dims, these caches {dims}; write that "
                            f"concatenation again with globetrotter-data features concat")
        else:
            self.means = [np.asarray(m, dtype=np.float64) for m in means]
        self.dim = sum(dims)

    @staticmethod
    def _mean(cache: FeatureCache, rows: np.ndarray) -> np.ndarray:
        total = np.zeros(cache.features.shape[-1])
        for start in range(0, len(rows), CHUNK_ROWS):
            total += cache.features[rows[start: start + CHUNK_ROWS], 0].astype(np.float64).sum(axis=0)
        return total / max(len(rows), 1)

    def chunks(self, kept: np.ndarray) -> Iterator[np.ndarray]:
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
    inputs = [("--cache", Path(c)) for c in caches] + ([("--centre-like", Path(centre_like))] if centre_like else [])
    for flag, folder in inputs:  # --overwrite would replace an input with the concatenation
        if folder.resolve() == out_dir.resolve():
            raise UserError(f"--out {out_dir}: is also {flag} {folder}; write the concatenation to another folder")
    check_cache_folder(out_dir, "--out")  # before any cache is read
    means = like = None
    if centre_like is not None:
        means, like = read_means(Path(centre_like)), (Path(centre_like), read_sources(Path(centre_like)))
    source = _Concatenated(split_dir, [Path(c) for c in caches], means, like)
    record = source.record()
    if centre_like is not None:
        record["centred_like"] = str(Path(centre_like).resolve())
    digest = hashlib.sha256(json.dumps(record["sources"], sort_keys=True).encode())
    if means is not None:  # centred on other means: other rows, so another source (a same-name cache is not replaced)
        for mean in means:
            digest.update(np.ascontiguousarray(mean, dtype=np.float64).tobytes())
    return write_imported(split_dir, source, out_dir, name, digest.hexdigest()[:16], force, progress, record,
                          extra_files=lambda tmp: np.savez(tmp / MEANS, *source.means))  # swapped in with the rest


def read_means(folder: Path) -> list[np.ndarray]:
    """The per-cache means a concatenation in ``folder`` was centred on."""
    if not (folder / MEANS).is_file():
        raise UserError(f"--centre-like {folder}: no {MEANS} here (a cache written by features concat)")
    try:
        with np.load(folder / MEANS) as means:
            found = [np.asarray(means[f"arr_{i}"]) for i in range(len(means.files))]
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:  # empty, cut short, no npz
        raise UserError(f"--centre-like {folder}: {MEANS} is unreadable ({error_line(err)}); write that concatenation "
                        f"again with globetrotter-data features concat") from None
    if not found or any(m.ndim != 1 or not np.issubdtype(m.dtype, np.number) for m in found):
        raise UserError(f"--centre-like {folder}: {MEANS} holds {[m.shape for m in found]}, expected one mean vector "
                        f"per joined cache; write that concatenation again with globetrotter-data features concat")
    return found


def read_sources(folder: Path) -> list[dict]:
    """The caches (each's spec and dim, in order) the concatenation in ``folder`` joined, from its ``cache.json``."""
    try:
        record = json.loads((folder / SPEC).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"--centre-like {folder}: no readable {SPEC} ({err})") from None
    sources = (record.get("imported") or {}).get("sources")
    if not isinstance(sources, list) or not sources:
        raise UserError(f"--centre-like {folder}: its {SPEC} names no joined caches (a cache written by features concat)")
    return sources
