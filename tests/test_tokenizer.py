"""The shared BPE tokenizer: exact round-trip on every script, special tokens, save/load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_data_cli
from test_training import tiny_cfg

from globetrotter.config import load_train_config
from globetrotter.errors import UserError
from globetrotter.tokenizer import encode_batch, load_tokenizer, save_tokenizer, special_ids, train_tokenizer
from globetrotter.training.prepare import ensure_data

CAPTIONS = [
    "a big red circle on the left",
    "ein großer roter Kreis links",
    "un grand cercle rouge à gauche",
    "большой красный круг слева",
    "ένας μεγάλος κόκκινος κύκλος",
    "左に大きな赤い円があります",
    "左边有一个红色的大圆",
    "دائرة حمراء كبيرة على اليسار",
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CAPTIONS * 20, vocab_size=400, min_frequency=1)


def test_round_trip_on_all_scripts(tok):
    unseen = ["ο ήλιος λάμπει", "太陽が輝く", "الشمس تشرق", "Ünïcödé façade — ok?"]
    for text in CAPTIONS + unseen:
        enc = tok.encode(text)
        assert enc.ids[0] == special_ids(tok)["sentence"]  # sentence token first
        assert tok.decode(enc.ids) == text  # byte-level: exact, no unknown token


def test_special_ids_and_padding(tok):
    ids = special_ids(tok)
    assert ids == {"pad": 0, "mask": 1, "sentence": 2}
    batch, mask = encode_batch(tok, ["a", CAPTIONS[3]], max_length=8)
    short, long = tok.encode("a").ids, tok.encode(CAPTIONS[3]).ids
    assert len(short) < 8 < len(long)  # one caption to pad, one to truncate
    # the short caption: its ids, then padding that the mask marks as such; the long one: its first 8 ids, all real
    assert batch[0] == short + [ids["pad"]] * (8 - len(short))
    assert mask[0] == [1] * len(short) + [0] * (8 - len(short))
    assert batch[1] == long[:8] and mask[1] == [1] * 8  # truncated to max_length


def test_a_tokenizer_without_the_special_tokens_is_one_line_not_none_ids():
    """A tokenizer not made by train_tokenizer (the Python API takes any): its missing pad id was None, which
    special_ids returned and encode_batch padded with, to fail later as a TypeError in torch."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel()
    with pytest.raises(UserError, match="lacks special token '<pad>'"):
        special_ids(plain)
    with pytest.raises(UserError, match="lacks special token '<pad>'"):
        encode_batch(plain, ["a", "bb"], max_length=8)


def test_a_tokenizer_file_without_the_special_tokens_or_missing_is_one_line_naming_it(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    plain = Tokenizer(models.BPE())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel()
    plain.save(str(tmp_path / "plain.json"))
    with pytest.raises(UserError, match=rf"^{tmp_path / 'plain.json'}: tokenizer lacks special tokens "
                                        r"\['<pad>', '<mask>', '<s>'\]$"):
        load_tokenizer(tmp_path / "plain.json")
    with pytest.raises(UserError, match=rf"^{tmp_path / 'gone.json'}: tokenizer file not found \(make one with "):
        load_tokenizer(tmp_path / "gone.json")


def test_only_a_tokenizer_of_a_known_normalisation_is_extended(tok):
    """A lowercasing normaliser is neither none nor uncased: extending would encode the new language otherwise than
    the file says, so it is refused; the file's own normalisation is read back as it was trained."""
    from tokenizers import Tokenizer, normalizers

    from globetrotter.tokenizer import extend_tokenizer, normalization_of

    assert normalization_of(tok) == "none"
    lowered = Tokenizer.from_str(tok.to_str())
    lowered.normalizer = normalizers.Lowercase()
    assert normalization_of(lowered) == "other"
    with pytest.raises(UserError, match="extend_tokenizer: the tokenizer's normalisation is none of .*only a tokenizer "
                                        "made by train_tokenizer can be extended"):
        extend_tokenizer(lowered, ["neue Wörter hier"] * 10, vocab_size=300, known=[])


def test_save_load(tok, tmp_path):
    path = save_tokenizer(tok, tmp_path / "tokenizer.json")
    again = load_tokenizer(path)
    assert again.encode(CAPTIONS[5]).ids == tok.encode(CAPTIONS[5]).ids
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="bad.json"):
        load_tokenizer(tmp_path / "bad.json")


def test_uncased_folds_case_accents_and_the_first_word_and_the_file_carries_it(tok, tmp_path):
    from globetrotter.tokenizer import normalization_of

    folded = train_tokenizer([c.lower() for c in CAPTIONS] * 20, vocab_size=400, min_frequency=1,
                             normalization="uncased")
    assert normalization_of(tok) == "none" and normalization_of(folded) == "uncased"
    # one word, one token sequence: at the start of a caption or after a space, in any case, with or without accents
    word = folded.encode("cercle").ids[1:]
    assert folded.encode("Cercle rouge").ids[1:1 + len(word)] == word
    assert folded.encode("un CERCLE").ids[-len(word):] == word
    assert folded.encode("à gauche").ids == folded.encode("a gauche").ids
    assert folded.encode("左边有一个红色的大圆").ids == folded.encode(" 左边有一个红色的大圆").ids  # no case in Chinese
    # only Latin letters lose their accents: elsewhere the marks are letters (Cyrillic й is not и, Japanese が not か)
    assert [folded.normalizer.normalize_str(t) for t in ("Mädchen ŘEKA", "Йогурт", "がガ", "Ένας")] == \
        ["madchen reka", "йогурт", "がガ", "ένας"]
    # the raw tokenizer keeps every distinction: the paper's BPE, the default
    assert tok.encode("Cercle").ids != tok.encode("cercle").ids and tok.encode("à").ids != tok.encode("a").ids
    again = load_tokenizer(save_tokenizer(folded, tmp_path / "tokenizer-uncased.json"))
    assert normalization_of(again) == "uncased" and again.encode("Élan").ids == folded.encode("elan").ids
    with pytest.raises(ValueError, match="normalization"):
        train_tokenizer(CAPTIONS, 300, normalization="lower")


def test_a_run_trains_its_tokenizer_with_the_asked_normalisation_and_refuses_another(tiny_world, tmp_path):
    from globetrotter.tokenizer import normalization_of
    from globetrotter.training.tokenizer_file import tokenizer_path

    cfg = load_train_config(None, [f"data.root={tiny_world}", f"output_dir={tmp_path}", "data.synth=null",
                                   "data.vocab_size=300", "data.tokenizer_normalization=uncased"])
    assert tokenizer_path(cfg) == tiny_world / "tokenizer-uncased.json"  # beside the cased one: twins share a root
    uncased = tiny_cfg(tiny_world, tmp_path, "data.tokenizer_normalization=uncased")
    ensure_data(uncased, log=lambda s: None)
    assert normalization_of(load_tokenizer(tmp_path / "tokenizer.json")) == "uncased"
    # the same file asked for as written: refused in one line naming the file and both settings
    with pytest.raises(UserError, match=r"tokenizer\.json: tokenizer made with normalization uncased, but "
                                        r"data\.tokenizer_normalization is none"):
        ensure_data(tiny_cfg(tiny_world, tmp_path), log=lambda s: None)


def test_a_tokenizer_path_that_is_a_folder_is_refused_before_training_and_leaves_nothing(tiny_world, tmp_path):
    from globetrotter.tokenizer import train_tokenizer_on_split

    folder = tmp_path / "tokenizers"
    folder.mkdir()
    with pytest.raises(UserError, match=f"{folder}: a folder where the tokenizer file should be .* e.g. "
                                        f"{folder}/tokenizer.json"):
        ensure_data(tiny_cfg(tiny_world, tmp_path, f"data.tokenizer={folder}"), log=lambda s: None)
    # the atomic write itself leaves no temporary file when its move fails (it used to leave tokenizers.<pid>.tmp)
    with pytest.raises(IsADirectoryError):
        train_tokenizer_on_split(tiny_world / "train", folder, 300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizers"]


def test_the_tokenizer_command_writes_an_uncased_file_where_training_looks(tiny_world, tmp_path):
    import shutil

    from globetrotter.data_cli import main as data_cli
    from globetrotter.tokenizer import normalization_of

    world = tmp_path / "world"
    shutil.copytree(tiny_world / "train", world / "train")
    with pytest.raises(SystemExit) as done:
        data_cli(["tokenizer", str(world / "train"), "--vocab-size", "300", "--normalization", "uncased"])
    assert done.value.code == 0
    assert normalization_of(load_tokenizer(world / "tokenizer-uncased.json")) == "uncased"
    assert not (world / "tokenizer.json").exists()
    made = (world / "tokenizer-uncased.json").read_bytes()  # the shared file was replaced in silence
    with pytest.raises(SystemExit) as done:
        data_cli(["tokenizer", str(world / "train"), "--vocab-size", "280", "--normalization", "uncased"])
    assert done.value.code == 2 and (world / "tokenizer-uncased.json").read_bytes() == made
    with pytest.raises(SystemExit) as done:
        data_cli(["tokenizer", str(world / "train"), "--vocab-size", "280", "--normalization", "uncased",
                  "--overwrite"])
    assert done.value.code == 0 and (world / "tokenizer-uncased.json").read_bytes() != made


def test_the_tokenizer_command_refuses_an_out_that_is_a_folder_and_leaves_it(tiny_world, tmp_path, capsys):
    (tmp_path / "tokenizers").mkdir()
    code, _, err = run_data_cli(["tokenizer", str(tiny_world / "train"), "--vocab-size", "300", "--out",
                                 str(tmp_path / "tokenizers")], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"error: --out {tmp_path / 'tokenizers'}: is a folder; expected the tokenizer file to write "
        f"(e.g. {tmp_path / 'tokenizers' / 'tokenizer.json'})")
    assert list((tmp_path / "tokenizers").iterdir()) == []


def test_the_tokenizer_command_refuses_an_out_inside_the_split_and_says_when_the_vocabulary_is_smaller(
        tiny_world, tmp_path, capsys):
    import shutil

    from globetrotter.data_cli import main as data_cli

    split = shutil.copytree(tiny_world / "train", tmp_path / "world" / "train")
    manifest = (split / "manifest.json").read_text()
    for out in (split / "manifest.json", split / "sub" / "tok.json"):  # was: the split's manifest overwritten
        with pytest.raises(SystemExit) as done:
            data_cli(["tokenizer", str(split), "--vocab-size", "300", "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert done.value.code == 2 and len(err) == 1 and "is inside the split folder" in err[0]
    assert (split / "manifest.json").read_text() == manifest and not (split / "sub").exists()
    with pytest.raises(SystemExit) as done:
        data_cli(["tokenizer", str(split), "--vocab-size", "100000"])
    stdout = capsys.readouterr().out
    size = load_tokenizer(tmp_path / "world" / "tokenizer.json").get_vocab_size()
    assert done.value.code == 0 and size < 100000 and f"note: {size} tokens, fewer than --vocab-size 100000" in stdout


# ----------------------------------------------------------------------------- provenance guard rails


def _parallel_split(world: Path, dest: Path) -> Path:
    """A copy of ``world``'s test split declared as a train split: every image captioned in every language."""
    import shutil

    shutil.copytree(world / "test", dest)
    manifest = json.loads((dest / "manifest.json").read_text(encoding="utf-8"))
    (dest / "manifest.json").write_text(json.dumps({**manifest, "split": "train"}), encoding="utf-8")
    return dest


def test_a_tokenizer_records_the_split_it_was_trained_on(tiny_world, tmp_path):
    from data_prep.shards import read_manifest
    from globetrotter.tokenizer import read_provenance, train_tokenizer_on_split

    path = train_tokenizer_on_split(tiny_world / "train", tmp_path / "tok.json", 300)
    record = read_provenance(path)
    (split,) = record["splits"]
    assert split["path"] == str((tiny_world / "train").resolve())
    assert split["checksum"] == read_manifest(tiny_world / "train")["checksum"]
    assert split["images_in_several_languages"] == 0 and split["captions"] > 0
    languages = sorted(read_manifest(tiny_world / "train")["languages"])
    assert split["languages"] == languages and len(languages) > 1


def test_the_languages_a_tokenizer_read_include_each_adaptation_and_are_unknown_for_an_old_record():
    from globetrotter.tokenizer import provenance_languages

    base = {"splits": [{"path": "train", "languages": ["de", "en"]}]}
    once = {"splits": base["splits"], "extends": base, "adapt": {"language": "fr"}}
    twice = {"splits": base["splits"], "extends": once, "adapt": {"language": "cs"}}
    assert provenance_languages(base) == {"de", "en"}
    assert provenance_languages(twice) == {"cs", "de", "en", "fr"}
    assert provenance_languages({"splits": [{"path": "train"}]}) is None  # written before records named them
    assert provenance_languages(None) is None


def test_a_tokenizer_is_never_trained_on_a_parallel_split(tiny_world, tmp_path):
    from globetrotter.tokenizer import train_tokenizer_on_split

    split = _parallel_split(tiny_world, tmp_path / "parallel")
    with pytest.raises(UserError, match=r"parallel: \d+ image\(s\) captioned in more than one language"):
        train_tokenizer_on_split(split, tmp_path / "tok.json", 300)
    assert not (tmp_path / "tok.json").exists()


def test_twins_share_the_tokenizer_of_the_one_language_split(tiny_world, tmp_path):
    """A supervised run on a parallel split trains the shared BPE on data.tokenizer_split (train), not on its own
    split, so a full run that comes after reads a tokenizer that saw no parallel text."""
    import shutil

    from globetrotter.tokenizer import read_provenance

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    _parallel_split(tiny_world, world / "train-parallel")
    supervised = tiny_cfg(world, tmp_path, "data.tokenizer=null", "data.train_split=train-parallel",
                          "loss.alpha_source=supervised")
    ensure_data(supervised, log=lambda s: None)
    (split,) = read_provenance(world / "tokenizer.json")["splits"]
    assert split["path"] == str((world / "train").resolve())
    ensure_data(tiny_cfg(world, tmp_path, "data.tokenizer=null"), log=lambda s: None)  # the full run accepts it


def test_a_run_without_parallel_text_refuses_parallel_training_data(tiny_world, tmp_path):
    import shutil

    from globetrotter.tokenizer import provenance_path, save_tokenizer, train_tokenizer

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    _parallel_split(tiny_world, world / "train-parallel")
    with pytest.raises(UserError, match=r"train-parallel: \d+ image\(s\) captioned in more than one language .*"
                                        r"loss.alpha_source=transitive"):
        ensure_data(tiny_cfg(world, tmp_path, "data.train_split=train-parallel"), log=lambda s: None)
    # a tokenizer whose record says it saw the parallel split: refused by a full run, accepted by the supervised twin
    path = save_tokenizer(train_tokenizer(["a square", "ein Quadrat"] * 5, 300), tmp_path / "tok.json",
                          {"splits": [{"path": str(world / "train-parallel"), "images_in_several_languages": 12}]})
    with pytest.raises(UserError, match=r"tok.json: tokenizer trained on .*train-parallel, which captions images in "
                                        r"several languages"):
        ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer={path}"), log=lambda s: None)
    ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer={path}", "data.train_split=train-parallel",
                         "loss.alpha_source=supervised"), log=lambda s: None)
    provenance_path(path).unlink()  # no record: refused by a full run (nothing to check), used by the twin with a warning
    with pytest.raises(UserError, match="records no provenance .* cannot check it saw none"):
        ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer={path}"), log=lambda s: None)
    said = []
    ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer={path}", "data.train_split=train-parallel",
                         "loss.alpha_source=supervised"), log=said.append)
    assert any("records no provenance" in line for line in said), said
    assert all(isinstance(line, str) for line in said)  # plain strings


def test_a_record_describes_its_own_file_and_split_as_they_are(tiny_world, tmp_path):
    """The guard rails cannot be walked around: a tokenizer copied over a recorded one, a split rewritten since
    (or another split), another vocabulary size, are refused; saving without a record removes a stale one."""
    import shutil

    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import iter_raw
    from globetrotter.tokenizer import provenance_path, save_tokenizer, train_tokenizer

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    cfg = tiny_cfg(world, tmp_path)
    ensure_data(cfg, log=lambda s: None)  # trains the tokenizer on train, with its record
    path = Path(cfg.data.tokenizer)
    record = json.loads(provenance_path(path).read_text(encoding="utf-8"))
    assert record["tokenizer_sha256"] and record["splits"][0]["checksum"]
    other = train_tokenizer(["ein Quadrat", "a square"] * 5, 300)
    other.save(str(path))  # copied over, its clean record kept beside it
    with pytest.raises(UserError, match="describes another tokenizer file"):
        ensure_data(cfg, log=lambda s: None)
    path.unlink()
    ensure_data(cfg, log=lambda s: None)  # trained again
    with pytest.raises(UserError, match="trained with vocab_size 300, but data.vocab_size is 299"):
        ensure_data(tiny_cfg(world, tmp_path, "data.vocab_size=299"), log=lambda s: None)
    rewritten = tmp_path / "rewritten"  # the train split written again with one caption fewer
    rows = list(iter_raw(world / "train"))
    with ShardWriter(rewritten, split="train", source="tiny", image_format="png") as writer:
        for key, _ext, data, meta in rows[:-1]:
            writer.write(key, data, meta["caption"], meta["lang"], meta["image_id"])
    shutil.rmtree(world / "train")
    shutil.copytree(rewritten, world / "train")
    with pytest.raises(UserError, match="not on .*train as it is now .* rewritten since; delete it"):
        ensure_data(cfg, log=lambda s: None)
    world2 = tmp_path / "world2"  # another data root: its advice was to delete the file, the first root's tokenizer
    shutil.copytree(world, world2)
    with pytest.raises(UserError, match="another split's tokenizer; point data.tokenizer at one trained on "
                                        ".*world2/train .*the run trains one at .*world2/tokenizer.json"):
        ensure_data(tiny_cfg(world2, tmp_path), log=lambda s: None)
    save_tokenizer(other, path)
    assert not provenance_path(path).exists(), "a record of the file it replaced"



def test_a_tokenizer_of_the_split_more_captions_copied_is_that_split_s(tiny_world, tmp_path):
    """A more-captions split has its own checksum and names the one its images came from (more_captions.
    original_checksum): a tokenizer trained on that original is the split's, not one of a split rewritten since."""
    import shutil

    from globetrotter.training.tokenizer_file import check_tokenizer

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    cfg = tiny_cfg(world, tmp_path)
    ensure_data(cfg, log=lambda s: None)  # the tokenizer, trained on train as it is
    manifest_path = world / "train" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    enriched = {**manifest, "checksum": "sha256:" + "0" * 64}
    manifest_path.write_text(json.dumps(enriched), encoding="utf-8")
    with pytest.raises(UserError, match="rewritten since"):  # another checksum, nothing naming the original
        check_tokenizer(cfg, Path(cfg.data.tokenizer), log=lambda s: None)
    enriched["more_captions"] = {"from": "elsewhere", "original_checksum": manifest["checksum"]}
    manifest_path.write_text(json.dumps(enriched), encoding="utf-8")
    check_tokenizer(cfg, Path(cfg.data.tokenizer), log=lambda s: None)


@pytest.mark.parametrize("drop", ["everything", "tokenizer_sha256", "checksum", "vocab_size"])
def test_a_partial_provenance_record_is_refused_like_none(tiny_world, tmp_path, drop):
    """A record of ``{}``, or one without the file's sha256, the split's checksum or the vocabulary size, cannot be
    checked: a run without parallel text refuses it as it refuses no record (it used to pass every check, even for a
    tokenizer trained on parallel test captions); a supervised run uses it with a warning."""
    import shutil

    from globetrotter.tokenizer import provenance_path

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    _parallel_split(tiny_world, world / "train-parallel")
    cfg = tiny_cfg(world, tmp_path)
    ensure_data(cfg, log=lambda s: None)  # the tokenizer and its full record
    record_path = provenance_path(cfg.data.tokenizer)
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if drop == "everything":
        record = {}
    elif drop == "checksum":
        del record["splits"][0]["checksum"]
    else:
        del record[drop]
    record_path.write_text(json.dumps(record), encoding="utf-8")
    lacks = {"everything": "tokenizer_sha256, a split checksum .*, vocab_size", "tokenizer_sha256": "tokenizer_sha256",
             "checksum": r"a split checksum \(splits\[\]\.checksum\)", "vocab_size": "vocab_size"}[drop]
    with pytest.raises(UserError, match=f"tokenizer.provenance.json lacks {lacks}, so a run without parallel text "
                                        f"cannot check it saw none; delete it"):
        ensure_data(cfg, log=lambda s: None)
    said = []
    ensure_data(tiny_cfg(world, tmp_path, "data.train_split=train-parallel", "loss.alpha_source=supervised"),
                log=said.append)
    assert any("lacks" in line for line in said), said


@pytest.mark.parametrize("content", ["not json", "[]", '{"splits": "x"}',
                                     '{"splits": [{"images_in_several_languages": "x"}]}',
                                     '{"tokenizer_sha256": 3, "splits": []}'])
def test_a_damaged_provenance_record_is_one_line_naming_it(tiny_world, tmp_path, content):
    import shutil

    from globetrotter.tokenizer import provenance_path

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    cfg = tiny_cfg(world, tmp_path)
    ensure_data(cfg, log=lambda s: None)
    provenance_path(cfg.data.tokenizer).write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=r"tokenizer\.provenance\.json: damaged tokenizer provenance record: .*; "
                                        r"expected the JSON object") as err:
        ensure_data(cfg, log=lambda s: None)
    assert "\n" not in str(err.value)


def test_a_val_or_test_split_never_trains_the_tokenizer(tiny_world, tmp_path, capsys):
    """data.tokenizer_split naming the run's val or test split, or a split whose manifest says val, is refused before
    anything is trained (it used to train the shared BPE on val in silence); the tokenizer command refuses it too."""
    import shutil

    from globetrotter.data_cli import main as data_cli

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    for split, held in (("val", "data.val_split"), ("test", "data.test_split")):
        with pytest.raises(UserError, match=f"data.tokenizer_split='{split}' is also {held}: the shared tokenizer is "
                                            f"trained on a train split's captions only"):
            ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer_split={split}"), log=lambda s: None)
    shutil.copytree(world / "val", world / "dev")  # a val split under another name
    with pytest.raises(UserError, match=r"data.tokenizer_split='dev': .*dev: a 'val' split"):
        ensure_data(tiny_cfg(world, tmp_path, "data.tokenizer_split=dev"), log=lambda s: None)
    assert not (tmp_path / "tokenizer.json").exists()
    with pytest.raises(SystemExit) as done:
        data_cli(["tokenizer", str(world / "val"), "--vocab-size", "300"])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 1 and "val: a 'val' split" in err[0], err
    assert not (world / "tokenizer.json").exists()


def test_training_the_tokenizer_on_an_adapt_split_warns_as_the_tokenizer_command_does(tiny_world, tmp_path, capsys):
    """data.tokenizer_split naming an adapt split (captions of held-out languages) trained the shared BPE in silence,
    while globetrotter-data tokenizer warns for it; a train split still trains without a warning."""
    import shutil

    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import iter_raw

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    with ShardWriter(world / "adapt", split="adapt", source="tiny", image_format="png") as writer:
        for key, _ext, data, meta in iter_raw(world / "train"):
            writer.write(key, data, meta["caption"], meta["lang"], meta["image_id"])
    said: list[str] = []
    ensure_data(tiny_cfg(world, tmp_path / "a", "data.tokenizer_split=adapt"), log=said.append)
    warnings = [line for line in said if line.startswith("warning:")]
    assert warnings == [f"warning: data.tokenizer_split='adapt': {world / 'adapt'} is a 'adapt' split; the tokenizer "
                        f"should see train captions only"]
    said.clear()
    ensure_data(tiny_cfg(world, tmp_path / "b"), log=said.append)
    assert not [line for line in said if line.startswith("warning:")]
    code, out, _ = run_data_cli(["tokenizer", str(world / "adapt"), "--vocab-size", "300", "--out",
                                 str(tmp_path / "t.json")], capsys)
    assert code == 0 and f"warning: {world / 'adapt'} is a 'adapt' split" in out


def test_the_advice_for_another_splits_tokenizer_at_the_default_path_works(tiny_world, tmp_path):
    """The root's own tokenizer.json trained on another split: the advice is to move it away (it used to say "leave
    data.tokenizer unset", which it was), and doing so lets the run train its own."""
    import shutil

    from data_prep.shard_writer import ShardWriter
    from data_prep.shards import iter_raw

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    with ShardWriter(world / "train2", split="train", source="tiny", image_format="png") as writer:
        for key, _ext, data, meta in list(iter_raw(world / "train"))[:-1]:  # another train split: one caption fewer
            writer.write(key, data, meta["caption"], meta["lang"], meta["image_id"])
    ensure_data(tiny_cfg(world, tmp_path, "data.tokenizer=null", "data.tokenizer_split=train2"), log=lambda s: None)
    cfg = tiny_cfg(world, tmp_path, "data.tokenizer=null")
    with pytest.raises(UserError, match=r"another split's tokenizer; move it \(and tokenizer.provenance.json\) "
                                        r"elsewhere, and the run trains one on .*world/train in its place") as err:
        ensure_data(cfg, log=lambda s: None)
    assert "leave it unset" not in str(err.value)
    for name in ("tokenizer.json", "tokenizer.provenance.json"):  # the advice, followed
        (world / name).rename(tmp_path / name)
    ensure_data(cfg, log=lambda s: None)
    assert (world / "tokenizer.json").is_file()


@pytest.mark.parametrize("bad_at", ["first", "last"])
def test_a_damaged_shard_cannot_hide_parallel_captions_from_the_one_language_check(tiny_world, tmp_path, bad_at):
    """A shard with a malformed sample still has its readable samples checked, before and after it (the loader
    trains on them all): the same train image captioned again in other languages is refused."""
    import io
    import shutil
    import tarfile

    from data_prep.shards import iter_metas, read_manifest
    from globetrotter.training.train_set import check_one_language_split

    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    train = world / "train"
    first = next(iter(iter_metas(train)))
    others = sorted({m["lang"] for m in iter_metas(train)} - {first["lang"]})
    shard = train / "train-000099.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if bad_at == "first":
            add("aa-bad.json", b"{not json")
            add("aa-bad.npy", b"")
        for i, lang in enumerate(others):  # the image of the first caption, in every other language: parallel text
            add(f"par-{i}.json", json.dumps({"caption": f"caption {lang}", "lang": lang,
                                             "image_id": first["image_id"]}).encode())
            add(f"par-{i}.npy", b"")
        if bad_at == "last":
            add("zz-bad.json", b"{not json")  # an incomplete sample last
    manifest = read_manifest(train)
    manifest["shards"].append(shard.name)
    manifest["num_samples"] += len(others) + 1
    (train / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(UserError, match=f"captioned in more than one language .*{first['image_id']}"):
        check_one_language_split(tiny_cfg(world, tmp_path))


def test_the_text_of_a_special_token_in_a_caption_is_plain_text(tmp_path):
    """"a <pad> circle" is a caption, not padding: it encodes to no special id and decodes as written, from a
    trained, a loaded and a grown tokenizer."""
    from globetrotter.tokenizer import (extend_tokenizer, load_tokenizer, save_tokenizer, special_ids,
                                        train_tokenizer)

    trained = train_tokenizer(["a red circle", "ein roter Kreis"] * 5, 300)
    loaded = load_tokenizer(save_tokenizer(trained, tmp_path / "tok.json"))
    grown, _ = extend_tokenizer(loaded, ["κόκκινο τετράγωνο"] * 5, 300, ["a red circle"])
    for tok in (trained, loaded, grown):
        specials = set(special_ids(tok).values())
        for text in ("a <pad> circle", "<mask> ein <s> Kreis"):
            ids = tok.encode(text).ids
            assert ids[0] == special_ids(tok)["sentence"] and not specials & set(ids[1:]), (text, ids)
            assert tok.decode(ids) == text
