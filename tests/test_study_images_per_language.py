"""experiments/study_images_per_language.py: its options are checked before any run is trained."""
from __future__ import annotations

import pytest

from conftest import load_experiment


@pytest.fixture(scope="module")
def curve():
    return load_experiment("study_images_per_language")


@pytest.mark.parametrize("bad", [["--seeds", "-1"], ["--n-groups", "0"], ["--n-groups", "-5"],
                                 ["--out-dir", "AFILE/out"]])
def test_bad_counts_and_an_unwritable_out_dir_are_usage_errors(curve, tmp_path, capsys, bad):
    (tmp_path / "afile").write_text("")
    argv = ["--out-dir", str(tmp_path / "out"), *[b.replace("AFILE", str(tmp_path / "afile")) for b in bad]]
    with pytest.raises(SystemExit) as exit_:
        curve.main(argv)
    assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_given_run_is_placed_at_the_images_of_its_own_config_not_the_model_config(curve, tiny_world, tmp_path,
                                                                                     monkeypatch):
    """One run given for two --model labels sits at one x: the run's own split, not each label's config (the same
    run was placed at 1333 and 1500 images per language)."""
    import json

    from globetrotter.config import load_train_config
    from globetrotter.config_io import save_config

    def config(path, split):
        save_config(load_train_config(None, [f"data.root={tiny_world}", f"data.train_split={split}", "data.synth=null"]),
                    path)
        return path

    full = config(tmp_path / "full.yaml", "train")   # each image captioned in one language
    sup = config(tmp_path / "sup.yaml", "test")      # parallel: every image in every language
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config(run_dir / "config.yaml", "train")
    (run_dir / "result.json").write_text("{}")
    monkeypatch.setattr(curve, "translation", lambda *args: 0.02)
    out = tmp_path / "out"
    curve.main(["--model", f"full={full}", f"sup={sup}", "--shares", "1", "--seeds", "0",
                "--run", f"full:1:0={run_dir}", f"sup:1:0={run_dir}", "--out-dir", str(out)])
    rows = json.loads((out / "curve.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["full", "sup"]
    assert rows[0]["images_per_language"] == rows[1]["images_per_language"] == curve.images_per_language(full)
    assert curve.images_per_language(sup) != rows[1]["images_per_language"]  # the test would tell the bug apart
