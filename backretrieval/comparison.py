"""Does text model A beat model B on the same queries? BkR (and XLR) hits compared with paired tests.

:func:`compare` is the library side of ``backretrieval compare``: give either both models'
embeddings with the shared image features (scored here, through one set of image lists when
``image_index`` is given), or two per-query hit files written by ``score --hits-out`` on the
same data (``hits``), whose K are read from the record beside each file (``HITS.npy.ks.json``).
Each metric's hits are compared by
:func:`backretrieval.uncertainty.compare_hits` (McNemar's exact test, paired bootstrap);
:meth:`CompareResult.to_record` is the command's JSON record.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .approximate import ApproxConfig
from .errors import BackRetrievalError, BackRetrievalWarning, option
from .files import (ArrayInput, IdsInput, PathLike, check_numbers, check_rows, is_path, load_input, load_matrix,
                    same_dim, same_rows, subject)
from .hubness import DEFAULT_CSLS_K
from .metric import DEFAULT_KS, bkr_recall, xlr_recall
from .metric_checks import censored_max_rank, check_ks
from .outputs import hits_ks_path, recorded_ks
from .records import json_ready
from .scoring import ImageLists, prepare_images
from .uncertainty import (DEFAULT_ALPHA, DEFAULT_BOOTSTRAP, DEFAULT_LEVEL, TESTS, check_alpha, check_tests,
                          check_whole_replicates, compare_hits)

PairedHits = dict[str, tuple[np.ndarray, np.ndarray]]  # metric -> (hits of A, hits of B), query-aligned


@dataclass
class CompareResult:
    """What :func:`compare` found; ``to_record()`` is the JSON record of ``backretrieval compare``."""

    comparisons: dict[str, dict]  # per metric: compare_hits' result, the verdict a model name or "tie"
    names: tuple[str, str]
    alpha: float
    tests: tuple[str, ...]
    retrieval: str
    approximate: bool
    hubness: dict | None  # per model ("a", "b"), when scored from embeddings
    image_lists: ImageLists | None = None
    ks: tuple[int, ...] = DEFAULT_KS  # the K compared (with hits: those the files were scored at)

    def to_record(self, inputs: Mapping | None = None) -> dict:
        """The JSON-ready record; ``inputs`` are the options it was run with (the command line's arguments)."""
        return json_ready({
            "task": "backretrieval.compare", "inputs": dict(inputs or {}),
            "models": {"A": self.names[0], "B": self.names[1]}, "alpha": self.alpha, "tests": list(self.tests),
            "retrieval": self.retrieval, "approximate": self.approximate, "comparisons": self.comparisons,
            "hubness": self.hubness})


def hits_from_files(hits_a: ArrayInput, hits_b: ArrayInput, ks: Sequence[int] | None = None) -> tuple[PairedHits, tuple[int, ...]]:
    """Paired ``bkr@K`` hits from two ``score --hits-out`` files (or arrays): one column per K, same queries; and
    the K.

    A file's K are those recorded beside it (``HITS.npy.ks.json``): two files scored at different K, or ``ks``
    (when given) other than theirs, are refused. A file without the record (written before hits files recorded
    their K) or an array has its columns read as ``ks`` (default 1, 5, 10), or as the other file's K; a file's
    assumption is said by a :class:`~backretrieval.errors.BackRetrievalWarning`.
    """
    sides = []
    for x, what in ((hits_a, "hits of A"), (hits_b, "hits of B")):
        label, array = load_input(x, what)
        array = _hit_matrix(label, array, what)
        sides.append((label, array, recorded_ks(x, array.shape[1]) if is_path(x) else None, is_path(x)))
    (a_label, a, _, _), (b_label, b, _, _) = sides
    same_rows([(a_label, len(a)), (b_label, len(b))], "the same queries are needed for a paired comparison")
    known = [(label, k) for label, _, k, _ in sides if k is not None]
    if len(known) == 2 and known[0][1] != known[1][1]:
        raise BackRetrievalError(f"{a_label} was scored at K {_listed(known[0][1])} and {b_label} at K "
                                 f"{_listed(known[1][1])}: hits compare only at the same K (score both with the "
                                 f"same {option('ks')})")
    if known and ks is not None and tuple(ks) != known[0][1]:
        scored = " and ".join(label for label, _ in known)
        raise BackRetrievalError(f"{option('ks')} {_listed(ks)} contradicts {scored}, scored at K "
                                 f"{_listed(known[0][1])} (recorded in {hits_ks_path(known[0][0])}): drop "
                                 f"{option('ks')} or give those K")
    used = known[0][1] if known else tuple(ks) if ks is not None else DEFAULT_KS
    source = (f"as recorded for {known[0][0]}" if known else
              f"{option('ks')}" if ks is not None else f"the default {option('ks')}")
    if a.shape[1] != len(used) or b.shape[1] != len(used):
        per = f"K recorded for {known[0][0]}" if known else f"{option('ks')} value"
        raise BackRetrievalError(f"{a_label}, {b_label}: {a.shape[1]} and {b.shape[1]} hit columns, expected one "
                                 f"per {per} ({list(used)}), as 'score --hits-out' writes them")
    for label, _, recorded, path in sides:
        if path and recorded is None:
            warnings.warn(f"{label} records no K (no {hits_ks_path(label).name} beside it, as 'score --hits-out' "
                          f"writes now): its columns are assumed to be K {_listed(used)} ({source})",
                          BackRetrievalWarning, stacklevel=3)
    return {f"bkr@{k}": (a[:, i], b[:, i]) for i, k in enumerate(used)}, used


def _listed(ks: Sequence[int]) -> str:
    """K values as --ks takes them: ``1,5,10``."""
    return ",".join(str(k) for k in ks)


def _hit_matrix(label: str, x: np.ndarray, what: str) -> np.ndarray:
    """A hit file as ``(queries, columns)`` float64: one-line errors for no rows and for values outside [0, 1]."""
    x = np.asarray(x)
    check_numbers(label, x, what)
    if x.ndim == 0 or len(x) == 0:
        raise BackRetrievalError(f"{subject(label, what)} is empty (no queries)")
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    check_rows(label, x, what, vectors=False)
    outside = np.flatnonzero(((x < 0) | (x > 1)).any(axis=1))
    if len(outside):
        row = int(outside[0])
        value = x[row][(x[row] < 0) | (x[row] > 1)][0]
        raise BackRetrievalError(f"{subject(label, what)} holds values outside [0, 1] ({len(outside)} rows; row {row}: "
                                 f"{value:g}): hits are 0/1 or fractions, as 'score --hits-out' writes them "
                                 "(not ranks: --ranks-out)")
    return x


def _hits_from_embeddings(texts: dict, xlr: dict, src_img: ArrayInput | None, tgt_img: ArrayInput | None,
                          ks: Sequence[int], options: dict, image_index: PathLike | None,
                          image_index_method: str | None, seed: int,
                          src_image_ids: IdsInput | None = None) -> tuple[PairedHits, dict, ImageLists | None]:
    missing = [option(name) for name, value in texts.items() if value is None]
    if missing:
        raise BackRetrievalError(f"compare needs {', '.join(missing)} (or {option('hits', 'A.npy B.npy')})")
    loaded = {name: load_matrix(value, option(name)) for name, value in texts.items()}
    for side, what in (("src", "source texts"), ("tgt", "target texts")):
        same_rows([(label, len(arr)) for label, arr in (loaded[f"a_{side}_text"], loaded[f"b_{side}_text"])], what)
    for model in ("a", "b"):
        same_dim([loaded[f"{model}_src_text"], loaded[f"{model}_tgt_text"]],
                 f"model {model.upper()}'s source vs target texts")
    src, tgt = loaded["a_src_text"], loaded["a_tgt_text"]
    # one set of image lists serves both models
    images, ids, lists = prepare_images(src_img, tgt_img, None, (src[0], len(src[1])), (tgt[0], len(tgt[1])),
                                        src_image_ids, ks, image_index=image_index,
                                        approximate=bool(options["approximate"]), method=image_index_method,
                                        seed=seed, progress=options["progress"], rows="a_src_text")
    hits: dict[str, list] = {}
    hubness = {}
    for side in ("a", "b"):
        res = bkr_recall(loaded[f"{side}_src_text"][1], images.src_img, loaded[f"{side}_tgt_text"][1],
                         images.tgt_img, ks, src_image_ids=ids, image_neighbours=lists.lists if lists else None,
                         **options)
        hubness[side] = res["hubness"]
        for k in ks:
            hits.setdefault(f"bkr@{k}", []).append(res["hits"][k])
    if any(v is not None for v in xlr.values()):
        if any(v is None for v in xlr.values()):
            raise BackRetrievalError(f"XLR comparison needs both {' and '.join(map(option, xlr))}")
        for side, (name, value) in zip("ab", xlr.items()):
            src_label, src_arr = loaded[f"{side}_src_text"]
            label, par = load_matrix(value, option(name))
            same_dim([(src_label, src_arr), (label, par)], "source texts vs XLR targets")
            same_rows([(src_label, len(src_arr)), (label, len(par))], "XLR needs one translation per source row")
            res = xlr_recall(src_arr, par, ks, **options)
            for k in ks:
                hits.setdefault(f"xlr@{k}", []).append(res["hits"][k])
    return {m: (h[0], h[1]) for m, h in hits.items()}, hubness, lists


def check_hits_alone(inputs: Mapping[str, object], scoring: Mapping[str, tuple[object, object]]) -> None:
    """Refuse, with ``hits``, an input or scoring option that only matters when the hits are computed from
    embeddings (it was silently ignored): ``inputs`` given when not None, ``scoring`` as (value, default)."""
    given = [name for name, value in inputs.items() if value is not None]
    given += [name for name, (value, default) in scoring.items() if value != default]
    if given:
        names = ", ".join(option(name) for name in given)
        verb = "matters" if len(given) == 1 else "matter"
        raise BackRetrievalError(f"{option('hits')} compares hits already scored, but {names} only {verb} when "
                                 f"scoring embeddings: give either {option('hits')} or the embeddings, not both")


def compare(
    a_src_text: ArrayInput | None = None,
    a_tgt_text: ArrayInput | None = None,
    b_src_text: ArrayInput | None = None,
    b_tgt_text: ArrayInput | None = None,
    *,
    src_img: ArrayInput | None = None,
    tgt_img: ArrayInput | None = None,
    src_image_ids: IdsInput | None = None,
    a_xlr_tgt_text: ArrayInput | None = None,
    b_xlr_tgt_text: ArrayInput | None = None,
    hits: tuple[ArrayInput, ArrayInput] | None = None,
    names: Sequence[str] = ("A", "B"),
    tests: Sequence[str] = TESTS,
    alpha: float = DEFAULT_ALPHA,
    ks: Sequence[int] | None = None,
    ties: str = "pessimistic",
    max_rank: int | None = None,
    retrieval: str = "cosine",
    csls_k: int = DEFAULT_CSLS_K,
    approximate: bool | ApproxConfig = False,
    image_index: PathLike | None = None,
    image_index_method: str | None = None,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    progress: bool = True,
) -> CompareResult:
    """Compare models A and B at every K: BkR@K (and XLR@K with both ``*_xlr_tgt_text``) with paired tests.

    Args:
        a_src_text, a_tgt_text, b_src_text, b_tgt_text: each model's source / target text
            embeddings (arrays or ``.npy`` paths), rows aligned with ``src_img`` / ``tgt_img``.
        a_xlr_tgt_text, b_xlr_tgt_text: each model's embeddings of the source rows' translations.
        hits: instead of embeddings, (A, B) per-query hits, one column per K (``score --hits-out`` files, whose K
            are read from the record beside each, or arrays).
        names: two different labels of A and B (the verdict is one of them, or ``"tie"``).
        tests, alpha: the paired tests run (``"mcnemar"``, ``"bootstrap"``, or both) and the significance level
            of the verdict.
        ks: the K of Recall@K (default 1, 5, 10). With ``hits``: the K the files were scored at (default), which a
            ``ks`` given must equal (:func:`hits_from_files`).
        ties, max_rank, retrieval, csls_k, approximate: as in :func:`backretrieval.bkr_recall`.
        image_index, image_index_method: image neighbour lists shared by both models (as in
            :func:`backretrieval.score`).
        src_image_ids: one image id per source row; rows sharing an id are one picture, ranked once (as in
            :func:`backretrieval.score`).
        bootstrap, level, seed: paired-bootstrap replicates, interval level and seed.
        progress: progress bars over the scoring (as in :func:`backretrieval.score`), when the work is big.
    """
    ks, tests = None if ks is None else check_ks(ks), check_tests(tests)
    if isinstance(names, str) or len(names) != 2:
        raise BackRetrievalError(f"{option('names')}: expected two labels (A, B), got {names!r}")
    if names[0] == names[1]:  # the verdict would name one model for either
        raise BackRetrievalError(f"{option('names')}: model {names[0]!r} given twice; give A and B different labels")
    if hits is not None and (is_path(hits) or len(hits) != 2):
        got = repr(hits) if is_path(hits) else f"{len(hits)}"
        raise BackRetrievalError(f"{option('hits', 'A.npy B.npy')}: expected two hit arrays or files (A, B), "
                                 f"got {got}")
    if not 0 < alpha < 1:
        raise BackRetrievalError(f"{option('alpha')} must be in (0, 1), got {alpha}")
    check_whole_replicates(bootstrap)
    if bootstrap < 1 and "bootstrap" in tests:
        raise BackRetrievalError(f"{option('bootstrap')} must be >= 1 for the paired bootstrap test")
    if "bootstrap" in tests:
        check_alpha(alpha, bootstrap)  # before any scoring
    hubness, lists = None, None
    if hits is not None:
        check_hits_alone({"a_src_text": a_src_text, "a_tgt_text": a_tgt_text, "b_src_text": b_src_text,
                          "b_tgt_text": b_tgt_text, "src_img": src_img, "tgt_img": tgt_img,
                          "src_image_ids": src_image_ids, "a_xlr_tgt_text": a_xlr_tgt_text,
                          "b_xlr_tgt_text": b_xlr_tgt_text, "image_index": image_index,
                          "image_index_method": image_index_method, "max_rank": max_rank},
                         {"ties": (ties, "pessimistic"), "retrieval": (retrieval, "cosine"),
                          "approximate": (bool(approximate), False)})
        per_metric, ks = hits_from_files(hits[0], hits[1], ks)
    else:
        ks = ks or DEFAULT_KS
        censored_max_rank(max_rank, ks, option("approximate") if approximate else option("image_index") if image_index
                          else None)  # before either model is scored
        texts = {"a_src_text": a_src_text, "a_tgt_text": a_tgt_text, "b_src_text": b_src_text,
                 "b_tgt_text": b_tgt_text}
        options = {"ties": ties, "max_rank": max_rank, "retrieval": retrieval, "csls_k": csls_k,
                   "approximate": approximate, "progress": progress}
        per_metric, hubness, lists = _hits_from_embeddings(
            texts, {"a_xlr_tgt_text": a_xlr_tgt_text, "b_xlr_tgt_text": b_xlr_tgt_text}, src_img, tgt_img, ks,
            options, image_index, image_index_method, seed, src_image_ids)
    name_a, name_b = names
    comparisons = {}
    for metric, (a, b) in per_metric.items():
        res = compare_hits(a, b, tests, alpha, max(bootstrap, 1), level, seed)
        res["verdict"] = {"A": name_a, "B": name_b}.get(res["verdict"], "tie")
        comparisons[metric] = res
    return CompareResult(comparisons, (name_a, name_b), alpha, tuple(tests), retrieval, bool(approximate), hubness,
                         lists, tuple(ks))
