"""Generate the synthetic multilingual world: shards for every split, dictionaries, world.yaml.

Splits (docs/design.md section 3; Globetrotter paper section 4):

- ``train/``, ``val/``: each scene captioned in exactly ONE training language (balanced,
  seeded), so no image is seen in two languages; ``group`` is null.
- ``test/``: each scene captioned in EVERY language (held-out ones too); the captions of
  a scene say the same thing (one :class:`~data_prep.synth.scene.Meaning`) and share
  ``group``.
- ``train-parallel/`` (``parallel_train_images > 0``): like test, in the training
  languages, for the supervised baseline.
- ``adapt/`` (with ``heldout_languages``): scenes in one held-out language each, for the
  adaptation experiment of the Globetrotter paper (appendix A.2).

Every sample's json also carries ``meaning`` (the canonical content string): captions of
equal meaning are translations. Each scene is seeded by ``(seed, split, index)`` and each
caption by ``(seed, split, index, language)``, so the output is byte-identical whatever
the number of worker processes.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import yaml
from tqdm import tqdm

from data_prep.config_io import save_config
from data_prep.errors import UserError
from data_prep.out_folder import lock_out_folder, move_splits, remove_empty_folders
from data_prep.shard_writer import ShardWriter
from data_prep.shards import MANIFEST, encode_image
from data_prep.versions import versions

from .config import SynthConfig
from .dictionary import write_dictionaries
from .grammars import get_grammar
from .lexicon import LANGUAGES
from .render import render_scene
from .scene import Scene, sample_meaning, sample_scene

SOURCE = "synthetic"
# Stable ids of the splits in the random streams; never reorder.
SPLIT_IDS = {"train": 0, "val": 1, "test": 2, "train-parallel": 3, "adapt": 4}
WORLD_CONFIG = "world.yaml"  # written last: splits without it are an interrupted generation
STAGING = ".generating"  # under --out: the world being written, moved into place once complete
SCENE_STREAM, ASSIGN_STREAM, CAPTION_STREAM = 0, 1, 2
LANG_STREAM = {code: i for i, code in enumerate(LANGUAGES)}


@dataclass(frozen=True)
class SplitPlan:
    """One split to write: ``parallel`` captions each scene in all ``languages``, else in one."""

    name: str
    images: int
    languages: tuple[str, ...]
    parallel: bool

    @property
    def split_id(self) -> int:
        """The split's stable id in the random streams (:data:`SPLIT_IDS`)."""
        return SPLIT_IDS[self.name]


def plan_splits(cfg: SynthConfig) -> list[SplitPlan]:
    """The splits ``cfg`` asks for, in writing order."""
    train, every = tuple(cfg.train_languages), tuple(cfg.all_languages)
    plans = [
        SplitPlan("train", cfg.train_images, train, parallel=False),
        SplitPlan("val", cfg.val_images, train, parallel=False),
        SplitPlan("test", cfg.test_images, every, parallel=True),
    ]
    if cfg.parallel_train_images > 0:
        plans.append(SplitPlan("train-parallel", cfg.parallel_train_images, train, parallel=True))
    if cfg.heldout_languages:
        plans.append(SplitPlan("adapt", cfg.adapt_images, tuple(cfg.heldout_languages), parallel=False))
    return plans


def language_assignment(seed: int, plan: SplitPlan) -> np.ndarray:
    """Language index of each scene of a one-language split: balanced counts, seeded order."""
    rng = np.random.default_rng([seed, plan.split_id, 0, ASSIGN_STREAM])
    return rng.permutation(np.arange(plan.images) % len(plan.languages))


@dataclass(frozen=True)
class Record:
    """One caption of a rendered scene, as a shard sample: key, encoded image, caption, language, image id, group
    (the image id in a parallel split, else None) and the canonical meaning."""

    key: str
    image: bytes
    caption: str
    lang: str
    image_id: str
    group: str | None
    meaning: str


def draw_scene(cfg: SynthConfig, split_id: int, index: int) -> tuple[Scene, np.random.Generator]:
    """Scene ``index`` of split ``split_id`` (:data:`SPLIT_IDS`), drawn from its own stream of ``cfg.seed``, and
    that stream, which then draws what the scene's caption says."""
    rng = np.random.default_rng([cfg.seed, split_id, index, SCENE_STREAM])
    return sample_scene(rng, cfg.image_size, cfg.max_objects, cfg.pixel_noise), rng


def render_range(cfg: SynthConfig, plan: SplitPlan, start: int, stop: int,
                 assignment: np.ndarray | None) -> tuple[list[Record], set[tuple[str, str, str]]]:
    """Scenes ``start..stop-1`` of a split: encoded images, captions, and the dictionary
    words used as ``(lang, concept, word)``. ``assignment[i - start]`` is the language
    index of scene ``i`` in a one-language split (None in a parallel split: every language)."""
    records: list[Record] = []
    words: set[tuple[str, str, str]] = set()
    for index in range(start, stop):
        scene, rng = draw_scene(cfg, plan.split_id, index)
        image = encode_image(render_scene(scene, cfg.image_size), cfg.image_format)
        meaning = sample_meaning(
            scene, rng, cfg.p_mention_object, cfg.p_mention_colour, cfg.p_mention_size,
            cfg.p_mention_count, cfg.p_mention_position, cfg.p_mention_background,
        )
        canonical = meaning.canonical()
        image_id = f"{plan.name}-{index:06d}"
        langs = plan.languages if assignment is None else (plan.languages[assignment[index - start]],)
        for lang in langs:
            caption_rng = np.random.default_rng([cfg.seed, plan.split_id, index, CAPTION_STREAM + LANG_STREAM[lang]])
            caption = get_grammar(lang).caption(meaning, caption_rng)
            words.update((lang, concept, word) for concept, word in caption.words)
            key = f"{image_id}-{lang}" if plan.parallel else image_id
            group = image_id if plan.parallel else None
            records.append(Record(key, image, caption.text, lang, image_id, group, canonical))
    return records, words


def _render_task(task: tuple) -> tuple[list[Record], set[tuple[str, str, str]]]:
    return render_range(*task)


def write_record(writer: ShardWriter, record: Record) -> None:
    """Write one rendered caption, its json carrying the language-independent ``meaning``."""
    writer.write(record.key, record.image, record.caption, record.lang, record.image_id, record.group,
                 extra={"meaning": record.meaning})


def _tasks(cfg: SynthConfig, plan: SplitPlan) -> Iterator[tuple]:
    assignment = None if plan.parallel else language_assignment(cfg.seed, plan)
    for start in range(0, plan.images, cfg.chunk_size):
        stop = min(start + cfg.chunk_size, plan.images)
        yield cfg, plan, start, stop, (None if assignment is None else assignment[start:stop])


def _clear_splits(out_dir: Path) -> None:
    """Remove the shards and manifest of every split an earlier world wrote (a split folder's other files, such as a
    feature cache, stay; a folder left empty goes)."""
    for name in SPLIT_IDS:
        split_dir = out_dir / name
        if not split_dir.is_dir():
            continue
        for path in list(split_dir.glob(f"{name}-*.tar")) + [split_dir / MANIFEST]:
            path.unlink(missing_ok=True)
        if not any(split_dir.iterdir()):
            split_dir.rmdir()


def _not_a_world(out_dir: Path) -> str | None:
    """Why the non-empty folder ``out_dir`` holds no earlier synthetic world (None when it holds one: a split of
    source ``synthetic`` or a world.yaml, and nothing of another kind where the world writes)."""
    found = False
    for name in SPLIT_IDS:
        manifest = out_dir / name / MANIFEST
        if not manifest.exists():
            continue
        try:
            source = json.loads(manifest.read_text(encoding="utf-8")).get("source")
        except (OSError, ValueError, AttributeError):
            return f"{manifest} is not a split's manifest"
        if source != SOURCE:
            return f"holds a dataset that is no synthetic world ({manifest}: source {source!r})"
        found = True
    config = out_dir / WORLD_CONFIG
    if config.exists():
        try:
            text = yaml.safe_load(config.read_text(encoding="utf-8"))
            found = isinstance(text, dict) and "seed" in text
        except (OSError, ValueError, yaml.YAMLError):
            found = False
        if not found:
            return f"{config} is not a world's config"
    return None if found else "holds no world.yaml and no split of a synthetic world"


def _check_out_dir(out_dir: Path, overwrite: bool, flag: str) -> None:
    """One-line :class:`UserError` for an ``out_dir`` that is a file, or (unless ``overwrite``) a non-empty folder
    that holds no earlier synthetic world: the world's splits, ``dictionary/`` and ``world.yaml`` would replace
    what is there. An earlier world is written over (its other files stay). ``flag`` names ``out_dir``: a command's
    flag (``--out``: the remedy is ``--overwrite``) or a Python argument (``out_dir``: ``overwrite=True``)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{flag} {out_dir}: is a file; expected the folder the world is written into")
    if overwrite or not out_dir.is_dir() or not any(p.name != STAGING for p in out_dir.iterdir()):
        return
    why = _not_a_world(out_dir)
    if why is not None:
        raise UserError(f"{flag} {out_dir}: {why}; a world written there replaces its splits, dictionary/ and "
                        f"world.yaml: give an absent or empty folder (or an earlier world), or pass "
                        f"{'--overwrite' if flag.startswith('-') else 'overwrite=True'}")


def generate(cfg: SynthConfig, out_dir: str | Path, progress: bool = True, overwrite: bool = False,
             flag: str = "out_dir") -> dict:
    """Render the world described by ``cfg`` into ``out_dir``; returns a summary.

    Writes ``train/ val/ test/`` (+ ``train-parallel/``, ``adapt/`` when asked), the
    ground-truth word dictionaries ``dictionary/<src>-<tgt>.txt`` (MUSE format) and
    ``world.yaml``. Summary: ``{"out_dir", "seconds", "images_per_second", "splits":
    {name: {"images", "samples", "languages": {code: n}}}, "dictionary_pairs"}``.

    ``out_dir`` is absent, empty or an earlier world (else a one-line :class:`UserError` naming ``flag``, unless
    ``overwrite``; ``flag``: how messages name ``out_dir``, this argument by default, ``--out`` from the command line), and no other command may write it meanwhile (:func:`~data_prep.out_folder.lock_out_folder`).
    The splits are rendered under ``out_dir/.generating`` and moved into place once all are written, so an
    interrupted generation leaves an earlier world whole and a new one absent; ``world.yaml`` is removed before
    the move and written after it, the mark of a complete world (``ensure_data`` refuses splits without it).
    """
    cfg.validate()
    out_dir = Path(out_dir)
    with lock_out_folder(out_dir, flag):
        _check_out_dir(out_dir, overwrite, flag)
        created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # deepest first
        staging, done = out_dir / STAGING, False
        try:
            if staging.is_dir():
                shutil.rmtree(staging)  # what a killed generation left
            summary = _write_world(cfg, out_dir, staging, progress)
            done = True
        finally:
            if staging.is_dir():
                shutil.rmtree(staging)
            if not done:  # failed or interrupted before the world was complete: take away the folders it made
                remove_empty_folders(created)
    return summary


def _write_world(cfg: SynthConfig, out_dir: Path, staging: Path, progress: bool) -> dict:
    """:func:`generate`'s work, ``out_dir`` locked and checked: the splits rendered under ``staging``, then moved
    into ``out_dir`` with the dictionaries and ``world.yaml`` (last)."""
    staging.mkdir(parents=True)
    started = time.perf_counter()
    plans = plan_splits(cfg)
    workers = cfg.workers or os.cpu_count() or 1
    words: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    summary: dict = {"out_dir": str(out_dir), "splits": {}}
    pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None
    try:
        for plan in plans:
            results = (pool.imap(_render_task, _tasks(cfg, plan)) if pool is not None
                       else map(_render_task, _tasks(cfg, plan)))
            extra = {"world": {"seed": cfg.seed, "heldout_languages": list(cfg.heldout_languages),
                               "parallel": plan.parallel}}
            writer = ShardWriter(staging / plan.name, split=plan.name, source=SOURCE,
                                      image_format=cfg.image_format, maxcount=cfg.shard_size, extra=extra)
            with tqdm(total=plan.images, desc=f"synth {plan.name}", unit="img", disable=not progress) as bar:
                for records, used in results:
                    for record in records:
                        write_record(writer, record)
                    for lang, concept, word in used:
                        words[lang][concept].add(word)
                    bar.update(len({r.image_id for r in records}))
            manifest = writer.close()
            summary["splits"][plan.name] = {"images": plan.images, "samples": manifest["num_samples"],
                                            "languages": manifest["languages"]}
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    # the versions it was made with, as a comment: the file stays the config that loads (data.synth, synth --config)
    save_config(cfg, staging / WORLD_CONFIG, header=f"# versions: {json.dumps(versions())}\n")
    (out_dir / WORLD_CONFIG).unlink(missing_ok=True)  # first: a move cut short leaves splits without a world.yaml
    _clear_splits(out_dir)  # an earlier world's, optional ones this world lacks included
    move_splits(staging, out_dir)
    summary["dictionary_pairs"] = write_dictionaries(words, cfg.all_languages, out_dir / "dictionary")
    os.replace(staging / WORLD_CONFIG, out_dir / WORLD_CONFIG)  # last: the world is complete
    seconds = time.perf_counter() - started
    summary["seconds"] = round(seconds, 3)
    summary["images_per_second"] = round(sum(p.images for p in plans) / max(seconds, 1e-9), 1)
    return summary
