"""BackRetrieval over a non-parallel split: per language pair (the trainer's selection) and across languages (the
ranking choice of `eval.py select`, whose queries retrieve among every other language's captions at once)."""
from __future__ import annotations

import numpy as np

from globetrotter.evaluation.val_set import BackRetrievalSet


def test_across_languages_is_per_pair_for_two_languages_and_sees_offsets_between_targets(tiny_world):
    bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=None, seed=0, image_features="pixels", ks=(1, 5))
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(len(bkr.texts), len(bkr.texts)))

    def given(src, tgt):
        return scores[np.ix_(src, tgt)]

    two = BackRetrievalSet(tiny_world / "val", max_per_lang=None, seed=0, image_features="pixels", ks=(1, 5))
    two.keep_languages(sorted(set(two.langs.tolist()))[:2])
    sub = {i: j for j, i in enumerate(np.flatnonzero(np.isin(bkr.langs, two.langs)))}
    two_scores = scores[np.ix_(list(sub), list(sub))]
    per_pair, _ = two.evaluate(text_scores=lambda s, t: two_scores[np.ix_(s, t)])
    across, hits = two.evaluate_across_languages(lambda s, t: two_scores[np.ix_(s, t)])
    assert across == per_pair and len(hits["val/bkr@1"]) == len(two.texts)
    # a score offset for one target language changes nothing within a pair, but wins every query across languages
    boosted_lang = sorted(set(bkr.langs.tolist()))[0]
    boost = np.where(bkr.langs == boosted_lang, 100.0, 0.0)[None, :]
    plain, _ = bkr.evaluate(text_scores=given)
    shifted, _ = bkr.evaluate(text_scores=lambda s, t: (scores + boost)[np.ix_(s, t)])
    assert shifted == plain
    before, _ = bkr.evaluate_across_languages(given)
    after, _ = bkr.evaluate_across_languages(lambda s, t: (scores + boost)[np.ix_(s, t)])
    assert after != before


def test_sampled_set_decodes_only_the_images_it_keeps(tiny_world, monkeypatch):
    import data_prep.shards as shards
    from data_prep.shards import iter_samples

    decoded = []
    real = shards.decode_image
    monkeypatch.setattr(shards, "decode_image", lambda data, fmt: decoded.append(fmt) or real(data, fmt))
    bkr = BackRetrievalSet(tiny_world / "val", max_per_lang=3, seed=0, image_features="pixels")
    everything = list(iter_samples(tiny_world / "val", decode_images=False))
    langs = sorted({s.lang for s in everything})
    assert len(decoded) == len(bkr.texts) == 3 * len(langs) < len(everything)
    # the kept captions are the split's own, with their own images' ids, three per language
    truth = {(s.caption, s.lang, s.image_id) for s in everything}
    assert set(zip(bkr.texts, bkr.langs.tolist(), bkr.image_ids.tolist())) <= truth
    assert sorted(bkr.langs.tolist()) == sorted(langs * 3)
