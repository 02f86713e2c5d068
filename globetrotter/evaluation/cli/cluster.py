"""``eval.py cluster``: k-means language purity against meaning purity (paper A.4)."""
from __future__ import annotations

import argparse

from globetrotter.argtypes import positive_int

from ..tasks import cluster as cluster_task
from . import common

_CLUSTER_HELP = (
    "Clustering analysis (paper appendix A.4): spherical k-means (--k clusters, 50 by default as in the "
    "paper) over the --head embeddings of --n-groups parallel test groups in all languages. METRICS: language purity = share of sentences "
    "whose cluster's majority language is their own (1 = clusters by language, as the text-only "
    "model); meaning purity = share of sentences in the cluster holding most of their group's "
    "translations (1 = clusters by meaning, as the full model); NMI of the clusters with language and "
    "with group; each also for shuffled clusters (chance). Prints three sentences of the first three "
    "clusters (Fig. 10). Run once per model (full and text-only) to compare."
)


def _cluster(args: argparse.Namespace) -> int:
    result = cluster_task.evaluate(args.model, args.split, languages=args.languages,
                                   n_groups=args.n_groups, k=args.k, head=args.head, seed=args.seed,
                                   batch_size=args.batch_size, name=args.name, device=args.device)
    m, d = result.metrics, result.details
    print(f"k-means k={d['k']} over {d['n_sentences']} sentences: language purity {m['language_purity']:.3f} "
          f"(chance {m['chance']['language_purity']:.3f}), meaning purity {m['meaning_purity']:.3f} "
          f"(chance {m['chance']['meaning_purity']:.3f}); NMI language {m['nmi_language']:.3f}, "
          f"meaning {m['nmi_meaning']:.3f}")
    if d["n_groups"] < args.n_groups:  # as sentence says it
        print(f"note: --n-groups {args.n_groups}, but {args.split} has {d['n_groups']} groups in every one of "
              f"{','.join(result.config['languages'])}: all of them were clustered")
    for ex in d["examples"]:
        print(f"cluster {ex['cluster']}: " + " | ".join(f"({s['lang']}) {s['text']}" for s in ex["sentences"]))
    common.write(result, args)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``cluster`` sub-command."""
    own = common.common_options(seed_help="seed of the --n-groups sample and of k-means (default 0)")
    p = sub.add_parser("cluster", parents=[own], help="k-means language vs meaning purity (paper A.4)", description=_CLUSTER_HELP)
    common.add_model(p)
    common.add_split(p)
    p.add_argument("--n-groups", type=positive_int, default=200, help="parallel groups sampled (default %(default)s)")
    p.add_argument("--k", type=positive_int, default=50, help="number of clusters (default %(default)s, the paper's)")
    p.add_argument("--head", choices=["text", "cross"], default="text", help="head to embed with: text (the text-text head) or cross (the cross-modal head) "
                        "(default %(default)s)")
    p.set_defaults(func=_cluster)
