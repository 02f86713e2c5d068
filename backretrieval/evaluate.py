"""Text models on a shard split: BkR for every language pair, and the paper's protocol over models.

The library side of ``backretrieval eval`` and ``backretrieval correlate``. Both take a split
folder written by ``globetrotter-data`` (or a loaded :class:`backretrieval.data.SplitData`),
text models as spec strings (``[NAME=]SPEC``, :func:`backretrieval.embedders.parse_model_specs`) or
text embedder objects (:class:`backretrieval.TextEmbedder`: a ``name`` and ``encode(texts)``, such as a
loaded ``globetrotter`` model), and an image model g (:func:`backretrieval.images.image_feature_extractor`;
None: the split's stored features):

* :func:`evaluate_split`: :func:`backretrieval.evaluate_pairs` per model, every ordered language
  pair (paper Fig. 3);
* :func:`correlate_split`: :func:`backretrieval.run_protocol` per language pair, BkR and CORR
  against XLR over the models (paper Table 1, Fig. 2).

Their results serialise to the commands' JSON records (``to_record()``) and draw the commands'
figures (``save_plots(out)``).
"""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, Union

import numpy as np

from .approximate import ApproxConfig
from .data import SplitData, aligned_pair, check_image_model, image_features, load_split
from .embedders import (SPEC_FORMS, check_spec, check_spec_inputs, embed_captions, is_text_embedder, load_embedder,
                         parse_model_specs, unsupported_languages)
from .errors import BackRetrievalError, BackRetrievalWarning, option
from .files import PathLike, enough_for_k, require_sequence
from .hubness import DEFAULT_CSLS_K
from .images import ImageModel  # numpy and PIL only (torch and timm load with a CNN): the hints resolve
from .metric import DEFAULT_KS
from .metric_checks import approx_config, censored_max_rank, check_ks, check_recall_options
from .pairs import check_pair_options, evaluate_pairs, fewest_source_images
from .plots import metric_name, pair_boxplot, pair_heatmap, scatter_bkr_vs_xlr
from .protocol import DEFAULT_SEEDS, format_table, run_protocol, sample_non_matching
from .records import json_ready
from .renamed import renamed_keywords
from .scoring import DEFAULT_CORR_PAIRS
from .text_models import TextEmbedder
from .uncertainty import DEFAULT_BOOTSTRAP, DEFAULT_LEVEL

DEFAULT_PROTOCOL_N = 10_000  # items per side and seed (paper 3.1), at most half the pair's items
# a text model: a spec string (load_embedder) or an object with .name and .encode(texts) (TextEmbedder)
Model = Union[str, TextEmbedder]
Models = Union[Sequence[Model], Mapping[str, Model]]


@dataclass
class EmbeddedSplit:
    """A split with its image features and every model's caption embeddings (one row per caption)."""

    data: SplitData
    features: np.ndarray  # (distinct images, D)
    image_model: str | None  # how records name g (None: the split's stored features)
    specs: dict[str, str | None]  # label -> spec (None: a text embedder object was given)
    embedders: dict[str, str]  # label -> embedder name
    embeddings: dict[str, np.ndarray]  # label -> (captions, d)

    def header(self) -> dict:
        """The record fields naming the data: split folder, checksum, ``image_model`` (None: the stored features)."""
        return {"data": str(self.data.split_dir), "checksum": self.data.checksum, "image_model": self.image_model}


def _image_label(extractor: ImageModel | None, image_format: str) -> str | None:
    """How g is named in the records: its spec, or None where the split's stored features are g."""
    if extractor is None or (getattr(extractor, "kind", "cnn") == "cnn" and image_format == "npy"):
        return None
    return getattr(extractor, "spec", None)


def model_specs(models: Models) -> dict[str, Model]:
    """{label: model} from a mapping as is, or from a sequence of ``[NAME=]SPEC`` strings and text embedder objects
    (:class:`backretrieval.TextEmbedder`, labelled by their ``name``); every spec checked without loading its model
    (:func:`backretrieval.embedders.check_spec`), so a mistyped one is reported before any work. Anything else, or a
    label given twice, is a one-line error."""
    items: list[tuple[str, str | None, Model]]
    if isinstance(models, Mapping):
        items = [(f"models[{label!r}]", label, model) for label, model in models.items()]
    else:
        require_sequence(models, "models", "model specs or text embedders")
        items = [(f"models[{i}]", None, model) for i, model in enumerate(models)]
    out: dict[str, Model] = {}
    for where, label, model in items:
        labelled: Mapping[str, Model]
        if isinstance(model, str):
            labelled = {label: model} if label is not None else parse_model_specs([model])
        elif is_text_embedder(model):
            labelled = {model.name if label is None else label: model}
        else:
            raise BackRetrievalError(f"{where}: expected a spec string ({SPEC_FORMS}) or a text embedder (an object "
                                     f"with a str .name and .encode(texts)), got {type(model).__name__} "
                                     f"({model!r:.60})")
        for name, value in labelled.items():
            if name in out:
                raise BackRetrievalError(f"model {name!r} given twice")
            if isinstance(value, str):
                check_spec(value)
            out[name] = value
    return out


def plot_name(label: str) -> str:
    """A model label as its plots' file names hold it: characters other than letters, digits and ``-_.`` as ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def check_plot_names(labels: Iterable[str]) -> None:
    """One-line error naming two labels whose plots would share a file name (:func:`plot_name`): the second model's
    heat maps replaced the first's in silence."""
    seen: dict[str, str] = {}
    for label in labels:
        other = seen.setdefault(plot_name(label), label)
        if other != label:
            raise BackRetrievalError(f"models {other!r} and {label!r} would write their heat maps to one file "
                                     f"(heatmap_{plot_name(label)}_*.png); give labels that differ in letters, digits "
                                     "or '-_.'")


def embed_split(data: PathLike | SplitData, models: Mapping[str, Model],
                extractor: ImageModel | None = None, languages: Sequence[str] | None = None, *,
                online: bool = False, progress: bool = True,
                check: Callable[[SplitData], None] | None = None) -> EmbeddedSplit:
    """Load the split (only ``languages``), its image features under g, and every model's caption embeddings.

    ``models``: {label: spec string or text embedder object} (:func:`model_specs`). The specs and what they read
    (:func:`backretrieval.embedders.check_spec_inputs`: ``.npy`` files and sidecars, packages, an entry point's own
    check), then g's weights (where the split stores pixels), are checked before the split is read; once its captions
    are read, before g's features or any embedding, that every model has a row for each caption, and ``check(data)``
    (the caller's own preconditions)."""
    require_sequence(languages, "languages", "language codes")
    specs = [model for model in models.values() if isinstance(model, str)]
    for spec in specs:
        check_spec_inputs(spec)
    check_image_model(data, extractor)
    data = data if isinstance(data, SplitData) else load_split(data, languages)
    for spec in specs:
        check_spec_inputs(spec, data.texts)
    if check is not None:
        check(data)
    features = image_features(data, extractor)
    cache: dict = {}
    embedded = {}
    for label, model in models.items():
        embedder = load_embedder(model, online=online, progress=progress, cache=cache) if isinstance(model, str) \
            else model
        lacking = unsupported_languages(embedder, sorted(set(data.langs.tolist())))
        if lacking:  # scored all the same: the user decides what the figures of those pairs are worth
            spec = model if isinstance(model, str) else embedder.name
            name = label if label == spec else f"{label} ({spec})"
            warnings.warn(f"model {name} does not support {', '.join(lacking)} (not among the languages it declares); "
                          "its pairs with them are scored all the same", BackRetrievalWarning, stacklevel=2)
        embedded[label] = embed_captions(embedder, data.texts)
    return EmbeddedSplit(data, features, _image_label(extractor, data.image_format),
                         {label: model if isinstance(model, str) else None for label, model in models.items()},
                         {label: name for label, (name, _) in embedded.items()},
                         {label: emb for label, (_, emb) in embedded.items()})


def _settings(approximate: bool | ApproxConfig, ks: Sequence[int]) -> dict | None:
    """The approximate mode's settings as a record lists them (index, candidates, nprobe, image side, ...; None:
    exact)."""
    config = approx_config(approximate, tuple(ks))
    return None if config is None else asdict(config)


@dataclass
class SplitEvaluation:
    """What :func:`evaluate_split` measured; ``to_record()`` is ``backretrieval eval``'s results.json."""

    split: EmbeddedSplit
    results: dict[str, dict]  # label -> evaluate_pairs result
    options: dict  # ks, ties, seed, max_per_lang, max_rank, retrieval, csls_k, approximate (+ its settings), bootstrap, level

    def to_record(self, inputs: Mapping | None = None) -> dict:
        """The JSON-ready record; ``inputs`` are the options it was run with (the command line's arguments), as
        ``score``'s record lists them."""
        models = {label: {"spec": self.split.specs[label], "embedder": self.split.embedders[label],
                          "langs": res["langs"], "mean": res["mean"], "pairs": res["pairs"], "matrix": res["matrix"]}
                  for label, res in self.results.items()}
        return json_ready({"task": "backretrieval.eval", "inputs": dict(inputs or {}), **self.split.header(),
                           **self.options, "models": models})

    @renamed_keywords(out_dir="out")
    def save_plots(self, out: PathLike) -> list[Path]:
        """A heat map per model and BkR/XLR metric, and a box plot over pairs of BkR at the largest K."""
        out, paths = Path(out), []
        g = self.split.image_model or "the split's stored features"
        for label, res in self.results.items():
            safe = plot_name(label)
            for metric in res["matrix"]:
                if metric.startswith(("bkr", "xlr")):
                    png = out / f"heatmap_{safe}_{metric.replace('@', '')}.png"
                    paths.append(pair_heatmap(res, metric, png, title=f"{label}: {metric_name(metric)}",
                                              g=g if metric.startswith("bkr") else None))
        k = max(self.options["ks"])
        paths.append(pair_boxplot(self.results, f"bkr@{k}", out / f"boxplot_bkr{k}.png", g=g))
        return paths


@renamed_keywords(langs="languages")
def evaluate_split(
    data: PathLike | SplitData,
    models: Models,
    *,
    extractor: ImageModel | None = None,
    languages: Sequence[str] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    max_per_lang: int | None = None,
    seed: int = 0,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approximate: bool | ApproxConfig = False,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    online: bool = False,
    progress: bool = True,
) -> SplitEvaluation:
    """BkR (and XLR where groups tie translations) of each model on every ordered language pair of a split.

    Args:
        data: a split folder (``manifest.json`` + ``.tar`` shards) or a loaded split.
        models: ``[NAME=]SPEC`` strings (:func:`backretrieval.load_embedder` specs) and text embedder objects
            (:class:`backretrieval.TextEmbedder`: a ``name``, its label, and ``encode(texts)``; e.g. a loaded
            ``globetrotter`` model), or {label: spec or object}.
        extractor: the image model g, :func:`backretrieval.image_feature_extractor` (None: the split's stored
            features; a split of pictures needs one, ``image_feature_extractor()`` for the commands' default).
        languages: only these languages (default: all in the split).
        max_per_lang, seed: at most this many source and target captions per pair; seed of the
            non-matching split and of the subsampling.
        ks, ties, retrieval, csls_k, approximate: as in :func:`backretrieval.bkr_recall`;
            ``max_rank`` defaults to the largest K (the same Recall@K, faster).
        bootstrap, level: per pair, intervals over queries (0: none).
        online, progress: allow downloads of text models; show progress bars (for scoring: when the work is big).
    """
    specs = model_specs(models)
    if not specs:
        raise BackRetrievalError(f"evaluate_split: no model specs in {list(models)!r}; expected {SPEC_FORMS}")
    check_plot_names(specs)  # before any work, as save_plots will name the files
    check_pair_options(max_per_lang, seed, bootstrap, level)  # before any caption or image is embedded
    ks = check_recall_options(ks, ties, max_rank, retrieval, csls_k)  # before any caption or image is embedded
    censored_max_rank(max_rank, ks, option("approximate") if approximate else None)

    def enough_captions(data: SplitData) -> None:  # before g's features and any embedding
        names = np.unique(data.langs)
        if len(names) < 2:
            raise BackRetrievalError(f"{data.split_dir}: captions in {len(names)} language(s) "
                                     f"({', '.join(names.tolist()) or 'none'}); BkR needs two"
                                     + (f" (check {option('languages')})" if languages else ""))
        pair, per_side = fewest_source_images(data.langs, data.image_ids, max_per_lang, seed)  # as scored
        shared = len(set(zip(data.image_ids.tolist(), data.langs.tolist()))) > len(set(data.image_ids.tolist()))
        enough_for_k(str(data.split_dir), per_side, ks, f"distinct source images in {pair}" + (
                     " (an image captioned in both languages goes to one side)" if shared else ""),
                     f"raise {option('max_per_lang')}" if max_per_lang else None)

    split = embed_split(data, specs, extractor, languages, online=online, progress=progress, check=enough_captions)
    data = split.data
    feats = split.features[data.image_index]
    groups = data.groups if data.has_groups else None
    options = {"ks": list(ks), "ties": ties, "seed": seed, "max_per_lang": max_per_lang,
               "max_rank": max_rank or max(ks), "retrieval": retrieval, "csls_k": csls_k,
               "approximate": bool(approximate), "approximate_settings": _settings(approximate, ks),
               "bootstrap": bootstrap, "level": level}
    results = {label: evaluate_pairs(emb, data.langs, feats, data.image_ids, ks, groups=groups,
                                     max_per_lang=max_per_lang, seed=seed, ties=ties, max_rank=max_rank or max(ks),
                                     bootstrap=bootstrap, level=level, retrieval=retrieval, csls_k=csls_k,
                                     approximate=approximate, progress=progress)
               for label, emb in split.embeddings.items()}
    return SplitEvaluation(split, results, options)


@dataclass
class SplitCorrelation:
    """What :func:`correlate_split` measured; ``to_record()`` is ``backretrieval correlate``'s protocol.json."""

    split: EmbeddedSplit
    pairs: dict[str, dict]  # "src->tgt" -> run_protocol result
    options: dict  # ks, ties, max_rank, corr_pairs, retrieval, bootstrap, level

    def to_record(self, inputs: Mapping | None = None) -> dict:
        """The JSON-ready record; ``inputs`` are the options it was run with (the command line's arguments, e.g.
        ``--report-k``), as ``score``'s record lists them."""
        models = {label: {"spec": spec, "embedder": self.split.embedders[label]}
                  for label, spec in self.split.specs.items()}
        return json_ready({"task": "backretrieval.correlate", "inputs": dict(inputs or {}), **self.split.header(),
                           "models": models, **self.options, "pairs": self.pairs})

    def table(self, k: int) -> str:
        """Paper Table 1 at Recall@``k``: Pearson and Spearman of BkR and CORR against XLR, one row per pair."""
        return format_table({label: res["correlation"] for label, res in self.pairs.items()}, k)

    @renamed_keywords(out_dir="out")
    def save_plots(self, out: PathLike, k: int) -> list[Path]:
        """Paper Fig. 2 per pair: BkR@``k`` and CORR against XLR@``k``, one point per model (first seed)."""
        return [scatter_bkr_vs_xlr(res, k, Path(out) / f"scatter_{label.replace('->', '-')}.png",
                                   title=f"{label}: BkR vs XLR (seed {res['seeds'][0]}, N={res['n']})")
                for label, res in self.pairs.items()]


def language_pairs(pairs: Sequence[str | tuple[str, str]]) -> list[tuple[str, str]]:
    """(source, target) language pairs from ``SRC-TGT`` strings or tuples; two different languages each."""
    require_sequence(pairs, "pairs", "language pairs (SRC-TGT)")  # "en-ru" was read as the pairs 'e', 'n', ...
    out = []
    for raw in pairs:
        src, dash, tgt = raw.partition("-") if isinstance(raw, str) else (raw[0], "-", raw[1])
        if not dash or not src or not tgt or src == tgt:
            raise BackRetrievalError(f"{option('pairs')}: expected SRC-TGT with two different languages, got {raw!r}")
        out.append((src, tgt))
    return out


def correlate_split(
    data: PathLike | SplitData,
    models: Models,
    *,
    extractor: ImageModel | None = None,
    pairs: Sequence[str | tuple[str, str]] | None = None,
    n: int | None = None,
    seeds: int = DEFAULT_SEEDS,
    ks: Sequence[int] = DEFAULT_KS,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    corr_pairs: int = DEFAULT_CORR_PAIRS,
    retrieval: str = "cosine",
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    online: bool = False,
    progress: bool = True,
) -> SplitCorrelation:
    """The paper's protocol on a parallel split: per language pair, BkR and CORR against XLR over the models.

    Args:
        data: a parallel split folder (captions tied by ``group``) or a loaded split.
        models: at least 2 models, as for :func:`evaluate_split`.
        extractor: the image model g (None: the split's stored features).
        pairs: ``SRC-TGT`` strings or (src, tgt) tuples (default: every ordered pair of the split).
        n: items per side and seed (default: ``min(10000, items // 2)``); seeds: how many.
        ks, ties, corr_pairs, retrieval: metric options; ``max_rank`` defaults to the largest K.
        bootstrap, level: per seed and model, intervals over queries (0: none).
        online, progress: allow downloads of text models; show progress bars.
    """
    specs = model_specs(models)
    if len(specs) < 2:
        raise BackRetrievalError(f"correlate needs at least 2 model specs (got {len(specs)}); 3 or more make sense")
    wanted = language_pairs(pairs or [])
    items: dict[tuple[str, str], tuple] = {}

    def parallel_items(data: SplitData) -> None:  # before g's features and any embedding (e.g. no 'group' ids)
        names = sorted(set(data.langs.tolist()))
        for src_lang, tgt_lang in wanted or [(a, b) for a in names for b in names if a != b]:
            src_rows, tgt_rows, image_idx = aligned_pair(data, src_lang, tgt_lang)
            pair_n = min(DEFAULT_PROTOCOL_N, len(image_idx) // 2) if n is None else n  # --n 0 is refused
            enough_for_k("protocol", pair_n, check_ks(ks), f"items per side ({option('n')})", f"raise {option('n')}")
            sample_non_matching(len(image_idx), pair_n, 0)  # as run_protocol will: N at most half the items
            items[src_lang, tgt_lang] = (src_rows, tgt_rows, image_idx, pair_n)
        if not items:
            raise BackRetrievalError(f"{data.split_dir}: captions in {len(names)} language(s) "
                                     f"({', '.join(names) or 'none'}); the protocol needs a pair of two")

    split = embed_split(data, specs, extractor, sorted({lang for pair in wanted for lang in pair}) or None,
                        online=online, progress=progress, check=parallel_items)
    results = {}
    for (src_lang, tgt_lang), (src_rows, tgt_rows, image_idx, pair_n) in items.items():
        per_model = {label: (emb[src_rows], emb[tgt_rows]) for label, emb in split.embeddings.items()}
        results[f"{src_lang}->{tgt_lang}"] = run_protocol(
            per_model, split.features[image_idx], n=pair_n, seeds=seeds,
            ks=ks, ties=ties, max_rank=max_rank or max(ks), corr_pairs=corr_pairs, progress=progress,
            bootstrap=bootstrap, level=level, retrieval=retrieval)
    options = {"ks": list(ks), "ties": ties, "max_rank": max_rank or max(ks), "corr_pairs": corr_pairs,
               "retrieval": retrieval, "bootstrap": bootstrap, "level": level}
    return SplitCorrelation(split, results, options)
