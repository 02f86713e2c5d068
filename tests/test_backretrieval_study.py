"""experiments/study_bkr_vs_corr.py: the g x family grid of the protocol, on a tiny jpg split made on the fly."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from backretrieval import BackRetrievalError
from conftest import load_experiment
from data_prep.shard_writer import ShardWriter


@pytest.fixture(scope="module")
def study():
    return load_experiment("study_bkr_vs_corr")


@pytest.fixture(scope="module")
def jpg_split(tmp_path_factory):
    """60 pictures of 6 colours, captioned in en and de (the colour word), tied by group."""
    root = tmp_path_factory.mktemp("study")
    colours = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (40, 60, 220), "yellow": (230, 220, 40),
               "black": (10, 10, 10), "white": (245, 245, 245)}
    german = dict(zip(colours, ("rot", "grün", "blau", "gelb", "schwarz", "weiß")))
    rng = np.random.default_rng(0)
    with ShardWriter(root / "test", split="test", source="unit", image_format="jpg") as w:
        for i in range(60):
            name = list(colours)[i % 6]
            pixels = np.clip(np.array(colours[name]) + rng.normal(0, 20, (24, 24, 3)), 0, 255).astype(np.uint8)
            for lang, word in (("en", name), ("de", german[name])):
                w.write(f"k{i}_{lang}", Image.fromarray(pixels), f"{word} {i}", lang, image_id=f"img{i}",
                        group=f"g{i}")
    return root / "test"


def test_families_file_sections_union_and_errors(study, tmp_path):
    path = tmp_path / "fam.txt"
    path.write_text("# c\n[a]\nr1=random:8:1\nr2=random:8:2\nr3=random:8:3\n[b]\nr1=random:8:1\nr4=random:8:4\n"
                    "r5=random:8:5\n")
    fams = study.read_families(path)
    assert list(fams) == ["a", "b"] and list(study.union_family(fams)) == ["r1", "r2", "r3", "r4", "r5"]
    path.write_text("[a]\nr1=random:8:1\nr2=random:8:2\n")
    with pytest.raises(BackRetrievalError, match=r"\[a\] has 2 models"):
        study.read_families(path)
    with pytest.raises(BackRetrievalError, match="give one label one spec"):
        study.union_family({"a": {"r1": "random:8:1"}, "b": {"r1": "random:8:2"}})
    with pytest.raises(BackRetrievalError, match="LABEL=MODEL"):
        study.parse_g("thumbnail:16")


def test_study_grid_writes_table_summary_plots_and_caches_embeddings(study, jpg_split, tmp_path, capsys, monkeypatch):
    fams = tmp_path / "fam.txt"
    fams.write_text("[graded]\nchar=tfidf:char\nword=tfidf:word\nrnd=random:16:0\nnoisy=noisy:3:0:tfidf:word\n")
    out = tmp_path / "out"
    argv = ["--data", str(jpg_split), "--families", str(fams), "--image-models", "thumb=thumbnail:4", "null=random:0",
            "--pairs", "en-de", "--ns", "15,30", "--n-seeds", "2", "--out", str(out), "--no-progress"]
    assert study.main(argv) == 0
    rec = json.loads((out / "study.json").read_text())
    assert len(rec["rows"]) == 2 * 2 * 2  # g x (family + union) x N
    # the record named neither the options (--families, --image-models, ...) nor the versions it was made with
    assert rec["inputs"]["families"] == str(fams) and rec["inputs"]["seeds"] == 2 and "torch" in rec["versions"]
    row = next(r for r in rec["rows"] if r["g"] == "thumb" and r["family"] == "graded" and r["n"] == 30)
    assert row["whole_split"] and len(row["pearson"]["bkr"]["per_seed"]) == 2 and set(row["models"]) == {
        "char", "word", "rnd", "noisy"}
    assert row["pearson"]["diff"]["mean"] == pytest.approx(row["pearson"]["bkr"]["mean"]
                                                           - row["pearson"]["corr"]["mean"])
    assert "| thumb | graded | en->de | 30* (2) |" in (out / "table.md").read_text()
    assert (out / "summary.md").read_text().count("\n") == 2 + 4 and (out / "scatter_en-de_n30.png").is_file()
    cached = sorted((out / "embeddings").glob("*.npy"))
    assert len(cached) == 4
    capsys.readouterr()

    def no_embedder(spec, **_):
        raise AssertionError(f"{spec} embedded again: the cache was not read")

    monkeypatch.setattr(study, "load_embedder", no_embedder)
    assert study.main(argv) == 0  # the second run reads every embedding from the cache
    assert sorted((out / "embeddings").glob("*.npy")) == cached
    assert json.loads((out / "study.json").read_text())["rows"][0]["pearson"] == rec["rows"][0]["pearson"]
    with pytest.raises(BackRetrievalError, match="2N <= 60"):
        study.main(argv[:-7] + ["--ns", "31", "--out", str(out), "--no-progress"])


@pytest.mark.parametrize("bad", [["--ns", "31"], ["--ns", "8"], ["--n-seeds", "0"], ["--ks", "0"], ["--ns", "15,0"],
                                 ["--pairs", "en-en"]])
def test_bad_sizes_are_refused_before_any_model_is_embedded(study, jpg_split, tmp_path, monkeypatch, bad):
    fams = tmp_path / "fam.txt"
    fams.write_text("[a]\nr1=random:8:1\nr2=random:8:2\nr3=random:8:3\n")

    def no_embedder(spec, **_):
        raise AssertionError(f"{spec} embedded before the options were checked")

    monkeypatch.setattr(study, "load_embedder", no_embedder)
    monkeypatch.setattr(study, "embed_split", no_embedder)
    argv = ["--data", str(jpg_split), "--families", str(fams), "--image-models", "thumb=thumbnail:4", "--pairs",
            "en-de", "--ns", "15", "--n-seeds", "2", "--out", str(tmp_path / "out"), "--no-progress", *bad]
    try:
        study.main(argv)
    except SystemExit as exit_:  # argparse: a usage error
        assert exit_.code == 2
    except BackRetrievalError as err:
        assert bad[0] in str(err)
        if bad == ["--ns", "8"]:  # the flags typed here, not the library's Python ks
            assert str(err).endswith("lower --ks or raise --ns"), err
    else:
        raise AssertionError("accepted")


def test_summarise_counts_strict_wins_and_takes_the_population_std_and_xlr_range(study):
    """A hand-made protocol result: a tie is no BkR win, std is over the seeds (ddof 0), the XLR range is
    [lowest, highest] model mean."""
    bkr, base = [0.5, 0.2, 0.9], [0.5, 0.4, 0.1]
    res = {"correlation": {"@5": {kind: {"bkr": {"per_seed": bkr}, "corr": {"per_seed": base}}
                                  for kind in ("pearson", "spearman")}},
           "models": {m: {"mean": {"bkr@5": 0.1, "xlr@5": x, "corr": 0.2}} for m, x in (("a", 0.7), ("b", 0.3),
                                                                                         ("c", 0.5))}}
    row = study.summarise(res, 5)
    mean = sum(bkr) / 3
    assert row["pearson"]["bkr_wins"] == 1  # seed 0 ties, seed 1 loses, seed 2 wins
    assert row["pearson"]["bkr"]["std"] == pytest.approx((sum((v - mean) ** 2 for v in bkr) / 3) ** 0.5)
    assert row["pearson"]["diff"]["per_seed"] == pytest.approx([0.0, -0.2, 0.8])
    assert row["xlr_range"] == [0.3, 0.7]
    res["correlation"]["@5"]["pearson"]["bkr"]["per_seed"] = [0.5, float("nan"), 0.9]  # seed 1 undefined
    assert study.summarise(res, 5)["pearson"]["bkr"]["mean"] == pytest.approx(0.7)  # the mean of the defined seeds


def test_the_summary_reads_only_the_rows_of_its_n(study):
    """Rows of two Ns, the smaller listed last: the summary at N = 20 shows the N = 20 figures."""
    def row(n, value):
        stat = {"mean": value, "std": 0.0}
        return {"g": "g", "family": "f", "pair": "en->de", "n": n,
                **{kind: {"bkr": stat, "corr": stat} for kind in ("pearson", "spearman")}}

    summary = study.summary_table([row(20, 0.75), row(10, 0.25)], 20, ["en->de"])
    assert "0.75 ± 0.00" in summary and "0.25" not in summary


def test_the_embeddings_cache_is_not_read_for_other_texts(study, tmp_path):
    """Two splits whose captions differ: the second's embeddings are its own, not the first's from the cache."""
    first, second = ["red car", "blue sky", "green tree"], ["old house", "red door", "blue car"]
    study.embed_split("word", "tfidf:word", first, tmp_path / "cache", {}, False)
    _, cached = study.embed_split("word", "tfidf:word", second, tmp_path / "cache", {}, False)
    _, fresh = study.embed_split("word", "tfidf:word", second, tmp_path / "fresh", {}, False)
    np.testing.assert_allclose(cached, fresh)


def test_the_summary_is_at_the_largest_n_in_whatever_order_ns_are_given(study, jpg_split, tmp_path):
    fams = tmp_path / "fam.txt"
    fams.write_text("[a]\nr1=random:8:1\nr2=random:8:2\nr3=random:8:3\n")
    out = tmp_path / "out"
    assert study.main(["--data", str(jpg_split), "--families", str(fams), "--union", "", "--image-models",
                       "null=random:0", "--pairs", "en-de", "--ns", "20,12", "--n-seeds", "2", "--out", str(out),
                       "--no-progress"]) == 0
    rows = {r["n"]: r for r in json.loads((out / "study.json").read_text())["rows"]}
    largest = f"{study._pm(rows[20]['pearson']['bkr'])} / {study._pm(rows[20]['pearson']['corr'])}"
    assert largest in (out / "summary.md").read_text()


@pytest.mark.parametrize("text, message", [
    (None, "--families file not found"),
    ("[a]\nr1=random:8:1\nr2=random:8:2\nr3=random:8:3\n[a]\n", ":5: empty or repeated family header '[a]'"),
    ("[ ]\n", ":1: empty or repeated family header '[ ]'"),
    ("# models\nr1=random:8:1\n[a]\n", ":2: model spec 'r1=random:8:1' before any [family] header"),
    ("[a]\nr1=random:8:1\nr1=random:8:2\nr3=random:8:3\n", ": family [a]: "),
    ("# nothing yet\n\n", ": no [family] sections"),
])
def test_a_bad_families_file_is_one_error_naming_the_file_and_line(study, tmp_path, text, message):
    path = tmp_path / "fam.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(BackRetrievalError) as err:
        study.read_families(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value) and "\n" not in str(err.value)


def test_a_tfidf_spec_of_another_analyzer_is_refused_naming_the_choices(study):
    from backretrieval.embedders import load_embedder

    with pytest.raises(BackRetrievalError, match=r"^embedder spec 'tfidf:chars': expected tfidf:char or tfidf:word$"):
        load_embedder("tfidf:chars")


def test_a_report_k_that_is_not_one_of_the_ks_is_refused_before_anything_is_read(study, tmp_path):
    with pytest.raises(BackRetrievalError, match=r"^--report-k 5 is not one of --ks 1,10$"):
        study.main(["--data", str(tmp_path / "none"), "--families", str(tmp_path / "none.txt"), "--ks", "1,10",
                    "--report-k", "5", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_positional_npy_model_keeps_a_row_per_text_and_a_rewritten_file_is_embedded_again(study, tmp_path):
    """An ``npy:`` file without a texts sidecar maps rows to texts by position: a repeated text keeps its own row (no
    de-duplication), and the cache key follows the file's time, so a rewritten file is not served from the cache."""
    texts = ["red car", "blue sky", "red car"]
    path = tmp_path / "emb.npy"
    first = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.save(path, first)
    _, got = study.embed_split("m", f"npy:{path}", texts, tmp_path / "cache", {}, False)
    np.testing.assert_array_equal(got, first)  # rows 0 and 2 differ although their texts are the same
    second = first[::-1] + 100
    np.save(path, second)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a later time, whatever the clock
    _, again = study.embed_split("m", f"npy:{path}", texts, tmp_path / "cache", {}, False)
    np.testing.assert_array_equal(again, second)
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2
