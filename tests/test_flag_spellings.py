"""One spelling per option concept across the command lines: every program's parser (sub-commands, bench and
experiment scripts included) takes the shared name of a concept (``--languages``, ``--held-out``, ``--out``, ...) and
none of the spellings it replaced. argparse refuses an old spelling, or, where it is the start of the new one
(``--max-per-lang`` of ``--max-per-language``), reads it as that same option (its prefix matching): never as another
option. A list of numbers, codes or choices is one comma-separated value (``--ks 1,5,10``); only lists of paths and
NAME=SPEC items take several values."""
from __future__ import annotations

import argparse

import pytest
from test_docs_commands import HELP_PROGRAMS, parser_for, scripts, subcommands

SCRIPTS = tuple(sorted(scripts("bench") + scripts("experiments")))

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
    "--out-dir": "--out",
    "--g": "--image-models",
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
    *(("backretrieval", command, "--out", "--out-dir") for command in ("eval", "correlate")),
    *((f"experiments/{script}.py", "", "--out", "--out-dir")
      for script in ("study_image_features", "finetune_backbone", "study_bkr_vs_corr", "study_images_per_language")),
    ("backretrieval", "correlate", "--n-seeds", "--seeds"),
    ("experiments/study_bkr_vs_corr.py", "", "--n-seeds", "--seeds"),
    *((f"experiments/{script}.py", "", "--held-out-images", "--held-out")
      for script in ("finetune_backbone", "image_vector_agreement")),
    ("experiments/study_bkr_vs_corr.py", "", "--image-models", "--g"),
]

# (program, sub-command path, option, one comma-separated value, the list it reads): the lists of numbers, codes and
# choices that took several values (nargs="+" or "*")
COMMA_LISTS = [
    ("eval.py", "word", "--method", "nn,csls", ["nn", "csls"]),
    ("eval.py", "word", "--procrustes", "none,multi", ["none", "multi"]),
    ("eval.py", "correspondence", "--probe-seeds", "0,1,2", [0, 1, 2]),
    ("eval.py", "select", "--heads", "text,cross", ["text", "cross"]),
    ("eval.py", "select", "--maxsim", "0,1", [0.0, 1.0]),
    ("eval.py", "select", "--retrieval", "cosine,csls", ["cosine", "csls"]),
    ("zeroshot", "triplet", "--annotate", "en->de,de->en", ["en->de", "de->en"]),
    ("backretrieval", "compare", "--tests", "mcnemar,bootstrap", ["mcnemar", "bootstrap"]),
    ("backretrieval", "correlate", "--pairs", "en-de,de-en", ["en-de", "de-en"]),
    ("experiments/study_bkr_vs_corr.py", "", "--pairs", "en-de,en-fr", ["en-de", "en-fr"]),
    ("experiments/study_bkr_vs_corr.py", "", "--ns", "150,300", [150, 300]),
    ("experiments/image_vector_agreement.py", "", "--ridge", "10,100", [10.0, 100.0]),
    ("experiments/study_images_per_language.py", "", "--shares", "0.5,1", [0.5, 1.0]),
    ("experiments/study_images_per_language.py", "", "--seeds", "0,1", [0, 1]),
    ("experiments/zeroshot_table.py", "", "--rows", "0,2", [0, 2]),
    ("bench/bench_scale.py", "", "--sizes", "50,100", [50, 100]),
    ("bench/bench_scale.py", "", "--stages", "shards,index", ["shards", "index"]),
    ("bench/bench_train.py", "", "--threads", "1,2", [1, 2]),
    ("bench/bench_neighbours.py", "", "--sizes", "100,200", [100, 200]),
    ("bench/bench_backretrieval.py", "", "--sizes", "100,200", [100, 200]),
    ("bench/bench_backretrieval.py", "", "--methods", "capped,lists", ["capped", "lists"]),
    ("bench/bench_eval.py", "", "--n-languages", "8,52", [8, 52]),
    ("bench/bench_eval.py", "", "--nprobe", "4,16", [4, 16]),
    ("bench/bench_eval.py", "", "--skip", "word,late", ["word", "late"]),
    ("bench/bench_zeroshot.py", "", "--skip", "features,training", ["features", "training"]),
    ("bench/bench_threads.py", "", "--skip", "train,busy", ["train", "busy"]),
]

# the options that still take several values: paths, NAME=SPEC items, overrides, free text (their dests)
SEVERAL_VALUES = {"models", "docs", "images", "against", "records", "g", "model", "run", "overrides", "text"}


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


@pytest.mark.parametrize("program, path, flag, value, expected", COMMA_LISTS,
                         ids=[f"{p} {s} {f}" for p, s, f, _, _ in COMMA_LISTS])
def test_a_list_of_scalars_is_one_comma_separated_value(program, path, flag, value, expected):
    """``--method nn,csls`` as ``--ks 1,5,10``: these took space-separated values (``--method nn csls``)."""
    action = command_parser(program, path)._option_string_actions[flag]
    assert action.nargs is None and action.type(value) == expected
    assert action.default is None or isinstance(action.default, list)


def test_only_paths_and_named_specs_take_several_values():
    """A list of numbers, codes or choices with nargs="+" or "*" (space-separated) cannot come back."""
    for label, parser in PARSERS:
        for action in parser._actions:
            if action.nargs in ("+", "*"):
                assert action.dest in SEVERAL_VALUES, f"{label}: {action.option_strings or action.dest} takes " \
                                                      f"space-separated values; make it one comma-separated value"


@pytest.mark.parametrize("program, path, flag, allowed", [
    ("eval.py", "word", "--method", ("nn", "csls")),
    ("eval.py", "select", "--heads", ("text", "cross")),
    ("backretrieval", "compare", "--tests", ("mcnemar", "bootstrap")),
    ("bench/bench_scale.py", "", "--stages", ("shards", "tokenizer", "import")),
    ("bench/bench_eval.py", "", "--skip", ("sentence", "word", "index", "late", "translate")),
])
def test_a_list_of_choices_names_the_bad_item_and_the_allowed_ones(program, path, flag, allowed, capsys):
    parser = command_parser(program, path)
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parser._option_string_actions[flag].type(f"{allowed[0]},nope")
    assert "'nope'" in str(err.value) and all(choice in str(err.value) for choice in allowed), err.value


def test_word_takes_its_rankings_in_one_value_and_refuses_a_bad_one(capsys):
    """End to end: ``eval.py word --method csls,nn`` parses; ``--method nn csls`` is a usage error now."""
    parser = parser_for("eval.py")
    assert parser.parse_args(["word", "--model", "M", "--method", "csls,nn"]).method == ["csls", "nn"]
    for argv, message in ((["--method", "nn", "csls"], "unrecognized arguments: csls"),
                          (["--method", "nn,cls"], "argument --method: invalid choice 'cls' (choose from nn, csls)")):
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(["word", "--model", "M", *argv])
        assert stop.value.code == 2 and message in capsys.readouterr().err


def test_seeds_is_a_list_of_seeds_everywhere():
    """``--seeds 0,1``: the seeds to run; a number of seeds is ``--n-seeds`` (backretrieval correlate and the study took
    ``--seeds 25``)."""
    found, counted = set(), set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--seeds")
        if action is not None:
            found.add(label)
            assert action.nargs is None and action.type("0,1") == [0, 1], label
        action = parser._option_string_actions.get("--n-seeds")
        if action is not None:
            counted.add(label)
            assert action.type("3") == 3, label
    assert {"experiments/zeroshot_table.py", "experiments/study_images_per_language.py"} <= found
    assert {"backretrieval correlate", "experiments/study_bkr_vs_corr.py"} <= counted


def test_held_out_is_language_codes_and_a_count_of_images_is_held_out_images():
    """``--held-out CODES`` (data synth) keeps languages out; the images a screen holds out are ``--held-out-images N``
    (the image-vector experiments took ``--held-out 800``)."""
    found = set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--held-out")
        if action is not None:
            found.add(label)
            assert action.metavar == "CODES", f"{label}: --held-out takes language codes"
    assert "data synth" in found
    for script in ("finetune_backbone", "image_vector_agreement"):
        action = command_parser(f"experiments/{script}.py", "")._option_string_actions["--held-out-images"]
        assert action.type("800") == 800


def test_every_languages_value_refuses_a_code_twice_and_an_empty_list_or_item():
    """One parser of language codes (backretrieval's language_codes, re-exported by globetrotter.argtypes) outside
    data_prep, which keeps its own (it skips empty items; both normalise the codes). An empty item (``en,,de``, ``en,``) was dropped in
    silence, where a list of numbers (``--ks 1,,5``) refuses it."""
    found = set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--languages")
        if action is not None and action.type is not None and not label.startswith("data "):
            found.add(label)
            assert action.type.__module__ == "backretrieval.cli.common", label
            for bad, message in (("en,de,en", "en given twice"), (",", "expected comma-separated language codes"),
                                 ("en,,de", "got 'en,,de'"), ("en,", "got 'en,'")):
                with pytest.raises(argparse.ArgumentTypeError, match=message):
                    action.type(bad)
    assert {"eval.py sentence", "eval.py select", "zeroshot retrieval", "backretrieval eval",
            "experiments/zeroshot_table.py"} <= found


# (program, sub-command path, option) of the options that take one language code
ONE_LANGUAGE = [("eval.py", "translate", "--to"), ("eval.py", "translate", "--from"),
                ("eval.py", "translate", "--corpus-language"), ("eval.py", "translate-word", "--to"),
                ("eval.py", "translate-word", "--from"), ("eval.py", "generate", "--target")]


def test_every_language_code_is_read_as_the_converters_write_a_split_codes():
    """A split holds only the converters' codes (``data_prep``'s ``normalize_language``: ``EN`` -> ``en``), so
    ``--languages EN,de`` was refused as naming a language the split lacks, and ``en,EN`` read as two languages. A
    code the converters refuse (``xx``) is kept as given: the command refuses it as a language the data lacks."""
    found = set()
    for label, parser in PARSERS:
        action = parser._option_string_actions.get("--languages")
        if action is not None and action.type is not None and not label.startswith("data "):
            found.add(label)
            assert action.type("EN, de_de,zh-hans") == ["en", "de-DE", "zh-Hans"], label
            assert action.type("en,xx") == ["en", "xx"], label
            with pytest.raises(argparse.ArgumentTypeError, match="en given twice in 'en,EN'"):
                action.type("en,EN")
    assert {"eval.py sentence", "eval.py select", "zeroshot retrieval", "zeroshot tag-eval", "backretrieval eval",
            "experiments/oracle_ranking.py", "experiments/sentence_protocol.py"} <= found
    for program, path, flag in ONE_LANGUAGE:
        action = command_parser(program, path)._option_string_actions[flag]
        assert action.type("EN_us") == "en-US" and action.type("xx") == "xx", f"{program} {path} {flag}"
