"""Adaptation of a trained run to a language it never saw (Globetrotter paper, appendix A.2).

``train.py [--config FILE] adapt.from=RUN adapt.language=el`` fine-tunes RUN's checkpoint (its best,
else latest) on the new language's captions, those of ``adapt.split`` (a split under ``data.root``, or the
path of any split folder: a new folder of captioned images, :mod:`.split`), for ``adapt.epochs`` passes (the
paper: one), with the same losses, keeping the old languages' alignment:

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
  to train; with a feature cache the old images' come from RUN's cache (read, never rebuilt) and a new
  folder's from ``<split>/features``, built once with RUN's backbone;
* RUN's model encodes the old languages' training captions once, without gradient (the bank): their
  text-text and cross-modal features, and their images' features;
* each step, L_x and L_c are computed on a batch of new-language captions; L_t contrasts those with
  each other and with ``adapt.old_batch`` captions of the bank, weighted by the transitive α of eq. 2
  (pairs of two old captions are left out: both sides are frozen).

The modules: :mod:`.start` (the config and its checks, the starting checkpoint, the grown tokenizer),
:mod:`.split` (the adaptation split: its folder, its languages checked, its images' features),
:mod:`.weights` (the start's weights in the grown model; what trains), :mod:`.bank` (the precomputed
features and the batches), :mod:`.objective`, :mod:`.report` (before/after), and :mod:`.adaptation`, the
:class:`Adaptation` the trainer drives.

The adapted run is an ordinary run folder (its config, the grown tokenizer, checkpoints) that every
evaluation command reads. Its ``result.json`` gains ``adapt``: sentence translation of the new language
with the old ones, and of the old languages among themselves, before and after, when the run reads the test split
(``val.test_groups`` > 0; otherwise ``before``/``after`` are null: score the new pair with ``eval.py sentence``).
"""
from __future__ import annotations

from .adaptation import Adaptation
from .objective import AdaptationObjective
from .split import ensure_features, split_dir
from .start import load_adapt_config, resolve_config, starting_checkpoint, trained_languages, write_tokenizer

__all__ = ["Adaptation", "AdaptationObjective", "ensure_features", "load_adapt_config", "resolve_config", "split_dir",
           "starting_checkpoint", "trained_languages", "write_tokenizer"]
