"""The commands of README.md, docs/*.md and every ``--help`` text (its backquoted and whole-line examples) against
the real command-line parsers, so docs, help and CLI cannot drift.

Every command line of a fenced ```bash block (``\\`` continuations joined, ``# comments`` dropped, ``&&`` / ``;`` /
``|`` chains split), and every inline code span of a table row that holds a whole ``.venv/bin/...`` command (the
benchmark table), that runs one of the project's programs is checked in-process against the parser that program
builds (``build_parser()``; the bench scripts' parser is captured at ``parse_args``):

- its sub-command exists, and every ``--flag`` it uses is an option of that (sub-)parser, spelled out in full;
- for ``train.py`` (and every tool that takes training-config overrides) each ``key=value`` override names a real
  config key (``globetrotter.config.load_train_config`` with the overrides, the config file from ``--config``);
  the zero-shot adapter's and the synthetic world's ``KEY=VALUE`` overrides likewise name fields of their configs.

Placeholder words (RUN, SPLIT, DIR, ...) are fine: in a command only sub-commands, flags and keys are checked, never the values.

A default the docs state beside an option or a config key ("`--k` (50)", "`val.select_alpha` (0.05)") is checked
against the parsers' defaults (or, for one resolved later, the default their help states) and the config dataclasses.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.util
import re
import shlex
import sys
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Sub-commands whose options are being redesigned (none now); still checked, a failure names them.
EXPECTED_TO_CHANGE: set[tuple[str, str]] = set()

CONSOLE_SCRIPTS = {
    "globetrotter-data": "data", "globetrotter-train": "train.py", "globetrotter-eval": "eval.py",
    "globetrotter-zeroshot": "zeroshot", "backretrieval": "backretrieval",
}
CHAIN = {"&&", "||", ";", "|", "&"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class Command:
    """One invocation of a project program found in the docs."""

    where: str  # file:line
    program: str  # train.py | eval.py | data | zeroshot | backretrieval | bench/X.py | experiments/X.py
    args: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.where}: {self.program} {' '.join(self.args)}"


# ----------------------------------------------------------------------------- extraction
def bash_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, body) of every fenced ```bash block."""
    blocks, start, body = [], None, []
    for number, line in enumerate(text.splitlines(), start=1):
        if start is None:
            if line.strip().startswith("```bash"):
                start, body = number + 1, []
        elif line.strip().startswith("```"):
            blocks.append((start, "\n".join(body)))
            start = None
        else:
            body.append(line)
    return blocks


def strip_comment(line: str) -> str:
    """The line without its shell comment: a ``#`` outside quotes at the start of a word."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def command_lines(start: int, body: str) -> list[tuple[int, str]]:
    """(line number, logical line) of a block: ``\\`` continuations joined, comments dropped, blank lines skipped."""
    out, pending, first = [], "", None
    for offset, raw in enumerate(body.splitlines()):
        line = strip_comment(raw).rstrip()
        if first is None:
            first = start + offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            out.append((first, pending.strip()))
        pending, first = "", None
    if pending.strip():
        out.append((first, pending.strip()))
    return out


def tokens_of(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = ""
    return list(lex)


def simple_commands(tokens: list[str]) -> list[list[str]]:
    """Split a token list at ``&&``, ``||``, ``;``, ``|`` and ``&``."""
    out, current = [], []
    for tok in tokens:
        if tok in CHAIN:
            if current:
                out.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        out.append(current)
    return out


def as_command(where: str, tokens: list[str]) -> Command | None:
    """The project program a simple command runs, with its arguments; None for anything else (pip, cd, ...)."""
    i = 0
    while i < len(tokens) and ENV_ASSIGNMENT.match(tokens[i]):
        i += 1
    while i < len(tokens) and Path(tokens[i]).name in ("nice", "timeout"):  # nice -n 10 CMD, timeout 60 CMD
        i += 1
        while i < len(tokens) and (tokens[i].startswith("-") or tokens[i].lstrip("-").isdigit()):
            i += 1
    if i >= len(tokens):
        return None
    name, rest = Path(tokens[i]).name, tokens[i + 1:]
    if name in CONSOLE_SCRIPTS:
        return Command(where, CONSOLE_SCRIPTS[name], rest)
    script = None
    if re.fullmatch(r"python[0-9.]*", name):
        if rest and not rest[0].startswith("-"):
            script, rest = rest[0], rest[1:]
    elif name in ("accelerate", "accelerate-launch"):
        for j, tok in enumerate(rest):
            if tok.endswith(".py"):
                script, rest = tok, rest[j + 1:]
                break
    if script is None:
        return None
    script = script.removeprefix("./")
    if script in ("train.py", "eval.py") or re.fullmatch(r"(bench|experiments)/[\w-]+\.py", script):
        return Command(where, script, rest)
    return None


def inline_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of the inline code spans of table rows that hold a whole command line, such as the
    benchmark table's `` `.venv/bin/python bench/bench_synth.py` `` (prose may name a program without arguments)."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and line.lstrip().startswith("|"):
            out += [(number, span) for span in re.findall(r"`((?:[A-Z_]+=\S+ )*\.venv/bin/[^`]+)`", line)]
    return out


def doc_commands() -> list[Command]:
    found = []
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        lines = [line for start, body in bash_blocks(text) for line in command_lines(start, body)]
        for number, line in sorted(lines + inline_commands(text)):
            for tokens in simple_commands(tokens_of(line)):
                command = as_command(f"{path.relative_to(ROOT)}:{number}", tokens)
                if command is not None:
                    found.append(command)
    return found


# ----------------------------------------------------------------------------- parsers
class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


def scripts(folder: str) -> list[str]:
    """The scripts of ``bench/`` or ``experiments/`` (paths from the repository root): each file with a ``__main__``
    block; a module beside them that a script imports (``experiments/protocol_table.py``) has none and no parser."""
    return [str(path.relative_to(ROOT)) for path in sorted((ROOT / folder).glob("*.py"))
            if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")]


def _script_parser(relative: str) -> argparse.ArgumentParser:
    """The parser of a bench/ or experiments/ script: its ``build_parser()``, else captured where ``main``
    calls ``parse_args`` (nothing after that line runs)."""
    path = ROOT / relative
    assert path.is_file(), f"{relative}: no such script"
    spec = importlib.util.spec_from_file_location(f"_docs_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    if hasattr(module, "build_parser"):
        return module.build_parser()

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture):
        try:
            module.main()
        except _Captured as captured:
            return captured.parser
    raise AssertionError(f"{relative}: main() never parsed its arguments")


def console_script_module(script: str) -> str:
    """The module of a console script of pyproject.toml's ``[project.scripts]`` (``pkg.mod:main`` -> ``pkg.mod``)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    return scripts[script].split(":")[0]


@functools.lru_cache(maxsize=None)
def parser_for(program: str) -> argparse.ArgumentParser:
    if program == "train.py":
        from globetrotter.training.cli import build_parser
    elif program == "eval.py":
        from globetrotter.evaluation.cli import build_parser
    elif program == "data":  # the module of the console script globetrotter-data, as pyproject.toml names it
        build_parser = importlib.import_module(console_script_module("globetrotter-data")).build_parser
    elif program == "zeroshot":
        from globetrotter.zeroshot.cli import build_parser
    elif program == "backretrieval":
        from backretrieval.cli import build_parser
    else:
        return _script_parser(program)
    return build_parser()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def _takes(action: argparse.Action) -> int | str:
    """How many values follow the option: a count, or '?' / '*' (up to the next option)."""
    nargs = action.nargs
    if nargs is None:
        return 1
    if isinstance(nargs, int):
        return nargs
    if nargs == "?":
        return "?"
    return "*"  # '*', '+', REMAINDER


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-[0-9.e+-]+", token)


def read_arguments(parser: argparse.ArgumentParser, args: list[str]) -> tuple[list[str], list[str], dict]:
    """Walk ``args`` as ``parser`` would: (unknown options, positionals, {option dest: values})."""
    unknown, positionals, values = [], [], {}
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("[") and len(tok) > 1:  # optional parts written as [--flag VALUE]
            tok = tok[1:]
        if tok.endswith("]") and "[" not in tok and len(tok) > 1:
            tok = tok[:-1]
        i += 1
        if tok == "--":
            positionals += args[i:]
            break
        if not _is_option(tok):
            positionals.append(tok)
            continue
        flag, eq, inline = tok.partition("=")
        action = parser._option_string_actions.get(flag)
        if action is None:
            unknown.append(flag)
            continue
        taken = [inline] if eq else []
        wanted = 0 if eq else _takes(action)
        if isinstance(wanted, int):
            taken += args[i:i + wanted]
            i += wanted
        else:
            while i < len(args) and not _is_option(args[i]):
                taken.append(args[i])
                i += 1
                if wanted == "?":
                    break
        values[action.dest] = taken
    return unknown, positionals, values


# ----------------------------------------------------------------------------- config keys
def known_key(cls: type, parts: list[str]) -> bool:
    """Whether ``a.b.c`` names a field of the dataclass tree ``cls`` (any key under a dict field)."""
    from globetrotter.config_io import key_of

    hints = typing.get_type_hints(cls)
    fields = {key_of(f): f for f in dataclasses.fields(cls) if f.init}
    if parts[0] not in fields:
        return False
    if len(parts) == 1:
        return True
    tp = hints[fields[parts[0]].name]
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for option in options:
        if dataclasses.is_dataclass(option):
            return known_key(option, parts[1:])
        if option is dict or typing.get_origin(option) is dict or option is typing.Any:
            return True
    return False


def _override_keys(overrides: list[str]) -> list[str]:
    return [o.split("=", 1)[0].strip().lstrip("-") for o in overrides]


def check_train_overrides(config: str | None, overrides: list[str]) -> list[str]:
    """Problems with ``train.py``-style overrides: the config file and every key must exist."""
    from data_prep.errors import UserError
    from globetrotter.config import TrainConfig, load_train_config

    problems = []
    if config is not None and not (ROOT / config).is_file() and config.startswith("configs/"):
        return [f"--config {config}: no such file"]
    path = ROOT / config if config is not None and (ROOT / config).is_file() else None
    try:
        load_train_config(path, overrides)
    except UserError as err:
        problems = [f"override {key!r}: no such config key" for key in _override_keys(overrides)
                    if not known_key(TrainConfig, key.split("."))]
        if not problems and "unknown key" in str(err):
            problems = [str(err)]
    return problems


def check_dataclass_overrides(cls: type, overrides: list[str]) -> list[str]:
    return [f"override {key!r}: no such {cls.__name__} key" for key in _override_keys(overrides)
            if not known_key(cls, key.split("."))]


# ----------------------------------------------------------------------------- the check
class _Stop(Exception):
    """The real parser met a value it refuses (a placeholder such as N for a number): no verdict on the order."""


def unparsed_by(parser: argparse.ArgumentParser, args: list[str], program: str) -> list[str]:
    """The arguments the real ``parser`` leaves unrecognised (``parse_known_args``' extras, sub-parsers included, less
    the overrides ``globetrotter-data`` folds in); ``[]`` when it stops first on a value it refuses or a missing
    requirement (placeholders, elided parts)."""
    from data_prep.cli import fold_overrides

    def stop(*_args, **_kwargs):
        raise _Stop

    with mock.patch.object(argparse.ArgumentParser, "error", stop), \
            mock.patch.object(argparse.ArgumentParser, "exit", stop):
        try:
            parsed, extras = parser.parse_known_args([a for a in args if a != "..."])
        except (_Stop, SystemExit):
            return []
    if program == "data":
        extras = fold_overrides(parsed, extras)
    return [a for a in extras if not (a.startswith("[") or a.endswith("]"))]


def problems_with(command: Command) -> list[str]:
    parser = parser_for(command.program)
    args, label = list(command.args), command.program
    if command.program == "eval.py" and args and args[0] in ("tag", "zeroshot"):  # forwarded to the zero-shot CLI
        label = f"eval.py {args[0]} (globetrotter-zeroshot)"
        parser, args = parser_for("zeroshot"), (args if args[0] == "tag" else args[1:])
    top, top_label, top_args = parser, label, list(args)
    sub_name = None
    choices = subcommands(parser)
    while choices is not None:  # nested sub-commands (globetrotter-data features build): each level in turn
        unknown, positionals, _ = read_arguments(parser, args)
        if unknown and not positionals:
            return [f"{label}: unknown option(s) {unknown} before the sub-command"]
        if not positionals:
            return [f"{label}: no sub-command (one of {sorted(choices)})"]
        name = positionals[0]
        if name not in choices:
            return [f"{label}: no sub-command {name!r} (expected one of {sorted(choices)})"]
        parser, args = choices[name], args[args.index(name) + 1:]
        label = f"{label} {name}"
        sub_name = name if sub_name is None else f"{sub_name} {name}"
        choices = subcommands(parser)
    unknown, positionals, values = read_arguments(parser, args)
    problems = [f"{label}: no option {flag} (options: {sorted(o for o in parser._option_string_actions if o.startswith('--'))})"
                for flag in unknown]
    overrides = [p for p in positionals if "=" in p]
    config = (values.get("config") or [parser.get_default("config")])[0]
    train_config_tools = {("train.py", None), ("data", "features build"), ("bench/bench_train.py", None),
                          ("bench/bench_feature_cache.py", None)}
    if (command.program, sub_name) in train_config_tools:
        if command.program == "train.py":
            bad = [p for p in positionals if "=" not in p and p != "..."]
            problems += [f"{label}: {p!r} is not a key=value override" for p in bad]
            adapting = "adapt.from" in _override_keys(overrides)
            if config is None and not adapting:
                config = "configs/quickstart.yaml"
        problems += [f"{label}: {p}" for p in check_train_overrides(config, overrides)]
    elif (command.program, sub_name) == ("zeroshot", "train") or label.endswith("zeroshot) train"):
        from globetrotter.zeroshot.config import ZeroShotConfig

        problems += [f"{label}: {p}" for p in check_dataclass_overrides(ZeroShotConfig, overrides)]
    elif (command.program, sub_name) == ("data", "synth"):
        from data_prep.synth.config import SynthConfig

        problems += [f"{label}: {p}" for p in check_dataclass_overrides(SynthConfig, overrides)]
    if not problems:  # what the real parser leaves over: an override or option it does not take where it stands
        whole = unparsed_by(top, top_args, command.program)
        problems = [f"{top_label}: the parser does not take {whole} where they stand (unrecognized arguments)"] if whole else []
    return problems


COMMANDS = doc_commands()

HELP_PROGRAMS = ("train.py", "eval.py", "data", "zeroshot", "backretrieval")
# a command as --help writes one: a backquoted span, or a line of its own (continuations joined) that starts with a
# program and goes on with a sub-command, an option or an override
HELP_PROGRAM = r"(?:(?:\.venv/bin/)?python[0-9.]* |\.venv/bin/)?(?:train\.py|eval\.py|globetrotter-[a-z]+|backretrieval)"
HELP_LINE = re.compile(HELP_PROGRAM + r"(?: [a-z0-9-]+)? (?:-|\S+=)\S*.*")
HELP_SPAN = re.compile(HELP_PROGRAM + r"(?: .*)?")


def _help_texts(program: str) -> list[tuple[str, str]]:
    """(where, text) of every description, epilog and option help of a program's parser and its sub-parsers."""
    out, todo = [], [(program, parser_for(program))]
    while todo:
        name, parser = todo.pop()
        out += [(f"{name} --help", text) for text in (parser.description, parser.epilog) if text]
        out += [(f"{name} --help ({'/'.join(a.option_strings) or a.dest})", a.help) for a in parser._actions
                if isinstance(a.help, str) and a.help != argparse.SUPPRESS]
        todo += [(f"{name} {sub}", child) for sub, child in (subcommands(parser) or {}).items()]
    return out


def help_commands() -> list[Command]:
    """The example commands of every ``--help`` (backquoted spans, and lines that run one of the programs); a
    ``train.py``/``eval.py`` example without an interpreter is read as ``python train.py ...``."""
    found = []
    for program in HELP_PROGRAMS:
        for where, text in _help_texts(program):
            text = re.sub(r"\s*\\\n\s*", " ", text)
            examples = [s for s in re.findall(r"`([^`]+)`", text) if HELP_SPAN.fullmatch(s.strip())]
            lines = [re.sub(r"^[Ee]xample: ", "", line.strip()) for line in text.splitlines()]
            examples += [line for line in lines if HELP_LINE.fullmatch(line)]
            for example in examples:
                example = re.sub(r"^(train|eval)\.py", r"python \1.py", example.strip())
                for tokens in simple_commands(tokens_of(example)):
                    command = as_command(where, tokens)
                    if command is not None:
                        found.append(command)
    return found


HELP_COMMANDS = help_commands()


def test_the_docs_hold_commands_of_every_program():
    programs = {c.program for c in COMMANDS}
    for program in ("train.py", "eval.py", "data", "zeroshot", "backretrieval"):
        assert program in programs, f"no {program} command found in {[str(p.relative_to(ROOT)) for p in DOC_FILES]}"
    assert any(p.startswith("bench/") for p in programs) and any(p.startswith("experiments/") for p in programs)


def test_readme_main_job_is_checked():
    readme = [c for c in COMMANDS if c.where.startswith("README.md")]
    assert readme and readme[0].program == "train.py" and readme[0].args == [], readme[:1]


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where}:{c.program}" for c in COMMANDS])
def test_doc_command_matches_its_parser(command):
    problems = problems_with(command)
    key = (command.program, command.args[0] if command.args else None)
    note = (" (this sub-command is being redesigned: the docs name its new options before they land)"
            if key in EXPECTED_TO_CHANGE else "")
    assert not problems, f"{command}\n  " + "\n  ".join(problems) + note


def test_help_texts_hold_example_commands():
    assert {c.program for c in HELP_COMMANDS} >= {"train.py", "eval.py", "data"}, HELP_COMMANDS


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=[f"{c.where}:{' '.join(c.args[:2])}" for c in HELP_COMMANDS])
def test_help_example_matches_its_parser(command):
    problems = problems_with(command)
    assert not problems, f"{command}\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------------------- the checker itself
def test_extraction_joins_continuations_drops_comments_and_splits_chains(tmp_path):
    body = ("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python train.py\n"
            "OMP_NUM_THREADS=1 .venv/bin/python train.py --config configs/quickstart.yaml \\\n"
            "  steps=10 'data.train_languages=[en,de]'   # a comment, with an apostrophe's quote\n"
            "\n"
            ".venv/bin/accelerate launch --multi_gpu --num_processes 2 train.py seed=1\n"
            "nice -n 10 .venv/bin/python bench/bench_eval.py --skip word\n"
            ".venv/bin/globetrotter-data synth --out data/synth  # what train.py makes\n")
    found = []
    for number, line in command_lines(10, body):
        for tokens in simple_commands(tokens_of(line)):
            command = as_command(f"x:{number}", tokens)
            if command:
                found.append(command)
    assert [(c.where, c.program, c.args) for c in found] == [
        ("x:10", "train.py", []),
        ("x:11", "train.py", ["--config", "configs/quickstart.yaml", "steps=10", "data.train_languages=[en,de]"]),
        ("x:14", "train.py", ["seed=1"]),
        ("x:15", "bench/bench_eval.py", ["--skip", "word"]),
        ("x:16", "data", ["synth", "--out", "data/synth"]),
    ]


@pytest.mark.parametrize("program, args, expected", [
    ("train.py", ["--config", "configs/quickstart.yaml", "steps=5", "optim.lr=1e-3"], []),
    ("train.py", ["seed=S", "run_name=RUN", "model.token_ngrams=null"], []),  # placeholder values are fine
    ("train.py", ["optim.lrr=1e-3"], ["optim.lrr"]),
    ("train.py", ["--config", "configs/nope.yaml"], ["no such file"]),
    ("train.py", ["--resum", "--config", "configs/quickstart.yaml"], ["no option --resum"]),
    ("eval.py", ["nope", "--model", "RUN"], ["no sub-command 'nope'"]),
    ("eval.py", ["word", "--model", "RUN", "--dictionnary", "D"], ["no option --dictionnary"]),
    ("eval.py", ["tag", "--adapter", "DIR", "--images", "x.jpg", "--vocab", "de=t.txt"], []),
    ("data", ["synth", "--out", "D", "p_mention_colour=0.5", "p_mention_colr=1"], ["p_mention_colr"]),
    ("data", ["features", "build", "SPLIT", "--config", "configs/flickr8k.yaml", "data.feature_views=2"], []),
    ("eval.py", ["sentence", "--model", "RUN", "--split", "S", "stray"], ["does not take ['stray']"]),
    ("zeroshot", ["train", "loss.rho=1", "--train", "S", "--out", "D", "optim.epochs=2"], ["does not take"]),
    ("data", ["features", "build", "SPLIT", "data.feature_viewz=2"], ["data.feature_viewz"]),
    ("data", ["features", "SPLIT", "--config", "configs/flickr8k.yaml"], ["no sub-command 'SPLIT'"]),
    ("data", ["features", "import", "SPLIT", "--embeddings", "E.npy", "--ids", "I.txt", "--name", "N"], []),
    ("data", ["features", "import", "SPLIT", "--embedding", "E.npy"], ["no option --embedding"]),
    ("zeroshot", ["train", "--train", "S", "--out", "D", "loss.rho=1", "loss.rhoo=1"], ["loss.rhoo"]),
    ("backretrieval", ["score", "--src-text", "a.npy", "--retrieval", "csls", "--bootstrapp", "5"], ["--bootstrapp"]),
    ("experiments/study_bkr_vs_corr.py", ["--data", "D", "--families", "F", "--out", "O"], []),
    ("bench/bench_synth.py", ["--images", "100", "--image-sizes", "32"], ["--image-sizes"]),
])
def test_checker_accepts_real_commands_and_names_what_is_wrong(program, args, expected):
    problems = problems_with(Command("unit", program, args))
    if not expected:
        assert problems == []
    else:
        assert len(problems) == len(expected) and all(e in p for e, p in zip(expected, problems)), problems


# ----------------------------------------------------------------------------- stated defaults
# "`--k` (50)", "`--csls-k` (default 10)", "`--layers` 2,", "`--epochs 3` by default", "`val.select_alpha` (0.05)":
# a default the docs state beside an option or a config key, a number ended by ")", "," or ";"
STATED_OPTION = re.compile(r"`(--[a-z0-9-]+)`(?:,\s*|\s+\(\s*|\s+)(?:default:?\s+)?(\d[\d.,]*\d|\d)(?=[),;])"
                           r"|`(--[a-z0-9-]+) (\d[\d.,]*)` (?:by default|\(the default)")
STATED_KEY = re.compile(r"`([a-z_0-9]+(?:\.[a-z_0-9]+)+)`(?:-fold)?(?:,\s*|\s+\(\s*)(?:default:?\s+)?(\d[\d.]*)(?=[),;])")
HELP_DEFAULT = re.compile(r"default:?\s+(\d[\d.,]*\d|\d)")


def stated_defaults(pattern: re.Pattern) -> list[tuple[str, str, str]]:
    """(file:line, name, value) of every default ``pattern`` finds in README.md and docs/*.md (results.md's measured
    tables left out: a figure there names no default)."""
    found = []
    for path in DOC_FILES:
        if path.name == "results.md":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for match in pattern.finditer(line):
                name, value = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
                found.append((f"{path.relative_to(ROOT)}:{number}", name, value))
    return found


def _as_numbers(value: object) -> tuple[float, ...] | None:
    """``3``, ``[1, 5, 10]`` or ``"1,5,10"`` as numbers; None for anything else."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    try:
        return tuple(float(item) for item in items if not isinstance(item, bool))
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def option_defaults() -> dict[str, set[tuple[float, ...]]]:
    """Every numeric default of every ``--option`` of every program: the parser's own, or, where the parser's is None
    and resolved later, the one its help states ("(default: 128)")."""
    out: dict[str, set[tuple[float, ...]]] = {}
    programs = [*HELP_PROGRAMS, *scripts("bench"), *scripts("experiments")]
    for program in programs:
        try:
            todo = [parser_for(program)]
        except AssertionError:  # a script whose main() never parses arguments
            continue
        while todo:
            parser = todo.pop()
            todo += list((subcommands(parser) or {}).values())
            for action in parser._actions:
                values = [action.default]
                if isinstance(action.help, str):
                    values += HELP_DEFAULT.findall(action.help)
                for flag in action.option_strings:
                    out.setdefault(flag, set()).update(n for n in map(_as_numbers, values) if n)
    return out


def config_default(key: str) -> object:
    """The dataclass default of a dotted training or zero-shot config key; KeyError when neither has it."""
    from globetrotter.config import TrainConfig
    from globetrotter.config_io import key_of
    from globetrotter.zeroshot.config import ZeroShotConfig

    for cls in (TrainConfig, ZeroShotConfig):
        obj, ok = cls(), True
        for part in key.split("."):
            fields = {key_of(f): f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else {}
            if part not in fields:
                ok = False
                break
            obj = getattr(obj, fields[part])
        if ok:
            return obj
    raise KeyError(key)


STATED_OPTIONS = stated_defaults(STATED_OPTION)
STATED_KEYS = stated_defaults(STATED_KEY)


def test_the_docs_state_defaults():
    assert len(STATED_OPTIONS) >= 10 and len(STATED_KEYS) >= 5, (STATED_OPTIONS, STATED_KEYS)


@pytest.mark.parametrize("where, flag, value", STATED_OPTIONS, ids=[f"{w}:{f}" for w, f, _ in STATED_OPTIONS])
def test_stated_option_default_is_the_code_default(where, flag, value):
    defaults = option_defaults()
    assert flag in defaults, f"{where}: {flag} is no option of any program"
    assert _as_numbers(value) in defaults[flag], \
        f"{where}: the docs give {flag} the default {value}; the parsers' (or their help's): {sorted(defaults[flag])}"


@pytest.mark.parametrize("where, key, value", STATED_KEYS, ids=[f"{w}:{k}" for w, k, _ in STATED_KEYS])
def test_stated_config_default_is_the_dataclass_default(where, key, value):
    try:
        default = config_default(key)
    except KeyError:  # a renamed key, or a name in backquotes that the pattern should not read as one
        pytest.fail(f"{where}: {key} is stated with a default but is no training or zero-shot config key")
    assert _as_numbers(value) == _as_numbers(default), f"{where}: the docs give {key} the default {value}; the code: {default!r}"
