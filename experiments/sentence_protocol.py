"""Sentence translation under the project's protocol, for a table of models and seeds: every choice on val, test once.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/sentence_protocol.py --test outputs/flickr8k/test \\
        --val outputs/flickr8k/val --languages en,de,fr,cs --languages en,zh --n-groups 600 \\
        --row "TF-IDF=tfidf" --row "text-only=runs/flickr8k-text-only-s0,runs/flickr8k-text-only-s1" \\
        --row "full=runs/flickr8k-s0,runs/flickr8k-s1" --row "supervised=runs/flickr8k-supervised-s0" \\
        --ratio full/supervised --out eval_out/flickr8k

For every model of every row (``--row LABEL=MODEL[,MODEL...]``: run folders, one per seed, or a baseline spec such as
``tfidf``) and every language set (``--languages``, repeatable), it

1. chooses on val, with no parallel text (``eval.py select``): the best ranking of all (head × MaxSim weight ×
   CSLS), and the best cosine ranking (the head only);
2. scores the test split once with each choice (``eval.py sentence --ranking``): the columns ``cosine`` and
   ``val-chosen``;
3. with ``--oracle-val SPLIT`` (a parallel val split), also the column ``oracle``: the ranking that scores best by
   sentence translation on that split (``experiments/oracle_ranking.py``). It reads parallel text, so it is not a
   method choice; it measures what choosing without parallel text costs each model. Test is still scored once.

Every ranking of every row and column takes its statistics from one reference pool (``--reference``; default: the
train split beside ``--test``): each choice is made with it, and test is scored with the choice's own. A record
already written in ``--out`` for the same model, split and setting is reused, so an interrupted table resumes and a
row can gain seeds; one written for anything else is refused. Every input (rows, runs, splits, languages, ratios,
the records already in ``--out``) is checked before the first row is scored. Writes ``command.json`` (the command,
its options, each model's checkpoint and training seed, the intervals' settings), ``table.md`` (per row: each seed's
figures, the chosen rankings, and the ``--ratio`` rows: the first row over the second, seed by seed, each also with
its 95% interval by a paired bootstrap over the test groups) and prints it, and ``table.png``: the same figures as
bars, one panel per language set (a bar: the mean over seeds; a dot: each seed).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # the project, and the modules beside this file

from backretrieval.errors import cli_option_names  # noqa: E402
from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import language_codes, output_folder, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402

from protocol_table import BASE_COLUMNS, plot_table, table  # noqa: E402

COMMAND_RECORD = "command.json"


def parse_rows(items: list[str]) -> list[tuple[str, list[str]]]:
    """``LABEL=MODEL[,MODEL...]`` items, in order; a one-line :class:`UserError` for an item without ``=``, without a
    model (``full=,``), a label given twice (the table keys its rows by label) or a model given twice in a row."""
    rows, seen = [], set()
    for item in items:
        label, sep, models = item.partition("=")
        listed = [m for m in models.split(",") if m]
        if not sep or not label or not listed:
            raise UserError(f"--row {item!r}: expected LABEL=MODEL[,MODEL...] with at least one model")
        if label in seen:
            raise UserError(f"--row {item!r}: the label {label!r} names another --row already; give each row its own")
        twice = sorted({m for m in listed if listed.count(m) > 1})
        if twice:
            raise UserError(f"--row {item!r}: {twice[0]} is listed twice; list each seed's run once")
        seen.add(label)
        rows.append((label, listed))
    return rows


def check_ratios(ratios: list[str], rows: list[tuple[str, list[str]]]) -> None:
    """A one-line :class:`UserError` for a ``--ratio`` that is not ``TOP/BOTTOM`` of two row labels, or whose rows
    cannot be paired seed by seed (BOTTOM holds one model, which divides every seed, or as many as TOP)."""
    sizes = {label: len(models) for label, models in rows}
    for ratio in ratios:
        if ratio.count("/") != 1 or not set(ratio.split("/")) <= set(sizes):
            raise UserError(f"--ratio {ratio!r}: expected TOP/BOTTOM, two labels of --row ({sorted(sizes)})")
        top, bottom = ratio.split("/")
        if sizes[bottom] not in (1, sizes[top]):
            raise UserError(f"--ratio {ratio!r}: {top} has {sizes[top]} models and {bottom} {sizes[bottom]}; expected "
                            f"{bottom} to hold one model or as many as {top} (the ratio pairs them seed by seed)")


def check_model(label: str, model: str, has_val: bool) -> None:
    """A one-line :class:`UserError`, before anything is scored, when ``model`` of row ``label`` is no baseline and
    no run or checkpoint folder with a checkpoint, or a baseline without ``--val`` (it has no run config)."""
    from globetrotter.evaluation.models import is_baseline
    from globetrotter.evaluation.pivot_ridge import is_pivot_ridge_spec
    from globetrotter.training.checkpoint import resolve

    try:
        if is_baseline(model):
            if not has_val:
                raise UserError("a baseline has no run config to take the val split from; give --val SPLIT")
            if is_pivot_ridge_spec(model):
                from data_prep.shards import read_manifest

                read_manifest(model.split(":", 1)[1])
        elif not Path(model).is_dir():
            raise UserError(f"{model}: no such run folder (expected a run folder, a checkpoint folder or tfidf)")
        else:
            resolve(model)
    except UserError as err:
        raise UserError(f"--row {label}: {err}") from None


def check_languages(language_sets: list[str], splits: dict[str, str]) -> None:
    """A one-line :class:`UserError` for a ``--languages`` set with an empty code or fewer than two codes, or a code
    that one of ``splits`` (option -> split folder) has no caption in: a set the test scoring, a choice or the
    reference statistics would refuse only once earlier rows were scored."""
    from data_prep.shards import read_manifest

    have = {}
    for flag, split in splits.items():
        try:
            have[flag] = sorted(read_manifest(split)["languages"])
        except UserError as err:
            raise UserError(f"{flag}: {err}") from None
    for ls in language_sets:
        codes = ls.split(",")
        if "" in codes or len(set(codes)) < 2:
            raise UserError(f"--languages {ls!r}: expected two or more comma-separated language codes")
        for flag, split in splits.items():
            missing = [code for code in codes if code not in have[flag]]
            if missing:
                raise UserError(f"--languages {ls}: {flag} {split} has no caption in {','.join(missing)} "
                                f"(it has {','.join(have[flag])})")


def check_n_groups(n_groups: int, test: str, language_sets: list[str]) -> None:
    """A one-line :class:`UserError` when ``--test`` has fewer than ``n_groups`` groups in every language of a set:
    every group would be scored, fewer than the table and ``command.json`` would say."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation.sentence import parallel_set

    metas = read_captions(test)
    for ls in language_sets:
        have = len(parallel_set(metas, ls.split(","), n_groups=None, where=test).group_ids)
        if have < n_groups:
            raise UserError(f"--n-groups {n_groups}: --test {test} has {have} groups in every one of {ls}; give "
                            f"at most {have}")


def slug(label: str, model: str, langs: str) -> str:
    """A record's name: the row, the model and the languages (a row that gains a seed keeps its other records)."""
    from globetrotter.evaluation.models import model_name

    return "-".join(("".join(c if c.isalnum() else "-" for c in label.lower()).strip("-"), model_name(model),
                     langs.replace(",", "-")))


def reusable(path: Path, model: str, split: str | None, languages: str, **config: object) -> dict | None:
    """The record at ``path`` when it holds this measurement already; None when absent; a one-line
    :class:`UserError` when it was written for another model or other weights (the checkpoint the run loads now: a
    run trained on or resumed since), split (``None``: any), languages or setting (``config``), which reusing it
    would put in the table unseen. The checkpoint's weights are compared by their sha256: a run that saved another
    ``best/`` keeps the checkpoint's path."""
    if not path.is_file():
        return None
    from globetrotter.evaluation.models import current_checkpoint, fingerprint, model_info

    record = json.loads(path.read_text(encoding="utf-8"))
    want = {"model": model_info(model)["path"], **fingerprint(current_checkpoint(model)),
            "languages": sorted(languages.split(",")), **config}
    have = {"model": record["model"]["path"], "checkpoint": record["model"].get("checkpoint"),
            "weights_sha256": record["model"].get("weights_sha256"),
            "languages": sorted(record["languages"]), **{key: record["config"].get(key) for key in config}}
    if split is not None:
        want["split"], have["split"] = str(Path(split).resolve()), record["dataset"]["path"]
    wrong = [f"{key} {have[key]!r}, not {want[key]!r}" for key in want if have[key] != want[key]]
    if wrong:
        raise UserError(f"{path} was written for {'; '.join(wrong)}: delete it or use another --out")
    return record


def run(argv: list[str], log: Path) -> None:
    """``eval.py ARGV`` in this process (one interpreter for the whole table), its output appended to ``log``."""
    from globetrotter.evaluation.cli import main as eval_main

    with open(log, "a", encoding="utf-8") as fh, redirect_stdout(fh), redirect_stderr(fh):
        try:
            eval_main(argv)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    if code:
        lines = reversed(log.read_text(encoding="utf-8").splitlines())
        reason = next((line.strip().split("error: ", 1)[1] for line in lines
                       if line.startswith("error: ") or ": error: " in line), f"exit {code}")
        raise UserError(f"eval.py {' '.join(argv[:3])} ... failed ({reason}); see {log}")


def choose_by_oracle(model: str, name: str, langs: str, args: argparse.Namespace, log: Path) -> None:
    """The oracle's choice on ``--oracle-val`` (``experiments/oracle_ranking.py``), its output appended to ``log``;
    statistics from the reference the test scoring uses."""
    from oracle_ranking import oracle_choice

    with open(log, "a", encoding="utf-8") as fh:
        try:
            oracle_choice(model, args.oracle_val, reference(args), args.out, languages=langs.split(","), name=name,
                          test=args.test, log=lambda line: print(line, file=fh, flush=True))
        except UserError as err:
            raise UserError(f"--oracle-val: {err}") from None


def measure(model: str, name: str, langs: str, args: argparse.Namespace, score: bool = True) -> dict:
    """The two choices on val and the two test figures of one model (records reused when present). ``score=False``:
    only check the records already in ``--out`` (a one-line error for one written for anything else), scoring
    nothing, so that a stale record is refused before any row is scored."""
    out, log = Path(args.out), Path(args.out) / f"{name}.log"
    val = ["--val", args.val] if args.val else []
    figures = {}
    for column in columns(args):
        choice = out / f"select-{name}-{column}.json"
        chosen_on = args.oracle_val if column == "oracle" else args.val
        selected = reusable(choice, model, chosen_on, langs, reference=reference(args))
        if selected is None and not score:
            continue
        if selected is None:
            if column == "oracle":
                choose_by_oracle(model, f"{name}-{column}", langs, args, log)
            else:
                grid = [] if column == "val-chosen" else ["--maxsim", "0", "--retrieval", "cosine"]
                run(["select", "--model", model, *val, "--reference", reference(args), "--languages", langs, *grid,
                     "--name", f"{name}-{column}", "--out", str(out)], log)
            selected = json.loads(choice.read_text(encoding="utf-8"))
        record = out / f"sentence-{name}-{column}.json"
        chosen = selected["details"]["chosen"]
        result = reusable(record, model, args.test, langs, n_groups=args.n_groups, ranking=chosen,
                          ranking_record=str(choice))
        if result is not None and result["config"].get("reference") not in (None, selected["config"]["reference"]):
            raise UserError(f"{record} was scored with statistics from {result['config']['reference']}, not "
                            f"{selected['config']['reference']} ({choice}'s): delete it or use another --out")
        if not score:
            continue
        if result is None:
            run(["sentence", "--model", model, "--split", args.test, "--languages", langs, "--n-groups",
                 str(args.n_groups), "--ranking", str(choice), "--name", f"{name}-{column}", "--out", str(out)], log)
            result = json.loads(record.read_text(encoding="utf-8"))
        chance = result["metrics"].get("chance")
        figures[column] = (100 * result["metrics"]["sentence_translation"], result["details"]["scoring"]["label"],
                           result["details"].get("per_group"), None if chance is None else 100 * chance)
    return figures


def reference(args: argparse.Namespace) -> str:
    """The split whose captions give every ranking's statistics: ``--reference``, else the train split beside
    ``--test``."""
    from globetrotter.evaluation.reference import default_reference

    return args.reference or str(default_reference(args.test))


def columns(args: argparse.Namespace) -> tuple[str, ...]:
    """The table's columns: ``cosine`` and ``val-chosen``, and ``oracle`` with ``--oracle-val``."""
    return BASE_COLUMNS + (("oracle",) if args.oracle_val else ())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test", required=True, help="parallel test split, scored once per choice")
    parser.add_argument("--val", help="non-parallel val split to choose on (default: each run's config's; the "
                                      "baselines need it)")
    parser.add_argument("--reference", metavar="SPLIT",
                        help="split whose captions give every ranking's statistics, the same for every row and "
                             "column (default: the train split beside --test)")
    parser.add_argument("--languages", type=language_codes, action="append", required=True, metavar="CODES",
                        help="comma-separated codes (repeatable)")
    parser.add_argument("--n-groups", type=positive_int, default=200,
                        help="test groups scored (default %(default)s); more than --test has in every language of a "
                             "--languages set is refused up front")
    parser.add_argument("--row", action="append", required=True, help="LABEL=MODEL[,MODEL...] (repeatable)")
    parser.add_argument("--ratio", action="append", default=[], help="TOP/BOTTOM: a row of ratios, seed by seed")
    parser.add_argument("--oracle-val", metavar="SPLIT",
                        help="a parallel val split: adds the column oracle, each model's ranking chosen by sentence "
                             "translation on it (reads parallel text: a measure of what the val choice costs)")
    parser.add_argument("--out", required=True, type=output_folder,
                        help=f"folder of the records, table.md, table.png and {COMMAND_RECORD} (the command, its "
                             "options and each model's checkpoint and training seed)")
    return parser


def check_inputs(rows: list[tuple[str, list[str]]], args: argparse.Namespace) -> None:
    """Every check that needs no scoring, before any row is scored: a mistake in the last row, or a record in
    ``--out`` written for another setting, would otherwise stop the table after hours of scoring."""
    from oracle_ranking import check_reference_captions, check_reference_tokens, refuse_shared_images

    from globetrotter.evaluation.models import is_baseline
    from globetrotter.evaluation.reference import choice_reference, read_captions_once
    from globetrotter.evaluation.tasks.common import resolve_model
    from globetrotter.evaluation.tasks.select import model_candidates

    check_ratios(args.ratio, rows)
    if args.oracle_val and Path(args.oracle_val).resolve() == Path(args.test).resolve():
        raise UserError(f"--oracle-val {args.oracle_val}: expected a parallel val split, not the test split")
    ref_flag = "--reference" if args.reference else "--reference (default: the train split beside --test)"
    splits = {"--test": args.test, ref_flag: reference(args)}
    splits.update({flag: split for flag, split in (("--val", args.val), ("--oracle-val", args.oracle_val)) if split})
    check_languages(args.languages, splits)
    check_n_groups(args.n_groups, args.test, args.languages)
    if args.val:  # the statistics of a choice come neither from the split it is made on nor from a test split
        choice_reference(args.val, reference(args))
    for flag, split in (("--val", args.val), ("--oracle-val", args.oracle_val)):
        if split:  # a choice made on images of the test split would read test
            refuse_shared_images(split, args.test, flag)
    codes = sorted({code for ls in args.languages for code in ls.split(",")})  # eval.py's --csls-k is no flag here
    pool = read_captions_once(reference(args), codes).pool()
    check_reference_captions(pool, ref_flag)
    named: dict[str, str] = {}
    for label, models in rows:
        for model in models:
            check_model(label, model, args.val is not None)
            for ls in args.languages:
                name = slug(label, model, ls)
                if named.setdefault(name, model) != model:
                    raise UserError(f"--row {label}: {model} and {named[name]} would share the records {name}-*; "
                                    "give them rows of other labels, or run folders whose last two parts differ")
    for label, models in rows:
        for model in models:
            for ls in args.languages:
                measure(model, slug(label, model, ls), ls, args, score=False)
    for label, models in rows:  # the grid's MaxSim needs each run's tokenizer: eval.py select refused it (--maxsim)
        for model in models:
            if not is_baseline(model):
                try:
                    encoder, _ = resolve_model(model)
                    check_reference_tokens(encoder, model_candidates(model, encoder), pool, ref_flag)
                except UserError as err:
                    raise UserError(f"--row {label}: {model}: {err}") from None


def model_entry(model: str) -> dict:
    """A model of the table as ``command.json`` lists it: the spec given, its resolved path, the checkpoint it loads
    and the seed it was trained with (its checkpoint's config.yaml; ``None`` for a baseline)."""
    import yaml

    from globetrotter.evaluation.models import current_checkpoint, model_info

    checkpoint = current_checkpoint(model)
    seed = None
    if checkpoint and (Path(checkpoint) / "config.yaml").is_file():
        seed = (yaml.safe_load((Path(checkpoint) / "config.yaml").read_text(encoding="utf-8")) or {}).get("seed")
    return {"spec": model, "path": model_info(model)["path"], "checkpoint": checkpoint, "training_seed": seed}


def command_record(argv: Sequence[str], rows: list[tuple[str, list[str]]], args: argparse.Namespace) -> dict:
    """What ``command.json`` holds, so a table can be traced and re-run: the command line, every option (``inputs``,
    the reference resolved), each row's models, the settings of the ratios' intervals and the ``versions``."""
    import inspect

    from globetrotter.evaluation.sentence import ratio_interval

    defaults = {k: v.default for k, v in inspect.signature(ratio_interval).parameters.items()
                if v.default is not inspect.Parameter.empty}
    return {"command": shlex.join([".venv/bin/python", "experiments/sentence_protocol.py", *argv]),
            "argv": list(argv), "cwd": str(Path.cwd()), "inputs": {**vars(args), "reference": reference(args)},
            "columns": list(columns(args)),
            "rows": [{"label": label, "models": [model_entry(m) for m in models]} for label, models in rows],
            "ratio_intervals": {"method": "paired bootstrap over the test groups", **defaults}, "versions": versions()}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.languages = [",".join(codes) for codes in args.languages]  # a set as its text: its records' and columns' key
    with cli_option_names():  # the library's refusals name this script's flags (--val X), not val=X
        rows = parse_rows(args.row)
        check_inputs(rows, args)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        record = command_record(argv, rows, args)
        text = json_text(record, indent=2)
        if not (out / COMMAND_RECORD).is_file() or (out / COMMAND_RECORD).read_text(encoding="utf-8") != text:
            (out / COMMAND_RECORD).write_text(text, encoding="utf-8")  # the same command again leaves it as it was
        results = {label: [{ls: measure(m, slug(label, m, ls), ls, args) for ls in args.languages} for m in models]
                   for label, models in rows}
        text = table(rows, results, args.languages, args.ratio, columns(args))
        text += (f"\nCommand ({COMMAND_RECORD}: its options, each model's checkpoint and training seed): "
                 f"`{record['command']}`\n")
        (out / "table.md").write_text(text, encoding="utf-8")
        plot_table(rows, results, args.languages, out / "table.png", columns(args))
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
