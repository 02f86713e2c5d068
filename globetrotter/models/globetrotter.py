"""The Globetrotter model: text encoder + image encoder with one head per job.

Heads (paper section 3): image head ``v`` for L_v, image head ``x`` and text head ``x`` for
L_x, text head ``t`` for L_t, and the tied cloze head for L_c. Only the heads of losses
with a non-zero weight are built, so every parameter receives gradient and DDP needs no
``find_unused_parameters``. The transitive α (no gradient) reads the heads that exist:
α^v from head ``v`` (else ``x``, else the raw backbone features), α^x from the ``x`` heads
(a factor of 1 in the ablation without L_x). Everything goes through ``forward`` (so DDP
sees it).

``model.text_encoder`` picks the text encoder: the shared transformer (the method) or the
Sigurdsson et al. (2020) baseline's per-language bag of words (:mod:`.sigurdsson`), which
needs each caption's language (``lang_ids``, indices into ``model.languages``).
"""
from __future__ import annotations

from typing import Sequence, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..config import LossConfig
from ..errors import UserError
from ..model_config import ModelConfig
from .heads import CentredFeatureHead, ProjectionHead
from .image import create_image_backbone
from .sigurdsson import SigurdssonTextEncoder, max_pool_words
from .subword import ngram_matrix, token_strings
from .text import ClozeHead, TextEncoder, mean_pool


class GlobetrotterModel(nn.Module):
    """forward(batch tensors) -> dict of L2-normalised features and cloze logits."""

    def __init__(self, cfg: ModelConfig, loss: LossConfig, vocab_size: int, max_length: int,
                 vocabulary: Sequence[str] | None = None, specials: Sequence[int] = ()) -> None:
        """``vocabulary`` (the tokenizer's token strings by id) and ``specials`` (their special ids) are needed by
        ``model.token_ngrams`` only: the character n-grams of each token (:mod:`.subword`)."""
        super().__init__()
        self.cfg = cfg
        self.per_language = cfg.text_encoder == "sigurdsson"
        self.text: TextEncoder | SigurdssonTextEncoder
        if self.per_language:
            if loss.cloze > 0:
                raise ValueError("model.text_encoder=sigurdsson is a bag of words with no language model: set loss.cloze=0")
            self.text = SigurdssonTextEncoder(vocab_size, cfg.d_model, cfg.languages, cfg.dropout)
        else:
            ngrams = None
            if cfg.token_ngrams:
                if vocabulary is None or len(vocabulary) != vocab_size:
                    raise ValueError(f"model.token_ngrams needs the tokenizer's {vocab_size} token strings "
                                     "(vocabulary=...)")
                ngrams = ngram_matrix(token_strings(vocabulary, specials), cfg.token_ngrams)
            self.text = TextEncoder(vocab_size, cfg.d_model, cfg.layers, cfg.heads, cfg.ffn, cfg.dropout, max_length,
                                    zero_init_residual=cfg.residual_init == "zero", ngrams=ngrams)
        d, D = cfg.d_model, cfg.embed_dim
        self.text_head_t = ProjectionHead(d, D) if loss.text > 0 else None
        # image_head_x=features: L_x's target is the frozen backbone's feature space itself (its width)
        self.fixed_target = cfg.image_head_x == "features" and loss.cross > 0
        self.text_head_x = None
        if loss.cross > 0 and not self.fixed_target:
            self.text_head_x = ProjectionHead(d, D)
        self.cloze_head = None
        if loss.cloze > 0:
            assert isinstance(self.text, TextEncoder)  # sigurdsson with loss.cloze > 0 was refused above
            self.cloze_head = ClozeHead(self.text.token_embedding)
        self.image: nn.Module | None = None
        self.image_head_x: ProjectionHead | CentredFeatureHead | None = None
        self.image_head_v: ProjectionHead | None = None
        self.image_frozen = False
        self.image_heads_frozen = False  # adaptation: the image heads' weights and statistics stay the start's
        if loss.uses_images:
            self.image = create_image_backbone(cfg.image_backbone, cfg.image_pretrained, **cfg.image_backbone_args)
            n = cast(int, self.image.num_features)  # an int in timm and ImportedFeatures; nn.Module's typing can't see
            if self.fixed_target:
                if not cfg.freeze_image_backbone:
                    raise ValueError("model.image_head_x=features makes the frozen backbone's features L_x's target: "
                                     "set model.freeze_image_backbone=true")
                self.text_head_x = ProjectionHead(d, n)
                self.image_head_x = CentredFeatureHead(n)
            else:
                self.image_head_x = ProjectionHead(n, D) if loss.cross > 0 else None
            self.image_head_v = ProjectionHead(n, D) if loss.image > 0 else None
            # a fixed feature extractor: asked for, or only α uses the images (ablation without L_v and L_x)
            self.image_frozen = cfg.freeze_image_backbone or (self.image_head_x is None and self.image_head_v is None)
            self.image.requires_grad_(not self.image_frozen)

    def train(self, mode: bool = True) -> "GlobetrotterModel":
        """As ``nn.Module.train``, but a frozen image backbone stays in eval mode (fixed BatchNorm statistics), and
        so do frozen image heads (the running mean of ``image_head_x: features``)."""
        super().train(mode)
        if self.image_frozen and self.image is not None:  # (image_frozen is set only with an image backbone)
            self.image.eval()
        if self.image_heads_frozen:
            for head in (self.image_head_x, self.image_head_v):
                if head is not None:
                    head.eval()
        return self

    def language_ids(self, langs: Sequence[str], device: torch.device | str = "cpu") -> torch.Tensor:
        """Indices of ``langs`` in ``model.languages`` (B,); a one-line error names a language the model never saw."""
        index = {lang: i for i, lang in enumerate(self.cfg.languages)}
        unknown = sorted({str(lang) for lang in langs if lang not in index})  # str: numpy's codes print as np.str_
        if unknown:
            raise UserError(f"language(s) {','.join(unknown)} not among this model's training languages "
                            f"{','.join(self.cfg.languages)} (the Sigurdsson baseline has one word table per training "
                            f"language; evaluate those: --languages)")
        return torch.tensor([index[lang] for lang in langs], dtype=torch.long, device=device)

    def token_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     lang_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token-level states (B, L, d_model): the transformer's outputs, or the Sigurdsson baseline's
        adapted per-language word vectors (which need ``lang_ids``)."""
        if self.per_language:
            return self.text(input_ids, attention_mask, lang_ids)
        return self.text(input_ids, attention_mask)

    def sentence_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        lang_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentence-token output and mean-pooled output: (B, d_model) each. The Sigurdsson baseline
        has one sentence vector, its words max-pooled, returned as both."""
        if self.per_language:
            pooled = max_pool_words(self.token_states(input_ids, attention_mask, lang_ids), attention_mask)
            return pooled, pooled
        assert isinstance(self.text, TextEncoder)  # not per_language: __init__ built the transformer
        if self.cfg.text_pool_norm == "pooled":  # pool the residual stream, then LayerNorm the sentence vectors
            stream = self.text(input_ids, attention_mask, normed=False)
            return self.text.norm(stream[:, 0]), self.text.norm(mean_pool(stream, attention_mask))
        states = self.token_states(input_ids, attention_mask, lang_ids)
        return states[:, 0], mean_pool(states, attention_mask)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        masked_ids: torch.Tensor | None = None,
        view1: torch.Tensor | None = None,
        view2: torch.Tensor | None = None,
        cloze_targets: torch.Tensor | None = None,
        lang_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Features of the active heads. ``view1``/``view2`` are images [B, 3, H, W] or, with a frozen
        backbone, its pooled features [B, F] (the feature cache). ``cloze_targets`` [B, L] (bool) limits
        the cloze logits to the masked positions, [n_targets, V] (the vocabulary projection of every
        token would dominate the step); without it they are [B, L, V]. ``lang_ids`` (B,) are the captions'
        languages as :meth:`language_ids` gives them (Sigurdsson baseline only)."""
        out: dict[str, torch.Tensor] = {}
        if self.text_head_t is not None or self.text_head_x is not None:
            sentence, mean = self.sentence_states(input_ids, attention_mask, lang_ids)
            if self.text_head_t is not None:
                out["text_t"] = self.text_head_t(sentence if self.cfg.text_pooling_t == "sentence" else mean)
            if self.text_head_x is not None:
                out["text_x"] = self.text_head_x(sentence if self.cfg.text_pooling_x == "sentence" else mean)
        if self.cloze_head is not None and masked_ids is not None:
            assert isinstance(self.text, TextEncoder)  # __init__ builds a cloze head over the transformer only
            states = self.text(masked_ids, attention_mask)
            out["cloze_logits"] = self.cloze_head(states if cloze_targets is None else states[cloze_targets],
                                                  None if self.text.subword is None else self.text.token_table())
        if self.image is not None and view1 is not None:
            views = [view1] if view2 is None else [view1, view2]
            if view1.dim() == 2:  # pooled features of the frozen backbone, from the cache (docs/design.md section 10)
                if not self.image_frozen:
                    raise ValueError("cached image features need a frozen image backbone (model.freeze_image_backbone)")
                feats = torch.cat(views)
            else:
                with torch.set_grad_enabled(torch.is_grad_enabled() and not self.image_frozen):
                    feats = self.image(torch.cat(views))
            for i, f in enumerate(feats.chunk(len(views))):
                out.update(self.image_outputs(f, i + 1))
        return out

    def image_outputs(self, feats: torch.Tensor, view: int = 1) -> dict[str, torch.Tensor]:
        """The image heads' L2-normalised features of pooled backbone features [B, F], named as ``forward``
        names them for view ``view``: ``image_v<view>`` (L_v head), ``image_x<view>`` (L_x head), or
        ``image_raw<view>`` (the detached backbone features, normalised) when the model has neither head."""
        out = {}
        if self.image_head_v is not None:
            out[f"image_v{view}"] = self.image_head_v(feats)
        if self.image_head_x is not None:
            out[f"image_x{view}"] = self.image_head_x(feats)
        if self.image_head_v is None and self.image_head_x is None:
            out[f"image_raw{view}"] = F.normalize(feats.detach(), dim=-1)
        return out
