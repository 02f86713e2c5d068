"""The :class:`Encoder` of a loaded model: its text, word, token and image embeddings as numpy arrays."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence, cast

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tokenizers import Tokenizer

from backretrieval.files import require_count
from backretrieval.image_inputs import rgb_image  # numpy and PIL only: one 8-bit RGB reading of a picture

from .config import TrainConfig
from .data.augment import eval_transform
from .errors import UserError
from .models import GlobetrotterModel, SigurdssonTextEncoder, TextEncoder
from .shell import program_name
from .texts_cut import encode_noting_cut, warn_cut
from .tokenizer import encode_batch, special_ids

BACKRETRIEVAL_HEAD = "text"  # the head BackRetrieval judges: globetrotter:RUN specs and Encoder.encode alike


class Encoder:
    """Inference wrapper: text and image embeddings as float32 numpy arrays, L2-normalised.

    ``head="text"`` is the text–text head (translation); ``head="cross"`` is the
    cross-modal text head (text→image). A model without the asked head (the text-only
    baseline has none) gives the head's pooled backbone output (``model.text_pooling_t`` /
    ``text_pooling_x``: the sentence token or the mean of the tokens), L2-normalised.

    The Sigurdsson baseline (``model.text_encoder=sigurdsson``, :attr:`needs_language`) has a
    word table per language: its text methods need the texts' languages (``langs``, one code,
    or one per text); the transformer ignores them.

    It is a BackRetrieval text embedder (:class:`backretrieval.TextEmbedder`: :attr:`name` and :meth:`encode`), so
    ``backretrieval.evaluate_split(split, {"gt": globetrotter.load(run)})`` scores it as ``"globetrotter:RUN"`` does.
    """

    def __init__(self, model: GlobetrotterModel, tokenizer: Tokenizer, config: TrainConfig, device: str = "cpu",
                 checkpoint: Path | None = None) -> None:
        self.model = model.eval().to(device)
        self.tokenizer = tokenizer
        self.cfg = config
        self.device = device
        self.checkpoint = checkpoint
        self._transform = eval_transform(config.data.image_size)

    @property
    def config(self) -> dict:
        """The training config the model was loaded with, as a plain dict keyed as in ``config.yaml``."""
        from .config_io import to_dict

        return to_dict(self.cfg)

    @property
    def name(self) -> str:
        """How BackRetrieval names this model: ``globetrotter:CHECKPOINT`` (the folder it was loaded from)."""
        return f"globetrotter:{self.checkpoint}" if self.checkpoint is not None else "globetrotter"

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(N, D) embeddings of ``texts`` with the head BackRetrieval judges (the text-text head, as the
        ``globetrotter:RUN`` spec): :meth:`encode_text` for :class:`backretrieval.TextEmbedder`."""
        texts = _check_texts(texts)  # encode_text's steps, not a call of it: the TextsCut warning names our caller
        out, cut = self._encode_heads(texts, (BACKRETRIEVAL_HEAD,), 256, None)  # encode_text's default batch size
        warn_cut(cut, texts, self.cfg.data.max_length)
        return out[BACKRETRIEVAL_HEAD]

    @property
    def needs_language(self) -> bool:
        """True when the text methods need the texts' languages (the Sigurdsson baseline's per-language tables)."""
        return bool(getattr(self.model, "per_language", False))

    def _lang_ids(self, langs: str | Sequence[str] | None, n: int) -> torch.Tensor | None:
        """Language indices (n,) for a per-language model; None for the transformer."""
        if not self.needs_language:
            return None
        if langs is None:
            raise UserError("this model (model.text_encoder=sigurdsson) has one word table per language: give the "
                            f"texts' language (langs=...; {program_name('eval')} translate/translate-word: --from); "
                            f"it knows {self.cfg.model.languages}")
        langs = [langs] * n if isinstance(langs, str) else list(langs)
        if len(langs) != n:
            raise ValueError(f"langs has {len(langs)} entries for {n} texts")
        return self.model.language_ids(langs, self.device)

    @torch.no_grad()
    def encode_text(self, texts: Sequence[str], batch_size: int = 256, head: str = "text",
                    langs: str | Sequence[str] | None = None) -> np.ndarray:
        """(N, D) embeddings of ``texts``; ``head`` is ``"text"``, ``"cross"`` or ``"backbone"``;
        ``langs`` the texts' languages (needed by the Sigurdsson baseline only). A text is cut to the run's
        ``data.max_length`` tokens, as in training: what follows does not change its embedding; one :class:`TextsCut`
        warning says how many of the texts were cut."""
        texts = _check_texts(texts)
        out, cut = self._encode_heads(texts, (head,), batch_size, langs)
        warn_cut(cut, texts, self.cfg.data.max_length)
        return out[head]

    @torch.no_grad()
    def encode_text_heads(self, texts: Sequence[str], heads: Sequence[str], batch_size: int = 256,
                          langs: str | Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """:meth:`encode_text` of ``texts`` by each of ``heads``, ``{head: (N, D_head)}``, from one pass of the text
        encoder: the heads are projections of the same sentence states, so each embedding is the one
        :meth:`encode_text` gives with that head alone (same batches, same states)."""
        texts = _check_texts(texts)
        if isinstance(heads, str) or not len(heads):
            raise ValueError(f"heads: expected a sequence of head names, at least one head (text, cross, backbone); "
                             f"got {heads!r}")
        out, cut = self._encode_heads(texts, heads, batch_size, langs)
        warn_cut(cut, texts, self.cfg.data.max_length)
        return out

    def _encode_heads(self, texts: list[str], heads: Sequence[str], batch_size: int,
                      langs: str | Sequence[str] | None) -> tuple[dict[str, np.ndarray], list[str]]:
        """:meth:`encode_text_heads`' embeddings of ``texts`` (checked by the caller) and the texts that were cut (the
        callers warn: the warning points at their caller)."""
        _check_batch_size(batch_size)
        heads = list(dict.fromkeys(heads))
        for head in heads:
            _check_head(head)
        specs = {head: self._head(head) for head in heads}  # (projection, pooling)
        lang_ids = self._lang_ids(langs, len(texts))
        out = {head: np.zeros((len(texts), self.embed_dim(head)), np.float32) for head in heads}
        # batches of similar lengths (by characters): less padding; rows put back
        order = np.argsort([len(t) for t in texts], kind="stable")
        cut: list[str] = []
        for i in range(0, len(texts), batch_size):
            rows = order[i : i + batch_size]
            ids, mask = encode_noting_cut(self.tokenizer, [texts[r] for r in rows], self.cfg.data.max_length, cut)
            ids_t = torch.tensor(ids, device=self.device)
            mask_t = torch.tensor(mask, device=self.device)
            batch_langs = None if lang_ids is None else lang_ids[torch.as_tensor(rows, device=lang_ids.device)]
            sentence, mean = self.model.sentence_states(ids_t, mask_t, batch_langs)
            for head in heads:
                proj, pooling = specs[head]
                x = sentence if pooling == "sentence" else mean
                out[head][rows] = (proj(x) if proj is not None else F.normalize(x, dim=-1)).float().cpu().numpy()
        return out, cut

    @torch.no_grad()
    def encode_tokens(self, texts: Sequence[str], batch_size: int = 256,
                      langs: str | Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Frozen token-level states of the text encoder, for probes (paper A.1).

        Returns ``states`` (N, L, d_model) float32, position 0 the sentence token, and
        ``mask`` (N, L) int64 (1 = token), padded with zeros to the longest text
        (at most ``data.max_length`` tokens: one :class:`TextsCut` warning says how many were cut). The Sigurdsson
        baseline gives its adapted word vectors, not max-pooled (paper A.1), and needs ``langs``.
        """
        texts = _check_texts(texts)
        _check_batch_size(batch_size)
        lang_ids = self._lang_ids(langs, len(texts))
        chunks = []
        cut: list[str] = []
        for i in range(0, len(texts), batch_size):
            ids, mask = encode_noting_cut(self.tokenizer, list(texts[i : i + batch_size]), self.cfg.data.max_length,
                                          cut)
            ids_t, mask_t = torch.tensor(ids, device=self.device), torch.tensor(mask, device=self.device)
            hidden = self.model.token_states(ids_t, mask_t, None if lang_ids is None else lang_ids[i : i + batch_size])
            chunks.append((hidden.float().cpu().numpy(), np.asarray(mask, np.int64)))
        warn_cut(cut, texts, self.cfg.data.max_length)
        width = max((s.shape[1] for s, _ in chunks), default=1)
        d = self.model.text.d_model
        states = np.zeros((len(texts), width, d), np.float32)
        masks = np.zeros((len(texts), width), np.int64)
        row = 0
        for s, m in chunks:
            states[row : row + len(s), : s.shape[1]] = s * m[..., None]
            masks[row : row + len(s), : m.shape[1]] = m
            row += len(s)
        return states, masks

    def _head(self, head: str) -> tuple[torch.nn.Module | None, str]:
        """``head``'s projection (None: the backbone, or a model without that head) and the pooling it reads."""
        if head == "text":
            return self.model.text_head_t, self.cfg.model.text_pooling_t
        if head == "cross":
            return self.model.text_head_x, self.cfg.model.text_pooling_x
        return None, "sentence"

    def same_heads(self, head: str, other: str) -> bool:
        """Whether ``head`` and ``other`` give the same embeddings: one projection (or none) over one pooling, as the
        text-only baseline's text and cross heads (neither projected)."""
        _check_head(head)
        _check_head(other)
        (proj, pooling), (other_proj, other_pooling) = self._head(head), self._head(other)
        return proj is other_proj and pooling == other_pooling

    def embed_dim(self, head: str = "text") -> int:
        """The width D of :meth:`encode_text`'s embeddings with ``head`` (``"text"``, ``"cross"`` or ``"backbone"``):
        the head's output width, ``model.d_model`` for the backbone or a model without that head."""
        _check_head(head)
        proj = self._head(head)[0]
        if proj is None:
            return self.cfg.model.d_model
        # the head's own output width: the cross head maps onto the image features with image_head_x=features
        return [m for m in proj.modules() if isinstance(m, torch.nn.Linear)][-1].out_features

    @torch.no_grad()
    def encode_image(self, images: Sequence[Image.Image], batch_size: int = 256) -> np.ndarray:
        """(N, D) cross-modal image embeddings (the image head ``x``; ``v`` when there is no ``x``) of a sequence
        of PIL images."""
        images = _check_images(images)
        _check_batch_size(batch_size)
        if self.model.image is None:
            raise UserError("this model was trained without images (text-only); it has no image encoder")
        head: Callable[[torch.Tensor], torch.Tensor] | None
        head = self.model.image_head_x if self.model.image_head_x is not None else self.model.image_head_v
        if head is None:
            head = lambda f: F.normalize(f, dim=-1)  # noqa: E731 (ablation without image heads)
        out = []
        for i in range(0, len(images), batch_size):
            # 16-bit greyscale scaled to 8 bits (convert("RGB") alone clips it to white)
            batch = torch.stack([self._transform(rgb_image(img)) for img in images[i : i + batch_size]])
            out.append(head(self.model.image(batch.to(self.device))).float().cpu())
        if out:
            return torch.cat(out).numpy()
        # no image: the width one image would have (image_head_x=features: the backbone's, as the cross head's)
        width = (self.embed_dim("cross") if self.model.image_head_x is not None else
                 self.cfg.model.embed_dim if self.model.image_head_v is not None
                 else cast(int, self.model.image.num_features))  # an int (nn.Module's typing can't see it)
        return np.zeros((0, width), np.float32)

    def token_embeddings(self, lang: str | None = None) -> tuple[list[str], np.ndarray]:
        """Decoded vocabulary tokens and the input token-embedding matrix (V, d_model), specials excluded.

        The Sigurdsson baseline has one table per language: ``lang``'s rows through its adapting
        layer, the space its languages share (a raw table is in its own language's coordinates).
        """
        specials = set(special_ids(self.tokenizer).values())
        vocab = self.tokenizer.get_vocab()
        ids = sorted(i for i in vocab.values() if i not in specials)
        words = [self.tokenizer.decode([i]) for i in ids]
        lang_ids = self._lang_ids(lang, 1)
        if lang_ids is not None:
            assert isinstance(self.model.text, SigurdssonTextEncoder)  # language ids: the per-language baseline
            weight = self.model.text.word_vectors(int(lang_ids[0])).float().cpu().numpy()
        else:
            assert isinstance(self.model.text, TextEncoder)  # no language ids: not the baseline, the transformer
            weight = self.model.text.token_table().detach().float().cpu().numpy()
        return words, weight[ids]

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's token ids as the model reads them (at most ``data.max_length``), special tokens left out."""
        texts = _check_texts(texts)
        specials = np.array(sorted(special_ids(self.tokenizer).values()), dtype=np.int64)
        rows, masks = encode_batch(self.tokenizer, texts, self.cfg.data.max_length)
        ids, mask = np.asarray(rows, dtype=np.int64), np.asarray(masks, dtype=bool)
        return [row[m & ~np.isin(row, specials)] for row, m in zip(ids, mask)]

    def token_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The input token-embedding table [V, d_model] (row = token id) and the ids of its non-special tokens:
        the token vectors of late-interaction scoring (:mod:`.evaluation.late_interaction`)."""
        if self.needs_language:
            raise UserError("late interaction needs one token table shared by all languages; the Sigurdsson "
                            "baseline has one per language")
        specials = set(special_ids(self.tokenizer).values())
        assert isinstance(self.model.text, TextEncoder)  # not needs_language: the transformer
        with torch.no_grad():
            table = self.model.text.token_table().detach().float().cpu().numpy()
        return table, np.array([i for i in range(len(table)) if i not in specials], dtype=np.int64)

    @torch.no_grad()
    def encode_words(self, words: Sequence[str], batch_size: int = 256,
                     langs: str | Sequence[str] | None = None) -> np.ndarray:
        """(N, d_model) contextual word embeddings, L2-normalised: each word encoded alone, mean of its token outputs
        (sentence token excluded); the Sigurdsson baseline's max-pooled adapted word vectors (needs ``langs``). An
        empty word has no token: a :class:`UserError`. A word (or phrase) past ``data.max_length`` tokens is cut to
        it, as :meth:`encode_text` cuts a text: one :class:`TextsCut` warning says how many were cut."""
        words = _check_texts(words, "words")
        empty = [i for i, word in enumerate(words) if not word]
        if empty:
            raise UserError(f"words[{empty[0]}]: an empty word has no token to embed ({len(empty)} empty words)")
        _check_batch_size(batch_size)
        lang_ids = self._lang_ids(langs, len(words))
        out = []
        cut: list[str] = []
        for i in range(0, len(words), batch_size):
            ids, mask = encode_noting_cut(self.tokenizer, list(words[i : i + batch_size]), self.cfg.data.max_length,
                                          cut)
            ids_t, mask_t = torch.tensor(ids, device=self.device), torch.tensor(mask, device=self.device)
            if lang_ids is not None:
                vectors = self.model.sentence_states(ids_t, mask_t, lang_ids[i : i + batch_size])[0]
            else:
                states = self.model.text(ids_t, mask_t)[:, 1:]
                m = mask_t[:, 1:].unsqueeze(-1).float()
                vectors = (states * m).sum(1) / m.sum(1).clamp_min(1)
            out.append(F.normalize(vectors.float(), dim=-1).cpu())
        warn_cut(cut, words, self.cfg.data.max_length)
        return torch.cat(out).numpy() if out else np.zeros((0, self.cfg.model.d_model), np.float32)


def _check_texts(texts: Sequence[str], name: str = "texts") -> list[str]:
    """``texts`` as a list, each a ``str``; a ``TypeError`` naming ``name`` for one string where a sequence of texts
    is expected (it would be read as its characters) and for an entry that is no string (None, a number, bytes)."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{name}: expected a sequence of texts, got one {type(texts).__name__} ({texts[:40]!r}); "
                        "wrap it in a list")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of texts, got {type(texts).__name__}") from None
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            hint = "; decode bytes first" if isinstance(text, bytes) else ""
            raise TypeError(f"{name}[{i}]: expected a str, got {type(text).__name__} ({text!r:.40}){hint}")
    return texts


def _check_head(head: str) -> None:
    if head not in ("text", "cross", "backbone"):
        raise ValueError(f"head must be 'text', 'cross' or 'backbone', got {head!r}")


def _check_batch_size(batch_size: int) -> None:
    require_count(batch_size, "batch_size")


def _check_images(images: Sequence[Image.Image]) -> list[Image.Image]:
    """``images`` as a list of PIL images; a ``TypeError`` naming the first entry that is not one (a path, an array)."""
    if isinstance(images, Image.Image):
        raise TypeError("images: expected a sequence of PIL images, got one image; wrap it in a list")
    if isinstance(images, (str, bytes, Path)):
        raise TypeError(f"images: expected a sequence of PIL images, got {type(images).__name__} ({images!r:.60})")
    images = list(images)
    for i, img in enumerate(images):
        if not isinstance(img, Image.Image):
            hint = "; open files with PIL.Image.open" if isinstance(img, (str, Path)) else \
                "; convert arrays with PIL.Image.fromarray" if isinstance(img, np.ndarray) else ""
            raise TypeError(f"images[{i}]: expected a PIL image, got {type(img).__name__}{hint}")
    return images
