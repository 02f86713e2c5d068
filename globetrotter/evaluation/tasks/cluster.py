"""Clustering of the representation space, language against meaning purity (Globetrotter paper A.4), as a library
call: :func:`evaluate`."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

from backretrieval.errors import given, option
from globetrotter.errors import UserError

from ..clustering import cluster_analysis
from ..models import ModelLike, language_kwargs
from ..records import Result, dataset_info
from .checks import require_languages, require_trained
from .common import read_parallel, resolve_model


def evaluate(
    model: ModelLike,
    split: str | Path,
    *,
    languages: Sequence[str] | None = None,
    n_groups: int | None = 200,
    k: int = 50,
    head: Literal["text", "cross"] = "text",
    seed: int = 0,
    batch_size: int = 256,
    name: str | None = None,
    device: str = "cpu",
) -> Result:
    """Spherical k-means (``k`` clusters, ``seed``) over ``model``'s ``head`` embeddings of a ``seed``-ed sample of
    ``n_groups`` parallel groups of ``split`` in all ``languages``, and how the clusters follow language or meaning
    (:func:`~..clustering.cluster_analysis`): language purity, meaning purity, the NMI of the clusters with language
    and with group, each beside its value for shuffled clusters (``chance``); three sentences of the first three
    clusters in ``details["examples"]`` (the paper's Fig. 10). ``k`` of at least the sampled sentences (each its own
    cluster: every purity 1, as chance) is a :class:`UserError`."""
    require_trained(model, "cluster")
    require_languages(languages=languages)
    ps = read_parallel(split, languages, n_groups, seed)
    if k >= len(ps):
        raise UserError(f"{given('k', k)}: k-means needs fewer clusters than the {len(ps)} sentences sampled "
                        f"({len(ps.group_ids)} groups x {len(ps.languages)} languages; one sentence a cluster makes "
                        f"every purity 1, as chance): lower {option('k')} or sample more groups ({option('n_groups')})")
    encoder, info = resolve_model(model, name, device)
    emb = encoder.encode_text(ps.captions, batch_size=batch_size, head=head, **language_kwargs(encoder, ps.langs))
    res = cluster_analysis(emb, ps.langs, ps.groups, ps.captions, k=k, seed=seed)
    metrics = {key: res[key] for key in ("language_purity", "meaning_purity", "nmi_language", "nmi_meaning", "chance")}
    details = {"k": res["k"], "n_sentences": len(ps), "n_groups": len(ps.group_ids), "cluster_sizes": res["cluster_sizes"], "examples": res["examples"]}
    config = {"languages": list(ps.languages), "n_groups": n_groups, "k": k, "head": head, "seed": seed}
    return Result("cluster", metrics, list(ps.languages), model=info, dataset=dataset_info(split), config=config,
                  details=details)
