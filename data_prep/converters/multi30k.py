"""Multi30K (Elliott et al. 2016) in the layout of its public repository (``multi30k/data``).

Task 1, parallel text: ``task1/image_splits/<split>.txt`` lists Flickr30k image names
(``<photo id>.jpg``; ``test_2017_mscoco`` lists COCO names), and line *i* of
``task1/raw/<split>.<lang>.gz`` (en, de, fr, cs; ``.gz`` optional) is the caption of line
*i*. The languages are translations of each other, so they are parallel ground truth.

Task 2, comparable text: ``task2/image_splits/<split>_images.txt`` and
``task2/raw/<split>.<k>.<lang>.gz``, k = 1..5: five *independent* English and German
descriptions per image (the BackRetrieval paper's setting).

The split names become split hints (``train`` -> train, ``val`` -> val, ``test_*`` ->
test), used unless ``--test-fraction`` / ``--val-fraction`` make the splits. Images are
found by name in the image folders; a Flickr30k name ``<id>.jpg`` also matches a Flickr8k
file ``<id>_<secret>.jpg`` (same Flickr photo id). Caption keys are
``(task, image name, language[, k])``, so an image listed twice (in two split files, or
twice in one) has its second captions reported as duplicates.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

from data_prep.errors import UserError

from .common import AlignedFile, Record, read_aligned, split_from_name

TASKS = (1, 2)


def find_task_dir(root: Path, task: int) -> Path | None:
    """``root/task<N>``, ``root/data/task<N>``, or ``root`` itself when it is that task's folder."""
    for cand in (root / f"task{task}", root / "data" / f"task{task}"):
        if (cand / "image_splits").is_dir():
            return cand
    if (root / "image_splits").is_dir() and root.name == f"task{task}":
        return root
    return None


def _caption_files(raw_dir: Path, split: str, task: int) -> list[AlignedFile]:
    """``<split>.<lang>[.gz]`` (task 1) or ``<split>.<k>.<lang>[.gz]`` (task 2) in ``raw_dir``."""
    files = []
    for path in sorted(raw_dir.glob(f"{split}.*")):
        name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
        parts = name[len(split) + 1:].split(".")
        if task == 1 and len(parts) == 1:
            files.append(AlignedFile(path, parts[0]))
        elif task == 2 and len(parts) == 2 and parts[0].isdigit():
            files.append(AlignedFile(path, parts[1], (int(parts[0]),)))
    files.sort(key=lambda f: (f.key_extra, f.lang))
    return files


def read_multi30k(root: str | Path, tasks: Sequence[int] = (1,)) -> Iterator[Record]:
    """Caption records of the given Multi30K tasks under ``root`` (see module docstring).

    The folders are checked now (:class:`UserError` when ``root`` has no folder for a
    requested task); the files are read as the returned iterator is consumed.
    """
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root}: Multi30K folder not found")
    task_dirs = []
    for task in tasks:
        task_dir = find_task_dir(root, task)
        if task_dir is None:
            raise UserError(f"{root}: no Multi30K task {task} folder (expected {root}/task{task}/image_splits/ "
                            f"and {root}/task{task}/raw/)")
        task_dirs.append((task, task_dir))
    return _records(task_dirs)


def _records(task_dirs: list[tuple[int, Path]]) -> Iterator[Record]:
    for task, task_dir in task_dirs:
        for split_file in sorted((task_dir / "image_splits").glob("*.txt")):
            split = split_file.stem[: -len("_images")] if split_file.stem.endswith("_images") else split_file.stem
            files = _caption_files(task_dir / "raw", split, task)
            yield from read_aligned(split_file, files, f"multi30k-task{task}", split_from_name(split))
