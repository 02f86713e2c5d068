"""Translation by generation with a decoder on the frozen representation (Globetrotter paper A.5) as a library call:
:func:`evaluate`."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable, Literal, Sequence

import numpy as np

from backretrieval.errors import given, option, said
from backretrieval.files import is_whole
from globetrotter.errors import UserError

from ..generation import DecoderConfig
from ..models import ModelLike, language_kwargs
from ..records import Result, dataset_info
from ..sentence import ParallelSet, parallel_set
from .checks import require_known_languages, require_language, require_languages, require_positive_int, require_trained
from .common import log_to_stderr, resolve_model, shows_progress


def _sources(split: str | Path, test_langs: Sequence[str], target: str, sources: Sequence[str] | None) -> list[str]:
    """The source languages (default: every language of the split but the target), checked against it."""
    if target not in test_langs:
        raise UserError(f"{split}: no caption in target language {target!r} ({option('target')}; has {list(test_langs)})")
    sources = list(sources) if sources else [lang for lang in test_langs if lang != target]
    unknown = sorted(set(sources) - set(test_langs))
    if unknown:
        raise UserError(f"{split}: no caption in source language(s) {unknown} ({option('sources')}; has {list(test_langs)})")
    sources = [lang for lang in dict.fromkeys(sources) if lang != target]
    if not sources:
        raise UserError(f"{option('sources')}: give at least one language other than the target {target!r}")
    return sources


def _refuse_overlap(train: str | Path, split: str | Path, train_metas: Sequence[dict], ps: ParallelSet) -> None:
    """A :class:`UserError` when ``train`` is a parallel split (its captions carry a ``group``) sharing a group or an
    image with the evaluated sample ``ps`` of ``split``."""
    if not any(m.get("group") is not None for m in train_metas):
        return
    groups, images = set(ps.group_ids), set(ps.image_ids)
    shared_groups = {str(m["group"]) for m in train_metas if m.get("group") is not None} & groups
    shared_images = {str(m["image_id"]) for m in train_metas} & images
    if shared_groups or shared_images:
        raise UserError(f"{given('train', train)}: a parallel split sharing {len(shared_groups)} groups and "
                        f"{len(shared_images)} images with the {len(groups)} evaluated groups of {given('split', split)}; "
                        "the decoder would learn the references (give the train split)")


def evaluate(
    model: ModelLike,
    split: str | Path,
    train: str | Path,
    *,
    target: str = "en",
    sources: Sequence[str] | None = None,
    n_groups: int | None = None,
    show: int = 5,
    head: Literal["text", "cross"] = "text",
    decoder: DecoderConfig | None = None,
    seed: int = 0,
    batch_size: int = 256,
    name: str | None = None,
    log: Callable[[str], None] = log_to_stderr,
    device: str = "cpu",
) -> Result:
    """Train a small causal decoder to write ``train``'s ``target`` captions from ``model``'s frozen ``head``
    representation of each (``decoder``: a :class:`~..generation.DecoderConfig`, default its defaults), then decode
    the representations of the ``sources``' captions (default: every other language) of a ``seed``-ed sample of
    ``n_groups`` parallel groups of ``split`` (default: all) greedily.

    Metrics (sacrebleu corpus scores, 0-100, one reference: the group's target caption): ``chrf`` and ``bleu``, the
    mean over sources; ``per_source``; ``reconstruction`` (the target's own captions) and ``mismatched`` (each group
    decoded from another group's target caption: the floor). ``details["examples"]``: the first ``show`` groups'
    reference, sources and generations; ``details["train"]``: how many of the references appear verbatim among the
    training captions (``test_references_in_train`` of ``test_references``). ``seed`` also fixes the decoder's init
    and batch order. ``train`` may not be ``split`` itself, nor a parallel split (captions with a ``group``) holding
    any evaluated group or image: the decoder would learn the references (:class:`UserError`); so is a ``target`` or
    a given source the model's tokenizer never read (its provenance record). The note that the decoder trains and its
    progress bar go to stderr; a ``log`` of one's own (``lambda _: None``: quiet) takes the note and shows no bar.
    """
    from data_prep.shards import read_captions

    from .. import generation as gen

    decoder = decoder or gen.DecoderConfig()
    if not isinstance(decoder, gen.DecoderConfig):  # a dict was 'no attribute lr'
        raise TypeError(f"decoder: expected a DecoderConfig (globetrotter.evaluation.generation), got "
                        f"{type(decoder).__name__}; build one as DecoderConfig(**settings)")
    require_trained(model, "generate")
    require_language(target, "target")
    require_languages(sources=sources)
    for size in ("d_model", "layers", "heads", "prefix_length", "max_tokens", "steps", "batch_size"):
        require_positive_int(getattr(decoder, size), f"decoder.{size}")  # 0 layers or steps: a figure in silence
    if not is_whole(show) or show < 0:
        raise UserError(f"{given('show', show)}: expected a number of examples >= 0")
    if not 0 < decoder.lr < float("inf"):
        lr = said(f"--lr {decoder.lr}", f"decoder.lr={decoder.lr}")  # the decoder's settings: flags of their own
        raise UserError(f"{lr}: expected a learning rate > 0")
    if decoder.d_model % decoder.heads:  # checked before the model loads and the data is read
        d_model = said(f"--d-model {decoder.d_model}", f"decoder.d_model={decoder.d_model}")
        raise UserError(f"{d_model}: expected a multiple of the decoder's {decoder.heads} heads")
    if Path(train).resolve() == Path(split).resolve():
        raise UserError(f"{given('train', train)}: is the evaluated {option('split')} itself; the decoder would learn "
                        "the references (give the train split)")
    test_metas = read_captions(split)
    given_sources = list(sources) if sources else None
    sources = _sources(split, sorted({m["lang"] for m in test_metas}), target, sources)
    ps = parallel_set(test_metas, [target, *sources], n_groups=n_groups, seed=seed, where=str(split))
    if len(ps.group_ids) < 2:
        raise UserError(f"{split}: {len(ps.group_ids)} parallel group(s) in {[target, *sources]}; need at least 2")
    train_metas = read_captions(train)
    _refuse_overlap(train, split, train_metas, ps)
    train_texts = [m["caption"] for m in train_metas if m["lang"] == target]
    if not train_texts:
        raise UserError(f"{train}: no caption in target language {target!r} to train the decoder on "
                        f"({option('train')}; has {sorted({m['lang'] for m in train_metas})})")
    references = [c for c, lang in zip(ps.captions, ps.langs) if lang == target]
    train_set = set(train_texts)

    encoder, info = resolve_model(model, name, device)
    require_known_languages(encoder, {"target": target})
    for lang in given_sources or []:
        require_known_languages(encoder, {"sources": lang})
    train_rep = encoder.encode_text(train_texts, batch_size=batch_size, head=head, **language_kwargs(encoder, target))
    test_rep = encoder.encode_text(ps.captions, batch_size=batch_size, head=head, **language_kwargs(encoder, ps.langs))
    log(f"training a {decoder.layers}-layer decoder on {len(train_texts)} {target} captions of {train} "
        f"for {decoder.steps} steps")
    net, vocab, train_log = gen.train_decoder(train_texts, train_rep, encoder.tokenizer, decoder, seed=seed,
                                              progress=shows_progress(log))

    # rows: each source language, the target itself (reconstruction), and the mismatched floor
    rows = {lang: test_rep[ps.langs == lang] for lang in [*sources, target]}
    rows["mismatched"] = rows[target][gen.derangement(len(references), seed)]
    generated = {row: gen.generate(net, vocab, rep, batch_size=batch_size) for row, rep in rows.items()}
    scores = {row: gen.score(hyps, references, target) for row, hyps in generated.items()}
    source_text = {lang: [c for c, l in zip(ps.captions, ps.langs) if l == lang] for lang in sources}
    examples = [{"group": ps.group_ids[g], "reference": references[g],
                 "generated": {row: generated[row][g] for row in generated},
                 "sources": {lang: source_text[lang][g] for lang in sources}}
                for g in range(min(show, len(references)))]
    metrics = {"chrf": float(np.mean([scores[lang]["chrf"] for lang in sources])),
               "bleu": float(np.mean([scores[lang]["bleu"] for lang in sources])),
               "per_source": {lang: scores[lang] for lang in sources},
               "reconstruction": scores[target], "mismatched": scores["mismatched"]}
    details = {"target": target, "sources": sources, "n_groups": len(references),
               "train": {"path": str(Path(train).resolve()), "captions": len(train_texts),
                         "test_references": len(references),
                         "test_references_in_train": sum(r in train_set for r in references)},
               "decoder": {**vars(decoder), **train_log}, "examples": examples}
    config = {"train": str(train), "target": target, "sources": sources, "n_groups": n_groups, "show": show,
              "head": head, "decoder": asdict(decoder), "seed": seed}
    return Result("generate", metrics, [target, *sources], model=info, dataset=dataset_info(split), config=config,
                  details=details)
