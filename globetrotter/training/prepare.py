"""Make sure a run has its data and tokenizer: generate the synthetic world, train the BPE."""
from __future__ import annotations

from pathlib import Path

from data_prep.shards import MANIFEST, read_manifest

from ..config import TrainConfig
from ..errors import UserError
from ..tokenizer import load_tokenizer, save_tokenizer, train_tokenizer


def tokenizer_path(cfg: TrainConfig) -> Path:
    return Path(cfg.data.tokenizer) if cfg.data.tokenizer else Path(cfg.data.root) / "tokenizer.json"


def ensure_data(cfg: TrainConfig, log=print) -> None:
    """Generate the synthetic world into ``data.root`` when it is absent and ``data.synth`` is set;
    train the tokenizer on the train split when ``tokenizer.json`` is absent; build the image-feature
    cache when ``data.features`` asks for one that is absent (refuse a mismatched one). Main process only."""
    root = Path(cfg.data.root)
    train_dir = root / cfg.data.train_split
    if not (train_dir / MANIFEST).is_file():
        if cfg.data.synth is None:
            raise UserError(f"data.root: {train_dir} has no {MANIFEST} (convert a dataset first, or set data.synth to generate the synthetic world)")
        from data_prep.synth import generate

        log(f"generating the synthetic world into {root} ...")
        generate(cfg.data.synth, root)
    read_manifest(train_dir)
    path = tokenizer_path(cfg)
    if not path.is_file():
        from data_prep.shards import read_captions

        log(f"training the shared BPE tokenizer (vocab {cfg.data.vocab_size}) on {train_dir} ...")
        captions = [m["caption"] for m in read_captions(train_dir)]
        save_tokenizer(train_tokenizer(captions, cfg.data.vocab_size), path)
    load_tokenizer(path)
    if cfg.data.features and cfg.loss.uses_images:
        from ..data.feature_cache import ensure_feature_cache

        ensure_feature_cache(cfg, cfg.data.train_split, log)
