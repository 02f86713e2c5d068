"""A resumable training stream: seeded, skippable, and tolerant of bad shards.

Each data worker of each process reads its own endless stream: shards drawn with
replacement and samples shuffled by RNGs seeded from ``(run seed, rank, worker)``, and each
sample's augmentations seeded from ``(run seed, rank, worker, sample index)``. Nothing in
the stream depends on a worker's global RNG state, so the stream's position is one number
per worker (the ``cursor``: samples it has handed on). A resumed run replays the same
stream and skips the first ``cursor`` samples *before* decoding their images, then goes on
exactly where the checkpoint left it (:class:`StreamPosition`).

The DataLoader hands out batches round-robin over its workers, so the batch of step ``s``
comes from *logical* worker ``s % W``; a loader restarted at step ``s`` maps its physical
worker ``p`` to logical worker ``(p + s) % W`` and the order is unchanged.

Bad data (a truncated or unreadable shard, a sample whose image or json does not decode)
is skipped and counted once per sample (``shard/key``: shards are read again and again, a
corrupt file is one bad sample); every batch carries the bad samples its worker met since its
last batch, so the trainer counts across worker processes. Past ``max_bad``, or after a long run of draws or samples
that gave nothing usable (:data:`EMPTY_DRAWS`, :data:`UNUSABLE_IN_A_ROW`), the stream stops with a marker batch and
the trainer raises a one-line error naming the shard.
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import webdataset as wds

from data_prep.shards import check_meta

from ..errors import UserError
from .views import decode_rgb

IMAGE_KEYS = ("png", "jpg", "jpeg")
WORKER, CURSOR, BAD, BAD_SHARD, STOP = "stream/worker", "stream/cursor", "stream/bad", "stream/bad_shard", "stream/stop"
STREAM_KEYS = (WORKER, CURSOR, BAD, BAD_SHARD, STOP)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (``numpy.random.SeedSequence``), for independent streams."""
    return int(np.random.SeedSequence([int(p) % 2**64 for p in parts]).generate_state(1, np.uint64)[0] >> 1)


@dataclass
class StreamPosition:
    """Where one process's data stream is: samples handed on per logical worker, bad samples met.

    This is what a checkpoint stores (one per process) to resume the stream exactly.
    """

    workers: int = 1  # logical workers W (data.workers, at least 1)
    cursors: list[int] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # distinct bad samples met, as "shard/key"
    bad_shard: str = ""  # shard of the last bad sample

    def __post_init__(self) -> None:
        self.cursors = list(self.cursors) or [0] * self.workers
        self.bad = list(self.bad)

    @property
    def bad_total(self) -> int:
        """How many distinct bad samples this process has met."""
        return len(self.bad)

    def to_dict(self) -> dict:
        """The position as a plain dict, as a checkpoint saves it; ``StreamPosition(**d)`` rebuilds it."""
        return {"workers": self.workers, "cursors": self.cursors, "bad": self.bad, "bad_shard": self.bad_shard}

    def consume(self, batch: dict[str, Any], max_bad: int) -> dict[str, Any]:
        """Record a batch's stream fields (removed from the batch and returned without them).

        Raises the one-line error when the stream stopped because a worker met more than
        ``max_bad`` bad samples (the trainer checks the total over all processes itself).
        """
        fields = {k: batch.pop(k) for k in STREAM_KEYS if k in batch}
        if not fields:  # a loader without stream fields (e.g. one whose batches are a function of the step)
            return batch
        w = int(fields[WORKER])
        self.bad += [b for b in fields[BAD] if b not in self.bad]
        self.bad_shard = fields[BAD_SHARD] or self.bad_shard
        stop = fields.get(STOP)
        if stop:  # True: too many bad samples; a message: the stream found no readable sample at all
            raise UserError(stop) if isinstance(stop, str) else too_many_bad(self.bad_total, max_bad, self.bad_shard)
        self.cursors[w] = int(fields[CURSOR])
        return batch


def too_many_bad(count: int, max_bad: int, shard: str) -> UserError:
    """The one-line error (returned, not raised) for ``count`` distinct bad samples skipped, more than
    ``data.max_bad_samples`` (``max_bad``), naming ``shard``."""
    return UserError(f"{shard or 'the training data'}: {count} distinct bad samples skipped (truncated/unreadable shard or "
                     f"undecodable sample), more than data.max_bad_samples={max_bad}; check or rewrite this shard")


class BadSamples:
    """A webdataset exception handler that skips and counts distinct bad samples (``shard/key``).

    Remembers the shard of the last one and the ones not yet reported (``new``); returns
    False (stop) once the count passes ``limit``. While ``active`` is False (replaying
    samples already consumed before a resume) errors are skipped without being counted again.
    ``reading`` is the shard being read (errors inside a tar stream do not name it).
    """

    def __init__(self, seen: set[str], limit: int, worker: int) -> None:
        self.seen, self.limit, self.worker = set(seen), limit, worker
        self.new: list[str] = []
        self.shard, self.reading, self.active = "", "", True
        self.good = 0  # samples read whole (json decoded), so that a stream with none can stop
        self.starved = ""  # why the stream stopped without a readable sample, once it has
        self.last = ""  # the last error skipped, one line

    @property
    def count(self) -> int:
        """Distinct bad samples met, those met before a resume included."""
        return len(self.seen)

    def __call__(self, exn: Exception, shard: str | None = None, key: str | None = None) -> bool:
        if not self.active:
            return True
        self.shard = shard or self.reading
        name = f"{Path(self.shard).name}/{key or 'unreadable'}"
        self.last = f"{type(exn).__name__}: {str(exn).splitlines()[0][:200] if str(exn) else ''}"
        if name not in self.seen:
            self.seen.add(name)
            self.new.append(name)
            print(f"data: skipped bad sample {key or '(unreadable tar)'} of {self.shard} ({self.count} so far, "
                  f"worker {self.worker}): {self.last}", file=sys.stderr, flush=True)
        return self.count <= self.limit

    def report(self) -> list[str]:
        """The bad samples met since the last call."""
        new, self.new = self.new, []
        return new


EMPTY_DRAWS = 50  # shards read in a row without one readable sample: the stream stops with a one-line error
UNUSABLE_IN_A_ROW = 1000  # samples in a row whose image would not decode (the same few met again and again): stop


def _resampled(urls: list[str], rng: random.Random, bad: BadSamples) -> Iterator[dict]:
    """Shards drawn with replacement, forever; the handler learns which shard is being read. Stops (and says why in
    ``bad.starved``) after :data:`EMPTY_DRAWS` draws in a row that gave no readable sample, which a healthy split
    never does: truncated or unreadable shards would otherwise be drawn again and again without a batch."""
    empty, good = 0, bad.good
    while True:
        url = rng.choice(urls)
        bad.reading = url
        yield {"url": url}  # resumes once that shard is read through
        empty, good = (empty + 1 if bad.good == good else 0), bad.good
        if empty >= EMPTY_DRAWS:
            bad.starved = (f"{bad.shard or url}: no readable sample in {empty} shard reads in a row (truncated or "
                           f"unreadable shards, {bad.count} bad so far); check or rewrite the split's shards")
            return


def _with_meta(samples: Iterator[dict], bad: BadSamples) -> Iterator[dict]:
    """Decode each sample's json (cheap); images stay bytes until the sample is used."""
    for sample in samples:
        try:
            if "json" not in sample:
                raise ValueError("no .json (an incomplete sample: truncated shard?)")
            sample["meta"] = json.loads(sample["json"])
            check_meta(sample["meta"], sample.get("__url__", "?"), sample.get("__key__", "?"))  # caption, lang, id
        except Exception as exn:  # noqa: BLE001 - a missing or malformed json is bad data, not a bug
            if not bad(exn, sample.get("__url__"), sample.get("__key__")):
                return
            continue
        bad.good += 1
        yield sample


def _image_tensors(sample: dict, views: Callable[[torch.Tensor, int], dict[str, torch.Tensor]],
                   seed: int) -> tuple[dict[str, torch.Tensor], dict]:
    """Decode the sample's image and make its tensors (:mod:`.views`) with the sample's own seed."""
    ext = next((k for k in IMAGE_KEYS if k in sample), None)
    if ext is None:
        raise ValueError(f"sample {sample.get('__key__')} has no image ({'/'.join(IMAGE_KEYS)})")
    return views(decode_rgb(sample[ext]), seed), sample["meta"]


@dataclass
class ResumableStream(torch.utils.data.IterableDataset):
    """One process's batches (see the module docstring); each batch also carries the ``stream/*`` fields.

    ``views`` makes a sample's image tensors from the decoded image and the sample's seed
    (:class:`~.views.CpuViews`, :class:`~.views.DeviceInputs`; None: captions only). ``order`` turns
    the sample stream (json decoded, images as bytes) into the training order (shuffle, pairing);
    it gets an RNG of its own.
    """

    urls: list[str]
    collate: Callable[[list[tuple]], dict]
    local_batch: int
    views: Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None
    order: Callable[[Iterator[dict], random.Random], Iterator[dict]]
    seed: int = 0
    rank: int = 0
    position: StreamPosition = field(default_factory=StreamPosition)
    offset: int = 0  # the step the loader starts at (logical worker = (physical + offset) % W)
    max_bad: int = 100

    def __iter__(self) -> Iterator[dict]:
        info = torch.utils.data.get_worker_info()
        physical, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if workers != self.position.workers:
            raise ValueError(f"stream position is for {self.position.workers} workers, the loader has {workers}")
        w = (physical + self.offset) % workers
        skip = self.position.cursors[w]
        bad = BadSamples(set(self.position.bad), self.max_bad, w)
        shards = _resampled(self.urls, random.Random(derive_seed(self.seed, self.rank, w, 1)), bad)
        samples = _with_meta(wds.tarfile_to_samples(handler=bad)(shards), bad)
        samples = self.order(samples, random.Random(derive_seed(self.seed, self.rank, w, 2)))

        def fields(cursor: int, stop: bool | str = False) -> dict:
            return {WORKER: w, CURSOR: cursor, BAD: bad.report(), BAD_SHARD: bad.shard, STOP: stop}

        bad.active = skip == 0
        pending: list[tuple] = []
        unusable = 0  # samples in a row that gave no item: a split whose every image fails would loop forever
        for index, sample in enumerate(samples):
            if index < skip:  # consumed before the resume: skipped before decoding
                bad.active = index == skip - 1
                continue
            if bad.count > self.max_bad:
                break
            try:
                item = ({}, sample["meta"]) if self.views is None else \
                    _image_tensors(sample, self.views, derive_seed(self.seed, self.rank, w, 3, index))
            except Exception as exn:  # noqa: BLE001 - an undecodable image is bad data
                if not bad(exn, sample.get("__url__"), sample.get("__key__")):
                    break
                unusable += 1
                if unusable >= UNUSABLE_IN_A_ROW:
                    bad.starved = (f"{bad.shard}: no usable sample in {unusable} in a row ({bad.count} distinct bad "
                                   f"samples, the last: {bad.last}); check the split's images with "
                                   f"globetrotter-data inspect SPLIT --check")
                    break
                continue
            unusable = 0
            pending.append(item)
            if len(pending) == self.local_batch:
                yield {**self.collate(pending), **fields(index + 1)}
                pending = []
        if bad.count > self.max_bad:
            yield fields(-1, stop=True)
        elif bad.starved:
            yield fields(-1, stop=bad.starved)
