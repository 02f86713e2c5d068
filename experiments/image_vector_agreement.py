"""A screen of image encoders in seconds: do their vectors put pictures that people describe alike near each other?

    cd /path/to/repo && .venv/bin/python experiments/image_vector_agreement.py \\
        --reference outputs/flickr8k-image-vectors/described \\
        --cache efficientnet=outputs/flickr8k/train/features --out eval_out/image-vectors/agreement.json

How far the full model carries meaning across languages is bounded by its image vectors (docs/results.md,
"What bounds the full model"), and a training run is slow on a CPU. This reads feature caches (built with
``globetrotter-data features build``, imported with ``features import``; the whole-image row of each) and compares each
with a reference cache of what people said about each image (``experiments/study_image_features.py`` writes one:
``described``, an oracle's vectors, used here only as a yardstick). On ``--held-out-images`` images drawn with
``--seed``:

* ``agreement@k``: the mean reference cosine between an image and its ``k`` nearest held-out images by the cache's
  vectors (centred cosine), next to ``chance`` (random pairs) and ``ceiling`` (the reference's own ``k`` nearest);
* ``pair_r``: the correlation of the two cosines over all held-out pairs;
* the two sides are read differently on purpose: the cache's vectors centred (their mean over the screened images
  taken off, then unit length: a direction every image shares is no likeness, as ``model.image_head_x:
  features`` reads frozen features), the reference's plain cosine the yardstick (chance, ceiling and agreement are
  in its units, and the ceiling is the most any k neighbours can reach). So a cache identical to the reference
  stays below the ceiling, and its ``pair_r`` below 1, as far as the reference's rows share a mean direction;
* with ``--across-languages SPLIT`` (a one-language split: its captions give each image's language) an image's
  neighbours, chance, ceiling and pairs are only held-out images of *other* languages, the pairs through which the
  transitive loss carries meaning across languages;
* ``ridge``: the same two figures for the cache's vectors mapped by a ridge fit to the reference on the other images,
  the best of ``--ridge`` strengths read on the held-out images: an upper bound of what any linear head on these vectors
  could reach, and no method (it reads the reference).

The screen measures how much of what people say an encoder's vectors could carry (the ridge figure bounds any linear
head on them), not what a training run makes of them: vectors derived from one encoder can agree more and train worse
(docs/results.md). The report is printed and, with ``--out``, written as JSON beside its arguments.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo's packages, however installed

from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import (comma_separated, distinct_names, named_path, non_negative_int, output_file,  # noqa: E402
                                   positive_float, positive_int)
from globetrotter.data.feature_cache import load_feature_cache  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402
from globetrotter.image_ridge import fit_image_ridge, unit_centred  # noqa: E402


def agreement(vectors: np.ndarray, reference_sim: np.ndarray, k: int = 10,
              allowed: np.ndarray | None = None) -> dict[str, float]:
    """How far ``vectors`` [n, d] order n images as ``reference_sim`` [n, n] does: the mean reference similarity of
    each image's ``k`` nearest others by the vectors' centred cosine, and the correlation of the two over all pairs;
    with ``allowed`` [n, n] (bool) only those pairs count (e.g. images of two different languages)."""
    n = len(vectors)
    allowed = ~np.eye(n, dtype=bool) if allowed is None else allowed & ~np.eye(n, dtype=bool)
    if not 0 < k <= allowed.sum(axis=1).min():
        raise UserError(f"k={k}: needs 0 < k <= {allowed.sum(axis=1).min()} (the fewest other held-out images an "
                        "image may be paired with)")
    unit = unit_centred(vectors)
    sim = unit @ unit.T
    upper = np.triu(allowed, 1)
    pair_r = float(np.corrcoef(sim[upper], reference_sim[upper])[0, 1])
    sim[~allowed] = -np.inf
    nearest = np.argpartition(-sim, k, axis=1)[:, :k]
    return {f"agreement@{k}": float(reference_sim[np.arange(n)[:, None], nearest].mean()), "pair_r": pair_r}


def whole_image_rows(path: str | Path) -> tuple[list[str], np.ndarray]:
    """The image ids of a feature cache and its whole-image row of each (float32 [images, dim])."""
    cache = load_feature_cache(path)
    ids = sorted(cache.row_of, key=cache.row_of.__getitem__)
    return ids, np.asarray(cache.features[:, 0], dtype=np.float32)


def screened_images(reference_ids: list[str], cache_ids: dict[str, list[str]],
                    languages: dict[str, str] | None = None) -> list[str]:
    """The images the screen reads, in the reference's order: those of the reference that every cache holds (and, with
    ``languages``, that have a language)."""
    shared = set(reference_ids) if languages is None else set(reference_ids) & set(languages)
    for name, ids in cache_ids.items():
        shared_here = shared & set(ids)
        if not shared_here:
            where = ("in the reference" if languages is None or not set(reference_ids) & set(ids)
                     else "in the reference and captioned in the --across-languages split")
            raise UserError(f"cache {name}: none of its image ids are {where}")
        shared = shared_here
    return [i for i in reference_ids if i in shared]


def held_out_mask(n: int, held_out: int, seed: int) -> np.ndarray:
    """Which of the ``n`` screened images are held out (bool [n]): ``held_out`` of them, drawn with ``seed``."""
    test = np.zeros(n, dtype=bool)
    test[np.random.default_rng(seed).choice(n, held_out, replace=False)] = True
    return test


def screen(reference: tuple[list[str], np.ndarray], caches: dict[str, tuple[list[str], np.ndarray]],
           held_out: int = 800, k: int = 10, seed: int = 0, strengths: tuple[float, ...] = (10, 100, 1000),
           languages: dict[str, str] | None = None) -> dict:
    """The report of the module docstring for each cache, on the images every cache shares with the reference; with
    ``languages`` (image id -> the language it is captioned in) an image's neighbours are those of other languages."""
    ref_ids, ref = reference
    images = screened_images(ref_ids, {name: ids for name, (ids, _) in caches.items()}, languages)
    if len(images) < held_out + k + 1:
        raise UserError(f"{len(images)} images shared by the reference and every cache: too few for --held-out-images "
                        f"{held_out} and the ridge's fit")
    test = held_out_mask(len(images), held_out, seed)
    ref_rows = {i: r for r, i in enumerate(ref_ids)}
    target = ref[[ref_rows[i] for i in images]].astype(np.float64)
    target /= np.linalg.norm(target, axis=1, keepdims=True).clip(1e-12)
    ref_sim = target[test] @ target[test].T
    off = ~np.eye(held_out, dtype=bool)
    if languages is not None:
        held_langs = np.array([languages[i] for i, t in zip(images, test) if t])
        off &= held_langs[:, None] != held_langs[None, :]
    # pair_r correlates the cosines over these pairs: it was NaN (printed nan, null in the JSON) with fewer than 2 of
    # them, or when one side's cosines are all the same
    pairs = ref_sim[np.triu(off, 1)]
    if len(pairs) < 2:
        kind = " of two languages" if languages is not None else ""
        raise UserError(f"--held-out-images {held_out}: {len(pairs)} pair(s) of held-out images{kind} to correlate; "
                        f"pair_r needs at least 2")
    if np.ptp(pairs) == 0:
        raise UserError(f"--reference: every pair of the {held_out} held-out images has one cosine ({pairs[0]:.4g}); "
                        f"expected vectors that tell images apart")
    top = np.sort(np.where(off, ref_sim, -np.inf), axis=1)[:, -k:]
    per_cache: dict[str, dict] = {}
    report = {"images": len(images), "held_out": held_out, "k": k, "seed": seed,
              "chance": float(ref_sim[off].mean()), "ceiling": float(top.mean()), "caches": per_cache}
    for name, (ids, vectors) in caches.items():
        rows = {i: r for r, i in enumerate(ids)}
        x = vectors[[rows[i] for i in images]]
        if not unit_centred(x[test]).any():  # it orders no images: agreement@k an arbitrary pick, pair_r NaN
            raise UserError(f"--cache {name}: its vectors of the {held_out} held-out images are all the same; expected "
                            f"vectors that tell images apart (check how the cache was built or imported)")
        fits = {}
        for strength in strengths:
            ridge = fit_image_ridge(x[~test], target[~test], strength).model
            fits[strength] = agreement(ridge.predict(x[test]), ref_sim, k, off)
        best = max(fits, key=lambda s: fits[s][f"agreement@{k}"])
        per_cache[name] = {**agreement(x[test], ref_sim, k, off), "ridge": {"strength": best, **fits[best]}}
    return report


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--reference", required=True, help="the feature cache of what people said about each image")
    ap.add_argument("--cache", action="append", type=named_path, required=True, metavar="[NAME=]DIR",
                    help="a feature cache to screen (repeatable)")
    ap.add_argument("--held-out-images", dest="held_out", type=positive_int, default=800, metavar="N",
                    help="images the figures are read on (default: %(default)s)")
    ap.add_argument("--k", type=positive_int, default=10, help="nearest images per image (default: %(default)s)")
    ap.add_argument("--seed", type=non_negative_int, default=0, help="draws the held-out images (default: %(default)s)")
    ap.add_argument("--ridge", type=comma_separated(positive_float), default=[10.0, 100.0, 1000.0], metavar="S,S",
                    help="ridge strengths of the linear bound, comma-separated (default: 10,100,1000)")
    ap.add_argument("--across-languages", metavar="SPLIT",
                    help="a split whose captions give each image's language: an image's neighbours are then the "
                         "held-out images of other languages (what the transitive loss pairs)")
    ap.add_argument("--out", type=output_file, help="write the report here as JSON (checked before the screen)")
    args = ap.parse_args(argv)
    languages = None
    if args.across_languages:
        from data_prep.shards import read_captions

        languages = {str(m["image_id"]): m["lang"] for m in read_captions(args.across_languages)}
    caches = {n: whole_image_rows(p) for n, p in distinct_names(args.cache, "--cache").items()}
    report = screen(whole_image_rows(args.reference), caches, args.held_out, args.k, args.seed, tuple(args.ridge),
                    languages)
    k = args.k
    print(f"{report['held_out']} held-out images of {report['images']}: agreement@{k} chance {report['chance']:.4f}, "
          f"ceiling {report['ceiling']:.4f}")
    for name, row in report["caches"].items():
        fit = row["ridge"]
        print(f"{name}: agreement@{k} {row[f'agreement@{k}']:.4f} (pair r {row['pair_r']:.3f}); through a ridge fit to "
              f"the reference (strength {fit['strength']:g}) {fit[f'agreement@{k}']:.4f} (pair r {fit['pair_r']:.3f})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json_text({"inputs": vars(args) | {"cache": dict(args.cache)}, **report,
                                             "versions": versions()}, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; a bad input is a one-line error and exit code 2."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
