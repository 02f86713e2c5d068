"""Training batches from an image-feature cache: captions tokenized once, image rows read from memory.

The stream is index-based: the global batch of step ``s`` is a pure function of
``(seed, s)``, and each process takes its slice of it. So a resumed run reads exactly the
batches the uninterrupted one would have, and N processes see the same global batches as one.

Batching (``data.batching``):

* ``random`` (the paper): captions in a seeded permutation per epoch;
* ``neighbours`` (docs/design.md section 10): half the batch are anchors taken as in ``random``,
  the other half holds, for each anchor, a caption of one of its image's ``k`` visual nearest
  neighbours captioned in another language (:mod:`.neighbours`). α is still computed in the
  batch by eq. 2 with the learned heads, so its gating decides which mined pairs become
  positives; only images and their own captions are used, no parallel text;
* ``pairs`` (parallel data, the supervised baseline): half as many groups as the batch, two
  captions of each group in two different languages (where a group has several captions in a
  language, one of them drawn at random).

Each sample's two views are two different cached augmented views of its image; a cache with fewer than two (imported
embeddings: the whole image only, :mod:`.feature_import`) gives its whole-image row as both (L_x, α and neighbour
batching read it; L_v, which needs two views, is refused with ``model.image_backbone: imported`` by the config).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from data_prep.shards import iter_metas

from ..errors import UserError
from ..tokenizer import encode_batch, special_ids
from .feature_cache import FeatureCache
from .neighbours import other_language_neighbours
from .subset import keeps_caption
from .truth import truth_id


def _csr(owner: np.ndarray, n_owners: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Members grouped by owner: (order, start, count) so owner o's members are order[start[o]: start[o] + count[o]]."""
    order = np.argsort(owner, kind="stable")
    count = np.bincount(owner, minlength=n_owners)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    return order, start, count


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-empty lists as (order, start, count), list o being order[start[o]: start[o] + count[o]] (:func:`_csr`'s
    form)."""
    count = np.array([len(v) for v in lists])
    return np.concatenate([np.asarray(v) for v in lists]), np.concatenate([[0], np.cumsum(count)[:-1]]), count


class _Captions:
    """The fields of a split's kept captions that batching reads, one list each."""

    def __init__(self) -> None:
        self.captions: list[str] = []
        self.langs: list[str] = []
        self.image_ids: list[str] = []
        self.truth: list[int] = []
        self.groups: list = []

    @classmethod
    def read(cls, split_dir: str | Path, languages: set | None, image_share: float, groups: bool) -> "_Captions":
        out = cls()
        for m in iter_metas(split_dir):
            if languages is None and image_share >= 1 or keeps_caption(m, languages, image_share):
                out.captions.append(m["caption"])
                out.langs.append(m["lang"])
                out.image_ids.append(str(m["image_id"]))
                out.truth.append(truth_id(m))
                if groups:
                    out.groups.append(m.get("group"))
        return out


def _encode(tokenizer: Tokenizer, captions: list[str], max_length: int,
            chunk: int = 65_536) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (int32, padded with the pad id) and attention masks (uint8) ``[N, max_length]``, tokenized a
    chunk at a time (a quarter of int64 rows' memory; a batch is widened back to int64)."""
    ids = torch.full((len(captions), max_length), special_ids(tokenizer)["pad"], dtype=torch.int32)
    mask = torch.zeros(len(captions), max_length, dtype=torch.uint8)
    for s in range(0, len(captions), chunk):
        rows, masks = encode_batch(tokenizer, captions[s:s + chunk], max_length)
        i, m = torch.tensor(rows, dtype=torch.int32), torch.tensor(masks, dtype=torch.uint8)
        ids[s:s + len(i), :i.shape[1]] = i
        mask[s:s + len(m), :m.shape[1]] = m
    return ids, mask


def pair_groups(groups: Sequence, langs: Sequence[str], split_dir: str | Path) -> tuple[list[list[int]], list[list[int]]]:
    """For ``data.batching: pairs``: the groups captioned in at least two languages (each a list of its (group,
    language) slots) and each slot's captions (row indices); a one-line error when there is none (a split
    without translation groups, or one language of them kept), on either path (pixels or cached features)."""
    slots: dict[tuple[str, str], list[int]] = defaultdict(list)  # (group, language) -> its captions, in order
    for i, (group, lang) in enumerate(zip(groups, langs)):
        if group is not None:
            slots[(str(group), lang)].append(i)
    by_group: dict[str, list[int]] = defaultdict(list)
    for slot, (group, _) in enumerate(slots):
        by_group[group].append(slot)
    members = [v for v in by_group.values() if len(v) >= 2]
    if not members:
        raise UserError(f"{split_dir}: data.batching=pairs needs groups captioned in two or more languages (a parallel split)")
    return members, list(slots.values())


class FeatureBatches:
    """Endless batches of ``local_batch`` samples for process ``rank`` of ``world``, from step ``start_step`` on,
    of the captions of ``languages`` (``data.train_languages``; None: every language of the split) whose image is in
    ``image_share`` (``data.train_image_share``, :mod:`.subset`)."""

    def __init__(self, split_dir: str | Path, cache: FeatureCache | None, tokenizer: Tokenizer, local_batch: int,
                 max_length: int, seed: int = 0, rank: int = 0, world: int = 1, batching: str = "random",
                 neighbours_k: int = 10, start_step: int = 0, languages: Sequence[str] | None = None,
                 image_share: float = 1.0) -> None:
        keep = None if languages is None else set(languages)
        # the split streamed into the few fields batching reads (no list of whole caption records is held);
        # the others' captions (and their images) are left out
        metas = _Captions.read(split_dir, keep, image_share, groups=batching == "pairs")
        if not metas.captions:
            if languages is not None or image_share < 1:
                named = ([] if languages is None else [f"data.train_languages={','.join(languages)}"]) + \
                    ([f"data.train_image_share={image_share}"] if image_share < 1 else [])
                raise UserError(f"{split_dir}: no caption in {' and '.join(named)}")
        self.local_batch, self.rank, self.world, self.seed = local_batch, rank, world, seed
        self.batch_size = local_batch * world
        self.batching, self.start_step = batching, start_step
        self._permutations: dict[tuple[int, int, int], np.ndarray] = {}
        self.cache = cache
        self.ids, self.mask = _encode(tokenizer, metas.captions, max_length)
        metas.captions = []
        self.truth = torch.tensor(metas.truth, dtype=torch.long)
        self.langs = np.array(metas.langs)
        image_ids = metas.image_ids
        if cache is None:  # captions only (no loss reads the images): number the images of the split
            self.rows = np.unique(image_ids, return_inverse=True)[1]
        else:
            self.rows = cache.rows(image_ids, split_dir)  # caption -> cache row
        # images of this split, numbered 0..n-1, and their captions
        uniq, self.image_of = np.unique(self.rows, return_inverse=True)
        self.image_rows = uniq
        self.captions_of = _csr(self.image_of, len(uniq))
        if batching == "neighbours":
            if cache is None:
                raise UserError("data.batching=neighbours mines visual neighbours: it needs images (a loss that uses them)")
            if self.batch_size % 2:
                raise UserError(f"data.batching=neighbours needs an even batch size, got {self.batch_size}")
            image_lang = np.empty(len(uniq), dtype=self.langs.dtype)
            image_lang[self.image_of] = self.langs
            # the cache's float16 rows (a memory-mapped view when every cached image is used, in order)
            every = len(uniq) == len(cache.features) and bool((uniq == np.arange(len(uniq))).all())
            whole = cache.features[:, 0] if every else cache.features[uniq, 0]
            self.neighbours = other_language_neighbours(whole, image_lang, neighbours_k)
        elif batching == "pairs":
            if self.batch_size % 2:
                raise UserError(f"data.batching=pairs needs an even batch size, got {self.batch_size}")
            self.group_slots, self.slot_captions = self._groups(metas.groups, metas.langs, split_dir)
        elif batching != "random":
            raise UserError(f"data.batching must be random, neighbours or pairs, got {batching!r}")

    @staticmethod
    def _groups(groups: list, langs: list[str], split_dir: str | Path) -> tuple[tuple, tuple]:
        """The groups captioned in at least two languages, as two CSRs: group -> its (group, language) slots, and
        slot -> its captions (several where a group has more than one caption in a language)."""
        members, slots = pair_groups(groups, langs, split_dir)
        return _flat(members), _flat(slots)

    def _epoch_order(self, n: int, first: int, size: int, salt: int) -> np.ndarray:
        """Items ``first .. first + size`` of the endless sequence of seeded per-epoch permutations of ``range(n)``."""
        pos = np.arange(first, first + size)
        epochs = pos // n
        out = np.empty(size, dtype=np.int64)
        for e in np.unique(epochs):
            where = epochs == e
            out[where] = self._permutation(n, salt, int(e))[pos[where] % n]
        return out

    def _permutation(self, n: int, salt: int, epoch: int) -> np.ndarray:
        """The seeded permutation of ``range(n)`` for ``epoch``; the current one is kept (a step must not redraw it)."""
        key = (n, salt, epoch)
        if key not in self._permutations:
            if len(self._permutations) >= 4:  # an epoch spans many steps: keep only the latest few
                self._permutations.pop(next(iter(self._permutations)))
            self._permutations[key] = np.random.default_rng([self.seed, salt, epoch]).permutation(n)
        return self._permutations[key]

    def _pick(self, rng: np.random.Generator, csr: tuple[np.ndarray, np.ndarray, np.ndarray], owners: np.ndarray) -> np.ndarray:
        order, start, count = csr
        return order[start[owners] + rng.integers(0, count[owners])]

    def global_indices(self, step: int) -> np.ndarray:
        """Caption indices of the global batch of ``step`` (a function of the seed and ``step`` only)."""
        rng = np.random.default_rng([self.seed, 1, step])
        b = self.batch_size
        if self.batching == "random":
            return self._epoch_order(len(self.ids), step * b, b, salt=0)
        if self.batching == "neighbours":
            anchors = self._epoch_order(len(self.ids), step * (b // 2), b // 2, salt=0)
            k = self.neighbours.shape[1]
            images = self.neighbours[self.image_of[anchors], rng.integers(0, k, len(anchors))]
            mates = self._pick(rng, self.captions_of, images)
            return np.stack([anchors, mates], axis=1).ravel()  # anchor, its mate, next anchor, ...
        order, start, count = self.group_slots
        groups = self._epoch_order(len(count), step * (b // 2), b // 2, salt=2)
        first = rng.integers(0, count[groups])
        second = (first + 1 + rng.integers(0, count[groups] - 1)) % count[groups]
        slots = np.stack([order[start[groups] + first], order[start[groups] + second]], axis=1).ravel()
        # one of each slot's captions, from a stream of its own: with one caption per slot, the batches are those
        # of the first captions alone
        return self._pick(np.random.default_rng([self.seed, 3, step]), self.slot_captions, slots)

    def batch(self, step: int) -> dict:
        """This process's slice of the global batch of ``step``: tokens, two cached views, truth ids, languages."""
        mine = slice(self.rank * self.local_batch, (self.rank + 1) * self.local_batch)
        index = self.global_indices(step)[mine]
        picked = torch.from_numpy(index)
        mask = self.mask[picked].long()
        width = int(mask.sum(1).max())
        batch = {
            "input_ids": self.ids[picked, :width].long(),
            "attention_mask": mask[:, :width],
            "truth": self.truth[picked],
            "langs": self.langs[index].tolist(),
        }
        if self.cache is not None and self.cache.views < 2:  # the whole image only: both views are its row
            whole = torch.from_numpy(np.asarray(self.cache.features[self.rows[index], 0], dtype=np.float32))
            batch["view1"], batch["view2"] = whole, whole.clone()
        elif self.cache is not None:
            rng = np.random.default_rng([self.seed, 2, step])  # views of the global batch, then this process's slice
            k = self.cache.views
            v1 = 1 + rng.integers(0, k, self.batch_size)
            v2 = 1 + (v1 + rng.integers(0, k - 1, self.batch_size)) % k  # a different view of the same image
            v1, v2 = v1[mine], v2[mine]
            rows = self.rows[index]
            batch["view1"] = torch.from_numpy(np.asarray(self.cache.features[rows, v1], dtype=np.float32))
            batch["view2"] = torch.from_numpy(np.asarray(self.cache.features[rows, v2], dtype=np.float32))
        return batch

    def __iter__(self) -> Iterator[dict]:
        step = self.start_step
        while True:
            yield self.batch(step)
            step += 1
