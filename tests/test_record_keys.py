"""The keys every command's JSON record shares (docs/evaluation.md, "The JSON records"): its options under ``inputs``,
``versions``, and ``seed`` and ``created`` where it has them, spelled alike so one script reads every record."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from conftest import load_experiment


def eval_record(split, out) -> dict:
    """``eval.py sentence`` (every eval.py sub-command writes its record through :class:`Result`)."""
    from globetrotter.evaluation import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["sentence", "--model", "tfidf", "--split", str(split), "--languages", "en,ru", "--n-groups", "12",
                  "--seed", "3", "--out", str(out)])
    assert done.value.code == 0
    return json.loads((out / "sentence-tfidf.json").read_text(encoding="utf-8"))


def backretrieval_record(tmp_path) -> dict:
    """``backretrieval score`` on random embeddings (eval, correlate and compare write through the same writer)."""
    from backretrieval.cli import main

    rng = np.random.default_rng(0)
    files = {}
    for name, dim in (("st", 8), ("tt", 8), ("si", 6), ("ti", 6)):
        files[name] = str(tmp_path / f"{name}.npy")
        np.save(files[name], rng.standard_normal((20, dim)).astype(np.float32))
    out = tmp_path / "score.json"
    assert main(["score", "--src-text", files["st"], "--tgt-text", files["tt"], "--src-img", files["si"],
                 "--tgt-img", files["ti"], "--ks", "1,5", "--bootstrap", "0", "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def zeroshot_record(tmp_path) -> dict:
    """What every ``globetrotter-zeroshot`` record is written with (retrieval, tag, tag-eval, triplet)."""
    from globetrotter.zeroshot.cli.common import write_json

    out = tmp_path / "zeroshot.json"
    write_json({"task": "zeroshot.retrieval"}, out, argparse.Namespace(out=str(out), seed=0))
    return json.loads(out.read_text(encoding="utf-8"))


def experiment_record(tmp_path) -> dict:
    """``experiments/compare_recipes.py`` on two select records (every experiment writes ``inputs`` alike)."""
    cmp = load_experiment("compare_recipes")
    paths = []
    for name, per_query in (("a", [0.2, 0.4, 0.6]), ("b", [0.1, 0.4, 0.5])):
        select = {"model": {"path": f"runs/{name}"}, "metrics": {"chosen": "cosine", "mean_bkr": 0.4},
                  "config": {"val": "val"}, "seed": 0,
                  "details": {"chosen": {}, "val": {"queries_sha256": "q", "image_features": "g"},
                              "per_query": per_query}}
        paths.append(tmp_path / f"select-{name}.json")
        paths[-1].write_text(json.dumps(select), encoding="utf-8")
    out = tmp_path / "compare.json"
    assert cmp.run_cli(cmp.main, [str(paths[0]), "--against", str(paths[1]), "--seed", "4", "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_every_writer_spells_the_shared_keys_alike(tiny_world, tmp_path):
    """The options were under ``config.options`` (eval.py), ``inputs`` (backretrieval, zeroshot) or ``args``
    (experiments), and eval.py's seed under ``config.seed``: a script collecting them tripped on each family."""
    records = {"eval.py": eval_record(tiny_world / "test", tmp_path / "eval"),
               "backretrieval": backretrieval_record(tmp_path), "zeroshot": zeroshot_record(tmp_path),
               "experiments": experiment_record(tmp_path)}
    for writer, record in records.items():
        assert isinstance(record["inputs"], dict) and record["inputs"], writer
        assert "globetrotter" in record["versions"] and "python" in record["versions"], writer
        assert not {"args", "options"} & set(record) and "options" not in record.get("config", {}), writer
    assert records["eval.py"]["seed"] == records["eval.py"]["inputs"]["seed"] == 3
    assert "seed" not in records["eval.py"]["config"] and records["eval.py"]["created"]
    assert records["experiments"]["seed"] == records["experiments"]["inputs"]["seed"] == 4
    assert records["backretrieval"]["inputs"]["seed"] == 0 and records["zeroshot"]["inputs"]["seed"] == 0


def test_a_language_matrix_is_written_row_language_first_without_its_diagonal():
    """``matrix_dict`` keeps a pair matrix's orientation (row = first key) and leaves the diagonal (a language with
    itself) out."""
    from globetrotter.evaluation.records import matrix_dict

    matrix = np.array([[np.nan, 1.0, 2.0], [3.0, np.nan, 4.0], [5.0, 6.0, np.nan]])
    assert matrix_dict(matrix, ["a", "b", "c"]) == {"a": {"b": 1.0, "c": 2.0}, "b": {"a": 3.0, "c": 4.0},
                                                    "c": {"a": 5.0, "b": 6.0}}


def test_a_results_name_is_the_file_name_it_writes(tmp_path):
    from globetrotter.evaluation import Result

    for model, expected in (({"path": "runs/a", "name": "mine"}, "sentence-mine"), ({}, "sentence")):
        result = Result(task="sentence", metrics={"m": 0.5}, languages=["en", "de"], model=model)
        written = result.write(tmp_path / expected)
        assert result.name == expected == written.stem and written.name == f"{expected}.json"
        assert json.loads(written.read_text(encoding="utf-8"))["task"] == "sentence"
