"""Does one recipe beat another on val, over its seeds? Paired over the same val queries, with no parallel text.

    cd /path/to/repo && .venv/bin/python experiments/compare_recipes.py \\
        eval_out/paired/select-runs-two-round-s{0,1,2}.json \\
        --against eval_out/paired/select-runs-flickr8k-s{0,1,2}.json --out eval_out/paired/two-round.json

Each argument is an ``eval.py select`` record (its choice's BackRetrieval score on each val query). The records of
one side are the seeds of one recipe; all must have scored the same val queries (the same val split, sample, ``g``
and K: runs of one config whose val sample holds the whole split share them whatever their seed). Printed: each
record's choice and mean, the margin of each seed over the other side's same seed (when both sides list as many
records, in order), and the margin of the recipe's mean over seeds, paired query by query: the comparison that
decides, since the seeds' noise is averaged before the queries are resampled. When ``g`` is one side's own image
encoder and not the other's (the record's ``model_image_encoder``) a note says so: BackRetrieval then leans towards
that side, and two recipes with different image encoders are refereed under a ``g`` neither uses. ``--out`` writes
them as JSON.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backretrieval.errors import cli_option_names  # noqa: E402
from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import non_negative_int, output_file  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402
from globetrotter.evaluation.tasks.choice import read_record  # noqa: E402
from globetrotter.evaluation.tasks.choice_margins import check_against, paired_margin, shared_g_warning  # noqa: E402


def compare(records: list[str], against: list[str], seed: int = 0) -> dict:
    """The comparison of the module docstring, as a JSON-ready dict (``records``/``against``: record files)."""
    sides = [[read_record(path, flag) for path in paths] for flag, paths in (("RECORD", records), ("--against", against))]
    first = None
    for flag, paths, group in zip(("RECORD", "--against"), (records, against), sides):
        for path, rec in zip(paths, group):  # each file checked by name, not as "record 2" of a side
            if isinstance(rec, dict) and (rec.get("config") or {}).get("oracle"):
                raise UserError(f"{flag} {path}: the oracle's record (oracle_ranking.py, chosen on parallel text), "
                                "which scores no val queries; give the records of `eval.py select`")
            queries, g = (first.get("queries_sha256"), first.get("image_features")) if first else (None, "")
            check_against(rec, queries, g, f"{flag} {path}")
            first = first or rec["details"]["val"]
    rows = [{"record": str(path), "model": (rec.get("model") or {}).get("path"),
             "chosen": (rec.get("metrics") or {}).get("chosen"), "mean_bkr": (rec.get("metrics") or {}).get("mean_bkr")}
            for paths, group in zip((records, against), sides) for path, rec in zip(paths, group)]
    out = {"records": rows[:len(records)], "against": rows[len(records):], "seed": seed}
    out["mean_over_seeds"] = paired_margin(sides[0], sides[1], seed=seed, sources=("the records", "--against"))
    out["g"] = sides[0][0]["details"]["val"]["image_features"]  # one g: checked with the queries
    if len(records) == len(against):
        out["per_seed"] = [paired_margin([a], [b], seed=seed, sources=(pa, pb))
                           for a, b, pa, pb in zip(*sides, records, against)]
    return out


def _line(margin: dict) -> str:
    return f"{margin['diff']:+.4f} [{margin['lo']:+.4f}, {margin['hi']:+.4f}] (p {margin['p_value']:.3f})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("records", nargs="+", metavar="RECORD", help="select records of the recipe judged (its seeds)")
    parser.add_argument("--against", nargs="+", required=True, metavar="RECORD",
                        help="select records of the recipe it is judged against (its seeds, in the same order)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the bootstrap (default: 0)")
    parser.add_argument("--out", type=output_file, help="also write the comparison here as JSON")
    args = parser.parse_args(argv)
    with cli_option_names():  # the library's refusals and note name `eval.py select`'s flags (--val), not val=
        result = compare(args.records, args.against, args.seed)
        for side in ("records", "against"):
            for row in result[side]:
                print(f"{row['record']}: {row['chosen']}, mean val BkR {row['mean_bkr']:.4f}")
        for i, margin in enumerate(result.get("per_seed", []), 1):
            print(f"record {i} over its counterpart, paired over the val queries: {_line(margin)}")
        pooled = result["mean_over_seeds"]
        print(f"mean over {len(args.records)} against {len(args.against)} record(s), paired over the val queries "
              f"(95% bootstrap): {_line(pooled)}")
        if pooled["g_is_encoder_of"]:
            print(shared_g_warning(pooled["g_is_encoder_of"], result["g"]))
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            record = {**result, "inputs": vars(args), "versions": versions()}  # as every command's record
            Path(args.out).write_text(json_text(record, indent=2), encoding="utf-8")
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
