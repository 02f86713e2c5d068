"""Sentence correspondence transfer test (Globetrotter paper, appendix A.1; Tables 5 and 7).

The task: a caption is cut in two; for half of the examples the second half is replaced by
the second half of another caption of the same language. A probe must tell whether the
two halves belong together. It is trained on the frozen token states of a model for the
first half of the languages (alphabetical) and tested on held-out captions of those
(*seen*) and on the other half of the languages (*unseen*, never used to train the probe):
a model whose languages share one representation loses little on the unseen half.

Shortcut controls (the paper: "uppercase, word breaks, length of sentences"):

- every caption is lower-cased, its whitespace collapsed and its final punctuation dropped,
  so neither half carries a capital or a full stop the other lacks;
- units are words for space-separated scripts and characters for scripts without spaces
  (zh, ja: a language whose captions mostly hold no space); the cut is at a unit boundary
  at a seeded relative position in [0.35, 0.65] of the caption, each half ≥ 2 units;
- a negative's second half comes from a caption of the same language, of another image,
  whose second half has (nearly) the same number of units: the neighbour in length order;
  so lengths, cut position and word breaks match between positives and negatives
  (:func:`surface_shortcut_accuracy` checks it: a classifier on those numbers is at chance);
- labels are exactly balanced per language; seen-language captions are split into
  train/test by image, and each part builds its negatives from its own captions only.

The probe (:class:`CorrespondenceProbe`): one pre-norm transformer encoder layer with one
attention head over the frozen token states, then a linear classifier on the sentence
token (position 0). Reported: seen and unseen accuracy, and the paper's relative decrease
against chance, ``(seen − unseen) / (seen − 0.5)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from backretrieval.errors import given, naming_flags
from globetrotter.errors import UserError

CUT_RANGE = (0.35, 0.65)
"""Relative cut position (share of the caption's units in the first half)."""
MIN_UNITS = 4
"""The shortest caption that is cut in two, in words (characters for unspaced scripts)."""
_FINAL_PUNCT = re.compile(r"[\s.!?。！？．,，;；:：]+$")


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, drop final punctuation (no case or full-stop shortcut)."""
    return _FINAL_PUNCT.sub("", " ".join(text.lower().split()))


def uses_spaces(captions: Sequence[str]) -> bool:
    """Whether a language's captions are cut at word breaks (at least half hold a space) or at characters."""
    return bool(np.mean([" " in c.strip() for c in captions]) >= 0.5) if len(captions) else True


@dataclass
class CorrespondenceSet:
    """Examples of the task, aligned by index: ``texts[i]`` (the two halves, joined),
    ``labels[i]`` (1 = the halves belong together), ``langs[i]``, and the unit counts of the
    two halves (``first_units``, ``second_units``) and their character counts."""

    texts: list[str]
    labels: np.ndarray
    langs: np.ndarray
    first_units: np.ndarray
    second_units: np.ndarray
    first_chars: np.ndarray
    second_chars: np.ndarray
    unit: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def surface_features(self) -> np.ndarray:
        """(N, 5) numbers a shortcut could use: unit and character lengths of both halves, cut share."""
        total = np.maximum(self.first_chars + self.second_chars, 1)
        return np.stack([self.first_units, self.second_units, self.first_chars, self.second_chars,
                         self.first_chars / total], 1).astype(np.float64)


def build_language(captions: Sequence[str], image_ids: Sequence[str], lang: str, rng: np.random.Generator,
                   min_units: int = 4, max_examples: int | None = None, window: int = 3) -> CorrespondenceSet:
    """Examples of one language from its captions (one example per distinct caption).

    ``image_ids`` tie captions of one image (a swap partner is always of another image).
    Captions shorter than ``min_units`` (≥ :data:`MIN_UNITS`) units are skipped; at most ``max_examples``
    are kept (a seeded sample). A negative's partner is drawn among the ``window`` nearest
    captions in second-half length order on each side.
    """
    if min_units < MIN_UNITS:
        raise ValueError(f"min_units={min_units}: a caption needs at least {MIN_UNITS} units to be cut in two halves "
                         f"that each say something")
    normed = [normalize(c) for c in captions]
    spaced = uses_spaces(normed)
    seen: dict[str, str] = {}
    for text, iid in zip(normed, image_ids):
        seen.setdefault(text, str(iid))
    texts = list(seen)
    units = [t.split(" ") if spaced else list(t.replace(" ", "")) for t in texts]
    keep = [i for i, u in enumerate(units) if len(u) >= min_units]
    keep = [keep[i] for i in rng.permutation(len(keep))]
    if max_examples is not None:
        keep = keep[:max_examples]
    joiner = " " if spaced else ""
    n = len(keep)
    unit_kind = "word" if spaced else "character"
    if n < 2:
        return _empty(lang, unit_kind)
    units = [units[i] for i in keep]
    images = np.array([seen[texts[i]] for i in keep])
    lengths = np.array([len(u) for u in units])
    cut = np.clip(np.rint(rng.uniform(*CUT_RANGE, n) * lengths).astype(int), 2, lengths - 2)
    firsts = [joiner.join(u[:c]) for u, c in zip(units, cut)]
    seconds = [joiner.join(u[c:]) for u, c in zip(units, cut)]
    second_len = lengths - cut
    labels = np.zeros(n, dtype=np.int64)
    labels[rng.permutation(n)[: n // 2 + (n % 2) * int(rng.integers(2))]] = 1
    # partners: neighbours in (second-half length, random) order, another image and another text
    order = np.lexsort((rng.random(n), second_len))
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    partner = np.full(n, -1)
    second_arr = np.array(seconds, dtype=object)
    near = np.array([o for k in range(1, window + 1) for o in (k, -k)])
    # random near neighbours first; then every farther offset in turn (rare: e.g. one image's captions)
    schedule = [None] * (4 * window) + [o for k in range(window + 1, n) for o in (k, -k)]
    todo = np.flatnonzero(labels == 0)
    for off in schedule:
        if not len(todo):
            break
        offs = near[rng.integers(0, len(near), len(todo))] if off is None else np.full(len(todo), off)
        cand = order[np.clip(pos[todo] + offs, 0, n - 1)]
        ok = (images[cand] != images[todo]) & (second_arr[cand] != second_arr[todo])
        partner[todo[ok]] = cand[ok]
        todo = todo[~ok]
    labels[todo] = 1  # no possible partner (a single image): kept as a positive
    out_second = [seconds[i] if labels[i] else seconds[partner[i]] for i in range(n)]
    second_units = np.where(labels == 1, second_len, second_len[np.maximum(partner, 0)])
    return CorrespondenceSet(
        texts=[f + joiner + s for f, s in zip(firsts, out_second)],
        labels=labels,
        langs=np.array([lang] * n),
        first_units=cut.astype(np.int64),
        second_units=second_units.astype(np.int64),
        first_chars=np.array([len(f) for f in firsts]),
        second_chars=np.array([len(s) for s in out_second]),
        unit={lang: unit_kind},
    )


def _empty(lang: str, unit_kind: str) -> CorrespondenceSet:
    z = np.zeros(0, dtype=np.int64)
    return CorrespondenceSet([], z, np.array([], dtype=str), z, z, z, z, {lang: unit_kind})


def concat(sets: Sequence[CorrespondenceSet]) -> CorrespondenceSet:
    """One set holding the examples of ``sets`` in order."""
    first_units, second_units, first_chars, second_chars = (
        np.concatenate([getattr(s, a) for s in sets])
        for a in ("first_units", "second_units", "first_chars", "second_chars"))
    return CorrespondenceSet(
        [t for s in sets for t in s.texts], np.concatenate([s.labels for s in sets]),
        np.concatenate([s.langs.astype(object) for s in sets]).astype(str),
        first_units, second_units, first_chars, second_chars,
        unit={k: v for s in sets for k, v in s.unit.items()},
    )


@dataclass
class CorrespondenceTask:
    """Train (seen languages), seen test (held-out images of the seen languages), unseen test."""

    train: CorrespondenceSet
    seen_test: CorrespondenceSet
    unseen_test: CorrespondenceSet
    seen: list[str]
    unseen: list[str]


def _seen(seen: Sequence[str]) -> str:
    """How a message names the seen languages given: ``--seen de,en`` on the command line, ``seen=['de', 'en']`` in
    Python."""
    return given("seen", ",".join(seen) if naming_flags() else list(seen))


def split_languages(languages: Sequence[str], seen: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """Seen = the first half of the sorted languages (rounded up) unless given; unseen = the rest."""
    languages = sorted(set(languages))
    if len(languages) < 2:
        raise UserError(f"the correspondence test needs at least 2 languages (the probe trains on the first half "
                        f"and is tested on the other), found {languages}")
    typed = list(seen) if seen else []  # seen as the caller gave it, for messages
    if seen:
        unknown = sorted(set(seen) - set(languages))
        if unknown:
            raise UserError(f"{_seen(typed)}: language(s) {', '.join(unknown)} not among {', '.join(languages)}")
        seen = sorted(set(seen))
    else:
        seen = languages[: (len(languages) + 1) // 2]
    unseen = [lang for lang in languages if lang not in seen]
    if not unseen:
        raise UserError(f"{_seen(typed or seen)}: leaves no unseen language to test transfer on (languages: "
                        f"{', '.join(languages)})")
    return seen, unseen


def build_task(metas: Sequence[dict], languages: Sequence[str] | None = None, seen: Sequence[str] | None = None,
               seed: int = 0, test_fraction: float = 0.2, max_per_language: int | None = 2000,
               min_units: int = 4) -> CorrespondenceTask:
    """The task from caption metadata (``caption``, ``lang``, ``image_id``; no group is needed).

    Seen-language captions are split by image into train/test (``test_fraction`` of the
    images); each part, and each unseen language, builds its own examples (at most
    ``max_per_language`` per language and part). Deterministic in ``seed``.
    """
    if not 0 < test_fraction < 1:
        raise UserError(f"{given('test_fraction', test_fraction)}: expected a share strictly between 0 and 1")
    by_lang: dict[str, tuple[list[str], list[str]]] = {}
    for m in metas:
        caps, ids = by_lang.setdefault(m["lang"], ([], []))
        caps.append(m["caption"])
        ids.append(str(m.get("image_id", m.get("key"))))
    if languages:
        missing = sorted(set(languages) - set(by_lang))
        if missing:
            raise UserError(f"no caption in language(s) {missing} (has {sorted(by_lang)})")
        by_lang = {k: v for k, v in by_lang.items() if k in set(languages)}
    seen, unseen = split_languages(list(by_lang), seen)
    rng = np.random.default_rng(seed)
    # examples per language: --max-per-language, its --test-fraction share for the seen languages' test images
    caps_of = {"training": max_per_language, "unseen test": max_per_language,
               "seen test": None if max_per_language is None else max(1, int(round(max_per_language * test_fraction)))}
    train: list[CorrespondenceSet] = []
    seen_test: list[CorrespondenceSet] = []
    unseen_test: list[CorrespondenceSet] = []
    for lang in seen:
        caps, ids = by_lang[lang]
        uniq = np.unique(ids)
        test_ids = set(uniq[rng.permutation(len(uniq))[: max(1, int(round(test_fraction * len(uniq))))]].tolist())
        is_test = np.array([i in test_ids for i in ids])
        for part, flag in ((train, False), (seen_test, True)):
            sel = np.flatnonzero(is_test == flag)
            cap = caps_of["training" if part is train else "seen test"]
            part.append(build_language([caps[i] for i in sel], [ids[i] for i in sel], lang, rng, min_units, cap))
    for lang in unseen:
        caps, ids = by_lang[lang]
        unseen_test.append(build_language(caps, ids, lang, rng, min_units, caps_of["unseen test"]))
    task = CorrespondenceTask(concat(train), concat(seen_test), concat(unseen_test), seen, unseen)
    for name, built in (("training", task.train), ("seen test", task.seen_test), ("unseen test", task.unseen_test)):
        if len(built) < 2:
            capped = "" if max_per_language is None else \
                f"; {given('max_per_lang', max_per_language)} keeps at most {caps_of[name]} a language here"
            raise UserError(f"the correspondence {name} set has {len(built)} example(s), needs 2: captions need at least "
                            f"{min_units} units (words, or characters for unspaced scripts){capped}")
    return task


def surface_shortcut_accuracy(train: CorrespondenceSet, test: CorrespondenceSet) -> float:
    """Accuracy on ``test`` of a logistic regression on :meth:`CorrespondenceSet.surface_features`
    fitted on ``train``: ≈ 0.5 when lengths and cut position give nothing away."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train.surface_features())
    clf = LogisticRegression(max_iter=1000).fit(scaler.transform(train.surface_features()), train.labels)
    return float((clf.predict(scaler.transform(test.surface_features())) == test.labels).mean())


# ----------------------------------------------------------------------------- probe


class CorrespondenceProbe(nn.Module):
    """One pre-norm transformer encoder layer with one head over frozen token states
    (B, L, d), then LayerNorm and a linear classifier on position 0 (the sentence token):
    a logit (B,) that the halves belong together (paper A.1)."""

    def __init__(self, d_model: int, ffn: int | None = None, dropout: float = 0.1) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, 1, ffn or 2 * d_model, dropout, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, 1)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The logit (B,) that each example's halves belong together, from token ``states`` (B, L, d) and ``mask``
        (1 = token)."""
        x = self.layer(states, src_key_padding_mask=mask == 0)
        return self.classifier(self.norm(x[:, 0])).squeeze(-1)


@dataclass
class Features:
    """Frozen token states (N, L, d) float32 and mask (N, L) (1 = token), as tensors."""

    states: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.states.shape[0]


def train_probe(train: Features, labels: np.ndarray, epochs: int = 3, batch_size: int = 64, lr: float = 1e-3,
                weight_decay: float = 0.01, seed: int = 0) -> CorrespondenceProbe:
    """Fit a :class:`CorrespondenceProbe` with AdamW and binary cross-entropy, ``epochs`` passes
    over the shuffled training examples (seeded: init, order and dropout)."""
    torch.manual_seed(seed)
    probe = CorrespondenceProbe(train.states.shape[-1])
    opt = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=weight_decay)
    y = torch.as_tensor(labels, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    n = len(train)
    steps = epochs * ((n + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.1)
    probe.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            loss = F.binary_cross_entropy_with_logits(probe(train.states[idx], train.mask[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return probe.eval()


@torch.no_grad()
def predict(probe: CorrespondenceProbe, feats: Features, batch_size: int = 256) -> np.ndarray:
    """(N,) 0/1 predictions of ``probe``."""
    out = [probe(feats.states[i : i + batch_size], feats.mask[i : i + batch_size]) > 0 for i in range(0, len(feats), batch_size)]
    return torch.cat(out).numpy().astype(np.int64) if out else np.zeros(0, np.int64)


def relative_decrease(seen: float, unseen: float, n_seen: int, chance: float = 0.5,
                      alpha: float = 0.05) -> float | None:
    """The paper's relative decrease: (seen − unseen) / (seen − chance); None unless seen is above chance beyond
    noise on its ``n_seen`` examples (one-sided binomial test at ``alpha``): a probe at chance has a denominator of
    noise, and a tiny one turns a tie between seen and unseen into a "relative decrease" of any size."""
    from scipy.stats import binomtest

    if seen <= chance or n_seen < 1:
        return None
    above = binomtest(int(round(seen * n_seen)), n_seen, chance, alternative="greater").pvalue < alpha
    return (seen - unseen) / (seen - chance) if above else None


def evaluate(task: CorrespondenceTask, feats: dict[str, Features], probe_seeds: Sequence[int] = (0,),
             epochs: int = 3, batch_size: int = 64, lr: float = 1e-3) -> dict:
    """Train a probe per seed on ``feats["train"]`` and score it on ``feats["seen_test"]`` and
    ``feats["unseen_test"]``. Returns fractions: ``seen_accuracy``, ``unseen_accuracy`` (means
    over seeds), ``relative_decrease``, ``per_language`` accuracy, ``per_seed`` rows,
    ``surface_shortcut_accuracy`` and ``chance`` (0.5)."""
    per_seed = []
    per_lang: dict[str, list[float]] = {lang: [] for lang in task.seen + task.unseen}
    for seed in probe_seeds:
        probe = train_probe(feats["train"], task.train.labels, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
        row: dict[str, Any] = {"seed": int(seed)}  # the seed, two accuracies, a relative decrease or None
        for name in ("seen_test", "unseen_test"):
            part: CorrespondenceSet = getattr(task, name)
            correct = predict(probe, feats[name]) == part.labels
            row[name.replace("_test", "_accuracy")] = float(correct.mean())
            for lang in np.unique(part.langs):
                per_lang[str(lang)].append(float(correct[part.langs == lang].mean()))
        row["relative_decrease"] = relative_decrease(row["seen_accuracy"], row["unseen_accuracy"], len(task.seen_test))
        per_seed.append(row)
    seen = float(np.mean([r["seen_accuracy"] for r in per_seed]))
    unseen = float(np.mean([r["unseen_accuracy"] for r in per_seed]))
    return {
        "seen_accuracy": seen,
        "unseen_accuracy": unseen,
        "relative_decrease": relative_decrease(seen, unseen, len(task.seen_test)),
        "seen_accuracy_std": float(np.std([r["seen_accuracy"] for r in per_seed])),
        "unseen_accuracy_std": float(np.std([r["unseen_accuracy"] for r in per_seed])),
        "chance": 0.5,
        "per_language": {k: float(np.mean(v)) for k, v in per_lang.items() if v},
        "per_seed": per_seed,
        "surface_shortcut_accuracy": surface_shortcut_accuracy(task.train, task.seen_test),
    }
