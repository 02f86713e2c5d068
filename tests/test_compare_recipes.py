"""experiments/compare_recipes.py and ``paired_margin``: two recipes' select records compared on the same val queries."""
from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from conftest import load_experiment, strict_json
from globetrotter.errors import UserError
from globetrotter.evaluation.tasks.choice_margins import compare_choices, paired_margin


@pytest.fixture(scope="module")
def cmp():
    return load_experiment("compare_recipes")


def record(per_query, queries="q1", model="runs/m", chosen="cosine") -> dict:
    """The parts of an ``eval.py select`` record the comparison reads."""
    return {"model": {"path": model}, "metrics": {"chosen": chosen, "mean_bkr": float(np.mean(per_query))},
            "config": {"val": "val", "seed": 0, "max_per_lang": 300},
            "details": {"chosen": {}, "val": {"queries_sha256": queries, "image_features": "g"},
                        "per_query": list(map(float, per_query))}}


def write(tmp_path, name, rec) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(rec), encoding="utf-8")
    return str(path)


def test_the_mean_over_seeds_is_paired_query_by_query():
    rng = np.random.default_rng(0)
    hard = rng.uniform(0.2, 0.8, 400)  # how hard each query is: shared by every model, so pairing removes it
    new = [record(np.clip(hard + 0.05 + 0.1 * rng.standard_normal(400), 0, 1)) for _ in range(3)]  # hit rates
    old = [record(np.clip(hard + 0.1 * rng.standard_normal(400), 0, 1)) for _ in range(3)]
    pooled = paired_margin(new, old)
    diff = np.mean([r["details"]["per_query"] for r in new], 0) - np.mean([r["details"]["per_query"] for r in old], 0)
    assert pooled["diff"] == pytest.approx(diff.mean())
    assert pooled["lo"] > 0 and pooled["p_value"] < 0.01  # a margin of 0.05 that the seeds' average resolves
    single = paired_margin(new[:1], old[:1])
    assert pooled["hi"] - pooled["lo"] < single["hi"] - single["lo"]  # averaging the seeds narrows it
    assert paired_margin(old, old)["diff"] == 0.0


@pytest.mark.parametrize("scores, said", [
    ("abc", r'details\.per_query is "abc", expected a non-empty list of finite numbers'),
    (["a", "b", "c"], r'details\.per_query is \["a", "b", "c"\], expected'),
    ([0.1, None, 0.3], r"details\.per_query is \[0\.1, null, 0\.3\], expected"),
    ([], r"details\.per_query is \[\], expected"),
    ([10 ** 400, 0.2, 0.3], r"details\.per_query is \[1000000000.*, expected"),  # no float holds it
    ([0.1, 0.2], r"--against r\.json: holds 2 per-query scores for the same val queries as 3 scores of this model"),
])
def test_a_record_with_damaged_per_query_scores_is_one_line(scores, said):
    """``select --against``'s record with per-query scores that are no numbers, null (NaN) or of another count:
    one line naming it (it was a ValueError or BackRetrievalError traceback)."""
    damaged = record([0.1, 0.2, 0.3])
    damaged["details"]["per_query"] = scores
    with pytest.raises(UserError, match=said):
        compare_choices(record([0.2, 0.3, 0.4]), damaged, source="--against r.json")


def test_this_choices_scores_are_an_array_before_they_are_written():
    """``select --against`` pairs its own record before writing it: its per-query scores are a numpy array there (the
    damaged-record check refused them, and every ``--against`` failed)."""
    mine = record([0.2, 0.3, 0.4])
    mine["details"]["per_query"] = np.array(mine["details"]["per_query"])
    assert compare_choices(mine, record([0.1, 0.2, 0.3]))["diff"] == pytest.approx(0.1)


def test_a_record_whose_model_or_metrics_are_no_objects_is_still_compared():
    """``model`` and ``metrics`` only name the other choice in the result: of another JSON type they name nothing (it
    was an AttributeError traceback)."""
    other = {**record([0.1, 0.2, 0.3]), "model": [], "metrics": [1]}
    compared = compare_choices(record([0.2, 0.3, 0.4]), other)
    assert compared["model"] is None and compared["chosen"] is None and compared["diff"] == pytest.approx(0.1)


def test_records_of_other_queries_or_without_scores_are_refused(monkeypatch):
    good = record([0.1, 0.2, 0.3])
    with pytest.raises(UserError, match=r"B \(record 2\): its val queries are not"):
        paired_margin([good], [good, record([0.1, 0.2, 0.3], queries="q2")])
    old = record([0.1, 0.2, 0.3])
    del old["details"]["per_query"]
    with pytest.raises(UserError, match="holds no per-query scores"):
        paired_margin([good], [old])
    monkeypatch.setattr(sys, "argv", ["experiments/compare_recipes.py"])  # not eval.py: named as the console script
    with pytest.raises(UserError, match="not a record of `globetrotter-eval select`"):
        paired_margin([{"details": []}], [good])


def test_the_command_prints_each_seed_and_the_pooled_margin(cmp, tmp_path, capsys):
    a = [write(tmp_path, f"a{i}", record([0.2, 0.4, 0.6, 0.5], model=f"runs/a{i}")) for i in range(2)]
    b = [write(tmp_path, f"b{i}", record([0.1, 0.4, 0.5, 0.5], model=f"runs/b{i}")) for i in range(2)]
    out = tmp_path / "cmp" / "c.json"
    assert cmp.run_cli(cmp.main, [*a, "--against", *b, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("over its counterpart") == 2 and "mean over 2 against 2 record(s)" in printed
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["mean_over_seeds"]["diff"] == pytest.approx(0.05)
    assert [r["model"] for r in saved["against"]] == ["runs/b0", "runs/b1"]
    # the comparison named neither its options nor the versions it was made with
    assert saved["inputs"]["against"] == b and saved["inputs"]["seed"] == 0 and "torch" in saved["versions"]
    assert cmp.run_cli(cmp.main, [a[0], "--against", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "none.json: no such file (--against takes" in err and len(err.strip().splitlines()) == 1


def test_the_out_file_writes_a_nan_figure_as_null(cmp, tmp_path, capsys):
    """A record whose mean is NaN (an earlier version's, written with a bare NaN) was copied into --out as a bare NaN,
    which strict JSON readers refuse."""
    a = write(tmp_path, "a", record([0.2, 0.4, 0.6]))
    nan = record([0.1, 0.4, 0.5])
    nan["metrics"]["mean_bkr"] = float("nan")
    out = tmp_path / "c.json"
    assert cmp.run_cli(cmp.main, [a, "--against", write(tmp_path, "b", nan), "--out", str(out)]) == 0
    saved = strict_json(out.read_text(encoding="utf-8"))
    assert saved["against"][0]["mean_bkr"] is None and saved["records"][0]["mean_bkr"] == pytest.approx(0.4)


def test_a_g_that_is_one_sides_own_image_encoder_is_said(cmp, tmp_path, capsys):
    """BackRetrieval leans towards the model whose image encoder is g: the comparison names that side."""
    mine, theirs = record([0.3, 0.2, 0.4]), record([0.2, 0.2, 0.3])
    assert paired_margin([mine], [theirs])["g_is_encoder_of"] == []
    theirs["details"]["val"]["model_image_encoder"] = "g"  # the records' g (record() above)
    assert paired_margin([mine], [theirs], sources=("new", "shipped"))["g_is_encoder_of"] == ["shipped"]
    a, b = write(tmp_path, "a", mine), write(tmp_path, "b", theirs)
    assert cmp.run_cli(cmp.main, [a, "--against", b]) == 0
    note = capsys.readouterr().out
    assert "note: g (g) is the image encoder of --against;" in note
    # `eval.py select`'s flag, as that command's: this script has no --image-features
    assert re.search(r"under a g neither uses \(`(eval\.py|globetrotter-eval) select --image-features`\)$", note.rstrip())
    mine["details"]["val"]["model_image_encoder"] = "g"  # both sides see images as g does: it leans towards neither
    assert paired_margin([mine], [theirs])["g_is_encoder_of"] == []
    assert cmp.run_cli(cmp.main, [write(tmp_path, "a", mine), "--against", b]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_bad_out_or_seed_is_refused_before_anything_is_printed(cmp, tmp_path, capsys):
    a, b = write(tmp_path, "a", record([0.3, 0.2, 0.4])), write(tmp_path, "b", record([0.2, 0.2, 0.3]))
    (tmp_path / "file").write_text("x")
    for out, expected in ((tmp_path, "cannot write the output file (is a directory)"),
                          (tmp_path / "file" / "c.json", f"cannot write the output file ({tmp_path / 'file'} is not a "
                                                         "directory)")):
        with pytest.raises(SystemExit) as stop:
            cmp.run_cli(cmp.main, [a, "--against", b, "--out", str(out)])
        printed = capsys.readouterr()
        assert stop.value.code == 2 and expected in printed.err and printed.out == "", printed.err
    with pytest.raises(SystemExit) as stop:
        cmp.run_cli(cmp.main, [a, "--against", b, "--seed", "-1"])
    assert stop.value.code == 2 and "--seed: expected an integer >= 0, got -1" in capsys.readouterr().err


def test_a_record_that_does_not_fit_is_named_by_its_file(cmp, tmp_path, capsys):
    good = [write(tmp_path, f"g{i}", record([0.1, 0.2, 0.3])) for i in range(2)]
    other = write(tmp_path, "other-queries", record([0.1, 0.2, 0.3], queries="q2"))
    oracle = record([0.1, 0.2, 0.3])
    oracle["config"]["oracle"] = True  # oracle_ranking.py's record: chosen on parallel text, no val queries
    del oracle["details"]["val"]
    for bad, expected in ((other, "its val queries are not"), (write(tmp_path, "oracle", oracle), "the oracle's record")):
        assert cmp.run_cli(cmp.main, [*good, "--against", good[0], bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --against {bad}: ") and expected in err, err
    # the remedy names the command that wrote the records and its flags, not the library's select_ranking(val=...)
    assert cmp.run_cli(cmp.main, [good[0], "--against", other]) == 2
    err = capsys.readouterr().err
    assert "select` for both models with the same --val, --seed, --max-per-language" in err, err
    assert "select_ranking" not in err


def test_a_runner_up_that_is_the_simplest_ranking_is_said_once():
    """'over cosine +0.0144 [...]; over cosine +0.0144 [...]': the two margins were one."""
    from globetrotter.evaluation.tasks.choice_margins import uncertainty_line

    margin = {"diff": 0.0144, "lo": 0.002, "hi": 0.027}
    details = {"uncertainty": {"mean": {"value": 0.12, "lo": 0.10, "hi": 0.14}, "over_simplest": margin,
                               "over_runner_up": {"candidate": 0, **margin}},
               "candidates": [{"label": "cosine"}, {"label": "maxsim 2"}]}
    line = uncertainty_line(details)
    assert line.count("over cosine") == 1
    assert line.endswith("over cosine +0.0144 [+0.0020, +0.0270] (also the runner-up)")
    details["uncertainty"]["over_runner_up"]["candidate"] = 1
    assert "; over maxsim 2 +0.0144" in uncertainty_line(details)


def test_sides_of_unequal_length_list_their_own_records_and_no_per_seed_margin(cmp, tmp_path):
    """One record against two: the 'records' list is the one, 'against' the two, and seeds are not paired (the
    sides do not list as many records)."""
    a = write(tmp_path, "a", record([0.3, 0.4, 0.5], model="runs/a"))
    b = [write(tmp_path, f"b{i}", record([0.1, 0.2, 0.3], model=f"runs/b{i}")) for i in range(2)]
    result = cmp.compare([a], b)
    assert [r["model"] for r in result["records"]] == ["runs/a"]
    assert [r["model"] for r in result["against"]] == ["runs/b0", "runs/b1"]
    assert "per_seed" not in result and result["mean_over_seeds"]["diff"] == pytest.approx(0.2)


def test_a_runs_image_encoder_is_named_in_the_form_of_a_g_spec_and_an_empty_side_is_refused():
    """Imported image vectors are ``imported:NAME`` (the spec `g` takes them by), a timm network
    ``timm:BACKBONE:WEIGHTS``; a model without a run config has none to compare."""
    from globetrotter.config import IMPORTED_BACKBONE, TrainConfig
    from globetrotter.evaluation.tasks.select import image_encoder_of

    cfg = TrainConfig()
    cfg.model.image_backbone, cfg.model.image_pretrained = IMPORTED_BACKBONE, "clip-b32"
    assert image_encoder_of(cfg) == "imported:clip-b32"
    cfg.model.image_backbone, cfg.model.image_pretrained = "resnet18", "package"
    assert image_encoder_of(cfg) == "timm:resnet18:package"
    assert image_encoder_of(None) is None
    with pytest.raises(UserError, match="paired_margin: each side needs at least one select record"):
        paired_margin([], [record([0.1, 0.2])])
