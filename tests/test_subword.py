"""Subword-informed token vectors (model.token_ngrams): a token's row plus its character n-grams' rows."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from globetrotter.config import load_train_config
from globetrotter.errors import UserError
from globetrotter.models.subword import SubwordTable, extend_ngram_matrix, ngram_matrix, token_strings
from globetrotter.models.text import TextEncoder
from globetrotter.training.token_init import image_pivot_embeddings, init_token_embeddings, token_bags
from test_feature_cache import _cfg, weights  # noqa: F401 (the small frozen backbone's weights fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAD, SENT = 0, 1


def test_token_strings_mark_word_starts_and_empty_the_specials():
    assert token_strings(["<pad>", "<s>", "\u0120dog", "dog", "s"], specials=[0, 1]) == ["", "", "<dog", "dog", "s"]


def test_ngram_matrix_rows_are_normalised_and_shared_ngrams_share_columns():
    strings = ["", "<dog", "<dogs", "<cat"]
    c = ngram_matrix(strings, (2, 3)).toarray()
    assert c.shape[0] == 4 and not c[0].any()
    assert np.allclose(np.linalg.norm(c[1:], axis=1), 1.0)
    assert c[1] @ c[2] > 0.5, "dog and dogs share most n-grams"
    assert c[1] @ c[3] == 0, "dog and cat share none"


def test_subword_table_adds_each_tokens_weighted_ngram_rows():
    c = ngram_matrix(["", "<ab", "<abc", "xy"], (1, 2))
    sub = SubwordTable(c, d_model=5)
    torch.manual_seed(0)
    torch.nn.init.normal_(sub.ngram_embedding.weight)
    rows = torch.randn(4, 5, requires_grad=True)
    out = sub(rows)
    expected = rows.detach().numpy() + c.toarray() @ sub.ngram_embedding.weight.detach().numpy()
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert rows.grad is not None and sub.ngram_embedding.weight.grad.abs().sum() > 0
    sub.scale_tokens(torch.tensor([1.0, 2.0, 3.0, 0.5]))
    np.testing.assert_allclose(sub.matrix().toarray(), c.toarray() * np.array([1, 2, 3, 0.5])[:, None], rtol=1e-6)
    with pytest.raises(ValueError, match="rows"):
        sub(torch.zeros(3, 5))


def test_encoder_reads_and_the_cloze_decoder_ties_to_the_composed_table():
    vocab = ["<pad>", "<s>", "\u0120dog", "\u0120dogs", "\u0120cat", "s"]
    c = ngram_matrix(token_strings(vocab, [PAD, SENT]), (2, 3))
    enc = TextEncoder(len(vocab), d_model=8, layers=1, heads=2, ffn=16, dropout=0.0, max_length=6, ngrams=c).eval()
    torch.nn.init.normal_(enc.subword.ngram_embedding.weight)
    ids = torch.tensor([[SENT, 2, 3, PAD]])
    table = enc.token_table()
    torch.testing.assert_close(enc.embed(ids), table[ids])
    assert not torch.allclose(table[2], enc.token_embedding.weight[2]), "the n-gram rows are added"
    plain = TextEncoder(len(vocab), d_model=8, layers=1, heads=2, ffn=16, dropout=0.0, max_length=6).eval()
    assert plain.subword is None and plain.token_table() is plain.token_embedding.weight


def test_config_checks_the_ngram_range_and_the_encoder():
    assert load_train_config(None, ["model.token_ngrams=[2,4]"]).model.token_ngrams == [2, 4]
    for bad in ("[4,2]", "[0,3]", "[2]", "[2,3,4]"):
        with pytest.raises(UserError, match="token_ngrams"):
            load_train_config(None, [f"model.token_ngrams={bad}"])
    with pytest.raises(UserError, match="token_ngrams"):
        load_train_config(None, ["model.token_ngrams=[2,4]", "model.text_encoder=sigurdsson", "loss.cloze=0"])


def inflected_captions(seed: int = 0):
    """Two visual classes; class 0 is named ``dog`` (token 2) in 60 captions and ``dogs`` (token 3) in 2, class 1
    ``cat`` (token 4) in 60; a fourth form ``doggy`` (token 5) is in no caption. Images: class prototype + noise."""
    rng = np.random.default_rng(seed)
    protos = rng.normal(size=(2, 16))
    ids, images = [], []
    for token, cls, n in ((2, 0, 60), (3, 0, 2), (4, 1, 60)):
        for _ in range(n):
            ids.append([SENT, token, 6 + int(rng.integers(3)), PAD])
            images.append(protos[cls] + 0.7 * rng.normal(size=16))
    ids = np.array(ids)
    vocab = ["<pad>", "<s>", "\u0120dog", "\u0120dogs", "\u0120cat", "\u0120doggy", "\u0120a", "\u0120the", "\u0120one"]
    return ids, (ids != PAD).astype(np.int64), np.array(images, np.float32), vocab


def _cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_ngram_rows_give_rare_and_unseen_forms_the_vector_of_their_frequent_form():
    ids, mask, images, vocab = inflected_captions()
    c = ngram_matrix(token_strings(vocab, [PAD, SENT]), (2, 4))
    rows, seen, grams, *_ = image_pivot_embeddings(ids, mask, images, len(vocab), 4, 1.0, [PAD, SENT], ngrams=c)
    _, idf = token_bags(ids, mask, len(vocab), [PAD, SENT])
    composed = rows + idf[:, None] * (c @ grams)
    assert not seen[5], "doggy is in no caption"
    assert _cos(composed[5], composed[2]) > 0.5 > _cos(composed[5], composed[4]), "unseen doggy lands near dog"
    assert _cos(composed[3], composed[2]) > _cos(composed[3], composed[4])
    # the same ridge without n-grams: dogs' row comes from its 2 captions alone and doggy has none
    plain, _, none, *_ = image_pivot_embeddings(ids, mask, images, len(vocab), 4, 1.0, [PAD, SENT])
    assert none is None and not plain[5].any()
    assert _cos(composed[3], composed[2]) > _cos(plain[3], plain[2])


def test_init_sets_the_composed_vectors_to_the_closed_form_at_the_asked_spread():
    ids, mask, images, vocab = inflected_captions()
    c = ngram_matrix(token_strings(vocab, [PAD, SENT]), (2, 4))
    enc = TextEncoder(len(vocab), d_model=8, layers=1, heads=2, ffn=16, dropout=0.0, max_length=6, ngrams=c)
    n = init_token_embeddings(enc.token_embedding, torch.tensor(ids), torch.tensor(mask), images, 1.0, [PAD, SENT],
                              log=lambda s: None, std=1.0, subword=enc.subword)["rows"]
    assert n == 6  # dog, dogs, cat and the three fillers
    rows, seen, grams, *_ = image_pivot_embeddings(ids, mask, images, len(vocab), 8, 1.0, [PAD, SENT], ngrams=c)
    _, idf = token_bags(ids, mask, len(vocab), [PAD, SENT])
    expected = rows + idf[:, None] * (c @ grams)  # [V, k]
    table = enc.token_table().detach().numpy()
    k = expected.shape[1]
    assert table[seen].std() == pytest.approx(1.0, rel=0.2)
    for t in np.flatnonzero(seen):
        assert _cos(table[t, :k], expected[t]) > 0.999
    assert _cos(table[5, :k], expected[5]) > 0.99, "the unseen form's n-gram part follows the closed form too"


def test_a_run_with_token_ngrams_saves_loads_and_resumes(tiny_world, tmp_path, weights):
    import globetrotter
    from globetrotter.training.trainer import train

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    cfg = _cfg(world, tmp_path, weights, "steps=2", "checkpoint_every=1", "model.token_init=image_pivot",
               "model.token_ngrams=[2,3]")
    train(cfg)
    enc = globetrotter.load(cfg.run_dir, prefer_best=False)  # step 2
    assert enc.model.text.subword is not None
    table, vocabulary = enc.token_table()
    # resumed from step 1, the run ends where the uninterrupted one did: the idf-scaled n-gram matrix is restored
    # with the weights, not rebuilt unscaled from the tokenizer
    shutil.rmtree(cfg.run_dir / "checkpoints" / "step-00000002")
    train(cfg, resume=str(cfg.run_dir / "checkpoints" / "step-00000001"))
    np.testing.assert_array_equal(globetrotter.load(cfg.run_dir, prefer_best=False).token_table()[0], table)
    ngram_part = table - enc.model.text.token_embedding.weight.detach().numpy()
    assert np.abs(ngram_part[vocabulary]).sum() > 0, "the loaded table holds the trained n-gram rows"
    emb = enc.encode_text(["a red square", "красный квадрат"], head="cross")
    assert np.isfinite(emb).all()


def test_extend_ngram_matrix_keeps_old_rows_and_columns_and_maps_shared_ngrams():
    old = ["", "<dog", "<dogs", "<cat"]
    c = ngram_matrix(old, (2, 3))
    scaled = (c.multiply(np.array([[0.0], [2.0], [3.0], [1.0]], np.float32))).tocsr().astype(np.float32)
    grown = extend_ngram_matrix(scaled, old, ["<doggy", "αβγ"], (2, 3))
    n, g = scaled.shape
    assert grown.shape[0] == 6 and grown.shape[1] > g
    np.testing.assert_array_equal(grown[:n, :g].toarray(), scaled.toarray())
    assert grown[:n, g:].nnz == 0
    doggy, greek = grown[n].toarray()[0], grown[n + 1].toarray()[0]
    assert doggy[:g] @ scaled[1].toarray()[0] > 0, "doggy shares dog's old n-gram columns"
    assert not greek[:g].any() and greek[g:].any(), "a new script gets new columns only"
    mean_norm = np.mean([np.linalg.norm(r) for r in scaled.toarray() if r.any()])
    assert np.linalg.norm(doggy) == pytest.approx(mean_norm, rel=1e-5)
    with pytest.raises(ValueError, match="not the matrix of these strings"):
        extend_ngram_matrix(scaled, ["", "<dog", "<dogs", "<cattle"], ["<doggy"], (2, 3))


def test_the_models_cloze_logits_decode_with_the_composed_table():
    """With model.token_ngrams the cloze decoder is tied to the composed table E + C G (not the token rows alone):
    logits = transform(states) (E + C G)^T + bias, with C read from the model's n-gram matrix."""
    from globetrotter.encoder import build_model
    from globetrotter.tokenizer import train_tokenizer

    tok = train_tokenizer(["a red dog runs", "ein roter Hund", "un chien rouge court"] * 4, vocab_size=300)
    cfg = load_train_config(None, ["model.d_model=16", "model.layers=1", "model.heads=2", "model.ffn=32",
                                   "model.embed_dim=8", "model.image_backbone_args={}", "data.max_length=8",
                                   "model.token_ngrams=[2,3]", "loss.image=0", "loss.cross=0",
                                   "loss.alpha_source=supervised"])
    model = build_model(cfg, tok.get_vocab_size(), tok).eval()
    torch.nn.init.normal_(model.text.subword.ngram_embedding.weight)
    ids = torch.tensor([tok.encode("a red dog").ids[:5]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(ids, mask, masked_ids=ids)["cloze_logits"][0]
        c = torch.from_numpy(model.text.subword.matrix().toarray())
        table = model.text.token_embedding.weight + c @ model.text.subword.ngram_embedding.weight
        hidden = model.cloze_head.transform(model.text(ids, mask))[0]
    torch.testing.assert_close(logits, hidden @ table.T + model.cloze_head.bias, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(table, model.text.token_embedding.weight), "the n-gram rows count"


def test_a_vocabulary_of_empty_strings_has_no_ngrams_and_the_table_is_the_token_rows():
    """Only special tokens (empty strings): no n-gram columns, grown rows of empty strings stay empty, and the
    composed table is the token rows themselves."""
    c = ngram_matrix(["", ""], (2, 3))
    assert c.shape == (2, 0)
    grown = extend_ngram_matrix(c, ["", ""], ["", ""], (2, 3))
    assert grown.shape == (4, 0)
    table = SubwordTable(grown, d_model=3)
    rows = torch.randn(4, 3)
    assert torch.equal(table(rows), rows)


def test_adding_only_empty_strings_appends_zero_rows_and_keeps_the_old_matrix():
    strings = ["", "<dog", "<cat"]
    c = ngram_matrix(strings, (2, 3))
    grown = extend_ngram_matrix(c, strings, [""], (2, 3))
    assert grown.shape == (4, c.shape[1])
    assert np.array_equal(grown[:3].toarray(), c.toarray()) and not grown[3].toarray().any()
