"""How far the image features bound the full model: the same recipe trained on two kinds of imported image vectors.

    cd /path/to/repo && OMP_NUM_THREADS=1 .venv/bin/python experiments/study_image_features.py \\
        --split outputs/flickr8k/train --out outputs/flickr8k-image-vectors

writes two feature caches of the train split's images, each imported as ``globetrotter-data features import`` does
(the whole image only, float16), and prints the training command of each:

* ``efficientnet``: the control, the whole-image row of the split's EfficientNet-Lite0 cache (``--cache``, default
  ``SPLIT/features``), what ``configs/flickr8k.yaml`` trains on minus its augmented views;
* ``described``: an oracle's image vector, what people said about the image: the mean multilingual-USE embedding of
  the image's official English Flickr8k captions (``--flickr8k``), **leaving out** the caption that Multi30K's
  de/fr/cs captions were translated from (``--multi30k``: a Flickr8k caption whose word set overlaps a Multi30K task-1
  English caption of the same photo by more than ``--overlap`` (Jaccard) is dropped; docs/results.md says how many
  remain on the README's conversion). No training caption's translation enters the vector, but it is built from
  captions: a model trained on it shows what image features that carry what people see in a picture would give, and
  is never a method.

With ``--blend W`` (repeatable) it also writes ``blend-W``: the two joined so that the oracle gives a share ``W`` of
every cosine between two images (each centred and scaled to unit length, then weighted by ``sqrt(W)`` and
``sqrt(1 - W)``): image vectors of every quality between the two, to read how good an encoder the recipe needs
(docs/results.md, "How good the image vectors must be").

With ``--own-captions SPLIT`` it writes one cache instead, ``own-captions``: each image's own captions in the
one-language split (its language only: no parallel text), as the ``tfidf`` baseline's character n-gram vectors
reduced to 512 dimensions by truncated SVD and averaged: what is said of each picture in its own words, a target to
fine-tune the image backbone on (``experiments/finetune_backbone.py``) that a method may use.

With ``--from-model RUN`` it writes one cache instead, ``self-NAME``: each image's vector is the mean embedding of
its own captions (the run's train split, ``data.root``/``data.train_split``; the cross-modal head) under a trained full model
(``globetrotter.training.backbone_finetune.model_readings``). No parallel text enters it: trained on directly, a second
round of the recipe on the first round's view of its images (docs/results.md measures it; the recipe's round two
fine-tunes the backbone to these vectors instead: ``globetrotter-data features finetune``).

All are read with ``model.image_backbone=imported loss.image=0`` (imported vectors have no augmented views), so they
differ from each other in the vectors alone. docs/results.md compares them, by sentence translation on the parallel
val split (``experiments/oracle_ranking.py``), with the images-matched supervised twin. An image without a remaining
English caption is refused (one line naming it).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo's packages, however installed

from backretrieval.cli.common import share_between_0_and_1  # noqa: E402
from backretrieval.records import json_text  # noqa: E402
from data_prep.converters.common import Caption  # noqa: E402
from data_prep.converters.flickr8k import read_flickr8k  # noqa: E402
from data_prep.converters.images import flickr_photo_id  # noqa: E402
from data_prep.converters.multi30k import read_multi30k  # noqa: E402
from globetrotter.argtypes import positive_int  # noqa: E402
from globetrotter.data.feature_cache import load_feature_cache  # noqa: E402
from globetrotter.data.feature_import import import_embeddings, split_image_ids  # noqa: E402
from globetrotter.errors import UserError  # noqa: E402
from globetrotter.image_ridge import unit_centred  # noqa: E402
from globetrotter.training.backbone_finetune import mean_embeddings, model_readings, own_captions  # noqa: E402

TRAIN = ("OMP_NUM_THREADS=1 .venv/bin/python train.py --config configs/flickr8k.yaml seed=S run_name={name}-sS "
         "model.image_backbone=imported model.image_pretrained={name} data.features={cache} loss.image=0")


def words(text: str) -> frozenset[str]:
    """The words of a caption, lower-cased, with every character but a-z and space dropped ("T-shirt" -> "tshirt")."""
    return frozenset(re.sub(r"[^a-z ]", "", text.lower()).split())


def is_translated_source(caption: str, sources: Iterable[frozenset[str]], overlap: float) -> bool:
    """True when ``caption``'s word set overlaps one of ``sources`` by more than ``overlap`` (Jaccard)."""
    own = words(caption)
    return any(len(own & s) / max(len(own | s), 1) > overlap for s in sources)


def described_captions(image_ids: list[str], flickr8k: Iterable, multi30k: Iterable,
                       overlap: float = 0.8) -> list[list[str]]:
    """Each image's English Flickr8k captions (``Caption`` records of ``read_flickr8k``) minus those a Multi30K
    task-1 English caption of the same Flickr photo (records of ``read_multi30k``) was copied from; matched by photo
    id. A one-line error names the first image left with none."""
    sources: dict[str, list[frozenset[str]]] = defaultdict(list)
    for rec in multi30k:
        if isinstance(rec, Caption) and rec.lang == "en" and rec.key[0] == "multi30k-task1":
            sources[flickr_photo_id(rec.images[0]) or rec.images[0]].append(words(rec.text))
    captions: dict[str, list[str]] = defaultdict(list)
    for rec in flickr8k:
        if isinstance(rec, Caption):
            captions[flickr_photo_id(rec.images[0]) or rec.images[0]].append(rec.text)
    out = []
    for image in image_ids:
        photo = flickr_photo_id(image) or image
        kept = [c for c in captions.get(photo, []) if not is_translated_source(c, sources.get(photo, []), overlap)]
        if not kept:
            raise UserError(f"image {image}: no English Flickr8k caption left (of {len(captions.get(photo, []))}) "
                            "once the one Multi30K translated is left out")
        out.append(kept)
    return out


def check_sources(flickr8k: str | Path, multi30k: str | Path) -> None:
    """One-line errors for a ``--flickr8k`` file or ``--multi30k`` folder that is not there (their defaults are paths
    relative to the current folder): a missing Flickr8k file read as no caption at all, and the study stopped on
    "image ...: no English Flickr8k caption left (of 0)", after writing the control's cache."""
    for flag, path, kind, found in (("--flickr8k", Path(flickr8k), "file", Path(flickr8k).is_file()),
                                    ("--multi30k", Path(multi30k), "folder", Path(multi30k).is_dir())):
        if not found:
            raise UserError(f"{flag} {path}: no such {kind} (from {Path.cwd()}); give your copy's path")


def check_share(share: float) -> None:
    """Refuse an oracle's share of ``--blend`` outside (0, 1), in one line."""
    if not 0 < share < 1:
        raise UserError(f"--blend {share:g}: the oracle's share must be between 0 and 1 (exclusive)")


def blend(oracle: np.ndarray, control: np.ndarray, share: float) -> np.ndarray:
    """Rows of ``oracle`` and ``control`` [images, *] joined, each centred and of unit length, weighted so that the
    cosine of two rows is ``share`` x their oracle cosine + (1 - share) x their control cosine (float32)."""
    check_share(share)
    parts = [np.sqrt(weight) * unit_centred(vectors) for vectors, weight in ((oracle, share), (control, 1 - share))]
    return np.concatenate(parts, axis=1).astype(np.float32)


def caption_topics(texts: list[str], dim: int = 512, seed: int = 0) -> np.ndarray:
    """Each text's character n-gram TF-IDF (the ``tfidf`` baseline's, fitted on ``texts``) reduced to ``dim``
    dimensions by truncated SVD (LSA), float32 [len(texts), dim]."""
    from sklearn.decomposition import TruncatedSVD

    from globetrotter.evaluation.tfidf import TfidfEncoder

    bags = TfidfEncoder().fit(texts).encode_text(texts)
    return TruncatedSVD(min(dim, bags.shape[1] - 1), random_state=seed).fit_transform(bags).astype(np.float32)


def write_cache(split: Path, vectors: np.ndarray, ids: list[str], name: str, out_dir: Path) -> Path:
    """Import ``vectors`` (row i: image ``ids[i]``) as the split's feature cache ``out_dir/name``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    npy, id_file = out_dir / f"{name}.npy", out_dir / f"{name}.ids.json"
    np.save(npy, vectors)
    id_file.write_text(json_text(ids))
    cache = out_dir / name
    import_embeddings(split, npy, cache, name, ids=id_file, force=True)
    return cache


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="outputs/flickr8k/train", help="the train split (default: %(default)s)")
    ap.add_argument("--cache", help="its EfficientNet-Lite0 feature cache (default: SPLIT/features)")
    ap.add_argument("--flickr8k", default="../shared/data/flickr8k/flickr8k/Flickr8k.token.txt",
                    help="the official English Flickr8k caption file (default: %(default)s, a path relative to the "
                         "current folder: give your copy's)")
    ap.add_argument("--multi30k", default="../shared/data/flickr8k/multi30k",
                    help="the Multi30K folder, to leave out the captions it translated (default: %(default)s, a "
                         "path relative to the current folder: give your copy's)")
    ap.add_argument("--overlap", type=share_between_0_and_1, default=0.8,
                    help="word-set overlap (Jaccard) above which a caption counts as translated (default: %(default)s)")
    ap.add_argument("--out", dest="out_dir", default="outputs/flickr8k-image-vectors", metavar="DIR",
                    help="where the caches go (default: %(default)s)")
    ap.add_argument("--from-model", type=Path, metavar="RUN",
                    help="write only self-NAME: each image's mean caption embedding under this trained run")
    ap.add_argument("--own-captions", metavar="SPLIT",
                    help="write only own-captions: each image's own captions in this one-language split, as "
                         "character n-gram TF-IDF reduced to 512 dimensions (a fine-tuning target without parallel text)")
    ap.add_argument("--blend", type=float, action="append", default=[], metavar="W",
                    help="also write blend-W, the oracle's share W of every cosine (repeatable)")
    ap.add_argument("--threads", type=positive_int, default=2,
                    help="threads of the sentence encoder (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        from backretrieval.text_models import USEEmbedder

        for share in args.blend:  # before any caption is encoded or cache written
            check_share(share)
        split, out_dir = Path(args.split), Path(args.out_dir)
        if args.own_captions is None and args.from_model is None:
            check_sources(args.flickr8k, args.multi30k)  # before any cache is read or written
        ids = split_image_ids(split)
        if args.own_captions is not None:
            from data_prep.shards import read_captions

            pairs = own_captions(ids, read_captions(args.own_captions))
            vectors = mean_embeddings(pairs, lambda flat: caption_topics([c for c, _ in flat]))
            path = write_cache(split, vectors, ids, "own-captions", out_dir)
            print(f"{len(ids)} images, {sum(map(len, pairs))} captions: {path}")
            return 0
        if args.from_model is not None:
            name = f"self-{args.from_model.name}"
            path = write_cache(split, model_readings(args.from_model, ids), ids, name, out_dir)
            print(TRAIN.format(name=name, cache=path))
            return 0
        cache = load_feature_cache(args.cache or split / "features")
        control = np.asarray(cache.features[cache.rows(ids, split), 0], dtype=np.float32)
        written = {"efficientnet": write_cache(split, control, ids, "efficientnet", out_dir)}
        captions = described_captions(ids, read_flickr8k(args.flickr8k, "en"), read_multi30k(args.multi30k, (1,)),
                                      args.overlap)
        vectors = mean_embeddings(captions, USEEmbedder(threads=args.threads).encode)
        written["described"] = write_cache(split, vectors, ids, "described", out_dir)
        if args.blend:  # the two as written (float16), so that a blend is made of the caches it is read beside
            stored = load_feature_cache(written["described"])
            oracle = np.asarray(stored.features[stored.rows(ids, split), 0], dtype=np.float32)
        for share in args.blend:
            written[f"blend-{share:g}"] = write_cache(split, blend(oracle, control, share), ids, f"blend-{share:g}",
                                                      out_dir)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{len(ids)} images; English captions per image after leaving out the translated one: "
          f"{np.mean([len(c) for c in captions]):.2f}")
    for name, path in written.items():
        print(TRAIN.format(name=name, cache=path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
