"""The sentence ranking (cosine, CSLS per language pair, MaxSim) against its definition written out, and the
inductive protocol: with a reference pool a pair's score never depends on the other evaluated sentences."""
from __future__ import annotations

import numpy as np
import pytest
from test_eval_cli import LANGS, FakeEncoder, caption

from globetrotter.evaluation import Ranking, ReferencePool, ScoringContext, sentence_translation
from globetrotter.errors import UserError
from globetrotter.evaluation.procrustes import normalize_rows


class TableEncoder:
    """Caption ``"s<i>"`` is row ``i`` of a fixed matrix: scores whose inputs are known exactly."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = normalize_rows(rows)

    def encode_text(self, texts, batch_size: int = 256, head: str = "text") -> np.ndarray:
        return self.rows[[int(t[1:]) for t in texts]]


def brute_csls(emb, langs, pool, pool_langs, k, own: bool) -> np.ndarray:
    """cos(x, y) - r_{lang y}(x) / 2 - r_{lang x}(y) / 2, every radius written out over the pool."""
    def radius(i, lang):
        sims = [float(emb[i] @ pool[j]) for j in range(len(pool)) if pool_langs[j] == lang and not (own and j == i)]
        return np.mean(sorted(sims)[-k:])

    n = len(emb)
    return np.array([[emb[x] @ emb[y] - radius(x, langs[y]) / 2 - radius(y, langs[x]) / 2 for y in range(n)]
                     for x in range(n)])


def test_csls_scores_are_csls_of_each_language_pair_over_the_pool_or_the_sentences():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(30, 6)) + np.repeat(rng.normal(size=(3, 6)) * [[0.2], [1.0], [0.5]], 10, axis=0)
    encoder = TableEncoder(rows)
    evaluated, langs = [f"s{i}" for i in range(12)], np.array(["en", "de", "fr"] * 4)
    pool = ReferencePool([f"s{i}" for i in range(12, 30)], np.array(["en", "de", "fr"] * 6), "pool")
    emb, pool_emb = encoder.rows[:12], encoder.rows[12:]
    inductive = ScoringContext(encoder, evaluated, langs, pool).scorer(Ranking(csls=True, csls_k=3)).matrix()
    np.testing.assert_allclose(inductive, brute_csls(emb, langs, pool_emb, pool.langs, 3, own=False), atol=1e-5)
    transductive = ScoringContext(encoder, evaluated, langs, None).scorer(Ranking(csls=True, csls_k=3)).matrix()
    np.testing.assert_allclose(transductive, brute_csls(emb, langs, emb, langs, 3, own=True), atol=1e-5)
    cosine = ScoringContext(encoder, evaluated, langs, pool).scorer(Ranking()).matrix()
    np.testing.assert_allclose(cosine, emb @ emb.T, atol=1e-6)
    # the metric ranks by the scorer exactly as by the embeddings when the scores are the cosines
    groups = np.repeat(np.arange(4), 3)
    by_scorer = sentence_translation(ScoringContext(encoder, evaluated, langs, pool).scorer(Ranking()), langs, groups)
    assert by_scorer["accuracy"] == sentence_translation(emb, langs, groups)["accuracy"]


def test_csls_ranking_marks_down_a_hub_that_cosine_ranks_first():
    """A hub (a candidate near every query) takes the top slot of every query under cosine; CSLS subtracts its
    radius and the true translations come back."""
    rng = np.random.default_rng(1)
    n, d = 40, 16
    meaning, shared = rng.normal(size=(n, d)), rng.normal(size=d)
    en = meaning + 1.5 * shared + 0.7 * rng.normal(size=(n, d))
    de = meaning + 1.5 * shared + 0.7 * rng.normal(size=(n, d))
    de[:3] = 0.5 * meaning[:3] + 4.0 * shared  # three de rows are mostly the shared component: hubs
    encoder = TableEncoder(np.concatenate([en, de]))
    texts, langs = [f"s{i}" for i in range(2 * n)], np.array(["en"] * n + ["de"] * n)
    groups = np.concatenate([np.arange(n), np.arange(n)])
    context = ScoringContext(encoder, texts, langs, None)
    cosine = sentence_translation(context.scorer(Ranking()), langs, groups, k=1)["accuracy"]
    csls = sentence_translation(context.scorer(Ranking(csls=True, csls_k=5)), langs, groups, k=1)["accuracy"]
    assert csls > cosine + 0.05


def _scene_captions(scenes):
    return [caption(lang, c, s) for c, s in scenes for lang in LANGS], np.array([lang for _ in scenes for lang in LANGS])


@pytest.mark.parametrize("ranking", [Ranking(csls=True, csls_k=3), Ranking(maxsim=0.5), Ranking(maxsim=0.5, csls=True, csls_k=3)])
def test_with_a_reference_a_pair_score_never_depends_on_the_other_evaluated_sentences(ranking):
    """Hold one query-candidate pair fixed and redraw every other evaluated sentence: inductive scores stay the same
    to the bit; the transductive form (statistics from the evaluated sentences, as before) moves them."""
    encoder = FakeEncoder(language_offset=3.0)
    fixed = [caption("en", 0, 0), caption("de", 1, 2)]
    reference = ReferencePool(*_scene_captions([(c, s) for c in range(6) for s in range(5) if (c + s) % 2]), "pool")
    rng = np.random.default_rng(0)
    inductive, transductive = [], []
    for draw in range(3):
        scenes = [(int(c), int(s)) for c, s in rng.integers(0, [6, 5], size=(20, 2))]
        others, other_langs = _scene_captions(scenes)
        texts, langs = fixed + others, np.array(["en", "de"] + list(other_langs))
        for pool, out in ((reference, inductive), (None, transductive)):
            out.append(ScoringContext(encoder, texts, langs, pool).scorer(ranking)(np.array([0]))[0, 1])
    assert inductive[0] == inductive[1] == inductive[2]
    assert len(set(transductive)) > 1, transductive


def test_maxsim_scores_add_the_weighted_token_matching():
    encoder = FakeEncoder(language_offset=3.0)
    texts, langs = _scene_captions([(0, 0), (1, 2), (3, 4), (5, 1)])
    reference = ReferencePool(*_scene_captions([(c, s) for c in range(6) for s in range(5)]), "pool")
    context = ScoringContext(encoder, texts, langs, reference)
    plain, late = context.scorer(Ranking()).matrix(), context.scorer(Ranking(maxsim=2.0)).matrix()
    np.testing.assert_allclose(late - plain, 2.0 * context.maxsim_self, atol=1e-5)
    bags = context.late.bags(texts, langs)
    np.testing.assert_allclose(context.maxsim_self, context.late.scorer(bags, bags)(np.arange(len(texts))), atol=1e-6)
    assert context.late.record["reference"] == "pool"


@pytest.mark.parametrize("ranking", [Ranking(csls=True, csls_k=3), Ranking(maxsim=0.5),
                                     Ranking(maxsim=0.5, csls=True, csls_k=3), Ranking(head="cross")])
def test_a_retrieval_context_scores_queries_against_candidates_as_the_whole_context_does(ranking):
    """``queries=Q``: the first Q sentences (en) query the others (de) with the scores the whole context gives those
    pairs, every radius read among the other side's language only (never the unread fr of the pool)."""
    encoder = FakeEncoder(language_offset=3.0)
    queries = [caption("en", c, s) for c, s in ((0, 0), (1, 2), (3, 4))]
    candidates = [caption("de", c, s) for c, s in ((0, 0), (1, 2), (2, 3), (3, 4), (5, 1))]
    langs = np.array(["en"] * 3 + ["de"] * 5)
    reference = ReferencePool(*_scene_captions([(c, s) for c in range(6) for s in range(5) if (c + s) % 2]), "pool")
    whole = ScoringContext(encoder, queries + candidates, langs, reference).scorer(ranking)(np.arange(3))[:, 3:]
    retrieval = ScoringContext(encoder, queries + candidates, langs, reference, queries=3)
    got = retrieval.scorer(ranking)(np.arange(3))
    np.testing.assert_allclose(got, whole, atol=1e-5)
    assert got.shape == (3, 5) and retrieval.scorer(ranking).matrix().shape == (3, 5)
    pool_langs = np.asarray(reference.langs)
    (q_rows, _, q_among), (c_rows, _, c_among) = retrieval.radius_parts
    assert list(q_rows) == [0, 1, 2] and set(pool_langs[q_among]) == {"de"} and set(pool_langs[c_among]) == {"en"}
    with pytest.raises(ValueError, match="queries=8"):
        ScoringContext(encoder, queries + candidates, langs, reference, queries=8)
    if ranking.csls:  # the candidates' language missing from the pool: a one-line error, not NaN scores
        no_de = ReferencePool(*[list(x) for x in zip(*[(t, g) for t, g in zip(reference.captions, reference.langs)
                                                       if g != "de"])], "pool")
        with pytest.raises(UserError, match="no reference text in de"):
            ScoringContext(encoder, queries + candidates, langs, no_de, queries=3).scorer(ranking)


def test_a_reference_pool_is_one_sample_whatever_the_seed_or_the_other_languages(tmp_path):
    """A language's reference captions depend on the split and the cap only: a ranking chosen on val under one
    seed and language set is scored with the same statistics under another."""
    from PIL import Image

    from data_prep.shard_writer import ShardWriter
    from globetrotter.evaluation import read_reference

    with ShardWriter(tmp_path / "pool", split="train", source="made", image_format="png") as writer:
        for i in range(40):
            lang = ("de", "en")[i % 2]
            writer.write(f"c{i:03d}", Image.new("RGB", (8, 8)), f"caption {i}", lang, f"img{i}")
    alone = read_reference(tmp_path / "pool", ["en"], 5)
    both = read_reference(tmp_path / "pool", ["de", "en"], 5)
    assert len(alone) == 5 and set(alone.captions) < {f"caption {i}" for i in range(1, 40, 2)}
    assert [c for c, lang in zip(both.captions, both.langs) if lang == "en"] == alone.captions
    assert both.record["per_language"] == {"de": 5, "en": 5}
    assert alone.record["sha256"] == read_reference(tmp_path / "pool", ["en"], 5).record["sha256"] \
        != read_reference(tmp_path / "pool", ["en"], 6).record["sha256"]


def _split(folder, split: str, rows: list[tuple[str, str]]):
    """A split of ``rows`` (language, image id), caption ``"<image> <language>"``; its folder."""
    from PIL import Image

    from data_prep.shard_writer import ShardWriter

    with ShardWriter(folder, split=split, source="made", image_format="png") as writer:
        for i, (lang, image) in enumerate(rows):
            writer.write(f"k{i:03d}", Image.new("RGB", (8, 8)), f"{image} {lang}", lang, image)
    return folder


def test_a_reference_pool_keeps_shard_order_and_needs_every_language(tmp_path):
    from globetrotter.evaluation import read_reference

    pool = _split(tmp_path / "train", "train", [(("de", "en")[i % 2], f"i{i:02d}") for i in range(30)])
    english = [f"i{i:02d} en" for i in range(1, 30, 2)]
    sample = read_reference(pool, ["en"], 6).captions
    assert len(sample) == 6 and sample == [c for c in english if c in sample]  # a subset, in the split's order
    with pytest.raises(UserError, match="no caption in fr for the reference statistics"):
        read_reference(pool, ["en", "fr"])


def test_the_reference_split_is_never_the_evaluated_one_a_test_split_or_one_showing_its_images(tmp_path):
    from globetrotter.evaluation.reference import checked_reference, choice_reference, reference_split

    train = _split(tmp_path / "train", "train", [("en", "a"), ("de", "b")])
    val = _split(tmp_path / "val", "val", [("en", "v"), ("de", "w")])
    assert reference_split(val) == train  # the train split beside it
    with pytest.raises(UserError, match="is the evaluated split"):
        reference_split(val, val)
    held = _split(tmp_path / "held", "test", [("en", "t"), ("de", "t")])  # a test split by its manifest alone
    named = _split(tmp_path / "test", "train", [("en", "u")])  # by its folder's name alone
    for split in (held, named):
        with pytest.raises(UserError, match="reference=.*: a test split"):
            reference_split(val, split)
    with pytest.raises(UserError, match="val=.*held: a test split"):
        choice_reference(held, train)
    # another train split showing val's image w, in a language the pool does not read: its captions are w's too
    copy = _split(tmp_path / "copy", "train", [("en", "a"), ("fr", "w")])
    for languages in ((), ("en",)):
        with pytest.raises(UserError, match=r"shows 1 images of the evaluated split .*\(e\.g\. 'w'\)"):
            checked_reference(val, copy, languages=languages)
    assert checked_reference(val, train, languages=("en",)).pool(None).captions == ["a en"]
    with pytest.raises(ValueError, match=r"the captions in de were not read"):
        checked_reference(val, train, languages=("en",)).pool(None, languages=["de"])


def test_a_reference_for_no_split_and_no_language_is_not_read(tmp_path, monkeypatch):
    """Nothing asked of the reference (no language) and no evaluated split whose images it could show: it is not
    read (``reference_split`` of a text corpus); asked for a language, it is."""
    from globetrotter.evaluation import reference
    from globetrotter.evaluation.reference import checked_reference

    train = _split(tmp_path / "train", "train", [("en", "a"), ("de", "b")])
    evaluated = tmp_path / "corpus"  # a folder that holds no split (no manifest.json)
    evaluated.mkdir()
    real = reference.read_captions_once
    monkeypatch.setattr(reference, "read_captions_once", lambda *a, **k: pytest.fail("the reference was read"))
    unread = checked_reference(evaluated, train)
    assert unread.split == train and unread.by_language is None and unread.languages == ()
    assert reference.reference_split(evaluated, train) == train
    monkeypatch.setattr(reference, "read_captions_once", real)
    assert checked_reference(evaluated, train, languages=("de",)).pool(None).captions == ["b de"]


def test_shared_images_honours_the_ids_given_for_a_folder_that_holds_no_split(tmp_path):
    """The evaluated images given as ids (a caller that read them elsewhere) with a folder that holds no split: they
    were ignored (no image shared, the reference taken) because the folder has no manifest."""
    from globetrotter.evaluation.reference import checked_reference, reference_split, shared_images

    train = _split(tmp_path / "train", "train", [("en", "a"), ("de", "b")])
    evaluated = tmp_path / "corpus"  # no manifest.json
    evaluated.mkdir()
    assert shared_images(train, evaluated, other_images=["b", "z"]) == {"b"}
    assert shared_images(evaluated, train, split_images=["a"]) == {"a"}
    assert shared_images(train, evaluated) == set()  # neither given nor a split: no image
    for call in (lambda: reference_split(evaluated, train, ["b"]),
                 lambda: checked_reference(evaluated, train, ["b"], languages=("en",))):
        with pytest.raises(UserError, match=r"shows 1 images of the evaluated split .*\(e\.g\. 'b'\)"):
            call()
    assert reference_split(evaluated, train, ["z"]) == train


class _RandomTokenModel:
    """Caption ``"s<i>"``: row ``i`` of random embeddings per head and random token ids (none for some), drawn from a
    few prototypes so that candidates tie."""

    def __init__(self, n: int, vocab: int = 200, dim: int = 16, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        proto = rng.integers(0, max(2, n // 3), n)
        self.emb = {head: normalize_rows(rng.normal(size=(n, dim)))[proto].astype(np.float32)
                    for head in ("text", "cross")}
        ids = [rng.integers(0, vocab, rng.integers(0, 9)) for _ in range(n)]
        self.ids = [ids[p] for p in proto]
        self.table = rng.normal(size=(vocab, dim)).astype(np.float32)

    def encode_text(self, texts, batch_size: int = 256, head: str = "text") -> np.ndarray:
        return self.emb[head][[int(t[1:]) for t in texts]]

    def token_table(self):
        return self.table, np.arange(len(self.table))

    def token_ids(self, texts):
        return [self.ids[int(t[1:])] for t in texts]


def test_select_scores_a_block_of_rows_at_a_time_as_the_whole_matrix_does():
    """``eval.py select`` finds each query's best candidate a block of rows at a time (MaxSim once per block for every
    ranking): the row maxima (lowest index of ties) of the whole matrix's [src, tgt] blocks, and each block's MaxSim
    the whole MaxSim's rows bit for bit (its blocks end where MaxSim starts a product)."""
    from globetrotter.evaluation.late_interaction import maxsim_group_starts
    from globetrotter.evaluation.tasks.select import candidates, retrieved_by_ranking
    from globetrotter.evaluation.val_set import BackRetrievalSet

    n, n_ref = 900, 300
    model = _RandomTokenModel(n + n_ref)
    names = np.array(["l0", "l1", "l2"])
    langs = names[np.random.default_rng(1).integers(0, 3, n)]
    pool = ReferencePool([f"s{i}" for i in range(n, n + n_ref)], np.resize(names, n_ref), "random")
    context = ScoringContext(model, [f"s{i}" for i in range(n)], langs, pool)
    blocks = context.row_blocks(maxsim=True, block=1)
    assert len(blocks) == 3 and np.array_equal(np.concatenate(blocks), np.arange(n)) and min(map(len, blocks)) >= 256
    bags = context.late.bags(context.captions, langs)
    assert set(b[0] for b in blocks[1:]) <= set(maxsim_group_starts(bags, bags).tolist())
    parts = [context.maxsim_rows(b) for b in blocks]
    assert "maxsim_self" not in context.__dict__  # never the [N, N] MaxSim
    assert np.array_equal(np.concatenate(parts), context.maxsim_self)
    bkr = BackRetrievalSet.__new__(BackRetrievalSet)  # the queries' languages and images are all it reads
    bkr.langs, bkr.image_ids = langs, np.arange(n) // 2  # two captions of an image: its other one is no candidate
    rankings = candidates(("text", "cross"), (0.0, 1.0), (False, True), csls_k=5)
    fresh = ScoringContext(model, [f"s{i}" for i in range(n)], langs, pool)
    for ranking, found in zip(rankings, retrieved_by_ranking(fresh, rankings, bkr, block=1)):
        matrix = context.scorer(ranking).matrix()
        for lang, src, tgt in bkr.language_blocks():
            np.testing.assert_array_equal(found[lang], matrix[np.ix_(src, tgt)].argmax(axis=1), err_msg=ranking.label)
    assert "maxsim_self" not in fresh.__dict__


@pytest.mark.parametrize("ranking", [Ranking(maxsim=1.0), Ranking(maxsim=0.5, csls=True, csls_k=5)])
def test_a_scorer_reads_maxsim_a_chunk_at_a_time_as_the_whole_maxsim_gives_it(ranking, monkeypatch):
    """`eval.py sentence` scores 1,024 queries at a time: their MaxSim is computed for them (and the products they
    cut into, once), never the [N, N] MaxSim held for the whole evaluation, and each chunk's scores are the whole
    matrix's rows bit for bit, wherever a chunk cuts MaxSim's products."""
    from globetrotter.evaluation import late_interaction

    n, n_ref, chunk = 3000, 300, 400
    model = _RandomTokenModel(n + n_ref)
    names = np.array(["l0", "l1", "l2"])
    groups, langs = np.arange(n) // 3, np.resize(names, n)  # one sentence per language in each group
    pool = ReferencePool([f"s{i}" for i in range(n, n + n_ref)], np.resize(names, n_ref), "random")
    texts = [f"s{i}" for i in range(n)]
    whole = ScoringContext(model, texts, langs, pool)
    old = whole.scorer(ranking)
    old_matrix = np.concatenate([old(rows, maxsim=whole.maxsim_self[rows]) for rows in np.array_split(np.arange(n), 7)])
    fresh = ScoringContext(model, texts, langs, pool)
    bags = fresh.late.bags(texts, langs)
    starts = late_interaction.maxsim_group_starts(bags, bags)
    assert len(starts) > 8 and set(range(chunk, n, chunk)) - set(starts.tolist())  # chunks of 400 rows cut products
    sizes, real = [], late_interaction.maxsim

    def recording(a, rows, b, *args, **kwargs):
        sizes.append(len(rows))
        return real(a, rows, b, *args, **kwargs)

    monkeypatch.setattr(late_interaction, "maxsim", recording)
    scorer = fresh.scorer(ranking)
    sizes.clear()  # the CSLS radii's MaxSim against the pool
    for lo in range(0, n, chunk):
        rows = np.arange(lo, min(n, lo + chunk))
        np.testing.assert_array_equal(scorer(rows), old_matrix[rows])
    assert "maxsim_self" not in fresh.__dict__ and max(sizes) < 3 * chunk, sizes  # a chunk and its cut products
    assert sum(sizes) == n  # the product a chunk ends in is kept for the next one: no sentence's MaxSim made twice
    np.testing.assert_array_equal(scorer(np.array([5, 400, 3])), old_matrix[[5, 400, 3]])
    old_result = sentence_translation(old, langs, groups, chunk_size=chunk, tie_seed=0)
    new_result = sentence_translation(scorer, langs, groups, chunk_size=chunk, tie_seed=0)
    assert old_result["accuracy"] == new_result["accuracy"]
    assert np.array_equal(old_result["group_hits"], new_result["group_hits"])
    assert "maxsim_self" not in fresh.__dict__


@pytest.mark.parametrize("where", ["top", "config"])
def test_a_select_record_of_other_queries_names_its_seed_wherever_the_record_keeps_it(where):
    """A select record's seed left its config for the top-level ``seed`` every command's record spells alike; the
    error for a record of other val queries still names the seed of a record written before (``config.seed``)."""
    from globetrotter.evaluation.tasks.choice_margins import check_against

    other = {"config": {"val": "v", "max_per_lang": 9, "languages": ["en", "de"]},
             "details": {"val": {"queries_sha256": "theirs", "image_features": "g"}, "chosen": {}, "per_query": [1.0]}}
    if where == "top":
        other["seed"] = 7
    else:
        other["config"]["seed"] = 7
    with pytest.raises(UserError, match=r"'seed': 7,"):
        check_against(other, "ours", "g", "--against r.json")


def test_a_text_only_run_is_offered_no_cross_head_rankings_that_copy_its_text_ones(tiny_world, tiny_run, tmp_path):
    """A text-only model has neither head's projection: its "cross" head is the text head's embeddings again, so
    select's grid held every ranking twice (a runner-up +0.0000 behind the choice, copies counted within noise)."""
    from pathlib import Path

    import globetrotter
    from conftest import TINY
    from globetrotter.config import load_train_config
    from globetrotter.evaluation.tasks.select import model_candidates
    from globetrotter.training.trainer import train

    cfg = load_train_config(Path(__file__).resolve().parents[1] / "configs" / "text-only.yaml",
                            [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}",
                             f"output_dir={tmp_path}", *TINY, "steps=2"])
    train(cfg)
    text_only = globetrotter.load(cfg.run_dir)
    text, cross = text_only.encode_text(["red square"], head="text"), text_only.encode_text(["red square"], head="cross")
    assert np.array_equal(text, cross)  # what made the copies
    assert {r.head for r in model_candidates(str(cfg.run_dir), text_only)} == {"text"}
    full = model_candidates(str(tiny_run), globetrotter.load(tiny_run))
    assert {r.head for r in full} == {"text", "cross"} and len({r.label for r in full}) == len(full)


def test_tfidf_idf_is_fitted_on_the_reference_pool_never_on_the_evaluated_sentences():
    """The TF-IDF baseline's idf is a statistic like any other: inductive, its cosines are those of vectors weighted
    by the pool's idf, and a pair's score does not move when the other evaluated sentences change."""
    from globetrotter.evaluation.tfidf import TfidfEncoder

    pool = ReferencePool(["a red square", "ein rotes Quadrat", "a blue circle", "ein blauer Kreis", "a red circle",
                          "ein roter Kreis"], np.array(["en", "de"] * 3), "pool")
    evaluated = ["a red square", "ein roter Kreis", "square square square", "Quadrat Quadrat"]
    langs = np.array(["en", "de"] * 2)
    got = ScoringContext(TfidfEncoder(), evaluated, langs, pool).scorer(Ranking()).matrix()
    emb = TfidfEncoder().fit(pool.captions).encode_text(evaluated)
    np.testing.assert_allclose(got, (emb @ emb.T).toarray(), atol=1e-6)
    transductive = TfidfEncoder().fit(evaluated).encode_text(evaluated)
    assert not np.allclose(got, (transductive @ transductive.T).toarray(), atol=1e-3)  # the idf differs: a real check
    pair = ScoringContext(TfidfEncoder(), evaluated[:2], langs[:2], pool).scorer(Ranking()).matrix()
    assert pair[0, 1] == pytest.approx(got[0, 1], abs=1e-6)


class HeadTableEncoder:
    """Caption ``"s<i>"`` is row ``i`` of a fixed matrix per head: the text and cross heads embed it differently."""

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self.rows = {head: normalize_rows(r) for head, r in rows.items()}

    def encode_text(self, texts, batch_size: int = 256, head: str = "text") -> np.ndarray:
        return self.rows[head][[int(t[1:]) for t in texts]]


def test_csls_of_the_cross_head_takes_its_radii_among_the_pool_embedded_by_that_head():
    rng = np.random.default_rng(3)
    encoder = HeadTableEncoder({"text": rng.normal(size=(30, 6)), "cross": rng.normal(size=(30, 6))})
    evaluated, langs = [f"s{i}" for i in range(12)], np.array(["en", "de", "fr"] * 4)
    pool = ReferencePool([f"s{i}" for i in range(12, 30)], np.array(["en", "de", "fr"] * 6), "pool")
    ranking = Ranking(head="cross", csls=True, csls_k=3)
    got = ScoringContext(encoder, evaluated, langs, pool).scorer(ranking).matrix()
    cross = encoder.rows["cross"]
    np.testing.assert_allclose(got, brute_csls(cross[:12], langs, cross[12:], pool.langs, 3, own=False), atol=1e-5)


@pytest.mark.parametrize("inductive", [True, False])
def test_csls_over_maxsim_takes_its_radii_of_the_same_weighted_scores(inductive):
    """CSLS of ``cos + W · MaxSim``: each radius is the mean of a sentence's k highest ``cos + W · MaxSim`` among a
    language's reference texts (or, transductive, the other evaluated sentences), written out here."""
    encoder = FakeEncoder(language_offset=3.0)
    texts, langs = _scene_captions([(c, s) for c in range(6) for s in range(5) if (c + s) % 3 == 0])
    pool = ReferencePool(*_scene_captions([(c, s) for c in range(6) for s in range(5) if (c + s) % 2]), "pool")
    w, k = 0.5, 3
    context = ScoringContext(encoder, texts, langs, pool if inductive else None)
    got = context.scorer(Ranking(maxsim=w, csls=True, csls_k=k)).matrix()
    emb = encoder.encode_text(texts)
    late, mine = context.late, context.late.bags(texts, langs)
    scores = emb @ emb.T + w * late.scorer(mine, mine)(np.arange(len(texts)))
    if inductive:
        pool_maxsim = late.scorer(mine, late.reference_bags)(np.arange(len(texts)))
        among = emb @ encoder.encode_text(pool.captions).T + w * pool_maxsim
        among_langs, own = np.asarray(pool.langs), np.zeros(among.shape, bool)
    else:
        among, among_langs, own = scores, langs, np.eye(len(texts), dtype=bool)

    def radius(x, lang):
        return np.sort(among[x][(among_langs == lang) & ~own[x]])[-k:].mean()

    n = len(texts)
    want = np.array([[scores[x, y] - radius(x, langs[y]) / 2 - radius(y, langs[x]) / 2 for y in range(n)]
                     for x in range(n)])
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_csls_k_may_equal_a_languages_reference_captions_but_not_pass_them():
    """k neighbours among exactly k reference captions of a language: each radius is their mean; k + 1 is a one-line
    error naming the language."""
    rng = np.random.default_rng(4)
    encoder = TableEncoder(rng.normal(size=(30, 6)))
    evaluated, langs = [f"s{i}" for i in range(12)], np.array(["en", "de", "fr"] * 4)
    pool = ReferencePool([f"s{i}" for i in range(12, 30)], np.array(["en", "de", "fr"] * 6), "pool")  # 6 each
    got = ScoringContext(encoder, evaluated, langs, pool).scorer(Ranking(csls=True, csls_k=6)).matrix()
    rows = encoder.rows
    np.testing.assert_allclose(got, brute_csls(rows[:12], langs, rows[12:], pool.langs, 6, own=False), atol=1e-5)
    with pytest.raises(UserError, match="^csls=True: csls_k=7 neighbours exceed the 6 reference captions in de"):
        ScoringContext(encoder, evaluated, langs, pool).scorer(Ranking(csls=True, csls_k=7))


def test_a_ranking_record_of_the_wrong_form_or_value_is_one_line_naming_its_source():
    """from_dict's own checks, and the constructor's (an unknown head, a negative weight, k = 0) also name the record
    (they said "ranking head 'image': ..." with no file)."""
    cases = [(["text"], r"^sel.json: the ranking is list, expected an object of head, maxsim, csls, csls_k$"),
             ({"head": "text", "k": 3}, r"^sel.json: unknown ranking keys \['k'\] \(expected head, maxsim, csls, "),
             ({"head": "image"}, r"^sel.json: ranking head 'image': expected one of text, cross$"),
             ({"maxsim": -1.0}, r"^sel.json: ranking maxsim -1.0: expected a weight >= 0$"),
             ({"csls": True, "csls_k": 0}, r"^sel.json: ranking csls_k 0: expected a number of neighbours >= 1$")]
    for data, message in cases:
        with pytest.raises(UserError, match=message):
            Ranking.from_dict(data, "sel.json")
    assert Ranking.from_dict({"head": "cross", "maxsim": 2, "csls": True, "csls_k": 4}) == \
        Ranking("cross", 2.0, True, 4)


def test_maxsim_with_too_few_reference_tokens_in_a_language_names_the_reference_and_the_way_out():
    encoder = FakeEncoder(language_offset=3.0)
    texts, langs = _scene_captions([(0, 0), (1, 2)])
    few = ReferencePool(*_scene_captions([(0, 0)]), "pool")  # 3 tokens a language: hubness with 10 neighbours fails
    with pytest.raises(UserError, match=r"^maxsim: per-language hubness k=10 needs more than 10 distinct tokens in "
                                        r"each language's texts; language 'de' has 3 \(the reference captions, pool\); "
                                        r"give a reference split with more captions"):
        ScoringContext(encoder, texts, langs, few).scorer(Ranking(maxsim=1.0)).matrix()


@pytest.mark.parametrize("ranking", [Ranking(maxsim=0.5, csls=True, csls_k=3), Ranking(csls=True, csls_k=3)])
def test_reranking_queries_a_chunk_at_a_time_scores_each_hit_as_alone(ranking, monkeypatch):
    """The chunks after the first share the first's reference statistics (with_sentences): a query's re-scored hits
    are those of a context of that query and its own hits alone, best first."""
    from globetrotter.evaluation.tasks import translate

    monkeypatch.setattr(translate, "QUERY_CHUNK", 2)
    encoder = FakeEncoder(language_offset=3.0)
    reference = ReferencePool(*_scene_captions([(c, s) for c in range(6) for s in range(5) if (c + s) % 2]), "pool")
    queries = [caption("en", c, s) for c, s in ((0, 0), (1, 2), (3, 4), (2, 1), (5, 3))]
    hits = [[(caption("de", (c + d) % 6, s), 0.0) for d in range(3)] for c, s in ((0, 0), (1, 2), (3, 4), (2, 1), (5, 3))]
    got = translate.rerank_hits(encoder, ranking, reference, queries, "en", "de", hits, 256)
    for query, row, scored in zip(queries, hits, got):
        texts = [query] + [text for text, _ in row]
        alone = ScoringContext(encoder, texts, ["en"] + ["de"] * len(row), reference, queries=1)
        expected = alone.scorer(ranking)(np.arange(1))[0]
        want = sorted(zip([text for text, _ in row], expected.tolist()), key=lambda item: -item[1])
        assert [text for text, _ in scored] == [text for text, _ in want]
        np.testing.assert_allclose([s for _, s in scored], [s for _, s in want], atol=1e-5)
