"""Tagging measured: tag truth from held-out captions, Precision@K, the frequency baseline, the tag-eval command."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from globetrotter.errors import UserError
from globetrotter.zeroshot.data import SplitFeatures
from globetrotter.zeroshot.tag_eval import (content_words, evaluate_tagging, frequent_words, image_tag_truth,
                                            precision_at_k)

pytest.importorskip("spacy", reason="tagging truth needs the tagging-eval extra")
pytest.importorskip("jieba", reason="tagging truth needs the tagging-eval extra")


def test_content_words_drop_stop_words_keep_nouns_and_segment_chinese():
    assert content_words("A man and a dog are running on the beach .", "en") == ["man", "dog", "running", "beach"]
    assert content_words("Ein Mann und ein Hund laufen am Strand.", "de") == ["mann", "hund", "laufen", "strand"]
    zh = content_words("一只狗在草地上奔跑。", "zh")
    assert "狗" in zh and "草地" in zh and "在" not in zh and "。" not in zh


def test_truth_is_the_words_most_captions_share():
    captions = ["A dog runs on grass .", "A brown dog on the grass .", "Dog playing outside .",  # image 0
                "Two children swim in a pool ."]  # image 1: one caption, all of its content words
    truth = image_tag_truth(captions, [0, 0, 0, 1], "en")
    assert truth == {0: {"dog", "grass"}, 1: {"children", "swim", "pool"}}
    assert image_tag_truth(captions, [0, 0, 0, 1], "en", min_share=1.0)[0] == {"dog"}
    assert frequent_words(captions, "en", 2) == ["dog", "grass"]
    with pytest.raises(ValueError, match="min_share"):
        image_tag_truth(captions, [0, 0, 0, 1], "en", min_share=0)


def test_precision_at_k_counts_missing_tags_as_wrong_and_skips_images_without_truth():
    got = precision_at_k([["dog", "grass", "cat"], ["pool"], ["x"]], [{"dog", "grass"}, {"pool", "swim"}, set()], k=2)
    assert got["precision@2"] == pytest.approx((1.0 + 0.5) / 2) and got["n_images"] == 2
    with pytest.raises(UserError, match="no image has a true tag"):
        precision_at_k([["a"]], [set()], k=1)


def test_a_tagger_that_reads_the_image_beats_the_frequency_baseline():
    captions = ["a dog on grass", "dog running on grass", "a cat on a sofa", "cat sleeping on the sofa",
                "a dog in the snow", "dog jumping in snow"]
    split = SplitFeatures(texts=captions, langs=np.array(["en"] * 6, dtype=object),
                          groups=np.array([f"g{i // 2}" for i in range(6)], dtype=object),
                          caption_image=np.array([0, 0, 1, 1, 2, 2]), image_keys=["a", "b", "c"],
                          text_features=np.zeros((6, 4), np.float32), image_features=np.eye(3, 4, dtype=np.float32))
    vocab = {"en": frequent_words(captions, "en", 10)}
    assert vocab["en"] == ["dog", "grass", "cat", "sofa", "snow", "running", "sleeping", "jumping"]  # ties: first seen
    truth_tags = {0: ["dog", "grass"], 1: ["cat", "sofa"], 2: ["dog", "snow"]}

    def oracle(features: torch.Tensor, lang: str) -> list[list[str]]:
        return [truth_tags[r] for r in features.argmax(1).tolist()]  # the image's row tells which it is

    def constant(features: torch.Tensor, lang: str) -> list[list[str]]:
        return [["sofa", "snow"]] * len(features)

    scores = evaluate_tagging(split, ["en"], vocab, {"oracle": oracle, "constant": constant}, k=2, n_boot=100)["en"]
    assert scores["n_images"] == 3 and scores["oracle"]["value"] == pytest.approx(1.0)
    assert scores["constant"]["value"] == pytest.approx(2 / 6)
    assert scores["frequency"]["value"] < scores["oracle"]["value"]
    # the baseline tags every image with the vocabulary's first k = 2 words, dog and grass; with 2 captions and
    # min_share 0.5 an image's truth is every content word of either caption (3 words each): dog and grass are
    # both true of image 0, dog of image 2, neither of image 1
    assert scores["frequency"]["value"] == pytest.approx((2 / 2 + 0 / 2 + 1 / 2) / 3)
    assert scores["truth_words"] == pytest.approx(3.0)
    with pytest.raises(UserError, match="no tag vocabulary"):
        evaluate_tagging(split, ["de"], vocab, {"oracle": oracle})


def test_an_image_without_a_true_tag_is_neither_tagged_nor_counted():
    """Image 1's only caption holds stop words alone: no truth, so it is not scored (nor given to the tagger)."""
    split = SplitFeatures(texts=["a dog on grass", "it is there"], langs=np.array(["en", "en"], dtype=object),
                          groups=np.array(["g0", "g1"], dtype=object), caption_image=np.array([0, 1]),
                          image_keys=["a", "b"], text_features=np.zeros((2, 4), np.float32),
                          image_features=np.eye(2, 4, dtype=np.float32))
    seen = []

    def tagger(features: torch.Tensor, lang: str) -> list[list[str]]:
        seen.append(len(features))
        return [["dog"]] * len(features)

    scores = evaluate_tagging(split, ["en"], {"en": ["dog", "grass"]}, {"t": tagger}, k=1, n_boot=10)["en"]
    assert seen == [1] and scores["n_images"] == 1 and scores["t"]["value"] == pytest.approx(1.0)


def test_one_letter_words_are_not_content_words_except_in_segmented_languages():
    """"T shirt" gave the tag "t": words of one letter are dropped (zh words of one character are kept)."""
    assert content_words("Man in a T shirt", "en") == ["man", "shirt"]
    assert "狗" in content_words("一只狗在草地上奔跑。", "zh")


def test_tag_eval_refuses_fewer_candidate_tags_than_k_first(tmp_path, capsys):
    from globetrotter.zeroshot.cli import main

    args = ["tag-eval", "--adapter", str(tmp_path / "none"), "--test", "t", "--vocab-from", "v", "--k", "5"]
    assert main([*args, "--vocab-size", "4"]) == 2
    assert capsys.readouterr().err.startswith("error: --vocab-size 4: fewer candidate tags than --k (5)")
    assert main([*args, "--vocab-size", "5"]) == 2  # 5 candidates are enough: refused later, for the adapter
    assert "not an adapter checkpoint" in capsys.readouterr().err


def test_caption_transfer_tags_vote_among_the_nearest_captions():
    from globetrotter.zeroshot.tagging import caption_transfer_tags

    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    captions = torch.tensor([[1.0, 0.1], [0.9, 0.0], [0.1, 1.0], [0.0, 0.8], [1.0, 1.0]])
    words = [["hund", "gras"], ["hund", "ball"], ["katze"], ["katze", "sofa"], ["hund", "katze"]]
    assert caption_transfer_tags(images, captions, words, neighbours=2, n_tags=2) == [["hund", "ball"],
                                                                                      ["katze", "sofa"]]
    assert caption_transfer_tags(images, captions, words, neighbours=3, n_tags=1) == [["hund"], ["katze"]]
    with pytest.raises(ValueError, match="word lists"):
        caption_transfer_tags(images, captions, words[:2])
    # a word counts once per caption: "gras" said three times by the nearest caption does not outvote "hund", in two
    repeated = [["gras", "gras", "gras"], ["hund"], ["katze"], ["katze"], ["hund"]]
    assert caption_transfer_tags(images[:1], captions, repeated, neighbours=3, n_tags=1) == [["hund"]]


def test_caption_transfer_tags_take_the_images_a_block_at_a_time_as_the_whole_matrix_does(monkeypatch):
    """Blocks of at least 256 images (the last one too): each image's nearest captions, ties included (captions
    sharing an embedding, each with its own words), are those of the whole [images, captions] matrix."""
    from globetrotter.zeroshot import tagging

    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.normal(size=(600, 16)).astype(np.float32))
    captions = torch.from_numpy(rng.normal(size=(40, 16)).astype(np.float32)[rng.integers(0, 40, 120)])
    words = [[f"w{j}" for j in rng.integers(0, 30, 4)] for _ in range(120)]
    whole = tagging.caption_transfer_tags(images, captions, words, neighbours=7, n_tags=3)  # one block
    monkeypatch.setattr(tagging, "SIMILARITY_BLOCK", 1)  # blocks of 256 and 344 images
    assert tagging.caption_transfer_tags(images, captions, words, neighbours=7, n_tags=3) == whole


def test_tag_eval_command_end_to_end(tmp_path, capsys, monkeypatch):
    """Real offline EfficientNet-Lite0 head and features from npy shards, a chance-level text encoder."""
    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import read_manifest
    from globetrotter.zeroshot.adapter import TextToImageAdapter
    from globetrotter.zeroshot.cli import main
    from globetrotter.zeroshot.config import ZeroShotConfig
    from globetrotter.zeroshot.train import save_adapter

    rng = np.random.default_rng(0)
    images = np.abs(rng.normal(size=(4, 1280))).astype(np.float32)
    rows = [("a dog on the grass", "en", 0), ("dog running on grass", "en", 0), ("ein Hund im Gras", "de", 0),
            ("a cat on a sofa", "en", 1), ("eine Katze auf dem Sofa", "de", 1), ("a red car", "en", 2),
            ("ein rotes Auto", "de", 2), ("a boy with a ball", "en", 3), ("ein Junge mit einem Ball", "de", 3)]
    for split in ("test", "train"):  # train: the same photos and captions under other ids (not test's images)
        with ShardWriter(tmp_path / split, split=split, source="test", image_format="npy") as writer:
            for i, (caption, lang, row) in enumerate(rows):
                image_id = f"img{row}" if split == "test" else f"train{row}"
                writer.write(f"s{i}", images[row], caption, lang, image_id=image_id, group=image_id)
    torch.manual_seed(0)
    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0], form="residual"), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "ckpt")
    common = ["--adapter", str(tmp_path / "ckpt"), "--test", str(tmp_path / "test"), "--vocab-from",
              str(tmp_path / "train"), "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--k", "2"]
    assert main(["tag-eval", *common, "--out", str(tmp_path / "t.json")]) == 0
    record = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    # --neighbours 30 of 5 en and 4 de train captions: all of them, said (it was passed over in silence)
    assert record["neighbours"] == 30 and record["neighbours_used"] == {"de": 4, "en": 5}
    out = capsys.readouterr().out
    assert f"note: --neighbours 30: {tmp_path / 'train'} has 4 de captions; using 4" in out
    assert "captions" in out.splitlines()[2]
    assert set(record["scores"]) == {"de", "en"} and record["scores"]["en"]["n_images"] == 4
    assert record["baseline_tags"]["en"][0] == "dog"  # the most frequent content word of the train captions
    for key, split in (("test", "test"), ("vocab_from", "train")):  # each split with its manifest's checksum
        assert record[key]["path"] == str((tmp_path / split).resolve())
        assert record[key]["checksum"] == read_manifest(tmp_path / split)["checksum"] and record[key]["checksum"]
    for scores in record["scores"].values():
        for model in ("captions", "xtd10", "frequency"):
            assert 0.0 <= scores[model]["lo"] <= scores[model]["value"] <= scores[model]["hi"] <= 1.0
    assert main(["tag-eval", *common, "--languages", "fr"]) == 2
    assert "no captions" in capsys.readouterr().err
    same = [*common[:4], "--vocab-from", str(tmp_path / "test"), *common[6:]]
    assert main(["tag-eval", *same]) == 2
    assert "its captions show 4 of the" in capsys.readouterr().err
    # an adapter trained on other text embeddings (12-d, not random:16's 16-d): one line, as retrieval says it (it was
    # a "mat1 and mat2 shapes cannot be multiplied" traceback)
    save_adapter(TextToImageAdapter(12, 1280, [8], [0.0], form="residual"), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "other-text")
    assert main(["tag-eval", "--adapter", str(tmp_path / "other-text"), *common[2:]]) == 2
    assert ("the adapter maps 12-d text embeddings to 1280-d image features, but the encoders give 16-d text"
            in capsys.readouterr().err)

    # a text encoder that puts each caption at its image's features (any other text: a seeded random point) and an
    # identity adapter: the captions tagger finds each test image's own train captions, so it tags every image with
    # its own words
    from globetrotter.zeroshot.cli import tag_eval

    at_image = {caption: images[row] for caption, _, row in rows}

    def embed(_spec, texts, *_args, **_kwargs):
        return np.stack([at_image[t] if t in at_image else
                         np.abs(np.random.default_rng(sum(map(ord, t))).normal(size=1280)) for t in texts])

    monkeypatch.setattr(tag_eval, "embed_cached", embed)
    identity = TextToImageAdapter(1280, 1280, [], [0.0])
    with torch.no_grad():
        identity.blocks[0][0].weight.copy_(torch.eye(1280))
        identity.blocks[0][0].bias.zero_()
    save_adapter(identity, ZeroShotConfig(text_encoder="random:1280"), tmp_path / "identity")
    known = ["--adapter", str(tmp_path / "identity"), *common[2:], "--neighbours", "1"]
    monkeypatch.setattr(tag_eval, "languages_the_encoder_lacks", lambda encoder, codes: ["de"])  # as mUSE lacks cs
    assert main(["tag-eval", *known, "--out", str(tmp_path / "known.json")]) == 0
    assert "note: the text encoder 'random:1280' was not trained on de\n" in capsys.readouterr().out
    record = json.loads((tmp_path / "known.json").read_text(encoding="utf-8"))
    assert record["languages_the_text_encoder_lacks"] == ["de"]
    scores = record["scores"]
    for lang in ("de", "en"):
        assert scores[lang]["captions"]["value"] == pytest.approx(1.0), scores[lang]
        assert scores[lang]["frequency"]["value"] < 1.0
    # 8 de content words in the train captions (ein/eine/im/auf/dem/mit/einem are stop words) and 9 en ones: --k 9
    # is refused for de, naming the split, before any record is written
    assert main(["tag-eval", *known, "--k", "9", "--out", str(tmp_path / "k9.json")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'train'}: fewer than 9 content words in 'de' to tag with" in err and err.count("\n") == 1
    assert not (tmp_path / "k9.json").exists()


def test_a_language_without_stop_words_or_segmenter_and_mismatched_inputs_are_refused():
    """From Python the language is left out of the arguments (no --languages flag there)."""
    with pytest.raises(UserError, match=r"^spaCy has no stop-word list for language 'qq'; leave it out of "
                                        r"the languages given \(lang, langs\)$"):
        content_words("some words", "qq")
    with pytest.raises(UserError, match=r"^no word segmenter for 'ja' \(jieba segments zh\); leave it out of "
                                        r"the languages given \(lang, langs\)$"):
        content_words("犬が走る", "ja")
    with pytest.raises(ValueError, match="2 predictions but 1 truth sets"):
        precision_at_k([["a"], ["b"]], [{"a"}], 1)
    split = SplitFeatures(texts=["a dog"], langs=np.array(["en"], dtype=object), groups=np.array(["g0"], dtype=object),
                          caption_image=np.array([0]), image_keys=["a"], text_features=np.zeros((1, 4), np.float32),
                          image_features=np.eye(1, 4, dtype=np.float32))
    with pytest.raises(UserError, match=r"no captions in 'de' to build its tag truth \(languages: \['en'\]\)"):
        evaluate_tagging(split, ["de"], {"de": ["hund"]}, {"t": lambda f, lang: [["hund"]] * len(f)}, k=1)


def test_tag_eval_tells_the_command_line_to_leave_a_language_out_of_its_languages_flag(tmp_path, capsys):
    """A language the truth cannot be built in is named with the flag that chose it (--languages), as a Python call
    names its arguments."""
    from data_prep.shard_writer import ShardWriter
    from globetrotter.zeroshot.adapter import TextToImageAdapter
    from globetrotter.zeroshot.cli import main
    from globetrotter.zeroshot.config import ZeroShotConfig
    from globetrotter.zeroshot.train import save_adapter

    images = np.abs(np.random.default_rng(0).normal(size=(2, 4))).astype(np.float32)
    rows = [("a dog on the grass", "en", 0), ("草の上の犬", "ja", 0), ("a red car", "en", 1), ("赤い車", "ja", 1)]
    for split in ("test", "train"):
        with ShardWriter(tmp_path / split, split=split, source="test", image_format="npy") as writer:
            for i, (caption, lang, row) in enumerate(rows):
                writer.write(f"s{i}", images[row], caption, lang, image_id=f"{split}{row}", group=f"{split}{row}")
    save_adapter(TextToImageAdapter(16, 4, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "ckpt")
    assert main(["tag-eval", "--adapter", str(tmp_path / "ckpt"), "--test", str(tmp_path / "test"), "--vocab-from",
                 str(tmp_path / "train"), "--languages", "en,ja", "--k", "1", "--cache-dir", str(tmp_path / "cache"),
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == ("error: no word segmenter for 'ja' (jieba segments zh); leave it out of "
                                       "--languages\n")


@pytest.mark.parametrize("share", ["0", "1.5", "nan"])
def test_tag_eval_min_share_is_a_share_in_zero_one(share, tmp_path, capsys):
    from globetrotter.zeroshot.cli import main

    args = ["tag-eval", "--adapter", str(tmp_path / "none"), "--test", "t", "--vocab-from", "v", "--k", "5",
            "--vocab-size", "4"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--min-share", share])
    assert exit_info.value.code == 2 and f"expected a share in (0, 1], got '{share}'" in capsys.readouterr().err
    assert main([*args, "--min-share", "1"]) == 2  # a share of 1 is taken: refused later, for --vocab-size
    assert "--vocab-size 4: fewer candidate tags" in capsys.readouterr().err
