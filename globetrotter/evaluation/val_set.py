"""BackRetrieval over a non-parallel split (no parallel text needed): the trainer's checkpoint selection and the
ranking choice of ``eval.py select`` both score text models on it.

The image similarity ``g`` (``image_features``) must stay fixed across the models compared: ``pixels`` (colour
thumbnails, no weights), ``features:PATH`` (the
whole-image rows of an image-feature cache, built from a frozen backbone or imported: no picture decoded), or a
BackRetrieval image-model spec such as ``timm:efficientnet_lite0:package`` or ``timm:resnet50:/path/weights.safetensors``
(cached beside the split).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np
from PIL import Image

from globetrotter.errors import UserError

if TYPE_CHECKING:
    from globetrotter.config import TrainConfig


def pixel_features(images: list[Image.Image], side: int = 16) -> np.ndarray:
    """Centred, L2-normalised colour thumbnails (N, side*side*3): a weight-free image similarity."""
    x = np.stack([np.asarray(im.convert("RGB").resize((side, side), Image.Resampling.BILINEAR), np.float32).ravel()
                  for im in images])
    x -= x.mean(axis=1, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-6)


def image_features_of(cfg: TrainConfig, split: str) -> str:
    """A run's ``val.image_features`` as :class:`BackRetrievalSet` reads it: ``features`` becomes ``features:PATH``,
    the run's image-feature cache for ``split`` (built once for a frozen backbone, checked against the config)."""
    if cfg.val.image_features != "features":
        return cfg.val.image_features
    from globetrotter.data.feature_cache_build import ensure_feature_cache

    return f"features:{ensure_feature_cache(cfg, split).path}"


# BkR queries of one validation, at most (spread evenly over the ordered language pairs): beyond, each pair's BkR is
# estimated from a seeded sample of its queries against all its captions (standard error of the mean <= 0.0013)
QUERY_BUDGET = 150_000
_CHUNK = 4096  # images decoded and featurised at once


def _queries_per_pair(counts: list[int]) -> int | None:
    """Queries sampled in each ordered pair of languages with these caption counts; None: every caption queries."""
    if len(counts) < 2:
        return None
    share = QUERY_BUDGET // (len(counts) * (len(counts) - 1))
    return share if max(counts) > share else None


class BackRetrievalSet:
    """At most ``max_per_lang`` captions per language of ``split`` (a ``seed``-ed sample; None: all) with their image
    features; :meth:`evaluate` scores text embeddings or any text similarity on every ordered language pair.

    Only the distinct images of the kept captions are decoded, a chunk at a time (none with ``features:PATH``: g is
    read from that cache), and only their features are kept, in float16 when the set is large enough for
    :meth:`evaluate` to sample its queries (:data:`QUERY_BUDGET`).
    """

    def __init__(self, split: str | Path, max_per_lang: int | None = 200, seed: int = 0,
                 image_features: str = "pixels", ks: Sequence[int] = (1, 5, 10), device: str = "cpu",
                 captions: list[tuple[str, str, str]] | None = None) -> None:
        """``captions``: every caption's ``(text, language, image id)`` in split order, when the caller has read them
        (else the split is read for them; with ``max_per_lang`` None they come with the pictures' pass)."""
        from data_prep.shards import read_manifest

        self.split, self.seed, self.ks, self.image_spec = Path(split), seed, tuple(ks), image_features
        if not (self.split / "manifest.json").is_file():
            raise UserError(f"{self.split}: no split here (expected manifest.json) for BackRetrieval")
        if image_features.startswith("features:"):  # rows of a feature cache: the captions alone are read
            self._from_cache(Path(image_features.split(":", 1)[1]), max_per_lang, captions)
            self._check_one_language()
            return
        from globetrotter.data.feature_cache_build import require_pictures

        require_pictures(self.split, read_manifest(self.split), f"BackRetrieval with image features {image_features!r}")
        extract = self._feature_extractor(image_features, device)
        if max_per_lang is None:  # every caption: one pass over the shards, each image decoded at its first caption
            manifest = read_manifest(self.split)
            counts, capacity = manifest["languages"].values(), int(manifest["num_samples"])  # images <= captions
            self.texts: list[str] = []
            langs: list[str] = []
            ids: list[str] = []
            chunks = self._decoded_chunks(None, extract, (self.texts, langs, ids))
        else:  # captions first, then only the sampled captions' images are decoded
            keep, self.texts, langs, ids = self._sample_captions(max_per_lang, captions)
            counts = np.unique(langs, return_counts=True)[1].tolist()
            # split rows of each distinct image's first kept caption, in split order
            firsts = sorted({image: j for j, image in reversed(list(zip(keep.tolist(), ids)))}.values())
            chunks, capacity = self._decoded_chunks(np.array(firsts, dtype=np.int64), extract), len(firsts)
        dtype = np.float16 if _queries_per_pair(list(counts)) is not None else np.float32
        distinct, filled = np.zeros((0, 1), dtype), 0
        for feats in chunks:  # written in place: no list of chunks held
            if filled + len(feats) > capacity:  # more images than the manifest's num_samples: its one-line error
                from data_prep.shards import check_manifest_counts

                check_manifest_counts(self.split)
            if not filled:
                distinct = np.empty((capacity, feats.shape[1]), dtype)
            distinct[filled:filled + len(feats)] = feats
            filled += len(feats)
        self.langs, self.image_ids = np.array(langs), np.array(ids)
        order: dict[str, int] = {}
        image_of = np.array([order.setdefault(image, len(order)) for image in ids], dtype=np.int64)
        distinct = distinct[:filled]
        same = filled == len(ids) and bool((image_of == np.arange(filled)).all())
        self.image_feats = distinct if same else distinct[image_of]
        self._check_one_language()

    def _check_one_language(self) -> None:
        """A one-line error when a kept image is captioned in more than one language: BackRetrieval needs a split
        without parallel text (a train/val split), where no caption's translation is among its candidates; and when
        the split has captions in fewer than two languages, which BackRetrieval needs (a language pair)."""
        from data_prep.split_rule import images_in_several_languages

        found = sorted(set(self.langs.tolist()))
        if len(found) < 2:
            raise UserError(f"{self.split}: captions in {len(found)} language(s) ({','.join(found)}); BackRetrieval "
                            f"needs two or more (a val split of several languages, each image in one)")
        several = images_in_several_languages({"image_id": image, "lang": lang}
                                              for image, lang in zip(self.image_ids.tolist(), self.langs.tolist()))
        if several:
            first, langs = next(iter(several.items()))
            raise UserError(f"{self.split}: {len(several)} image(s) captioned in more than one language (e.g. "
                            f"{first!r}: {','.join(langs)}); BackRetrieval scores a split without parallel text, each "
                            f"image in one language (a val split, not a parallel test split)")

    def _sample_captions(self, max_per_lang: int | None, captions: list[tuple[str, str, str]] | None = None
                         ) -> tuple[np.ndarray, list[str], list[str], list[str]]:
        """``(split rows, texts, languages, image ids)`` of at most ``max_per_lang`` captions per language (a
        :attr:`seed`-ed sample, in split order; None: every caption), from ``captions`` when given (else read)."""
        from data_prep.shards import iter_metas

        metas = captions if captions is not None else [
            (m["caption"], m["lang"], str(m["image_id"])) for m in iter_metas(self.split)]
        langs = np.array([m[1] for m in metas])
        if max_per_lang is None:
            keep = np.arange(len(metas))
        else:
            rng = np.random.default_rng(self.seed)
            keep = np.sort(np.concatenate([rng.permutation(np.flatnonzero(langs == lang))[:max_per_lang]
                                           for lang in dict.fromkeys(langs.tolist())]))
        return keep, [metas[j][0] for j in keep], langs[keep].tolist(), [metas[j][2] for j in keep]

    def _from_cache(self, path: Path, max_per_lang: int | None,
                    captions: list[tuple[str, str, str]] | None = None) -> None:
        """Captions from the split, ``g`` the whole-image rows of the feature cache at ``path`` (any image of the
        split it lacks: a one-line error naming it)."""
        from globetrotter.data.feature_cache import load_feature_cache

        cache = load_feature_cache(path)
        _, self.texts, langs, ids = self._sample_captions(max_per_lang, captions)
        self.langs, self.image_ids = np.array(langs), np.array(ids)
        rows = cache.rows(ids, self.split)
        dtype = np.float16 if self.queries_per_pair is not None else np.float32
        self.image_feats = np.empty((len(rows), cache.features.shape[2]), dtype)
        for s in range(0, len(rows), 65536):  # a chunk at a time from the memory map, in the cache's row order
            chunk = rows[s:s + 65536]
            order = np.argsort(chunk, kind="stable")
            self.image_feats[s + order] = cache.features[chunk[order], 0]

    def _feature_extractor(self, image_features: str, device: str = "cpu") -> Callable[[list, list], np.ndarray]:
        """``(pictures, image ids) -> features`` of the fixed ``g`` (a network's on ``device``)."""
        if image_features == "pixels":
            return lambda pictures, _ids: pixel_features(pictures)
        if not image_features.startswith("timm:"):
            hint = " (a run's own cache: give its folder as features:PATH)" if image_features == "features" else ""
            raise UserError(f"image features {image_features!r}: expected pixels, features:PATH or "
                            f"timm:NAME[:WEIGHTS]{hint}")
        # timm:NAME[:WEIGHTS], WEIGHTS a local file or "package" (offline EfficientNet-Lite0/1/2)
        from backretrieval.errors import BackRetrievalError, cli_option_names
        from backretrieval.images import ImageFeatureExtractor

        from data_prep.shards import read_manifest

        _, name, *weights = image_features.split(":", 2)
        # once per distinct image, cached beside the split for later runs; keyed by the split's content checksum and
        # the image ids, as backretrieval.data keys them: a split converted again (--overwrite) may hold other
        # pictures of those ids
        checksum = read_manifest(self.split).get("checksum")
        extractor = ImageFeatureExtractor(name, weights[0] if weights else None, progress=False, device=device,
                                          cache_dir=self.split / "bkr-image-features")
        try:  # the model and weights checked first, worded as arguments: the backretrieval command line's flags
            with cli_option_names(False):  # (--image-model, --image-weights) are no flags of eval.py or train.py
                extractor.check()
        except BackRetrievalError as err:
            raise UserError(f"image features {image_features!r}: {err}") from None
        return lambda pictures, ids: extractor.extract(pictures, ids=[f"{checksum}:{i}" for i in ids])

    def _decoded_chunks(self, rows: np.ndarray | None, extract: Callable[[list, list], np.ndarray], record: tuple[list, list, list] | None = None
                        ) -> Iterator[np.ndarray]:
        """Decode the pictures at split ``rows`` (sorted; None: each image at its first caption, appending every
        caption's text, language and image id to ``record``) a chunk at a time; yield each chunk's features. Distinct
        images come in the order of their first caption."""
        from data_prep.shards import decode_sample_image, iter_split

        pictures: list[Image.Image | np.ndarray] = []
        ids: list[str] = []
        seen: set = set()
        wanted = iter([] if rows is None else rows.tolist())
        next_row = next(wanted, None)
        for i, (shard, key, ext, data, meta) in enumerate(iter_split(self.split)):
            if rows is None:
                assert record is not None  # rows=None: __init__ gives the lists every caption is appended to
                for field, out in zip(("caption", "lang", "image_id"), record):
                    out.append(meta[field])
                if meta["image_id"] in seen:
                    continue
                seen.add(meta["image_id"])
            elif next_row is None:
                break
            elif i != next_row:
                continue
            else:
                next_row = next(wanted, None)
            pictures.append(decode_sample_image(data, ext, shard, key))  # one line naming both when it does not decode
            ids.append(str(meta["image_id"]))
            if len(pictures) == _CHUNK:
                yield extract(pictures, ids)
                pictures, ids = [], []
        if pictures:
            yield extract(pictures, ids)

    def saturation_warning(self) -> str | None:
        """The one warning line when a BkR@K cannot tell models apart (:meth:`saturated_ks`), else None."""
        saturated = self.saturated_ks()
        if not saturated:
            return None
        return (f"warning: val/bkr@{','.join(map(str, saturated))} is 1 for any model: {self.split} has too few images "
                f"in {next(iter(saturated.values()))} to tell models apart by it; use a larger val split")

    def saturated_ks(self) -> dict[int, str]:
        """``{K: language}`` for each K at which BkR@K is 1 for any model: a language with at most K distinct images
        (its back-retrieval ranks them all), named with its image count."""
        counts = {lang: len(set(self.image_ids[self.langs == lang].tolist())) for lang in sorted(set(self.langs.tolist()))}
        smallest = min(counts, key=counts.__getitem__) if counts else None
        return {k: f"{smallest} ({counts[smallest]} images)" for k in self.ks if smallest and counts[smallest] <= k}

    @property
    def queries_per_pair(self) -> int | None:
        """Queries :meth:`evaluate` samples in each language pair (:data:`QUERY_BUDGET`); None: every caption."""
        return _queries_per_pair(np.unique(self.langs, return_counts=True)[1].tolist())

    def keep_languages(self, languages: Sequence[str]) -> None:
        """Score only the captions of ``languages`` (and their pairs) from now on."""
        keep = np.isin(self.langs, list(languages))
        if len(set(self.langs[keep])) < 2:
            raise UserError(f"{self.split}: BackRetrieval needs captions in two of {','.join(sorted(languages))}; the "
                            f"split has {','.join(sorted(set(self.langs.tolist())))}")
        idx = np.flatnonzero(keep)
        self.texts = [self.texts[i] for i in idx]
        self.langs, self.image_ids = self.langs[idx], self.image_ids[idx]
        self.image_feats = self.image_feats[idx]

    def evaluate(self, text_emb: np.ndarray | None = None,
                 text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
                 ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(metrics, hits)`` of ``text_emb`` (rows of :attr:`texts`; cosine) or of ``text_scores(src_rows,
        tgt_rows)``: ``metrics["val/bkr@K"]`` the mean over the ordered language pairs, ``hits["val/bkr@K"]`` the
        per-query hits of every pair concatenated in a fixed order (the same queries at every call, so two models'
        hits are paired). Past :data:`QUERY_BUDGET` queries, each pair's figure is estimated from
        :attr:`queries_per_pair` seeded queries against all of its captions (docs/scale.md, Validation)."""
        from backretrieval.approximate import ApproxConfig
        from backretrieval.pairs import evaluate_pairs

        # a sample of each pair's queries (QUERY_BUDGET), and step 4 by one faiss index per source language: exact
        # text search, exactly re-scored image candidates
        per_pair = self.queries_per_pair
        with _saturation_said_once():
            result = evaluate_pairs(text_emb, self.langs, self.image_feats, self.image_ids, ks=self.ks, seed=self.seed,
                                    max_rank=max(self.ks), with_corr=False, return_hits=True, text_scores=text_scores,
                                    max_queries=per_pair, approximate=ApproxConfig(index="exact") if per_pair else False)
        metrics = {f"val/bkr@{k}": float(result["mean"][f"bkr@{k}"]) for k in self.ks}
        return metrics, {f"val/bkr@{k}": result["hits"][f"bkr@{k}"] for k in self.ks}

    def language_blocks(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """``(language, src, tgt)`` of :meth:`evaluate_across_languages`, the languages sorted: its queries ``src``
        (the rows of ``language``) and their candidates ``tgt`` (the rows of every other language, but those showing an
        image of the source side)."""
        blocks = []
        for lang in sorted(set(self.langs.tolist())):
            src = np.flatnonzero(self.langs == lang)
            tgt = np.flatnonzero((self.langs != lang) & ~np.isin(self.image_ids, self.image_ids[src]))
            blocks.append((lang, src, tgt))
        return blocks

    def evaluate_across_languages(self, text_scores: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                                  *, retrieved: dict[str, np.ndarray] | None = None
                                  ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """:meth:`evaluate` with each language's queries retrieving among the captions of *every* other language at
        once (BkR's step 2 over the candidates sentence translation ranks, not one target language at a time), then
        back-retrieving among their own language's images; ``metrics`` the mean over the source languages. A ranking
        whose scores differ between target languages (CSLS's query term ``r_b(x)``) is judged where it acts; with two
        languages it is :meth:`evaluate`. Targets showing an image of the source side are left out
        (:meth:`language_blocks`). Instead of ``text_scores``, ``retrieved[language]`` may give each query's best
        candidate (the index into ``tgt`` of the row maximum of its scores, the lowest of ties), found a block of
        rows at a time: the same figures without any [src, tgt] matrix."""
        from backretrieval.metric import bkr_recall

        if (text_scores is None) == (retrieved is None):
            raise ValueError("evaluate_across_languages: give one of text_scores and retrieved")
        images = self.image_feats
        per_k: dict[int, list[float]] = {k: [] for k in self.ks}
        hits: dict[int, list[np.ndarray]] = {k: [] for k in self.ks}
        for lang, src, tgt in self.language_blocks():
            text_sim = text_scores(src, tgt) if text_scores is not None else None  # one of the two: checked above
            best = retrieved[lang] if retrieved is not None else None
            with _saturation_said_once():
                res = bkr_recall(None, images[src], None, images[tgt], self.ks, src_image_ids=self.image_ids[src],
                                 max_rank=max(self.ks), text_sim=text_sim, retrieved=best)
            for k in self.ks:
                per_k[k].append(res[f"bkr@{k}"])
                hits[k].append(res["hits"][k])
        metrics = {f"val/bkr@{k}": float(np.mean(per_k[k])) for k in self.ks}
        return metrics, {f"val/bkr@{k}": np.concatenate(hits[k]) for k in self.ks}


@contextmanager
def _saturation_said_once() -> Iterator[None]:
    """BackRetrieval's warning that a Recall@K is 1 for any model, silenced: the set says it once, for the whole
    set (:meth:`BackRetrievalSet.saturation_warning`), not once per language pair and call."""
    from backretrieval.errors import BackRetrievalWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*would be 1 for any model", category=BackRetrievalWarning)
        yield
