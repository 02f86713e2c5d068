"""Triplet and TripletXL (BackRetrieval paper 3.2, eqs. 1-2), JSONL documents, the `triplet` command."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from globetrotter.errors import UserError
from globetrotter.zeroshot.cli import main
from globetrotter.zeroshot.triplet import (
    Document,
    SiameseAdapter,
    TripletConfig,
    cross_lingual_knn_loss,
    random_other_index,
    read_documents,
    train_siamese,
    triplet_loss,
    triplet_xl_loss,
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_documents(docs, path):
    """Write documents as JSONL, the format read_documents reads (image paths as given)."""
    with path.open("w", encoding="utf-8") as fh:
        for d in docs:
            obj = {"id": d.id, "lang": d.lang, "title": d.title, "body": d.body}
            if d.image is not None:
                obj["image"] = d.image
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return path


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_triplet_loss_hand_computed():
    body = t([1.0, 0.0], [1.0, 0.0])
    title = t([1.0, 0.0], [0.0, 1.0])
    # row 0: d(b, own title) = 0, d(b, title 1) = 1 -> max(0, 0 - 1 + 0.1) = 0
    # row 1: d(b, own title) = 1, d(b, title 0) = 0 -> max(0, 1 - 0 + 0.1) = 1.1
    got = triplet_loss(body, title, torch.tensor([1, 0]), margin=0.1)
    torch.testing.assert_close(got, t(0.0, 1.1).squeeze(0))


def test_xl_loss_hand_computed():
    # languages 0, 0, 1, 1; cosine distances between bodies (rows) and titles (columns)
    body = t([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0])
    title = t([1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0])
    langs = torch.tensor([0, 0, 1, 1])
    # K = 1. row 0: own language (title 1) 0, language 1 (titles 2, 3: 1, 2) -> 1; |1 - 0| = 1
    # row 1: own (title 0) 1, other (title 2) 0 -> 1. row 2: own (title 3) 2, other 0 -> 2.
    # row 3: own (title 2) 1, other (titles 0, 1) 2 -> 1.
    torch.testing.assert_close(cross_lingual_knn_loss(body, title, langs, k=1), t(1.0, 1.0, 2.0, 1.0).squeeze(0))
    # K = 2. row 0: own language has only title 1 (0); language 1 mean(1, 2) = 1.5 -> 1.5
    assert cross_lingual_knn_loss(body, title, langs, k=2)[0].item() == pytest.approx(1.5)
    # TripletXL = Triplet + beta * XL
    neg = torch.tensor([1, 0, 3, 2])
    torch.testing.assert_close(
        triplet_xl_loss(body, title, langs, neg, margin=0.1, beta=0.5, k=1),
        triplet_loss(body, title, neg, 0.1) + 0.5 * t(1.0, 1.0, 2.0, 1.0).squeeze(0),
    )


def test_xl_loss_averages_the_own_language_over_the_titles_it_has_and_a_lone_document_scores_zero():
    # languages 0, 0, 1, 1, 1; K = 3. Row 0's own language has one other title (title 1, distance 1): its mean is 1,
    # not 1 / 3 or 1 / 2; language 1's three titles all point along x (distance 0): L_XL = |0 - 1| = 1
    body = t([1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0])
    title = t([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0])
    assert cross_lingual_knn_loss(body, title, torch.tensor([0, 0, 1, 1, 1]), k=3)[0].item() == pytest.approx(1.0)
    # row 2 alone in language 1 has no m_{l_r}: loss 0, however far language 0's titles are
    alone = cross_lingual_knn_loss(body[:3], t([0.0, 1.0], [0.0, 1.0], [1.0, 0.0]), torch.tensor([0, 0, 1]), k=2)
    assert alone[2].item() == 0.0 and alone[0].item() == pytest.approx(1.0)


def test_xl_loss_of_a_single_language_batch_is_zero():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=gen)
    assert cross_lingual_knn_loss(x, x.flip(0), torch.zeros(6, dtype=torch.long)).abs().max().item() == 0.0


def test_random_negatives_are_never_the_row_itself():
    idx = random_other_index(5, torch.Generator().manual_seed(0))
    assert (idx != torch.arange(5)).all() and idx.min() >= 0 and idx.max() < 5


def test_siamese_adapter_shares_weights_and_concatenates():
    model = SiameseAdapter(8, hidden_dim=6, out_dim=4)
    x = torch.randn(3, 8)
    x_t, x_b = model(x, x)
    torch.testing.assert_close(x_t, x_b)  # one tower for both
    assert (x_t >= 0).all()
    # a document is concat(x_t, x_b) of its own title and body, also when represented in batches of 2
    title, body = torch.randn(5, 8), torch.randn(5, 8)
    represented = model.represent(title, body, batch_size=2)
    with torch.no_grad():
        torch.testing.assert_close(represented, torch.cat([model.tower(title), model.tower(body)], dim=1))
    assert model.training, "represent puts the model back in training mode"


def _topic_embeddings(n_docs: int, n_langs: int, dim: int = 16, shift: float = 1.5, seed: int = 0, noise: float = 0.3):
    """Synthetic frozen embeddings: title and body share a topic vector; each language adds
    its own offset (the language bias that TripletXL is meant to remove), each text its own ``noise``."""
    gen = torch.Generator().manual_seed(seed)
    topics = torch.randn(n_docs, dim, generator=gen)
    langs = torch.arange(n_docs) % n_langs
    offsets = shift * torch.randn(n_langs, dim, generator=gen)
    title = topics + offsets[langs] + noise * torch.randn(n_docs, dim, generator=gen)
    body = topics + offsets[langs] + noise * torch.randn(n_docs, dim, generator=gen)
    return title, body, langs


def test_training_lowers_both_losses_and_keeps_the_best_epoch():
    title, body, langs = _topic_embeddings(240, 3, noise=1.5)  # noisy enough that the margin is not met at once
    cfg = TripletConfig(hidden_dim=32, out_dim=16, epochs=8, batch_size=32, beta=0.01, val_fraction=0.2)
    model, history = train_siamese(title, body, langs, cfg, progress=False)
    assert history.train[-1] < 0.75 * history.train[0] and len(history.val) == 8
    assert min(history.val) < 0.9 * history.val[0]  # the held-out loss falls too, then rises again (it overfits)
    assert history.val[history.best_epoch] == min(history.val) and history.best_epoch < 7
    with torch.no_grad():
        x_t, x_b = model(title, body)
        own = torch.nn.functional.cosine_similarity(x_t, x_b).mean()
        other = torch.nn.functional.cosine_similarity(x_t, x_b.roll(1, 0)).mean()
    assert own > other  # a body is closer to its own title than to another document's


@pytest.mark.parametrize("val_losses", [[0.5, 0.2, 0.4, 0.3], [0.5, 0.2, 0.2, 0.3]])  # a tie keeps the first
def test_the_returned_model_has_the_best_epochs_weights(monkeypatch, val_losses):
    import globetrotter.zeroshot.triplet as triplet

    title, body, langs = _topic_embeddings(120, 3)
    real, scripted, states = triplet._epoch_loss, iter(val_losses), []

    def epoch_loss(model, title, body, langs, config, gen, optimizer=None):
        if optimizer is not None:
            return real(model, title, body, langs, config, gen, optimizer)
        states.append({k: v.clone() for k, v in model.state_dict().items()})  # the weights validated this epoch
        return next(scripted)

    monkeypatch.setattr(triplet, "_epoch_loss", epoch_loss)
    cfg = TripletConfig(hidden_dim=16, out_dim=8, epochs=4, batch_size=32, val_fraction=0.2)
    model, history = train_siamese(title, body, langs, cfg, progress=False)
    kept = model.state_dict()
    assert history.best_epoch == 1 and all(torch.equal(kept[k], states[1][k]) for k in kept)
    assert not all(torch.equal(kept[k], states[-1][k]) for k in kept)


def test_read_documents_and_errors(tmp_path):
    docs = [Document("en", "Chicken soup", "Boil the chicken.", "img/a.jpg", "d1"), Document("es", "Sopa", "Hervir.")]
    path = write_documents(docs, tmp_path / "docs.jsonl")
    got = read_documents(path)
    assert [(d.lang, d.title, d.id) for d in got] == [("en", "Chicken soup", "d1"), ("es", "Sopa", "")]
    assert got[0].image == str((tmp_path / "img" / "a.jpg").resolve()) and got[1].image is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"lang": "en", "title": "t", "body": "b"}\n{"lang": "en", "title": ""}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.jsonl:2: key 'title' must be a non-empty string"):
        read_documents(bad)
    bad.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.jsonl:1: malformed JSON"):
        read_documents(bad)


TOPICS = {  # a tiny multilingual recipe world: (title, body) per language
    "soup": {"en": ("Chicken soup", "Boil chicken with carrots and onion."),
             "es": ("Sopa de pollo", "Hervir el pollo con zanahorias y cebolla."),
             "ru": ("Куриный суп", "Сварите курицу с морковью и луком.")},
    "cake": {"en": ("Chocolate cake", "Mix flour, cocoa, sugar and eggs, then bake."),
             "es": ("Pastel de chocolate", "Mezclar harina, cacao, azúcar y huevos, y hornear."),
             "ru": ("Шоколадный торт", "Смешайте муку, какао, сахар и яйца, затем выпекайте.")},
    "salad": {"en": ("Green salad", "Toss lettuce, cucumber and olive oil."),
              "es": ("Ensalada verde", "Mezclar lechuga, pepino y aceite de oliva."),
              "ru": ("Зелёный салат", "Смешайте салат, огурец и оливковое масло.")},
    "bread": {"en": ("Homemade bread", "Knead flour, water, yeast and salt; bake."),
              "es": ("Pan casero", "Amasar harina, agua, levadura y sal; hornear."),
              "ru": ("Домашний хлеб", "Замесите муку, воду, дрожжи и соль; выпекайте.")},
}


@pytest.fixture
def recipe_docs(tmp_path):
    """A small multilingual document fixture: 4 topics x 3 languages x 8 variants.

    Frozen text embeddings (``npy:`` spec with a ``.texts.json`` sidecar): topic vector +
    language offset + noise. Documents with images (the evaluation half) carry ``.npy``
    image features: topic vector (another space) + noise.
    """
    rng = np.random.default_rng(0)
    dim, image_dim = 24, 12
    topic_text = {k: rng.normal(size=dim) for k in TOPICS}
    topic_image = {k: rng.normal(size=image_dim) for k in TOPICS}
    lang_offset = {lang: 1.0 * rng.normal(size=dim) for lang in ("en", "es", "ru")}
    texts, vectors, docs = [], [], []
    (tmp_path / "img").mkdir()
    for topic, by_lang in TOPICS.items():
        for lang, (title, body) in by_lang.items():
            for v in range(8):
                t_txt, b_txt = f"{title} #{v}", f"{body} ({v})"
                for text in (t_txt, b_txt):
                    texts.append(text)
                    vectors.append(topic_text[topic] + lang_offset[lang] + 0.5 * rng.normal(size=dim))
                image = None
                if v >= 5:  # 3 of 8 documents per topic and language have an image
                    image = f"img/{topic}-{lang}-{v}.npy"
                    np.save(tmp_path / image, (topic_image[topic] + 0.3 * rng.normal(size=image_dim)).astype(np.float32))
                docs.append(Document(lang, t_txt, b_txt, image, f"{topic}-{lang}-{v}"))
    np.save(tmp_path / "emb.npy", np.asarray(vectors, dtype=np.float32))
    (tmp_path / "emb.npy.texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    return write_documents(docs, tmp_path / "recipes.jsonl"), f"npy:{tmp_path / 'emb.npy'}"


def test_triplet_command_end_to_end(recipe_docs, tmp_path, capsys):
    docs, spec = recipe_docs
    out = tmp_path / "run"
    code = main(["triplet", "--docs", str(docs), "--text-encoder", spec, "--out", str(out), "--epochs", "20",
                 "--batch-size", "16", "--hidden-dim", "16", "--out-dim", "8", "--ks", "1,5",
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--annotate", "en->ru,ru->es"])
    assert code == 0
    record = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert record["n_train"] == 4 * 3 * 5 and record["n_eval"] == 4 * 3 * 3
    assert set(record["models"]) == {"frozen", "triplet", "tripletxl"}
    for res in record["models"].values():
        assert set(res["pairs"]) == {f"{a}->{b}" for a in ("en", "es", "ru") for b in ("en", "es", "ru") if a != b}
    # the frozen embeddings carry the topic, so BackRetrieval@5 is far above chance (5 of 12 images per side)
    assert record["models"]["frozen"]["mean"]["bkr@5"] > 0.8
    # the adapters, trained on the documents without images, keep enough of the topic on the evaluation ones to
    # stand well above chance (5 of 12: 0.42; measured 0.68 and 0.64; 0.43 when they represent other documents)
    for name in ("triplet", "tripletxl"):
        assert record["models"][name]["mean"]["bkr@5"] > 0.55, (name, record["models"][name]["mean"])
    assert (out / "boxplot_bkr5.png").stat().st_size > 0
    assert "tripletxl" in capsys.readouterr().out


def test_triplet_command_needs_two_evaluation_languages(tmp_path, capsys):
    path = write_documents([Document("en", "a", "b"), Document("en", "c", "d"), Document("en", "e", "f", "x.npy")],
                           tmp_path / "d.jsonl")
    assert main(["triplet", "--docs", str(path), "--text-encoder", "random:4", "--out", str(tmp_path / "o")]) == 2
    assert "at least 2 languages" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # --out is created once the inputs passed, not before: nothing left behind


def test_triplet_command_names_a_language_the_text_encoder_lacks(tmp_path, capsys):
    """Documents in cs, which mUSE was not trained on, ran with no note; retrieval and tag name it."""
    path = write_documents([Document("cs", "a", "b"), Document("en", "c", "d"), Document("cs", "e", "f", "x.npy")],
                           tmp_path / "d.jsonl")
    assert main(["triplet", "--docs", str(path), "--text-encoder", "use", "--out", str(tmp_path / "o")]) == 2
    out = capsys.readouterr().out
    assert out.count("note: the text encoder 'use' was not trained on cs\n") == 1, out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--batch-size", "1"], "batch_size must be an integer >= 2"),
        (["--val-fraction", "1.5"], "val_fraction must be in [0, 1)"),
        (["--lr", "0"], "lr must be > 0"),
        (["--beta", "-1"], "beta must be >= 0"),
        (["--beta", "nan"], "beta must be >= 0 and finite, got nan"),  # NaN losses, silently
        (["--margin", "nan"], "margin must be >= 0 and finite, got nan"),
        (["--margin", "-1"], "margin must be >= 0 and finite, got -1.0"),  # was trained with, in silence
        (["--lr", "inf"], "lr must be > 0 and finite, got inf"),
    ],
)
def test_triplet_command_rejects_bad_training_options_in_one_line(recipe_docs, tmp_path, capsys, options, message):
    docs, spec = recipe_docs
    args = ["triplet", "--docs", str(docs), "--text-encoder", spec, "--out", str(tmp_path / "o"), *options]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_triplet_command_rejects_non_positive_counts(recipe_docs, tmp_path, capsys):
    docs, spec = recipe_docs
    for option in ("--k", "--epochs", "--hidden-dim", "--max-per-language"):
        with pytest.raises(SystemExit) as exit_info:
            main(["triplet", "--docs", str(docs), "--text-encoder", spec, "--out", str(tmp_path / "o"), option, "0"])
        assert exit_info.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_triplet_command_bad_npy_image_features_are_user_errors(recipe_docs, tmp_path, capsys):
    docs, spec = recipe_docs
    lines = docs.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if '"image"' in line)
    for name, make in (("short.npy", lambda p: np.save(p, np.zeros(5, np.float32))), ("absent.npy", None)):
        if make:
            make(tmp_path / name)
        obj = json.loads(lines[first])
        obj["image"] = name
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([*lines[:first], json.dumps(obj), *lines[first + 1:]]) + "\n", encoding="utf-8")
        args = ["triplet", "--docs", str(bad), "--text-encoder", spec, "--out", str(tmp_path / "o"),
                "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--epochs", "1"]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert name in err and len(err.splitlines()) == 1


def _with_first_image(docs, tmp_path, image: str):
    """A copy of the documents file whose first document with an image points at ``image``."""
    lines = docs.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if '"image"' in line)
    obj = json.loads(lines[first])
    obj["image"] = image
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:first], json.dumps(obj), *lines[first + 1:]]) + "\n", encoding="utf-8")
    return bad


def test_triplet_command_refuses_npy_features_of_the_wrong_form_and_unused_or_unknown_options(recipe_docs, tmp_path,
                                                                                               capsys):
    """A (2, 6) .npy was flattened into one 12-d vector (and matched 12-d features silently); a JSON file named .npy
    was 'pickled data'; --image-weights with .npy images, and an --annotate pair the plot lacks, were ignored."""
    docs, spec = recipe_docs
    out = tmp_path / "o"
    args = ["triplet", "--text-encoder", spec, "--out", str(out), "--cache-dir", str(tmp_path / "cache"),
            "--no-progress", "--epochs", "1"]
    np.save(tmp_path / "matrix.npy", np.zeros((2, 6), np.float32))
    np.save(tmp_path / "nan.npy", np.full(12, np.nan, np.float32))
    (tmp_path / "record.npy").write_text('{"not": "an array"}')
    np.save(tmp_path / "mask.npy", np.arange(12) % 2 == 0)  # a boolean mask: was read as a 0/1 feature vector
    for name, message in [("matrix.npy", "image features of shape (2, 6); expected one non-empty 1-D"),
                          ("nan.npy", "image features hold NaN or inf"),
                          ("mask.npy", "image features holds bool values; expected real numbers"),
                          ("record.npy", "is not a .npy file (it has no .npy header)")]:
        assert main([*args, "--docs", str(_with_first_image(docs, tmp_path, name))]) == 2
        err = capsys.readouterr().err
        assert f"{name}: " in err and message in err and err.count("\n") == 1, err
    for extra, message in [(["--image-weights", "hub"], "--image-weights hub: the documents' images are precomputed"),
                           (["--image-model", "resnet50"], "--image-model resnet50: the documents' images are"),
                           (["--annotate", "en-ru"], "--annotate 'en-ru': not a language pair of the evaluation "
                                                     "documents; expected A->B with A, B two of en, es, ru"),
                           (["--annotate", "en->de"], "--annotate 'en->de': not a language pair"),
                           (["--annotate", "en->ru,en->de"], "--annotate 'en->de': not a language pair")]:
        assert main([*args, "--docs", str(docs), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_case_study_splits_documents_and_summarises_pairs():
    from globetrotter.zeroshot.case_study import (case_study_configs, check_annotations, pair_summary,
                                                  precomputed_images, split_documents)

    docs = [Document("en", "a", "b"), Document("de", "c", "d"), Document("en", "e", "f", "1.npy"),
            Document("de", "g", "h", "2.npy")]
    train, evaluate = split_documents(docs)
    assert [d.title for d in train] == ["a", "c"] and [d.title for d in evaluate] == ["e", "g"]
    assert precomputed_images(evaluate) is True
    with pytest.raises(UserError, match="not a mix"):
        precomputed_images([*evaluate, Document("fr", "i", "j", "3.jpg")])
    assert precomputed_images([Document("fr", "i", "j", "3.jpg"), Document("de", "k", "l", "4.png")]) is False
    with pytest.raises(UserError, match=r"^docs.jsonl: need at least 2 documents without an image to train on, got 1$"):
        split_documents(docs[1:], "docs.jsonl")
    with pytest.raises(UserError, match=r"^annotate 'en-de': not a language pair"):  # the argument, not --annotate
        check_annotations(["en->de", "en-de"], evaluate)
    configs = case_study_configs(0.5, epochs=3)
    assert {n: (c.beta, c.epochs) for n, c in configs.items()} == {"triplet": (0.0, 3), "tripletxl": (0.5, 3)}
    with pytest.raises(UserError, match="^triplet: lr must be > 0"):
        case_study_configs(lr=0)
    results = {"frozen": {"pairs": {"en->de": {"bkr@5": 0.2}, "de->en": {"bkr@5": 0.6}, "en->fr": {}}}}
    assert pair_summary(results, 5) == {"frozen": pytest.approx({"mean": 0.4, "min": 0.2, "max": 0.6, "std": 0.2})}


def test_a_language_of_exactly_k_images_is_left_out():
    """With k images a language's Recall@k is 1 for any model: left out; k + 1 images are kept."""
    from globetrotter.zeroshot.case_study import languages_with_enough_images

    docs = [Document(lang, "t", "b", f"{lang}{i}.npy") for lang, n in (("en", 3), ("de", 3), ("fr", 2))
            for i in range(n)]
    kept, left_out = languages_with_enough_images(docs, 2)
    assert left_out == {"fr": 2} and {d.lang for d in kept} == {"en", "de"}
    # none left: a Python caller is told its argument (k), the command line its flag (--ks)
    with pytest.raises(UserError, match=r"\(the largest K\), got de 3, en 3, fr 2; add documents or lower k$"):
        languages_with_enough_images(docs, 3)


def _triplet_args(docs, spec, tmp_path, out="run", *extra, ks="1,5"):
    return ["triplet", "--docs", *map(str, docs if isinstance(docs, list) else [docs]), "--text-encoder", spec,
            "--out", str(tmp_path / out), "--epochs", "2", "--batch-size", "16", "--hidden-dim", "16", "--out-dim", "8",
            "--ks", ks, "--cache-dir", str(tmp_path / "cache"), "--no-progress", *extra]


def test_a_language_with_too_few_images_is_left_out_of_the_mean(recipe_docs, tmp_path, capsys):
    """One stray document in its own language gave klingon->en n_src 1 BkR 1.0 for every model, averaged in."""
    docs, spec = recipe_docs
    assert main(_triplet_args(docs, spec, tmp_path, "without")) == 0
    capsys.readouterr()
    np.save(tmp_path / "img" / "kl.npy", np.ones(12, np.float32))
    stray = tmp_path / "stray.jsonl"
    stray.write_text(json.dumps({"lang": "klingon", "title": "Soup #0", "body": "Boil (0)", "image": "img/kl.npy"})
                     + "\n", encoding="utf-8")
    assert main(_triplet_args([docs, stray], spec, tmp_path, "with")) == 0
    out = capsys.readouterr().out
    assert "note: klingon: 1 evaluation image(s), not more than the largest K (5)" in out and "left out" in out
    without, with_stray = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("without", "with"))
    for name, res in with_stray["models"].items():
        assert not any("klingon" in pair for pair in res["pairs"])
        assert res["mean"] == pytest.approx(without["models"][name]["mean"])
    assert with_stray["left_out"] == {"languages": {"klingon": 1}, "pairs": {}}
    # the languages that stay must be 2: else the run is refused, naming each language's images
    only = tmp_path / "only.jsonl"
    only.write_text(docs.read_text(encoding="utf-8").replace('"lang": "es"', '"lang": "en"')
                    .replace('"lang": "ru"', '"lang": "en"') + stray.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(_triplet_args(only, spec, tmp_path, "never")) == 2
    err = capsys.readouterr().err
    assert "in at least 2 languages with more than 5 images each (the largest K), got en 36, klingon 1; add " \
           "documents or lower --ks" in err
    assert err.count("\n") == 1 and not (tmp_path / "never").exists()


def test_pairs_whose_shared_images_leave_too_few_sources_are_left_out():
    """Two languages showing the same images split them between the sides: 4 shared images give 2 per side."""
    from backretrieval import BackRetrievalWarning
    from backretrieval.pairs import evaluate_pairs

    from globetrotter.zeroshot.case_study import drop_small_pairs

    rng = np.random.default_rng(0)
    langs = ["en"] * 4 + ["de"] * 4 + ["fr"] * 12
    ids = [f"s{i}" for i in range(4)] * 2 + [f"f{i}" for i in range(12)]
    feats = {i: rng.normal(size=6) for i in set(ids)}
    image_feats = np.stack([feats[i] for i in ids]).astype(np.float32)
    texts = (image_feats @ rng.normal(size=(6, 8)) + 0.1 * rng.normal(size=(20, 8))).astype(np.float32)
    with pytest.warns(BackRetrievalWarning, match="2 distinct source images"):  # the metric says it too
        results = {name: evaluate_pairs(texts, langs, image_feats, ids, ks=(1, 3), with_corr=False) for name in "ab"}
    assert results["a"]["pairs"]["en->de"]["n_src"] == 2
    assert drop_small_pairs(results, 3) == {"de->en": 2, "en->de": 2}
    for res in results.values():
        assert set(res["pairs"]) == {"de->fr", "en->fr", "fr->de", "fr->en"}
        assert res["mean"]["bkr@3"] == pytest.approx(np.mean([p["bkr@3"] for p in res["pairs"].values()]))
    with pytest.raises(UserError, match="every language pair has at most 20 source documents .*; add documents or "
                                        "lower k$"):  # the argument, not the command line's --ks
        drop_small_pairs(results, 20)


def test_triplet_command_refuses_upper_case_codes_repeated_files_and_a_small_max_per_lang(recipe_docs, tmp_path,
                                                                                          capsys):
    """"EN" and "en" were two languages; --docs d.jsonl d.jsonl read every document twice; --max-per-language 3 with K 5
    made every pair's BkR@5 1."""
    docs, spec = recipe_docs
    lines = docs.read_text(encoding="utf-8").splitlines()
    upper = tmp_path / "upper.jsonl"
    upper.write_text("\n".join([*lines[:2], lines[2].replace('"lang": "en"', '"lang": "EN"'), *lines[3:]]) + "\n",
                     encoding="utf-8")
    assert '"EN"' in upper.read_text(encoding="utf-8")
    for args, message in [(_triplet_args(upper, spec, tmp_path), "upper.jsonl:3: key 'lang' 'EN' is not a lowercase "
                                                                   "language code; write 'en'"),
                          (_triplet_args([docs, docs], spec, tmp_path), f"--docs: {docs} given twice; expected each "
                                                                        "documents file once"),
                          (_triplet_args([docs, tmp_path / "img" / ".." / docs.name], spec, tmp_path),
                           f"--docs: {docs} and {tmp_path / 'img' / '..' / docs.name} are one file"),
                          (_triplet_args(docs, spec, tmp_path, "run", "--max-per-language", "5"),
                           "--max-per-language 5: not more than the largest K (5): BackRetrieval Recall@5 of every pair "
                           "would be 1 for any model")]:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_triplet_command_keeps_the_results_in_out_unless_overwrite(recipe_docs, tmp_path, capsys):
    docs, spec = recipe_docs
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text("{}")
    assert main(_triplet_args(docs, spec, tmp_path)) == 2
    assert f"{tmp_path / 'run'}: already holds a case study (results.json); pass --overwrite to replace it" in \
        capsys.readouterr().err
    assert (tmp_path / "run" / "results.json").read_text() == "{}"
    assert main(_triplet_args(docs, spec, tmp_path, "run", "--overwrite")) == 0
    assert json.loads((tmp_path / "run" / "results.json").read_text())["n_eval"] == 36


def test_triplet_command_leaves_out_pairs_that_shared_images_make_too_small(recipe_docs, tmp_path, capsys):
    """en and es documents showing the same 12 pictures keep 6 a side: at K 6 their pairs are left out, said."""
    docs, spec = recipe_docs
    shared = tmp_path / "shared.jsonl"
    lines = [json.loads(line) for line in docs.read_text(encoding="utf-8").splitlines()]
    for obj in lines:
        if obj["lang"] == "es" and "image" in obj:
            obj["image"] = obj["image"].replace("-es-", "-en-")
    shared.write_text("".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in lines), encoding="utf-8")
    assert main(_triplet_args(shared, spec, tmp_path, ks="1,6")) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {pair}: 6 source document(s) once shared images are split between the sides, not more "
                     "than the largest K (6): left out" for pair in ("en->es", "es->en")]
    # the metric's own warning, one line (not Python's two-line form), once: the same line for 2 pairs x 3 models
    # was said six times under the CLI's 'always' filter
    warned = captured.err.splitlines()[:-1]  # the last: "wrote .../results.json"
    assert len(warned) == 1 and warned[0].startswith("warning: bkr_recall: 6 distinct source images, not more than "
                                                     "the largest K (6)"), warned
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["left_out"] == {"languages": {}, "pairs": {"en->es": 6, "es->en": 6}}
    assert set(record["models"]["frozen"]["pairs"]) == {"en->ru", "es->ru", "ru->en", "ru->es"}


def test_read_documents_skips_blank_lines_and_refuses_each_bad_input_naming_file_and_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('\n{"lang": "en", "title": "t", "body": "b"}\n   \n', encoding="utf-8")
    (doc,) = read_documents(path)  # the blank lines are no documents and shift no line number
    assert doc.id == "docs:2"
    with pytest.raises(UserError, match=r"missing.jsonl: documents file not found \(expected JSONL"):
        read_documents(tmp_path / "missing.jsonl")
    cases = [(b'{"lang": "en", "title": "t", "body": "b"}\n\xff\xfe\n', r"docs.jsonl:2: not UTF-8 text"),
             (b'["en", "t", "b"]\n', r"docs.jsonl:1: expected a JSON object, got list"),
             (b'{"lang": "en", "title": "t", "body": "b", "image": 3}\n', r"docs.jsonl:1: key 'image' must be a file"),
             (b'{"lang": "en", "title": "t", "body": "b", "image": ""}\n', r"docs.jsonl:1: key 'image' must be a file"),
             (b"\n\n", r"docs.jsonl: no documents")]
    for data, message in cases:
        path.write_bytes(data)
        with pytest.raises(UserError, match=message):
            read_documents(path)


def test_training_moves_the_adapter_and_every_batch_to_the_device(monkeypatch):
    """train_siamese trained on the CPU whatever the caller asked (`triplet --device cuda` too)."""
    import globetrotter.zeroshot.triplet as triplet

    moved, batches, real = [], set(), triplet._epoch_loss

    class Adapter(SiameseAdapter):
        def to(self, *args, **kwargs):
            moved.append(torch.device(args[0]))
            return super().to(*args, **kwargs)

    def epoch_loss(model, title, body, langs, config, gen, optimizer=None):
        batches.update({title.device, body.device, langs.device})
        return real(model, title, body, langs, config, gen, optimizer)

    monkeypatch.setattr(triplet, "SiameseAdapter", Adapter)
    monkeypatch.setattr(triplet, "_epoch_loss", epoch_loss)
    title, body, langs = _topic_embeddings(40, 2)
    cfg = TripletConfig(hidden_dim=8, out_dim=4, epochs=2, batch_size=8, val_fraction=0.2)
    model, _ = train_siamese(title, body, langs, cfg, progress=False, device="cpu")
    assert moved == [torch.device("cpu")] and batches == {torch.device("cpu")}
    assert next(model.parameters()).device == torch.device("cpu")
    assert model.represent(title, body).device == torch.device("cpu")  # the representation comes back to the CPU


def test_triplet_command_trains_the_adapters_on_its_device(recipe_docs, tmp_path, monkeypatch):
    """--device named the image model's device only: the adapters trained on the CPU whatever it said."""
    import globetrotter.zeroshot.case_study as case_study

    devices, real = [], case_study.train_siamese

    def train_siamese(*args, **kwargs):
        devices.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(case_study, "train_siamese", train_siamese)
    docs, spec = recipe_docs
    assert main(["triplet", "--docs", str(docs), "--text-encoder", spec, "--out", str(tmp_path / "run"), "--epochs", "1",
                 "--batch-size", "16", "--hidden-dim", "8", "--out-dim", "4", "--ks", "1,5", "--device", "cpu",
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    assert devices == ["cpu", "cpu"]  # Triplet and TripletXL


def test_training_with_nothing_held_out_keeps_the_last_epoch_and_skips_a_lone_last_row():
    title, body, langs = _topic_embeddings(33, 3)  # batches of 8: four full ones and a lone row, which has no negative
    cfg = TripletConfig(hidden_dim=16, out_dim=8, epochs=3, batch_size=8, val_fraction=0.0)
    model, history = train_siamese(title, body, langs, cfg, progress=False)
    assert history.best_epoch == 2 and history.val == [] and len(history.train) == 3
    assert all(np.isfinite(history.train))
    assert not model.training


def test_training_refuses_fewer_than_two_training_documents_after_the_held_out_share():
    title, body, langs = _topic_embeddings(4, 2)
    with pytest.raises(UserError, match="need at least 2 training documents, got 1"):
        train_siamese(title, body, langs, TripletConfig(val_fraction=0.75), progress=False)


@pytest.mark.parametrize("options, message", [
    ({"k": 0}, r"^k must be an integer >= 1, got 0$"),
    ({"epochs": -2}, r"^epochs must be an integer >= 1, got -2$"),
    ({"hidden_dim": 0}, r"^hidden_dim must be an integer >= 1, got 0$"),
    ({"out_dim": 0}, r"^out_dim must be an integer >= 1, got 0$"),
])
def test_triplet_config_refuses_counts_below_one_naming_the_field_and_its_value(options, message):
    """"k and epochs must be >= 1" said neither which one nor the value given."""
    from globetrotter.zeroshot.case_study import case_study_configs

    with pytest.raises(ValueError, match=message):
        TripletConfig(**options).validate()
    with pytest.raises(UserError, match=message.replace("^", "^triplet: ")):  # the case study's one-line refusal
        case_study_configs(**options)


def test_siamese_training_and_negatives_refuse_misshaped_inputs():
    with pytest.raises(ValueError, match=r"title and body must be \[N, D\] and langs \[N\]"):
        train_siamese(torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), progress=False)
    with pytest.raises(ValueError, match="a negative needs a batch of at least 2"):
        random_other_index(1)
