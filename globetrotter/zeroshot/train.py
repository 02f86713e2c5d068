"""Training loop of the XTD10 adapter over cached (frozen) features, and its checkpoints.

Both encoders are frozen, so their outputs are computed once and cached; an epoch is then
a pass over the caption features in shuffled mini-batches, each caption paired with the
features of its image. Negatives are mined inside each mini-batch (see :mod:`.losses`).
"""
from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from backretrieval.devices import check_device
from backretrieval.records import json_text
from backretrieval.renamed import renamed_keywords

from globetrotter.config_io import from_dict, read_yaml, save_config
from globetrotter.errors import UserError
from globetrotter.weights_file import save_weights

from .adapter import TextToImageAdapter
from .config import ZeroShotConfig
from .losses import M3Loss, PATRLoss, typical_squared_distance
from .retrieval import Metric, recall_at_k

if TYPE_CHECKING:
    from .data import SplitFeatures

WEIGHTS, CONFIG, META = "adapter.safetensors", "config.yaml", "meta.json"


@dataclass
class TrainHistory:
    """Per-epoch training loss, optional validation score, throughput and the epoch kept (``best_epoch``, an index
    of ``loss``; ``meta.json`` counts it from 1)."""

    loss: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    samples_per_s: float = 0.0
    best_epoch: int = -1
    margin: float | None = None  # PATR eta actually used
    output_scale: float = 1.0  # adapter output scale actually used


def build_loss(config: ZeroShotConfig, image_features: torch.Tensor | None = None) -> torch.nn.Module:
    """The configured loss module; PATR's ``margin: null`` is ``margin_scale`` times the mean squared distance
    between two of ``image_features`` (:func:`typical_squared_distance`)."""
    cfg = config.loss
    if cfg.name == "m3l":
        return M3Loss(rho=cfg.rho, alpha1=cfg.alpha1, alpha2=cfg.alpha2, text_term=cfg.text_term,
                      negatives=cfg.negatives)
    margin = cfg.margin
    if margin is None:
        if image_features is None:
            raise ValueError("loss.margin is null: image features are needed to measure it")
        margin = cfg.margin_scale * typical_squared_distance(image_features)
    return PATRLoss(margin=margin)


def train_adapter(
    text_features: torch.Tensor,
    image_features: torch.Tensor,
    caption_image: torch.Tensor,
    config: ZeroShotConfig,
    validate: Callable[[TextToImageAdapter], float] | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> tuple[TextToImageAdapter, TrainHistory]:
    """Train the XTD10 adapter (section 3.2) and return it with its history.

    ``text_features`` ``[N, Dt]``: frozen sentence embeddings of the training captions.
    ``image_features`` ``[M, Di]``: frozen image features. ``caption_image`` ``[N]`` long:
    the row of ``image_features`` each caption describes (captions of one image are never
    each other's negatives). Adam (``optim.lr``, ``optim.beta1``) for ``optim.epochs``
    epochs of shuffled batches of ``optim.batch_size`` captions. When ``validate`` is given
    it is called after each epoch (higher is better) and the best epoch's weights are kept.
    """
    if not isinstance(config, ZeroShotConfig):  # a dict was 'no attribute adapter'
        raise TypeError(f"config: expected a ZeroShotConfig, got {type(config).__name__}; build one from a dict with "
                        "globetrotter.config_io.from_dict(ZeroShotConfig, settings), or from YAML with "
                        "load_config(ZeroShotConfig, 'configs/zeroshot/xtd10.yaml')")
    for part in (config.adapter, config.loss, config.optim, config):  # made in Python: epochs=0 trained nothing
        part.validate()
    text_features, image_features, caption_image = (torch.as_tensor(x) for x in (text_features, image_features,
                                                                                 caption_image))  # numpy's rows too
    if text_features.ndim != 2 or image_features.ndim != 2:
        raise ValueError("text_features and image_features must be 2-D [rows, dim]")
    if caption_image.shape != (text_features.shape[0],):
        raise ValueError(f"caption_image must be [{text_features.shape[0]}], got {tuple(caption_image.shape)}")
    if text_features.shape[0] < 2:
        raise UserError(f"need at least 2 training captions, got {text_features.shape[0]}")
    m = len(image_features)
    if caption_image.is_floating_point() or caption_image.min() < 0 or caption_image.max() >= m:  # -1: the last image
        raise ValueError(f"caption_image: expected image rows (integers) in [0, {m}), got {caption_image.dtype} values "
                         f"in [{caption_image.min()}, {caption_image.max()}]")
    for name, x in (("text_features", text_features), ("image_features", image_features)):
        if not torch.isfinite(x).all():  # a NaN caption was 'the loss is nan ...; lower optim.lr'
            raise UserError(f"{name}: contains NaN or inf")
    if len(torch.unique(torch.as_tensor(caption_image))) < 2:  # an image is contrasted with another image's captions
        raise UserError(f"the {text_features.shape[0]} training captions show one image; the losses need at least "
                        f"2 images")
    opt = config.optim
    torch.manual_seed(opt.seed)
    device = torch.device(check_device(device, UserError))  # a GPU this machine lacks: one line, not torch's
    trained_on = image_features[torch.unique(caption_image)]  # the images the captions show, not the whole gallery
    scale = config.adapter.output_scale
    if scale is None:  # the mean feature norm of the images trained on (adapter.py); 1 for a free residual output
        scale = 1.0 if config.adapter.form == "residual" and not config.adapter.normalize_output else float(
            trained_on.float().norm(dim=1).mean().clamp_min(1e-6))
    adapter = TextToImageAdapter(
        text_features.shape[1], image_features.shape[1], config.adapter.hidden_dims, config.adapter.dropout, scale,
        config.adapter.form, config.adapter.normalize_output,
    ).to(device)
    # M3L's random negatives draw from torch's default generator, seeded above with optim.seed (no generator of
    # their own: dropout shares that stream, so none could repeat the draws docs/zeroshot.md's M3L figures came from)
    loss_fn = build_loss(config, trained_on)
    history = TrainHistory(margin=getattr(loss_fn, "margin", None), output_scale=scale)
    optimizer = torch.optim.Adam(
        adapter.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), weight_decay=opt.weight_decay
    )
    text_features = text_features.to(device=device, dtype=torch.float32)
    image_features = image_features.to(device=device, dtype=torch.float32)
    caption_image = caption_image.to(device=device, dtype=torch.long)
    gen = torch.Generator().manual_seed(opt.seed)
    n = text_features.shape[0]
    steps_per_epoch = math.ceil(n / opt.batch_size)
    best_score, best_state = -math.inf, None
    seen, train_time = 0, 0.0
    bar = tqdm(range(opt.epochs), desc=f"adapter ({config.loss.name})", disable=not progress)
    for epoch in bar:
        adapter.train()
        order = torch.randperm(n, generator=gen).to(device)
        total, batches = 0.0, 0
        start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * opt.batch_size : (step + 1) * opt.batch_size]
            if idx.numel() < 2:  # a lone caption has no in-batch negative
                continue
            image_rows = caption_image[idx]
            loss = loss_fn(adapter(text_features[idx]), image_features[image_rows], image_rows)
            if not torch.isfinite(loss):  # diverged: nothing after this step could be kept
                raise UserError(f"train: the {config.loss.name} loss is {float(loss.detach())} at epoch {epoch + 1}, step "
                                f"{step + 1}; lower optim.lr (now {opt.lr:g})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            batches += 1
            seen += idx.numel()
        train_time += time.perf_counter() - start
        history.loss.append(total / max(batches, 1))  # mean over the batches trained on
        postfix = {"loss": f"{history.loss[-1]:.4g}"}
        if validate is not None:
            score = float(validate(adapter))
            history.val.append(score)
            postfix["val"] = f"{score:.4f}"
            if score > best_score:
                best_score, best_state, history.best_epoch = score, copy.deepcopy(adapter.state_dict()), epoch
        bar.set_postfix(postfix)
    if best_state is not None:
        adapter.load_state_dict(best_state)
    else:
        history.best_epoch = opt.epochs - 1
    history.samples_per_s = seen / train_time if train_time > 0 else 0.0
    adapter.eval()
    return adapter, history


def train_rows(train: SplitFeatures, langs: Sequence[str], where: str = "train split") -> np.ndarray:
    """The rows of ``train`` the adapter trains on: its captions in ``langs``; one-line error under two."""
    rows = train.rows(langs)
    if len(rows) < 2:
        raise UserError(f"{where}: fewer than 2 captions in train_langs {langs}")
    return rows


def validation_recall(
    val: SplitFeatures, langs: Sequence[str], k: int = 10, metric: Metric = "cosine", where: str = "val split",
    remedy: str = "use a val split of more images, a lower K, or no validation",
) -> Callable[[TextToImageAdapter], float]:
    """The validation score :func:`train_adapter` keeps the best epoch by: text->image Recall@``k`` on ``val``
    (one query per image, its first caption; images ranked by ``metric``), the mean over the ``langs`` that have
    captions there.

    A ``val`` of at most ``k`` images is refused (one-line :class:`UserError` naming ``where``, its image count and
    ``k``, then ``remedy``): every rank is then at most ``k``, Recall@``k`` is 1 for any adapter, and the tie would
    keep the first epoch whatever it is worth."""
    k = max(k, 1)
    n_images = len(val.image_features)
    if n_images <= k:
        raise UserError(f"{where}: {n_images} image(s), not more than the validation K ({k}): Recall@{k} would be 1 "
                        f"for any adapter, so no epoch could be told from another; {remedy}")
    queries = {lang: val.first_per_image(lang) for lang in langs if len(val.rows(lang))}
    images = torch.from_numpy(val.image_features)

    def validate(adapter: TextToImageAdapter) -> float:
        scores = [
            recall_at_k(adapter.embed(torch.from_numpy(val.text_features[r])), images, val.caption_image[r], (k,), metric)
            for r in queries.values()
        ]
        return float(np.mean([s[f"image_retrieval_recall@{k}"] for s in scores]))

    return validate


def train_on_split(
    train: SplitFeatures,
    rows: np.ndarray,
    config: ZeroShotConfig,
    validate: Callable[[TextToImageAdapter], float] | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> tuple[TextToImageAdapter, dict]:
    """Train the adapter on the captions ``rows`` of ``train`` (:func:`train_rows`) and their images.

    Returns the adapter and what its checkpoint's ``meta.json`` says of the training: ``n_captions``,
    ``n_images`` (the images those captions show) and ``history`` (losses, validation scores, the epoch
    kept, ``best_epoch``, counted from 1 as ``train`` prints it, throughput, the PATR margin and output scale used,
    ``train_s``)."""
    start = time.perf_counter()
    adapter, history = train_adapter(
        torch.from_numpy(train.text_features[rows]),
        torch.from_numpy(train.image_features),
        torch.from_numpy(train.caption_image[rows]),
        config,
        validate=validate,
        device=device,
        progress=progress,
    )
    elapsed = time.perf_counter() - start
    return adapter, {
        "n_captions": int(len(rows)),
        "n_images": int(len(np.unique(train.caption_image[rows]))),
        "history": {"loss": history.loss, "val": history.val, "best_epoch": history.best_epoch + 1,
                    "samples_per_s": history.samples_per_s, "margin": history.margin,
                    "output_scale": history.output_scale, "train_s": elapsed},
    }


@renamed_keywords(out_dir="out")
def save_adapter(adapter: TextToImageAdapter, config: ZeroShotConfig, out: str | Path, **meta: object) -> Path:
    """Write ``adapter.safetensors``, the resolved ``config.yaml`` and ``meta.json``.

    ``meta.json`` holds the adapter's architecture (read back by :func:`load_adapter`) and
    the extra ``meta`` (training split, history, ...).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in adapter.state_dict().items()}
    tmp = out / (WEIGHTS + ".tmp")
    save_weights(state, tmp)  # as the umask allows: safetensors writes 0600, the other files were 0644
    tmp.replace(out / WEIGHTS)
    save_config(config, out / CONFIG)
    info = {"form": adapter.form, "normalize_output": adapter.normalize_output, "text_dim": adapter.text_dim,
            "image_dim": adapter.image_dim,
            "hidden_dims": adapter.hidden_dims,
            "dropout": adapter.dropout, "output_scale": float(adapter.output_scale), **meta}
    tmp = out / (META + ".tmp")
    tmp.write_text(json_text(info, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(out / META)  # written last: a checkpoint with a meta.json is a whole one
    return out


GLOBETROTTER_PREFIX = "globetrotter:"  # a text encoder spec naming a Globetrotter run or checkpoint folder


def text_encoder_weights(spec: str) -> dict | None:
    """What ``meta.json`` records of the text encoder's weights: for ``globetrotter:RUN``, the checkpoint that run
    loads now and its weights' sha256 (:func:`globetrotter.encoder.weights_fingerprint`); None for other encoders."""
    if not spec.startswith(GLOBETROTTER_PREFIX):
        return None
    from ..encoder import weights_fingerprint

    return weights_fingerprint(spec[len(GLOBETROTTER_PREFIX):])


def refuse_other_text_encoder_weights(path: Path, spec: str, recorded: dict | None) -> None:
    """One-line error when the text encoder ``spec`` of the adapter at ``path`` now holds other weights than those it
    was trained on (``recorded``, from its ``meta.json``): the adapter would map embeddings it never saw. An adapter
    saved without the record is not checked."""
    if not recorded:
        return
    now = text_encoder_weights(spec)
    if now is not None and now.get("weights_sha256") != recorded.get("weights_sha256"):
        raise UserError(f"{path}: the adapter was trained on the text encoder {spec}'s weights "
                        f"{recorded.get('checkpoint')} (sha256 {str(recorded.get('weights_sha256'))[:12]}), but it "
                        f"now loads {now['checkpoint']} (sha256 {str(now['weights_sha256'])[:12]}); train the adapter "
                        f"again (zeroshot train) on these weights")


def load_adapter(path: str | Path) -> tuple[TextToImageAdapter, ZeroShotConfig, dict]:
    """Load what :func:`save_adapter` wrote; one-line :class:`UserError` when it is not there, or when its text
    encoder (a Globetrotter run) holds other weights than those it was trained on."""
    path = Path(path)
    for name in (WEIGHTS, CONFIG, META):
        if not (path / name).is_file():
            raise UserError(f"{path}: not an adapter checkpoint (missing {name}; train one with `train`)")
    config = from_dict(ZeroShotConfig, read_yaml(path / CONFIG), where=str(path / CONFIG))
    try:
        meta = json.loads((path / META).read_text(encoding="utf-8"))
        adapter = TextToImageAdapter(meta["text_dim"], meta["image_dim"], meta["hidden_dims"], meta["dropout"],
                                     meta.get("output_scale", 1.0), meta.get("form", "xtd10"),
                                     meta.get("normalize_output", False))
    except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        what = f"no {err}" if isinstance(err, KeyError) else str(err).splitlines()[0]
        raise UserError(f"{path / META}: not an adapter's meta.json ({what}); train the adapter again") from None
    try:
        adapter.load_state_dict(load_file(str(path / WEIGHTS)))
    except Exception as err:  # noqa: BLE001 - a damaged file (SafetensorError) or another architecture (RuntimeError)
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()] or [type(err).__name__]
        # torch's "Error(s) in loading state_dict for TextToImageAdapter:" says what only on its next line
        first = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        raise UserError(f"{path / WEIGHTS}: does not load into the adapter its meta.json describes ({first})") from None
    refuse_other_text_encoder_weights(path, config.text_encoder, meta.get("text_encoder_weights"))
    adapter.eval()
    return adapter, config, meta

