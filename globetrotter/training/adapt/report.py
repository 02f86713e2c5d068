"""The adaptation's before/after figures: sentence translation of the new language with the old ones, and of
the old languages among themselves, on the test split."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from data_prep.shards import read_captions, read_manifest

from ...config import TrainConfig
from ...embeddings import Encoder
from ...evaluation import parallel_set, sentence_translation
from .split import new_language


def translation(cfg: TrainConfig, old_languages: Sequence[str], encoder: Encoder) -> dict | None:
    """Sentence translation (paper 5.2, as ``eval.py sentence``: ``val.test_groups`` groups, ``seed``) on the test split:
    the new language with the old ones (the mean of the new→old and old→new cells of the matrix over all
    languages) and the old languages among themselves. None without a test split holding the new language, or
    when the run does not ask for test figures (``val.test_groups`` = 0: ``eval.py sentence`` scores it after)."""
    lang = new_language(cfg)
    test = Path(cfg.data.root) / cfg.data.test_split if cfg.data.test_split and cfg.val.test_groups > 0 else None
    present = read_manifest(test).get("languages", {}) if test and (test / "manifest.json").is_file() else {}
    old = [code for code in old_languages if code in present]
    if test is None or lang not in present or not old:
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
