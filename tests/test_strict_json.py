"""Every JSON file a command writes (records, summaries, settings, run state) is strict JSON: NaN and ±inf are null,
never Python's bare ``NaN``/``Infinity`` that other JSON readers refuse. They are written through one helper,
:func:`backretrieval.records.json_text` (globetrotter, backretrieval, experiments, bench) or
:func:`data_prep.strict_json.json_text` (data_prep, which imports neither)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from backretrieval.records import json_text as backretrieval_json_text
from conftest import REPO, strict_json
from data_prep.strict_json import json_text as data_prep_json_text

HELPERS = pytest.mark.parametrize("json_text", [backretrieval_json_text, data_prep_json_text],
                                  ids=["backretrieval", "data_prep"])


@HELPERS
def test_non_finite_numbers_are_null_wherever_they_sit(json_text):
    record = {"loss": float("nan"), "nested": {"hi": float("inf"), "lo": [1.5, -np.inf, (np.float64("nan"), 2)]}}
    assert strict_json(json_text(record, indent=2)) == {"loss": None, "nested": {"hi": None, "lo": [1.5, None,
                                                                                                   [None, 2]]}}


@HELPERS
def test_finite_data_is_written_as_json_dumps_writes_it(json_text):
    """Files of finite figures are the same bytes as before (a checksum over a shard's metadata stays)."""
    record = {"caption": "ein Hund läuft", "scores": [0.25, 1e-12, 3], "ok": True, "none": None, "pair": ("a", 1)}
    for options in ({}, {"indent": 2, "ensure_ascii": False}, {"indent": 1}, {"sort_keys": True}):
        assert json_text(record, **options) == json.dumps(record, **options)


@HELPERS
def test_what_default_converts_is_made_strict_too(json_text):
    class Reading:
        value = float("nan")

    assert strict_json(json_text({"x": Reading()}, default=lambda o: o.value)) == {"x": None}
    assert json_text({"x": Reading()}, default=lambda o: "a reading") == '{"x": "a reading"}'


def test_numpy_scalars_and_arrays_are_plain_json_in_the_backretrieval_helper():
    text = backretrieval_json_text({"r": np.float32("nan"), "n": np.int64(3), "v": np.array([0.5, np.inf])})
    assert strict_json(text) == {"r": None, "n": 3, "v": [0.5, None]}


# The json.dumps/json.dump calls that write no file a user or a later command reads, by (file, function): hash or
# cache keys (changing their text would orphan every cache), error-message excerpts, comparisons, and the like.
NOT_WRITERS = {
    ("backretrieval/records.py", "json_text"): "the helper itself",
    ("data_prep/strict_json.py", "json_text"): "the helper itself",
    ("globetrotter/data/feature_cache.py", "canonical_args"): "a cache key",
    ("globetrotter/data/feature_concat.py", "concat_caches"): "a digest of the sources",
    ("globetrotter/data/feature_import.py", "read_id_list"): "an excerpt in an error message",
    ("globetrotter/evaluation/tasks/select.py", "queries_sha256"): "a digest of the queries",
    ("globetrotter/tokenizer.py", "_uncased_json"): "a normaliser compared as text",
    ("globetrotter/tokenizer.py", "normalization_of"): "a normaliser compared as text",
    ("globetrotter/tokenizer.py", "extend_tokenizer"): "a tokenizer handed to Tokenizer.from_str",
    ("globetrotter/tokenizer.py", "_provenance_problem"): "an excerpt in an error message",
    ("backretrieval/images.py", "ImageFeatureExtractor._cache_entry"): "a cache key",
    ("data_prep/shards.py", "read_manifest"): "an excerpt in an error message",
    ("data_prep/synth/cli.py", "config_from_args"): "a config override's value",
    ("data_prep/synth/world.py", "_write_world"): "the version strings in a YAML comment",
    ("experiments/mine_pairs.py", "mine"): "a count in a printed line",
    ("experiments/study_bkr_vs_corr.py", "embed_split"): "a cache key",
    ("experiments/zeroshot_table.py", "row_config_sha256"): "a digest of a row's config",
    ("bench/bench_backretrieval.py", "main"): "a worker's figures to its parent process, which does arithmetic on them",
}


def json_writes(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of each ``json.dumps``/``json.dump`` call in ``path``, and of each ``from json
    import dump[s]`` (a call that the scan would not see)."""
    found = []

    def walk(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            func = getattr(child, "func", None)
            if (isinstance(child, ast.Call) and isinstance(func, ast.Attribute) and func.attr in ("dumps", "dump")
                    and isinstance(func.value, ast.Name) and func.value.id == "json"):
                found.append((scope or "<module>", child.lineno))
            if isinstance(child, ast.ImportFrom) and child.module == "json" and \
                    {a.name for a in child.names} & {"dumps", "dump"}:
                found.append(("from json import", child.lineno))
            walk(child, inner)

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_every_json_file_is_written_through_a_strict_helper():
    """A ``json.dumps``/``json.dump`` in the sources writes NaN as a bare token: a writer goes through json_text."""
    sources = [p for d in ("globetrotter", "backretrieval", "data_prep", "experiments", "bench")
               for p in sorted((REPO / d).rglob("*.py"))] + [REPO / "train.py", REPO / "eval.py"]
    seen, bypass = set(), []
    for path in sources:
        name = path.relative_to(REPO).as_posix()
        for scope, line in json_writes(path):
            seen.add((name, scope))
            if (name, scope) not in NOT_WRITERS:
                bypass.append(f"{name}:{line} ({scope})")
    assert not bypass, f"JSON written past json_text (NaN would be a bare token): {bypass}"
    assert not set(NOT_WRITERS) - seen, f"stale NOT_WRITERS entries: {sorted(set(NOT_WRITERS) - seen)}"
