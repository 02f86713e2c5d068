"""Every ```python block a user reads (README.md, docs/*.md) is run by a test, or marked here as not runnable with
the reason: a new block cannot land untested in silence. A block is named by its file and a marker, a piece of its
text no other block of the file holds; the test that runs it names both (it finds the block by them)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (file, marker) -> "tests/FILE.py::TEST", the test that runs the block as written
RUN_BY = {
    ("README.md", "encode_image"):
        "tests/test_python_api.py::test_the_documented_python_training_runs_and_its_model_compares_texts_with_images",
    ("docs/training.md", "generate(SynthConfig("):
        "tests/test_python_api.py::test_the_documented_python_training_runs_and_its_model_compares_texts_with_images",
    ("docs/training.md", "encode_image"):
        "tests/test_python_api.py::test_the_documented_python_training_runs_and_its_model_compares_texts_with_images",
    ("docs/evaluation.md", "select_ranking("):
        "tests/test_python_api.py::test_the_documented_select_and_sentence_snippet_runs",
    ("docs/backretrieval.md", "bkr_recall("):
        "tests/test_python_api.py::test_the_documented_bkr_recall_snippet_runs",
    ("docs/backretrieval.md", "image_feature_extractor()"):
        "tests/test_backretrieval_images.py::test_the_documented_python_snippets_pass_g_and_run",
    ("docs/backretrieval.md", "class Mine"):
        "tests/test_python_api.py::test_the_documented_own_model_snippet_runs",
}
# (file, marker) -> why no test can run the block (none at present)
NOT_RUNNABLE: dict[tuple[str, str], str] = {}


def documents() -> list[str]:
    """README.md and docs/*.md, as paths relative to the repository."""
    return ["README.md"] + sorted(f"docs/{path.name}" for path in (REPO / "docs").glob("*.md"))


def python_blocks(doc: str) -> list[str]:
    """The ```python blocks of ``doc``, as tests/test_python_api.py's ``_python_block`` reads them."""
    return re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(encoding="utf-8"), flags=re.S)


def test_every_python_block_is_run_by_a_test_or_marked_not_runnable():
    listed = {**RUN_BY, **NOT_RUNNABLE}
    assert not set(RUN_BY) & set(NOT_RUNNABLE)
    unlisted, found = [], set()
    for doc in documents():
        for block in python_blocks(doc):
            keys = [(file, marker) for file, marker in listed if file == doc and marker in block]
            assert len(keys) <= 1, f"{doc}: one block holds the markers of {keys}; make each marker name one block"
            if keys:
                found.add(keys[0])
            else:
                unlisted.append(f"{doc}: {block.splitlines()[0] if block.strip() else '(empty)'}")
    assert not unlisted, ("```python blocks no test runs: add a test that runs each (tests/test_python_api.py "
                          f"_python_block) and list it in RUN_BY, or list it in NOT_RUNNABLE with why: {unlisted}")
    assert found == set(listed), f"listed but in no block (moved or gone): {sorted(set(listed) - found)}"


def test_the_listed_tests_exist_and_find_their_block_by_its_file_and_marker():
    for (doc, marker), test in RUN_BY.items():
        path, name = test.split("::")
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        functions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
        assert functions, f"{test}: no such test (it runs the block of {doc} holding {marker!r})"
        source = ast.get_source_segment((REPO / path).read_text(encoding="utf-8"), functions[0])
        assert marker in source and Path(doc).name in source, f"{test} does not name {doc}'s block by {marker!r}"


def test_python_code_is_fenced_as_python():
    """A ```py or ```python3 fence would escape the check above (and _python_block)."""
    other = [f"{doc}: ```{lang}" for doc in documents()
             for lang in re.findall(r"^```(py|python3|pycon)\s*$", (REPO / doc).read_text(encoding="utf-8"), re.M)]
    assert not other, f"fence Python code as ```python: {other}"
