"""Zero-shot multilingual image tagging (XTD10 3.3.2, eqs. 3-5)."""
from __future__ import annotations

import io
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from backretrieval import BackRetrievalWarning
from backretrieval.errors import cli_option_names
from globetrotter.errors import UserError
from globetrotter.zeroshot.adapter import TextToImageAdapter
from globetrotter.zeroshot.cli import main
from globetrotter.zeroshot.config import ZeroShotConfig
from globetrotter.zeroshot.tagging import (
    assign_target_tags,
    caption_transfer_tags,
    imagenet_class_names,
    index_source_tags,
    read_tag_vocabulary,
    tag_images,
    top_k_source_tags,
)
from globetrotter.zeroshot.train import save_adapter


pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEASON, COIL = [1.0, 0.0], [0.0, 1.0]
SPRING = [1 / math.sqrt(2), 1 / math.sqrt(2)]  # the ambiguous English tag, halfway between both senses


def test_the_image_decides_between_the_senses_of_an_ambiguous_tag():
    targets = torch.tensor([SEASON, COIL])  # "printemps", "ressort"
    images = torch.tensor([[0.9, 0.1], [0.1, 0.9]])  # a blossom photo, a photo of a metal coil
    chosen = assign_target_tags(images, torch.tensor([[0], [0]]), torch.tensor([SPRING]), targets)
    assert chosen.tolist() == [[0], [1]]
    # hand-computed eq. (5) for image 0: 0.65*cos(img, T) + 0.35*cos(S, T)
    cos_img = 0.9 / math.hypot(0.9, 0.1)
    season = 0.65 * cos_img + 0.35 * SPRING[0]
    coil = 0.65 * (0.1 / math.hypot(0.9, 0.1)) + 0.35 * SPRING[1]
    assert season > coil
    # without the image term (W1 = 0) the tie goes to the first tag for both images
    assert assign_target_tags(images, torch.tensor([[0], [0]]), torch.tensor([SPRING]), targets, w1=0.0, w2=1.0).tolist() == [[0], [0]]


def test_no_target_tag_is_used_twice_and_padding_is_kept():
    targets = torch.tensor([SEASON, COIL])
    image = torch.tensor([[0.9, 0.1]])
    # the same source tag twice, then padding: the second copy gets the next best tag
    chosen = assign_target_tags(image, torch.tensor([[0, 0, -1]]), torch.tensor([SPRING]), targets)
    assert chosen.tolist() == [[0, 1, -1]]
    # more source tags than target tags: the vocabulary runs out
    chosen = assign_target_tags(image, torch.tensor([[0, 0, 0]]), torch.tensor([SPRING]), targets)
    assert chosen.tolist() == [[0, 1, -1]]


def test_a_padded_slot_gets_no_tag_while_target_tags_are_left():
    """-1 pads a row with fewer source tags: its slot stays -1 (no tag) even when unused target tags remain."""
    targets = torch.tensor([SEASON, COIL, [1.0, 1.0]])
    images = torch.tensor([[0.9, 0.1], [0.1, 0.9]])
    chosen = assign_target_tags(images, torch.tensor([[0, -1], [0, 0]]), torch.tensor([SPRING]), targets)
    assert chosen[0, 1] == -1 and (chosen[1] >= 0).all() and chosen[1, 0] != chosen[1, 1]


def test_nan_weights_or_embeddings_are_refused_not_ranked(tmp_path, capsys):
    """A NaN weight (``--w1 nan`` parsed as a float) or a NaN embedding made the scores NaN: the tags silently
    vanished, or a NaN caption became every image's nearest. Now a one-line error naming the value: as the Python
    argument (``w1=nan``) from Python, as the flag (``--w1 nan``) from the command line."""
    targets, image, source = torch.tensor([SEASON, COIL]), torch.tensor([[0.9, 0.1]]), torch.tensor([SPRING])
    for w1, w2, bad in ((math.nan, 0.35, "w1=nan"), (0.65, math.inf, "w2=inf"), (-1.0, 0.35, "w1=-1.0")):
        with pytest.raises(UserError, match=f"^{bad}: expected a finite tag weight >= 0"):
            assign_target_tags(image, torch.tensor([[0]]), source, targets, w1=w1, w2=w2)
    # both 0: every score 0, and the tags were the vocabulary's first lines
    with pytest.raises(UserError, match=r"^w1=0.0, w2=0.0: every tag would score 0 \(eq. 5\); expected at least one"):
        assign_target_tags(image, torch.tensor([[0]]), source, targets, w1=0.0, w2=0.0)
    with pytest.raises(UserError, match="target tag embeddings: 1 of 2 rows hold NaN or inf"):
        assign_target_tags(image, torch.tensor([[0]]), source, torch.tensor([SEASON, [math.nan, 0.0]]))
    with pytest.raises(UserError, match="caption embeddings: 1 of 2 rows hold NaN or inf"):
        caption_transfer_tags(image, torch.tensor([[math.nan, 0.0], SEASON]), [["x"], ["y"]], 1, 1)
    for command, extra in (("tag", ["--images", str(tmp_path), "--vocab", "de=v.txt"]),
                           ("tag-eval", ["--test", "t", "--vocab-from", "v"])):
        out = tmp_path / "out" / "r.json"
        code = main([command, "--adapter", str(tmp_path / "ckpt"), *extra, "--w1", "nan", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: --w1 nan: expected a finite tag weight >= 0") and \
            err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()
        code = main([command, "--adapter", str(tmp_path / "ckpt"), *extra, "--w1", "0", "--w2", "0"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: --w1 0.0, --w2 0.0: every tag would score 0") and \
            err.count("\n") == 1, err


def _reference_eq5(image, source_rows, source_emb, target_emb, w1, w2):
    """Eq. (5) written out literally with Python loops (the obviously-correct reference)."""
    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    used, out = set(), []
    for s in source_rows:
        scores = [(w1 * cos(image, t) + w2 * cos(source_emb[s], t), i) for i, t in enumerate(target_emb)]
        for _, i in sorted(scores, key=lambda x: (-x[0], x[1])):
            if i not in used:
                used.add(i)
                out.append(i)
                break
    return out


def test_assignment_matches_a_literal_implementation_of_eq5():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(6, 5)).astype(np.float32)
    source_emb = rng.normal(size=(4, 5)).astype(np.float32)
    target_emb = rng.normal(size=(7, 5)).astype(np.float32)
    source_tags = rng.integers(0, 4, size=(6, 3))
    got = assign_target_tags(torch.from_numpy(images), torch.from_numpy(source_tags), torch.from_numpy(source_emb),
                             torch.from_numpy(target_emb), w1=0.65, w2=0.35)
    for n in range(6):
        assert got[n].tolist() == _reference_eq5(images[n], source_tags[n], source_emb, target_emb, 0.65, 0.35)


def test_imagenet_names_are_offline_and_source_tags_deduplicated():
    names = imagenet_class_names()
    assert len(names) == 1000 and names[0] == "tench" and names.count("crane") == 2
    logits = torch.tensor([[0.0, 5.0, 4.0, 3.0], [9.0, 0.0, 1.0, 2.0]])
    tags, probs = top_k_source_tags(logits, k=3, class_names=["cat", "dog", "crane", "crane"])
    # two classes of one name are one tag of their summed probability: k distinct tags, each with its own (both
    # rows gave 2 tags beside 3 probabilities)
    assert tags == [["dog", "crane", "cat"], ["cat", "crane", "dog"]]
    p = logits.softmax(1)
    expected = [[p[0, 1], p[0, 2] + p[0, 3], p[0, 0]], [p[1, 0], p[1, 2] + p[1, 3], p[1, 1]]]
    torch.testing.assert_close(probs, torch.tensor(expected))
    vocab, index = index_source_tags([["dog", "crane"], ["cat"]])
    assert vocab == ["dog", "crane", "cat"] and index.tolist() == [[0, 1], [2, -1]]


def test_tag_vocabulary_file(tmp_path):
    path = tmp_path / "de.txt"
    path.write_text("# German tags\nHund\n\n  Katze \nHund\n", encoding="utf-8")
    assert read_tag_vocabulary(path) == ["Hund", "Katze"]
    (tmp_path / "empty.txt").write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        read_tag_vocabulary(tmp_path / "empty.txt")
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(UserError, match=r"bad.txt:2: not UTF-8"):
        read_tag_vocabulary(tmp_path / "bad.txt")
    path.write_bytes("Hund\r\nKatze\r\nHund\r\n".encode("utf-8-sig"))  # Notepad's: "\ufeffHund" was a second Hund
    assert read_tag_vocabulary(path) == ["Hund", "Katze"]
    path.write_bytes("# German tags\nHund\n".encode("utf-8-sig"))  # ... and a first comment line a tag
    assert read_tag_vocabulary(path) == ["Hund"]
    (tmp_path / "tab.txt").write_text("Hund\nGras\tgrün\n", encoding="utf-8")  # was one tag, "Gras\tgrün"
    with pytest.raises(UserError, match=r"^\S*tab.txt:2: the tag 'Gras\\tgrün' holds a tab; expected one tag per "
                                        r"line$"):
        read_tag_vocabulary(tmp_path / "tab.txt")


def test_tag_images_maps_tags_through_the_embedding_function():
    table = {"spring": SPRING, "printemps": SEASON, "ressort": COIL, "Frühling": SEASON, "Feder": COIL}

    def embed(tags):
        return torch.tensor([table[t] for t in tags])

    out = tag_images(torch.tensor([[0.9, 0.1], [0.1, 0.9]]), [["spring"], ["spring"]], embed,
                     {"fr": ["printemps", "ressort"], "de": ["Feder", "Frühling"]})
    assert out == {"fr": [["printemps"], ["ressort"]], "de": [["Frühling"], ["Feder"]]}


def test_tag_command_end_to_end(tmp_path, capsys, monkeypatch):
    """Real offline EfficientNet-Lite0 (features + ImageNet head), a chance-level text encoder."""
    cfg = ZeroShotConfig(text_encoder="random:16")
    torch.manual_seed(0)
    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0, 0.0]), cfg, tmp_path / "ckpt")
    for i, colour in enumerate([(200, 30, 30), (20, 120, 220)]):
        Image.new("RGB", (64, 64), colour).save(tmp_path / f"img{i}.png")
    vocab = ["rot", "blau", "Hund", "Katze", "Haus", "Baum", "Auto"]
    (tmp_path / "de.txt").write_text("\n".join(vocab), encoding="utf-8")
    code = main(["tag", "--adapter", str(tmp_path / "ckpt"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'de.txt'}", "--source-tags", "3", "--out", str(tmp_path / "tags.json"),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    assert code == 0
    record = json.loads((tmp_path / "tags.json").read_text(encoding="utf-8"))
    assert [e["image"].rsplit("/", 1)[1] for e in record["images"]] == ["img0.png", "img1.png"]
    for entry in record["images"]:
        assert 1 <= len(entry["source"]) <= 3 and all(s in imagenet_class_names() for s in entry["source"])
        tags = entry["tags"]["de"]
        assert len(tags) == len(entry["source"]) and len(set(tags)) == len(tags) and set(tags) <= set(vocab)
    assert "img0.png" in capsys.readouterr().out
    # a missing vocabulary file is a one-line user error with exit code 2
    assert main(["tag", "--adapter", str(tmp_path / "ckpt"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'missing.txt'}"]) == 2
    assert "missing.txt: tag vocabulary file not found" in capsys.readouterr().err
    # an adapter trained on other image features (32-d, not EfficientNet-Lite0's 1280-d)
    save_adapter(TextToImageAdapter(16, 32, [8], [0.0, 0.0]), cfg, tmp_path / "narrow")
    assert main(["tag", "--adapter", str(tmp_path / "narrow"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'de.txt'}", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 2
    assert "adapter outputs 32-d features but image model efficientnet_lite0 gives 1280-d" in capsys.readouterr().err
    # an adapter trained on other text embeddings (12-d, not random:16's 16-d): one line, as retrieval says it (it was
    # a "mat1 and mat2 shapes cannot be multiplied" traceback)
    save_adapter(TextToImageAdapter(12, 1280, [8], [0.0, 0.0]), cfg, tmp_path / "other-text")
    assert main(["tag", "--adapter", str(tmp_path / "other-text"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'de.txt'}", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 2
    assert ("the adapter maps 12-d text embeddings to 1280-d image features, but the encoders give 16-d text"
            in capsys.readouterr().err)
    # --source-tags above the classifier's 1,000 classes: all of them, said; cs, which mUSE lacks, named as retrieval
    # and tag-eval name it (a text encoder standing in for "use", whose languages are known)
    from globetrotter.zeroshot.cli import tag as tag_cli

    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="use"), tmp_path / "use")
    monkeypatch.setattr(tag_cli, "embed_cached", lambda _spec, texts, *_a, **_k: np.stack(
        [np.random.default_rng(sum(map(ord, t))).normal(size=16) for t in texts]).astype(np.float32))
    assert main(["tag", "--adapter", str(tmp_path / "use"), "--images", str(tmp_path / "img0.png"), "--vocab",
                 f"cs={tmp_path / 'de.txt'}", "--source-tags", "1001", "--out", str(tmp_path / "cs.json"),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "note: --source-tags 1001: the image model's classifier has 1000 classes; using 1000" in out
    assert "note: the text encoder 'use' was not trained on cs" in out
    record = json.loads((tmp_path / "cs.json").read_text(encoding="utf-8"))
    assert record["source_tags"] == 1000 and record["languages_the_text_encoder_lacks"] == ["cs"]
    entry = record["images"][0]
    assert len(entry["source"]) == len(set(imagenet_class_names())) and len(entry["tags"]["cs"]) == len(vocab)
    # --max-images N tags the first N images of the folder (sorted), no more
    assert main(["tag", "--adapter", str(tmp_path / "use"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'de.txt'}", "--max-images", "1", "--out", str(tmp_path / "one.json"),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    capsys.readouterr()
    record = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
    assert [e["image"].rsplit("/", 1)[1] for e in record["images"]] == ["img0.png"]
    # counts must be positive (--max-images -1, then --limit, dropped the last image in silence; --source-tags -1 crashed)
    for option in ("--source-tags", "--max-images"):
        with pytest.raises(SystemExit) as exit_info:
            main(["tag", "--adapter", str(tmp_path / "ckpt"), "--images", str(tmp_path), "--vocab",
                  f"de={tmp_path / 'de.txt'}", option, "-1"])
        assert exit_info.value.code == 2 and "expected a positive integer" in capsys.readouterr().err


def test_classifier_hub_weights_need_online():
    """A Python caller is told the argument to pass (online=True), not the command line's --online."""
    from globetrotter.zeroshot.tagging import load_imagenet_classifier

    with pytest.raises(UserError, match=r"^image weights 'hub' download efficientnet_lite0; opt in with online=True$"):
        load_imagenet_classifier("efficientnet_lite0", "hub", online=False)
    with cli_option_names(), pytest.raises(UserError, match=r"; opt in with --online$"):
        load_imagenet_classifier("efficientnet_lite0", "hub", online=False)


def test_an_image_model_without_weights_is_worded_as_the_adapter_config_not_as_backretrieval_flags(tmp_path, capsys):
    """The adapter config's image_encoder is no --image-model of tag (backretrieval's command line has those flags):
    its refusal keeps the argument wording under the zeroshot command line's flag wording."""
    save_adapter(TextToImageAdapter(16, 512, [8], [0.0, 0.0]),
                 ZeroShotConfig(text_encoder="random:16", image_encoder="resnet18"), tmp_path / "ckpt")
    Image.new("RGB", (32, 32), (200, 30, 30)).save(tmp_path / "img0.png")
    (tmp_path / "de.txt").write_text("rot\n", encoding="utf-8")
    assert main(["tag", "--adapter", str(tmp_path / "ckpt"), "--images", str(tmp_path / "img0.png"), "--vocab",
                 f"de={tmp_path / 'de.txt'}", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: image model resnet18: no weights given; pass weights: ") and err.count("\n") == 1
    assert "--image-" not in err, err


def test_a_damaged_cache_entry_is_computed_again_and_named(tmp_path, capsys):
    """A .npy of the feature cache cut short was a ValueError traceback that did not name the file."""
    from globetrotter.zeroshot.data import embed_cached, image_extractor

    texts = ["ein Hund", "eine Katze", "ein Hund"]
    first = embed_cached("random:8", texts, tmp_path / "cache", progress=False)
    for i, colour in enumerate([(200, 30, 30), (20, 120, 220)]):
        Image.new("RGB", (64, 64), colour).save(tmp_path / f"img{i}.png")
    images = [str(tmp_path / f"img{i}.png") for i in range(2)]
    extractor = image_extractor("efficientnet_lite0", cache_dir=tmp_path / "cache", progress=False)
    feats = extractor.extract(images)
    capsys.readouterr()
    for kind, again in (("text", lambda: embed_cached("random:8", texts, tmp_path / "cache", progress=False)),
                        ("images", lambda: image_extractor("efficientnet_lite0", cache_dir=tmp_path / "cache",
                                                           progress=False).extract(images))):
        (entry,) = (tmp_path / "cache" / kind).glob("*.npy")
        for damage in (lambda b: b[: len(b) // 2], lambda b: b"not an array"):
            entry.write_bytes(damage(entry.read_bytes()))
            with pytest.warns(BackRetrievalWarning) as said:
                got = again()
            (message,) = [str(w.message) for w in said]
            assert message.startswith(f"{entry}: unreadable cache entry (") and \
                message.endswith("); computing it again"), message
            np.testing.assert_allclose(got, first if kind == "text" else feats, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(np.load(entry), got)  # written again, whole
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # read from the cache again, in silence
            again()


def test_tag_messages_blame_the_flag_at_fault(tmp_path, capsys):
    """--vocab de=a --vocab de=b said "name each one with NAME=" (--adapter's advice); --vocab-size 3 below --k 5
    was blamed on the --vocab-from split, after its features were computed."""
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("Hund\n", encoding="utf-8")
    assert main(["tag", "--adapter", str(tmp_path / "none"), "--images", str(tmp_path), "--vocab",
                 f"de={tmp_path / 'a.txt'}", "--vocab", f"de={tmp_path / 'b.txt'}"]) == 2
    err = capsys.readouterr().err
    assert f"--vocab: language 'de' given twice ({tmp_path / 'a.txt'} and {tmp_path / 'b.txt'}); give one " \
           "vocabulary file per language" in err and err.count("\n") == 1, err
    assert main(["tag-eval", "--adapter", str(tmp_path / "none"), "--test", "t", "--vocab-from", "v",
                 "--vocab-size", "3"]) == 2
    err = capsys.readouterr().err
    assert "--vocab-size 3: fewer candidate tags than --k (5) tags per image; raise --vocab-size or lower --k" in err
    assert err.count("\n") == 1, err
    # a language code as the converters read it: DE is de (it was a language the text encoder "lacks"), xx refused
    assert main(["tag", "--adapter", str(tmp_path / "none"), "--images", str(tmp_path), "--vocab",
                 f"DE={tmp_path / 'a.txt'}", "--vocab", f"de={tmp_path / 'b.txt'}"]) == 2
    assert "--vocab: language 'de' given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tag", "--adapter", str(tmp_path / "none"), "--images", str(tmp_path), "--vocab", f"xx={tmp_path / 'a.txt'}"])
    assert "'xx' is not an ISO 639-1 language code" in capsys.readouterr().err
    for value in ("de", "=a.txt", "de="):  # no '=', no language, no file
        with pytest.raises(SystemExit):
            main(["tag", "--adapter", str(tmp_path / "none"), "--images", str(tmp_path), "--vocab", value])
        assert f"--vocab: expected LANG=FILE, got {value!r}" in capsys.readouterr().err


def test_an_unreadable_image_in_a_folder_is_skipped_and_the_rest_tagged(tmp_path, capsys):
    """One broken photo stopped `tag` over a whole folder ("unreadable image"), nothing tagged; the converters skip
    and count bad input. It is now named in one warning line, listed in the record, and the others are tagged."""
    torch.manual_seed(0)
    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "ckpt")
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(photos / "good.png")
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    whole = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (128, 128, 3), dtype=np.uint8)).save(whole, "JPEG")
    cut = whole.getvalue()
    (photos / "cut.jpg").write_bytes(cut[: len(cut) // 2])  # a sound header, then cut short: verify() passed it
    (tmp_path / "de.txt").write_text("\n".join(["rot", "blau", "Hund", "Katze", "Haus"]), encoding="utf-8")
    argv = ["tag", "--adapter", str(tmp_path / "ckpt"), "--vocab", f"de={tmp_path / 'de.txt'}", "--source-tags", "2",
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(argv + ["--images", str(photos), "--out", str(tmp_path / "tags.json")]) == 0
    out = capsys.readouterr().out
    assert f"warning: {photos / 'broken.jpg'}: unreadable image (" in out and "good.png" in out
    assert f"warning: {photos / 'cut.jpg'}: unreadable image (" in out
    record = json.loads((tmp_path / "tags.json").read_text(encoding="utf-8"))
    assert [e["image"] for e in record["images"]] == [str(photos / "good.png")]
    assert [s["image"] for s in record["skipped"]] == [str(photos / "broken.jpg"), str(photos / "cut.jpg")]
    assert main(argv + ["--images", str(photos / "broken.jpg")]) == 2  # nothing readable: one line, exit 2
    assert "no readable image among the 1 given" in capsys.readouterr().err


def _three_photos_and_a_broken_one(tmp_path: Path) -> Path:
    """An adapter (``tmp_path/ckpt``), a German tag vocabulary (``de.txt``) and a folder of three photos and one
    unreadable file, returned."""
    torch.manual_seed(0)
    save_adapter(TextToImageAdapter(16, 1280, [8], [0.0, 0.0]), ZeroShotConfig(text_encoder="random:16"),
                 tmp_path / "ckpt")
    photos = tmp_path / "photos"
    photos.mkdir()
    for i, colour in enumerate([(200, 30, 30), (20, 120, 220), (30, 200, 30)]):
        Image.new("RGB", (64, 64), colour).save(photos / f"img{i}.png")
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (tmp_path / "de.txt").write_text("\n".join(["rot", "blau", "Hund", "Katze", "Haus"]), encoding="utf-8")
    return photos


def test_tag_decodes_each_image_once(tmp_path, capsys, monkeypatch):
    """`tag` decoded every image twice: once to find the unreadable ones, once for its features."""
    from collections import Counter

    photos = _three_photos_and_a_broken_one(tmp_path)
    opened, real_open = Counter(), Image.open

    def counting_open(fp, *args, **kwargs):
        opened[str(fp)] += 1
        return real_open(fp, *args, **kwargs)

    monkeypatch.setattr(Image, "open", counting_open)
    argv = ["tag", "--adapter", str(tmp_path / "ckpt"), "--vocab", f"de={tmp_path / 'de.txt'}", "--source-tags", "2",
            "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--out", str(tmp_path / "tags.json")]
    assert main(argv + ["--images", str(photos)]) == 0
    assert opened == Counter({str(p): 1 for p in photos.iterdir()})
    record = json.loads((tmp_path / "tags.json").read_text(encoding="utf-8"))
    assert [e["image"] for e in record["images"]] == [str(photos / f"img{i}.png") for i in range(3)]
    assert [s["image"] for s in record["skipped"]] == [str(photos / "broken.jpg")]
    assert f"warning: {photos / 'broken.jpg'}: unreadable image (" in capsys.readouterr().out
    opened.clear()
    assert main(argv + ["--images", *(str(photos / f"img{i}.png") for i in range(3))]) == 0
    assert not opened  # their features cached by the first run: read, none decoded
    assert [e["image"] for e in json.loads((tmp_path / "tags.json").read_text(encoding="utf-8"))["images"]] == \
        [str(photos / f"img{i}.png") for i in range(3)]

def test_a_rerun_of_tag_over_a_folder_with_a_broken_image_reads_the_cache(tmp_path, capsys, monkeypatch):
    """With one unreadable image among the folder's, a rerun of the same `tag` sent every readable image through the
    image model again: the cache was looked up under the key of all the files, the entry written under the key of the
    readable ones. The rerun now decodes none and runs the model on none, with the same tags and the same warning."""
    from collections import Counter

    from backretrieval.images import ImageFeatureExtractor

    photos = _three_photos_and_a_broken_one(tmp_path)
    forwarded, opened, real_forward, real_open = [], Counter(), ImageFeatureExtractor._forward, Image.open

    def counting_forward(self, pixels):
        forwarded.append(len(pixels))
        return real_forward(self, pixels)

    def counting_open(fp, *args, **kwargs):
        opened[str(fp)] += 1
        return real_open(fp, *args, **kwargs)

    monkeypatch.setattr(ImageFeatureExtractor, "_forward", counting_forward)
    monkeypatch.setattr(Image, "open", counting_open)
    argv = ["tag", "--adapter", str(tmp_path / "ckpt"), "--vocab", f"de={tmp_path / 'de.txt'}", "--source-tags", "2",
            "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--images", str(photos)]
    assert main(argv + ["--out", str(tmp_path / "first.json")]) == 0
    assert sum(forwarded) == 3
    capsys.readouterr()
    forwarded.clear()
    opened.clear()
    assert main(argv + ["--out", str(tmp_path / "again.json")]) == 0
    assert sum(forwarded) == 0 and not opened  # read from the cache: no image through the model, none decoded
    assert f"warning: {photos / 'broken.jpg'}: unreadable image (" in capsys.readouterr().out
    first, again = (json.loads((tmp_path / n).read_text(encoding="utf-8")) for n in ("first.json", "again.json"))
    assert again["images"] == first["images"] and again["skipped"] == first["skipped"]
    assert [s["image"] for s in again["skipped"]] == [str(photos / "broken.jpg")]
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 still not a jpeg")  # rewritten: decoded again
    assert main(argv + ["--out", str(tmp_path / "third.json")]) == 0
    assert opened[str(photos / "broken.jpg")] == 1  # the record named the file as it was, not as it is


def test_a_positional_npy_text_encoder_gives_rows_in_the_order_asked(tmp_path):
    """npy: without a .texts.json sidecar maps row i to text i; the texts were sorted and deduplicated first, so
    ['b', 'a', 'c'] got rows (1, 0, 2) and repeated captions a row-count error."""
    from globetrotter.zeroshot.data import embed_cached

    rows = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    np.save(tmp_path / "emb.npy", rows)
    got = embed_cached(f"npy:{tmp_path / 'emb.npy'}", ["b", "a", "c"], tmp_path / "cache", progress=False)
    np.testing.assert_array_equal(got, rows)
    again = embed_cached(f"npy:{tmp_path / 'emb.npy'}", ["a", "a", "b"], None, progress=False)
    np.testing.assert_array_equal(again, rows)


def test_tags_differing_only_in_case_are_one_tag_with_one_warning(tmp_path):
    """'Hund' and 'hund' were two entries of one tag, so an image could be given the same tag twice."""
    path = tmp_path / "de.txt"
    path.write_text("Hund\nKatze\nhund\nHUND\nkatze\nBaum\n", encoding="utf-8")
    with pytest.warns(BackRetrievalWarning) as said:
        assert read_tag_vocabulary(path) == ["Hund", "Katze", "Baum"]
    (message,) = [str(w.message) for w in said]
    assert message.startswith(f"{path}: 3 tag(s) differ from an earlier one only in case (e.g. 'hund' after 'Hund')")
    path.write_text("Hund\nKatze\nHund\n", encoding="utf-8")  # an exact repeat is kept once, as before, unsaid
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_tag_vocabulary(path) == ["Hund", "Katze"]


def test_an_embedder_object_named_after_a_checkpoint_is_cached_as_its_spec(tmp_path):
    """An embedder object (a loaded ``globetrotter.Encoder`` is named ``globetrotter:CHECKPOINT``) was cached by its
    name alone: new weights in that folder read the old embeddings. Its key carries the folder's modification time,
    as the spec's does."""
    import os

    from globetrotter.zeroshot.data import embed_cached

    folder = tmp_path / "ckpt"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"old")

    class Fixed:
        name = f"globetrotter:{folder}"

        def __init__(self, value: float) -> None:
            self.value = value

        def encode(self, texts):
            return np.full((len(texts), 4), self.value, np.float32)

    texts = ["ein Hund", "eine Katze"]
    assert embed_cached(Fixed(1.0), texts, tmp_path / "cache", progress=False)[0, 0] == 1.0
    assert embed_cached(Fixed(2.0), texts, tmp_path / "cache", progress=False)[0, 0] == 1.0  # unchanged: cached
    weights.write_bytes(b"new")
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert embed_cached(Fixed(2.0), texts, tmp_path / "cache", progress=False)[0, 0] == 2.0


def test_image_files_name_a_missing_path_and_a_source_without_images(tmp_path):
    from globetrotter.zeroshot.tagging import image_files

    (tmp_path / "notes.txt").write_text("no image", encoding="utf-8")
    with pytest.raises(UserError, match=r"gone.jpg: image file or folder not found$"):
        image_files([tmp_path / "gone.jpg"])
    with pytest.raises(UserError, match=r"^no images \(.jpg/.png/...\) found in \["):
        image_files([tmp_path])


def test_misshaped_source_tags_or_class_names_are_refused():
    with pytest.raises(ValueError, match=r"source_tags must be \[N=2, S\], got \(1, 1\)"):
        assign_target_tags(torch.zeros(2, 2), torch.tensor([[0]]), torch.tensor([SPRING]), torch.tensor([SEASON]))
    with pytest.raises(ValueError, match="logits have 3 classes but 2 class names were given"):
        top_k_source_tags(torch.zeros(1, 3), k=1, class_names=["cat", "dog"])


def test_the_imagenet_head_loads_from_a_weights_file_by_name_or_in_order(tmp_path):
    """A local state-dict file: loaded by name, or by position when its names differ (another exporter's)."""
    import timm

    from globetrotter.zeroshot.tagging import load_imagenet_classifier

    with pytest.raises(UserError, match=r"image weights 'package' are for .*not resnet18"):
        load_imagenet_classifier("resnet18", "package")
    with pytest.raises(UserError, match=r"missing.pth: image weights file not found \(or use 'package', 'hub'\)"):
        load_imagenet_classifier("efficientnet_lite0", str(tmp_path / "missing.pth"))
    torch.manual_seed(0)
    state = timm.create_model("efficientnet_lite0", pretrained=False).state_dict()
    torch.save(state, tmp_path / "named.pth")
    torch.save({f"t{i}": v for i, v in enumerate(state.values())}, tmp_path / "renamed.pth")
    for name in ("named.pth", "renamed.pth"):
        head = load_imagenet_classifier("efficientnet_lite0", str(tmp_path / name))
        assert head.out_features == 1000 and not head.training
        torch.testing.assert_close(head.weight, state["classifier.weight"], rtol=0, atol=0)
        torch.testing.assert_close(head.bias, state["classifier.bias"], rtol=0, atol=0)
    headless = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    torch.save({f"t{i}": v for i, v in enumerate(headless.values())}, tmp_path / "headless.pth")
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'headless.pth'))}: not weights of "
                                        r"efficientnet_lite0 with its classifier \(by name or in order\): weights have "):
        load_imagenet_classifier("efficientnet_lite0", str(tmp_path / "headless.pth"))  # no head to tag with
