"""experiments/oracle_ranking.py: bad input is one line (exit 2), found before the model is loaded or anything scored."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import load_experiment, write_repetitive_reference, write_thin_reference


@pytest.fixture(scope="module")
def oracle():
    return load_experiment("oracle_ranking")


def test_a_language_the_val_split_lacks_is_named_as_the_languages_mistake_before_the_model_loads(oracle, tiny_world,
                                                                                                tmp_path, capsys):
    val = tmp_path / "val"  # a parallel split of other images: test's captions, under a val manifest
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    argv = ["--model", str(tmp_path / "no-run"), "--val", str(val), "--reference", str(tiny_world / "train"),
            "--languages", "en,xx", "--out", str(tmp_path / "out")]
    assert oracle.run_cli(oracle.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --languages en,xx: --val ") and "no caption in xx" in err
    assert "needs a parallel val split" not in err and "no-run" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, expected", [
    (["--n-groups", "0"], "--n-groups: expected a positive integer, got 0"),
    (["--n-groups", "-3"], "--n-groups: expected a positive integer, got -3"),
    (["--reference-size", "0"], "--reference-size: expected a positive integer, got 0"),
    (["--seed", "-1"], "--seed: expected an integer >= 0, got -1"),
    (["--out", "FILE"], "file: cannot create the output folder (a file of that name exists)"),
    (["--out", "FILE/sub"], "file/sub: cannot create the output folder (FILE is not a directory)"),
])
def test_bad_counts_and_an_out_that_is_a_file_are_usage_errors_not_tracebacks(oracle, tiny_world, tmp_path, capsys,
                                                                              extra, expected):
    (tmp_path / "file").write_text("x")
    argv = ["--model", "tfidf", "--val", str(tiny_world / "val"), "--reference", str(tiny_world / "train"),
            "--out", str(tmp_path / "out")] + [x.replace("FILE", str(tmp_path / "file")) for x in extra]
    with pytest.raises(SystemExit) as stop:
        oracle.run_cli(oracle.main, argv)
    assert stop.value.code == 2 and expected.replace("FILE", str(tmp_path / "file")) in capsys.readouterr().err


def test_the_parallel_val_ties_captions_by_group_and_by_image_only_where_the_split_has_no_groups(oracle, tmp_path):
    """Two caption groups of one image (each an en caption and its ru translation) stay two groups: tied by image,
    the oracle would score an en caption against the translation of another."""
    import numpy as np

    from data_prep.shard_writer import ShardWriter

    with ShardWriter(tmp_path / "grouped", split="val", source="unit", image_format="npy") as writer:
        for i in range(3):
            for g in "ab":
                for lang in ("en", "ru"):
                    writer.write(f"k{i}{g}{lang}", np.zeros(4, np.float32), f"{lang} {g} of {i}", lang, f"i{i}",
                                 f"g{i}{g}")
    grouped = oracle.parallel_val(str(tmp_path / "grouped"), ["en", "ru"], None, 0)
    assert sorted(grouped.group_ids) == [f"g{i}{g}" for i in range(3) for g in "ab"]
    for group in range(len(grouped.group_ids)):  # each group: one caption and its own translation
        en, ru = (grouped.captions[i] for i in np.flatnonzero(grouped.groups == group))
        assert en.split()[1:] == ru.split()[1:]
    with ShardWriter(tmp_path / "plain", split="val", source="unit", image_format="npy") as writer:
        for i in range(3):
            for lang in ("en", "ru"):
                writer.write(f"k{i}{lang}", np.zeros(4, np.float32), f"{lang} of {i}", lang, f"i{i}")
    assert sorted(oracle.parallel_val(str(tmp_path / "plain"), ["en", "ru"], None, 0).group_ids) == ["i0", "i1", "i2"]


def test_a_val_split_showing_test_images_is_refused_before_the_model_loads(oracle, tiny_world, tmp_path, capsys):
    """--test: the oracle's choice would read test when --val shows its images (a copy of test under a val manifest)."""
    val = tmp_path / "val"
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    argv = ["--model", str(tmp_path / "no-run"), "--val", str(val), "--reference", str(tiny_world / "train"),
            "--test", str(tiny_world / "test"), "--out", str(tmp_path / "out")]
    assert oracle.run_cli(oracle.main, argv) == 2
    err = capsys.readouterr().err
    assert f"--val {val}: shows " in err and "images of the test split" in err and "no-run" not in err
    assert not (tmp_path / "out").exists()


def test_the_command_line_keeps_the_candidate_of_the_highest_val_translation(oracle, tiny_world, tmp_path, capsys):
    """A tfidf oracle on a parallel val split (test's captions under a val manifest): every ranking of the grid is
    scored, and the record keeps the first of those with the highest val translation."""
    val = tmp_path / "val"
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    out = tmp_path / "out"
    assert oracle.main(["--model", "tfidf", "--val", str(val), "--reference", str(tiny_world / "train"),
                        "--out", str(out)]) == 0
    record = json.loads((out / "select-oracle-tfidf.json").read_text(encoding="utf-8"))
    rows = record["details"]["candidates"]
    best = max(row["val_translation"] for row in rows)
    first_best = next(row for row in rows if row["val_translation"] == best)
    assert len(rows) > 1 and record["metrics"]["chosen"] == first_best["label"]
    assert record["details"]["chosen"] == first_best["ranking"] and record["config"]["oracle"] is True
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(rows) + 1 and printed[-1].startswith(f"oracle choice: {first_best['label']} (")


def test_the_librarys_refusals_name_this_scripts_flags_and_a_reference_size_below_csls_k_is_refused_first(
        oracle, tiny_world, tmp_path, capsys):
    """The reference checks of the evaluation library name --reference, as typed here, not its Python reference=; a
    --reference-size below the grid's CSLS neighbourhood is refused in this script's words (not eval.py's --csls-k)."""
    val = tmp_path / "val"
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    base = ["--model", str(tmp_path / "no-run"), "--val", str(val), "--out", str(tmp_path / "out")]
    assert oracle.run_cli(oracle.main, base + ["--reference", str(val)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --reference {val} is the evaluated split") and "reference=" not in err
    assert oracle.run_cli(oracle.main, base + ["--reference", str(tiny_world / "train"), "--reference-size", "5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --reference-size 5: the grid's CSLS rankings take 10 neighbours") and "csls-k" not in err
    assert "no-run" not in err and not (tmp_path / "out").exists()


def test_a_reference_split_with_fewer_captions_than_csls_k_is_refused_in_this_scripts_flags(oracle, tiny_world,
                                                                                          tmp_path, capsys):
    """A --reference of 5 captions a language: the scoring's refusal named eval.py's --retrieval and --csls-k (no
    flags here), after a ranking was scored."""
    val = tmp_path / "val"
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    thin = write_thin_reference(tmp_path / "thin")
    argv = ["--model", "tfidf", "--val", str(val), "--reference", str(thin),
            "--out", str(tmp_path / "out")]
    assert oracle.run_cli(oracle.main, argv) == 2
    printed = capsys.readouterr()
    err = printed.err
    assert err.startswith(f"error: --reference {thin}: 5 el captions, fewer than the 10 neighbours"), err
    assert "csls-k" not in err and "--retrieval" not in err and err.count("\n") == 1
    assert printed.out == "" and not (tmp_path / "out").exists()  # no ranking scored


def test_a_reference_too_repetitive_for_maxsim_is_refused_in_this_scripts_flags_before_any_ranking(
        oracle, tiny_world, tiny_run, tmp_path, capsys):
    """12 captions a language, of 2 words each: the scoring's refusal named eval.py's --maxsim (no flag here), once
    the grid's cosine and CSLS rankings were scored."""
    val = tmp_path / "val"  # a parallel split of other images: test's captions, under a val manifest
    shutil.copytree(tiny_world / "test", val)
    manifest = json.loads((val / "manifest.json").read_text(encoding="utf-8"))
    (val / "manifest.json").write_text(json.dumps({**manifest, "split": "val"}), encoding="utf-8")
    reference = write_repetitive_reference(tmp_path / "reference")
    argv = ["--model", str(tiny_run), "--val", str(val), "--reference", str(reference), "--languages", "en,ru",
            "--out", str(tmp_path / "out")]
    assert oracle.run_cli(oracle.main, argv) == 2
    printed = capsys.readouterr()
    err = printed.err.strip().splitlines()[-1]  # after the loading note of a run without a best checkpoint
    assert err.startswith(f"error: --reference {reference}: its en captions hold "), printed.err
    assert err.endswith("name a split with more varied en captions") and "--maxsim" not in printed.err
    assert "oracle: " not in printed.out and not (tmp_path / "out").exists()
