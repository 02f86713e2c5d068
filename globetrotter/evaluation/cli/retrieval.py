"""``eval.py retrieval``: cross-lingual text->image and image->text retrieval per language (XTD10 protocol)."""
from __future__ import annotations

import argparse

import numpy as np

from globetrotter.argtypes import positive_int
from globetrotter.errors import UserError

from .. import plots
from ..models import language_kwargs
from ..retrieval import retrieval_per_language
from ..tfidf import is_tfidf_spec
from . import common

_RETRIEVAL_HELP = (
    "Cross-lingual text->image and image->text retrieval per language (XTD10 protocol) on a test "
    "split: the gallery is every image of the split (once), the queries each language's captions, "
    "embedded by the cross-modal heads. METRICS (CLIP_benchmark names, fractions): "
    "image_retrieval_recall@K = share of captions whose image is among the K nearest images "
    "(text->image); text_retrieval_recall@K = share of images with one of their captions among the K "
    "nearest captions of that language (image->text)."
)


def _retrieval(args: argparse.Namespace) -> int:
    if is_tfidf_spec(args.model):
        raise UserError("retrieval: --model tfidf is a text-only surface baseline with no image encoder; "
                        "text-image retrieval needs a trained run folder")
    from data_prep.shards import decode_image, iter_raw, read_captions

    wanted = set(common.languages(args.languages) or [])
    metas = [m for m in read_captions(args.split) if not wanted or m["lang"] in wanted]
    missing = wanted - {m["lang"] for m in metas}
    if missing:
        raise UserError(f"{args.split}: no caption in language(s) {sorted(missing)}")
    image_ids = sorted({str(m["image_id"]) for m in metas})
    if args.max_images and len(image_ids) > args.max_images:
        pick = np.random.default_rng(args.seed).choice(len(image_ids), args.max_images, replace=False)
        image_ids = [image_ids[i] for i in np.sort(pick)]
    row_of = {iid: i for i, iid in enumerate(image_ids)}
    encoder = common.load(args)
    image_emb: list[np.ndarray | None] = [None] * len(image_ids)
    batch, batch_rows = [], []

    def flush() -> None:
        if batch:
            emb = encoder.encode_image(batch, batch_size=args.batch_size)
            for r, e in zip(batch_rows, emb):
                image_emb[r] = e
            batch.clear()
            batch_rows.clear()

    seen = set()
    for _, ext, data, meta in iter_raw(args.split):
        iid = str(meta["image_id"])
        if iid in row_of and iid not in seen:
            seen.add(iid)
            batch.append(decode_image(data, ext))
            batch_rows.append(row_of[iid])
            if len(batch) >= args.batch_size:
                flush()
    flush()
    captions = [m for m in metas if str(m["image_id"]) in row_of]
    text_emb = encoder.encode_text([m["caption"] for m in captions], batch_size=args.batch_size, head="cross",
                                   **language_kwargs(encoder, [m["lang"] for m in captions]))
    res = retrieval_per_language(text_emb, [m["lang"] for m in captions], np.stack(image_emb),
                                 [row_of[str(m["image_id"])] for m in captions], ks=args.ks)
    langs = sorted(res["per_language"])
    for lang in langs:
        m = res["per_language"][lang]
        print(f"{lang}: text→image " + " ".join(f"R@{k} {100 * m[f'image_retrieval_recall@{k}']:.1f}" for k in args.ks)
              + " | image→text " + " ".join(f"R@{k} {100 * m[f'text_retrieval_recall@{k}']:.1f}" for k in args.ks))
    written = [plots.plot_bars({l: {f"R@{k}": 100 * res["per_language"][l][f"image_retrieval_recall@{k}"] for k in args.ks}
                                for l in langs}, f"{common.plot_prefix(args, 'retrieval')}-text2image.png",
                               f"Text→image retrieval over {len(image_ids)} images", "recall (%)")]
    common.write_record(args, "retrieval", res, langs, {"n_images": len(image_ids), "n_captions": len(captions)}, written)
    return 0


def register(sub, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("retrieval", parents=[parent], help="text→image / image→text Recall@K per language", description=_RETRIEVAL_HELP)
    common.add_model(p)
    common.add_split(p, what="test split folder with images")
    p.add_argument("--ks", type=positive_int, nargs="+", default=[1, 5, 10], help="K values (default 1 5 10)")
    p.add_argument("--max-images", type=positive_int, help="evaluate on a seeded sample of this many images (default: all)")
    p.set_defaults(func=_retrieval)
