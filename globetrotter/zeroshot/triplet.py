"""Triplet and TripletXL: the BackRetrieval paper's case-study adapter (Fain et al. 2021, 3.2).

Documents (a title and a body, in one of several languages, no parallel data) are embedded
by a frozen multilingual text encoder. A siamese adapter, two dense layers with ReLU shared
by title and body, maps each to 300-d: ``x_t`` and ``x_b``. With ``d`` the cosine distance:

    L_TRIPLET^r   = max(0, d(x_rb, x_rt) - d(x_rb, x_nt) + alpha)                        (eq. 1)
    L_TRIPLETXL^r = L_TRIPLET^r + beta * L_XL^r                                           (eq. 2)
    L_XL^r        = sum_{l != l_r} | mean_{n in N_l} d(x_rb, x_nt) - mean_{n in N_{l_r}} d(x_rb, x_nt) |

where ``x_nt`` in eq. 1 is a random other title of the mini-batch and ``N_l`` the K nearest
titles of language ``l`` to ``x_rb`` (inside the mini-batch, the document itself excluded).
The paper's values: alpha = 0.1, beta = 0.01, K = 5, Adam lr 0.01, batch 128, 40 epochs,
a random 90/10 train/validation split. A document is represented by ``concat(x_t, x_b)``.
The adapter trains on documents without images; those with images evaluate it with
BackRetrieval over every language pair (one box per model, the paper's Fig. 3).

Documents are JSONL, one object a line: ``{"lang": "en", "title": str, "body": str,
"image": "relative/or/absolute/path.jpg" (optional), "id": str (optional)}``.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from backretrieval.devices import check_device
from backretrieval.files import is_whole, require_count

from globetrotter.errors import UserError

PAPER_MARGIN, PAPER_BETA, PAPER_K = 0.1, 0.01, 5  # eqs. (1), (2)


# --------------------------------------------------------------------------- documents
@dataclass
class Document:
    """One document: language, title, body and an optional image path (absolute)."""

    lang: str
    title: str
    body: str
    image: str | None = None
    id: str = ""


def read_documents(path: str | Path) -> list[Document]:
    """Read a JSONL file of documents (see the module docstring for the fields).

    Image paths are resolved relative to the file's folder. Any malformed line, missing
    or non-string field, or a ``lang`` that is not a lowercase code (``"EN"`` would be another
    language than ``"en"``) is a one-line :class:`UserError` naming ``file:line`` and the key.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: documents file not found (expected JSONL with lang/title/body[/image])")
    docs: list[Document] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise UserError(f"{where}: not UTF-8 text") from None
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{where}: malformed JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            for key in ("lang", "title", "body"):
                if not isinstance(obj.get(key), str) or not obj[key].strip():
                    raise UserError(f"{where}: key '{key}' must be a non-empty string")
            lang = obj["lang"]
            if lang != lang.strip().lower():  # "EN" next to "en" made two languages of one
                raise UserError(f"{where}: key 'lang' {lang!r} is not a lowercase language code; write "
                                f"{lang.strip().lower()!r}")
            image = obj.get("image")
            if image is not None:
                if not isinstance(image, str) or not image:
                    raise UserError(f"{where}: key 'image' must be a file path or absent")
                image = str((path.parent / image).resolve()) if not Path(image).is_absolute() else image
            docs.append(Document(obj["lang"], obj["title"], obj["body"], image, str(obj.get("id", f"{path.stem}:{lineno}"))))
    if not docs:
        raise UserError(f"{path}: no documents")
    return docs


# --------------------------------------------------------------------------- model
class SiameseAdapter(nn.Module):
    """Two dense ReLU layers shared by title and body embeddings (BackRetrieval 3.2).

    ``forward(title [B, D], body [B, D]) -> (x_t [B, out], x_b [B, out])``; a document's
    representation is ``concat(x_t, x_b)`` (:meth:`represent`).
    """

    def __init__(self, in_dim: int, hidden_dim: int = 300, out_dim: int = 300) -> None:
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim), nn.ReLU())
        self.in_dim, self.out_dim = in_dim, out_dim

    def forward(self, title: torch.Tensor, body: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The shared tower applied to the title and to the body embeddings."""
        return self.tower(title), self.tower(body)

    @torch.no_grad()
    def represent(self, title: torch.Tensor, body: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
        """``concat(x_t, x_b)`` ``[N, 2 * out_dim]`` in eval mode, in batches, on the CPU (the adapter may be
        on another device)."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        out = [
            torch.cat(self(title[i : i + batch_size].to(device=device, dtype=torch.float32),
                           body[i : i + batch_size].to(device=device, dtype=torch.float32)), dim=1).cpu()
            for i in range(0, len(title), batch_size)
        ]
        self.train(was_training)
        return torch.cat(out) if out else torch.empty(0, 2 * self.out_dim)


# --------------------------------------------------------------------------- losses
def cosine_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine distance ``1 - cos(x, y)``: ``[B, D], [B, D] -> [B]``."""
    return 1.0 - F.cosine_similarity(x, y, dim=-1, eps=1e-8)


def cosine_distance_matrix(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """All cosine distances ``[N, D], [M, D] -> [N, M]``."""
    return 1.0 - F.normalize(x, dim=-1, eps=1e-8) @ F.normalize(y, dim=-1, eps=1e-8).T


def random_other_index(batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """For each row a uniformly random *other* row of the batch ``[B]`` (needs B >= 2)."""
    if batch < 2:
        raise ValueError("a negative needs a batch of at least 2")
    shift = torch.randint(1, batch, (batch,), generator=generator)
    return (torch.arange(batch) + shift) % batch


def triplet_loss(
    body: torch.Tensor, title: torch.Tensor, negative_index: torch.Tensor, margin: float = PAPER_MARGIN
) -> torch.Tensor:
    """BackRetrieval eq. (1) per document ``[B]``: ``max(0, d(b_r, t_r) - d(b_r, t_n) + margin)``,
    ``d`` the cosine distance and ``t_n = title[negative_index]``."""
    return (cosine_distance(body, title) - cosine_distance(body, title[negative_index]) + margin).clamp_min(0.0)


def cross_lingual_knn_loss(body: torch.Tensor, title: torch.Tensor, langs: torch.Tensor, k: int = PAPER_K) -> torch.Tensor:
    """BackRetrieval eq. (2)'s L_XL per document ``[B]``.

    For document ``r``, ``m_l`` is the mean cosine distance from ``x_rb`` to its ``k`` nearest
    titles of language ``l`` in the batch (fewer when the batch has fewer; ``r``'s own title
    excluded); ``L_XL = sum_{l != l_r} |m_l - m_{l_r}|`` over the languages present.
    A document alone in its language has no ``m_{l_r}`` and loss 0. ``langs`` ``[B]`` long.
    """
    require_count(k, "k")  # 0 gave loss 0 in silence, -1 torch's topk error
    batch = body.shape[0]
    dist = cosine_distance_matrix(body, title)  # [B, B], row r: distances from x_rb to every x_nt
    eye = torch.eye(batch, dtype=torch.bool, device=body.device)
    means = []
    for lang in torch.unique(langs):
        excluded = (langs != lang)[None, :] | eye  # keep titles of `lang`, never r's own
        kk = min(k, int((langs == lang).sum()))
        masked = dist.masked_fill(excluded, float("inf"))
        values = masked.topk(kk, dim=1, largest=False).values  # [B, kk]
        finite = torch.isfinite(values)
        count = finite.sum(1)
        total = torch.where(finite, values, torch.zeros_like(values)).sum(1)
        means.append(torch.where(count > 0, total / count.clamp_min(1), torch.full_like(total, float("nan"))))
    m = torch.stack(means, dim=1)  # [B, L]
    lang_col = torch.searchsorted(torch.unique(langs), langs)
    own = m.gather(1, lang_col[:, None])  # [B, 1]
    gap = (m - own).abs()
    other = torch.ones_like(gap, dtype=torch.bool).scatter_(1, lang_col[:, None], False)
    gap = torch.where(other & torch.isfinite(gap), gap, torch.zeros_like(gap))
    return gap.sum(1)


def triplet_xl_loss(
    body: torch.Tensor,
    title: torch.Tensor,
    langs: torch.Tensor,
    negative_index: torch.Tensor,
    margin: float = PAPER_MARGIN,
    beta: float = PAPER_BETA,
    k: int = PAPER_K,
) -> torch.Tensor:
    """BackRetrieval eq. (2) per document ``[B]``: ``L_TRIPLET + beta * L_XL`` (beta = 0 gives Triplet)."""
    loss = triplet_loss(body, title, negative_index, margin)
    if beta:
        loss = loss + beta * cross_lingual_knn_loss(body, title, langs, k)
    return loss


# --------------------------------------------------------------------------- training
@dataclass
class TripletConfig:
    """BackRetrieval 3.2 training setup (paper values); ``beta = 0`` is Triplet, 0.01 TripletXL."""

    hidden_dim: int = 300
    out_dim: int = 300
    margin: float = PAPER_MARGIN  # eq. (1) alpha
    beta: float = 0.0  # eq. (2); TripletXL uses 0.01
    k: int = PAPER_K  # eq. (2) nearest neighbours per language
    lr: float = 0.01
    batch_size: int = 128
    epochs: int = 40
    val_fraction: float = 0.1  # random 90/10 train/validation split
    seed: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        if not is_whole(self.batch_size) or self.batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2, got {self.batch_size}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        for name in ("k", "epochs", "hidden_dim", "out_dim"):  # 1.5 epochs: range's TypeError
            if not is_whole(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)}")
        if not is_whole(self.seed):  # 1.5: torch's manual_seed error
            raise ValueError(f"seed must be an integer, got {self.seed}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be > 0 and finite, got {self.lr}")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"beta must be >= 0 and finite, got {self.beta}")
        if not (math.isfinite(self.margin) and self.margin >= 0):  # < 0: the own title may be farther than another
            raise ValueError(f"margin must be >= 0 and finite, got {self.margin}")


TRIPLET = TripletConfig()
TRIPLET_XL = TripletConfig(beta=PAPER_BETA)


@dataclass
class TripletHistory:
    """Mean training and validation loss per epoch, and the epoch kept (lowest validation loss)."""

    train: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    best_epoch: int = -1


def _epoch_loss(model: SiameseAdapter, title: torch.Tensor, body: torch.Tensor, langs: torch.Tensor,
                config: TripletConfig, gen: torch.Generator, optimizer: torch.optim.Optimizer | None = None) -> float:
    n = title.shape[0]
    order = torch.randperm(n, generator=gen).to(title.device)
    total, batches = 0.0, 0
    for start in range(0, n, config.batch_size):
        idx = order[start : start + config.batch_size]
        if idx.numel() < 2:
            continue
        x_t, x_b = model(title[idx], body[idx])
        neg = random_other_index(idx.numel(), gen).to(title.device)
        loss = triplet_xl_loss(x_b, x_t, langs[idx], neg, config.margin, config.beta, config.k).mean()
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        total += float(loss.detach())
        batches += 1
    return total / max(batches, 1)


def train_siamese(
    title: torch.Tensor,
    body: torch.Tensor,
    langs: torch.Tensor,
    config: TripletConfig = TRIPLET,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[SiameseAdapter, TripletHistory]:
    """Train the siamese adapter with Triplet (``beta = 0``) or TripletXL (eq. 2) on ``device``.

    ``title``/``body`` ``[N, D]``: frozen embeddings of the training documents; ``langs``
    ``[N]`` long language ids. A random ``val_fraction`` is held out; the weights of the
    epoch with the lowest validation loss are kept (the last epoch when nothing is held out).
    The adapter returned is on ``device``.
    """
    title, body, langs = (torch.as_tensor(x) for x in (title, body, langs))  # numpy: AttributeError: no .to
    if title.shape != body.shape or title.ndim != 2 or langs.shape != (title.shape[0],):
        raise ValueError("title and body must be [N, D] and langs [N]")
    config.validate()
    for name, x in (("title", title), ("body", body)):
        if not torch.isfinite(x).all():  # every loss NaN, and the last epoch kept, in silence
            raise UserError(f"{name}: contains NaN or inf")
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    n = title.shape[0]
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(n * config.val_fraction)) if n * config.val_fraction >= 2 else 0
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    if train_idx.numel() < 2:
        raise UserError(f"need at least 2 training documents, got {train_idx.numel()}")
    device = torch.device(check_device(device, UserError))  # a GPU this machine lacks: one line, not torch's
    title, body = title.to(device=device, dtype=torch.float32), body.to(device=device, dtype=torch.float32)
    langs, val_idx, train_idx = langs.to(device), val_idx.to(device), train_idx.to(device)
    model = SiameseAdapter(title.shape[1], config.hidden_dim, config.out_dim).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    history = TripletHistory()
    best, best_state = math.inf, None
    name = "TripletXL" if config.beta else "Triplet"
    for epoch in tqdm(range(config.epochs), desc=name, disable=not progress):
        model.train()
        history.train.append(_epoch_loss(model, title[train_idx], body[train_idx], langs[train_idx], config, gen, optimizer))
        if n_val:
            model.eval()
            with torch.no_grad():
                val_gen = torch.Generator().manual_seed(config.seed + 1)  # same negatives every epoch
                history.val.append(_epoch_loss(model, title[val_idx], body[val_idx], langs[val_idx], config, val_gen))
            if history.val[-1] < best:
                best, best_state, history.best_epoch = history.val[-1], copy.deepcopy(model.state_dict()), epoch
    if best_state is not None:
        model.load_state_dict(best_state)
    else:
        history.best_epoch = config.epochs - 1
    model.eval()
    return model, history
