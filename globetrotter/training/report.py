"""End-of-run summary printed by ``train.py`` / ``globetrotter-train``."""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Sequence

from ..shell import program_command


def print_summary(result: dict, test_split: str | Path | None = None, val_split: str | Path | None = None,
                  train_split: str | Path | None = None, languages: Sequence[str] | None = None) -> None:
    """Print the final validation metrics (and test figures when the run asked for them), the best checkpoint, and
    the two commands of the protocol: choose the ranking on val, then score ``test_split`` once (main process only).
    An adaptation whose new language ``val_split`` has no caption in gets the test command alone: val cannot choose
    a ranking for that language (a choice made on the old ones is refused for it). The reference select
    reads by default is the train split beside ``val_split`` (``train_split`` where no val is given); one made by
    ``more-captions`` names its one-language original instead, the one every twin of a table shares (a twin trained
    on ``train-parallel`` too), and a test split that is its link to the original's is named as the original's.
    ``languages``: those the run was trained on; a command whose split has others too names them (``--languages``),
    so that neither chooses nor scores a language the run never read (a twin on ``train-parallel``: not zh)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    metrics = result.get("metrics") or {}
    print(f"\nrun folder: {result['run_dir']}")
    if "test/sentence_translation" in metrics:
        score, chance = metrics["test/sentence_translation"], metrics["test/sentence_translation_chance"]
        print(f"sentence translation (test, retrieval) at the last step: {100 * score:.1f}%   chance: {100 * chance:.1f}%   "
              f"({score / max(chance, 1e-9):.1f}x chance)")
    for key, value in sorted(metrics.items()):
        if key.startswith("val/"):
            print(f"{key} at the last step: {value:.4f}")
    adapted = result.get("adapt") or {}
    if adapted.get("before") and adapted.get("after"):
        b, a, lang = adapted["before"], adapted["after"], adapted["language"]
        line = (f"adaptation to {lang} (sentence translation on test, before -> after): {lang} with the old languages "
                f"{100 * b['new_with_old']:.1f}% -> {100 * a['new_with_old']:.1f}% (chance {100 * a['chance_all']:.1f}%)")
        if a["old_pairs"] is not None:
            line += f"; old languages among themselves {100 * b['old_pairs']:.1f}% -> {100 * a['old_pairs']:.1f}%"
        print(line)
    if result.get("best"):
        b = result["best"]
        print(f"best checkpoint: step {b['step']} by {b['metric']} = {b['value']:.4f}")
    if test_split is not None and (Path(test_split) / "manifest.json").is_file():
        from ..evaluation.models import model_name
        from ..evaluation.records import DEFAULT_OUT, record_path
        from ..evaluation.reference import default_reference

        original = _one_language_original(default_reference(val_split) if val_split is not None else train_split)
        test_split = _as_in_original(test_split, original)
        run, evaluate, test = shlex.quote(result["run_dir"]), program_command("eval"), shlex.quote(str(test_split))
        test += _languages_option(test_split, languages)
        new = adapted.get("language")
        if new and not _has_language(test_split, new):
            print(f"the test split {test_split} has no {new} caption, so it cannot score {new}: convert a parallel "
                  f"test split with {new} captions (every image captioned in each language), then score it with "
                  f"{evaluate} sentence --model {run} --split SPLIT")
            return
        if new and not _has_language(val_split, new):
            print(f"val has no {new} caption, so no ranking can be chosen on val for {new}; score the test split once "
                  f"with the default ranking: {evaluate} sentence --model {run} --split {test}")
            return
        record = shlex.quote(str(record_path(DEFAULT_OUT, "select", model_name(result["run_dir"]))))  # select's default
        reference = f" --reference {shlex.quote(original)}" if original else ""
        print(f"choose its ranking on val, with no parallel text: {evaluate} select --model {run}"
              f"{_languages_option(val_split, languages)}{reference}")
        print(f"then score the test split once: {evaluate} sentence --model {run} --split {test} "
              f"--ranking {record}")


def splits_read(folders: dict[str, Path | None], optional: tuple[str, ...] = ("val", "test")) -> dict:
    """What result.json says of a run's data: for each role (``train``, ``val``, ``test``, an adaptation's
    ``old_captions``) and its split folder (a path as given, never joined to ``data.root`` again), its path, source,
    checksum and size (the eval records' ``dataset``), so a result can be matched to the data it was measured on.
    An ``optional`` role whose folder is None or holds no manifest (a val or test split that is not there) is left
    out (a test split is named whether the run scored it or not); any other split it cannot read is recorded as its
    path and an ``error`` saying why, never dropped."""
    from ..errors import UserError
    from ..evaluation.records import dataset_info

    found = {}
    for role, folder in folders.items():
        if folder is None or not (Path(folder) / "manifest.json").is_file():
            if role not in optional:
                found[role] = {"path": str(Path(folder).resolve()) if folder is not None else None,
                               "error": "no manifest.json there"}
            continue
        try:
            found[role] = dataset_info(folder)
        except UserError as err:  # e.g. a more-captions link whose original split was rewritten since
            found[role] = {"path": str(Path(folder).resolve()), "error": str(err)}
    return found


def _one_language_original(train_split: str | Path | None) -> str | None:
    """The split ``more-captions`` made ``train_split`` from (its manifest's ``more_captions.from``), where it still
    holds a split; a path under the working folder is given relative to it."""
    original = (_manifest(train_split).get("more_captions") or {}).get("from")
    if not original or not (Path(original) / "manifest.json").is_file():
        return None
    relative = os.path.relpath(original)
    return original if relative.startswith("..") else relative


def _as_in_original(split: str | Path, original: str | None) -> str | Path:
    """``split`` as the one-language original dataset names it, where ``split`` is the link ``more-captions`` made to
    that dataset's split of the same name (``original``: the original's train split, :func:`_one_language_original`);
    else ``split``."""
    if original is None:
        return split
    same = Path(original).parent / Path(split).name
    found = (same / "manifest.json").is_file() and same.resolve() == Path(split).resolve()
    return str(same) if found else split


def _languages_option(split: str | Path | None, trained: Sequence[str] | None) -> str:
    """`` --languages CODES``: the languages of the split folder ``split`` (its manifest's, in its order) the run was
    trained on (``trained``), where the split has others too; ``""`` where it has no other, or either is unknown."""
    has = list(_manifest(split).get("languages") or {})
    kept = [lang for lang in has if lang in set(trained or ())]
    return f" --languages {','.join(kept)}" if kept and len(kept) < len(has) else ""


def _has_language(split: str | Path | None, language: str) -> bool:
    """Whether the split folder ``split`` has captions in ``language`` (by its manifest; no split: False)."""
    return language in (_manifest(split).get("languages") or {})


def _manifest(split: str | Path | None) -> dict:
    """The manifest of the split folder ``split`` as written (``{}`` where there is none): what the summary reads."""
    import json

    manifest = Path(split) / "manifest.json" if split is not None else None
    if manifest is None or not manifest.is_file():
        return {}
    return json.loads(manifest.read_text(encoding="utf-8"))
