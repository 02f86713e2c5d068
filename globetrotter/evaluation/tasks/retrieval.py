"""Cross-lingual text→image and image→text retrieval per language (XTD10 protocol) as a library call:
:func:`evaluate`."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, cast

import numpy as np

from backretrieval.errors import given, option
from backretrieval.files import enough_for_k
from globetrotter.errors import UserError

from ..models import ModelLike, language_kwargs
from ..records import Result, dataset_info
from ..retrieval import DEFAULT_KS, retrieval_per_language
from ..tfidf import is_tfidf_spec
from .checks import require_ks, require_languages, require_positive_int
from .common import resolve_model

if TYPE_CHECKING:
    from PIL import Image


def _encode_images(encoder: Any, split: str | Path, row_of: dict[str, int], batch_size: int) -> np.ndarray:
    """``[len(row_of), D]``: row ``row_of[image_id]`` embeds that image of ``split`` (read once, in batches)."""
    from data_prep.shards import decode_sample_image
    from globetrotter.data.feature_cache_build import unique_samples

    image_emb: list[np.ndarray | None] = [None] * len(row_of)
    batch: list[Image.Image | np.ndarray] = []  # as decode_sample_image gives them
    batch_rows: list[int] = []

    def flush() -> None:
        if batch:
            emb = encoder.encode_image(batch, batch_size=batch_size)
            for r, e in zip(batch_rows, emb):
                image_emb[r] = e
            batch.clear()
            batch_rows.clear()

    for iid, ext, data, shard, key in unique_samples(Path(split)):
        if iid in row_of:
            batch.append(decode_sample_image(data, ext, shard, key))  # one line naming both when it does not decode
            batch_rows.append(row_of[iid])
            if len(batch) >= batch_size:
                flush()
    flush()
    # every row is filled: row_of's image ids are those of captions in these shards
    return np.stack(cast("list[np.ndarray]", image_emb))


def evaluate(
    model: ModelLike,
    split: str | Path,
    *,
    languages: Sequence[str] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    max_images: int | None = None,
    seed: int = 0,
    batch_size: int = 256,
    name: str | None = None,
    device: str = "cpu",
) -> Result:
    """Text→image and image→text Recall@K of ``model`` per language of the test ``split`` (default: all of its).

    The gallery is every image of the split once (a ``seed``-ed sample of ``max_images`` when set), the queries each
    language's captions of those images, embedded by the cross-modal heads. Metrics (CLIP_benchmark names,
    fractions): ``per_language[lang]`` and their ``mean`` of ``image_retrieval_recall@K`` (text→image, over
    captions) and ``text_retrieval_recall@K`` (image→text, over images), with chance
    (:func:`~..retrieval.retrieval_recall`).
    """
    require_languages(languages=languages)
    ks = require_ks(ks)
    if max_images is not None:
        require_positive_int(max_images, "max_images")
    if isinstance(model, str) and is_tfidf_spec(model):
        raise UserError(f"retrieval: {given('model', model)} is a text-only surface baseline with no image encoder; "
                        "text-image retrieval needs a trained run folder")
    from data_prep.shards import read_captions, read_manifest
    from globetrotter.data.feature_cache_build import require_pictures

    require_pictures(split, read_manifest(split), "text-image retrieval")  # the run's image encoder reads pictures
    wanted = set(languages or [])
    every = read_captions(split)
    metas = [m for m in every if not wanted or m["lang"] in wanted]
    missing = wanted - {m["lang"] for m in metas}
    if missing:
        has = sorted({m["lang"] for m in every})
        raise UserError(f"{split}: no caption in language(s) {sorted(missing)} (has {has})")
    image_ids = sorted({str(m["image_id"]) for m in every})  # the gallery: every image, whatever the languages
    if max_images is not None and len(image_ids) > max_images:
        pick = np.random.default_rng(seed).choice(len(image_ids), max_images, replace=False)
        image_ids = [image_ids[i] for i in np.sort(pick)]
    row_of = {iid: i for i, iid in enumerate(image_ids)}
    # K not below the gallery: Recall@K is 1 for any model (a warning, as backretrieval's recall functions give)
    enough_for_k("retrieval", len(image_ids), ks, "images in the gallery", f"raise {option('max_images')}" if max_images else None,
                 warn=True)
    encoder, info = resolve_model(model, name, device)
    image_emb = _encode_images(encoder, split, row_of, batch_size)
    captions = [m for m in metas if str(m["image_id"]) in row_of]
    caption_langs = [m["lang"] for m in captions]
    text_emb = encoder.encode_text([m["caption"] for m in captions], batch_size=batch_size, head="cross",
                                   **language_kwargs(encoder, caption_langs))
    res = retrieval_per_language(text_emb, caption_langs, image_emb, [row_of[str(m["image_id"])] for m in captions],
                                 ks=ks)
    config = {"split": str(split), "languages": list(languages) if languages else None, "ks": list(ks), "max_images": max_images,
              "seed": seed}
    return Result("retrieval", res, sorted(res["per_language"]), model=info, dataset=dataset_info(split),
                  config=config, details={"n_images": len(image_ids), "n_captions": len(captions)})
