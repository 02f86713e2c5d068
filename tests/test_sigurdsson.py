"""The Sigurdsson et al. (2020) baseline: per-language word tables, max-pooling, training, loading, every eval command."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import globetrotter
from globetrotter.config import load_train_config
from globetrotter.encoder import build_model
from globetrotter.errors import UserError
from globetrotter.evaluation import cli
from globetrotter.models import SigurdssonTextEncoder, max_pool_words
from globetrotter.training.objective import GlobetrotterObjective
from globetrotter.training.trainer import train

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "sigurdsson.yaml"
SMALL = ["model.d_model=16", "model.embed_dim=8", "model.image_backbone_args={}", "data.max_length=8",
         "model.languages=[en,de]", "model.dropout=0.0"]


def test_config_is_the_cross_modal_loss_only_without_cloze():
    cfg = load_train_config(CONFIG)
    assert cfg.model.text_encoder == "sigurdsson"
    assert (cfg.loss.text, cfg.loss.image, cfg.loss.cross, cfg.loss.cloze) == (0, 0, 1, 0)
    with pytest.raises(UserError, match="loss.cloze=0"):
        load_train_config(CONFIG, ["loss.cloze=1"])


def test_max_pool_takes_the_largest_word_value_ignoring_sentence_token_and_padding():
    states = torch.tensor([[[9.0, 9.0], [1.0, -3.0], [0.0, 2.0], [7.0, 7.0]],
                           [[5.0, 5.0], [-1.0, -2.0], [8.0, 8.0], [8.0, 8.0]]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    pooled = max_pool_words(states, mask)
    assert pooled[0].tolist() == [1.0, 2.0]  # position 0 (9) and padding (7) left out
    assert pooled[1].tolist() == [5.0, 5.0]  # nothing but the sentence token: keep it


def test_bag_of_words_ignores_word_order_and_repetition():
    torch.manual_seed(0)  # the random table alone decides whether a left-out word held a maximum: seed it
    enc = SigurdssonTextEncoder(20, 32, ["en", "de"], dropout=0.0)

    def pool(*rows: list[int]) -> torch.Tensor:
        ids = torch.tensor(rows)
        mask = torch.ones_like(ids)
        return max_pool_words(enc(ids, mask, torch.zeros(len(rows), dtype=torch.long)), mask)

    same = pool([2, 5, 6, 7, 7], [2, 7, 5, 6, 6], [2, 6, 7, 5, 5])
    assert torch.allclose(same[0], same[1]) and torch.allclose(same[0], same[2])
    assert not torch.allclose(pool([2, 5, 6, 6])[0], same[0])  # token 7 missing
    words = enc(torch.tensor([[2, 5, 6, 7]]), torch.ones(1, 4), torch.tensor([0]))[0, 1:]
    # equal up to float rounding: a batch of 3 and a batch of 1 may take different matmul kernels (MKL picks its
    # threads by the machine's load)
    torch.testing.assert_close(same[0], words.amax(0))


def _batch(lang: int, n: int = 4) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (n, 8), generator=g)
    ids[:, 0] = 2
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "view1": torch.randn(n, 3, 32, 32, generator=g),
            "view2": torch.randn(n, 3, 32, 32, generator=g), "truth": torch.arange(n), "lang_ids": torch.full((n,), lang)}


def test_each_language_has_its_own_table_and_adapting_layer():
    cfg = load_train_config(CONFIG, SMALL)
    model = build_model(cfg, vocab_size=40)
    b = _batch(lang=0)  # every caption in en
    sentence = lambda lang: model.sentence_states(b["input_ids"], b["attention_mask"], torch.full((4,), lang))[0]  # noqa: E731
    with torch.no_grad():
        en0, de0 = sentence(0), sentence(1)
    assert not torch.allclose(en0, de0)  # same token ids, two languages: two encodings
    table = model.text.word_embedding.weight.detach().clone()
    adapt = model.text.adapt_weight.detach().clone()
    out = model(b["input_ids"], b["attention_mask"], view1=b["view1"], view2=b["view2"], lang_ids=b["lang_ids"])
    loss, _ = GlobetrotterObjective(cfg.loss)(out, b, None)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    with torch.no_grad():
        en1, de1 = sentence(0), sentence(1)
    assert not torch.allclose(en0, en1)  # trained
    assert torch.equal(de0, de1)  # de's table and adapter never moved with en captions
    moved = (model.text.word_embedding.weight != table).any(1)
    assert moved[:40].any() and not moved[40:].any()
    assert not torch.equal(model.text.adapt_weight[0], adapt[0]) and torch.equal(model.text.adapt_weight[1], adapt[1])


def test_every_parameter_is_in_a_one_language_graph():
    """DDP runs without find_unused_parameters: a batch of one language still reaches every parameter."""
    cfg = load_train_config(CONFIG, SMALL)
    model = build_model(cfg, vocab_size=40)
    b = _batch(lang=1)
    out = model(b["input_ids"], b["attention_mask"], view1=b["view1"], view2=b["view2"], lang_ids=b["lang_ids"])
    GlobetrotterObjective(cfg.loss)(out, b, None)[0].backward()
    assert not [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]


def test_unknown_language_is_a_one_line_error():
    """Codes read from a split come as numpy strings: the line named them [np.str_('fr')]; now as typed."""
    model = build_model(load_train_config(CONFIG, SMALL), vocab_size=40)
    with pytest.raises(UserError, match=r"^language\(s\) fr not among this model's training languages en,de \(.*; "
                                        r"evaluate those: --languages\)$"):  # what an eval command without it hits
        model.language_ids(np.array(["en", "fr"]))


def test_the_per_language_tables_need_their_languages_and_each_captions_language():
    with pytest.raises(ValueError, match=r"needs its training languages \(model.languages\)"):
        SigurdssonTextEncoder(40, 8, [])
    encoder = SigurdssonTextEncoder(40, 8, ["en", "de"])
    with pytest.raises(ValueError, match=r"needs each caption's language \(lang_ids\)"):
        encoder(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3), None)


def test_a_language_list_of_another_length_than_the_texts_is_refused(sigurdsson_run):
    enc = globetrotter.load(sigurdsson_run)
    with pytest.raises(ValueError, match="^langs has 1 entries for 2 texts$"):
        enc.encode_text(["red a square", "赤い 四角"], langs=["en"])


TINY = ["data.synth=null", "data.vocab_size=300", "data.image_size=32", "data.workers=0", "data.shuffle_buffer=50",
        "model.d_model=32", "model.embed_dim=16", "batch_size=16", "log_every=2", "val.every=2",
        "val.max_per_lang=8", "val.test_groups=12", "optim.warmup_steps=2", "steps=4", "checkpoint_every=4",
        "model.image_backbone_args={}"]


@pytest.fixture(scope="module")
def sigurdsson_run(tiny_world, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sigurdsson")
    cfg = load_train_config(CONFIG, [f"data.root={tiny_world}", f"data.tokenizer={out / 'tokenizer.json'}",
                                     f"output_dir={out}", *TINY])
    result = train(cfg)
    assert "val/bkr@10" in result["metrics"] and "test/sentence_translation" in result["metrics"]
    return cfg.run_dir


def test_run_saves_its_languages_and_loads_the_same_weights(sigurdsson_run):
    enc = globetrotter.load(sigurdsson_run, prefer_best=False)
    assert enc.cfg.model.languages == ["el", "en", "ja", "ru"]  # the tiny world's train manifest, sorted
    saved = load_file(str(enc.checkpoint / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in enc.model.state_dict().items())
    assert enc.model.text.word_embedding.weight.shape == (4 * enc.tokenizer.get_vocab_size(), 32)
    text = enc.encode_text(["red a square", "red a square"], head="cross", langs=["en", "ru"])
    assert text.shape == (2, 16) and np.allclose(np.linalg.norm(text, axis=1), 1, atol=1e-5)
    assert not np.allclose(text[0], text[1])  # one string, two languages' tables
    assert np.allclose(enc.encode_text(["red a square"], head="cross", langs="en"), text[:1], atol=1e-6)
    states, mask = enc.encode_tokens(["red a square", "赤い 四角"], langs=["en", "ja"])
    assert states.shape[0] == 2 and states.shape[2] == 32 and mask.shape == states.shape[:2]  # words, not pooled
    words, emb = enc.token_embeddings("el")
    assert len(words) == emb.shape[0] and emb.shape[1] == 32
    assert not np.allclose(emb, enc.token_embeddings("en")[1])
    assert enc.encode_words(["red", "square"], langs="en").shape == (2, 32)
    with pytest.raises(UserError, match="one word table per language") as err:
        enc.encode_text(["red a square"])
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("command", [
    ["sentence", "--n-groups", "12"],
    ["sentence", "--n-groups", "12", "--head", "cross"],
    ["word", "--method", "nn"],
    ["word", "--method", "nn", "--embeddings", "contextual"],
    ["retrieval", "--ks", "1,5"],
    ["cluster", "--n-groups", "12", "--k", "4"],
], ids=["sentence", "sentence-cross", "word", "word-contextual", "retrieval", "cluster"])
def test_eval_commands_run_on_a_sigurdsson_run(sigurdsson_run, tiny_world, tmp_path, command):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command, "--model", str(sigurdsson_run), "--name", "sig", "--split", str(tiny_world / "test"),
                  "--out", str(out)])
    assert exit_info.value.code == 0
    rec = json.loads((out / f"{command[0]}-sig.json").read_text(encoding="utf-8"))
    assert rec["languages"] == ["el", "en", "ja", "ru"] and rec["metrics"]
    if command[0] == "sentence":  # the figure by hand: each caption through its own language's table
        from data_prep.shards import read_captions
        from globetrotter.evaluation.sentence import parallel_set, sentence_translation

        enc = globetrotter.load(sigurdsson_run)
        ps = parallel_set(read_captions(tiny_world / "test"), n_groups=12, seed=0)
        head = command[command.index("--head") + 1] if "--head" in command else "text"
        emb = enc.encode_text(ps.captions, head=head, langs=list(ps.langs))
        expected = sentence_translation(emb, ps.langs, ps.groups, tie_seed=0)["accuracy"]
        assert rec["metrics"]["sentence_translation"] == pytest.approx(expected)


def test_select_chooses_among_the_rankings_a_sigurdsson_run_has(sigurdsson_run, tmp_path):
    """One word table per language: no MaxSim across languages, so the default grid keeps each head's cosine and
    CSLS, and the record is written."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["select", "--model", str(sigurdsson_run), "--name", "sig", "--csls-k", "3", "--out", str(out)])
    assert exit_info.value.code == 0
    rec = json.loads((out / "select-sig.json").read_text(encoding="utf-8"))
    labels = [c["label"] for c in rec["details"]["candidates"]]
    assert len(labels) == 4 and not any("maxsim" in label for label in labels), labels
    assert {c["ranking"]["head"] for c in rec["details"]["candidates"]} == {"text", "cross"}


def test_translate_needs_the_query_language(sigurdsson_run, tiny_world, tmp_path, capsys):
    base = ["translate", "red a square", "--model", str(sigurdsson_run), "--to", "ja", "--corpus",
            str(tiny_world / "test"), "--out", str(tmp_path), "--k", "2"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*base, "--from", "en"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("red a square")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(base)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "one word table per language" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:  # late interaction needs one shared token table
        cli.main(["sentence", "--model", str(sigurdsson_run), "--split", str(tiny_world / "test"), "--out", str(tmp_path),
                  "--n-groups", "12", "--maxsim", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "one per language" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate-word", "red", "--model", str(sigurdsson_run), "--to", "ru", "--from", "en",
                  "--corpus", str(tiny_world / "test"), "--out", str(tmp_path), "--k", "2"])
    assert exit_info.value.code == 0


@pytest.mark.filterwarnings("ignore::globetrotter.texts_cut.TextsCut")  # long captions, cut as in training
def test_the_trainers_test_score_reads_the_languages_the_model_has_tables_for(tiny_world):
    """A test split with a held-out language (no word table): the trainer's test hook scores the model on the others
    (it used to stop a Sigurdsson run on a world with a held-out language at its first validation)."""
    from data_prep.shards import read_captions
    from globetrotter.embeddings import Encoder
    from globetrotter.evaluation import sentence_translation_score
    from globetrotter.tokenizer import train_tokenizer

    cfg = load_train_config(CONFIG, [*SMALL, "model.languages=[en,ja]"])
    tokenizer = train_tokenizer([m["caption"] for m in read_captions(tiny_world / "train")], 300)
    encoder = Encoder(build_model(cfg, tokenizer.get_vocab_size()), tokenizer, cfg)
    result = sentence_translation_score(encoder, tiny_world / "test", n_groups=12)
    assert result["languages"] == ["en", "ja"] and result["n_groups"] == 12


@pytest.mark.parametrize("extra, message", [
    (["model.languages=[xx]"], r"^model.languages=\[xx\] lacks el,en,ja,ru; names xx, which training never reads: .*"
                               r"the run trains on el,en,ja,ru \(the languages of \S+train\)"),
    (["model.languages=[en,ru,el,ja,xx]"], r"^model.languages=\[en,ru,el,ja,xx\] names xx, which training never reads"),
    (["data.train_languages=[en,ru]", "model.languages=[en,ru,el]"],
     r"names el, which training never reads: .* trains on en,ru \(data.train_languages\)"),
    (["data.train_languages=[en]"], r"^val.every=2: BackRetrieval on \S+val \(el,en,ja,ru\) needs two languages the "
                                    r"model has a word table for, .* trains one for en only"),
])
def test_a_language_list_the_run_cannot_train_is_refused_before_anything_is_built(tiny_world, tmp_path, extra,
                                                                                   message):
    """model.languages naming a language absent from the training data was accepted: its word table, trained by no
    caption, encoded that language with noise. One training language (data.train_languages=[en]) with validation
    on trained for val.every steps, then stopped at the first validation (no table for the val split's others).
    Both are one-line errors now, before the tokenizer is trained or the run folder made."""
    cfg = load_train_config(CONFIG, [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}",
                                     f"output_dir={tmp_path}", *TINY, *extra])
    with pytest.raises(UserError, match=message):
        train(cfg)
    assert not cfg.run_dir.exists() and not (tmp_path / "tokenizer.json").exists()


def test_a_language_list_naming_the_training_languages_in_any_order_is_kept_and_an_empty_one_filled(tiny_world):
    """model.languages names the word tables in their order (a table's row is its index there): a list holding
    exactly the training languages is kept as given; an empty one takes them, sorted."""
    from globetrotter.training.prepare import with_text_languages

    given = load_train_config(CONFIG, [f"data.root={tiny_world}", *TINY, "model.languages=[ja,en,ru,el]"])
    assert with_text_languages(given) is given
    empty = load_train_config(CONFIG, [f"data.root={tiny_world}", *TINY])
    assert with_text_languages(empty).model.languages == ["el", "en", "ja", "ru"]


def test_validation_scores_the_val_languages_the_model_has_tables_for_and_says_so(tiny_world, tmp_path, capsys):
    """Two of the val split's four languages trained (data.train_languages): validation used to stop the run at its
    first step (no word table for el, ja); it scores en and ru, and one line says why the others are left out."""
    cfg = load_train_config(CONFIG, [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}",
                                     f"output_dir={tmp_path}", *TINY, "steps=2", "val.test_groups=0",
                                     "data.train_languages=[en,ru]"])
    result = train(cfg)
    assert set(result["metrics"]) == {"val/bkr@1", "val/bkr@5", "val/bkr@10"}
    assert ("val: BackRetrieval on en,ru only: the Sigurdsson baseline has no word table for el,ja (not among its "
            "training languages)") in capsys.readouterr().out


def test_each_text_is_read_with_its_own_language_in_any_batch(sigurdsson_run):
    """Texts of several lengths and languages, in batches sorted by length (encode_text) or in order (encode_tokens):
    each row is the one its text gives alone in its language (the languages follow their texts)."""
    enc = globetrotter.load(sigurdsson_run, prefer_best=False)
    texts = ["red a square next to a circle", "red", "red a square", "square", "a circle"]
    langs = ["en", "ru", "ja", "el", "en"]
    text = enc.encode_text(texts, batch_size=2, head="cross", langs=langs)
    states, mask = enc.encode_tokens(texts, batch_size=2, langs=langs)
    for i, (t, lang) in enumerate(zip(texts, langs)):
        np.testing.assert_allclose(text[i], enc.encode_text([t], head="cross", langs=lang)[0], atol=1e-5)
        alone, alone_mask = enc.encode_tokens([t], langs=lang)
        n = alone_mask.shape[1]
        np.testing.assert_allclose(states[i, :n], alone[0], atol=1e-5)


def test_word_vectors_are_each_tokens_row_through_its_languages_adapting_layer():
    """Encoder.token_embeddings (word translation of the baseline) reads word_vectors: row t of language l is
    ReLU(W_l E_l[t] + b_l), the vector a caption holding t gets at t's position (W_l is not symmetric: W_l^T differs)."""
    enc = SigurdssonTextEncoder(vocab_size=7, d_model=5, languages=["en", "de"], dropout=0.0).eval()
    torch.nn.init.normal_(enc.adapt_bias)
    for lang in (0, 1):
        w, b = enc.adapt_weight[lang].detach(), enc.adapt_bias[lang].detach()
        rows = enc.word_embedding.weight.detach()[lang * 7: (lang + 1) * 7]
        by_hand = torch.stack([torch.relu(w @ rows[t] + b) for t in range(7)])
        torch.testing.assert_close(enc.word_vectors(lang), by_hand)
        with torch.no_grad():
            states = enc(torch.arange(7)[None], torch.ones(1, 7, dtype=torch.long), torch.tensor([lang]))[0]
        torch.testing.assert_close(states, by_hand)
