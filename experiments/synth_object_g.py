"""The synthetic world's best possible image similarity g, to ask whether BackRetrieval is weak there because of g.

How well BackRetrieval with pixel thumbnails as g does on the synthetic world is in docs/results.md ("What
BackRetrieval sees on this world"). This driver writes a copy of a synthetic split whose "images" are the
scenes' object vectors: what a perfect object detector trained on the world's shapes, colours and sizes would
report (each kind of object, whatever its count, adds one to its shape, shape x colour, shape x size and colour
slots; the background pattern at half weight), regenerated from the world's seed, never read from a caption.
The copy keeps every caption, so
``backretrieval correlate`` (or ``eval``) scores text models on it unchanged, with g the cosine of those vectors.
Beside it, ``meaning.npy`` (and its ``meaning.npy.texts.json``) embeds each caption by its canonical meaning (TF-IDF
of the meaning's words and word pairs): a text model that translates perfectly and knows how alike two meanings
are, for the ``npy:`` model spec:

    .venv/bin/python experiments/synth_object_g.py --split outputs/synth-seed7/train-parallel \
      --out outputs/synth-seed7/train-parallel-objects
    .venv/bin/backretrieval correlate --data outputs/synth-seed7/train-parallel-objects --pairs en-de,en-zh,de-ru \
      --n 150 --n-seeds 10 --out runs/bkr-synth-objects \
      --models meaning=npy:outputs/synth-seed7/train-parallel-objects/meaning.npy full=globetrotter:runs/quickstart

With ``--cache DIR`` it also writes the split's object vectors as a feature cache of the split itself (keyed by
image id, ``globetrotter-data features import``'s form, named ``objects``), so the trainer and ``eval.py select`` take
the objects g for that split: ``val.image_features=features:DIR`` / ``--image-features features:DIR``:

    .venv/bin/python experiments/synth_object_g.py --split data/synth/val --cache outputs/synth-val-objects/cache

Such a g reads the scene, which no real image model does: it bounds what any g can give on this world.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backretrieval.records import json_text  # noqa: E402
from data_prep.config_io import load_config  # noqa: E402
from data_prep.shard_writer import ShardWriter, check_new_split_folder  # noqa: E402
from data_prep.shards import iter_raw, read_manifest  # noqa: E402
from data_prep.synth.config import SynthConfig  # noqa: E402
from data_prep.synth.scene import BACKGROUNDS, COLOURS, SHAPES, Scene  # noqa: E402
from data_prep.synth.world import SPLIT_IDS, draw_scene  # noqa: E402
from globetrotter.argtypes import output_folder  # noqa: E402
from globetrotter.errors import UserError  # noqa: E402

SOURCE = "synthetic object vectors"  # the copy's manifest source: an earlier copy may be written over
COLOUR_NAMES = list(COLOURS)
N_SHAPES, N_COLOURS = len(SHAPES), len(COLOUR_NAMES)
# slots: shape | shape x colour | shape x size | colour | background pattern
SHAPE_COLOUR = N_SHAPES
SHAPE_SIZE = SHAPE_COLOUR + N_SHAPES * N_COLOURS
COLOUR = SHAPE_SIZE + 2 * N_SHAPES
BACKGROUND = COLOUR + N_COLOURS
DIM = BACKGROUND + len(BACKGROUNDS)


def object_vector(scene: Scene) -> np.ndarray:
    """``(DIM,)`` float32: per kind of the scene one count in its shape, shape x colour, shape x size and colour
    slots; the background pattern at weight 0.5."""
    v = np.zeros(DIM, np.float32)
    for kind in scene.kinds:
        s, c, z = SHAPES.index(kind.shape), COLOUR_NAMES.index(kind.colour), int(kind.size == "large")
        v[[s, SHAPE_COLOUR + N_COLOURS * s + c, SHAPE_SIZE + 2 * s + z, COLOUR + c]] += 1
    v[BACKGROUND + BACKGROUNDS.index(scene.background.kind)] += 0.5
    return v


def scene_of(world: SynthConfig, image_id: str) -> Scene:
    """The scene behind ``image_id`` (``<split>-<index>``), drawn again from the world's seed as the generator drew it."""
    split, _, index = image_id.rpartition("-")
    if split not in SPLIT_IDS or not index.isdigit():
        raise UserError(f"image id {image_id!r}: not a synthetic scene id (<split>-<index>)")
    return draw_scene(world, SPLIT_IDS[split], int(index))[0]


def _world_of(split: Path) -> SynthConfig:
    world_file = split.parent / "world.yaml"
    if not world_file.is_file():
        raise UserError(f"{split}: no {world_file} beside it (a synthetic world's split is needed)")
    return load_config(SynthConfig, world_file)


def check_out(split: str | Path, out: str | Path) -> None:
    """Refuse (one-line :class:`UserError`, before anything is written) an ``out`` that is, lies inside or holds
    ``split``, or that holds anything but an earlier copy of this script."""
    check_new_split_folder(out, [split], lambda manifest: manifest.get("source") == SOURCE)


def write_object_split(split: str | Path, out: str | Path) -> dict:
    """Copy ``split`` (of a world written by ``globetrotter-data synth``: its ``world.yaml`` one folder up) to
    ``out`` with each image replaced by its scene's :func:`object_vector`; returns the new manifest. ``out`` must pass
    :func:`check_out` (the split itself would be deleted)."""
    split, out = Path(split), Path(out)
    check_out(split, out)
    world = _world_of(split)
    manifest = read_manifest(split)
    vectors: dict[str, np.ndarray] = {}
    with ShardWriter(out, split=manifest.get("split", split.name), source=SOURCE,
                     image_format="npy", extra={"objects_of": str(split)}) as writer:
        for key, _ext, _data, meta in iter_raw(split):
            image_id = str(meta["image_id"])
            if image_id not in vectors:
                vectors[image_id] = object_vector(scene_of(world, image_id))
            extra = {k: v for k, v in meta.items() if k not in ("caption", "lang", "image_id", "group")}
            writer.write(key, vectors[image_id], meta["caption"], meta["lang"], image_id, meta.get("group"), extra)
    return read_manifest(out)


def write_object_cache(split: str | Path, out: str | Path) -> dict:
    """The object vectors of ``split``'s images as an imported feature cache named ``objects`` at ``out`` (keyed by
    image id: a g for that split itself); returns its ``cache.json`` record."""
    from globetrotter.data.feature_import import import_embeddings, split_image_ids

    split, out = Path(split), Path(out)
    world = _world_of(split)
    ids = split_image_ids(split)
    with tempfile.TemporaryDirectory() as tmp:  # the import's source files; the cache holds the rows
        vectors, id_file = Path(tmp) / "objects.npy", Path(tmp) / "objects.ids.json"
        np.save(vectors, np.stack([object_vector(scene_of(world, i)) for i in ids]))
        id_file.write_text(json_text(ids))
        return import_embeddings(split, vectors, out, "objects", ids=id_file, force=True, progress=False)


def write_meaning_embeddings(split: str | Path, out: str | Path) -> Path:
    """``out`` (``.npy``) and ``out.texts.json``: each caption of ``split`` embedded by its ``meaning`` (unit TF-IDF rows
    of the meaning's words and word pairs, idf over the split), in the ``npy:`` model spec's layout."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts, meanings = [], []
    for _key, _ext, _data, meta in iter_raw(split):
        if "meaning" not in meta:
            raise UserError(f"{split}: caption {meta['caption']!r} has no 'meaning' (not a synthetic split)")
        texts.append(meta["caption"])
        meanings.append(meta["meaning"])
    rows = TfidfVectorizer(token_pattern=r"[^ ;]+", ngram_range=(1, 2)).fit_transform(meanings).toarray()
    out = Path(out)
    np.save(out, (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32))
    Path(f"{out}.texts.json").write_text(json_text(texts, ensure_ascii=False), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", required=True, help="a split of a synthetic world (world.yaml in its parent folder)")
    p.add_argument("--out", type=output_folder,
                   help="folder of the copy with object vectors as images (and meaning.npy): a new or empty folder "
                        "outside --split, or an earlier copy to write over")
    p.add_argument("--cache", type=output_folder,
                   help="folder of a feature cache of --split's own images holding their object vectors")
    args = p.parse_args(argv)
    if not (args.out or args.cache):
        p.error("give --out (the copy), --cache (a feature cache of the split), or both")
    try:
        if args.out:  # before anything is written: a ShardWriter on the split itself would delete its shards
            check_out(args.split, args.out)
        if args.cache:
            from globetrotter.data.feature_cache import same_folder
            from globetrotter.data.feature_cache_write import check_cache_folder

            if args.out and same_folder(args.out, args.cache):
                raise UserError(f"--cache {args.cache}: the same folder as --out; give the cache a folder of its own")
            check_cache_folder(args.cache, "--cache")
        if args.out:
            manifest = write_object_split(args.split, args.out)
            meaning = write_meaning_embeddings(args.split, Path(args.out) / "meaning.npy")
            print(f"{args.out}: {manifest['num_samples']} captions, images as {DIM}-d object vectors; {meaning}: the "
                  f"captions by their meaning")
        if args.cache:
            record = write_object_cache(args.split, args.cache)
            print(f"{args.cache}: the object vectors of {record['images']} images of {args.split}, a g for it: "
                  f"val.image_features=features:{args.cache} or --image-features features:{args.cache}")
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
