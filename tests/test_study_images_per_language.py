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
