"""Adaptation of a trained run to a language it never saw (Globetrotter paper, appendix A.2).

``train.py [--config FILE] adapt.from=RUN adapt.language=el`` fine-tunes RUN's checkpoint (its best,
else latest) on the new language's captions, those of split ``adapt.split`` under ``data.root``, for
``adapt.epochs`` passes (the paper: one), with the same losses, keeping the old languages' alignment:

* the config is RUN's saved one, with FILE and the overrides over it (:func:`load_adapt_config`); the
  model must stay RUN's. ``run_name`` defaults to ``<RUN's run_name>-<language>``;
* the vocabulary grows by the new language's BPE tokens that no old training caption contains
  (:func:`~globetrotter.tokenizer.extend_tokenizer`), so old captions tokenize exactly as before and a
  new script is not spelled out in bytes (Greek: 10 tokens a caption instead of 100); the new rows
  of the token embedding start at random, with the trained rows' spread. ``adapt.train: new-tokens`` trains
  those rows and the rows of the old vocabulary's tokens that the new language's captions hold and no old
  training caption does (a language left out of a split by ``data.train_languages``: the split's shared BPE
  holds its tokens, which no caption the run read used; then ``adapt.split=train`` reads its captions). With
  ``model.token_ngrams`` the n-gram matrix grows with the vocabulary (old rows and columns kept), and new-tokens
  also trains the n-gram rows that only those tokens hold;
* the image side (backbone and heads) keeps RUN's weights: every image's features, old and new, are
  computed once at the start (the whole image, as ``encode_image`` sees it), and L_v has nothing left
  to train;
* RUN's model encodes the old languages' training captions once, without gradient (the bank): their
  text-text and cross-modal features, and their images' features;
* each step, L_x and L_c are computed on a batch of new-language captions; L_t contrasts those with
  each other and with ``adapt.old_batch`` captions of the bank, weighted by the transitive α of eq. 2
  (pairs of two old captions are left out: both sides are frozen).

The adapted run is an ordinary run folder (its config, the grown tokenizer, checkpoints) that every
evaluation command reads. Its ``result.json`` gains ``adapt``: sentence translation of the new language
with the old ones, and of the old languages among themselves, before and after (on the test split).
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from data_prep.shards import decode_image, read_captions, read_manifest

from ..config import AdaptConfig, TrainConfig, load_train_config
from ..config_io import config_dict, from_dict, merge, read_yaml, to_dict
from ..data.augment import eval_transform
from ..data.feature_cache import (cache_dir_for, ensure_feature_cache, load_feature_cache, spec_from_config,
                                  unique_images)
from ..data.truth import truth_id
from ..encoder import Encoder, load
from ..errors import UserError
from ..evaluation import parallel_set, sentence_translation
from ..models import GlobetrotterModel
from ..models.subword import SubwordTable, extend_ngram_matrix, token_strings
from ..tokenizer import (
    encode_batch,
    extend_tokenizer,
    load_tokenizer,
    read_provenance,
    save_tokenizer,
    special_ids,
    token_bytes,
)
from . import checkpoint as ckpt
from .objective import GlobetrotterObjective, language_codes
from .prepare import train_captions, train_languages

def starting_checkpoint(path: str) -> Path:
    """The checkpoint ``adapt.from`` names (a run folder's best, else latest); one-line error without one."""
    try:
        return ckpt.resolve(path, prefer_best=True)
    except UserError as err:
        raise UserError(f"adapt.from: {err}") from None


def load_adapt_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config of ``train.py``: with ``adapt.from`` set, the starting run's saved config with ``path``
    and ``overrides`` merged over it (``run_name`` defaults to ``<its run_name>-<adapt.language>``);
    otherwise :func:`~globetrotter.config.load_train_config`'s."""
    data, where = config_dict(path, overrides)
    start = (data.get("adapt") or {}).get("from")
    if not start:
        return from_dict(TrainConfig, data, where=where)
    from_dict(AdaptConfig, data["adapt"], where=where, prefix="adapt")  # its own errors first (adapt.language)
    saved = starting_checkpoint(start) / "config.yaml"
    base = read_yaml(saved)
    if "run_name" not in data and (data.get("adapt") or {}).get("language"):
        data = dict(data, run_name=f"{base.get('run_name', 'run')}-{data['adapt']['language']}")
    return from_dict(TrainConfig, merge(base, data), where=f"{saved} + {where}")


def _first_difference(a: dict, b: dict, prefix: str) -> tuple[str, object, object] | None:
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{prefix}.{key}", a.get(key), b.get(key)
    return None


def _heads(cfg: TrainConfig) -> dict[str, bool]:
    """Which losses are on: the model has a head for each."""
    return {k: getattr(cfg.loss, k) > 0 for k in ("text", "image", "cross", "cloze")}


def trained_languages(start: TrainConfig) -> list[str]:
    """The languages a run was trained on: its train split's (``data.train_languages`` of them), and the one it
    was adapted to, if any."""
    found = set(train_languages(start))
    return sorted(found | ({start.adapt.language} if start.adapt.from_run else set()))


def resolve_config(cfg: TrainConfig) -> TrainConfig:
    """Check an adaptation config against its starting run; return it with ``steps`` (from
    ``adapt.epochs``) and ``data.tokenizer`` (the grown one, in the run folder) filled in.

    One-line errors: no checkpoint, a language the run was trained on, no caption of it in the
    adaptation split, a model or heads other than the run's, a run folder that is the starting one.
    """
    a = cfg.adapt
    source = starting_checkpoint(a.from_run)
    start = load_train_config(source / "config.yaml")
    old = trained_languages(start)
    if a.language in old:
        raise UserError(f"adapt.language={a.language}: {a.from_run} was trained on {a.language} already "
                        f"(its training languages: {','.join(old)}); adapt it to a language it has not seen, or train "
                        f"a run without it (data.train_languages)")
    for diff in (_first_difference(to_dict(cfg.model), to_dict(start.model), "model"),
                 _first_difference(_heads(cfg), _heads(start), "loss (weight > 0)"),
                 _first_difference({"max_length": cfg.data.max_length, "image_size": cfg.data.image_size},
                                   {"max_length": start.data.max_length, "image_size": start.data.image_size}, "data")):
        if diff:
            key, mine, theirs = diff
            raise UserError(f"{key}: {mine!r} differs from the starting run's {theirs!r} ({source / 'config.yaml'}); "
                            f"adaptation keeps the run's model (leave the key out)")
    if cfg.run_dir.resolve() == source.parents[1].resolve():
        raise UserError(f"run_name/output_dir: {cfg.run_dir} is the starting run's folder; give the adapted run its own")
    split_dir = Path(cfg.data.root) / a.split
    if not (split_dir / "manifest.json").is_file():
        raise UserError(f"adapt.split: {split_dir} has no manifest.json (the split with the new language's captions "
                        f"and images; the synthetic world writes it with --heldout)")
    count = read_manifest(split_dir).get("languages", {}).get(a.language, 0)
    if not count:
        found = ",".join(sorted(read_manifest(split_dir).get("languages", {})))
        raise UserError(f"adapt.language={a.language}: adapt.split={a.split} ({split_dir}) has no caption in it "
                        f"(it has {found})")
    steps = max(1, math.ceil(a.epochs * count / cfg.batch_size)) if a.epochs is not None else cfg.steps
    return replace(cfg, steps=steps, data=replace(cfg.data, tokenizer=str(cfg.run_dir / "tokenizer.json"),
                                                  tokenizer_normalization=start.data.tokenizer_normalization))


def write_tokenizer(cfg: TrainConfig, log: Callable[[str], None] = print) -> None:
    """Write the starting run's tokenizer, grown by the new language's tokens, to ``data.tokenizer``
    (:func:`resolve_config` points it into the run folder). Main process only."""
    a = cfg.adapt
    source = starting_checkpoint(a.from_run)
    tokenizer = load_tokenizer(source / "tokenizer.json")
    if a.vocab_size > 0:
        start = load_train_config(source / "config.yaml")
        new = [m["caption"] for m in read_captions(Path(cfg.data.root) / a.split) if m["lang"] == a.language]
        known = [m["caption"] for m in train_captions(start)]
        before = tokenizer.get_vocab_size()
        tokenizer, added = extend_tokenizer(tokenizer, new, a.vocab_size, known)
        log(f"adapt: vocabulary {before} + {added} {a.language} tokens (BPE of {a.vocab_size} on its "
            f"{len(new)} captions, less what the old captions contain)")
    base = read_provenance(source / "tokenizer.json")
    save_tokenizer(tokenizer, cfg.data.tokenizer, {
        "splits": (base or {}).get("splits", []), "extends": base,
        "adapt": {"split": str((Path(cfg.data.root) / a.split).resolve()), "language": a.language,
                  "vocab_size": a.vocab_size}})


class AdaptationObjective(GlobetrotterObjective):
    """The Globetrotter objective on new-language batches: L_t also contrasts them with the bank's
    frozen old-language captions (``old_*`` entries of the batch); the image side is fixed (no L_v)."""

    trains_images = False

    def _text_inputs(self, gathered, truth, batch):
        feats = {k: torch.cat([v, batch[f"old_{k}"].to(v)]) if f"old_{k}" in batch else v for k, v in gathered.items()}
        n_new, n_old = truth.shape[0], batch["old_truth"].shape[0]
        new = torch.arange(n_new + n_old, device=truth.device) < n_new
        return feats, torch.cat([truth, batch["old_truth"].to(truth)]), new[:, None] | new[None, :]

    def _language_codes(self, batch, device):
        return torch.cat([super()._language_codes(batch, device), language_codes(batch["old_langs"], device)])


def _grow_rows(old: torch.Tensor, rows: int, generator: torch.Generator) -> torch.Tensor:
    """``old`` with rows appended up to ``rows``: drawn around 0 with the old rows' spread (a 1-d bias: their mean)."""
    extra = rows - old.shape[0]
    if old.dim() == 1:
        return torch.cat([old, old.mean().expand(extra)])
    fresh = torch.randn(extra, *old.shape[1:], generator=generator) * old.float().std()
    return torch.cat([old, fresh.to(old.dtype)])


class Adaptation:
    """The starting run, loaded into a (vocabulary-grown) model, and the precomputed features the steps read.

    Use: ``a = Adaptation(cfg, model)`` before the optimizer is built (loads the weights, freezes the
    image side); :meth:`precompute` once; then :meth:`objective`, :meth:`batches`, and :meth:`report`.
    """

    def __init__(self, cfg: TrainConfig, model: GlobetrotterModel, log: Callable[[str], None] = print) -> None:
        self.cfg, self.log = cfg, log
        self.start = load(starting_checkpoint(cfg.adapt.from_run))
        self.old_languages = trained_languages(self.start.cfg)
        state = self.start.model.state_dict()
        if model.text.subword is not None:
            self._grow_subword(model, state)
        generator = torch.Generator().manual_seed(cfg.seed)
        for key, value in model.state_dict().items():
            if key in state and state[key].shape != value.shape:  # token embedding and cloze bias: the new tokens
                state[key] = _grow_rows(state[key], value.shape[0], generator)
        if "cloze_head.token_embedding.weight" in state:  # tied to the text encoder's table
            state["cloze_head.token_embedding.weight"] = state["text.token_embedding.weight"]
        model.load_state_dict(state)
        if cfg.adapt.train == "new-tokens":
            self._train_new_tokens_only(model, self.start.tokenizer.get_vocab_size())
        if model.image is not None:  # fixed: the precomputed image features stay the model's own
            for part in (model.image, model.image_head_x, model.image_head_v):
                if part is not None:
                    part.requires_grad_(False)
            model.image_frozen = True
            model.image.eval()

    def _grow_subword(self, model: GlobetrotterModel, state: dict) -> None:
        """``model.token_ngrams``: the start's n-gram matrix with the appended tokens' rows added
        (:func:`~globetrotter.models.subword.extend_ngram_matrix`: old rows and columns unchanged), set into
        ``model`` and ``state``; the new n-grams' rows start at zero, so an appended token starts as its own row plus
        the rows of the n-grams it shares with the old vocabulary."""
        start_text = self.start.model.text
        old_vocab = [self.start.tokenizer.id_to_token(i) for i in range(self.start.tokenizer.get_vocab_size())]
        tokenizer = load_tokenizer(self.cfg.data.tokenizer)
        added = [tokenizer.id_to_token(i) for i in range(len(old_vocab), tokenizer.get_vocab_size())]
        specials = list(special_ids(tokenizer).values())
        matrix = extend_ngram_matrix(start_text.subword.matrix(), token_strings(old_vocab, specials),
                                     token_strings(added), self.cfg.model.token_ngrams)
        model.text.subword = SubwordTable(matrix, model.text.d_model)
        old_rows = state["text.subword.ngram_embedding.weight"]
        grown = torch.zeros(model.text.subword.ngram_embedding.weight.shape, dtype=old_rows.dtype)
        grown[: old_rows.shape[0]] = old_rows
        state.update({f"text.subword.{k}": v for k, v in model.text.subword.state_dict().items()})
        state["text.subword.ngram_embedding.weight"] = grown

    def _rows_to_train(self, n_old: int, vocab_size: int) -> tuple[list[int], int]:
        """The token rows ``adapt.train: new-tokens`` trains, and how many of them were appended: the appended
        tokens (ids ``n_old`` on), and the old vocabulary's tokens that the new language's captions hold and no
        old training caption does, single bytes excepted. A shared BPE learnt on every language of a split of
        which the run trained on some (``data.train_languages``) already holds the left-out language's tokens:
        no caption the run read held them, so training them changes no old training caption's encoding."""
        cfg, a = self.cfg, self.cfg.adapt
        tokenizer = load_tokenizer(cfg.data.tokenizer)

        def held(texts: list[str]) -> set[int]:
            return {i for e in tokenizer.encode_batch(texts) for i in e.ids}

        new = held([m["caption"] for m in read_captions(Path(cfg.data.root) / a.split) if m["lang"] == a.language])
        old = held([m["caption"] for m in train_captions(self.start.cfg)])
        # single bytes stay: the byte-level alphabet spells out any rare character, of any language (Flickr8k: the
        # continuation bytes of zh characters no merge covers also spell a "Ř" or "œ" in 5 cs/fr test captions)
        unused = sorted(i for i in new - old - set(special_ids(tokenizer).values())
                        if i < n_old and len(token_bytes(tokenizer.id_to_token(i))) > 1)
        return unused + list(range(n_old, vocab_size)), vocab_size - n_old

    def _train_new_tokens_only(self, model: GlobetrotterModel, n_old: int) -> None:
        """Freeze every weight but the rows of the new language's tokens (:meth:`_rows_to_train`): the token
        embedding, the tied cloze decoder, the cloze bias."""
        rows, appended = self._rows_to_train(n_old, model.text.token_embedding.num_embeddings)
        if not rows:
            raise UserError(f"adapt.train=new-tokens: no token to train for {self.cfg.adapt.language}: none was appended "
                            f"(its script is the old languages', or adapt.vocab_size=0) and every token of its captions "
                            f"occurs in the old training captions; use adapt.train=text")
        self.log(f"adapt.train=new-tokens: {len(rows)} token rows train ({appended} appended, {len(rows) - appended} "
                 f"already in the vocabulary, held by {self.cfg.adapt.language}'s captions and no old training caption)")
        self.trained_rows = torch.tensor(rows, dtype=torch.long)
        model.requires_grad_(False)
        trained = {model.text.token_embedding.weight: self.trained_rows}
        if model.cloze_head:
            trained[model.cloze_head.bias] = self.trained_rows
        if model.text.subword is not None:  # the n-grams that only trained tokens hold: no other token's vector moves
            matrix = model.text.subword.matrix()
            others = np.setdiff1d(np.arange(matrix.shape[0]), rows)
            free = np.setdiff1d(np.arange(matrix.shape[1]), matrix[others].indices)
            self.log(f"adapt.train=new-tokens: {len(free)} of {matrix.shape[1]} character n-gram rows train (those no "
                     f"other token holds)")
            trained[model.text.subword.ngram_embedding.weight] = torch.from_numpy(free)
        for param, train_rows in trained.items():
            param.requires_grad_(True)
            keep = torch.zeros(param.shape[0], *[1] * (param.dim() - 1))
            keep[train_rows] = 1
            param.register_hook(lambda grad, keep=keep: grad * keep.to(grad))

    # ----------------------------------------------------------------- precomputation

    @torch.no_grad()
    def _image_features(self, model: GlobetrotterModel, split: str, image_ids: list[str], device,
                        progress: bool) -> torch.Tensor:
        """Pooled backbone features [n, F] of the whole images ``image_ids`` of ``split`` (the feature
        cache's row 0 with ``data.features``), in that order."""
        split_dir = Path(self.cfg.data.root) / split
        if self.cfg.data.features:
            if self.cfg.data.features == "auto" or split == self.cfg.data.train_split:
                cache = ensure_feature_cache(self.cfg, split, self.log)
            else:  # one named cache: it serves every split whose images it holds, and is never built for another
                cache = load_feature_cache(cache_dir_for(self.cfg, split), spec_from_config(self.cfg), split_dir)
                missing = [i for i in dict.fromkeys(image_ids) if i not in cache.row_of]
                if missing:
                    raise UserError(f"data.features={self.cfg.data.features} does not hold {len(missing)} image(s) of "
                                    f"{split_dir} (first: {missing[0]!r}): use data.features=auto (a cache per split)")
            return torch.from_numpy(np.asarray(cache.features[cache.rows(image_ids, split_dir), 0], dtype=np.float32))
        unique = list(dict.fromkeys(image_ids))
        row = {i: r for r, i in enumerate(unique)}
        transform = eval_transform(self.cfg.data.image_size)
        out: list[torch.Tensor] = [torch.empty(0)] * len(unique)
        seen: set[int] = set()
        pending: list[tuple[int, torch.Tensor]] = []

        def flush() -> None:
            feats = model.image(torch.stack([x for _, x in pending]).to(device)).float().cpu()
            for (r, _), f in zip(pending, feats):
                out[r] = f
            bar.update(len(pending))
            pending.clear()

        with tqdm(total=len(unique), desc=f"adapt: {split} image features", unit="img", disable=not progress,
                  dynamic_ncols=True) as bar:
            for image_id, ext, data in unique_images(split_dir):
                r = row.get(image_id)
                if r is None:
                    continue
                seen.add(r)
                pending.append((r, transform(decode_image(data, ext).convert("RGB"))))
                if len(pending) == 256:
                    flush()
            if pending:
                flush()
        if len(seen) < len(unique):
            missing = next(i for i in unique if row[i] not in seen)
            raise UserError(f"{split_dir}: image {missing!r} not found in the shards")
        return torch.stack(out)[torch.tensor([row[i] for i in image_ids])]

    def _encode(self, encoder: Encoder, texts: list[str], head: str, progress: bool, what: str) -> torch.Tensor:
        chunks = range(0, len(texts), 1024)
        return torch.from_numpy(np.concatenate([encoder.encode_text(texts[i: i + 1024], head=head)
                                                for i in tqdm(chunks, desc=f"adapt: {what}", disable=not progress,
                                                              dynamic_ncols=True)]))

    @torch.no_grad()
    def precompute(self, model: GlobetrotterModel, tokenizer, device, main: bool = True) -> None:
        """Encode, once: the bank (old-language training captions by the starting model, and their
        images), the new language's captions as tokens and its images as backbone features; and, on the
        main process (``main``: also the progress bars), the "before" half of :meth:`report`."""
        progress = main  # the bars, on the main process only
        cfg, a = self.cfg, self.cfg.adapt
        start_cfg = self.start.cfg
        self.start.model.to(device)
        self.start.device = str(device)
        old = train_captions(start_cfg)  # data.train_languages: the languages it was trained on
        if a.old_captions is not None and a.old_captions < len(old):
            keep = np.sort(np.random.default_rng([cfg.seed, 11]).choice(len(old), a.old_captions, replace=False))
            old = [old[i] for i in keep]
        texts = [m["caption"] for m in old]
        bank: dict[str, torch.Tensor] = {}
        if model.text_head_t is not None:
            bank["text_t"] = self._encode(self.start, texts, "text", progress, "old captions, text-text head")
        if model.text_head_x is not None:
            bank["text_x"] = self._encode(self.start, texts, "cross", progress, "old captions, cross-modal head")
        if model.image is not None:
            feats = self._image_features(model, start_cfg.data.train_split, [str(m["image_id"]) for m in old], device,
                                         progress).to(device)
            bank.update({k: v.float().cpu() for k, v in model.image_outputs(feats).items()})
        self.bank = bank
        self.bank_truth = torch.tensor([truth_id(m) for m in old], dtype=torch.long)
        self.bank_langs = np.array([m["lang"] for m in old])

        new = [m for m in read_captions(Path(cfg.data.root) / a.split) if m["lang"] == a.language]
        ids, mask = encode_batch(tokenizer, [m["caption"] for m in new], cfg.data.max_length)
        self.ids, self.mask = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
        self.truth = torch.tensor([truth_id(m) for m in new], dtype=torch.long)
        self.images = (self._image_features(model, a.split, [str(m["image_id"]) for m in new], device, progress)
                       if model.image is not None else None)
        self.log(f"adapt: {len(new)} {a.language} captions, {a.epochs if a.epochs is not None else '-'} epoch(s) = "
                 f"{cfg.steps} steps of {cfg.batch_size}; bank of {len(old)} old-language captions "
                 f"({','.join(self.old_languages)}), {self.old_batch} beside each batch")
        self.before = self._translation(self.start) if main else None
        self.start.model.cpu()
        self.start = None  # the starting model is no longer needed

    @property
    def old_batch(self) -> int:
        return min(self.cfg.adapt.old_batch or self.cfg.batch_size, len(self.bank_truth))

    # ----------------------------------------------------------------- training

    def objective(self) -> AdaptationObjective:
        return AdaptationObjective(self.cfg.loss)

    def batches(self, local_batch: int, rank: int = 0, world: int = 1) -> Iterator[dict]:
        """Endless batches for process ``rank``: its slice of the step's new-language captions (seeded
        per-epoch permutations), their images' features (``view1``), and the step's ``old_batch`` bank
        entries (``old_*``, the same on every process: they join the gathered global batch)."""
        n, b = len(self.ids), local_batch * world
        mine = slice(rank * local_batch, (rank + 1) * local_batch)
        step = 0
        order = np.zeros(0, dtype=np.int64)
        while True:
            while len(order) < (step + 1) * b:
                epoch = len(order) // n
                order = np.concatenate([order, np.random.default_rng([self.cfg.seed, 12, epoch]).permutation(n)])
            index = torch.from_numpy(order[step * b: (step + 1) * b][mine])
            width = int(self.mask[index].sum(1).max())
            old = torch.from_numpy(np.random.default_rng([self.cfg.seed, 13, step]).choice(
                len(self.bank_truth), self.old_batch, replace=False))
            batch = {"input_ids": self.ids[index, :width], "attention_mask": self.mask[index, :width],
                     "truth": self.truth[index], "langs": [self.cfg.adapt.language] * len(index),
                     "old_truth": self.bank_truth[old], "old_langs": self.bank_langs[old.numpy()].tolist(),
                     **{f"old_{k}": v[old] for k, v in self.bank.items()}}
            if self.images is not None:
                batch["view1"] = self.images[index]
            yield batch
            step += 1

    # ----------------------------------------------------------------- report

    def _translation(self, encoder: Encoder) -> dict | None:
        """Sentence translation (paper 5.2, as ``eval.py sentence``: ``val.test_groups`` groups, ``seed``) on the test split:
        the new language with the old ones (the mean of the new→old and old→new cells of the matrix over all
        languages) and the old languages among themselves. None without a test split holding the new language, or
        when the run does not ask for test figures (``val.test_groups`` = 0: ``eval.py sentence`` scores it after)."""
        cfg, lang = self.cfg, self.cfg.adapt.language
        test = Path(cfg.data.root) / cfg.data.test_split if cfg.data.test_split and cfg.val.test_groups > 0 else None
        present = read_manifest(test).get("languages", {}) if test and (test / "manifest.json").is_file() else {}
        old = [code for code in self.old_languages if code in present]
        if lang not in present or not old:
            return None
        metas = read_captions(test)
        out = {}
        for name, langs in (("all", [lang, *old]), ("old", old)):
            if len(langs) < 2:
                continue
            ps = parallel_set(metas, langs, n_groups=cfg.val.test_groups, seed=cfg.seed, where=str(test))
            out[name] = sentence_translation(encoder.encode_text(ps.captions), ps.langs, ps.groups, tie_seed=cfg.seed)
        m, langs = out["all"]["matrix"], out["all"]["languages"]
        i = langs.index(lang)
        others = [j for j in range(len(langs)) if j != i]
        new_to_old, old_to_new = float(np.mean(m[i, others])), float(np.mean(m[others, i]))
        return {"new_to_old": new_to_old, "old_to_new": old_to_new, "new_with_old": (new_to_old + old_to_new) / 2,
                "all": out["all"]["accuracy"], "chance_all": out["all"]["chance"],
                "old_pairs": out["old"]["accuracy"] if "old" in out else None,
                "chance_old": out["old"]["chance"] if "old" in out else None}

    def report(self, encoder: Encoder) -> dict:
        """Before/after sentence translation (fractions): ``{"language", "before": {...}, "after": {...}}``."""
        return {"language": self.cfg.adapt.language, "from": str(self.cfg.adapt.from_run),
                "old_languages": self.old_languages, "before": self.before, "after": self._translation(encoder)}
