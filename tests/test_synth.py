"""The built-in synthetic world: determinism, split rules, languages and scripts, grammar,
grounding, dictionaries, held-out languages, config errors and the CLI."""
from __future__ import annotations

import re
import shutil
import unicodedata
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from data_prep.shards import iter_samples, read_captions, read_manifest
from data_prep.split_rule import check_split_rule
from data_prep.synth import LANGUAGES, SynthConfig, generate, known_languages
from data_prep.synth.grammars import get_grammar
from data_prep.synth.grammars.base import MARKED
from data_prep.synth.lexicon import load_lexicon
from data_prep.synth.render import render_scene
from data_prep.synth.scene import (BACKGROUNDS, COLOURS, POSITIONS, SHAPES, SIZES, Background, Kind, Meaning,
                                   Mention, Scene, SceneObject, sample_meaning, sample_scene)
from globetrotter.config_io import load_config
from globetrotter.errors import UserError, run_cli

SPACELESS = {"ja", "zh"}  # written without spaces
JOINED = {"ar"}  # the conjunction is joined to the next word


def tiny(**overrides) -> SynthConfig:
    base = dict(train_images=180, val_images=45, test_images=24, workers=1, chunk_size=40, shard_size=64)
    return SynthConfig(**{**base, **overrides})


def checksums(out: Path) -> dict[str, str]:
    return {d.name: read_manifest(d)["checksum"] for d in sorted(out.iterdir()) if (d / "manifest.json").is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    generate(tiny(), out, progress=False)
    return out


@pytest.fixture(scope="module")
def heldout_world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth_heldout")
    generate(tiny(heldout_languages=["zh"], adapt_images=30, parallel_train_images=12, seed=5), out, progress=False)
    return out


# -- determinism ---------------------------------------------------------------------------
def test_same_config_gives_identical_bytes_whatever_the_workers(world, tmp_path):
    generate(tiny(workers=2, chunk_size=17), tmp_path, progress=False)
    assert checksums(tmp_path) == checksums(world)
    assert set(checksums(world)) == {"train", "val", "test"}
    names = sorted(path.name for path in (world / "dictionary").iterdir())
    assert "concepts.json" in names and any(name.endswith(".txt") for name in names)
    assert sorted(path.name for path in (tmp_path / "dictionary").iterdir()) == names
    for name in names:
        assert (tmp_path / "dictionary" / name).read_bytes() == (world / "dictionary" / name).read_bytes(), name


def test_other_seed_gives_another_world(world, tmp_path):
    generate(tiny(seed=1), tmp_path, progress=False)
    ours, theirs = checksums(world), checksums(tmp_path)
    assert all(ours[split] != theirs[split] for split in ours)


# -- splits ----------------------------------------------------------------------------------
def test_split_rule_and_sizes(world):
    for split in ("train", "val", "test"):
        check_split_rule(world / split)
    train, val = read_captions(world / "train"), read_captions(world / "val")
    assert len(train) == 180 and len(val) == 45
    assert all(m["group"] is None for m in train + val)
    assert not {m["image_id"] for m in train} & {m["image_id"] for m in val}
    counts = read_manifest(world / "train")["languages"]
    assert set(counts) == set(known_languages()) and max(counts.values()) - min(counts.values()) <= 1


def test_test_split_is_parallel(world):
    groups = defaultdict(list)
    for sample in iter_samples(world / "test", decode_images=False):
        groups[sample.group].append(sample)
    metas = {m["key"]: m for m in read_captions(world / "test")}
    assert len(groups) == 24
    for members in groups.values():
        assert sorted(s.lang for s in members) == sorted(known_languages())  # one caption per language
        assert len({s.image for s in members}) == 1  # the same image bytes
        assert len({metas[s.key]["meaning"] for s in members}) == 1  # translations of each other
        assert len({s.caption for s in members}) == len(members)


# -- languages and scripts -------------------------------------------------------------------
def script_of(ch: str) -> str | None:
    name = unicodedata.name(ch, "")
    for script, marks in {"Latin": ("LATIN",), "Cyrillic": ("CYRILLIC",), "Greek": ("GREEK",),
                          "Arabic": ("ARABIC",), "Japanese": ("HIRAGANA", "KATAKANA"), "Han": ("CJK UNIFIED",)}.items():
        if name.startswith(marks):
            return script
    return None


def test_captions_of_cased_scripts_start_with_a_capital(world):
    """Latin, Cyrillic and Greek captions begin with a capital letter, as a sentence does; the scripts without case
    (Japanese, Chinese, Arabic) are left as written."""
    for meta in read_captions(world / "test"):
        first = meta["caption"][0]
        if LANGUAGES[meta["lang"]].script in ("Latin", "Cyrillic", "Greek"):
            assert first.isupper(), meta
        else:
            assert first.upper() == first.lower(), meta


def test_languages_scripts_and_no_shared_tokens(world):
    assert len(LANGUAGES) >= 8
    assert len({lang.script for lang in LANGUAGES.values()} - {"Latin"}) >= 3
    by_lang = defaultdict(list)
    for meta in read_captions(world / "test"):
        by_lang[meta["lang"]].append(meta["caption"])
    for code, captions in by_lang.items():
        text = "".join(captions)
        assert not re.search(r"\d", text), code  # numbers are words
        scripts = {script_of(ch) for ch in text} - {None}
        expected = LANGUAGES[code].script
        if expected == "Japanese":
            assert "Japanese" in scripts and scripts <= {"Japanese", "Han"}, (code, scripts)
        else:
            assert scripts == {expected}, (code, scripts)


def test_every_lexicon_names_every_concept_with_one_to_three_synonyms():
    inventory = {"shapes": SHAPES, "colours": tuple(COLOURS), "sizes": tuple(SIZES), "positions": POSITIONS,
                 "backgrounds": BACKGROUNDS}
    for code in known_languages():
        lexicon = load_lexicon(code)
        for section, concepts in inventory.items():
            assert set(lexicon[section]) == set(concepts), (code, section)
            for concept in concepts:
                assert 1 <= len(lexicon[section][concept]) <= 3, (code, section, concept)
        for phrases in list(lexicon["positions"].values()) + list(lexicon["backgrounds"].values()):
            for phrase in phrases:
                marked = MARKED.findall(phrase)
                assert marked and all(" " not in word for word, _ in marked), (code, phrase)


# -- grammar: hand-checked phrases -------------------------------------------------------------
class FirstChoice:
    """A stand-in RNG that always takes the first synonym/template and keeps the given order."""

    def integers(self, n, *args, **kw):
        return 0

    def random(self):
        return 0.99

    def permutation(self, n):
        return np.arange(n)


@pytest.mark.parametrize("code, mention, case, expected", [
    ("en", Mention("circle", 2, "red", "large"), "nom", "two large red circles"),
    ("en", Mention("hexagon", 1, "orange"), "nom", "an orange hexagon"),
    ("de", Mention("circle", 1, "red", "small"), "nom", "ein kleiner roter Kreis"),
    ("de", Mention("circle", 1, "red", "small"), "acc", "einen kleinen roten Kreis"),
    ("de", Mention("heart", 1, "red", "small"), "dat", "einem kleinen roten Herzen"),
    ("de", Mention("triangle", None, "blue"), "dat", "mehreren blauen Dreiecken"),
    ("fr", Mention("star", 3, "white", "small"), "nom", "trois petites étoiles blanches"),
    ("es", Mention("cross", 2, "white", "small"), "nom", "dos cruces blancas pequeñas"),
    ("ru", Mention("star", 2, "red"), "nom", "две красные звезды"),
    ("ru", Mention("circle", 3, "red", "large"), "nom", "три больших красных круга"),
    ("ru", Mention("heart", None, "black"), "nom", "несколько чёрных сердец"),
    ("el", Mention("circle", 1, "red"), "acc", "έναν κόκκινο κύκλο"),
    ("el", Mention("triangle", 3, "red", "large"), "nom", "τρία μεγάλα κόκκινα τρίγωνα"),
])
def test_noun_phrase_agreement(code, mention, case, expected):
    tokens = get_grammar(code).noun_phrase(mention, case, FirstChoice())
    assert " ".join(t.text for t in tokens) == expected


@pytest.mark.parametrize("code, mention, expected", [
    ("ar", Mention("circle", 3, "red"), "ثلاث دوائر حمراء"),  # feminine noun: masculine-looking numeral
    ("ar", Mention("square", 3, "red"), "ثلاثة مربعات حمراء"),
    ("ar", Mention("circle", 2, "red", "large"), "دائرتان حمراوان كبيرتان"),  # dual
    ("ja", Mention("circle", 2, "red", "large"), "大きい赤い円が二つあります"),
    ("zh", Mention("circle", 2, "red", "large"), "两个红色的大圆形"),
])
def test_whole_caption_non_latin(code, mention, expected):
    assert get_grammar(code).caption(Meaning((mention,)), FirstChoice()).text == expected


# -- grounding ---------------------------------------------------------------------------------
def test_every_mentioned_attribute_is_in_the_scene():
    for index in range(300):
        rng = np.random.default_rng([3, index])
        scene = sample_scene(rng, 64, 3, 6.0)
        meaning = sample_meaning(scene, rng, p_position=1.0, p_background=1.0)
        assert meaning.background == scene.background.kind
        for mention in meaning.mentions:
            kind = next(k for k in scene.kinds if k.shape == mention.shape)
            assert mention.colour in (None, kind.colour) and mention.size in (None, kind.size)
            assert kind.count == mention.count if mention.count is not None else kind.count >= 2
            if mention.position:
                (obj,) = [o for o in scene.objects if o.shape == kind.shape]
                x, y = obj.cx / 64 - 0.5, obj.cy / 64 - 0.5
                side = {"left": -x, "right": x, "top": -y, "bottom": y, "center": 0.1 - max(abs(x), abs(y))}
                assert side[mention.position] > 0, (mention, obj)


def test_rendered_colour_and_shape_are_where_the_scene_says():
    red = SceneObject("square", COLOURS["red"], cx=20.0, cy=30.0, radius=10.0, angle=0.0)
    ring = SceneObject("ring", COLOURS["blue"], cx=46.0, cy=30.0, radius=10.0, angle=0.0)
    scene = Scene((Kind("square", "red", "large", 1, None), Kind("ring", "blue", "large", 1, None)), (red, ring),
                  Background("plain", (128, 128, 128), (128, 128, 128), 0.0, 0.1, 0.0), 0.0, 0)
    pixels = np.asarray(render_scene(scene, 64)).astype(int)
    assert tuple(pixels[30, 20]) == COLOURS["red"]
    assert tuple(pixels[30, 46]) == (128, 128, 128)  # the hole of the ring shows the background
    assert tuple(pixels[30, 55]) == COLOURS["blue"]  # its band
    assert tuple(pixels[5, 5]) == (128, 128, 128)


# -- dictionaries ------------------------------------------------------------------------------
def occurs(word: str, lang: str, captions: list[str], tokens: set[str]) -> bool:
    if lang in SPACELESS or lang in JOINED:
        return any(word in c for c in captions)
    return word in tokens


def test_dictionaries_cover_every_pair_with_words_from_the_captions(world):
    captions = defaultdict(list)
    for split in ("train", "val", "test"):
        for meta in read_captions(world / split):
            captions[meta["lang"]].append(meta["caption"])
    tokens = {lang: {w.strip(",") for c in caps for w in c.split()} for lang, caps in captions.items()}
    langs = known_languages()
    for src in langs:
        for tgt in langs:
            if src == tgt:
                continue
            lines = (world / "dictionary" / f"{src}-{tgt}.txt").read_text(encoding="utf-8").splitlines()
            pairs = [line.split(" ") for line in lines]
            assert pairs and all(len(p) == 2 for p in pairs)
            for word in {p[0] for p in pairs}:
                assert occurs(word, src, captions[src], tokens[src]), (src, tgt, word)
    en_ru = [line.split() for line in (world / "dictionary" / "en-ru.txt").read_text(encoding="utf-8").splitlines()]
    assert any(s == "red" and t.startswith("красн") for s, t in en_ru)
    assert not any(s == "red" and t.startswith(("син", "зел", "жёлт")) for s, t in en_ru)
    en_ja = (world / "dictionary" / "en-ja.txt").read_text(encoding="utf-8").splitlines()
    assert "red 赤い" in en_ja or "red 赤色" in en_ja


# -- held-out languages --------------------------------------------------------------------------
def test_heldout_language_only_in_test_and_adapt(heldout_world):
    for split in ("train", "val", "train-parallel"):
        assert "zh" not in read_manifest(heldout_world / split)["languages"]
    assert "zh" in read_manifest(heldout_world / "test")["languages"]
    assert set(read_manifest(heldout_world / "adapt")["languages"]) == {"zh"}
    check_split_rule(heldout_world / "adapt", kind="train")
    check_split_rule(heldout_world / "train-parallel", kind="test")
    assert (heldout_world / "dictionary" / "zh-en.txt").stat().st_size > 0
    saved = load_config(SynthConfig, heldout_world / "world.yaml")
    assert saved.heldout_languages == ["zh"] and saved.seed == 5


# -- config and CLI ------------------------------------------------------------------------------
def test_bad_config_is_a_one_line_user_error(tmp_path):
    with pytest.raises(UserError, match=r"languages: unknown language code 'xx' \(known: en, de"):
        load_config(SynthConfig, overrides=["languages=[en, xx]"])
    with pytest.raises(UserError, match="train_images"):
        load_config(SynthConfig, overrides=["train_images=0"])
    for key in ("shard_size", "chunk_size"):  # was "shard_size and chunk_size: expected at least 1", either bad
        with pytest.raises(UserError, match=rf"^<defaults> \+ overrides: {key}: expected at least 1, got 0$"):
            load_config(SynthConfig, overrides=[f"{key}=0"])
    path = tmp_path / "world.yaml"
    path.write_text(yaml.safe_dump({"seed": 1, "colour_count": 3}))
    with pytest.raises(UserError, match=r"world.yaml: unknown key 'colour_count'"):
        load_config(SynthConfig, path)


def test_cli_writes_a_world_and_rejects_bad_flags(tmp_path, capsys):
    from data_prep.cli import build_parser

    def main(argv):
        args = build_parser().parse_args(argv)
        return args.func(args)

    out = tmp_path / "w"
    argv = ["synth", "--out", str(out), "--train-images", "20", "--val-images", "9", "--test-images", "3",
            "--languages", "en,ru,ja", "--workers", "1", "--no-progress", "p_mention_colour=1.0"]
    assert run_cli(main, argv) == 0
    assert "train" in capsys.readouterr().out
    assert read_manifest(out / "test")["languages"] == {"en": 3, "ja": 3, "ru": 3}
    assert load_config(SynthConfig, out / "world.yaml").p_mention_colour == 1.0
    assert run_cli(main, ["synth", "--out", str(out), "--held-out", "xx"]) == 2
    assert "error: --held-out xx: unknown language code 'xx'" in capsys.readouterr().err


def test_cli_holds_languages_out_with_held_out(capsys):
    """`synth --held-out zh` (it was --heldout, where the experiments spell --held-out)."""
    from data_prep.cli import build_parser
    from data_prep.synth.cli import config_from_args

    assert config_from_args(build_parser().parse_args(["synth", "--out", "w", "--held-out", "zh,el"])
                            ).heldout_languages == ["zh", "el"]
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["synth", "--out", "w", "--heldout", "zh"])
    assert stop.value.code == 2 and "unrecognized arguments: --heldout" in capsys.readouterr().err


def test_a_folder_holding_a_converted_dataset_is_never_overwritten(tmp_path, capsys):
    """synth --out into a converted dataset's folder would replace its splits: refused, the data left as it was."""
    from data_prep.cli import build_parser

    def main(argv):
        args = build_parser().parse_args(argv)
        return args.func(args)

    manifest = tmp_path / "real" / "train" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"source": "flickr8k", "shards": ["train-000000.tar"], "num_samples": 5, "languages": {}}')
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = ["synth", "--out", str(tmp_path / "real"), "--train-images", "4", "--workers", "1", "--no-progress"]
    assert run_cli(main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a dataset that is no synthetic world" in err[0] and "'flickr8k'" in err[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_inspect_names_the_worlds_six_scripts(world):
    """inspect reported ja and zh both as CJK (five scripts) where the README and the docs say six."""
    from data_prep.inspect import summarize

    scripts = summarize(world / "test")["scripts"]
    assert scripts["ja"] == "JAPANESE" and scripts["zh"] == "CJK" and scripts["ru"] == "CYRILLIC"
    assert len(set(scripts.values())) == 6, scripts


# -- the output folder: other files, interruptions, a second command ---------------------------------------------
def synth_cli(argv: list[str]) -> int:
    from data_prep.cli import build_parser

    def main(args):
        parsed = build_parser().parse_args(args)
        return parsed.func(parsed)

    return run_cli(main, argv)


SMALL = ["--train-images", "8", "--val-images", "4", "--test-images", "3", "--languages", "en,de", "--workers", "1",
         "--no-progress"]


def files_of(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_of_other_files_is_not_written_over_without_overwrite(tmp_path, capsys):
    """synth --out DIR replaced a user's world.yaml, dictionary/en-de.txt and test/manifest.json (not JSON) without a
    word: a non-empty folder that holds no earlier world is now refused in one line (exit 2), left as it was, and
    written into only with --overwrite (its other files kept)."""
    out = tmp_path / "mine"
    (out / "dictionary").mkdir(parents=True)
    (out / "test").mkdir()
    (out / "world.yaml").write_text("my notes")
    (out / "dictionary" / "en-de.txt").write_text("hund dog\n")
    (out / "test" / "manifest.json").write_text("keep")
    before = files_of(tmp_path)
    assert synth_cli(["synth", "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --out {out}: ") and "--overwrite" in err[0], err
    assert files_of(tmp_path) == before
    with pytest.raises(UserError) as refused:  # from Python: the arguments called with, no flag of the command line
        generate(tiny(), out, progress=False)
    assert str(refused.value).startswith(f"out_dir {out}: ") and str(refused.value).endswith("or pass overwrite=True")
    assert "--" not in str(refused.value) and files_of(tmp_path) == before
    (out / "test" / "manifest.json").unlink()  # the notes alone are no world either
    assert synth_cli(["synth", "--out", str(out), *SMALL]) == 2
    assert f"{out / 'world.yaml'} is not a world's config" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    assert synth_cli(["synth", "--out", str(out), *SMALL, "--overwrite"]) == 0
    assert load_config(SynthConfig, out / "world.yaml").train_images == 8 and (out / "notes.txt").read_text() == "mine"
    assert synth_cli(["synth", "--out", str(out), *SMALL, "--seed", "3"]) == 0  # an earlier world: written over
    assert load_config(SynthConfig, out / "world.yaml").seed == 3 and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no lock file, no staging folder left


def interrupt_at(monkeypatch, split: str) -> None:
    """Ctrl-C as the first record of ``split`` is written."""
    from data_prep.synth import world as world_module

    write = world_module.write_record

    def record(writer, rec):
        if rec.image_id.startswith(f"{split}-"):
            raise KeyboardInterrupt
        write(writer, rec)

    monkeypatch.setattr(world_module, "write_record", record)


def test_an_interrupted_generation_leaves_no_half_world(tmp_path, monkeypatch):
    """A Ctrl-C while the world was written left train/ (and the next train.py trusted it); now a new world is
    absent until complete, and an earlier one stays whole (world.yaml included) until the new one replaces it."""
    cfg = tiny(train_images=12, val_images=6, test_images=3, languages=["en", "de"], chunk_size=4)
    interrupt_at(monkeypatch, "val")
    with pytest.raises(KeyboardInterrupt):
        generate(cfg, tmp_path / "new" / "w", progress=False)
    assert list(tmp_path.iterdir()) == []  # nor the folders made for it
    monkeypatch.undo()
    generate(cfg, tmp_path / "w", progress=False)
    before = files_of(tmp_path / "w")
    interrupt_at(monkeypatch, "test")
    with pytest.raises(KeyboardInterrupt):
        generate(tiny(train_images=12, val_images=6, test_images=3, languages=["en", "de"], seed=1), tmp_path / "w",
                 progress=False)
    assert files_of(tmp_path / "w") == before and sorted(p.name for p in tmp_path.iterdir()) == ["w"]


def test_a_second_synth_into_the_same_out_meanwhile_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """Two synth runs into one --out at once both wrote its splits (mixed worlds, or a crash); the second is now
    refused in one line naming --out while the first runs, and the first completes."""
    from data_prep.synth import world as world_module

    out, write, second = tmp_path / "w", world_module.write_record, []

    def record(writer, rec):
        if not second:  # a second command starts while the first writes its shards
            second.append(None)
            second[:] = [synth_cli(["synth", "--out", str(out), *SMALL, "--seed", "1"]), capsys.readouterr().err]
        write(writer, rec)

    monkeypatch.setattr(world_module, "write_record", record)
    assert synth_cli(["synth", "--out", str(out), *SMALL]) == 0
    code, err = second
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: --out {out}: another command is writing there now"), err
    assert load_config(SynthConfig, out / "world.yaml").seed == 0 and check_split_rule(out / "train")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]  # the lock file goes with the command


def test_a_run_refuses_a_half_world_and_generates_over_a_killed_ones_leftovers(tmp_path):
    """train.py trusted a world whose generation was interrupted (train/ there, val/, dictionary/ and world.yaml not)
    and failed later with a wrong cause; it now names the interrupted generation. A generation killed outright
    leaves only its staging folder, over which the next run generates."""
    from globetrotter.config import load_train_config
    from globetrotter.training.prepare import ensure_data

    from conftest import TINY

    root = tmp_path / "world"
    small = "{train_images: 12, val_images: 6, test_images: 3, languages: [en, de], workers: 1}"

    def cfg():
        return load_train_config(None, [f"data.root={root}", f"output_dir={tmp_path / 'runs'}", *TINY,
                                        f"data.synth={small}"])

    generate(load_config(SynthConfig, overrides=[f"{k}={v}" for k, v in yaml.safe_load(small).items()]), root,
             progress=False)
    shutil.rmtree(root / "val")  # as an interrupted generation of an earlier version left it: train/ only
    (root / "world.yaml").unlink()
    with pytest.raises(UserError, match=rf"data.root={root}: .* an interrupted generation; delete {root}"):
        ensure_data(cfg(), log=lambda line: None)
    shutil.rmtree(root)
    (root / ".generating" / "train").mkdir(parents=True)  # what a generation killed outright leaves
    (root / ".generating" / "train" / "train-000000.tar").write_bytes(b"half")
    ensure_data(cfg(), log=lambda line: None)
    assert (root / "world.yaml").is_file() and not (root / ".generating").exists()


def test_a_run_refuses_a_world_generated_with_another_synth_config(tmp_path, capsys):
    """train.py with data.synth.seed=7 on a data.root that holds a world of seed 0 trained on the seed-0 world in
    silence, and its config.yaml recorded a world it did not train on. It now stops with one line naming both
    values; settings that leave the world as it is (workers, chunk_size) and data.synth=null still train there."""
    from globetrotter.training.cli import main as train_main

    from conftest import TINY

    root = tmp_path / "world"
    small = "{train_images: 12, val_images: 6, test_images: 3, parallel_train_images: 0, languages: [en, de], workers: 1}"
    generate(load_config(SynthConfig, overrides=[f"{k}={v}" for k, v in yaml.safe_load(small).items()]), root,
             progress=False)

    def train(*extra: str) -> tuple[int, list[str]]:
        argv = [f"data.root={root}", f"output_dir={tmp_path / 'runs'}", *TINY, f"data.synth={small}", "steps=1",
                "loss.image=0", "loss.cross=0", "loss.text=0", *extra]
        with pytest.raises(SystemExit) as stop:
            train_main(argv)
        return stop.value.code, capsys.readouterr().err.strip().splitlines()

    code, lines = train("data.synth.seed=7", "run_name=seed7")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: data.root={root}: holds a synthetic world made with another config "
                               f"(data.synth.seed=7 but 0 there;"), lines
    assert "name another data.root" in lines[0] and "data.synth=null" in lines[0]
    assert not (tmp_path / "runs" / "seed7" / "config.yaml").exists()
    code, lines = train("data.synth.test_images=4", "data.synth.image_format=png", "run_name=other")
    assert code == 2 and "data.synth.test_images=4 but 3 there, data.synth.image_format='png' but 'jpg'" in lines[0]
    from globetrotter.config import load_train_config
    from globetrotter.training.prepare import ensure_data

    for extra in (["data.synth.workers=2", "data.synth.chunk_size=5"], ["data.synth=null"]):
        ensure_data(load_train_config(None, [f"data.root={root}", *TINY, f"data.synth={small}", *extra]),
                    log=lambda line: None)


def test_world_yaml_names_the_installed_versions_and_still_loads(world):
    """world.yaml said no version: which code generated a world could not be told. Its first line now names the
    installed distribution's version (importlib.metadata), numpy's and Python's, as a comment: the file still loads
    as the world's config."""
    import importlib.metadata
    import json
    import platform

    first = (world / "world.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# versions: ")
    assert json.loads(first.removeprefix("# versions: ")) == {
        "globetrotter": importlib.metadata.version("globetrotter"), "numpy": np.__version__,
        "python": platform.python_version()}
    assert load_config(SynthConfig, world / "world.yaml") == tiny()


def test_world_yaml_is_written_once_and_last(tmp_path, monkeypatch):
    """world.yaml was written twice per generation (the config, then again with the versions comment read back and
    prepended); it is now written once, comment included, and still lands last in the world (the mark of a complete
    generation)."""
    import os

    events = []
    real_write, real_move, real_replace = Path.write_text, Path.replace, os.replace

    def write_text(path, *args, **kwargs):
        events.append(("write", path.name))
        return real_write(path, *args, **kwargs)

    def move(path, target):
        events.append(("land", Path(target).name))
        return real_move(path, target)

    def replace(src, dst, *args, **kwargs):
        events.append(("land", Path(dst).name))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(Path, "replace", move)
    monkeypatch.setattr(os, "replace", replace)
    cfg = tiny(train_images=6, val_images=4, test_images=2, languages=["en", "de"])
    generate(cfg, tmp_path / "w", progress=False)
    assert [name for kind, name in events if kind == "write" and name.startswith("world.yaml")] == ["world.yaml.tmp"]
    assert events[-1] == ("land", "world.yaml") and ("land", "manifest.json") in events, events
    assert (tmp_path / "w" / "world.yaml").read_text(encoding="utf-8").startswith("# versions: ")
    assert load_config(SynthConfig, tmp_path / "w" / "world.yaml") == cfg


# -- mutation audit: scene counts, positions, meanings, config refusals, a world written over a larger one --------
def test_scene_counts_respect_max_objects_and_the_kind_limits():
    """A scene is 1..max_objects objects in 1..3 kinds of distinct shapes, each seen 1..3 times; every bound is
    reached over many scenes (a count or kind drawn one too few or too many changes what the captions can say)."""
    for max_objects in (1, 3, 6):
        kinds_seen, totals_seen = set(), set()
        for index in range(400):
            scene = sample_scene(np.random.default_rng([11, max_objects, index]), 96, max_objects, 0.0)
            counts = [kind.count for kind in scene.kinds]
            assert all(1 <= c <= 3 for c in counts) and sum(counts) <= max_objects, counts
            assert len(scene.objects) == sum(counts)
            assert len({kind.shape for kind in scene.kinds}) == len(scene.kinds)
            for kind in scene.kinds:
                assert sum(obj.shape == kind.shape for obj in scene.objects) == kind.count
            kinds_seen.add(len(counts))
            totals_seen.add(sum(counts))
        assert kinds_seen == set(range(1, min(3, max_objects) + 1)), (max_objects, kinds_seen)
        assert totals_seen == set(range(1, max_objects + 1)), (max_objects, totals_seen)


@pytest.mark.parametrize("cx, cy, expected", [
    (0.52, 0.47, "center"), (0.1, 0.5, "left"), (0.9, 0.55, "right"), (0.45, 0.1, "top"), (0.5, 0.92, "bottom"),
    (0.9, 0.88, None), (0.1, 0.14, None), (0.8, 0.3, None),  # corners and diagonals: no clear region
])
def test_position_is_named_only_in_a_clear_region(cx, cy, expected):
    from data_prep.synth.scene import _position_label

    assert _position_label(cx, cy) == expected


def test_mention_probabilities_one_and_zero_say_everything_and_the_least():
    """p_mention_*=1 says every kind with all its (true) attributes and the background; 0 says one kind, its shape
    and, for a kind seen 2-3 times, "several" (the config documents 0..1 as the probability of saying each)."""
    for index in range(100):
        rng = np.random.default_rng([7, index])
        scene = sample_scene(rng, 64, 3, 0.0)
        full = sample_meaning(scene, rng, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
        assert full.background == scene.background.kind
        assert full.mentions == tuple(Mention(k.shape, k.count, k.colour, k.size, k.position) for k in scene.kinds)
        least = sample_meaning(scene, rng, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        ((mention,),) = [least.mentions]
        kind = next(k for k in scene.kinds if k.shape == mention.shape)
        assert mention == Mention(kind.shape, 1 if kind.count == 1 else None) and least.background is None


def test_canonical_meaning_is_the_documented_string_whatever_the_mention_order():
    """Meaning.canonical() is the "meaning" stored in every sample: equal content gives an equal string."""
    square, circles = Mention("square", 1, "blue", "small", "left"), Mention("circle", 2, "red", "large")
    expected = "2 large red circle; small blue square at left; on striped"  # Meaning.canonical's docstring
    assert Meaning((square, circles), "striped").canonical() == expected
    assert Meaning((circles, square), "striped").canonical() == expected
    assert Meaning((Mention("star", None, "white"),)).canonical() == "several white star"


def test_config_refusals_and_the_probability_bounds():
    with pytest.raises(UserError, match=r"adapt_images: expected at least 1 when heldout_languages is set"):
        load_config(SynthConfig, overrides=["heldout_languages=[zh]", "adapt_images=0"])
    with pytest.raises(UserError, match=r"languages: need at least one training language that is not held out"):
        load_config(SynthConfig, overrides=["languages=[en, zh]", "heldout_languages=[en, zh]"])
    bounds = load_config(SynthConfig, overrides=["p_mention_background=0", "p_mention_colour=1"])
    assert (bounds.p_mention_background, bounds.p_mention_colour) == (0.0, 1.0)
    with pytest.raises(UserError, match=r"p_mention_size: expected a probability in \[0, 1\], got 1.5"):
        load_config(SynthConfig, overrides=["p_mention_size=1.5"])


def test_a_key_value_override_is_named_as_the_key_not_as_the_flag_it_overrides():
    """`synth --image-size 32 image_size=5`: the 5 came from the KEY=VALUE, so the error names image_size, not the
    flag the user typed with a good value."""
    from data_prep.cli import build_parser
    from data_prep.synth.cli import config_from_args

    args = build_parser().parse_args(["synth", "--out", "w", "--image-size", "32", "image_size=5"])
    with pytest.raises(UserError) as err:
        config_from_args(args)
    assert str(err.value) == "<defaults> + overrides: image_size: expected 16..1024 pixels, got 5"
    with pytest.raises(UserError, match=r"^--image-size 5: expected 16..1024 pixels, got 5$"):
        config_from_args(build_parser().parse_args(["synth", "--out", "w", "--image-size", "5"]))


def test_a_smaller_world_written_over_a_larger_one_leaves_none_of_its_splits_or_dictionaries(tmp_path):
    """An earlier world's train-parallel/ and the dictionaries of a language the new world lacks would be read as
    part of the new world; they go, and every ordered pair of distinct languages has one file."""
    import json

    out = tmp_path / "w"
    generate(tiny(train_images=6, val_images=3, test_images=2, languages=["en", "de", "ru"], parallel_train_images=2),
             out, progress=False)
    pairs = {f"{s}-{t}.txt" for s in ("en", "de", "ru") for t in ("en", "de", "ru") if s != t}
    assert {p.name for p in (out / "dictionary").iterdir()} == pairs | {"concepts.json"}
    assert (out / "train-parallel").is_dir()
    (out / "train" / "notes.txt").write_text("mine")  # a split folder's other files (a feature cache) stay
    generate(tiny(train_images=6, val_images=3, test_images=2, languages=["en", "de"]), out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["dictionary", "test", "train", "val", "world.yaml"]
    assert (out / "train" / "notes.txt").read_text() == "mine"
    assert {p.name for p in (out / "dictionary").iterdir()} == {"en-de.txt", "de-en.txt", "concepts.json"}
    concepts = json.loads((out / "dictionary" / "concepts.json").read_text(encoding="utf-8"))
    assert {lang for langs in concepts.values() for lang in langs} == {"en", "de"}


def test_a_world_yaml_of_another_config_is_no_world(tmp_path, capsys):
    """A folder whose world.yaml is some other YAML mapping (no seed: not a SynthConfig) holds no world: refused."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "world.yaml").write_text("lr: 0.1\n")
    assert synth_cli(["synth", "--out", str(out), *SMALL]) == 2
    assert f"{out / 'world.yaml'} is not a world's config" in capsys.readouterr().err
    assert (out / "world.yaml").read_text() == "lr: 0.1\n"


@pytest.mark.parametrize("override, message", [
    ("languages=[en, de, en]", "languages: duplicate codes in ['en', 'de', 'en']"),
    ("max_objects=7", "max_objects: expected 1..6, got 7"),
    ("image_format=gif", "image_format: expected 'png' or 'jpg', got 'gif'"),
    ("pixel_noise=65", "pixel_noise: expected 0..64, got 65.0"),
])
def test_each_config_bound_is_one_line_naming_the_key_and_what_it_expects(override, message):
    with pytest.raises(UserError) as err:
        load_config(SynthConfig, overrides=[override])
    assert str(err.value) == f"<defaults> + overrides: {message}"


def test_an_out_that_is_a_file_or_holds_a_garbled_world_yaml_is_refused_and_left_as_it_is(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    assert synth_cli(["synth", "--out", str(tmp_path / "file"), *SMALL]) == 2
    assert (f"error: --out {tmp_path / 'file'}: is a file; expected the folder the world is written into"
            in capsys.readouterr().err)
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "world.yaml").write_text("seed: [1\n")
    assert synth_cli(["synth", "--out", str(garbled), *SMALL]) == 2
    assert f"{garbled / 'world.yaml'} is not a world's config" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine" and [p.name for p in garbled.iterdir()] == ["world.yaml"]


def test_an_unknown_shape_background_or_lexicon_is_refused_naming_it():
    """Guards of the renderer and the lexicon loader: a name no table holds is an error naming it, never a blank
    picture or an empty caption."""
    from data_prep.synth.lexicon import load_lexicon
    from data_prep.synth.render import _background, unit_outline
    from data_prep.synth.scene import Background

    with pytest.raises(ValueError, match="no outline for shape 'blob'"):
        unit_outline("blob")
    with pytest.raises(ValueError, match="unknown background 'dotted'"):
        _background(Background("dotted", (0, 0, 0), (9, 9, 9), 0.0, 0.1, 0.0), 8, np.random.default_rng(0))
    with pytest.raises(KeyError, match="unknown language 'xx'"):
        load_lexicon("xx")
