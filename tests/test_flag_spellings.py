"""One spelling per option concept across the command lines: every program's parser (sub-commands, bench and
experiment scripts included) takes the shared name of a concept (``--languages``, ``--held-out``, ...) and none of
the spellings it replaced. argparse refuses an old spelling, or, where it is the start of the new one
(``--max-per-lang`` of ``--max-per-language``), reads it as that same option (its prefix matching): never as another
option."""
from __future__ import annotations

import argparse

import pytest
from test_docs_commands import HELP_PROGRAMS, ROOT, parser_for, subcommands

SCRIPTS = tuple(sorted(str(path.relative_to(ROOT)) for folder in ("bench", "experiments")
                       for path in (ROOT / folder).glob("*.py")))

# an old spelling -> the shared one that replaced it
RETIRED = {
    "--langs": "--languages",
    "--heldout": "--held-out",
    "--max-per-lang": "--max-per-language",
    "--corpus-lang": "--corpus-language",
    "--force": "--overwrite",
    "--quiet": "--no-progress",
    "--backbone": "--image-model",
    "--weights": "--image-weights",
    "--limit-images": "--max-images",
    "--limit": "--max-images",
}

# (program, sub-command path, the shared spelling, the old one it replaced there)
RENAMED = [
    ("zeroshot", "retrieval", "--languages", "--langs"),
    ("zeroshot", "tag-eval", "--languages", "--langs"),
    ("backretrieval", "eval", "--languages", "--langs"),
    *(("data", converter, "--languages", "--langs")
      for converter in ("multi30k", "flickr8k", "globetrotter", "xtd10", "folder", "more-captions")),
    ("experiments/zeroshot_table.py", "", "--languages", "--langs"),
    ("data", "synth", "--held-out", "--heldout"),
    ("eval.py", "select", "--max-per-language", "--max-per-lang"),
    ("zeroshot", "triplet", "--max-per-language", "--max-per-lang"),
    ("backretrieval", "eval", "--max-per-language", "--max-per-lang"),
    ("eval.py", "translate", "--corpus-language", "--corpus-lang"),
    *(("data", f"features {action}", "--overwrite", "--force") for action in ("build", "import", "concat")),
    *(("data", command, "--no-progress", "--quiet")
      for command in ("synth", "multi30k", "flickr8k", "globetrotter", "xtd10", "folder", "more-captions",
                      "features import", "features concat")),
    *(("zeroshot", command, "--out", "--json") for command in ("retrieval", "tag", "tag-eval")),
    ("data", "features build", "--image-model", "--backbone"),
    ("data", "features build", "--image-weights", "--weights"),
    ("experiments/finetune_backbone.py", "", "--image-model", "--backbone"),
    *(("data", converter, "--max-images", "--limit-images")
      for converter in ("multi30k", "flickr8k", "globetrotter", "xtd10", "folder")),
    ("bench/bench_convert.py", "", "--max-images", "--limit-images"),
    ("zeroshot", "tag", "--max-images", "--limit"),
]


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    """(label, parser) of every program and script and of each of their sub-commands."""
    out, todo = [], [(program, parser_for(program)) for program in (*HELP_PROGRAMS, *SCRIPTS)]
    while todo:
        label, parser = todo.pop()
        out.append((label, parser))
        todo += [(f"{label} {name}", child) for name, child in (subcommands(parser) or {}).items()]
    return out


def command_parser(program: str, path: str) -> argparse.ArgumentParser:
    parser = parser_for(program)
    for name in path.split():
        parser = subcommands(parser)[name]
    return parser


def read_as(parser: argparse.ArgumentParser, flag: str) -> str | None:
    """The option (its dest) ``parser`` reads ``flag`` as: the option of that name, else the one option whose name it
    starts (argparse's abbreviations, ``allow_abbrev``); None when argparse refuses it."""
    actions = parser._option_string_actions
    if flag in actions:
        return actions[flag].dest
    started = {actions[name].dest for name in actions if name.startswith(flag)} if parser.allow_abbrev else set()
    return started.pop() if len(started) == 1 else None


PARSERS = every_parser()


def test_every_program_and_script_is_read():
    labels = {label for label, _ in PARSERS}
    assert {"eval.py sentence", "zeroshot retrieval", "backretrieval eval", "data features build",
            "experiments/zeroshot_table.py", "bench/device_check.py"} <= labels


@pytest.mark.parametrize("old, new", RETIRED.items())
def test_no_command_takes_a_replaced_spelling(old, new):
    for label, parser in PARSERS:
        assert old not in parser._option_string_actions, f"{label}: {old} (spelled {new} everywhere)"


@pytest.mark.parametrize("program, path, new, old", RENAMED, ids=[f"{p} {s} {n}" for p, s, n, _ in RENAMED])
def test_renamed_option_is_taken_by_its_shared_spelling(program, path, new, old):
    """The command takes the shared spelling; the old one is refused, or, where argparse still reads it (the start
    of an option's name), read as that same option, never as another one."""
    parser = command_parser(program, path)
    assert new in parser._option_string_actions
    read = read_as(parser, old)
    assert read in (None, parser._option_string_actions[new].dest), f"argparse reads {old} as --{read}"


def test_every_ks_is_one_comma_separated_value():
    """``--ks 1,5,10`` everywhere, as the lists of languages are written (backretrieval, eval.py retrieval and the study
    took ``--ks 1 5 10``)."""
    found = set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--ks")
        if action is not None:
            found.add(label)
            assert action.nargs is None and action.type("1,5,10") == [1, 5, 10], label
    assert {"backretrieval score", "backretrieval compare", "backretrieval eval", "backretrieval correlate",
            "eval.py retrieval", "zeroshot retrieval", "zeroshot triplet", "experiments/study_bkr_vs_corr.py"} <= found


def test_json_switches_to_json_and_a_record_file_is_out():
    """``--json`` prints JSON (eval.py translate, features build/import/concat); a JSON record file a command writes
    is ``--out FILE``, as in eval.py and backretrieval (zeroshot retrieval/tag/tag-eval took ``--json FILE``)."""
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--json")
        assert action is None or action.nargs == 0, f"{label}: --json FILE (the file a command writes is --out)"
    for command in ("retrieval", "tag", "tag-eval"):
        assert command_parser("zeroshot", command)._option_string_actions["--out"].metavar == "FILE"


def test_every_languages_option_takes_language_codes_in_one_value():
    """``--languages en,de,fr``: one comma-separated value of language codes wherever a command takes languages
    (bench/bench_eval.py's numbers of languages to time are --n-languages)."""
    found = set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--languages")
        if action is not None:
            found.add(label)
            assert action.nargs is None, label
            if action.type is not None:
                assert action.type("en,de") == ["en", "de"], label
    assert {"eval.py sentence", "eval.py select", "data synth", "data folder", "data more-captions",
            "zeroshot retrieval", "backretrieval eval", "experiments/zeroshot_table.py"} <= found
