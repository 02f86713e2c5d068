"""What the sub-commands share: the metric's help text, option groups, and arguments -> library options."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from ..approximate import ApproxConfig
from ..data import language_code
from ..devices import torch_device
from ..embedders import SPEC_FORMS, check_spec, parse_model_specs
from ..errors import BackRetrievalError
from ..image_weights import DEFAULT_IMAGE_MODEL, PAPER_IMAGE_MODEL
from ..images import ImageModel, image_feature_extractor
from ..outputs import remove_earlier_outputs, writable_dir, writable_file, write_json
from ..records import dump_json
from ..ranking import TIES
from ..hubness import DEFAULT_CSLS_K
from ..scoring import DEFAULT_CORR_PAIRS, ImageLists
from ..uncertainty import DEFAULT_LEVEL

T = TypeVar("T")

METRIC_HELP = """\
BackRetrieval (Fain, Twomey & Bollegala, SIGIR 2021) judges a cross-lingual text model f
without parallel text, using images as the pivot. For each source-language caption T_S^q
with image I_S^q:
  1-2. retrieve the nearest target-language caption T_T* by cosine of f (ties: lowest index);
  3.   rank all source images by the image similarity g(I_T*, I_S) (cosine of CNN features);
  4.   rank_q = rank of the query's own image I_S^q (1 = best).
BkR Recall@K = share of queries with rank_q <= K. Images shared by several source captions
are ranked once. Ties in g follow --ties: pessimistic (tied images count as above,
default), optimistic (they do not), expected (expectation over random tie orders).
XLR Recall@K is the ground-truth cross-lingual retrieval metric (rank of the true
translation among all target captions), computable only with parallel data; CORR is the
paper's baseline: Spearman between text and image cosine distances over source x target
pairs. A good BkR tracks XLR across models ('correlate' measures how closely).

Every figure comes with a bootstrap 95% interval over queries (--bootstrap replicates of
the per-query hits; 0 turns it off); --retrieval csls retrieves by CSLS instead of the
cosine (hub captions penalised) and the record reports the hubness of the retrieval
(skewness of the k-occurrence, share of queries landing on the top 1% hubs, each beside what a
retrieval without hubs reads).
"""

APPROXIMATE_HELP = (
    "--approximate finds the text neighbours with a compressed faiss index (exact re-scoring) and the retrieved "
    "targets' best source images likewise (compressed codes re-scored exactly; better images counted only up to K): "
    "for large N."
)
IMAGE_INDEX_HELP = (
    "--image-index FILE keeps each target image's best source images (computed once per image set: with "
    "--approximate from compressed codes re-scored exactly, else exact) so that step 4 is a lookup for every model "
    "scored on the same images."
)

MODEL_SPECS = (
    "Model specs: npy:PATH (rows looked up by text in a PATH.texts.json list; without it, one row per caption read "
    "from the split, only the languages asked for, in shard order) | use | st:MODEL | random:DIM[:SEED] | "
    "noisy:STD[:SEED]:SPEC | globetrotter:CKPT_DIR | any PREFIX:ARG of the 'backretrieval.embedders' entry "
    "points; prefix NAME= to label a model (e.g. USE-M=use)."
)


def command_line_specs(specs: list[str], flag: str) -> list[str]:
    """Model specs given on the command line: a blank one or a '#' comment (lines a --models-file may hold) is a
    mistake here, not a line to skip."""
    for spec in specs:
        if not spec.strip() or spec.strip().startswith("#"):
            what = "empty" if not spec.strip() else "a '#' comment, not a"
            raise BackRetrievalError(f"{flag} {spec!r}: {what} model spec; expected {SPEC_FORMS}")
        for one in parse_model_specs([spec], what=flag).values():
            check_spec(one)  # a mistyped spec is reported now, before the image model or any data is touched
    return list(specs)


def add_command(sub: argparse._SubParsersAction, name: str, help: str, *paragraphs: str) -> argparse.ArgumentParser:
    """A sub-command whose ``--help`` explains the metric, then what the command does (``paragraphs``)."""
    description = METRIC_HELP + "".join("\n" + textwrap.fill(p, 88) + "\n" for p in paragraphs)
    return sub.add_parser(name, help=help, description=description, formatter_class=formatter)


def formatter(prog: str) -> argparse.HelpFormatter:
    """The commands' help layout: descriptions as written (line breaks kept), option help from column 34 at most."""
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``minimum`` (argparse names the option in its one-line error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return parse


def comma_separated(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse ``type``: comma-separated values in one token (``--ks 1,5,10``), each read by the argparse type
    ``item``, as every command of the project takes its lists of numbers, codes and choices. A bad item is a usage
    error naming it (and the value it is part of)."""
    def parse(text: str) -> list[T]:
        values, within = [], f" (in {text!r})" if "," in text else ""
        for part in text.split(","):
            try:
                values.append(item(part.strip()))
            except argparse.ArgumentTypeError as err:
                raise argparse.ArgumentTypeError(f"{err}{within}") from None
            except (TypeError, ValueError):  # a plain type (int, float), as argparse words its error
                name = getattr(item, "__name__", "")
                raise argparse.ArgumentTypeError(f"invalid {name} value: {part.strip()!r}{within}") from None
        return values
    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    """An argparse ``type``: one of ``choices`` (for :func:`comma_separated` lists of choices, which argparse's own
    ``choices`` cannot check: it would compare the whole list)."""
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from {', '.join(choices)})")
        return text
    return parse


def language_codes(text: str) -> list[str]:
    """An argparse ``type``: comma-separated language codes (``en,de,fr``), as every command of the project takes
    ``--languages``, each in the converters' form (:func:`~backretrieval.data.language_code`: ``EN`` is ``en``); an
    empty list or item (``en,,de``), or a code given twice (``en,EN``), is a usage error."""
    codes = [code.strip() for code in text.split(",")]
    if not all(codes):
        raise argparse.ArgumentTypeError(f"expected comma-separated language codes, e.g. en,de,fr, got {text!r}")
    codes = [language_code(code) for code in codes]
    repeated = sorted({code for code in codes if codes.count(code) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{', '.join(repeated)} given twice in {text!r}; expected each language once")
    return codes


def add_metric_options(p: argparse.ArgumentParser, full_ranks: bool = False, hits: bool = False) -> None:
    """``hits``: the command also compares hit files, which record their K (``--ks`` then defaults to those)."""
    p.add_argument("--ks", type=comma_separated(integer_at_least(1)), default=None if hits else [1, 5, 10],
                   metavar="K,K", help="the K of Recall@K, several at once, comma-separated (default: 1,5,10" +
                        ("; with --hits, the K the files were scored at" if hits else "") + "; the paper uses 10)")
    p.add_argument("--ties", choices=TIES, default="pessimistic",
                   help="how images (or texts, for XLR) with exactly equal scores rank (default: pessimistic)")
    p.add_argument("--max-rank", type=integer_at_least(1), metavar="N", default=None,
                   help="stop counting a query's rank above N (reported as N+1): same Recall@K for K <= N, much faster "
                        "for weak models (default: " + ("exact ranks; with --approximate or --image-index only the "
                                                        "largest K, the cap they use" if full_ranks else
                                                        "the largest K") + ")")


def share_between_0_and_1(text: str) -> float:
    """An argparse ``type``: a number strictly between 0 and 1 (an interval level)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text}")
    return value


def add_interval_options(p: argparse.ArgumentParser, bootstrap_help: str) -> None:
    """``--bootstrap`` (replicates; ``bootstrap_help``: its help) and ``--level`` of the intervals."""
    p.add_argument("--bootstrap", type=integer_at_least(0), default=1000, metavar="B", help=bootstrap_help)
    p.add_argument("--level", type=share_between_0_and_1, default=None,
                   help="interval level, with --bootstrap above 0 (default: 0.95)")


def add_beyond_paper_options(p: argparse.ArgumentParser, image_index: bool = True) -> None:
    """The options beyond the paper's metric; ``image_index``: the command also takes ``--image-index`` (which
    ``--approx-image-side`` then does not apply with)."""
    add_interval_options(p, "bootstrap replicates over queries for the intervals (default: 1000; 0: no intervals)")
    p.add_argument("--retrieval", choices=("cosine", "csls"), default="cosine",
                   help="text retrieval criterion: cosine (the paper) or CSLS, which penalises hub captions "
                        "(Conneau et al. 2018; default: cosine)")
    p.add_argument("--csls-k", type=int, default=None, metavar="K",
                   help="with --retrieval csls: CSLS neighbourhood size (default: 10)")
    p.add_argument("--approximate", action="store_true",
                   help="for large N: text neighbours from a compressed faiss index (candidates re-scored exactly), "
                        "and the retrieved targets' best source images from compressed image codes (re-scored "
                        "exactly); better images counted only up to the largest K (ranks above it censored)")
    p.add_argument("--ann", choices=("pq", "ivf"), default=None,
                   help="with --approximate: the candidate index: pq (64 principal directions, 4-bit codes, every "
                        "target scanned) or ivf (k-means cells, --nprobe of them visited) (default: pq)")
    p.add_argument("--candidates", type=integer_at_least(1), default=None, metavar="C",
                   help="with --approximate: text candidates per query re-scored exactly (default: 128)")
    p.add_argument("--approx-image-side", choices=("pq", "exact"), default=None,
                   help=("with --approximate and no --image-index" if image_index else "with --approximate") +
                        ": step 4 from compressed-code image lists of the retrieved targets (pq) or the exact count "
                        "of better images up to the largest K (exact: slower) (default: pq)")
    p.add_argument("--nprobe", type=integer_at_least(1), default=None,
                   help="with --approximate --ann ivf: cells visited per query (more: slower, closer to exact; "
                        "default: 32)")


def add_image_index_option(p: argparse.ArgumentParser) -> None:
    """``--image-index`` (image neighbour lists read from, or written to, an NPZ) and ``--image-index-method``."""
    p.add_argument("--image-index", metavar="NPZ",
                   help="image neighbour lists: read from NPZ when it exists, else computed (see "
                        "--image-index-method) and written there. Step 4 becomes a lookup (ranks above the largest "
                        "K censored); the lists depend only on the images, so reuse the file for every text model "
                        "scored on them")
    p.add_argument("--image-index-method", choices=("pq", "flat"),
                   help="how a new --image-index file is built: pq (256 candidates per target image from 4-bit codes "
                        "of 64 principal directions, re-scored exactly: fast, approximate) or flat (exact faiss "
                        "search, one N_t x N_s pass over the full features) (default: pq with --approximate, "
                        "else flat)")


def add_embedding_metric_options(p: argparse.ArgumentParser, hits: bool = False) -> None:
    """What ``score`` and ``compare`` take after their inputs: --out, then every metric option (``hits``: as in
    :func:`add_metric_options`)."""
    p.add_argument("--out", metavar="JSON", help="write the JSON record here (default: print it)")
    add_metric_options(p, full_ranks=True, hits=hits)
    add_beyond_paper_options(p)
    add_image_index_option(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars of big scoring work")


def add_model_options(p: argparse.ArgumentParser) -> None:
    """The options that load models: the image model g (``--image-model``, ``--image-weights``, ``--batch-size``,
    ``--device``, ``--cache-dir``) and ``--online`` (downloads allowed)."""
    p.add_argument("--image-model", default=DEFAULT_IMAGE_MODEL, metavar="G",
                   help="the image similarity g: a timm model whose pooled last-layer features define it (default: "
                        f"{DEFAULT_IMAGE_MODEL}, whose ImageNet weights ship offline; the paper's {PAPER_IMAGE_MODEL} "
                        "needs --image-weights); thumbnail:SIZE (the image's SIZE x SIZE pixels, flattened: a "
                        "degraded g); random[:SEED] (a Gaussian vector per image: the null g, BkR at chance)")
    p.add_argument("--image-weights", default=None, metavar="W",
                   help="image model weights: a local .pth/.safetensors file; 'package' (offline ImageNet weights of "
                        "the offline-models extra, only for --image-model efficientnet_lite0/1/2, and their default); "
                        "'hub' (download, needs --online); 'random' (a randomly initialised CNN). Not needed when the "
                        "split stores npy features, nor for thumbnail/random g")
    p.add_argument("--online", action="store_true",
                   help="allow downloads (timm hub weights, sentence-transformers models); off by default")
    p.add_argument("--batch-size", type=int, default=32, help="image batch size for feature extraction (default: 32)")
    p.add_argument("--device", type=torch_device, default="cpu",
                   help="torch device of the image model: cpu, cuda, cuda:1, ... (default: cpu)")
    default_cache = os.environ.get("BACKRETRIEVAL_CACHE", str(Path.home() / ".cache" / "backretrieval"))
    p.add_argument("--cache-dir", default=default_cache,
                   help="image-feature cache, keyed by model, weights and image set "
                        "(default: $BACKRETRIEVAL_CACHE or ~/.cache/backretrieval)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


APPROX_DEFAULTS = ApproxConfig()
"""The approximate mode's defaults, filled in for the options not given."""


# option -> (its default, the options it only matters with, whether they are given)
def _dependent_options(args: argparse.Namespace) -> dict[str, tuple[object, str, bool]]:
    approximate = bool(getattr(args, "approximate", False))
    lists = bool(getattr(args, "image_index", None))  # step 4 looks the file's lists up: no approximate image side
    options: dict[str, tuple[object, str, bool]] = {"level": (DEFAULT_LEVEL, "--bootstrap above 0", args.bootstrap > 0)}
    if hasattr(args, "csls_k"):
        options |= {
            "csls_k": (DEFAULT_CSLS_K, "--retrieval csls", args.retrieval == "csls"),
            "ann": (APPROX_DEFAULTS.index, "--approximate", approximate),
            "candidates": (APPROX_DEFAULTS.candidates, "--approximate", approximate),
            "approx_image_side": (APPROX_DEFAULTS.image_side, "--approximate and no --image-index",
                                  approximate and not lists),
            "nprobe": (APPROX_DEFAULTS.nprobe, "--approximate --ann ivf", approximate and args.ann == "ivf"),
        }
    if hasattr(args, "image_index_method"):
        options["image_index_method"] = (None, "--image-index", bool(args.image_index))
    if hasattr(args, "corr_pairs") and hasattr(args, "image_sim"):  # score: CORR needs image features
        options["corr_pairs"] = (DEFAULT_CORR_PAIRS, "--src-img/--tgt-img (CORR), not --image-sim",
                                 args.image_sim is None)
    return options


def resolve_dependent_options(args: argparse.Namespace) -> None:
    """Refuse an option given without the one it only matters with (it was silently ignored), then fill in the
    defaults of those not given, in ``args`` (the JSON record lists the values used)."""
    for name, (default, needs, given) in _dependent_options(args).items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, default)
        elif not given:
            flag = "--" + name.replace("_", "-")
            raise BackRetrievalError(f"{flag} {value} only matters with {needs}: give that or drop {flag}")


def metric_options(args: argparse.Namespace) -> dict:
    """The metric's keyword options shared by ``score``, ``compare`` and ``eval`` (:func:`backretrieval.score`);
    an option given without the one it only matters with is refused (:func:`resolve_dependent_options`)."""
    resolve_dependent_options(args)
    approximate = args.approximate and ApproxConfig(index=args.ann, nprobe=args.nprobe, candidates=args.candidates,
                                                    seed=args.seed, image_side=args.approx_image_side)
    return {"ks": args.ks, "ties": args.ties, "max_rank": args.max_rank, "retrieval": args.retrieval,
            "csls_k": args.csls_k, "approximate": approximate, "bootstrap": args.bootstrap, "level": args.level,
            "seed": args.seed}


def record_rank_cap(args: argparse.Namespace) -> None:
    """With --approximate or --image-index ranks are counted only up to the largest K: the record's max_rank says
    so (None would read as exact ranks)."""
    if args.max_rank is None and (args.approximate or args.image_index):
        args.max_rank = max(args.ks)


def extractor(args: argparse.Namespace) -> ImageModel:
    """The g of --image-model/--image-weights (a bad spec fails here, before any data is read)."""
    return image_feature_extractor(args.image_model, args.image_weights, online=args.online,
                                   batch_size=args.batch_size, device=args.device, cache_dir=args.cache_dir,
                                   progress=not args.no_progress)


def inputs(args: argparse.Namespace) -> dict:
    """The arguments as the JSON records list them."""
    return {k: v for k, v in vars(args).items() if k != "func"}


def report_image_lists(image_lists: ImageLists | None, approximate: bool) -> None:
    """Say that --image-index was written, or that the lists read from it are approximate when the run is not."""
    if image_lists is None:
        return
    lists = image_lists.lists
    if image_lists.built:
        print(f"wrote {lists.origin} ({lists.n_targets} x {lists.n_neighbours} image neighbours, {lists.method})",
              file=sys.stderr)
    elif lists.method != "flat" and not approximate:
        print(f"note: {lists.origin} holds approximate ({lists.method}) image lists: step 4 is approximate",
              file=sys.stderr)


def writable_outputs(out_dir: str | Path, names: Iterable[str]) -> None:
    """Refuse the --out folder, or a file the command will write in it (``names``: a folder of that name, say),
    before any work: the results were lost when writing them failed at the end."""
    writable_dir(out_dir, "--out")
    for name in names:
        writable_file(Path(out_dir) / name, f"{name} in --out")


def replace_plots(out_dir: Path, written: list[Path], patterns: tuple[str, ...]) -> None:
    """Remove the plots of an earlier run in a reused --out folder that this run did not write (by the names the
    command gives its plots), and say so in one line: the folder then holds one run, as its JSON record does."""
    stale = remove_earlier_outputs(out_dir, patterns, written)
    if stale:
        names = ", ".join(p.name for p in stale[:3]) + (", ..." if len(stale) > 3 else "")
        print(f"removed {len(stale)} plot(s) of an earlier run from {out_dir} ({names}); other files stay",
              file=sys.stderr)


def emit_json(record: dict, out: str | Path | None) -> None:
    """Print the record (no --out, or '-'), or write it to ``out`` and say so."""
    if out is None or str(out) == "-":
        print(dump_json(record))
        return
    write_json(record, out)
    print(f"wrote {out}", file=sys.stderr)
