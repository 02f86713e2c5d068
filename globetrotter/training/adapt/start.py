"""The start of an adaptation: its config (the starting run's, with the new one over it), that config checked
against the run, and the run's tokenizer grown by the new language's tokens."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence, cast

from tokenizers import Tokenizer

from backretrieval.errors import option

from ...config import AdaptConfig, TrainConfig, ValConfig, load_train_config, refuse_empty_config
from ...config_io import config_dict, from_dict, merge, read_yaml, to_dict
from ...encoder import load
from ...errors import UserError
from ...tokenizer import extend_tokenizer, load_tokenizer, read_provenance, save_tokenizer, special_ids, token_bytes
from .. import checkpoint as ckpt
from ..train_set import train_captions, train_languages
from . import split

# the data keys of the starting run's model and tokenizer (the grown tokenizer keeps its normalization)
DATA_KEPT = ("max_length", "image_size", "tokenizer_normalization")


def resume_refused() -> str:
    """The one line a resume of an adaptation gets (docs/training.md: a killed adaptation is run again), naming
    ``--resume`` on the command line, the ``resume`` argument of :func:`~globetrotter.training.trainer.train` in
    Python."""
    return (f"{option('resume')}: an adaptation run is short and starts from adapt.from; delete the adapted run's own "
            "folder (never adapt.from's) and run it again instead")


def epoch_steps(epochs: float, count: int, batch_size: int) -> int:
    """The steps of ``epochs`` passes over ``count`` new-language captions in batches of ``batch_size``."""
    return max(1, math.ceil(epochs * count / batch_size))


def _saved_steps(cfg: TrainConfig) -> int | None:
    """The steps ``adapt.epochs`` gives ``cfg`` (the adaptation split's manifest count of the language), as
    :func:`resolve_config` resolves and the run's saved config records them; None when the split cannot say."""
    try:
        count = split.manifest_language_counts(split.split_dir(cfg)).get(split.new_language(cfg), 0)
    except (UserError, OSError, ValueError):
        return None
    return epoch_steps(cfg.adapt.epochs, count, cfg.batch_size) if count and cfg.adapt.epochs is not None else None


def starting_checkpoint(path: str | None) -> Path:
    """The checkpoint ``adapt.from`` names (a run folder's best, else latest); one-line errors without one, and for
    a run folder whose training is unfinished (its latest checkpoint short of its ``steps``: killed, or still
    running). A checkpoint named itself is taken as it is, and so is the one a ``checkpoints/latest`` pointer names."""
    if path is None:  # a config that adapts nothing
        raise UserError("adapt.from is required: the run to adapt (adapt.from=RUN: a run folder or one of its "
                        "checkpoints)")
    pointer = Path(path).name == ckpt.LATEST and Path(path).is_file()
    try:
        source = ckpt.resolve(path, prefer_best=True)
    except UserError as err:
        raise UserError(f"adapt.from: {err}") from None
    if source != Path(path) and not pointer:
        latest = ckpt.resolve(path, prefer_best=False)
        done, steps = ckpt.read_state(latest).get("step"), (read_yaml(latest / "config.yaml") or {}).get("steps")
        if isinstance(done, int) and isinstance(steps, int) and done < steps:
            raise UserError(f"adapt.from={path}: the run is unfinished (its latest checkpoint, {latest.name}, is at step "
                            f"{done} of steps={steps}); finish it with --resume latest, or name a checkpoint to adapt "
                            f"from it as it is (adapt.from={latest})")
    return source


def load_adapt_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The config of ``train.py``: with ``adapt.from`` set, the starting run's saved config with ``path``
    and ``overrides`` merged over it (``run_name`` defaults to ``<its run_name>-<adapt.language>``; ``steps`` beside
    ``adapt.epochs`` and a ``data.tokenizer`` or ``data.vocab_size`` of the user's are refused, unless equal to
    what the adaptation sets them to, as its saved config records them); otherwise, with no ``adapt.*`` key set
    (:func:`_check_no_adapt_keys`), :func:`~globetrotter.config.load_train_config`'s."""
    refuse_empty_config(path)
    data, where = config_dict(path, overrides)
    given_section = data.get("adapt")
    section = given_section if isinstance(given_section, dict) else {}  # else from_dict says it is no mapping
    start = section.get("from")
    if not start:
        _check_no_adapt_keys(section, where)
        return from_dict(TrainConfig, data, where=where)
    from_dict(AdaptConfig, section, where=where, prefix="adapt")  # its own errors first (adapt.language)
    saved = starting_checkpoint(start) / "config.yaml"
    base = read_yaml(saved)
    if "run_name" not in data and section.get("language"):
        data = dict(data, run_name=f"{base.get('run_name', 'run')}-{section['language']}")
    cfg = from_dict(TrainConfig, merge(base, data), where=f"{saved} + {where}")
    # a value equal to the one resolve_config gives is no conflict: an adapted run's saved config records them, and
    # is given again as --config to re-run the adaptation
    if "steps" in data and cfg.adapt.epochs is not None and data["steps"] != _saved_steps(cfg):
        raise UserError(f"{where}: steps={data['steps']} and adapt.epochs={cfg.adapt.epochs:g} both set the "
                        f"adaptation's length; set adapt.epochs=null to train that many steps, or leave steps out")
    given = data.get("data") or {}
    if "tokenizer" in given and str(given["tokenizer"]) not in _own_tokenizers(path, cfg):
        raise UserError(f"data.tokenizer={data['data']['tokenizer']}: adaptation writes its own tokenizer, the starting "
                        f"run's grown by the new language's tokens ({cfg.run_dir / 'tokenizer.json'}); drop "
                        f"data.tokenizer")
    if "vocab_size" in given and given["vocab_size"] != (base.get("data") or {}).get("vocab_size"):
        raise UserError(f"data.vocab_size={data['data']['vocab_size']}: adaptation keeps the starting run's vocabulary "
                        f"and appends the new language's tokens; set adapt.vocab_size (their BPE's size) instead")
    return cfg


def _own_tokenizers(path: str | Path | None, cfg: TrainConfig) -> set[str]:
    """The ``data.tokenizer`` values an adaptation sets itself: its run folder's, and the one a saved adapted
    config (``path``) records for the run folder it names (given again to re-run the adaptation elsewhere)."""
    own = {str(cfg.run_dir / "tokenizer.json")}
    saved = read_yaml(path) if path is not None and Path(path).is_file() else None
    if isinstance(saved, dict) and saved.get("output_dir") and saved.get("run_name"):
        own.add(str(Path(saved["output_dir"]) / saved["run_name"] / "tokenizer.json"))
    return own


def _check_no_adapt_keys(section: dict, where: str) -> None:
    """One-line error for an ``adapt`` section without ``adapt.from`` (``configs/adapt.yaml`` alone, ``adapt.*``
    overrides over an ordinary config): its keys would be ignored and a new model trained from scratch. A saved
    config's section (``from: null``, every other key at its default) is an ordinary run's."""
    defaults = to_dict(AdaptConfig())
    keys = [f"adapt.{k}" for k, v in section.items() if k != "from" and ("from" not in section or v != defaults.get(k))]
    if keys or section.get("from") is not None:  # from: "" (adapt.from= with no value) names no run either
        got = (f"adapt.from={section['from']!r} names none" if section.get("from") is not None
               else f"{where} sets {', '.join(keys)} without it")
        raise UserError(f"adapt.from is required: the run to adapt (adapt.from=RUN: a run folder or one of its "
                        f"checkpoints); {got}, which would train a new model from scratch")


def _first_difference(a: dict, b: dict, prefix: str) -> tuple[str, object, object] | None:
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{prefix}.{key}", a.get(key), b.get(key)
    return None


def _heads(cfg: TrainConfig) -> dict[str, bool]:
    """Which losses are on: the model has a head for each."""
    return {k: getattr(cfg.loss, k) > 0 for k in ("text", "image", "cross", "cloze")}


def start_train_config(cfg: TrainConfig, start: TrainConfig) -> TrainConfig:
    """The starting run's config, reading its train split where this run's ``data.root`` says (a moved dataset)."""
    return replace(start, data=replace(start.data, root=cfg.data.root))


def known_captions(cfg: TrainConfig, start: TrainConfig) -> list[dict]:
    """The captions the starting run was trained on: its train split's (:func:`start_train_config`), and when it
    was itself adapted, its adaptation split's captions in that language (so that a second adaptation leaves the
    first one's tokens alone)."""
    known = train_captions(start_train_config(cfg, start))
    if start.adapt.from_run:
        known += split.new_captions(start)
    return known


def rows_to_train(tokenizer: Tokenizer, cfg: TrainConfig, start_cfg: TrainConfig, n_old: int) -> tuple[list[int], int]:
    """The token rows of the grown ``tokenizer`` that ``adapt.train: new-tokens`` trains, and how many of them
    were appended: the appended tokens (ids ``n_old`` on), and the old vocabulary's tokens that the new language's
    captions hold and no old training caption does, single bytes excepted. A shared BPE learnt on every language
    of a split of which the run trained on some (``data.train_languages``) already holds the left-out language's
    tokens: no caption the run read held them, so training them changes no old training caption's encoding.
    No row at all: a one-line error (checked before the run folder is written, :func:`.start.write_tokenizer`)."""
    vocab_size = tokenizer.get_vocab_size()

    def held(texts: list[str]) -> set[int]:
        return {i for e in tokenizer.encode_batch(texts) for i in e.ids}

    new = held([m["caption"] for m in split.new_captions(cfg)])
    old = held([m["caption"] for m in known_captions(cfg, start_cfg)])
    # single bytes stay: the byte-level alphabet spells out any rare character, of any language (Flickr8k: the
    # continuation bytes of zh characters no merge covers also spell a "Ř" or "œ" in 5 cs/fr test captions)
    unused = sorted(i for i in new - old - set(special_ids(tokenizer).values())
                    if i < n_old and len(token_bytes(cast(str, tokenizer.id_to_token(i)))) > 1)  # i < size: a token
    rows = unused + list(range(n_old, vocab_size))
    if not rows:
        raise UserError(f"adapt.train=new-tokens: no token to train for {cfg.adapt.language}: none was appended "
                        f"(its script is the old languages', or adapt.vocab_size=0) and every token of its captions "
                        f"occurs in the old training captions; use adapt.train=text")
    return rows, vocab_size - n_old


def trained_languages(start: TrainConfig) -> list[str]:
    """The languages a run was trained on: its train split's (``data.train_languages`` of them), and each one it
    was adapted to along its chain of starting runs (``adapt.from``, whose ``config.yaml`` records the run it
    started from in turn: a run adapted twice keeps its first new language)."""
    found, cfg, seen = set(train_languages(start)), start, set()
    while cfg.adapt.from_run and cfg.adapt.from_run not in seen:
        found.add(split.new_language(cfg))
        seen.add(cfg.adapt.from_run)
        earlier = Path(cfg.adapt.from_run) / "config.yaml"  # a run folder's or a checkpoint's: both hold it
        if not earlier.is_file():  # a starting run moved or removed since: its own new language is not known
            break
        cfg = load_train_config(earlier)
    return sorted(found)


def refuse_starting_folder(cfg: TrainConfig, source: Path) -> None:
    """One-line error when the adapted run's folder is the one of the run it starts from (``source``, its checkpoint:
    :func:`starting_checkpoint`); checked before the folder's checkpoints are, whose error would offer to delete it."""
    if cfg.run_dir.resolve() == source.parents[1].resolve():
        raise UserError(f"run_name/output_dir: {cfg.run_dir} is the starting run's folder; give the adapted run its own")


def resolve_config(cfg: TrainConfig) -> TrainConfig:
    """Check an adaptation config against its starting run; return it with ``steps`` (from
    ``adapt.epochs``), ``data.tokenizer`` (the grown one, in the run folder) and ``adapt.from`` (the starting
    checkpoint's absolute path, which the saved config records) filled in.

    One-line errors: no checkpoint, an unfinished run, weights that do not load, a language the run was trained on, no
    adaptation split (``adapt.split``: a split under ``data.root`` or any split folder, :mod:`.split`), no caption of
    the language in it, a feature cache beside it built with another backbone, a split of precomputed image
    features for a run that reads pixels, a model or heads other than the run's,
    a run whose only loss is L_v (no loss reaches the text side), a run folder that is the starting one, an
    ``adapt.old_captions`` or ``adapt.old_batch`` above the old captions.
    """
    a = cfg.adapt
    source = starting_checkpoint(a.from_run)
    start = load_train_config(source / "config.yaml")
    old = trained_languages(start)
    split.check_new_language(cfg, old)
    for diff in (_first_difference(to_dict(cfg.model), to_dict(start.model), "model"),
                 _first_difference(_heads(cfg), _heads(start), "loss (weight > 0)"),
                 _first_difference({k: getattr(cfg.data, k) for k in DATA_KEPT},
                                   {k: getattr(start.data, k) for k in DATA_KEPT}, "data")):
        if diff:
            key, mine, theirs = diff
            raise UserError(f"{key}: {mine!r} differs from the starting run's {theirs!r} ({source / 'config.yaml'}); "
                            f"adaptation keeps the run's model (leave the key out)")
    if not any(on for loss, on in _heads(cfg).items() if loss != "image"):  # L_v alone: the image side, fixed here
        raise UserError(f"loss: {source / 'config.yaml'} trains L_v alone (loss.text, loss.cross and loss.cloze are "
                        f"0), and adaptation trains the text side, which no loss of the run reaches; adapt a run "
                        f"trained with a text loss")
    refuse_starting_folder(cfg, source)
    cfg = split.resolved(cfg)  # adapt.split: a split under data.root, or any split folder (made absolute)
    count = split.check_languages(cfg, old)
    split.check_features(cfg)  # a cache beside the split built with another backbone: refused before anything is written
    _check_bank(cfg, start)
    load(source)  # weights that do not load are refused before anything is written (no half-written run folder)
    steps = epoch_steps(cfg.adapt.epochs, count, cfg.batch_size) if cfg.adapt.epochs is not None else cfg.steps
    # adapt.from recorded as the very checkpoint it starts from (absolute): a run's best/ moves as it trains on
    return replace(cfg, steps=steps, val=_selection(cfg), adapt=replace(cfg.adapt, from_run=str(source.resolve())),
                   data=replace(cfg.data, tokenizer=str(cfg.run_dir / "tokenizer.json"),
                                tokenizer_normalization=start.data.tokenizer_normalization))


def _check_bank(cfg: TrainConfig, start: TrainConfig) -> None:
    """One-line errors for an ``adapt.old_captions`` above the old-language training captions there are, or an
    ``adapt.old_batch`` above the bank they make (drawn without replacement: it would be cut to the bank in silence)."""
    a = cfg.adapt
    if a.old_captions is None and a.old_batch is None:
        return
    held = len(train_captions(start_train_config(cfg, start)))
    where = f"{Path(cfg.data.root) / start.data.train_split}'s old-language training captions"
    if a.old_captions is not None and a.old_captions > held:
        raise UserError(f"adapt.old_captions={a.old_captions}: {a.from_run} has only {held} ({where}); give at "
                        f"most {held}, or null (all)")
    bank = min(a.old_captions or held, held)
    if a.old_batch is not None and a.old_batch > bank:
        sample = f"adapt.old_captions={a.old_captions} of " if a.old_captions else ""
        raise UserError(f"adapt.old_batch={a.old_batch}: more than the bank's {bank} old captions ({sample}{where}); "
                        f"give at most {bank}, or null (batch_size, at most the bank)")


def _selection(cfg: TrainConfig) -> ValConfig:
    """``cfg.val``, choosing no best checkpoint (``select_by: ""``) when the val split has no caption in the new
    language: its BackRetrieval cannot see what adaptation changes (under new-tokens the old languages do not move
    at all), so a best checkpoint would be the first validated one; the run's last checkpoint is what it learnt."""
    from data_prep.shards import read_manifest

    val_dir = Path(cfg.data.root) / cfg.data.val_split
    try:
        languages = read_manifest(val_dir).get("languages") or {}
    except UserError:  # no val split: validation itself says so when it runs
        languages = {}
    if not cfg.val.select_by or cfg.val.every == 0 or cfg.adapt.language in languages:
        return cfg.val  # val.every=0: no checkpoint is chosen anyway (emptied, it would warn of a key the user never set)
    return replace(cfg.val, select_by="", select_test=None)


def write_tokenizer(cfg: TrainConfig, log: Callable[[str], None] = print) -> None:
    """Write the starting run's tokenizer, grown by the new language's tokens, to ``data.tokenizer``
    (:func:`resolve_config` points it into the run folder). Main process only."""
    a = cfg.adapt
    if not cfg.data.tokenizer:  # never the data root's shared tokenizer: only the run folder's is grown
        raise UserError("data.tokenizer: unset; an adaptation writes its grown tokenizer where resolve_config points "
                        "it (the run folder's tokenizer.json)")
    source = starting_checkpoint(a.from_run)
    tokenizer = load_tokenizer(source / "tokenizer.json")
    n_old = tokenizer.get_vocab_size()
    if a.vocab_size > 0:
        start = load_train_config(source / "config.yaml")
        new = [m["caption"] for m in split.new_captions(cfg)]
        known = [m["caption"] for m in known_captions(cfg, start)]
        before = tokenizer.get_vocab_size()
        tokenizer, added = extend_tokenizer(tokenizer, new, a.vocab_size, known)
        log(f"adapt: vocabulary {before} + {added} {a.language} tokens (BPE of {a.vocab_size} on its "
            f"{len(new)} captions, less what the old captions contain)")
    if a.train == "new-tokens":  # no token to train: refused before the run folder is written
        rows_to_train(tokenizer, cfg, load_train_config(source / "config.yaml"), n_old)
    base = read_provenance(source / "tokenizer.json")
    save_tokenizer(tokenizer, cfg.data.tokenizer, {
        "splits": (base or {}).get("splits", []), "extends": base,
        "adapt": {"from": a.from_run, "split": str(split.split_dir(cfg).resolve()), "language": a.language,
                  "vocab_size": a.vocab_size}})
