"""backretrieval.outputs, .records and .files: writing outputs (one-line errors naming the path), JSON-ready values."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval import BackRetrievalError
from backretrieval.files import target_indices
from backretrieval.outputs import make_dir, save_npy, write_file
from backretrieval.records import json_text


def test_outputs_under_a_file_or_onto_a_folder_are_refused_naming_the_path(tmp_path):
    """A path whose parent is a file (a typo in --out), or an output that is a folder: the path and what could not
    be written, and nothing written."""
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    with pytest.raises(BackRetrievalError, match=r"taken/sub/x.txt: cannot write the table \(.+\)$"):
        write_file(tmp_path / "taken" / "sub" / "x.txt", lambda p: p.write_text("x"), "the table")
    with pytest.raises(BackRetrievalError, match=r"taken/out: cannot create --out \(.+\)$"):
        make_dir(tmp_path / "taken" / "out", "--out")
    (tmp_path / "ranks").mkdir()
    with pytest.raises(BackRetrievalError, match=r"ranks: cannot write --ranks-out \(is a directory\)$"):
        save_npy(tmp_path / "ranks", np.zeros(3), "--ranks-out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks", "taken"] and not any((tmp_path / "ranks").iterdir())


def test_no_target_indices_for_no_source_rows_are_integers():
    """``[]`` reads as float in numpy: for 0 source rows it is the empty ground truth, not a type error."""
    gt = target_indices("gt", [], 0, 5)
    assert gt.dtype.kind == "i" and gt.shape == (0,)
    with pytest.raises(BackRetrievalError, match=r"^gt: expected 2 target indices \(one per source row\), got shape "
                                                 r"\(0,\)$"):
        target_indices("gt", [], 2, 5)


def test_numpy_booleans_are_written_as_json_booleans():
    assert json_text({"ok": np.bool_(True), "no": [np.bool_(False)]}) == '{"ok": true, "no": [false]}'
