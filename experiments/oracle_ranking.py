"""The ranking an oracle with parallel val text would choose, to measure what BackRetrieval's choice costs.

`eval.py select` chooses a model's ranking (head, MaxSim weight, CSLS) by BackRetrieval on val, with no parallel
text. This driver scores the same grid by sentence translation on a *parallel* val split (the val images with
their captions in every language; translations known) and keeps the best. It reads parallel text, so its choice
is not a method choice: a row it gives is labelled oracle. The test split is never read here; the record it
writes has `select`'s form, so `eval.py sentence --ranking RECORD` applies the oracle's choice to test once.

A parallel val split: the README's Flickr8k conversion without `--assign-languages` (same seed and fractions, so
the same val images), e.g. into outputs/flickr8k-all; captions of one image are tied by their image id when the
split has no groups (Multi30K's en/de/fr/cs captions of an image are translations of one another).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/oracle_ranking.py --model runs/flickr8k-s0 \
      --val outputs/flickr8k-all/val --reference outputs/flickr8k/train --languages en,de,fr,cs --out eval_out/oracle
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backretrieval.errors import cli_option_names  # noqa: E402
from globetrotter.argtypes import language_codes, non_negative_int, output_folder, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.late_interaction import HUB_K  # noqa: E402
from globetrotter.evaluation.ranking import Ranking  # noqa: E402
from globetrotter.evaluation.records import Result, dataset_info  # noqa: E402
from globetrotter.evaluation.reference import (  # noqa: E402
    DEFAULT_SIZE, ReferencePool, checked_reference, refuse_test_split, shared_images)
from globetrotter.evaluation.scoring import ScoringContext  # noqa: E402
from globetrotter.evaluation.sentence import ParallelSet, parallel_set, sentence_translation  # noqa: E402
from globetrotter.evaluation.tasks.common import resolve_model  # noqa: E402
from globetrotter.evaluation.tasks.select import model_candidates  # noqa: E402


def parallel_val(split: str, languages: list[str] | None, n_groups: int | None, seed: int) -> ParallelSet:
    """A seeded sample of ``split``'s images captioned in every one of ``languages``, its captions tied by group, or
    by image id where the split has no groups."""
    from data_prep.shards import read_captions

    metas = [dict(m, group=m.get("group") if m.get("group") is not None else m["image_id"])
             for m in read_captions(split)]
    return parallel_set(metas, languages, n_groups=n_groups, seed=seed, where=split)


def oracle_choice(model: str, val: str, reference: str, out: str, *, languages: list[str] | None = None,
                  n_groups: int | None = None, reference_size: int = DEFAULT_SIZE, seed: int = 0,
                  name: str | None = None, test: str | None = None,
                  log: Callable[[str], object] = print) -> Path:
    """Score ``model``'s ranking grid by sentence translation on the parallel ``val`` split (statistics from
    ``reference``, which may not be ``val``), keep the best, and write the record ``out/select-NAME.json``
    (`select`'s form). Returns its path. ``test``: the test split, whose images ``val`` may not show."""
    refuse_test_split(val, "--val")
    check_reference_size(reference_size)
    if test is not None:
        refuse_shared_images(val, test, "--val")
    from data_prep.shards import read_manifest

    have = sorted(read_manifest(val)["languages"])
    missing = [lang for lang in languages or () if lang not in have]
    if missing:  # a code the split lacks: the --languages given, not the split's form, is the mistake
        raise UserError(f"--languages {','.join(languages or ())}: --val {val} has no caption in {','.join(missing)} "
                        f"(it has {','.join(have)})")
    try:
        ps = parallel_val(val, languages, n_groups, seed)
    except UserError as err:
        raise UserError(f"{err} (the oracle needs a parallel val split: its images with captions in every "
                        "language, e.g. the conversion without --assign-languages)") from None
    # the reference read once: never test, nor the split the choice is made on, nor one showing its images
    captions = checked_reference(val, reference, ps.split_images, ps.languages)
    reference, pool = str(captions.split), captions.pool(reference_size)
    check_reference_captions(pool)
    encoder, info = resolve_model(model)  # after every check of the splits: loading a run takes a while
    rankings = model_candidates(model, encoder)
    check_reference_tokens(encoder, rankings, pool)
    context = ScoringContext(encoder, ps.captions, ps.langs, pool)
    rows = []
    for ranking in rankings:
        res = sentence_translation(context.scorer(ranking), ps.langs, ps.groups, tie_seed=seed)
        rows.append({"ranking": ranking.to_dict(), "label": ranking.label, "val_translation": res["accuracy"]})
        log(f"oracle: {ranking.label:<28} val sentence translation {100 * res['accuracy']:.2f}%")
    best = max(range(len(rows)), key=lambda i: (rows[i]["val_translation"], -i))
    chosen = rows[best]
    reason = (f"oracle: highest sentence translation on the parallel val split {val} "
              f"({100 * chosen['val_translation']:.2f}%, {len(ps.group_ids)} images x {len(ps.languages)} languages); "
              f"reads parallel text, not a method choice")
    result = Result("select", {"chosen": chosen["label"], "val_translation": chosen["val_translation"]},
                    list(ps.languages), model={**info, "name": name or f"oracle-{info['name']}"},
                    dataset=dataset_info(val),
                    config={"val": str(val), "reference": str(reference), "reference_size": reference_size,
                            "n_groups": n_groups, "seed": seed, "oracle": True},
                    details={"chosen": chosen["ranking"], "reason": reason, "candidates": rows,
                             "reference": pool.record})
    path = result.write(out)
    log(f"oracle choice: {chosen['label']} ({100 * chosen['val_translation']:.2f}% on val); record {path}")
    return path


def refuse_shared_images(chosen_on: str, test: str, flag: str) -> None:
    """A one-line error when the split a choice is made on (``flag``) shows an image of the test split: the
    choice would read test (a copy of test under another name is refused too, not only the test folder)."""
    shared = shared_images(chosen_on, test)
    if shared:
        raise UserError(f"{flag} {chosen_on}: shows {len(shared)} images of the test split {test} (e.g. "
                        f"{sorted(shared)[0]!r}); choose on val images only")


def check_reference_size(reference_size: int) -> None:
    """A one-line error when ``--reference-size`` is below the neighbours each CSLS ranking of the grid takes among a
    language's reference captions (the scoring's own refusal would name `eval.py`'s --csls-k, no flag here)."""
    k = Ranking.csls_k
    if reference_size < k:
        raise UserError(f"--reference-size {reference_size}: the grid's CSLS rankings take {k} neighbours among each "
                        f"language's reference captions; give {k} or more")


def check_reference_captions(pool: ReferencePool, flag: str = "--reference") -> None:
    """A one-line error when a language of ``pool`` (the reference captions read from the split ``flag`` gave) has
    fewer captions than the neighbours each CSLS ranking of the grid takes: its split has no more, once
    :func:`check_reference_size` has passed (the scoring's own refusal would name `eval.py`'s --csls-k, no flag here)."""
    k = Ranking.csls_k
    langs, counts = np.unique(pool.langs, return_counts=True)
    for lang, n in zip(langs.tolist(), counts.tolist()):
        if n < k:
            raise UserError(f"{flag} {pool.source}: {n} {lang} captions, fewer than the {k} neighbours the grid's "
                            f"CSLS rankings take among each language's reference captions; name a split with {k} or "
                            f"more in each language")


def check_reference_tokens(encoder: Any, rankings: Sequence[Ranking], pool: ReferencePool,
                           flag: str = "--reference") -> None:
    """A one-line error, once the model is loaded and before any scoring, when ``rankings`` (the model's grid) hold a
    MaxSim ranking and the captions of a language of ``pool`` (read from the split ``flag`` gave) hold no more distinct
    tokens of ``encoder`` than the neighbours of MaxSim's per-language hubness (the scoring's own refusal would name
    `eval.py`'s --maxsim, no flag here, after the grid's other rankings were scored)."""
    if not any(ranking.maxsim for ranking in rankings):
        return
    langs = np.asarray(pool.langs)
    for lang in sorted(set(langs.tolist())):
        ids = encoder.token_ids([pool.captions[i] for i in np.flatnonzero(langs == lang)])
        n = len(np.unique(np.concatenate(ids)))
        if n <= HUB_K:
            raise UserError(f"{flag} {pool.source}: its {lang} captions hold {n} distinct tokens of the model, no more "
                            f"than the {HUB_K} neighbours the grid's MaxSim rankings take among each language's "
                            f"tokens; name a split with more varied {lang} captions")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained run folder, or a baseline (tfidf)")
    parser.add_argument("--val", required=True, help="a parallel val split (never the test split)")
    parser.add_argument("--reference", required=True,
                        help="split whose captions give the rankings' statistics (the one test is scored with)")
    parser.add_argument("--languages", type=language_codes, metavar="CODES",
                        help="comma-separated codes (default: all of --val)")
    parser.add_argument("--n-groups", type=positive_int, help="val images sampled (default: every complete one)")
    parser.add_argument("--reference-size", type=positive_int, default=DEFAULT_SIZE,
                        help="reference captions per language (default %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the samples (default %(default)s)")
    parser.add_argument("--name", help="the record's name (default: oracle-<model name from the path>)")
    parser.add_argument("--test", help="the test split the choice will be applied to: --val may show none of its "
                                       "images (checked)")
    parser.add_argument("--out", required=True, type=output_folder, help="folder of the record (select-NAME.json)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with cli_option_names():  # the library's refusals name this script's flags (--reference X), not reference=X
        oracle_choice(args.model, args.val, args.reference, args.out,
                      languages=args.languages, n_groups=args.n_groups,
                      reference_size=args.reference_size, seed=args.seed, name=args.name, test=args.test,
                      log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
