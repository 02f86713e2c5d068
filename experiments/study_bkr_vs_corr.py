"""When does BackRetrieval beat CORR? The paper's protocol over a grid of g x model family x pair x N.

    cd /path/to/repo && OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python experiments/study_bkr_vs_corr.py \\
        --data outputs/flickr8k/test --families configs/backretrieval-study-families.txt --out runs/bkr-study

For every image similarity g (``--image-models LABEL=SPEC ...``: the ImageNet CNN, 16 x 16 thumbnails, the
null random g), every model family (``--families``: ``[family]`` sections of model specs, plus
their union), every language pair and every N, it runs :func:`backretrieval.run_protocol`
(per seed: N source items and a disjoint set of N target items; BkR@K and CORR on them, XLR@K
on the source items' own translations) and reports Pearson and Spearman over the family's
models of BkR@K vs XLR@K and CORR vs XLR@K, mean +- std over seeds, and their paired
difference per seed. Sampling N per side from disjoint sets caps N at half the pair's items:
on a 600-group split N = 300 uses the whole split in every seed (the seeds then differ only in
how it is halved into sources and targets).

Each text model embeds the split once per run, and its embeddings are cached on disk under
``OUT/embeddings`` (keyed by spec, checkpoint file times and the texts), so reruns and
other g reuse them; CNN image features are cached under ``--cache-dir``. Writes
``study.json``, ``table.md`` (every row), ``summary.md`` (the largest N, one row per g x
family) and ``scatter_PAIR_nN.png`` (two panels per g x family: BkR@K and CORR against XLR@K,
model means over seeds).

``tfidf:char`` / ``tfidf:word`` are registered here as spec prefixes: TF-IDF of character
2-4-grams (within words) / words, fitted on the texts being embedded (the split's captions in
all its languages; transductive and unsupervised), 4096 features at most.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages, however installed

from backretrieval.embedders import embed_texts, is_positional, load_embedder, register_embedder  # noqa: E402
from backretrieval.errors import BackRetrievalError, cli_option_names, run_cli  # noqa: E402
from backretrieval.files import enough_for_k  # noqa: E402
from backretrieval.records import json_text  # noqa: E402
from globetrotter.argtypes import comma_separated, output_folder, positive_int  # noqa: E402
from globetrotter.evaluation.records import versions  # noqa: E402

DEFAULT_G = ("imagenet=efficientnet_lite0@package", "thumbnail16=thumbnail:16", "random=random:0")


class TfidfEmbedder:
    """TF-IDF vectors (char 2-4-grams within words, or words) fitted on the texts given to ``encode``."""

    def __init__(self, analyzer: str, max_features: int = 4096) -> None:
        if analyzer not in ("char", "word"):
            raise BackRetrievalError(f"embedder spec 'tfidf:{analyzer}': expected tfidf:char or tfidf:word")
        self.analyzer, self.max_features = analyzer, int(max_features)
        self.name = f"tfidf:{analyzer}:{self.max_features}"

    def encode(self, texts: list[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import TfidfVectorizer

        options = {"analyzer": "char_wb", "ngram_range": (2, 4)} if self.analyzer == "char" else {"analyzer": "word"}
        vec = TfidfVectorizer(sublinear_tf=True, max_features=self.max_features, dtype=np.float32, **options)
        return vec.fit_transform(list(texts)).toarray()


register_embedder("tfidf", lambda arg, **_: TfidfEmbedder(arg))


def read_families(path: Path) -> dict[str, dict[str, str]]:
    """``[family]`` sections of ``[NAME=]SPEC`` lines -> {family: {label: spec}}; '#' comments allowed."""
    from backretrieval.cli import parse_model_specs

    if not path.is_file():
        raise BackRetrievalError(f"{path}: --families file not found")
    families: dict[str, list[str]] = {}
    current = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            if not current or current in families:
                raise BackRetrievalError(f"{path}:{number}: empty or repeated family header {line!r}")
            families[current] = []
        elif current is None:
            raise BackRetrievalError(f"{path}:{number}: model spec {line!r} before any [family] header")
        else:
            families[current].append(line)
    out = {}
    for name, lines in families.items():
        try:
            out[name] = parse_model_specs(lines)
        except BackRetrievalError as err:
            raise BackRetrievalError(f"{path}: family [{name}]: {err}") from None
        if len(out[name]) < 3:
            raise BackRetrievalError(f"{path}: family [{name}] has {len(out[name])} models; correlations need 3+")
    if not out:
        raise BackRetrievalError(f"{path}: no [family] sections")
    return out


def union_family(families: dict[str, dict[str, str]]) -> dict[str, str]:
    """Every distinct model of the families, in first-seen order; a label with two specs is an error."""
    merged: dict[str, str] = {}
    for name, models in families.items():
        for label, spec in models.items():
            if merged.setdefault(label, spec) != spec:
                raise BackRetrievalError(f"model {label!r} is {merged[label]!r} in one family and {spec!r} in "
                                         f"[{name}]: give one label one spec")
    return merged


def parse_g(raw: str) -> tuple[str, str, str | None]:
    """``LABEL=MODEL[@WEIGHTS]`` -> (label, model, weights)."""
    label, eq, spec = raw.partition("=")
    if not eq or not label or not spec:
        raise BackRetrievalError(f"--image-models: expected LABEL=MODEL[@WEIGHTS] (e.g. "
                                 f"imagenet=efficientnet_lite0@package), got {raw!r}")
    model, at, weights = spec.partition("@")
    return label, model, (weights if at else None)


def _fingerprint(spec: str) -> list:
    """File times of the paths a spec names (a retrained checkpoint must not reuse stale embeddings)."""
    stamps = []
    for part in spec.split(":"):
        path = Path(part)
        if part and path.exists():
            files = [path / "model.safetensors"] if (path / "model.safetensors").is_file() else [path]
            stamps += [(str(f.resolve()), f.stat().st_mtime_ns) for f in files]
    return stamps


def embed_split(label: str, spec: str, texts: Sequence[str], cache_dir: Path, memo: dict,
                progress: bool) -> tuple[str, np.ndarray]:
    """(embedder name, one row per text) for one model spec, from the disk cache when present."""
    key = json.dumps({"spec": spec, "files": _fingerprint(spec),
                      "texts": hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()}, sort_keys=True)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    path = cache_dir / f"{safe}-{digest}.npy"
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        return json.loads(meta.read_text(encoding="utf-8"))["embedder"], np.load(path)
    embedder = load_embedder(spec, progress=progress, cache=memo)
    if is_positional(embedder):
        emb = embed_texts(embedder, list(texts))
    else:
        distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        emb = embed_texts(embedder, [str(t) for t in distinct])[inverse.reshape(-1)]
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.save(path, emb)
    meta.write_text(json_text({"label": label, "spec": spec, "embedder": embedder.name, "shape": emb.shape}),
                    encoding="utf-8")
    return embedder.name, emb


def _stat(values: Sequence[float]) -> dict:
    values = [float(v) for v in values]
    return {"mean": float(np.nanmean(values)), "std": float(np.nanstd(values)), "per_seed": values}


def summarise(res: dict, k: int) -> dict:
    """One table row's numbers from a :func:`run_protocol` result: correlations, paired differences, ranges."""
    corr = res["correlation"][f"@{k}"]
    row: dict[str, object] = {}
    for kind in ("pearson", "spearman"):
        bkr, base = corr[kind]["bkr"]["per_seed"], corr[kind]["corr"]["per_seed"]
        row[kind] = {"bkr": _stat(bkr), "corr": _stat(base),
                     "diff": _stat(np.subtract(bkr, base)), "bkr_wins": int(np.sum(np.greater(bkr, base)))}
    means = {m: r["mean"] for m, r in res["models"].items()}
    row["models"] = {m: {key: v[key] for key in (f"bkr@{k}", f"xlr@{k}", "corr")} for m, v in means.items()}
    xlr = [v[f"xlr@{k}"] for v in means.values()]
    row["xlr_range"] = [float(min(xlr)), float(max(xlr))]
    return row


def _pm(stat: dict) -> str:
    return f"{stat['mean']:.2f} ± {stat['std']:.2f}"


def full_table(rows: list[dict], k: int) -> str:
    lines = [f"| g | family | pair | N (seeds) | models | XLR@{k} range | Pearson BkR | Pearson CORR | "
             "Pearson BkR−CORR (BkR wins) | Spearman BkR | Spearman CORR | Spearman BkR−CORR (BkR wins) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = f"{r['n']}{'*' if r['whole_split'] else ''} ({len(r['seeds'])})"
        cells = [r["g"], r["family"], r["pair"], n, str(len(r["models"])),
                 f"{r['xlr_range'][0]:.2f}–{r['xlr_range'][1]:.2f}"]
        for kind in ("pearson", "spearman"):
            e = r[kind]
            cells += [_pm(e["bkr"]), _pm(e["corr"]), f"{e['diff']['mean']:+.2f} ({e['bkr_wins']}/{len(r['seeds'])})"]
        lines.append("| " + " | ".join(cells) + " |")
    whole = sorted({r["n"] for r in rows if r["whole_split"]})
    if whole:
        lines.append(f"\n\\* N = {', '.join(map(str, whole))}: the source and target samples together are the whole "
                     "pair; the seeds differ only in how it is halved.")
    return "\n".join(lines)


def summary_table(rows: list[dict], n: int, pairs: Sequence[str]) -> str:
    """One row per g x family at one N: Pearson and Spearman 'BkR / CORR' per pair."""
    head = ["g", "family"] + [f"{p} {kind} BkR / CORR" for kind in ("Pearson", "Spearman") for p in pairs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = list(dict.fromkeys((r["g"], r["family"]) for r in rows if r["n"] == n))
    by = {(r["g"], r["family"], r["pair"]): r for r in rows if r["n"] == n}
    for g, family in keys:
        cells = [g, family]
        for kind in ("pearson", "spearman"):
            for p in pairs:
                e = by[(g, family, p)][kind]
                cells.append(f"{_pm(e['bkr'])} / {_pm(e['corr'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scatter_grid(rows: list[dict], pair: str, n: int, k: int, path: Path) -> Path:
    """Per g (rows) x family: two panels side by side, model means of BkR@K and of CORR against XLR@K, each on its
    own y-axis (twin axes, each scaled to its own data, made the two look aligned); points labelled by model."""
    from backretrieval.plots import point_labels, pyplot, save_figure

    plt = pyplot()
    sel = [r for r in rows if r["pair"] == pair and r["n"] == n]
    gs, fams = list(dict.fromkeys(r["g"] for r in sel)), list(dict.fromkeys(r["family"] for r in sel))
    fig, axes = plt.subplots(len(gs), 2 * len(fams), figsize=(3.4 * 2 * len(fams), 3.1 * len(gs)), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")  # a g x family without a row stays blank
    for r in sel:
        row, col = gs.index(r["g"]), 2 * fams.index(r["family"])
        names = list(r["models"])
        xlr = [r["models"][m][f"xlr@{k}"] for m in names]
        for ax, key, label, colour, marker, which in (
                (axes[row, col], f"bkr@{k}", f"BkR@{k}", "tab:blue", "o", "bkr"),
                (axes[row, col + 1], "corr", "CORR", "tab:orange", "x", "corr")):
            ax.axis("on")
            ys = [r["models"][m][key] for m in names]
            ax.scatter(xlr, ys, s=20, color=colour, marker=marker)
            for x, y, text in point_labels(xlr, ys, names):
                ax.annotate(text, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
            ax.set_ylabel(label, fontsize=8)
            ax.set_xlabel(f"XLR@{k}", fontsize=8)
            ax.set_title(f"{r['g']} × {r['family']}: {label}\nPearson {r['pearson'][which]['mean']:.2f}, "
                         f"Spearman {r['spearman'][which]['mean']:.2f}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    fig.suptitle(f"{pair}, N={n}: BkR@{k} and CORR against XLR@{k}, each on its own axis; model means over seeds",
                 fontsize=10)
    return save_figure(fig, path, dpi=110)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``experiments/study_bkr_vs_corr.py``."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a parallel split folder (captions tied by 'group')")
    p.add_argument("--families", required=True, type=Path, help="[family] sections of model specs")
    p.add_argument("--union", default="all",
                   help="name of an added family holding every distinct model ('' for none) (default: %(default)s)")
    p.add_argument("--image-models", dest="g", nargs="+", default=list(DEFAULT_G), metavar="LABEL=MODEL[@WEIGHTS]",
                   help="the image similarities g, as backretrieval's --image-model (@ its --image-weights), "
                        f"labelled: a timm model, thumbnail:SIZE or random[:SEED] (default: {' '.join(DEFAULT_G)})")
    p.add_argument("--pairs", type=comma_separated(str), default=["en-de", "en-fr"], metavar="SRC-TGT,SRC-TGT",
                   help="language pairs, source-target, comma-separated (default: en-de,en-fr)")
    p.add_argument("--ns", type=comma_separated(positive_int), default=[150, 300], metavar="N,N",
                   help="items per side, comma-separated (2N <= the pair's items, checked before any model is "
                        "embedded; default: 150,300)")
    p.add_argument("--n-seeds", dest="seeds", type=positive_int, default=10, metavar="N",
                   help="seeds per N (default: 10)")
    p.add_argument("--ks", type=comma_separated(positive_int), default=[1, 5, 10], metavar="K,K",
                   help="K of BkR@K and XLR@K, comma-separated (default: 1,5,10)")
    p.add_argument("--report-k", type=positive_int, default=10,
                   help="the K of the tables and plots, one of --ks (default: %(default)s)")
    p.add_argument("--out", dest="out_dir", required=True, type=lambda text: Path(output_folder(text)), metavar="DIR",
                   help="folder of study.json, table.md, summary.md, the plots and the embeddings cache")
    p.add_argument("--cache-dir", type=Path, default=None, help="CNN feature cache (default: OUT/image-cache)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from backretrieval.data import aligned_pair, image_features, load_split
    from backretrieval.images import image_feature_extractor
    from backretrieval.protocol import run_protocol

    args = build_parser().parse_args(argv)

    started = time.time()
    k, progress = args.report_k, not args.no_progress
    if k not in args.ks:
        raise BackRetrievalError(f"--report-k {k} is not one of --ks {','.join(map(str, args.ks))}")
    families = read_families(args.families)
    if args.union:
        families[args.union] = union_family(families)
    models = union_family(families)
    gs = [parse_g(raw) for raw in args.g]
    cache_dir = args.cache_dir or args.out_dir / "image-cache"
    extractors = {label: image_feature_extractor(model, weights, cache_dir=cache_dir, progress=progress)
                  for label, model, weights in gs}  # bad g specs fail before anything is read
    pairs = []
    for raw in args.pairs:
        src, dash, tgt = raw.partition("-")
        if not dash or not src or not tgt or src == tgt:
            raise BackRetrievalError(f"--pairs: expected SRC-TGT with two different languages, got {raw!r}")
        pairs.append((src, tgt))
    data = load_split(args.data, sorted({lang for pair in pairs for lang in pair}))
    aligned = {}
    for src, tgt in pairs:  # before any image or model is embedded: N must fit the pair, and exceed the Ks
        aligned[src, tgt] = aligned_pair(data, src, tgt)
        items = len(aligned[src, tgt][2])
        for n in args.ns:
            if 2 * n > items:
                raise BackRetrievalError(f"--ns {n}: {src}-{tgt} has {items} parallel items; disjoint source "
                                         f"and target samples need 2N <= {items}")
            with cli_option_names():  # "lower --ks", this script's flag; not its whole run: the library's
                enough_for_k("protocol", n, args.ks, f"items per side (--ns {n})", "raise --ns")  # --image-model is none
    feats = {}
    for label, extractor in extractors.items():
        feats[label] = image_features(data, extractor)
        print(f"g {label}: {extractor.name}, {feats[label].shape[1]}-d", file=sys.stderr)
    memo: dict = {}
    embedded = {}
    for label, spec in models.items():
        embedded[label] = embed_split(label, spec, data.texts, args.out_dir / "embeddings", memo, progress)
        print(f"embedded {label} ({embedded[label][0]})", file=sys.stderr)

    rows = []
    for src, tgt in pairs:
        src_rows, tgt_rows, image_idx = aligned[src, tgt]
        for g_label, _, _ in gs:
            g_feats = feats[g_label][image_idx]
            for family, members in families.items():
                per_model = {m: (embedded[m][1][src_rows], embedded[m][1][tgt_rows]) for m in members}
                for n in args.ns:
                    res = run_protocol(per_model, g_feats, n=n, seeds=args.seeds, ks=args.ks, max_rank=max(args.ks),
                                       bootstrap=0, progress=False)
                    row = {"g": g_label, "family": family, "pair": f"{src}->{tgt}", "n": n,
                           "whole_split": 2 * n == len(image_idx), "seeds": res["seeds"], **summarise(res, k)}
                    rows.append(row)
                    print(f"{g_label:>12} {family:>13} {src}->{tgt} N={n}: Pearson BkR "
                          f"{_pm(row['pearson']['bkr'])} CORR {_pm(row['pearson']['corr'])}; Spearman BkR "
                          f"{_pm(row['spearman']['bkr'])} CORR {_pm(row['spearman']['corr'])}", file=sys.stderr)

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    pair_names = [f"{s}->{t}" for s, t in pairs]
    (out / "table.md").write_text(full_table(rows, k) + "\n", encoding="utf-8")
    summary = summary_table(rows, max(args.ns), pair_names)
    (out / "summary.md").write_text(summary + "\n", encoding="utf-8")
    for pair in pair_names:
        for n in args.ns:
            scatter_grid(rows, pair, n, k, out / f"scatter_{pair.replace('->', '-')}_n{n}.png")
    record = {"task": "backretrieval.study_bkr_vs_corr", "data": str(data.split_dir), "checksum": data.checksum,
              "g": {label: {"model": model, "weights": weights, "name": extractors[label].name,
                            "dim": int(feats[label].shape[1])} for label, model, weights in gs},
              "families": families, "embedders": {m: e[0] for m, e in embedded.items()},
              "pairs": pair_names, "ns": args.ns, "seeds": args.seeds, "ks": args.ks, "report_k": k,
              "seconds": round(time.time() - started, 1), "rows": rows, "inputs": vars(args), "versions": versions()}
    (out / "study.json").write_text(json_text(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary)
    print(f"wrote {out}/study.json, table.md, summary.md and scatter_*.png ({record['seconds']} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(run_cli(main))
