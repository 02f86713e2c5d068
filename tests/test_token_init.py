"""Image-pivot token embeddings (model.token_init=image_pivot): closed-form rows that align languages through images."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from globetrotter.errors import UserError
from globetrotter.tokenizer import load_tokenizer
from globetrotter.training.token_init import (RECORD, choose_alpha, image_pivot_embeddings, init_from_config,
                                            init_token_embeddings, token_bags)
from test_feature_cache import _cfg, weights  # noqa: F401 (the small frozen backbone's weights fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLASSES, DIM, PAD, SENT = 6, 32, 0, 1


def two_language_captions(n_per_class: int = 40, seed: int = 0):
    """Captions of 6 visual classes in two languages with disjoint tokens (no token or caption is shared between
    them, no caption is a translation of another), and each caption's image feature: its class prototype + noise."""
    rng = np.random.default_rng(seed)
    prototypes = rng.normal(size=(CLASSES, DIM))
    filler = {0: [20, 21, 22], 1: [40, 41, 42]}  # each language's function words, in every caption
    ids, images = [], []
    for lang, offset in ((0, 2), (1, 30)):
        for c in range(CLASSES):
            for _ in range(n_per_class):
                words = [offset + c, *rng.choice(filler[lang], 2)]  # the class's noun, then two function words
                ids.append([SENT, *words, PAD])
                images.append(prototypes[c] + 0.5 * rng.normal(size=DIM))
    ids = np.array(ids)
    return ids, (ids != PAD).astype(np.int64), np.array(images, dtype=np.float32)


def test_bags_are_normalised_idf_weighted_and_skip_special_tokens():
    ids = np.array([[SENT, 5, 5, 6, PAD], [SENT, 6, 7, PAD, PAD]])
    bags, idf = token_bags(ids, (ids != PAD).astype(int), 10, skip=[PAD, SENT])
    dense = bags.toarray()
    assert np.allclose(np.linalg.norm(dense, axis=1), 1.0)
    assert dense[:, [PAD, SENT]].sum() == 0
    assert idf[5] > idf[6], "a token in fewer captions weighs more"
    assert dense[0, 5] / dense[0, 6] == pytest.approx(np.log(3) * idf[5] / (np.log(2) * idf[6]), rel=1e-5)


def test_rows_of_two_languages_nouns_for_one_class_align_through_the_images():
    ids, mask, images = two_language_captions()
    rows, seen, *_ = image_pivot_embeddings(ids, mask, images, vocab_size=50, dim=8, alpha=1.0, skip=[PAD, SENT])
    assert rows.shape == (50, 8)
    assert seen[[2, 30, 20, 41]].all() and not seen[[PAD, SENT, 10, 49]].any()
    nouns = rows[np.r_[2:2 + CLASSES, 30:30 + CLASSES]]
    nouns /= np.linalg.norm(nouns, axis=1, keepdims=True)
    cross = nouns[:CLASSES] @ nouns[CLASSES:].T  # [language-0 noun, language-1 noun]
    assert (cross.argmax(1) == np.arange(CLASSES)).all(), "each noun's nearest in the other language names its class"
    # a shuffled pairing of captions and images carries no such signal
    shuffled = images[np.random.default_rng(1).permutation(len(images))]
    rows, *_ = image_pivot_embeddings(ids, mask, shuffled, vocab_size=50, dim=8, alpha=1.0, skip=[PAD, SENT])
    nouns = rows[np.r_[2:2 + CLASSES, 30:30 + CLASSES]]
    nouns /= np.linalg.norm(nouns, axis=1, keepdims=True)
    assert (nouns[:CLASSES] @ nouns[CLASSES:].T).argmax(1).tolist() != list(range(CLASSES))


def test_a_captions_rows_summed_as_its_bag_weighs_them_point_where_the_ridge_predicts_its_image():
    """Row v is token v's ridge weight times its idf: a caption's rows, each weighed by log(1 + its count) (its bag
    without the idf and the norm), sum to a multiple of the ridge's prediction of its image, less the intercept.
    Fitted here on the bags and the images (unit rows less their mean); with every principal direction kept (dim =
    feature width) the rows are those predictions rotated, so the two agree in every cosine."""
    from sklearn.linear_model import Ridge

    ids, mask, images = two_language_captions(n_per_class=10)
    rows, *_ = image_pivot_embeddings(ids, mask, images, vocab_size=50, dim=DIM, alpha=1.0, skip=[PAD, SENT])
    bags, _ = token_bags(ids, mask, 50, skip=[PAD, SENT])
    unit = images / np.linalg.norm(images, axis=1, keepdims=True)
    ridge = Ridge(alpha=1.0).fit(bags, unit - unit.mean(0))
    predicted = bags @ ridge.coef_.T
    counts = np.zeros((len(ids), 50))
    for i, caption in enumerate(ids):
        for token in caption[mask[i].astype(bool)]:
            if token not in (PAD, SENT):
                counts[i, token] += 1
    summed = np.log1p(counts) @ rows

    def cosines(x):
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return x @ x.T

    np.testing.assert_allclose(cosines(summed), cosines(predicted), atol=2e-3)


def test_init_sets_seen_rows_at_the_table_spread_and_keeps_the_others():
    ids, mask, images = two_language_captions()
    torch.manual_seed(0)
    table = torch.nn.Embedding(50, 16)
    before = table.weight.detach().clone()
    n = init_token_embeddings(table, torch.tensor(ids), torch.tensor(mask), images, 1.0, [PAD, SENT],
                              log=lambda s: None)["rows"]
    changed = (table.weight.detach() != before).any(1)
    assert n == int(changed.sum()) == 2 * CLASSES + 6
    assert not changed[[PAD, SENT, 10, 49]].any()
    assert table.weight[changed].std().item() == pytest.approx(before.std().item(), rel=0.2)
    rows = table.weight.detach()[changed].clone()
    init_token_embeddings(table, torch.tensor(ids), torch.tensor(mask), images, 1.0, [PAD, SENT], log=lambda s: None,
                          std=0.5)  # model.token_init_std: the same rows at the asked spread
    assert table.weight[changed].std().item() == pytest.approx(0.5, rel=1e-3)
    torch.testing.assert_close(table.weight.detach()[changed] * (rows.std() / 0.5), rows)
    with pytest.raises(ValueError, match="captions but"):
        image_pivot_embeddings(ids, mask, images[:-1], 50, 8)


def test_cross_validation_takes_a_stronger_ridge_for_noisier_images_and_keeps_images_in_one_fold():
    ids, mask, images = two_language_captions(n_per_class=20)
    groups = np.arange(len(ids)) // 2  # two captions per image, as a caption-level split would leak
    alphas = [0.01, 0.1, 1.0, 10.0, 100.0]
    noise = np.random.default_rng(3).normal(size=images.shape).astype(np.float32)
    chosen = {}
    for scale in (0.0, 20.0):
        noisy = images + scale * noise[groups * 2]  # the noise is the image's: both of its captions see it
        pivot = image_pivot_embeddings(ids, mask, noisy, 50, 8, alphas, [PAD, SENT], groups=groups, folds=4)
        assert set(pivot.cv_errors) == set(alphas) and pivot.alpha == min(pivot.cv_errors, key=pivot.cv_errors.get)
        fixed = image_pivot_embeddings(ids, mask, noisy, 50, 8, pivot.alpha, [PAD, SENT])
        np.testing.assert_array_equal(pivot.rows, fixed.rows)  # then the same closed form as with that alpha given
        assert fixed.cv_errors is None
        chosen[scale] = pivot.alpha
    assert chosen[20.0] > chosen[0.0], chosen
    # the errors are GroupKFold's: no image is on both sides of a fold
    from scipy import sparse
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GroupKFold

    x = sparse.random(40, 30, density=0.3, random_state=0, format="csr")
    y = np.random.default_rng(0).normal(size=(40, 3))
    g = np.arange(40) // 4
    best, errors = choose_alpha(x, y, g, [0.5, 5.0], folds=5)
    by_hand = {a: np.mean([((Ridge(alpha=a).fit(x[tr], y[tr]).predict(x[te]) - y[te]) ** 2).mean()
                           for tr, te in GroupKFold(5).split(x, y, g)]) for a in (0.5, 5.0)}
    assert errors == pytest.approx(by_hand) and best == min(by_hand, key=by_hand.get)
    with pytest.raises(ValueError, match="image id"):
        image_pivot_embeddings(ids, mask, images, 50, 8, alphas, [PAD, SENT])
    with pytest.raises(UserError, match="at least 5 images"):
        choose_alpha(x[:8], y[:8], g[:8], [1.0, 2.0], folds=5)


def test_a_run_starts_from_image_pivot_rows_and_the_key_needs_cached_features(tiny_world, tmp_path, weights):
    import globetrotter
    from globetrotter.training.trainer import train

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    cfg = _cfg(world, tmp_path, weights, "steps=1", "checkpoint_every=1", "model.token_init=image_pivot",
               "optim.lr=1e-9", "optim.warmup_steps=1")
    train(cfg)
    enc = globetrotter.load(cfg.run_dir)
    table = enc.model.text.token_embedding.weight.detach()
    # the same closed form on a fresh model gives the run's rows of caption tokens (one step at lr 1e-9 moved nothing)
    fresh = globetrotter.encoder.build_model(cfg, table.shape[0])
    before = fresh.text.token_embedding.weight.detach().clone()
    n = init_from_config(fresh, cfg, load_tokenizer(cfg.data.tokenizer), log=lambda s: None)["rows"]
    set_rows = (fresh.text.token_embedding.weight.detach() != before).any(1)
    assert n == int(set_rows.sum()) > 20
    k = 16  # the small backbone's width < d_model: the first 16 columns come from the ridge map
    run_rows, expected = table[set_rows, :k], fresh.text.token_embedding.weight.detach()[set_rows, :k]
    # equal up to the scale, which follows each table's random spread
    assert torch.nn.functional.cosine_similarity(run_rows, expected, dim=1).min() > 0.999
    with pytest.raises(UserError, match="token_init=image_pivot"):
        _cfg(world, tmp_path, weights, "data.features=null", "model.token_init=image_pivot")
    with pytest.raises(UserError, match="token_init_alpha"):
        _cfg(world, tmp_path, weights, "model.token_init=image_pivot", "model.token_init_alpha=0")
    for bad in ("[]", "[1,1]", "[1,-2]"):
        with pytest.raises(UserError, match="token_init_alpha"):
            _cfg(world, tmp_path, weights, "model.token_init=image_pivot", f"model.token_init_alpha={bad}")
    with pytest.raises(UserError, match="token_init_folds"):
        _cfg(world, tmp_path, weights, "model.token_init=image_pivot", "model.token_init_alpha=[1,3]",
             "model.token_init_folds=1")
    # candidates: the run cross-validates them, starts from the chosen one and records it
    cv = _cfg(world, tmp_path, weights, "steps=1", "checkpoint_every=1", "model.token_init=image_pivot",
              "model.token_init_alpha=[0.3,3,30]", "model.token_init_folds=3", "run_name=cv")
    result = train(cv)
    record = json.loads((cv.run_dir / RECORD).read_text())
    assert result["token_init"] == record and record["alpha"] in (0.3, 3.0, 30.0) and len(record["cv_errors"]) == 3
    assert record["alpha"] == float(min(record["cv_errors"], key=record["cv_errors"].get))
    with pytest.raises(UserError, match="token_init_std"):
        _cfg(world, tmp_path, weights, "model.token_init=image_pivot", "model.token_init_std=-1")
