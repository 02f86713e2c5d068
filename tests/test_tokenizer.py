"""The shared BPE tokenizer: exact round-trip on every script, special tokens, save/load."""
from __future__ import annotations

from pathlib import Path

import pytest
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
    assert len(batch[0]) == len(batch[1]) <= 8
    assert batch[0][sum(mask[0]):] == [ids["pad"]] * (len(batch[0]) - sum(mask[0]))
    assert sum(mask[1]) == 8  # truncated to max_length


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
    from globetrotter.training.prepare import tokenizer_path

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


# ----------------------------------------------------------------------------- provenance guard rails


def _parallel_split(world: Path, dest: Path) -> Path:
    """A copy of ``world``'s test split declared as a train split: every image captioned in every language."""
    import shutil

    shutil.copytree(world / "test", dest)
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
    provenance_path(path).unlink()  # no record: used, with a warning
    said = []
    ensure_data(tiny_cfg(world, tmp_path, f"data.tokenizer={path}"), log=said.append)
    assert any("records no provenance" in line for line in said), said
    assert all(isinstance(line, str) for line in said)  # plain strings
