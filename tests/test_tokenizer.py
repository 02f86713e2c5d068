"""The shared BPE tokenizer: exact round-trip on every script, special tokens, save/load."""
from __future__ import annotations

import pytest

from globetrotter.errors import UserError
from globetrotter.tokenizer import encode_batch, load_tokenizer, save_tokenizer, special_ids, train_tokenizer

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
