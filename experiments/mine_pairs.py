"""Mine pseudo-translation groups from a trained model, without parallel text, for a second-round student.

A full model ranks captions across languages (the ranking `eval.py select` chose for it on val). In the one-language
train split no caption has a translation, but many images of one language show what an image of another shows. This
driver scores every pair of train images of two languages by their captions (the mean score of the chosen ranking,
statistics from the same reference captions as `select`), adds how alike the two images look (cosine of the centred
frozen features of the run's feature cache), corrects both for hubness (CSLS), and keeps the mutual nearest
neighbours of each language pair. Kept pairs are joined into groups, best pairs first, never two images of one
language in a group. The split is written again with each grouped caption's ``group`` set: a student trained on it
with `configs/flickr8k-supervised.yaml`'s α (1 for the captions of one group, in two languages) learns from the
teacher's guesses, never from parallel text. Every image keeps its one language, its captions and its features.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/mine_pairs.py --teacher runs/flickr8k-s0 \
      --ranking eval_out/select-runs-flickr8k-s0.json --split outputs/flickr8k-more/train \
      --out outputs/flickr8k-more/train-mined-s0
    OMP_NUM_THREADS=1 .venv/bin/python train.py --config configs/flickr8k-supervised.yaml seed=0 run_name=mined-s0 \
      data.train_split=train-mined-s0
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_prep.shard_writer import ShardWriter, carried_manifest_fields, check_new_split_folder  # noqa: E402
from data_prep.shards import iter_metas, iter_raw, read_manifest  # noqa: E402
from globetrotter.argtypes import non_negative_float, output_folder, positive_int  # noqa: E402
from globetrotter.errors import UserError, run_cli  # noqa: E402


def csls(scores: np.ndarray, k: int) -> np.ndarray:
    """``2·s − r_row − r_col``: each score less the mean of its row's and its column's ``k`` highest (CSLS)."""
    k_row, k_col = min(k, scores.shape[1]), min(k, scores.shape[0])
    r_row = -np.partition(-scores, k_row - 1, axis=1)[:, :k_row].mean(1)
    r_col = -np.partition(-scores, k_col - 1, axis=0)[:k_col].mean(0)
    return 2 * scores - r_row[:, None] - r_col[None, :]


def mutual_pairs(scores: np.ndarray) -> list[tuple[int, int, float]]:
    """``(row, column, score)`` of every mutual nearest neighbour of a score matrix."""
    best_col, best_row = scores.argmax(1), scores.argmax(0)
    rows = np.flatnonzero(best_row[best_col] == np.arange(len(best_col)))
    return [(int(r), int(best_col[r]), float(scores[r, best_col[r]])) for r in rows]


def group_images(edges: list[tuple[int, int, float]], lang_of: np.ndarray) -> np.ndarray:
    """Join images along ``edges`` (best first), never two images of one language in a group; ``-1``: no group."""
    parent = np.arange(len(lang_of))
    langs = [{lang_of[i]} for i in range(len(lang_of))]

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    joined = np.zeros(len(lang_of), dtype=bool)
    for a, b, _ in sorted(edges, key=lambda e: -e[2]):
        ra, rb = root(a), root(b)
        if ra == rb or langs[ra] & langs[rb]:
            continue
        parent[rb] = ra
        langs[ra] |= langs[rb]
        joined[a] = joined[b] = True
    roots = np.array([root(i) for i in range(len(lang_of))])
    return np.where(joined, roots, -1)


def z_scored(x: np.ndarray) -> np.ndarray:
    """``x`` less its mean, over its standard deviation; all zeros when every value is equal (e.g. one image of each
    language): a term that tells no pair from another adds nothing, where dividing by its zero spread gave NaN."""
    if x.max() == x.min():
        return np.zeros_like(x)
    return (x - x.mean()) / x.std()


def image_scores(scorer: Callable[[np.ndarray], np.ndarray], caption_image: np.ndarray, n_images: int,
                 chunk: int = 512) -> np.ndarray:
    """``[images, images]`` float32 mean caption score of every two images (``scorer(rows)`` gives captions ×
    captions): the scorer's float32, each mean over a few captions, so float64 would only double the memory."""
    n = len(caption_image)
    avg = sp.csr_matrix((np.ones(n, dtype=np.float32), (caption_image, np.arange(n))), shape=(n_images, n))
    avg = sp.diags(1.0 / np.maximum(np.asarray(avg.sum(1)).ravel(), 1)).astype(np.float32) @ avg
    out = np.zeros((n_images, n_images), dtype=np.float32)
    for s in range(0, n, chunk):
        rows = np.arange(s, min(n, s + chunk))
        partial = np.asarray(scorer(rows), dtype=np.float32) @ avg.T  # [rows, images]
        out += avg[:, rows] @ partial
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True, help="a trained run (its best checkpoint)")
    p.add_argument("--ranking", required=True, help="the teacher's `eval.py select` record (ranking and reference)")
    p.add_argument("--split", required=True, help="the one-language train split to group")
    p.add_argument("--out", required=True, type=output_folder,
                   help="the new split's folder (beside --split, so a config can name it): a new or empty folder, or "
                        "an earlier output of this script to write over")
    p.add_argument("--captions-per-image", type=positive_int, default=2,
                   help="captions of an image scored (its first ones; default: %(default)s)")
    p.add_argument("--image-weight", type=non_negative_float, default=1.0,
                   help="weight of the images' look, both parts z-scored (default: %(default)s)")
    p.add_argument("--csls-k", type=positive_int, default=10,
                   help="neighbours whose mean score is each image's CSLS radius (default: %(default)s)")
    mine(p.parse_args(argv))
    return 0


def mine(args: argparse.Namespace) -> None:
    """Score, pair, group and write the split (:func:`main`'s arguments)."""
    import torch

    from backretrieval.errors import cli_option_names
    from globetrotter.data.feature_cache import load_feature_cache
    from globetrotter.evaluation.models import is_baseline
    from globetrotter.evaluation.reference import read_reference
    from globetrotter.evaluation.scoring import ScoringContext
    from globetrotter.evaluation.tasks.choice import read_choice
    from globetrotter.evaluation.tasks.common import resolve_model
    from globetrotter.training.backbone_finetune import unit_centred_targets

    split, out = Path(args.split), Path(args.out)
    # before any work: a ShardWriter on the split (or another one) would delete its shards
    check_new_split_folder(out, [split], lambda manifest: "mined_groups" in manifest)
    if is_baseline(args.teacher):  # before the library's refusals of model=SPEC: --teacher here
        raise UserError(f"--teacher {args.teacher}: a baseline; the teacher is a trained run folder (its captions' "
                        "scores and its feature cache)")
    encoder, teacher = resolve_model(args.teacher)
    with cli_option_names():  # its refusals name --ranking, this script's flag too; the record's reference and CSLS
        choice = read_choice(args.ranking)  # settings below are no flags here, so they keep the library's names
    choice.check(model=teacher["path"], checkpoint=teacher["checkpoint"])
    metas = list(iter_metas(split))
    images = sorted({str(m["image_id"]) for m in metas})
    index = {img: i for i, img in enumerate(images)}
    lang_of = np.empty(len(images), dtype=object)
    picked: dict[int, list[int]] = defaultdict(list)
    for row, m in enumerate(metas):
        i = index[str(m["image_id"])]
        lang_of[i] = m["lang"]
        if len(picked[i]) < args.captions_per_image:
            picked[i].append(row)
    rows = [r for i in range(len(images)) for r in picked[i]]
    captions = [metas[r]["caption"] for r in rows]
    langs = np.array([metas[r]["lang"] for r in rows])
    caption_image = np.array([index[str(metas[r]["image_id"])] for r in rows])
    split_langs = sorted(set(langs.tolist()))
    unchosen = sorted(set(split_langs) - set(choice.languages or split_langs))
    if unchosen:  # no test and no parallel text read: the ranking is carried over, and the record says so
        print(f"note: {args.ranking} chose its ranking on val for {','.join(choice.languages or ())}; applied to "
              f"{','.join(unchosen)} as it is", flush=True)
    if not encoder.cfg.data.features:
        raise UserError(f"--teacher {args.teacher}: trained without a feature cache (data.features); the images' "
                        f"look is read from it")
    pool = read_reference(choice.reference, split_langs, choice.reference_size)
    context = ScoringContext(encoder, captions, langs, pool)
    print(f"scoring {len(captions)} captions of {len(images)} images with {choice.ranking.label} ...", flush=True)
    text = image_scores(context.scorer(choice.ranking), caption_image, len(images))

    cfg = encoder.cfg
    cache = load_feature_cache(cfg.data.features)
    feats = torch.from_numpy(np.asarray(cache.features[cache.rows(images, split), 0], dtype=np.float32))
    unit = torch.nn.functional.normalize(feats, dim=-1).numpy()
    centred = unit_centred_targets(unit).numpy()  # unit, centred, unit
    look = centred @ centred.T

    edges, report = [], {}
    languages = sorted(set(lang_of.tolist()))
    for ai, a in enumerate(languages):
        for b in languages[ai + 1:]:
            ia, ib = np.flatnonzero(lang_of == a), np.flatnonzero(lang_of == b)
            t, g = text[np.ix_(ia, ib)], look[np.ix_(ia, ib)]
            z = z_scored(t) + args.image_weight * z_scored(g)
            found = mutual_pairs(csls(z, args.csls_k))
            edges += [(int(ia[r]), int(ib[c]), s) for r, c, s in found]
            report[f"{a}-{b}"] = len(found)
    group = group_images(edges, lang_of)
    sizes = np.bincount(np.unique(group[group >= 0], return_inverse=True)[1])
    print(f"mutual pairs per language pair: {report}")
    print(f"{int((group >= 0).sum())} of {len(images)} images in {len(sizes)} groups "
          f"(sizes {dict(zip(*np.unique(sizes, return_counts=True)))})", flush=True)

    manifest = read_manifest(split)
    extra = carried_manifest_fields(manifest)
    extra["mined_groups"] = {"teacher": str(Path(args.teacher).resolve()), "ranking": choice.ranking.to_dict(),
                             "ranking_not_chosen_for": unchosen,
                             "from": str(split.resolve()), "captions_per_image": args.captions_per_image,
                             "image_weight": args.image_weight, "csls_k": args.csls_k, "pairs": report,
                             "grouped_images": int((group >= 0).sum()), "groups": len(sizes)}
    with ShardWriter(out, split=out.name, source=f"{manifest.get('source', 'converted')}+mined",
                     image_format=manifest.get("image_format", "jpg"), extra=extra) as writer:
        for key, _, data, meta in iter_raw(split):
            mined = int(group[index[str(meta["image_id"])]])
            other = {k: v for k, v in meta.items() if k not in ("caption", "lang", "image_id", "group")}
            writer.write(key, data, meta["caption"], meta["lang"], str(meta["image_id"]),
                         f"mined-{mined}" if mined >= 0 else None, extra=other or None)
    print(f"wrote {out} ({json.dumps(extra['mined_groups']['pairs'])})")


if __name__ == "__main__":
    sys.exit(run_cli(main))
