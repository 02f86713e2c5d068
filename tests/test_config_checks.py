"""Config keys a run ignores: set away from their defaults, reported one line each at the start
of training when the user set them (``globetrotter.config_checks``)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from globetrotter.config import TrainConfig, load_train_config
from globetrotter.config_checks import RULES, _field, ignored_keys, show, warn_ignored_keys

REPO = Path(__file__).resolve().parents[1]


def lines(*overrides: str, config: str | None = None) -> list[str]:
    return [str(i) for i in ignored_keys(load_train_config(REPO / config if config else None, list(overrides)))]


def test_every_key_a_rule_names_is_a_config_key():
    assert RULES and all(keys for keys, _ in RULES)
    for keys, _ in RULES:
        for key in keys:
            value = _field(TrainConfig(), key)  # KeyError for a misspelt key
            assert not dataclasses.is_dataclass(value), key  # a setting, not a group of them
    for misspelt in ("data.image_sise", "no_such_group.steps", "adapt.from_run"):  # the check can fail
        with pytest.raises(KeyError, match="no such config key"):
            _field(TrainConfig(), misspelt)


@pytest.mark.parametrize("config", [None, "configs/quickstart.yaml", "configs/flickr8k.yaml",
                                    "configs/flickr8k-supervised.yaml", "configs/flickr8k-supervised-matched.yaml",
                                    "configs/globetrotter-paper.yaml", "configs/supervised.yaml",
                                    "configs/supervised-paper.yaml"])
def test_the_main_recipes_read_every_key_they_set(config):
    assert lines(config=config) == []


def test_the_text_only_twin_names_what_it_inherits_and_never_reads():
    found = lines(config="configs/flickr8k-text-only.yaml")
    no_images = "is ignored: no loss uses images (loss.image=0, loss.cross=0, loss.text=0)"
    assert found == [
        f"data.image_size=224 {no_images}", f"data.crop_scale_min=0.5 {no_images}", f"data.hue_jitter=0 {no_images}",
        f"data.grayscale=0 {no_images}", f"model.image_backbone=efficientnet_lite0 {no_images}",
        f"model.image_pretrained=package {no_images}", f"model.freeze_image_backbone=true {no_images}",
        f"model.image_head_x=features {no_images}",
        "model.token_init_alpha=[3, 10, 30] is ignored: model.token_init=random",
        "model.token_init_std=1 is ignored: model.token_init=random",
        "loss.transitive=official is ignored: loss.text=0 and loss.cross=0",
    ]
    # data.features stays: without images it still selects the in-memory caption batches of the full twin
    assert not any(line.startswith("data.features=") for line in found)


def test_the_sigurdsson_twin_names_the_transformer_it_has_not():
    found = lines(config="configs/flickr8k-sigurdsson.yaml")
    assert "model.layers=2 is ignored: model.text_encoder=sigurdsson" in found
    assert "model.ffn=256 is ignored: model.text_encoder=sigurdsson" in found
    assert not any(line.startswith(("model.heads=", "model.d_model=", "model.dropout=")) for line in found)


@pytest.mark.parametrize("overrides, expected", [
    (["model.token_init_alpha=[3, 10, 30]"], ["model.token_init_alpha=[3, 10, 30] is ignored: model.token_init=random"]),
    (["model.token_init_folds=3", "model.token_init_std=null"],
     ["model.token_init_folds=3 is ignored: model.token_init=random"]),
    (["model.token_init=image_pivot", "data.features=auto", "model.freeze_image_backbone=true",
      "model.image_pretrained=package", "model.image_backbone=efficientnet_lite0", "model.token_init_folds=3"],
     ["model.token_init_folds=3 is ignored: model.token_init_alpha is one value (nothing to cross-validate)"]),
    (["model.text_encoder=sigurdsson", "loss.cloze=0", "model.layers=2", "model.heads=2", "model.ffn=64"],
     ["model.layers=2 is ignored: model.text_encoder=sigurdsson", "model.heads=2 is ignored: model.text_encoder=sigurdsson",
      "model.ffn=64 is ignored: model.text_encoder=sigurdsson"]),
    (["model.languages=[en, de]"],
     ["model.languages=[en, de] is ignored: model.text_encoder=transformer (one table shared by every language)"]),
    (["val.select_test=mcnemar", "val.select_alpha=0.1", "val.every=0"],
     ["val.select_test=mcnemar is ignored: val.every=0 (no validation)",
      "val.select_alpha=0.1 is ignored: val.every=0 (no validation)"]),
    (["val.select_alpha=0.1"],
     ["val.select_alpha=0.1 is ignored: val.select_test=null (the best checkpoint is the plain max)"]),
    (["val.select_by=", "val.select_alpha=0.1"], ["val.select_alpha=0.1 is ignored: val.select_by is empty (no best checkpoint)"]),
    (["adapt.language=el", "adapt.epochs=2"],
     ["adapt.language=el is ignored: adapt.from=null (an ordinary run, no adaptation)",
      "adapt.epochs=2 is ignored: adapt.from=null (an ordinary run, no adaptation)"]),
    (["data.device_source_size=96"], ["data.device_source_size=96 is ignored: data.augment_on=cpu"]),
    (["data.augment_on=device", "data.device_source_size=96"], []),
    (["data.features=auto", "model.freeze_image_backbone=true", "model.image_pretrained=package",
      "model.image_backbone=efficientnet_lite0", "data.augment_on=device", "data.shuffle_buffer=10"],
     ["data.augment_on=device is ignored: data.features=auto (cached features: no pixels are streamed)",
      "data.shuffle_buffer=10 is ignored: data.features=auto (cached features: no pixels are streamed)"]),
    (["data.feature_views=2", "data.neighbours_k=5"],
     ["data.neighbours_k=5 is ignored: data.batching=random",
      "data.feature_views=2 is ignored: data.features=null (pixels: no feature cache)"]),
    (["loss.cloze=0", "loss.mask_prob=0.2"], ["loss.mask_prob=0.2 is ignored: loss.cloze=0"]),
    (["loss.alpha_source=supervised", "loss.margin=0.5"],
     ["loss.margin=0.5 is ignored: loss.alpha_source=supervised (α from true pairs)"]),
    (["loss.cross=0", "model.image_head_x=features"], ["model.image_head_x=features is ignored: loss.cross=0"]),
    (["loss.text=0", "loss.image=0", "loss.cross=0", "loss.temperature=0.05", "data.image_size=32", "data.features=auto"],
     ["data.image_size=32 is ignored: no loss uses images (loss.image=0, loss.cross=0, loss.text=0)",
      "loss.temperature=0.05 is ignored: loss.text, loss.image and loss.cross are 0"]),
])
def test_each_rule_names_the_key_its_value_and_why(overrides, expected):
    assert lines(*overrides) == expected


def test_only_keys_set_away_from_their_default_count():
    assert lines("model.token_init=random", "model.token_init_alpha=3", "adapt.split=adapt", "val.every=0") == []
    assert lines("model.token_init_alpha=5") == ["model.token_init_alpha=5 is ignored: model.token_init=random"]


def test_values_are_shown_as_overrides_write_them():
    assert [show(v) for v in (None, True, 3.0, 0.25, [3.0, 10.0], {"a": [1, 2]}, "x")] == \
        ["null", "true", "3", "0.25", "[3, 10]", "{a: [1, 2]}", "x"]


def test_training_logs_one_warning_line_per_ignored_key_at_its_start(monkeypatch, tmp_path, capsys):
    from globetrotter.training import trainer

    class Stop(Exception):
        pass

    def stop(cfg, log, device):
        raise Stop

    monkeypatch.setattr(trainer, "ensure_data", stop)  # the warnings come before anything is read or built
    cfg = load_train_config(None, [f"output_dir={tmp_path}", "model.token_init_alpha=[3, 10, 30]",
                                   "data.device_source_size=96"])
    with pytest.raises(Stop):
        trainer.train(cfg)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert printed == ["warning: data.device_source_size=96 is ignored: data.augment_on=cpu",
                       "warning: model.token_init_alpha=[3, 10, 30] is ignored: model.token_init=random"]
    assert [str(i) for i in warn_ignored_keys(cfg, lambda s: None)] == [p.removeprefix("warning: ") for p in printed]


class Stop(Exception):
    pass


def started(monkeypatch, capsys, *argv: str) -> list[str]:
    """The ``warning:`` lines ``train.py ARGV`` prints before it reads any data (the run stops there)."""
    from accelerate.state import AcceleratorState

    from globetrotter.training import cli, trainer

    def stop(cfg, log, device):
        raise Stop

    monkeypatch.setattr(trainer, "ensure_data", stop)
    AcceleratorState._reset_state()  # accelerate fixes mixed_precision once per process; configs set bf16 or none
    try:
        with pytest.raises(Stop):
            cli._main(list(argv))
    finally:
        AcceleratorState._reset_state()
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]


TRAIN_CONFIGS = sorted(p.name for p in (REPO / "configs").glob("*.yaml") if p.name != "adapt.yaml")  # adapt.yaml:
# overrides over a trained run's saved config (adapt.from); configs/zeroshot/ holds globetrotter-zeroshot's configs


@pytest.mark.parametrize("name", TRAIN_CONFIGS)
def test_a_shipped_config_run_as_written_warns_about_no_key(name, monkeypatch, capsys, tmp_path):
    """The text-only and Sigurdsson twins inherit keys of flickr8k.yaml / quickstart.yaml their setting never reads:
    run as the README says, each logged 2-11 warnings about keys the user never wrote."""
    monkeypatch.chdir(tmp_path)  # output_dir: runs/ here (the folder a stopped start made is taken away)
    assert started(monkeypatch, capsys, "--config", str(REPO / "configs" / name)) == []


def test_an_ignored_key_the_user_overrides_is_still_warned_about(monkeypatch, capsys, tmp_path):
    printed = started(monkeypatch, capsys, "--config", str(REPO / "configs/flickr8k-text-only.yaml"),
                      f"output_dir={tmp_path}", "data.image_size=96")
    assert printed == ["warning: data.image_size=96 is ignored: no loss uses images (loss.image=0, loss.cross=0, "
                       "loss.text=0)"]


def test_an_ignored_key_the_config_file_sets_is_warned_about_and_its_bases_keys_are_not(monkeypatch, capsys,
                                                                                        tmp_path):
    """Its base (the text-only twin) and that base's base (flickr8k.yaml) set 11 keys the run ignores: none is the
    user's. The keys the file sets are, written as a section or again with the base's value."""
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"_base_: {REPO / 'configs/flickr8k-text-only.yaml'}\nsteps: 7\n"
                    "model:\n  token_init_alpha: [1, 2]\nloss:\n  transitive: official\n", encoding="utf-8")
    printed = started(monkeypatch, capsys, "--config", str(mine), f"output_dir={tmp_path}")
    assert printed == ["warning: model.token_init_alpha=[1, 2] is ignored: model.token_init=random",
                       "warning: loss.transitive=official is ignored: loss.text=0 and loss.cross=0"]
    assert len(ignored_keys(load_train_config(mine))) == 11  # a bare config (a Python caller's): every key counts


def test_written_keys_are_the_files_own_and_the_overrides_dotted(tmp_path):
    from globetrotter.config_io import written_keys

    mine = tmp_path / "mine.yaml"
    mine.write_text(f"_base_: {REPO / 'configs/flickr8k.yaml'}\nmodel:\n  layers: 2\n  image_backbone_args: {{}}\n",
                    encoding="utf-8")
    assert written_keys(mine, ["loss.text=0", "data={image_size: 64}"]) == {
        "model.layers", "model.image_backbone_args", "loss.text", "data.image_size"}
    assert written_keys(None, ["steps=3"]) == {"steps"}
    found = ignored_keys(load_train_config(None, ["model.image_backbone_args={a: 1}", "loss.text=0", "loss.image=0",
                                                  "loss.cross=0"]), written={"model.image_backbone_args.a"})
    assert [i.key for i in found] == ["model.image_backbone_args"]  # a key under a mapping key writes it


def test_a_resumed_run_or_an_adaptation_warns_about_no_key_its_start_warned_about(tiny_world, tmp_path, capsys):
    """A resume reads the run's saved config (``--config RUN/config.yaml``): every key is in that file, none is new,
    and a changed one is refused, so the start's warnings were repeated on every resume. An adaptation takes the
    run's saved config as its base: only the keys of its own file and overrides are the user's."""
    from conftest import TINY
    from globetrotter.training import cli

    argv = [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}", f"output_dir={tmp_path}",
            *TINY, "steps=2", "model.token_init_alpha=[3, 10, 30]"]
    assert cli._main(argv) == 0
    alpha = "warning: model.token_init_alpha=[3, 10, 30] is ignored: model.token_init=random"
    assert alpha in capsys.readouterr().out.splitlines()
    assert cli._main(["--config", str(tmp_path / "quickstart" / "config.yaml"), "steps=3", "--resume", "latest"]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    from globetrotter.config_io import written_keys
    from globetrotter.training.adapt import load_adapt_config

    adapting = ["--config", str(REPO / "configs/adapt.yaml"), f"adapt.from={tmp_path / 'quickstart'}",
                "adapt.language=el", "model.token_init_std=2"]
    cfg = load_adapt_config(adapting[1], adapting[2:])
    assert [i.key for i in ignored_keys(cfg)] == ["model.token_init_alpha", "model.token_init_std"]
    assert [i.key for i in ignored_keys(cfg, written_keys(adapting[1], adapting[2:]))] == ["model.token_init_std"]


def test_a_resume_warns_about_the_keys_its_changed_run_keys_make_ignored(tiny_world, tmp_path, capsys):
    """``val.every=0`` on a resume (a run key: allowed) makes the run's ``val.select_by`` and ``val.select_test``
    ignored: those lines are said, as a start would say them (the resume stayed silent: it warned only at a start)."""
    from conftest import TINY
    from globetrotter.training import cli

    argv = [f"data.root={tiny_world}", f"data.tokenizer={tmp_path / 'tokenizer.json'}", f"output_dir={tmp_path}",
            *TINY, "steps=2", "val.every=2", "val.select_test=bootstrap", "val.max_per_lang=4", "val.bkr_ks=[1]",
            "val.select_by=val/bkr@1"]
    assert cli._main(argv) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    saved = str(tmp_path / "quickstart" / "config.yaml")
    assert cli._main(["--config", saved, "steps=3", "val.every=0", "--resume", "latest"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert said == [f"warning: {key} is ignored: val.every=0 (no validation)"
                    for key in ("val.select_by=val/bkr@1", "val.select_test=bootstrap")]


def test_a_written_key_never_counts_as_writing_a_key_its_name_starts_with():
    """model.image_backbone_args written by the user does not write model.image_backbone (a key named by the same
    letters): an inherited backbone draws no line, the user's arguments do."""
    cfg = load_train_config(None, ["model.image_backbone=resnet34", "model.image_backbone_args={a: 1}", "loss.text=0",
                                   "loss.image=0", "loss.cross=0"])
    assert [i.key for i in ignored_keys(cfg)] == ["model.image_backbone", "model.image_backbone_args"]
    assert [i.key for i in ignored_keys(cfg, written={"model.image_backbone_args"})] == ["model.image_backbone_args"]
    assert [i.key for i in ignored_keys(cfg, written={"model.image_backbone"})] == ["model.image_backbone"]
