"""The stages of ``bench/bench_scale.py``, each timed in a fresh process (:func:`run_stage`), and the generated data
they read (the scene pool, the embeddings, each image's language)."""
from __future__ import annotations

import multiprocessing as mp
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from globetrotter.errors import cli_warning_lines

if TYPE_CHECKING:  # the stages import what they time in their own process
    from tokenizers import Tokenizer

    from globetrotter.config import TrainConfig
    from globetrotter.data.feature_batches import FeatureBatches
    from globetrotter.evaluation.val_set import BackRetrievalSet
    from globetrotter.models.globetrotter import GlobetrotterModel

NAME = "generated-512"
TRAIN_STEPS = 200  # the documented figures' steps (--train-steps)
THREADS = 2  # the documented figures' intra-op threads for train and validation (--threads)
EXACT_CHECK_MAX = 100_000  # the validation's estimate is checked against the exact full-set BkR up to this size
NEIGHBOURS_K = 10  # the neighbours stage's k, as data.neighbours_k in the Flickr8k recipe


def _overrides(work: Path, dim: int, threads: int = THREADS) -> list[str]:
    """The quickstart config, trained from the imported embeddings of ``work``."""
    return [f"data.root={work}", "data.train_split=train", "data.val_split=train", f"data.features={work / 'cache'}",
            "model.image_backbone=imported", f"model.image_pretrained={NAME}",
            "model.freeze_image_backbone=true",
            "loss.image=0", "data.batching=random", "data.synth=null", f"threads={threads}"]


def _config(work: Path, dim: int, extra: Sequence[str] = (), threads: int = THREADS) -> TrainConfig:
    from dataclasses import replace

    from globetrotter.config import load_train_config

    cfg = load_train_config("configs/quickstart.yaml", _overrides(work, dim, threads) + list(extra))
    return replace(cfg, model=replace(cfg.model, image_backbone_args={"num_features": dim}))  # not the ResNet's args


def make_pool(size: int, dim: int, seed: int = 0) -> dict:
    """``size`` scenes of the built-in world: a caption per language, a tiny picture and an embedding centre each."""
    from PIL import Image

    from data_prep.shards import encode_image
    from data_prep.synth.config import DEFAULT_LANGUAGES
    from data_prep.synth.grammars import get_grammar
    from data_prep.synth.scene import sample_meaning, sample_scene

    rng = np.random.default_rng(seed)
    kinds: dict[tuple, np.ndarray] = {}
    captions, pictures, centres = [], [], []
    for i in range(size):
        r = np.random.default_rng([seed, i])
        scene = sample_scene(r, 64, 4, 0.0)
        meaning = sample_meaning(scene, r)
        captions.append([get_grammar(lang).caption(meaning, r).text for lang in DEFAULT_LANGUAGES])
        picture = np.empty((4, 4, 3), dtype=np.uint8)
        picture[:] = scene.background.colour1
        picture[1:3, 1:3] = scene.objects[0].rgb
        pictures.append(encode_image(Image.fromarray(picture), "png"))
        centre = np.zeros(dim, dtype=np.float32)
        for kind in scene.kinds:
            key = (kind.shape, kind.colour)
            if key not in kinds:
                kinds[key] = rng.normal(size=dim).astype(np.float32)
            centre += kinds[key]
        centres.append(centre)
    return {"langs": list(DEFAULT_LANGUAGES), "captions": captions, "pictures": pictures, "centres": np.stack(centres)}


def prepare_embeddings(work: Path, n: int, pool: dict, seed: int = 0) -> None:
    """The N images' embeddings (float16 ``.npy``) and id list, as an external pipeline would hand them over."""
    rng = np.random.default_rng([seed, n])
    out = np.lib.format.open_memmap(work / "embeddings.npy", mode="w+", dtype=np.float16,
                                    shape=(n, pool["centres"].shape[1]))
    for s in range(0, n, 65536):
        idx = np.arange(s, min(n, s + 65536))
        noise = rng.standard_normal(size=(len(idx), out.shape[1]), dtype=np.float32)
        out[idx] = pool["centres"][idx % len(pool["centres"])] + 0.8 * noise
    out.flush()
    (work / "ids.txt").write_text("".join(f"img{i:08d}\n" for i in range(n)))


def languages_of(n: int, count: int) -> np.ndarray:
    """The language index (of ``count``) of each of the N images of the corpus of size ``n``: seeded by ``n``."""
    return np.random.default_rng([1, n]).integers(0, count, n)


def stage_shards(work: Path, n: int, pool: dict) -> dict:
    from data_prep.shard_writer import ShardWriter

    langs = pool["langs"]
    lang_of = languages_of(n, len(langs))
    start = time.perf_counter()
    with ShardWriter(work / "train", split="train", source="bench_scale", image_format="png", maxcount=10_000) as w:
        for i in range(n):
            j = i % len(pool["captions"])
            w.write(f"img{i:08d}", pool["pictures"][j], pool["captions"][j][lang_of[i]], langs[lang_of[i]],
                    image_id=f"img{i:08d}")
    return {"seconds": time.perf_counter() - start}


def stage_tokenizer(work: Path, n: int, dim: int) -> dict:
    from globetrotter.tokenizer import train_tokenizer_on_split
    from globetrotter.training.tokenizer_file import tokenizer_path

    cfg = _config(work, dim)
    start = time.perf_counter()
    train_tokenizer_on_split(work / "train", tokenizer_path(cfg), cfg.data.vocab_size)
    return {"seconds": time.perf_counter() - start}


def stage_import(work: Path, n: int) -> dict:
    from globetrotter.data.feature_import import import_embeddings

    start = time.perf_counter()
    import_embeddings(work / "train", work / "embeddings.npy", work / "cache", NAME, ids=work / "ids.txt",
                      force=True, progress=False)
    return {"seconds": time.perf_counter() - start}


def stage_neighbours(work: Path, n: int) -> dict:
    from data_prep.shards import iter_metas
    from globetrotter.data.feature_cache import load_feature_cache
    from globetrotter.data.neighbours import EXACT_MAX, other_language_neighbours

    start = time.perf_counter()
    cache = load_feature_cache(work / "cache")
    langs = np.array([m["lang"] for m in iter_metas(work / "train")])  # one caption per image, in cache order
    other_language_neighbours(cache.features[:, 0], langs, NEIGHBOURS_K)  # float16 rows, as the batch stream
    return {"seconds": time.perf_counter() - start, "method": "exact" if n <= EXACT_MAX else "ivf"}


def _model_and_batches(work: Path,
                       dim: int) -> tuple[TrainConfig, Tokenizer, GlobetrotterModel, FeatureBatches, float]:
    import torch

    from globetrotter.data.feature_batches import FeatureBatches
    from globetrotter.data.feature_cache import load_feature_cache
    from globetrotter.encoder import build_model
    from globetrotter.tokenizer import load_tokenizer
    from globetrotter.training.tokenizer_file import tokenizer_path

    cfg = _config(work, dim)
    tok = load_tokenizer(tokenizer_path(cfg))
    torch.manual_seed(0)
    model = build_model(cfg, tok.get_vocab_size(), tok)
    start = time.perf_counter()
    batches = FeatureBatches(work / "train", load_feature_cache(work / "cache"), tok, cfg.batch_size,
                             cfg.data.max_length, seed=0)
    return cfg, tok, model, batches, time.perf_counter() - start


def stage_batches(work: Path, n: int, dim: int) -> dict:
    *_, setup_s = _model_and_batches(work, dim)
    return {"seconds": setup_s}


def stage_train(work: Path, n: int, dim: int, threads: int = THREADS, steps: int = TRAIN_STEPS) -> dict:
    import torch

    from globetrotter.losses import mask_tokens
    from globetrotter.tokenizer import special_ids
    from globetrotter.training.objective import GlobetrotterObjective

    torch.set_num_threads(threads)
    cfg, tok, model, batches, _ = _model_and_batches(work, dim)
    specials = special_ids(tok)
    objective = GlobetrotterObjective(cfg.loss)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    model.train()

    def step(i: int) -> None:
        b = batches.batch(i)
        masked, labels = mask_tokens(b["input_ids"], b["attention_mask"], specials["mask"], tok.get_vocab_size(),
                                     list(specials.values()), p=cfg.loss.mask_prob)
        out = model(b["input_ids"], b["attention_mask"], masked, b.get("view1"), b.get("view2"),
                    cloze_targets=labels != -100)
        loss, _ = objective(out, b, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(5):  # warm-up, not timed
        step(i)
    start = time.perf_counter()
    for i in range(5, 5 + steps):
        step(i)
    elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "samples_per_s": steps * cfg.batch_size / elapsed, "steps": steps,
            "threads": torch.get_num_threads()}


def stage_validation(work: Path, n: int, dim: int, threads: int = THREADS) -> dict:
    """The trainer's first validation on every caption of the N-caption split (``val.max_per_lang: null``), load
    included; up to :data:`EXACT_CHECK_MAX` captions also the estimate against the exact full-set BkR."""
    import torch

    from globetrotter.embeddings import Encoder
    from globetrotter.encoder import build_model
    from globetrotter.tokenizer import load_tokenizer
    from globetrotter.training.tokenizer_file import tokenizer_path
    from globetrotter.training.validation import Validator

    torch.set_num_threads(threads)
    cfg = _config(work, dim, ["val.max_per_lang=null", "val.image_features=features"], threads)
    tok = load_tokenizer(tokenizer_path(cfg))
    encoder = Encoder(build_model(cfg, tok.get_vocab_size(), tok), tok, cfg)
    start = time.perf_counter()
    validator = Validator(cfg)
    load_s = time.perf_counter() - start
    metrics = validator(encoder)
    out = {"seconds": time.perf_counter() - start, "load_s": load_s, "captions": len(validator.val.texts),
           "queries_per_pair": validator.val.queries_per_pair or 0, "bkr@10": metrics["val/bkr@10"],
           "threads": torch.get_num_threads()}
    if n <= EXACT_CHECK_MAX:
        out.update(estimate_against_exact(work, validator.val))
    return out


def estimate_against_exact(work: Path, val: BackRetrievalSet) -> dict:
    """The validation's BkR@10 estimate against the exact BkR@10 of every caption, on embeddings that carry signal:
    g the generated image embeddings, the text a fixed random projection of them plus noise (an untrained model's
    BkR is at chance, where any estimate is close)."""
    from backretrieval import evaluate_pairs

    source = np.load(work / "embeddings.npy", mmap_mode="r")
    rows = np.array([int(str(i)[3:]) for i in val.image_ids])  # img00000042 -> row 42
    images = np.asarray(source[rows], dtype=np.float32)
    rng = np.random.default_rng(1)
    text = (images + rng.standard_normal(images.shape, dtype=np.float32)) @ rng.normal(size=(images.shape[1], 64))
    val.image_feats = images.astype(np.float16) if val.queries_per_pair else images
    start = time.perf_counter()
    estimate = val.evaluate(text.astype(np.float32))[0]["val/bkr@10"]
    estimate_s = time.perf_counter() - start
    start = time.perf_counter()
    exact = evaluate_pairs(text, val.langs, images, val.image_ids, ks=(10,), seed=val.seed, max_rank=10,
                           with_corr=False)["mean"]["bkr@10"]
    return {"signal_bkr@10_estimate": estimate, "signal_bkr@10_exact": exact, "estimate_s": estimate_s,
            "exact_s": time.perf_counter() - start, "delta_bkr@10": estimate - exact}


def stage_index(work: Path, n: int, width: int = 128) -> dict:
    """Sentence vectors of the text model's output width (the paper's D = 128): the generated embeddings through a
    fixed random projection (their neighbourhoods kept), then the index over them and 10,000 queries."""
    from globetrotter.evaluation.translate import build_index

    source = np.load(work / "embeddings.npy", mmap_mode="r")
    proj = np.random.default_rng(0).normal(size=(source.shape[1], width)).astype(np.float32)
    emb = np.empty((n, width), dtype=np.float32)
    for s in range(0, n, 65536):
        emb[s:s + 65536] = np.asarray(source[s:s + 65536], dtype=np.float32) @ proj
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    start = time.perf_counter()
    index = build_index(emb)
    build_s = time.perf_counter() - start
    queries = emb[np.random.default_rng(0).choice(n, size=min(n, 10_000), replace=False)]
    start = time.perf_counter()
    index.search(queries, 10)
    query_s = time.perf_counter() - start
    return {"seconds": build_s + query_s, "build_s": build_s, "queries_per_s": len(queries) / query_s}


def stage_baseline(work: Path, n: int, dim: int) -> dict:
    """The model's own process: the interpreter, torch and the quickstart model built (no data)."""
    from globetrotter.encoder import build_model
    from globetrotter.tokenizer import load_tokenizer
    from globetrotter.training.tokenizer_file import tokenizer_path

    cfg = _config(work, dim)
    tok = load_tokenizer(tokenizer_path(cfg))
    build_model(cfg, tok.get_vocab_size(), tok)
    return {"seconds": 0.0}


def _child(name: str, args: tuple) -> dict:
    peak = {"anon": 0.0}
    done = threading.Event()

    def sample() -> None:  # the kernel keeps no peak of anonymous memory: sample it
        while not done.wait(0.05):
            peak["anon"] = max(peak["anon"], _status_mb("RssAnon"))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    with cli_warning_lines():  # outside main's run_cli: texts cut, say, one warning line as the commands print it
        result = globals()[f"stage_{name}"](*args)  # its "seconds": the stage's work, after the imports
    done.set()
    watcher.join()
    return {**result, "rss_mb": max(peak["anon"], _status_mb("RssAnon")), "rss_total_mb": _status_mb("VmHWM")}


def _status_mb(field: str) -> float:
    """A memory figure of this process from ``/proc/self/status`` in MiB (0 without /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_stage(name: str, *args: object) -> dict:
    """``stage_<name>(*args)`` in a fresh process: its seconds, peak RSS (MiB) and extra figures."""
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_child, name, args).result()


def made(work: Path, stage: str) -> bool:
    """Whether ``stage`` has left its output in ``work``."""
    if stage == "tokenizer":
        from globetrotter.training.tokenizer_file import tokenizer_path

        return tokenizer_path(_config(work, 1)).is_file()
    return (work / {"shards": "train/manifest.json", "import": "cache/cache.json"}[stage]).is_file()
