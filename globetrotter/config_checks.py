"""Config keys a run ignores: set away from their defaults, but nothing in the run reads them.

A key the user sets that does nothing is a mistake like a typo, so training logs one line per such key at its
start::

    warning: model.token_init_alpha=[3, 10, 30] is ignored: model.token_init=random

The user's keys are those the ``--config`` file itself and the ``key=value`` overrides set
(:func:`~data_prep.config_io.written_keys`). Twin configs (``_base_: flickr8k.yaml``) inherit every key of their
base, also those their own setting never reads: the text-only twin keeps the base's image backbone, augmentations
and image-pivot start. That is by design (the file stays a plain override of its base) and nothing the user could
act on, so an inherited key draws no line (nor a count of them), nor do the keys an adaptation takes from its
starting run's saved config; a resumed run (its config is the run's, checked equal to the checkpoint's but for the
run keys: its start warned) warns only about the keys a changed run key makes ignored (``val.every=0``: the
``val.select_*`` keys; :func:`~globetrotter.training.resume.newly_ignored`). :func:`ignored_keys` of a bare config (a Python caller's) lists every ignored
key, inherited or not.

Only keys whose value differs from the dataclass default count (a default is never "set"). The rules follow what
the code reads (docs/design.md section 5 and the comments of :mod:`globetrotter.config`, :mod:`.data_config` and
:mod:`.model_config`); a key with a use in some setting outside training (``val.bkr_ks`` and ``val.max_per_lang``
are read again by ``eval.py select``) is not reported. ``data.features`` is not reported in a run without images:
there it still selects the in-memory, index-based caption batches
(:class:`~globetrotter.data.feature_batches.FeatureBatches` without a cache), the batches of the full twin.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Collection

from .config import IMPORTED_BACKBONE, TrainConfig
from .config_io import key_of

# the keys that only the image side reads: the image encoder, the pixels' views and the feature cache
IMAGE_KEYS = ("data.image_size", "data.crop_scale_min", "data.colour_jitter", "data.hue_jitter", "data.grayscale",
              "data.hflip", "data.augment_on", "data.device_source_size", "data.feature_views", "data.feature_seed",
              "model.image_backbone", "model.image_pretrained", "model.image_backbone_args",
              "model.freeze_image_backbone", "model.image_head_x")
TOKEN_INIT_KEYS = ("model.token_init_alpha", "model.token_init_folds", "model.token_init_std")
# what the Sigurdsson baseline does not have: a transformer (its word tables are max-pooled: one sentence vector)
TRANSFORMER_KEYS = ("model.layers", "model.heads", "model.ffn", "model.residual_init", "model.text_pool_norm",
                    "model.text_pooling_t", "model.text_pooling_x")
ADAPT_KEYS = ("adapt.language", "adapt.split", "adapt.epochs", "adapt.old_batch", "adapt.old_captions",
              "adapt.vocab_size", "adapt.train")


def _no_images(cfg: TrainConfig) -> str | None:
    loss = cfg.loss
    if loss.uses_images:
        return None
    text = "loss.text=0" if loss.text == 0 else "loss.alpha_source=supervised"
    return f"no loss uses images (loss.image=0, loss.cross=0, {text})"


# (keys, the reason they are ignored in a config, or None where they are read): the first rule that applies to a
# key gives its reason
RULES: tuple[tuple[tuple[str, ...], Callable[[TrainConfig], str | None]], ...] = (
    (ADAPT_KEYS, lambda c: None if c.adapt.from_run else "adapt.from=null (an ordinary run, no adaptation)"),
    (IMAGE_KEYS, _no_images),
    (("data.augment_on", "data.device_source_size", "data.shuffle_buffer"),
     lambda c: f"data.features={c.data.features} (cached features: no pixels are streamed)" if c.data.features else None),
    (("data.feature_views", "data.feature_seed", "data.crop_scale_min", "data.colour_jitter", "data.hue_jitter",
      "data.grayscale", "data.hflip"),
     lambda c: "model.image_backbone=imported (imported embeddings: the whole image, no augmented views)"
     if c.model.image_backbone == IMPORTED_BACKBONE else None),
    (("data.feature_views", "data.feature_seed"),
     lambda c: None if c.data.features else "data.features=null (pixels: no feature cache)"),
    (("data.device_source_size",), lambda c: "data.augment_on=cpu" if c.data.augment_on == "cpu" else None),
    (("data.neighbours_k",),
     lambda c: None if c.data.batching == "neighbours" else f"data.batching={c.data.batching}"),
    (TOKEN_INIT_KEYS, lambda c: "model.token_init=random" if c.model.token_init == "random" else None),
    (("model.token_init_folds",),
     lambda c: None if isinstance(c.model.token_init_alpha, list)
     else "model.token_init_alpha is one value (nothing to cross-validate)"),
    (TRANSFORMER_KEYS, lambda c: "model.text_encoder=sigurdsson" if c.model.text_encoder == "sigurdsson" else None),
    (("model.languages",),
     lambda c: None if c.model.text_encoder == "sigurdsson" else
     f"model.text_encoder={c.model.text_encoder} (one table shared by every language)"),
    (("model.image_head_x",), lambda c: "loss.cross=0" if c.loss.cross == 0 else None),
    (("loss.mask_prob", "loss.corrupt_other"), lambda c: "loss.cloze=0" if c.loss.cloze == 0 else None),
    (("loss.temperature",),
     lambda c: "loss.text, loss.image and loss.cross are 0" if c.loss.text == c.loss.image == c.loss.cross == 0
     else None),
    (("loss.transitive",), lambda c: "loss.text=0 and loss.cross=0" if c.loss.text == c.loss.cross == 0 else None),
    (("loss.margin",),
     lambda c: "loss.text=0" if c.loss.text == 0 else
     "loss.alpha_source=supervised (α from true pairs)" if c.loss.alpha_source == "supervised" else None),
    (("val.select_by", "val.select_test", "val.select_alpha"),
     lambda c: "val.every=0 (no validation)" if c.val.every == 0 else None),
    (("val.test_groups",),
     lambda c: "val.every=0 (no validation)" if c.val.every == 0 and not c.adapt.from_run else None),
    (("val.select_test", "val.select_alpha"),
     lambda c: "val.select_by is empty (no best checkpoint)" if not c.val.select_by else None),
    (("val.select_alpha",),
     lambda c: "val.select_test=null (the best checkpoint is the plain max)" if c.val.select_test is None else None),
)


@dataclass(frozen=True)
class Ignored:
    """A key set away from its default that the run does not read, and why."""

    key: str
    value: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.key}={show(self.value)} is ignored: {self.reason}"


def show(value: Any) -> str:
    """A value as it would be written in an override: ``[3, 10, 30]``, ``null``, ``true``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _field(obj: Any, key: str) -> Any:
    """The value at dotted ``key`` (YAML keys: ``adapt.from`` is the field ``from_run``)."""
    for part in key.split("."):
        fields = {key_of(f): f.name for f in dataclasses.fields(obj)}
        if part not in fields:
            raise KeyError(f"{key}: no such config key")
        obj = getattr(obj, fields[part])
    return obj


def _key_order(obj: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a dataclass tree, in field order (the order of a saved config.yaml)."""
    out = []
    for f in dataclasses.fields(obj):
        key = prefix + key_of(f)
        value = getattr(obj, f.name)
        out += [key] + (_key_order(value, key + ".") if dataclasses.is_dataclass(value) else [])
    return out


def ignored_keys(cfg: TrainConfig, written: Collection[str] | None = None) -> list[Ignored]:
    """The keys of ``cfg`` set away from their defaults that the run ignores, in the config's key order.

    ``written``: the dotted keys the user set (:func:`~data_prep.config_io.written_keys`); only those are listed (a
    mapping key counts when a key under it is written). None: every key of ``cfg`` counts."""
    defaults = TrainConfig()
    out, seen = [], set()
    for keys, rule in RULES:
        unseen = [k for k in keys if k not in seen]
        if not unseen:
            continue
        reason = rule(cfg)
        if reason is None:
            continue
        for key in unseen:
            seen.add(key)
            value = _field(cfg, key)
            if value != _field(defaults, key) and (written is None or _is_written(key, written)):
                out.append(Ignored(key, value, reason))
    order = {key: i for i, key in enumerate(_key_order(defaults))}
    return sorted(out, key=lambda item: order[item.key])


def _is_written(key: str, written: Collection[str]) -> bool:
    return any(w == key or w.startswith(f"{key}.") for w in written)


def warn_ignored_keys(cfg: TrainConfig, log: Callable[[str], None] = print,
                      written: Collection[str] | None = None) -> list[Ignored]:
    """Log ``warning: KEY=VALUE is ignored: REASON`` for each of :func:`ignored_keys` (of ``written``); return them."""
    found = ignored_keys(cfg, written)
    for item in found:
        log(f"warning: {item}")
    return found
