"""experiments/sentence_protocol.py: choices on val, test once, a table of rows and seeds that resumes from records."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_protocol_table_chooses_on_val_scores_test_once_and_reuses_records(tiny_world, tiny_run, tmp_path):
    out = tmp_path / "table"
    argv = [sys.executable, str(ROOT / "experiments" / "sentence_protocol.py"), "--test", str(tiny_world / "test"),
            "--val", str(tiny_world / "val"), "--languages", "en,ru", "--n-groups", "12", "--row", "TF-IDF=tfidf",
            "--row", f"full={tiny_run}", "--ratio", "full/TF-IDF", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    table = (out / "table.md").read_text(encoding="utf-8")
    record = json.loads((out / "sentence-full-0-en-ru-val-chosen.json").read_text(encoding="utf-8"))
    choice = json.loads((out / "select-full-0-en-ru-val-chosen.json").read_text(encoding="utf-8"))
    assert record["config"]["ranking"] == choice["details"]["chosen"] and record["dataset"]["split"] == "test"
    assert f"{100 * record['metrics']['sentence_translation']:.2f}" in table.splitlines()[3]
    assert table.splitlines()[4].startswith("| full ÷ TF-IDF |")
    before = {p: p.stat().st_mtime_ns for p in out.glob("*.json")}
    again = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 0 and {p: p.stat().st_mtime_ns for p in out.glob("*.json")} == before
    bad = subprocess.run(argv[:-4] + ["--ratio", "full/nope", "--out", str(out)], capture_output=True, text=True)
    assert bad.returncode != 0 and "two labels of --row" in bad.stderr
