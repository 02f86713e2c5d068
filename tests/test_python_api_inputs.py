"""What a notebook user passes to the metric functions over arrays (``globetrotter.evaluation``'s pure functions and
``backretrieval``'s): lists, other dtypes and unnormalised rows work; a K below 1, non-finite rows, another width,
indices outside the gallery, a str for a list of tokens, a fractional bootstrap or a GPU this machine lacks are one
line naming the argument, never numpy's, faiss' or torch's traceback, nor a silent figure."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import backretrieval as br
import globetrotter
from backretrieval import BackRetrievalError
from globetrotter.errors import UserError
from globetrotter.evaluation import cluster_analysis, retrieval_per_language, retrieval_recall, sentence_translation
from globetrotter.evaluation import mutual_nearest_neighbors, orthogonal_map, purity_scores, rank_word_vectors
from globetrotter.evaluation import refine_multi, refine_pairwise, tfidf_dictionary, word_translation_scores
from globetrotter.evaluation.word import WordSpace

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _parallel(n_groups: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit rows of ``n_groups`` groups in en/de/fr (each group near its own meaning), their languages and groups."""
    rng = np.random.default_rng(seed)
    langs = np.tile(["en", "de", "fr"], n_groups)
    groups = np.repeat(np.arange(n_groups), 3)
    emb = rng.normal(size=(n_groups, 8))[groups] + 0.3 * rng.normal(size=(3 * n_groups, 8))
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), langs, groups


def test_sentence_translation_ranks_by_cosine_whatever_the_rows_norms():
    """The docstring promises cosine ranking; rows of other norms (another model's raw vectors) were ranked by dot
    product, in silence (here 0.49 for 0.96). A list of rows is an array too (it was AttributeError: .shape)."""
    emb, langs, groups = _parallel()
    scaled = emb * np.random.default_rng(1).uniform(0.1, 10, (len(emb), 1))
    unit = sentence_translation(emb, langs, groups)["accuracy"]
    assert sentence_translation(scaled, langs, groups)["accuracy"] == pytest.approx(unit)
    assert sentence_translation(scaled.tolist(), list(langs), list(groups))["accuracy"] == pytest.approx(unit)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_sentence_translation_refuses_a_k_that_is_no_positive_integer(k):
    """k=-1 gave accuracy 1.0 and a negative chance, k=0 0.0, k=1.5 the figure of k=1."""
    emb, langs, groups = _parallel()
    with pytest.raises(ValueError, match=f"^k: expected a positive integer, got {k!r}$"):
        sentence_translation(emb, langs, groups, k=k)


def test_sentence_translation_refuses_non_finite_rows_and_a_1d_array():
    """A NaN row was scored (its query and candidacy lost in silence); a 1-D array said 'scores of 60 rows have shape
    ()'."""
    emb, langs, groups = _parallel()
    emb[4] = np.nan
    with pytest.raises(BackRetrievalError, match="^emb: contains NaN or inf$"):
        sentence_translation(emb, langs, groups)
    with pytest.raises(BackRetrievalError, match=r"^emb: expected a 2-D array \(rows x dim\), got shape \(60,\)$"):
        sentence_translation(emb[:, 0], langs, groups)


def _gallery() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    images = rng.normal(size=(10, 8)).astype(np.float32)
    target = np.arange(20) % 10
    return images[target] + 0.1 * rng.normal(size=(20, 8)).astype(np.float32), images, target


def test_retrieval_recall_refuses_what_numpy_or_faiss_failed_on_or_read_silently():
    text, images, target = _gallery()
    with pytest.raises(BackRetrievalError, match=r"^ks: expected positive integers, got \(0,\)$"):
        retrieval_recall(text, images, target, ks=(0,))  # recall@0 was reported
    with pytest.raises(BackRetrievalError, match=r"^text_emb: expected dimension 4 \(as image_emb\), got 8$"):
        retrieval_recall(text, images[:, :4], target)  # numpy's matmul error
    with pytest.raises(ValueError, match=r"^text_to_image: expected image rows \(integers\) in \[0, 10\), got int64 "
                                         r"values in \[5, 14\]$"):
        retrieval_recall(text, images, target + 5)  # IndexError (negative: bincount's error)
    with pytest.raises(ValueError, match=r"got float64 values in \[0.5, 9.5\]$"):
        retrieval_recall(text, images, target + 0.5)  # read as image 0 to 9
    nan = images.copy()
    nan[3] = np.nan
    with pytest.raises(BackRetrievalError, match="^image_emb: contains NaN or inf$"):
        retrieval_recall(text, nan, target)  # scored
    assert retrieval_recall(text, images, target, ks=5) == retrieval_recall(text, images, target, ks=(5,))
    with pytest.raises(ValueError, match=r"^langs: expected one language per caption \(20\), got shape \(18,\)$"):
        retrieval_per_language(text, ["en", "de"] * 9, images, target)  # numpy's boolean-index IndexError
    with pytest.raises(ValueError, match="^no captions to evaluate$"):
        retrieval_per_language(text[:0], [], images, target[:0])  # StopIteration


def test_cluster_analysis_refuses_no_clusters_non_finite_rows_and_unequal_lengths():
    emb, langs, groups = _parallel()
    with pytest.raises(ValueError, match="^k: expected a positive integer, got 0$"):
        cluster_analysis(emb, langs, groups, k=0)  # faiss' C++ assertion
    nan = emb.copy()
    nan[2] = np.inf
    with pytest.raises(BackRetrievalError, match="^emb: contains NaN or inf$"):
        cluster_analysis(nan, langs, groups, k=5)  # faiss' C++ assertion
    with pytest.raises(ValueError, match="^emb has 60 rows but langs has 59, groups 60; expected one each$"):
        cluster_analysis(emb, langs[:-1], groups, k=5)  # scipy's coo_matrix error
    with pytest.raises(ValueError, match="groups 60 and captions 3; expected one each$"):
        cluster_analysis(emb, langs, groups, captions="abc", k=5)  # IndexError: string index out of range


def test_tfidf_dictionary_refuses_a_sentence_given_as_one_str():
    """A sentence is a list of tokens: "a b" was read as the tokens 'a', ' ', 'b' (a dictionary of characters)."""
    with pytest.raises(TypeError, match=r"^src_sents\[0\]: expected a sentence's list of tokens, got a str \('a b'\)"):
        tfidf_dictionary(["a b", "a c"], [["x", "y"], ["x", "z"]], min_count=1)
    pairs = tfidf_dictionary([["a", "b"], ["a", "c"]], [["x", "y"], ["x", "z"]], min_count=1)
    assert ("a", "x") in {(s, t) for s, t, _ in pairs}


def _world(n: int = 30, d: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.normal(size=(n, d)).astype(np.float32) for name in ("st", "tt", "si", "ti")}


@pytest.mark.parametrize("bootstrap", [2.5, 1e3, True])
def test_bootstrap_must_be_a_whole_number_of_replicates(bootstrap):
    """bootstrap=1e3 (or 2.5) was a TypeError inside numpy's sampling, True one replicate."""
    w = _world()
    said = f"^bootstrap: expected a whole number of replicates, got {bootstrap!r}$"
    with pytest.raises(BackRetrievalError, match=said):
        br.score(w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], bootstrap=bootstrap, progress=False)
    with pytest.raises(BackRetrievalError, match=said):
        br.compare(w["st"], w["tt"], w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], bootstrap=bootstrap)
    with pytest.raises(BackRetrievalError, match=said):
        br.recall_interval(np.ones(5), bootstrap=bootstrap)
    with pytest.raises(BackRetrievalError, match=said):
        br.compare_hits(np.ones(5), np.zeros(5), bootstrap=bootstrap)
    assert br.score(w["st"], w["tt"], src_img=w["si"], tgt_img=w["ti"], bootstrap=np.int64(5), progress=False).intervals


def test_image_neighbours_checks_its_features_as_bkr_recall_does():
    """A NaN source row was listed as neighbour -1 in silence; target features of another width were faiss' bare
    AssertionError."""
    w = _world()
    nan = w["si"].copy()
    nan[2] = np.nan
    with pytest.raises(BackRetrievalError, match=r"^src_img: the array has 1 of 30 rows with NaN or inf \(first: row 2\)"):
        br.image_neighbours(nan, w["ti"])
    with pytest.raises(BackRetrievalError, match=r"^tgt_img: expected dimension 6 \(as src_img\), got 3$"):
        br.image_neighbours(w["si"], w["ti"][:, :3])
    lists = br.image_neighbours(w["si"].astype(np.float16), torch.from_numpy(w["ti"]))
    assert lists.ids.shape[0] == 30 and (lists.ids >= 0).all()


def test_a_tensor_that_requires_grad_is_named_not_torchs_traceback():
    w = _world()
    grad = torch.from_numpy(w["st"]).requires_grad_()
    with pytest.raises(BackRetrievalError, match=r"^src_text: cannot be read as an array \(.*requires grad.*\); give "
                                                 r"tensor\.detach\(\)\.cpu\(\)\.numpy\(\)$"):
        br.bkr_recall(grad, w["si"], w["tt"], w["ti"])
    res = br.bkr_recall(torch.from_numpy(w["st"]), w["si"], w["tt"].tolist(), w["ti"].astype(np.float64), ks=(1, 5))
    assert res["bkr@5"] == br.bkr_recall(w["st"], w["si"], w["tt"], w["ti"], ks=(1, 5))["bkr@5"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a CUDA device")
def test_an_image_model_on_a_gpu_this_machine_lacks_is_refused_when_made():
    """image_feature_extractor(device="cuda") was made, and its first extract raised torch's 'Found no NVIDIA driver'
    RuntimeError; it is refused when made, as globetrotter.load refuses it. Networkless g take no device."""
    with pytest.raises(BackRetrievalError, match="^device: cuda: torch sees no CUDA device on this machine"):
        br.image_feature_extractor(device="cuda")
    assert br.image_feature_extractor("thumbnail:8", device="cuda").kind == "thumbnail"


def test_load_of_a_file_of_a_checkpoint_names_the_folder_to_give(tiny_run, tmp_path):
    """load(".../model.safetensors") said 'no checkpoint found', as of a folder without a model; it says it is a file
    and names its folder when that folder loads."""
    from globetrotter.training.checkpoint import resolve

    ckpt = resolve(tiny_run)
    with pytest.raises(UserError) as err:
        globetrotter.load(ckpt / "model.safetensors")
    assert str(err.value) == (f"{ckpt / 'model.safetensors'}: a file, not a folder (expected a run folder, its "
                              f"checkpoints/, or a checkpoint folder); give the folder it is in, {ckpt}")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=r"notes.txt: a file, not a folder \(expected a run folder, its checkpoints/, "
                                        r"or a checkpoint folder\)$"):
        globetrotter.load(tmp_path / "notes.txt")


def _rotated(n: int = 30, d: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Word vectors ``x`` and a rotated, slightly noisy copy ``y``."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, d))
    return x, x @ np.linalg.qr(rng.normal(size=(d, d)))[0] + 0.01 * rng.normal(size=(n, d))


def test_procrustes_refuses_other_widths_non_finite_rows_and_a_k_below_one():
    """Spaces of different widths were numpy's matmul error in refine_multi and mutual_nearest_neighbors; a NaN row
    ran in silence (its word dropped); k=0 kept the identity and k=-1 gave some other map, both in silence."""
    x, y = _rotated()
    with pytest.raises(BackRetrievalError, match=r"^spaces\[1\]: expected dimension 8 \(as spaces\[0\]\), got 4$"):
        refine_multi([x, y[:, :4]])
    with pytest.raises(BackRetrievalError, match=r"^y: expected dimension 8 \(as x\), got 4$"):
        mutual_nearest_neighbors(x, y[:, :4])
    nan = x.copy()
    nan[3] = np.nan
    with pytest.raises(BackRetrievalError, match="^x: contains NaN or inf$"):
        refine_pairwise(nan, y)
    for k in (0, -1, 1.5):
        with pytest.raises(ValueError, match=f"^k: expected a positive integer, got {k!r}$"):
            refine_pairwise(x, y, k=k)
    with pytest.raises(ValueError, match=r"^seed_pairs: expected row indices \(integers\) in \[0, 30\), got int64 "
                                         r"values in \[40, 44\]$"):
        refine_pairwise(x, y, seed_pairs=(np.arange(5), np.arange(40, 45)))  # numpy's IndexError
    with pytest.raises(ValueError, match=r"^reference: expected a language's position in spaces \(0 to 1\), got 5$"):
        refine_multi([x, y], reference=5)  # IndexError after the first round
    with pytest.raises(ValueError, match=r"^seed_pairs: key \(0, 2\) names no pair of the 2 spaces \(0 to 1\)$"):
        refine_multi([x, y], seed_pairs={(0, 2): (np.arange(5), np.arange(5))})
    with pytest.raises(ValueError, match=r"^weights: expected 30 finite weights >= 0 \(one per row of x\), got shape "
                                         r"\(30,\), values in \[-1.0, -1.0\]$"):
        orthogonal_map(x, y, weights=-np.ones(30))  # scipy's 'array must not contain infs or NaNs'
    res = refine_pairwise(torch.from_numpy(x), y.astype(np.float16).tolist())  # a tensor and a list are arrays
    assert res.anchors[0].size and np.allclose(res.w.T @ res.w, np.eye(8))


def test_word_ranking_refuses_a_nan_vector_and_a_k_that_is_no_positive_integer():
    """By CSLS one NaN query made every target's radius NaN: every query got the same arbitrary list, in silence;
    k=-1 listed every target, recall_k=-1 reported recall@-1 = 1.0."""
    x, y = _rotated()
    nan = x.copy()
    nan[1] = np.nan
    with pytest.raises(BackRetrievalError, match="^queries: contains NaN or inf$"):
        rank_word_vectors(nan, y, k=3, method="csls")
    with pytest.raises(ValueError, match="^k: expected a positive integer, got -1$"):
        rank_word_vectors(x, y, k=-1)
    with pytest.raises(ValueError, match="^csls_k: expected a positive integer, got 0$"):
        rank_word_vectors(x, y, method="csls", csls_k=0)  # numpy's kth out of bounds
    words = [f"w{i}" for i in range(30)]
    src, tgt = WordSpace(words, x), WordSpace(words, y)
    with pytest.raises(ValueError, match="^recall_k: expected a positive integer, got -1$"):
        word_translation_scores(src, tgt, [(w, w) for w in words], recall_k=-1)
    with pytest.raises(ValueError, match="^emb has 30 rows but words has 5; expected one per word$"):
        WordSpace(words[:5], x)  # the 25 rows no word names were candidates
    same = WordSpace(words, 2 * x)
    assert word_translation_scores(src, same, [(w, w) for w in words], ks=5)["all"]["precision@5"] == 1.0


def test_purity_scores_refuses_unequal_lengths():
    with pytest.raises(ValueError, match=r"^labels has shape \(3,\), langs \(4,\), groups \(4,\); expected one label, "
                                         r"language and group per sentence \(at least one\)$"):
        purity_scores([0, 0, 1], ["en", "de", "en", "de"], [0, 0, 1, 1])  # scipy's coo_matrix error


def test_zero_shot_recall_refuses_ks_below_one_targets_outside_the_gallery_and_features_of_other_widths():
    """recall_at_k(ks=(0,)) reported 0.0 and ks=(-1,) too; a target outside the gallery was torch's gather error,
    a fractional one read as its integer part; chance_recall(0) divided by zero and -3 gave a negative chance; text
    features of another width than the adapter's were torch's 'mat1 and mat2 shapes cannot be multiplied'."""
    from globetrotter.zeroshot import TextToImageAdapter, chance_recall, recall_at_k, zero_shot_recall

    text, images, target = _gallery()
    with pytest.raises(BackRetrievalError, match=r"^ks: expected positive integers, got \(0,\)$"):
        recall_at_k(text, images, target, ks=(0,))
    with pytest.raises(ValueError, match=r"^targets: expected image rows \(integers\) in \[0, 10\), got int64 values in "
                                         r"\[5, 14\]$"):
        recall_at_k(text, images, target + 5)
    with pytest.raises(ValueError, match=r"got float64 values in \[0.5, 9.5\]$"):
        recall_at_k(text, images, target + 0.5)
    with pytest.raises(ValueError, match=r"^queries and images: expected 2-D arrays \(rows x dim\), got shapes \(20,\) "
                                         r"and \(10,\)$"):
        recall_at_k(text[:, 0], images[:, 0], target)  # IndexError: tuple index out of range
    for n in (0, -3, 2.5):
        with pytest.raises(ValueError, match=f"^n_images: expected a positive integer, got {n!r}$"):
            chance_recall(n)
    assert chance_recall(10, ks=5) == {"image_retrieval_recall@5": 0.5}  # one K, as recall_at_k takes it
    assert recall_at_k(torch.from_numpy(text), images.tolist(), list(target), ks=1) == {"image_retrieval_recall@1": 1.0}
    torch.manual_seed(0)
    adapter = TextToImageAdapter(6, 8)
    with pytest.raises(UserError, match=r"^text_features\['en'\]: the adapter maps 6-d text embeddings to 8-d image "
                                        r"features, but the encoders give 8-d text and 8-d image features$"):
        zero_shot_recall(adapter, {"en": torch.from_numpy(text)}, {"en": target}, torch.from_numpy(images))


def test_corr_interval_refuses_nan_distances_and_pairs_of_queries_outside_the_sample():
    """A NaN distance made CORR 0.0 with interval [0, 0] in silence; a query index outside [0, n_queries) was numpy's
    matmul or bincount error, a fractional one read as its integer part; lengths that differ numpy's broadcast error."""
    rng = np.random.default_rng(4)
    text = rng.random(50)
    image, query = text + 0.1 * rng.random(50), np.arange(50) % 10
    nan = text.copy()
    nan[3] = np.nan
    with pytest.raises(BackRetrievalError, match="^text_dist, image_dist: contain NaN or inf; expected finite distances$"):
        br.corr_interval(nan, image, query, 10, bootstrap=20)
    with pytest.raises(BackRetrievalError, match=r"^query_of_pair: expected query indices \(integers\) in \[0, 10\), got "
                                                 r"int64 values in \[5, 14\]$"):
        br.corr_interval(text, image, query + 5, 10, bootstrap=20)
    with pytest.raises(BackRetrievalError, match=r"got float64 values in \[0.5, 9.5\]$"):
        br.corr_interval(text, image, query + 0.5, 10, bootstrap=20)
    with pytest.raises(BackRetrievalError, match=r"^text_dist, image_dist, query_of_pair: expected one value per pair "
                                                 r"\(1-D, one length\), got shapes \(50,\), \(40,\), \(50,\)$"):
        br.corr_interval(text, image[:40], query, 10, bootstrap=20)
    assert br.corr_interval(torch.from_numpy(text), image.tolist(), query, 10, bootstrap=20)["value"] > 0.9


def test_hubness_and_protocol_counts_must_be_whole_numbers():
    """hubness_stats(top=0) took one hub in silence and top=2 was a NaN conversion error, n_targets=2.5 numpy's error;
    run_protocol(n=10.5) ran with 10 and seeds="12" with the seeds 1 and 2, seeds=2.0 was 'float is not iterable';
    sample_non_matching(10, 2.5, 0) a slice error."""
    with pytest.raises(BackRetrievalError, match=r"^top: expected the share of targets that are hubs, in \(0, 1\], got 0$"):
        br.hubness_stats([0, 0, 1, 2], 5, top=0)
    with pytest.raises(BackRetrievalError, match="^n_targets: expected a positive integer, got 4.5$"):
        br.hubness_stats([0, 0, 1, 2], 4.5)
    with pytest.raises(BackRetrievalError, match="^n=2.5: expected a whole number$"):
        br.sample_non_matching(10, 2.5, 0)
    rng = np.random.default_rng(5)
    images = rng.normal(size=(40, 6))
    models = {"a": (images @ rng.normal(size=(6, 5)), (images @ rng.normal(size=(6, 5))).tolist())}
    with pytest.raises(BackRetrievalError, match="^n=10.5: expected a whole number of items per side$"):
        br.run_protocol(models, images, n=10.5, seeds=1, progress=False)
    for seeds in ("12", 2.0, True):
        with pytest.raises(BackRetrievalError, match=f"^seeds={seeds!r}: expected a number of seeds or a list of "
                                                     "integer seeds$"):
            br.run_protocol(models, images, seeds=seeds, progress=False)
    with pytest.raises(BackRetrievalError, match=r"^image_feats: expected a 2-D array \(rows x dim\), got shape \(40,\)$"):
        br.run_protocol(models, images[:, 0], seeds=1, progress=False)  # numpy's einsum error
    assert br.run_protocol(models, images, seeds=[3], ks=(1,), progress=False)["seeds"] == [3]  # a list of rows


def test_load_refuses_a_prefer_best_that_is_no_bool(tiny_run):
    """prefer_best="no" (or "False") was read as true: the best checkpoint was loaded whatever it said."""
    with pytest.raises(UserError, match="^prefer_best: expected True or False, got 'no'$"):
        globetrotter.load(tiny_run, prefer_best="no")


def test_tagging_and_the_cross_lingual_loss_refuse_a_str_for_a_list_and_k_below_one():
    """tag_images read an image's tags "dog" as the tags 'd', 'o', 'g' and a vocabulary "xyz" as 'x', 'y', 'z';
    cross_lingual_knn_loss(k=0) was 0 for every document, in silence."""
    from globetrotter.zeroshot import cross_lingual_knn_loss, tag_images

    torch.manual_seed(0)
    images = torch.randn(2, 8)

    def embed(tags: list[str]) -> torch.Tensor:
        return torch.randn(len(tags), 8)

    with pytest.raises(BackRetrievalError, match=r"^source_tags\[0\]: expected a sequence of tags, got one str \('dog'\)"):
        tag_images(images, ["dog", ["cat"]], embed, {"de": ["Hund", "Katze"]})
    with pytest.raises(BackRetrievalError, match=r"^target_vocabularies\['de'\]: expected a sequence of tags, got one "
                                                 r"str \('xyz'\)"):
        tag_images(images, [["dog"], ["cat"]], embed, {"de": "xyz"})
    assert [len(row) for row in tag_images(images, [["dog"], ["cat"]], embed, {"de": ["Hund", "Katze"]})["de"]] == [1, 1]
    body, title, langs = torch.randn(6, 4), torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="^k: expected a positive integer, got 0$"):
        cross_lingual_knn_loss(body, title, langs, k=0)


def test_zero_shot_recall_takes_numpy_features_and_names_a_language_without_targets():
    """Numpy text features were AttributeError: 'numpy.ndarray' object has no attribute 'to' (the docstring said
    tensors), a list of rows 'no attribute shape'; a language of text_features missing from targets KeyError: 'de'; a
    1-D tensor's length was read as its width."""
    from globetrotter.zeroshot import TextToImageAdapter, zero_shot_recall

    torch.manual_seed(0)
    adapter = TextToImageAdapter(6, 8)
    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(20, 6)).astype(np.float32), rng.normal(size=(10, 8)).astype(np.float32)
    target = np.arange(20) % 10
    tensors = zero_shot_recall(adapter, {"en": torch.from_numpy(text)}, {"en": target}, torch.from_numpy(images))
    assert zero_shot_recall(adapter, {"en": text}, {"en": target}, images) == tensors
    assert zero_shot_recall(adapter, {"en": text.tolist()}, {"en": target}, images.tolist()) == tensors
    with pytest.raises(UserError, match=r"^targets: no image rows for \['de'\] \(text_features has \['en', 'de'\], "
                                        r"targets \['en'\]\); expected one entry per language of text_features$"):
        zero_shot_recall(adapter, {"en": text, "de": text}, {"en": target}, images)
    with pytest.raises(UserError, match=r"^text_features\['en'\]: expected a 2-D array \(rows x dim\), got shape \(20,\)$"):
        zero_shot_recall(adapter, {"en": torch.from_numpy(text[:, 0])}, {"en": target}, images)
    with pytest.raises(UserError, match="^text_features: expected a dict of language -> rows, got a Tensor$"):
        zero_shot_recall(adapter, torch.from_numpy(text), {"en": target}, images)


def test_assign_target_tags_refuses_tags_outside_the_vocabulary_and_other_widths_and_takes_an_empty_vocabulary():
    """A tag index past the source vocabulary was torch's IndexError (-2 a pad in silence, 1.0 'tensors used as
    indices must be long'); embeddings of another width 'mat1 and mat2 shapes cannot be multiplied'; an empty target
    vocabulary argmax's 'Expected reduction dim 1 to have non-zero size' (now every slot -1, as when the vocabulary is
    used up); numpy inputs 'isfinite(): argument must be Tensor'."""
    from globetrotter.zeroshot import assign_target_tags, tag_images

    torch.manual_seed(0)
    img, src, tgt = torch.randn(3, 8), torch.randn(5, 8), torch.randn(4, 8)
    tags = torch.tensor([[0, 1], [2, -1], [3, 4]])
    chosen = assign_target_tags(img, tags, src, tgt)
    for bad, shown in (([[0, 7], [2, -1], [3, 4]], r"torch.int64 values in \[-1, 7\]"),
                       ([[0, -2], [2, -1], [3, 4]], r"torch.int64 values in \[-2, 4\]"),
                       (tags.float().tolist(), r"torch.float32 values in \[-1.0, 4.0\]")):
        with pytest.raises(ValueError, match=r"^source_tags: expected rows of source_embeddings \(integers\) in \[0, 5\) "
                                             rf"or -1 \(padding\), got {shown}$"):
            assign_target_tags(img, torch.tensor(bad), src, tgt)
    with pytest.raises(ValueError, match=r"^target tag embeddings: expected \[rows, 8\] \(the image features' width\), "
                                         r"got \(4, 4\)$"):
        assign_target_tags(img, tags, src, tgt[:, :4])
    assert (assign_target_tags(img, tags, src, tgt[:0]) == -1).all()
    assert torch.equal(assign_target_tags(img.numpy(), tags.numpy(), src.numpy(), tgt.numpy()), chosen)

    def embed(words: list[str]) -> torch.Tensor:
        return torch.randn(len(words), 8)

    assert tag_images(img, [["a"], ["b"], ["c"]], embed, {"de": []}) == {"de": [[], [], []]}


def test_the_protocols_correlation_names_a_k_its_records_lack_and_refuses_no_models_or_pairs():
    """correlate_over_models with a K the records lack was KeyError: 'xlr@10', one K as an int 'int object is not
    iterable'; run_protocol({}) returned an empty result and bootstrap=-1 ran with no intervals, in silence;
    corr_interval of no pairs was CORR 0 with numpy's 'Degrees of freedom <= 0' RuntimeWarning."""
    from backretrieval.protocol import correlate_over_models

    rng = np.random.default_rng(5)
    images = rng.normal(size=(40, 6))
    models = {"a": (images @ rng.normal(size=(6, 5)), images @ rng.normal(size=(6, 5))),
              "b": (rng.normal(size=(40, 5)), rng.normal(size=(40, 5)))}
    res = br.run_protocol(models, images, seeds=2, ks=(1, 5), progress=False)
    per_model = {name: entry["per_seed"] for name, entry in res["models"].items()}
    with pytest.raises(BackRetrievalError, match=r"^per_model\['a'\]\[0\]: no 'xlr@10' \(the record holds K = \[1, 5\]\); "
                                                 r"expected a protocol_seed record of every K in ks \[10\]$"):
        correlate_over_models(per_model, (10,))
    assert correlate_over_models(per_model, 5) == correlate_over_models(per_model, (5,))
    with pytest.raises(BackRetrievalError, match=r"^models: expected at least one model \(name -> \(source, target\) "
                                                 r"embeddings\), got none$"):
        br.run_protocol({}, images, seeds=1, progress=False)
    with pytest.raises(BackRetrievalError, match=r"^bootstrap: expected a number of replicates >= 0 \(0: no intervals\), "
                                                 r"got -1$"):
        br.run_protocol(models, images, seeds=1, bootstrap=-1, progress=False)
    with pytest.raises(BackRetrievalError, match="^text_dist, image_dist, query_of_pair: no pairs; expected at least one "
                                                 "pair$"):
        br.corr_interval([], [], [], 10, bootstrap=20)
    with pytest.raises(BackRetrievalError, match="^n_queries: expected a positive integer, got 2.5$"):
        br.corr_interval([0.1, 0.2, 0.3], [0.1, 0.3, 0.2], [0, 1, 1], 2.5, bootstrap=20)  # bincount's TypeError


def test_a_ranking_and_the_selection_grid_refuse_values_of_another_type():
    """Ranking(csls_k=2.5) was made (numpy's 'Partition index must be integer' when scored), csls="no" read as true,
    maxsim="1" a TypeError of '<='; select_ranking(maxsim=0.5) or csls=True was 'object is not iterable',
    max_per_lang=0 its default in silence; reference_size=-1 or 2.5 numpy's error (select and sentence); a str
    for the sentence ranking AttributeError: no needs_statistics."""
    from globetrotter.evaluation import Ranking, evaluate_sentence_translation, select_ranking

    for fields, said in (({"csls": True, "csls_k": 2.5}, "csls_k 2.5: expected a number of neighbours >= 1"),
                         ({"csls": "no"}, "csls 'no': expected True or False"),
                         ({"maxsim": "1"}, "maxsim '1': expected a weight >= 0")):
        with pytest.raises(UserError, match=f"^ranking {said}$"):
            Ranking(**fields)
    assert Ranking(maxsim=np.float64(1.0), csls=True, csls_k=np.int64(3)).needs_statistics
    for grid, said in (({"maxsim": 0.5}, "maxsim: expected a sequence of the values to try, got one float (0.5)"),
                       ({"csls": True}, "csls: expected a sequence of the values to try, got one bool (True)")):
        with pytest.raises(TypeError, match=rf"^{re.escape(said)}; wrap it in a list$"):
            select_ranking("runs/none", "val", **grid)
    for count in ({"max_per_lang": 0}, {"reference_size": -1}, {"reference_size": 2.5}):
        (name, value), = count.items()
        with pytest.raises(UserError, match=f"^{name}: expected a positive integer, got {value}$"):
            select_ranking("runs/none", "val", **count)
    with pytest.raises(UserError, match="^reference_size: expected a positive integer, got 2.5$"):
        evaluate_sentence_translation("runs/none", "test", reference_size=2.5)
    with pytest.raises(UserError, match=r"^ranking: expected a Ranking \(head, maxsim, csls, csls_k\), got str 'csls'; an "
                                        r"eval.py select record goes in as choice=Choice.from_record\(record\)$"):
        evaluate_sentence_translation("runs/none", "test", ranking="csls")


def test_parallel_set_and_read_reference_refuse_a_path_a_str_for_a_list_and_counts_below_one(tiny_world):
    """parallel_set(split_folder) was AttributeError: 'str' object has no attribute 'get', languages "en,ru" its
    letters, n_groups=0 an empty set in silence and 2.5 numpy's error; read_reference(max_per_lang=0) said the split
    had no reference text."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation import parallel_set, read_reference

    test = tiny_world / "test"
    with pytest.raises(TypeError, match=r"^metas: expected a sequence of caption dicts \(data_prep.shards.read_captions"
                                        r"\(split\)\), got one PosixPath \("):
        parallel_set(test)
    metas = read_captions(test)
    with pytest.raises(TypeError, match=r"^languages: expected a sequence of language codes, got one str \('en,ru'\)"):
        parallel_set(metas, "en,ru")
    for n in (0, 2.5):
        with pytest.raises(BackRetrievalError, match=f"^n_groups: expected a positive integer, got {n}$"):
            parallel_set(metas, n_groups=n)
    assert len(parallel_set(metas, ("en", "ru"), n_groups=3).captions) == 6
    with pytest.raises(UserError, match="^max_per_lang: expected a positive integer, got 0$"):
        read_reference(tiny_world / "train", ["en"], 0)


def test_translation_refuses_a_list_for_one_language_a_ranking_object_an_index_file_and_unknown_word_options(tiny_run):
    """to=["ru"] was 'unhashable type: list'; translate_sentences(ranking=Ranking()) AttributeError: no .ranking;
    index=FILE FileExistsError once the corpus was encoded; translate_words(method="cos") ranked by cosine and
    embeddings="output" (as evaluate_word_translation's, and its candidates="all") read as another value, in
    silence."""
    from globetrotter.evaluation import Ranking, evaluate_word_translation, translate_sentences, translate_words

    test = tiny_run.parent.parent / "world-missing"  # never read: each call stops before its corpus
    quiet = {"log": lambda _: None}
    with pytest.raises(TypeError, match=r"^to: expected one language code \(a str\), got list \['ru'\]$"):
        translate_sentences(tiny_run, ["red"], to=["ru"], corpus=test, **quiet)
    with pytest.raises(UserError, match=r"^ranking: expected an eval.py select record \(its path\) or its Choice, got "
                                        r"Ranking "):
        translate_sentences(tiny_run, ["red"], to="ru", corpus=test, ranking=Ranking(), **quiet)
    with pytest.raises(ValueError, match="^method must be 'nn' or 'csls', got 'cos'$"):
        translate_words(tiny_run, ["red"], to="ru", method="cos", **quiet)
    with pytest.raises(ValueError, match="^candidates must be 'dictionary' or 'split', got 'all'$"):
        evaluate_word_translation(tiny_run, test, candidates="all")
    with pytest.raises(ValueError, match="^embeddings must be 'input' or 'contextual', got 'output'$"):
        translate_words(tiny_run, ["red"], to="ru", embeddings="output", **quiet)
    config = tiny_run / "config.yaml"
    with pytest.raises(UserError, match=f"^{re.escape(str(config))}: a file, not a folder; expected the folder the index "
                                        r"is saved in \(or none yet\)$"):
        translate_sentences(tiny_run, ["red"], to="en", corpus=config, index=config, **quiet)


def test_evaluate_pairs_refuses_a_fractional_max_per_lang():
    """max_per_lang=2.5 was numpy's 'expected a sequence of integers or a single integer' TypeError."""
    rng = np.random.default_rng(0)
    langs, ids = np.tile(["en", "de"], 30), np.repeat(np.arange(30), 2).astype(str)
    images = rng.normal(size=(60, 8))
    with pytest.raises(BackRetrievalError, match="^max_per_lang 2.5: expected at least 1 caption per side$"):
        br.evaluate_pairs(images[:, :6], langs, images, ids, max_per_lang=2.5)
    assert br.evaluate_pairs(images[:, :6], langs, images, ids, ks=(1,), max_per_lang=np.int64(20))["pairs"]


def test_a_seed_a_str_for_languages_and_fractional_word_counts_are_named(tiny_world):
    """seed=1.5 (sentence, cluster, word samples) was numpy's SeedSequence TypeError; read_reference(split, "en") said
    the split had no caption in 'e,n'; min_count=2.5 was taken as 3 in silence, procrustes_iter=2.5 (n_iter) range's
    TypeError."""
    from data_prep.shards import read_captions
    from globetrotter.evaluation import evaluate_word_translation, parallel_set, read_reference

    metas = read_captions(tiny_world / "test")
    for seed, said in ((1.5, "1.5"), (-1, "-1")):
        with pytest.raises(BackRetrievalError, match=f"^seed: expected an integer >= 0, got {said}$"):
            parallel_set(metas, n_groups=3, seed=seed)
    assert parallel_set(metas, n_groups=3, seed=np.int64(2)).captions == parallel_set(metas, n_groups=3, seed=2).captions
    with pytest.raises(BackRetrievalError, match=r"^languages: expected a sequence of language codes, got one str "
                                                 r"\('en'\); wrap it in a list$"):
        read_reference(tiny_world / "train", "en")
    for count in ("min_count", "procrustes_iter", "procrustes_k", "top_k"):
        with pytest.raises(UserError, match=f"^{count}: expected a positive integer, got 2.5$"):
            evaluate_word_translation("runs/none", tiny_world / "test", procrustes=["pairwise"], **{count: 2.5})
    with pytest.raises(BackRetrievalError, match="^min_count: expected a positive integer, got 2.5$"):
        tfidf_dictionary([["a", "b"], ["a", "c"]], [["x", "y"], ["x", "z"]], min_count=2.5)
    x, y = _rotated()
    with pytest.raises(BackRetrievalError, match="^n_iter: expected a positive integer, got 2.5$"):
        refine_pairwise(x, y, n_iter=2.5)
    with pytest.raises(BackRetrievalError, match="^inner_iter: expected a positive integer, got 0$"):
        refine_multi([x, y], inner_iter=0)


def test_run_protocol_names_a_model_given_as_one_array_instead_of_a_pair():
    """{"a": emb} was read as the pair (emb[0], emb[1]): 'model a: 5 source / 5 target embeddings for 40 images'."""
    rng = np.random.default_rng(5)
    images = rng.normal(size=(40, 6))
    with pytest.raises(BackRetrievalError, match=r"^models\['a'\]: expected a \(source, target\) pair of embeddings, "
                                                 r"got one ndarray$"):
        br.run_protocol({"a": images @ rng.normal(size=(6, 5))}, images, seeds=1, progress=False)
    with pytest.raises(BackRetrievalError, match=r"^models\['a'\]: expected a \(source, target\) pair of embeddings, "
                                                 r"got 3 items$"):
        br.run_protocol({"a": (images, images, images)}, images, seeds=1, progress=False)


def test_zero_shot_training_takes_numpy_and_refuses_what_trained_nothing_or_the_wrong_image():
    """train_adapter never validated a config made in Python: epochs=0 or batch_size=1 returned an untrained adapter in
    silence, batch_size=2.5 a slice error; caption_image -1 was the last image in silence, 10 of 10 images torch's
    IndexError; a NaN caption 'the loss is nan ...; lower optim.lr'; numpy inputs (train_siamese's too) 'no attribute
    to'/'must be Tensor'; train_siamese trained on NaN titles in silence, epochs=1.5 was range's TypeError."""
    from globetrotter.zeroshot import ZeroShotConfig, train_adapter, train_siamese
    from globetrotter.zeroshot.config import OptimConfig
    from globetrotter.zeroshot.triplet import TripletConfig

    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(20, 6)).astype(np.float32), rng.normal(size=(10, 8)).astype(np.float32)
    target = np.arange(20) % 10
    config = ZeroShotConfig(optim=OptimConfig(epochs=1, batch_size=8))
    _, tensors = train_adapter(torch.from_numpy(text), torch.from_numpy(images), torch.from_numpy(target), config,
                               progress=False)
    assert train_adapter(text, images, target, config, progress=False)[1].loss == tensors.loss
    for optim, said in (({"epochs": 0}, "optim.epochs must be an integer >= 1, got 0"),
                        ({"batch_size": 1}, "optim.batch_size must be an integer >= 2"),
                        ({"batch_size": 2.5}, "optim.batch_size must be an integer >= 2")):
        with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
            train_adapter(text, images, target, ZeroShotConfig(optim=OptimConfig(**optim)), progress=False)
    for rows, shown in ((target - 1, r"int64 values in \[-1, 8\]"), (target + 1, r"int64 values in \[1, 10\]")):
        with pytest.raises(ValueError, match=rf"^caption_image: expected image rows \(integers\) in \[0, 10\), got "
                                             rf"torch.{shown}$"):
            train_adapter(text, images, rows, config, progress=False)
    nan = text.copy()
    nan[3] = np.nan
    with pytest.raises(UserError, match="^text_features: contains NaN or inf$"):
        train_adapter(nan, images, target, config, progress=False)
    langs = np.arange(20) % 2
    triplet = TripletConfig(hidden_dim=4, out_dim=4, batch_size=8, epochs=1)
    _, history = train_siamese(torch.from_numpy(text), torch.from_numpy(text[::-1].copy()), torch.from_numpy(langs),
                               triplet, progress=False)
    assert train_siamese(text, text[::-1].copy(), langs, triplet, progress=False)[1].train == history.train
    with pytest.raises(UserError, match="^title: contains NaN or inf$"):
        train_siamese(nan, text, langs, triplet, progress=False)
    with pytest.raises(ValueError, match="^epochs must be an integer >= 1, got 1.5$"):
        train_siamese(text, text, langs, TripletConfig(epochs=1.5), progress=False)


def test_backretrieval_embedders_and_split_options_refuse_a_str_for_a_list_and_fractional_counts(tmp_path):
    """An embedder's encode("a b") embedded the 3 characters in silence; correlate_split(pairs="en-ru") said 'got 'e'';
    corr_pairs=2.5 was numpy's TypeError, csls_k=2.5 taken in silence."""
    for spec in ("random:8", "noisy:0.1:random:8"):
        with pytest.raises(BackRetrievalError, match=r"^texts: expected a sequence of texts, got one str \('a b'\); "
                                                     r"wrap it in a list$"):
            br.load_embedder(spec).encode("a b")
    assert br.load_embedder("random:8").encode(("a b",)).shape == (1, 8)
    with pytest.raises(BackRetrievalError, match=r"^pairs: expected a sequence of language pairs \(SRC-TGT\), got one "
                                                 r"str \('en-ru'\); wrap it in a list$"):
        br.correlate_split(tmp_path / "missing", ["random:8", "random:4"], pairs="en-ru", progress=False)
    w = _world()
    with pytest.raises(BackRetrievalError, match="^csls_k: expected a positive number of neighbours, got 2.5$"):
        br.bkr_recall(w["st"], w["si"], w["tt"], w["ti"], retrieval="csls", csls_k=2.5)
    with pytest.raises(BackRetrievalError, match="^corr: corr_pairs must be an integer >= 1, got 2.5$"):
        br.corr_score(w["st"], w["si"], w["tt"], w["ti"], corr_pairs=2.5)


def test_evaluate_correspondence_refuses_counts_and_seeds_before_reading_anything():
    """epochs=0 (or -1) and probe_batch_size=-1 gave an untrained probe's figures in silence, probe_batch_size=0 a
    ZeroDivisionError, 2.5 torch's scheduler error, max_per_lang=2.5 a slice error; probe_seeds=() numpy's NaN error,
    probe_seeds=3 'int' object is not iterable."""
    from globetrotter.evaluation import evaluate_correspondence

    for name, value in (("epochs", 0), ("epochs", -1), ("epochs", 2.5), ("probe_batch_size", 0),
                        ("probe_batch_size", -1), ("max_per_lang", 2.5), ("max_per_lang", -1)):
        with pytest.raises(UserError, match=rf"^{name}: expected a positive integer, got {value}$"):
            evaluate_correspondence("unused-run", "unused-split", **{name: value})
    for seeds in ((), 3, [0, 1.5]):
        with pytest.raises(UserError, match=rf"^probe_seeds: expected a non-empty sequence of integers, got "
                                            rf"{re.escape(repr(seeds))}$"):
            evaluate_correspondence("unused-run", "unused-split", probe_seeds=seeds)


def test_evaluate_generation_refuses_a_dict_for_the_decoder_and_sizes_that_are_no_positive_integers():
    """decoder={...} was 'no attribute lr'; 0 layers or steps a figure in silence, 0 heads a ZeroDivisionError, -1
    or 2.5 torch's shape errors; show=2.5 range's TypeError; target=['en'] 'no caption in target language ['en']'."""
    from dataclasses import replace

    from globetrotter.evaluation import evaluate_generation
    from globetrotter.evaluation.generation import DecoderConfig

    with pytest.raises(TypeError, match=r"^decoder: expected a DecoderConfig \(globetrotter.evaluation.generation\), "
                                        r"got dict; build one as DecoderConfig\(\*\*settings\)$"):
        evaluate_generation("unused-run", "unused-split", "unused-train", decoder={"steps": 2})
    for size, value in (("layers", 0), ("steps", -1), ("heads", 0), ("prefix_length", 2.5), ("batch_size", 0)):
        with pytest.raises(UserError, match=rf"^decoder.{size}: expected a positive integer, got {value}$"):
            evaluate_generation("unused-run", "unused-split", "unused-train",
                                decoder=replace(DecoderConfig(), **{size: value}))
    with pytest.raises(UserError, match=r"^show=2.5: expected a number of examples >= 0$"):
        evaluate_generation("unused-run", "unused-split", "unused-train", show=2.5)
    with pytest.raises(TypeError, match=r"^target: expected one language code \(a str\), got list \['en'\]$"):
        evaluate_generation("unused-run", "unused-split", "unused-train", target=["en"])


def test_train_adapter_refuses_a_dict_for_its_config_and_names_the_loaders():
    """config={...} was AttributeError: 'dict' object has no attribute 'adapter'."""
    from globetrotter.config_io import from_dict
    from globetrotter.zeroshot import ZeroShotConfig, train_adapter

    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(20, 6)).astype(np.float32), rng.normal(size=(10, 8)).astype(np.float32)
    settings = {"optim": {"epochs": 1, "batch_size": 8}}
    with pytest.raises(TypeError, match=r"^config: expected a ZeroShotConfig, got dict; build one from a dict with "
                                        r"globetrotter\.config_io\.from_dict\(ZeroShotConfig, settings\), or from YAML "
                                        r"with load_config\(ZeroShotConfig, 'configs/zeroshot/xtd10\.yaml'\)$"):
        train_adapter(text, images, np.arange(20) % 10, settings, progress=False)
    assert train_adapter(text, images, np.arange(20) % 10, from_dict(ZeroShotConfig, settings), progress=False)[1].loss
