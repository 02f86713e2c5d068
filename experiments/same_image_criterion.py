"""A ranking criterion with a true match among the candidates, and no parallel text: another caption of the same image.

`eval.py select` chooses a model's ranking (head, MaxSim weight, CSLS) by BackRetrieval on val. BackRetrieval's
candidates never hold a translation of the query (each val image is captioned in one language), so it cannot see
what a ranking does when a match is there, and over one model's rankings it can order them against translation
(docs/results.md, *Choosing on val*). This driver scores the same grid by a task whose match is present: in each
language, the first caption of a val image retrieves, among the second captions of the language's val images,
the one of its own image. The criterion is the mean reciprocal rank, averaged over languages; statistics come
from ``--reference`` (the train split), never from the scored captions. No parallel text is read: each image is
still captioned in one language.

It is a study, not a method default: docs/results.md says where it ordered rankings better than BackRetrieval
and where it did not. ``--oracle RECORD`` (one per ``--model``, from experiments/oracle_ranking.py) adds the Spearman
correlation of the criterion with translation on the parallel val split, and what its choice translates.

Val images need two captions in a language: ``globetrotter-data more-captions --splits val`` gives the en
and de val images theirs (the Flickr8k token file, Multi30K task 2); Flickr8k-CN's zh val images have five.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/same_image_criterion.py --model runs/flickr8k-s0 \\
      --oracle eval_out/oracle/select-oracle-runs-flickr8k-s0.json --val outputs/flickr8k-val-more/val \\
      --reference outputs/flickr8k/train --test outputs/flickr8k/test --out eval_out/same-image
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from backretrieval.errors import cli_option_names  # noqa: E402
from globetrotter.argtypes import language_codes, non_negative_int, output_folder, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.ranking import Ranking  # noqa: E402
from globetrotter.evaluation.records import Result, dataset_info  # noqa: E402
from globetrotter.evaluation.reference import (  # noqa: E402
    DEFAULT_SIZE, ReferenceCaptions, ReferencePool, checked_reference, read_captions_once, refuse_test_split)
from globetrotter.evaluation.scoring import ScoringContext  # noqa: E402
from globetrotter.evaluation.tasks.choice import read_record  # noqa: E402
from globetrotter.evaluation.tasks.common import resolve_model  # noqa: E402
from globetrotter.evaluation.tasks.select import model_candidates  # noqa: E402
from oracle_ranking import (check_reference_captions, check_reference_size, check_reference_tokens,  # noqa: E402
                            refuse_shared_images)

MIN_IMAGES = 50  # a language with fewer val images captioned twice is left out


def caption_pairs(split: str, languages: list[str] | None, n_images: int,
                  seed: int) -> dict[str, list[tuple[str, str]]]:
    """Per language, a seeded sample of up to ``n_images`` val images captioned at least twice in it: (first, second)
    caption, in the split's order. Languages with fewer than ``MIN_IMAGES`` such images are refused when named, and
    left out otherwise."""
    from data_prep.shards import read_captions

    by_lang: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for meta in read_captions(split):
        captions = by_lang[meta["lang"]][str(meta["image_id"])]
        if meta["caption"] not in captions:
            captions.append(meta["caption"])
    rng = np.random.default_rng(seed)
    pairs = {}
    for lang in languages or sorted(by_lang):
        twice = sorted(image for image, caps in by_lang.get(lang, {}).items() if len(caps) >= 2)
        if len(twice) < MIN_IMAGES:
            if languages:
                raise UserError(f"--languages {lang}: {split} has {len(twice)} images captioned twice in it, at "
                                f"least {MIN_IMAGES} needed (more-captions --splits val gives val images more "
                                "captions)")
            continue
        chosen = sorted(rng.choice(len(twice), size=min(n_images, len(twice)), replace=False))
        pairs[lang] = [(by_lang[lang][twice[i]][0], by_lang[lang][twice[i]][1]) for i in chosen]
    if not pairs:
        raise UserError(f"--val {split}: no language has {MIN_IMAGES} images captioned twice "
                        "(more-captions --splits val gives val images more captions)")
    return pairs


def reciprocal_ranks(scores: np.ndarray) -> np.ndarray:
    """Per query row, 1 / rank of its own candidate (the diagonal); a tie counts half a candidate above."""
    own = np.diag(scores)[:, None]
    above = (scores > own).sum(1) + 0.5 * ((scores == own).sum(1) - 1)
    return 1.0 / (1.0 + above)


def reference_pools(reference: str | ReferenceCaptions, languages: Iterable[str],
                    reference_size: int = DEFAULT_SIZE) -> dict[str, ReferencePool]:
    """Each language's reference captions, the statistics of its rankings, from one pass over the split
    ``reference`` (or its captions read already, :func:`checked_reference`)."""
    languages = list(languages)
    if not isinstance(reference, ReferenceCaptions):
        reference = read_captions_once(reference, languages)
    return {lang: reference.pool(reference_size, [lang]) for lang in languages}


@dataclass(frozen=True)
class ValSample:
    """What every model is scored on, read once: the caption pairs and each language's reference pool."""

    val: str
    reference: str
    reference_size: int
    n_images: int
    seed: int
    pairs: dict[str, list[tuple[str, str]]]
    pools: dict[str, ReferencePool]

    @classmethod
    def read(cls, val: str, reference: str, *, languages: list[str] | None = None, n_images: int = 300,
             reference_size: int = DEFAULT_SIZE, seed: int = 0, test: str | None = None) -> "ValSample":
        """Check ``val`` (never test, no image of ``test``) and read its pairs and the reference pools."""
        refuse_test_split(val, "--val")
        check_reference_size(reference_size)
        if test is not None:
            refuse_shared_images(val, test, "--val")
        pairs = caption_pairs(val, languages, n_images, seed)
        # the reference read once: never test, nor the split the choice is made on, nor one showing its images
        captions = checked_reference(val, reference, languages=list(pairs))
        pools = reference_pools(captions, pairs, reference_size)
        for pool in pools.values():
            check_reference_captions(pool)
        return cls(str(val), str(captions.split), reference_size, n_images, seed, pairs, pools)


def checked_grid(model: str, pools: dict[str, ReferencePool]) -> tuple[Any, dict, list[Ranking]]:
    """``model`` loaded (encoder, info) and its grid of rankings, once each language's reference captions in ``pools``
    hold enough of its tokens for the grid's MaxSim rankings (a one-line error otherwise, before any scoring)."""
    encoder, info = resolve_model(model)
    rankings = model_candidates(model, encoder)
    for pool in pools.values():
        check_reference_tokens(encoder, rankings, pool)
    return encoder, info, rankings


def check_models(models: Sequence[str], sample: ValSample, oracles: Sequence[str] | None = None) -> None:
    """Every check of every model before any is scored: a run that cannot load, a reference too thin for its MaxSim
    rankings, an oracle record of other rankings (a later model's refusal came once the records of those before it
    were written; two models of one record name wrote one record, the first overwritten); the error names the model."""
    named: dict[str, int] = {}  # record name -> the first --model of it
    for i, model in enumerate(models):
        try:
            _, info, rankings = checked_grid(model, sample.pools)
            if oracles:
                oracle_translations(oracles[i], [ranking.label for ranking in rankings])
        except UserError as err:
            raise UserError(str(err) if str(err).startswith(model) else f"--model {model}: {err}") from None
        if named.setdefault(info["name"], i) != i:
            raise UserError(f"--model {models[named[info['name']]]} and --model {model} would share the record "
                            f"same-image-{info['name']}.json; give each run once, or run folders whose last two "
                            "parts differ")


def score_grid(model: str, pairs: dict[str, list[tuple[str, str]]],
               pools: dict[str, ReferencePool]) -> tuple[dict, list[dict]]:
    """The criterion of every ranking of ``model``'s grid, with each language's statistics from ``pools``: (model
    info, rows with the ranking, its label, the mean reciprocal rank per language and their mean)."""
    encoder, info, rankings = checked_grid(model, pools)
    per_lang: dict[str, list[float]] = {}
    for lang, lang_pairs in pairs.items():
        n = len(lang_pairs)
        captions = [a for a, _ in lang_pairs] + [b for _, b in lang_pairs]
        context = ScoringContext(encoder, captions, [lang] * len(captions), pools[lang], queries=n)
        # queries: the first captions; candidates: the second ones, the own image's on the diagonal
        per_lang[lang] = [float(reciprocal_ranks(context.scorer(r)(np.arange(n))).mean()) for r in rankings]
    rows = [{"ranking": r.to_dict(), "label": r.label, "per_language": {g: per_lang[g][i] for g in pairs},
             "criterion": float(np.mean([per_lang[g][i] for g in pairs]))} for i, r in enumerate(rankings)]
    return info, rows


def oracle_translations(oracle: str, labels: Sequence[str]) -> dict[str, float]:
    """The oracle record's translation on the parallel val split of each ranking it scored, by label; a one-line error
    when ``oracle`` is no oracle record or has no ranking of ``labels``."""
    record = read_record(oracle, "--oracle")
    if not isinstance(record, dict) or not record.get("config", {}).get("oracle"):
        raise UserError(f"--oracle {oracle}: not an oracle record (experiments/oracle_ranking.py writes them)")
    translation = {c["label"]: c["val_translation"] for c in record["details"]["candidates"]}
    missing = [label for label in labels if label not in translation]
    if missing:
        raise UserError(f"--oracle {oracle}: has no ranking {missing[0]!r}; is it this model's record?")
    return translation


def against_oracle(rows: list[dict], oracle: str) -> dict:
    """Spearman of the criterion with the oracle record's translation on the parallel val split, over the grid, and
    what the criterion's choice and the oracle's translate."""
    from scipy.stats import spearmanr

    translation = oracle_translations(oracle, [row["label"] for row in rows])
    chosen = max(rows, key=lambda row: row["criterion"])["label"]
    return {"spearman": float(spearmanr([r["criterion"] for r in rows], [translation[r["label"]] for r in rows])[0]),
            "chosen_translation": translation[chosen], "oracle_translation": max(translation.values()),
            "oracle": str(oracle)}


def choose(model: str, sample: ValSample, out: str, *, oracle: str | None = None, name: str | None = None,
           log: Callable[[str], object] = print) -> Path:
    """Score ``model``'s grid by the same-image criterion on ``sample`` and write the record
    ``out/same-image-NAME.json`` (every ranking's criterion, the choice and, with ``oracle``, how it compares).
    Returns its path."""
    info, rows = score_grid(model, sample.pairs, sample.pools)
    for row in rows:
        log(f"same image: {row['label']:<28} MRR {row['criterion']:.4f} "
            + " ".join(f"{g} {v:.4f}" for g, v in row["per_language"].items()))
    chosen = max(rows, key=lambda row: row["criterion"])  # the first of equals: the simpler ranking
    metrics = {"chosen": chosen["label"], "criterion": chosen["criterion"]}
    if oracle is not None:
        metrics.update(against_oracle(rows, oracle))
    reason = (f"same-image criterion: highest mean reciprocal rank of another caption of the query's image, in its "
              f"language, on {sample.val} ({', '.join(f'{g}: {len(p)} images' for g, p in sample.pairs.items())}); "
              "no parallel text; a study, not a method default")
    result = Result("same-image", metrics, list(sample.pairs), model={**info, "name": name or info["name"]},
                    dataset=dataset_info(sample.val),
                    config={"val": sample.val, "reference": sample.reference, "reference_size": sample.reference_size,
                            "n_images": sample.n_images, "seed": sample.seed, "criterion": "same-image"},
                    details={"chosen": chosen["ranking"], "reason": reason, "candidates": rows})
    path = result.write(out)
    summary = f"same-image choice: {chosen['label']} (MRR {chosen['criterion']:.4f})"
    if oracle is not None:
        summary += (f"; Spearman with parallel-val translation {metrics['spearman']:+.2f}, its choice translates "
                    f"{100 * metrics['chosen_translation']:.2f}% (oracle {100 * metrics['oracle_translation']:.2f}%)")
    log(f"{summary}; record {path}")
    return path


def _main(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, action="append", help="a trained run folder (repeatable)")
    parser.add_argument("--val", required=True,
                        help="a val split whose images are captioned at least twice in a language (never test)")
    parser.add_argument("--reference", required=True, help="split whose captions give the rankings' statistics")
    parser.add_argument("--languages", type=language_codes, metavar="CODES",
                        help="comma-separated codes (default: every language with "
                                            f"{MIN_IMAGES} val images captioned twice)")
    parser.add_argument("--n-images", type=positive_int, default=300, help="val images per language (default %(default)s)")
    parser.add_argument("--reference-size", type=positive_int, default=DEFAULT_SIZE,
                        help="reference captions per language (default %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the image sample (default %(default)s)")
    parser.add_argument("--oracle", action="append",
                        help="the oracle record of each --model, in the same order (experiments/oracle_ranking.py)")
    parser.add_argument("--test", help="the test split: --val may show none of its images (checked)")
    parser.add_argument("--out", required=True, type=output_folder, help="folder of the records (same-image-NAME.json)")
    args = parser.parse_args(argv)
    if args.oracle and len(args.oracle) != len(args.model):
        raise UserError(f"--oracle given {len(args.oracle)} times for {len(args.model)} --model: one per model")
    with cli_option_names():  # the library's refusals name this script's flags (--reference X), not reference=X
        sample = ValSample.read(args.val, args.reference, languages=args.languages,
                                n_images=args.n_images, reference_size=args.reference_size, seed=args.seed,
                                test=args.test)
        if len(args.model) > 1:  # one model is refused before its record is written: loaded once
            check_models(args.model, sample, args.oracle)
        for i, model in enumerate(args.model):
            choose(model, sample, args.out, oracle=args.oracle[i] if args.oracle else None,
                   log=lambda line: print(line, flush=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; a bad input is a one-line error and exit code 2."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
