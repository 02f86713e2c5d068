"""``globetrotter-data``: the console script lives on the globetrotter side and holds every sub-command; a
sub-command whose module fails to import is reported, never dropped."""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import pytest

from data_prep import cli as data_prep_cli
from globetrotter import data_cli

ROOT = Path(__file__).resolve().parents[1]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_console_script_is_the_globetrotter_side_parser():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["globetrotter-data"] == "globetrotter.data_cli:main"


def test_every_sub_command_in_its_help_place_and_declared_by_its_module():
    names = list(_subcommands(data_cli.build_parser()))
    assert names == ["synth", "tokenizer", "inspect", "multi30k", "flickr8k", "globetrotter", "xtd10", "folder",
                     "more-captions", "features"]
    assert names == [name for _, declared in data_cli.COMMANDS for name in declared]
    # the data layer's own parser: its sub-commands alone, none of which needs globetrotter
    assert list(_subcommands(data_prep_cli.build_parser())) == [
        name for _, declared in data_prep_cli.COMMANDS for name in declared]
    assert all(module.startswith("data_prep.") for module, _ in data_prep_cli.COMMANDS)


def test_a_sub_command_whose_import_fails_is_listed_and_its_use_is_a_one_line_error(monkeypatch, capsys):
    commands = data_cli.COMMANDS + (("globetrotter.no_such_module", ("broken", "also-broken")),)
    monkeypatch.setattr(data_cli, "COMMANDS", commands)
    parser = data_cli.build_parser()
    assert list(_subcommands(parser))[-2:] == ["broken", "also-broken"]
    help_text = " ".join(parser.format_help().split())
    assert ("broken UNAVAILABLE (importing globetrotter.no_such_module failed: ModuleNotFoundError: No module named "
            "'globetrotter.no_such_module')") in help_text
    for argv in (["broken"], ["broken", "--help"], ["also-broken", "x", "--flag", "1"]):
        with pytest.raises(SystemExit) as done:
            data_cli.main(argv)
        assert done.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: globetrotter-data {argv[0]}: unavailable: importing globetrotter.no_such_module "
                       "failed: ModuleNotFoundError: No module named 'globetrotter.no_such_module'"]
    # the other sub-commands still work
    with pytest.raises(SystemExit) as done:
        data_cli.main(["inspect", "--help"])
    assert done.value.code == 0 and "inspect" in capsys.readouterr().out


def test_an_import_error_inside_a_module_is_reported_with_its_cause(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_missing_dependency.py").write_text("import no_such_dependency_xyz\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "needs_missing_dependency", raising=False)
    parser = data_prep_cli.build_parser((("needs_missing_dependency", ("extra",)),))
    assert "No module named 'no_such_dependency_xyz'" in " ".join(parser.format_help().split())
    assert data_prep_cli.run(parser, ["extra"]) == 2
    assert "globetrotter-data extra: unavailable: importing needs_missing_dependency failed" in capsys.readouterr().err


def test_a_sub_command_whose_dependency_is_missing_names_the_install_command(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_faiss_like.py").write_text("import no_such_dependency_xyz\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "needs_faiss_like", raising=False)
    parser = data_prep_cli.build_parser((("needs_faiss_like", ("extra",)),))
    assert data_prep_cli.run(parser, ["extra"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no module named 'no_such_dependency_xyz'" in err[0] and "pip install -e" in err[0]


# ----------------------------------------------------------------------------- the contact sheet's fonts
def test_fallback_fonts_cover_what_the_default_lacks_and_name_the_rest():
    from data_prep.inspect import choose_fallback_fonts

    default = frozenset(range(0x20, 0x500))  # Latin, Greek, Cyrillic
    cjk = ("Fake CJK", frozenset(range(0x3040, 0xA000)))
    arabic = ("Fake Arabic", frozenset(range(0x600, 0x700)))
    chars = {"en": set("a red square"), "ja": set("赤い四角"), "zh": set("红色"), "ar": set("مربع")}
    assert choose_fallback_fonts(chars, default, [arabic, cjk]) == (["Fake CJK", "Fake Arabic"], [])
    assert choose_fallback_fonts(chars, default, [arabic]) == (["Fake Arabic"], ["ja", "zh"])
    assert choose_fallback_fonts({"en": set("abc")}, default, [cjk]) == ([], [])


def test_contact_sheet_draws_anyway_and_warns_once_naming_the_languages_in_boxes(tiny_world, tmp_path, monkeypatch,
                                                                                    capsys):
    from data_prep import inspect

    monkeypatch.setattr(inspect, "candidate_fonts", lambda: [])  # a machine without any CJK font
    sheet = tmp_path / "sheet.png"
    with pytest.raises(SystemExit) as done:
        data_cli.main(["inspect", str(tiny_world / "test"), "--contact-sheet", str(sheet), "--sheet-size", "8"])
    assert done.value.code == 0 and sheet.stat().st_size > 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "ja captions" in err[0] and "boxes" in err[0] and "fonts-noto-cjk" in err[0], err


def test_contact_sheet_uses_an_installed_font_that_has_the_glyphs(monkeypatch):
    """A real installed font: a letter DejaVu Sans lacks and matplotlib's STIX fonts have is drawn, no warning."""
    from data_prep import inspect

    warnings: list[str] = []
    families = inspect.caption_fonts({"el": set("ᶁ κόκκινο")}, warnings.append)
    assert families[0] == "DejaVu Sans" and len(families) == 2 and not warnings
    assert not inspect.caption_fonts({"ru": set("красный")}, warnings.append)[1:]  # nothing missing: no search


def test_inspect_of_a_malformed_sample_is_a_one_line_error(tmp_path, capsys):
    from test_shards import write_raw_split  # tests/ is on sys.path (rootless conftest)

    write_raw_split(tmp_path / "nolang", {"caption": "x", "image_id": "a"}, b"not read")
    write_raw_split(tmp_path / "badimg", {"caption": "x", "lang": "en", "image_id": "a", "group": None}, b"not a jpeg")
    for split, extra, message in (("nolang", [], "json lacks valid field(s) lang"),
                                  ("badimg", ["--contact-sheet", str(tmp_path / "s.png")], "does not decode")):
        with pytest.raises(SystemExit) as done:
            data_cli.main(["inspect", str(tmp_path / split), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert done.value.code == 2 and len(err) == 1, err
        assert err[0].startswith(f"error: {tmp_path / split / 'train-000000.tar'}: sample 'k0'") and message in err[0]


def test_inspect_of_a_shard_that_is_no_tar_is_one_line_naming_it(tmp_path, capsys):
    from test_shards import write_raw_split

    write_raw_split(tmp_path / "s", {"caption": "x", "lang": "en", "image_id": "a"}, b"not read")
    shard = tmp_path / "s" / "train-000000.tar"
    shard.write_bytes(bytes(range(256)) * 12)  # random-looking bytes
    with pytest.raises(SystemExit) as done:
        data_cli.main(["inspect", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and err == [f"error: {shard}: unreadable shard (not a tar archive, or truncated: "
                                            "expected a .tar shard as globetrotter-data writes them)"]


def test_inspect_refuses_a_folder_as_contact_sheet_and_a_sheet_size_below_one_before_reading(tiny_world, tmp_path,
                                                                                                capsys):
    from conftest import run_data_cli

    folder = tmp_path / "sheets"
    folder.mkdir()
    split = tiny_world / "train"
    for extra, message in (
        (["--contact-sheet", str(folder)], f"--contact-sheet {folder}: is a folder, expected the path of a PNG file"),
        (["--contact-sheet", str(tmp_path / "s.png"), "--sheet-size", "0"], "--sheet-size must be a positive number "
                                                                           "of captions, got 0"),
        (["--sheet-size", "-3"], "got -3"),
    ):
        code, stdout, err = run_data_cli(["inspect", str(split), *extra], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err[-2000:]
        assert stdout == ""  # refused before the split is read
    assert list(tmp_path.iterdir()) == [folder] and not list(folder.iterdir())  # no sheet written anywhere


def test_inspect_help_says_the_sheet_size_counts_captions(capsys):
    """A contact sheet has one panel per sample: a test split shows one image once per language, so --sheet-size
    counts captions (its help said "images")."""
    with pytest.raises(SystemExit):
        data_cli.main(["inspect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--sheet-size N captions on the contact sheet" in text and "images on the contact sheet" not in text


def test_a_contact_sheet_named_without_a_suffix_is_written_and_named_as_the_png_it_is(tiny_world, tmp_path, capsys):
    from conftest import run_data_cli

    code, stdout, _ = run_data_cli(["inspect", str(tiny_world / "train"), "--contact-sheet", str(tmp_path / "sheet"),
                                    "--sheet-size", "2"], capsys)
    assert code == 0 and stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'sheet.png'}"
    assert [p.name for p in tmp_path.iterdir()] == ["sheet.png"]


def test_inspect_check_fails_when_the_manifest_counts_differ_from_the_shards(tiny_world, tmp_path, capsys):
    import json
    import shutil

    from conftest import run_data_cli

    split = tmp_path / "train"
    shutil.copytree(tiny_world / "train", split)
    manifest = json.loads((split / "manifest.json").read_text())
    lang = sorted(manifest["languages"])[0]
    for changed, message in ((dict(manifest, num_samples=97), "num_samples is 97 but the shards hold 96 samples"),
                             (dict(manifest, languages={**manifest["languages"], lang: 0}),
                              f"languages counts differ from the shards' samples ({lang} 0 recorded, ")):
        (split / "manifest.json").write_text(json.dumps(changed))
        code, _, err = run_data_cli(["inspect", str(split), "--check"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {split / 'manifest.json'}: ")
        assert message in lines[0], lines
    code, _, _ = run_data_cli(["inspect", str(split)], capsys)  # without --check: not verified
    assert code == 0
    (split / "manifest.json").write_text(json.dumps(manifest))
    code, stdout, _ = run_data_cli(["inspect", str(split), "--check"], capsys)
    assert code == 0 and "manifest counts hold: 96 samples, 4 language(s)" in stdout


def test_inspect_check_decodes_every_image_and_refuses_an_empty_caption(tiny_world, tmp_path, capsys):
    """Was: exit 0 and "manifest counts hold" for a split with a truncated image or a blank caption."""
    import io
    import shutil

    from PIL import Image

    from conftest import run_data_cli, truncate_image
    from test_shards import write_raw_split

    split = tmp_path / "train"
    shutil.copytree(tiny_world / "train", split, ignore=shutil.ignore_patterns("features"))
    shard = truncate_image(split, "train-00050")
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG")
    write_raw_split(tmp_path / "blank", {"caption": " ", "lang": "en", "image_id": "a"}, buf.getvalue())
    for folder, message, without_check in (
        (split, f"error: {shard}: sample 'train-00050' has a .png image that does not decode (", 0),
        # an empty caption is refused by every reader of the split (check_meta), inspect without --check too
        (tmp_path / "blank", f"error: {tmp_path / 'blank' / 'train-000000.tar'}: sample 'k0' has an empty caption", 2),
    ):
        code, _, err = run_data_cli(["inspect", str(folder)], capsys)  # without --check: images not decoded
        assert code == without_check, err
        code, stdout, err = run_data_cli(["inspect", str(folder), "--check"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(message), err
        assert "samples hold" not in stdout
    code, stdout, _ = run_data_cli(["inspect", str(tiny_world / "train"), "--check"], capsys)
    assert code == 0 and "samples hold: 96 samples, every image decodes, no caption is empty" in stdout


def test_overrides_after_an_option_reach_the_sub_command(capsys):
    """``features build SPLIT --config FILE key=value`` (train.py's order) gives the override to the command; a stray
    word is still refused as argparse refuses it."""
    from conftest import run_data_cli
    from data_prep.cli import fold_overrides
    from globetrotter.data_cli import build_parser

    parser = build_parser()
    parsed, extras = parser.parse_known_args(["features", "build", "S", "--config", "C.yaml", "data.feature_views=2",
                                              "threads=1"])
    assert fold_overrides(parsed, extras) == [] and parsed.overrides == ["data.feature_views=2", "threads=1"]
    parsed, extras = parser.parse_known_args(["features", "build", "S", "--config", "C.yaml", "stray"])
    assert fold_overrides(parsed, extras) == ["stray"]
    code, _, err = run_data_cli(["features", "build", "S", "--config", "C.yaml", "stray"], capsys)
    assert code == 2 and "unrecognized arguments: stray" in err


@pytest.mark.parametrize("argv, flag", [
    (["tokenizer", "S", "--min-frequency", "-3"], "--min-frequency"),
    (["features", "build", "S", "--batch-images", "0"], "--batch-images"),
    (["features", "build", "S", "--workers", "-1"], "--workers"),
    (["features", "finetune", "S", "--from-run", "R", "--out", "O", "--workers", "-1"], "--workers"),
])
def test_counts_out_of_range_are_refused_by_the_parser(argv, flag, capsys):
    """A negative or zero count is argparse's one-line error naming the flag, not a traceback from the library."""
    from conftest import run_data_cli

    code, stdout, err = run_data_cli(argv, capsys)
    assert code == 2 and stdout == "" and f"argument {flag}:" in err.strip().splitlines()[-1]


def test_a_path_of_the_wrong_kind_is_one_line_naming_it(tmp_path, capsys):
    """An output under a regular file (or a file where a folder is written) is the user's to fix: one line, exit 2."""
    from conftest import run_data_cli

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run_data_cli(["synth", "--out", str(blocker / "world"), "--train-images", "4", "--val-images", "4",
                                 "--test-images", "4", "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {blocker}") and "not a directory" in lines[0]


def test_backretrievals_cli_reports_a_path_of_the_wrong_kind_in_one_line(capsys):
    from backretrieval.errors import run_cli

    def main(_argv):
        raise FileExistsError(17, "File exists", "/tmp/cache")

    assert run_cli(main, []) == 2
    assert capsys.readouterr().err.strip() == ("error: /tmp/cache: file exists (a path this command was given or writes "
                                               "under; give another)")


def test_contact_sheet_captions_wrap_by_columns_so_cjk_lines_fit_the_panel():
    from data_prep.inspect import display_width, shorten_to_width, wrap_to_width

    zh = "一只红色的大球在左边的蓝色方块旁边，背景是绿色的草地和天空，还有一只黄色的星星"
    lines = wrap_to_width(shorten_to_width(zh, 60), 30).split("\n")
    assert all(display_width(line) <= 30 for line in lines) and len(lines) == 2 and lines[-1].endswith("...")
    assert wrap_to_width("a red ball next to a blue square", 30) == "a red ball next to a blue\nsquare"


@pytest.mark.parametrize("argv, message", [
    (["--image-size", "5"], "error: --image-size 5: expected 16..1024 pixels, got 5"),
    (["--train-images", "-1"], "error: --train-images -1: expected at least 1, got -1"),
    (["--seed", "-1"], "error: --seed -1: expected a non-negative integer, got -1"),
    (["--workers", "-1"], "error: --workers -1: expected >= 0, got -1"),
    (["--held-out", "en,en"], "error: --held-out en,en: duplicate codes in ['en', 'en']"),
    (["--languages", ""], "error: --languages '': need at least one training language that is not held out"),
    # a KEY=VALUE override wins over the flag, and is named by its key
    (["--image-size", "5", "image_size=7"], "error: <defaults> + overrides: image_size: expected 16..1024 pixels, got 7"),
])
def test_a_bad_synth_flag_is_named_as_the_flag_typed(argv, message, tmp_path, capsys):
    """`synth --image-size 5` said '<defaults> + overrides: image_size: ...' (and --held-out was heldout_languages):
    the user typed a flag, so the message names it and its value as typed."""
    from conftest import run_data_cli

    code, _, err = run_data_cli(["synth", "--out", str(tmp_path / "w"), "--no-progress", *argv], capsys)
    assert code == 2 and err.strip().splitlines() == [message]
    assert not (tmp_path / "w").exists()


def test_inspect_counts_the_groups_a_split_has_and_none_for_a_one_language_split(tiny_world):
    from data_prep.inspect import summarize
    from data_prep.shards import read_captions

    assert summarize(tiny_world / "train")["groups"] == 0  # train captions carry no group
    test_groups = {m["group"] for m in read_captions(tiny_world / "test")} - {None}
    assert test_groups and summarize(tiny_world / "test")["groups"] == len(test_groups)


def test_fallback_fonts_take_the_earlier_candidate_on_a_tie():
    from data_prep.inspect import choose_fallback_fonts

    chars = {"zh": set("中文")}
    same = frozenset(map(ord, "中文"))
    assert choose_fallback_fonts(chars, frozenset(), [("First", same), ("Second", same)]) == (["First"], [])
    assert choose_fallback_fonts(chars, frozenset(), [("Second", same), ("First", same)]) == (["Second"], [])


def test_a_word_wider_than_a_line_starts_on_a_new_line_when_less_than_a_wide_character_is_left():
    """Hand-worked at 10 columns (a CJK character takes two): after "abcdefgh" (8) one column is left, too little
    for any of the cut, so the cut starts a line of its own; after "ab" the cut fills the 7 columns left."""
    from data_prep.inspect import wrap_to_width

    assert wrap_to_width("abcdefgh 一二三四五六", 10) == "abcdefgh\n一二三四五\n六"
    assert wrap_to_width("ab 一二三四五六", 10) == "ab 一二三\n四五六"
    assert wrap_to_width("一二三四五六七八九十一二", 10) == "一二三四五\n六七八九十\n一二"


def test_wrap_to_width_refuses_a_width_narrower_than_one_wide_character():
    """A CJK character takes 2 columns: at width 1 none fits a line, and the cut looped for ever."""
    from data_prep.inspect import wrap_to_width

    with pytest.raises(ValueError, match="at least 2 columns"):
        wrap_to_width("一", 1)
    assert wrap_to_width("一二", 2) == "一\n二"


def test_a_font_file_that_does_not_read_has_no_characters(tmp_path):
    from data_prep.inspect import _charset

    (tmp_path / "broken.ttf").write_bytes(b"not a font")
    assert _charset(str(tmp_path / "broken.ttf")) == frozenset()


def test_python_m_data_prep_cli_runs_the_data_commands():
    """``python -m data_prep.cli`` (the data layer without the method's commands) parses and exits with the code."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "data_prep.cli", "synth", "--out"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 2 and "--out: expected one argument" in done.stderr


def test_features_build_with_imported_embeddings_says_to_import_them(tmp_path, capsys):
    """model.image_backbone=imported (a run on someone else's vectors) names no network to build a cache with: one
    line saying which command imports them, nothing written."""
    from conftest import run_data_cli

    code, _, err = run_data_cli(["features", "build", str(tmp_path / "S"), "--out", str(tmp_path / "out"),
                                 "model.image_backbone=imported", "model.image_pretrained=clip",
                                 "data.features=auto", "model.freeze_image_backbone=true", "loss.image=0"], capsys)
    assert code == 2 and err.strip().splitlines() == [
        "error: model.image_backbone=imported has no network to build features with; import the embeddings with "
        "globetrotter-data features import SPLIT --embeddings FILE --name NAME"]
    assert sorted(tmp_path.iterdir()) == []
