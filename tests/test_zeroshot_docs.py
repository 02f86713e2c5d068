"""docs/zeroshot.md: the files its `tag` and `triplet` examples read are made by the lines before them (the examples
named a photo.jpg, tags_de.txt and docs.jsonl that no line made), and they are what the commands take."""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from globetrotter.zeroshot.case_study import languages_with_enough_images, split_documents
from globetrotter.zeroshot.cli import build_parser
from globetrotter.zeroshot.tagging import read_tag_vocabulary
from globetrotter.zeroshot.triplet import read_documents

DOC = Path(__file__).resolve().parents[1] / "docs" / "zeroshot.md"
PROGRAM = ".venv/bin/globetrotter-zeroshot"


def _bash_lines() -> list[str]:
    """Every line of the page's ```bash blocks, ``\\`` continuations joined."""
    lines, block = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            block = line.strip().startswith("```bash")
            continue
        if block:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + line.strip()
            else:
                lines.append(line)
    return lines


def test_the_tag_and_triplet_examples_make_the_files_they_read(tmp_path):
    work = tmp_path / "repo"  # the repository root the commands run in; ../shared beside it
    work.mkdir()
    lines = _bash_lines()
    commands = {}
    for line in lines:
        if line.startswith(PROGRAM):
            argv = shlex.split(line, comments=True)[1:]
            if argv[0] in ("tag", "triplet"):
                commands[argv[0]] = build_parser().parse_args(argv)
        elif line.startswith("printf "):  # the lines that make example files, run as written
            subprocess.run(["bash", "-c", line], cwd=work, check=True)
    assert set(commands) == {"tag", "triplet"}
    tag = commands["tag"]
    assert [lang for lang, _ in tag.vocab] == ["de", "fr"]
    for _, path in tag.vocab:
        assert len(read_tag_vocabulary(work / path)) >= 5
    assert tag.images and all(Path(p).suffix == ".jpg" and p.startswith("../shared/data/flickr8k/images/")
                              for p in tag.images)
    triplet = commands["triplet"]
    docs = [d for path in triplet.docs for d in read_documents(work / path)]
    train, evaluate = split_documents(docs)
    kept, left_out = languages_with_enough_images(evaluate, max(triplet.ks))
    assert len(train) >= 2 and not left_out and len(kept) == len(evaluate)
    # a relative image is found beside the JSONL file's folder: ../shared of the repository root
    for doc in evaluate:
        assert Path(doc.image).parent == (tmp_path / "shared" / "data" / "flickr8k" / "images").resolve()


def test_the_results_table_says_which_of_the_scripts_rows_it_shows():
    """The table showed 18 rows while experiments/zeroshot_table.py defines 20, unsaid."""
    from conftest import load_experiment

    rows = load_experiment("zeroshot_table").ROWS
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| row | val en R@10 |"))
    shown = next(i for i in range(start, len(lines)) if not lines[i].startswith("|")) - start - 2
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    assert f"The table shows {shown} of the {len(rows)} rows `experiments/zeroshot_table.py` defines" in text
    for label in ("M3L, hardest negatives", "M3L, outputs not normalised"):
        assert label in rows and f"`{label}`" in text
    numbers = [list(rows).index(label) for label in ("M3L, hardest negatives", "M3L, outputs not normalised")]
    assert f"`--rows {','.join(map(str, numbers))}` runs them" in text
