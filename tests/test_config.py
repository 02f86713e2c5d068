"""Config loading: YAML + overrides, validation errors that name the key, saved config round-trips."""
from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
from pathlib import Path

import pytest

from globetrotter.config import TrainConfig, load_train_config
from globetrotter.config_io import load_config, parse_overrides, save_config
from globetrotter.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_and_overrides_are_applied(tmp_path):
    path = write(tmp_path, "steps: 50\nmodel:\n  layers: 2\n")
    cfg = load_train_config(path, ["optim.lr=3e-4", "loss.transitive=official", "val.bkr_ks=[1,3]", "val.select_by=val/bkr@3"])
    assert cfg.steps == 50 and cfg.model.layers == 2
    assert cfg.optim.lr == pytest.approx(3e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.loss.transitive == "official" and cfg.val.bkr_ks == [1, 3]
    assert cfg.model.heads == TrainConfig().model.heads  # untouched defaults stay


def test_int_is_accepted_for_float_but_not_the_reverse(tmp_path):
    assert load_train_config(None, ["optim.lr=1"]).optim.lr == 1.0
    with pytest.raises(UserError, match="'steps' expected int"):
        load_train_config(None, ["steps=1.5"])


@pytest.mark.parametrize(
    "text, message",
    [
        ("stepz: 3\n", "unknown key 'stepz'"),
        ("model:\n  layerz: 3\n", "unknown key 'model.layerz'"),
        ("model:\n  layers: three\n", "'model.layers' expected int"),
        ("loss:\n  transitive: maybe\n", "'loss.transitive' expected one of"),
        ("model: 3\n", "'model' must be a mapping"),
        ("model:\n  d_model: 100\n  heads: 3\n", "divisible"),
        ("- a\n- b\n", "expected a YAML mapping"),
        ("steps: [1,\n", "malformed YAML"),
        ("steps: 5\nseed: 1\nsteps: 6\n", r"line 3: malformed YAML \(key 'steps' given twice \(lines 1 and 3\)\)"),
        ("model:\n  layers: 1\n  layers: 2\n", r"key 'layers' given twice \(lines 2 and 3\)"),
        ("val:\n  select_by: test/sentence_translation\n", "checkpoints are chosen on val, never on test"),
        ("val:\n  select_by: val/bkr@3\n", r"'val/bkr@3': unknown metric \(expected one of \['val/bkr@1', "),
        ("val:\n  test_groups: -1\n", "val.test_groups must be >= 0"),
        ("data:\n  val_split: test\n", "data.val_split='test' is also data.test_split"),
        ("model:\n  heads: 0\n", "model.heads must be >= 1, got 0"),
        ("model:\n  dropout: 2\n", r"model.dropout must be in \[0, 1\), got 2.0"),
        ("optim:\n  betas: [0.9]\n", r"optim.betas must be two numbers in \[0, 1\), got \[0.9\]"),
        ("optim:\n  lr: -1\n", "optim.lr must be > 0, got -1.0"),
        ("seed: -1\n", "seed must be >= 0, got -1"),
        ("log_every: 0\n", "log_every must be >= 1, got 0"),
        ("keep_checkpoints: 0\n", "keep_checkpoints must be >= 1, got 0"),
        ("data:\n  workers: -1\n", "data.workers must be >= 0"),
        ("steps: 0\n", "steps must be > 0, got 0"),
        ("data:\n  image_size: 0\n", "data.image_size must be >= 1"),
        ("loss:\n  temperature: 0\n", "loss.temperature must be > 0, got 0"),
        ("run_name: ../../elsewhere\n", "run_name='../../elsewhere': expected a folder name, without '/'"),
        ("run_name: ''\n", "run_name='': expected a folder name"),
        ("data:\n  features: auto\nmodel:\n  freeze_image_backbone: true\n  image_pretrained: hub\n",
         "data.features needs model.image_pretrained package or a weights file, not hub"),
        ("loss:\n  text: -1\n", "loss.text must be >= 0"),
        ("mixed_precision: yes\n", "'mixed_precision' expected one of 'no' | 'bf16' | 'fp16', got True"),
        ("loss:\n  mask_prob: 1.5\n", r"loss.mask_prob must be in \(0, 1\] .*got 1.5"),
        ("loss:\n  corrupt_other: -0.2\n", r"loss.corrupt_other must be in \[0, 1\] .*got -0.2"),
        ("data:\n  shuffle_buffer: -5\n", "data.shuffle_buffer must be >= 0 .*got -5"),
        ("val:\n  every: -1\n", "val.every must be >= 0 .*got -1"),
        ("val:\n  bkr_ks: [0, 10]\n", r"val.bkr_ks must be distinct integers >= 1 .*got \[0, 10\]"),
        ("adapt:\n  vocab_size: 100\n", r"adapt.vocab_size=100: expected 0 \(no new token\) or at least 260"),
        ("val:\n  image_features: model\n", r"val.image_features='model': expected pixels, features, features:PATH or "
                                             r"timm:NAME\[:WEIGHTS\]"),
        ("val:\n  bkr_ks: [1, 1, 10]\n", r"val.bkr_ks must be distinct integers >= 1 .*got \[1, 1, 10\]"),
        ("data:\n  test_split: null\nval:\n  test_groups: 5\n",
         "val.test_groups=5 scores translation on the test split, but data.test_split is null"),
        ("data:\n  vocab_size: 100\n", r"data.vocab_size=100: expected at least 260 \(the 256 byte symbols"),
        ("data:\n  max_bad_samples: -1\n", "data.max_bad_samples must be >= 0, got -1"),
        ("data:\n  max_length: 3\n", "data.max_length must be at least 4, got 3"),
        ("data:\n  crop_scale_min: 0\n", r"data.crop_scale_min must be in \(0, 1\], got 0"),
        ("data:\n  hue_jitter: 0.6\n", r"data.hue_jitter in \[0, 0.5\], data.grayscale in \[0, 1\], got 0.4, 0.6, 0.2"),
        ("data:\n  feature_views: 1\n", r"data.feature_views must be >= 2 \(L_v contrasts two cached views\), got 1"),
        ("data:\n  neighbours_k: 0\n", "data.neighbours_k must be >= 1, got 0"),
        ("model:\n  languages: [en, en]\n", r"model.languages has duplicates: \['en', 'en'\]"),
        ("loss:\n  text: 0\n  image: 0\n  cross: 0\n  cloze: 0\n", "at least one loss weight must be > 0"),
        ("loss:\n  margin: 1\n", r"loss.margin must be in \[0, 1\), got 1"),
        ("optim:\n  weight_decay: -1\n", "optim.weight_decay must be >= 0, got -1"),
        ("optim:\n  min_lr_ratio: 2\n", r"optim.min_lr_ratio must be in \[0, 1\], got 2"),
        ("val:\n  max_per_lang: 0\n", "val.max_per_lang must be >= 1, or null for every val caption, got 0"),
        ("val:\n  select_alpha: 1\n", r"val.select_alpha must be in \(0, 1\), got 1"),
        ("val:\n  select_by: ''\n  select_test: mcnemar\n", "val.select_test=mcnemar needs val.select_by = val/bkr@K"),
        ("adapt:\n  epochs: 0\n", r"adapt.epochs must be > 0 \(or null to use steps\), got 0"),
        ("adapt:\n  old_batch: 0\n", r"adapt.old_batch and adapt.old_captions must be >= 1 \(or null\), got 0 and None"),
        ("batch_size: 1\n", r"batch_size must be > 1 \(a contrastive batch needs negatives\), got 1"),
        ("adapt:\n  from: run\n  language: de\nmodel:\n  text_encoder: sigurdsson\nloss:\n  cloze: 0\n",
         "adapt.from: only the shared transformer text encoder adapts to a new language"),
        ("data:\n  features: auto\nmodel:\n  freeze_image_backbone: true\n  image_backbone: imported\n",
         "model.image_backbone=imported needs model.image_pretrained: the imported embeddings' name"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(UserError, match=message) as err:
        load_train_config(path)
    assert str(path) in str(err.value)


def test_a_choice_yaml_reads_as_a_boolean_keeps_its_name(tmp_path):
    """YAML 1.1 reads `no` as False: mixed_precision=no (which the trainer's own messages suggest) is the choice."""
    assert load_train_config(None, ["mixed_precision=no"]).mixed_precision == "no"
    assert load_train_config(write(tmp_path, "mixed_precision: no\n")).mixed_precision == "no"


def test_overrides_may_follow_the_options(monkeypatch):
    """train.py's help shows `adapt.from=RUN adapt.language=el [--config FILE] [key=value ...]`: all are read."""
    from globetrotter.training import adapt, cli

    seen = {}

    def stop(config, overrides):
        seen.update(config=config, overrides=list(overrides))
        raise UserError("stop here")

    monkeypatch.setattr(adapt, "load_adapt_config", stop)
    assert cli.run_cli(cli._main, ["adapt.from=r", "--config", "c.yaml", "optim.lr=1e-3", "seed=7"]) == 2
    assert seen == {"config": "c.yaml", "overrides": ["adapt.from=r", "optim.lr=1e-3", "seed=7"]}


def test_without_a_config_train_py_reads_the_quickstart_and_says_so_when_it_is_missing(monkeypatch, tmp_path, capsys):
    """The default config ships with the repository: an install without it is told, not trained on bare defaults."""
    from globetrotter.training import adapt, cli

    seen = []

    def stop(config, overrides):
        seen.append(config)
        raise UserError("stop here")

    monkeypatch.setattr(adapt, "load_adapt_config", stop)
    assert cli.run_cli(cli._main, ["steps=2"]) == 2 and seen == [cli.DEFAULT_CONFIG]
    assert cli.run_cli(cli._main, ["adapt.from=r"]) == 2 and seen[-1] is None  # the run's own config
    missing = tmp_path / "configs" / "quickstart.yaml"
    monkeypatch.setattr(cli, "DEFAULT_CONFIG", missing)
    capsys.readouterr()
    assert cli.run_cli(cli._main, ["steps=2"]) == 2 and len(seen) == 2
    assert capsys.readouterr().err.strip() == (f"error: no --config, and the default {missing} is not there (the "
                                               f"configs ship with the repository: install it with `pip install -e .` "
                                               f"from a clone, or pass --config FILE)")


def test_missing_file_and_bad_override():
    with pytest.raises(UserError, match="config file not found"):
        load_train_config("/nonexistent/x.yaml")
    with pytest.raises(UserError, match="expected key.sub=value"):
        parse_overrides(["steps"])
    # a list or mapping that does not parse was taken as a string ("expected a mapping, got '{...'")
    with pytest.raises(UserError, match=r"override 'model.image_backbone_args=\{channels: \[16': malformed YAML"):
        parse_overrides(["model.image_backbone_args={channels: [16"])
    assert parse_overrides(["run_name=a:b]"]) == {"run_name": "a:b]"}  # a string that is no YAML stays one
    with pytest.raises(UserError, match="data.root is given a value by another override, so it has no key 'x'"):
        parse_overrides(["data.root=x", "data.root.x=3"])  # it said "'root' is set twice"


def test_saved_config_loads_back_identically(tmp_path):
    cfg = load_train_config(None, ["steps=7", "loss.cloze=0.5", "data.synth.seed=3"])
    path = save_config(cfg, tmp_path / "saved.yaml")
    assert load_train_config(path) == cfg


def test_base_config_is_merged(tmp_path):
    write(tmp_path, "steps: 5\nmodel:\n  layers: 1\n  heads: 2\n", "base.yaml")
    path = write(tmp_path, "_base_: base.yaml\nmodel:\n  layers: 3\n")
    cfg = load_train_config(path)
    assert (cfg.steps, cfg.model.layers, cfg.model.heads) == (5, 3, 2)


def test_shipped_configs_are_valid():
    configs = sorted((REPO / "configs").glob("*.yaml"))
    assert configs, "no configs shipped"
    for path in configs:
        load_config(TrainConfig, path)
    from globetrotter.zeroshot.config import ZeroShotConfig

    zeroshot = sorted((REPO / "configs" / "zeroshot").glob("*.yaml"))
    assert len(zeroshot) >= 3
    for path in zeroshot:
        load_config(ZeroShotConfig, path)


def test_the_real_photo_recipe_refuses_a_backbone_that_trains_and_its_comment_says_what_does():
    recipe = REPO / "configs" / "flickr8k.yaml"
    with pytest.raises(UserError, match="data.features reads cached backbone features"):
        load_train_config(recipe, ["model.freeze_image_backbone=false"])
    said = " ".join(line.lstrip("# ").strip() for line in recipe.read_text().splitlines() if line.startswith("#"))
    overrides = said.split("the paper's recipe instead, from pixels (")[1].split(")")[0].split()
    assert "model.freeze_image_backbone=false" in overrides
    cfg = load_train_config(recipe, overrides)
    assert (cfg.data.features, cfg.model.freeze_image_backbone, cfg.model.token_init) == (None, False, "random")


def test_cli_reports_config_errors_in_one_line_with_exit_2(tmp_path):
    path = write(tmp_path, "model:\n  layerz: 3\n")
    proc = subprocess.run([sys.executable, "train.py", "--config", str(path)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "model.layerz" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_empty_mapping_clears_a_mapping_key_and_an_empty_section_changes_nothing(tmp_path):
    """``model.image_backbone_args={}`` merged into the quickstart's half-width args and changed nothing: the run
    trained the half-width ResNet, and the packaged EfficientNet was refused for args the user had emptied."""
    quickstart = REPO / "configs" / "quickstart.yaml"
    assert load_train_config(quickstart).model.image_backbone_args  # the half-width ResNet's args
    assert load_train_config(quickstart, ["model.image_backbone_args={}"]).model.image_backbone_args == {}
    child = write(tmp_path, f"_base_: {quickstart}\nmodel:\n  image_backbone_args: {{}}\n")
    assert load_train_config(child).model.image_backbone_args == {}
    narrower = load_train_config(quickstart, ["model.image_backbone_args={stem_width: 16}"]).model
    assert narrower.image_backbone_args["stem_width"] == 16 and "channels" in narrower.image_backbone_args  # merged
    empty_section = write(tmp_path, f"_base_: {quickstart}\nmodel: {{}}\n", "section.yaml")
    assert load_train_config(empty_section) == load_train_config(quickstart)


def test_config_errors_name_the_right_line_file_and_value_once(tmp_path):
    unclosed = write(tmp_path, "steps: 5\nmodel:\n  d_model: [1, 2\nloss:\n  text: 1\n")
    with pytest.raises(UserError, match=r"line 4: malformed YAML \(expected ',' or ']', but got ':'; while parsing a "
                                        r"flow sequence opened on line 3\)"):
        load_train_config(unclosed)
    orphan = write(tmp_path, "_base_: nothere.yaml\nsteps: 5\n", "orphan.yaml")
    with pytest.raises(UserError, match=rf"^{orphan}: _base_ 'nothere.yaml': config file {tmp_path}/nothere.yaml "
                                        r"not found$"):
        load_train_config(orphan)
    with pytest.raises(UserError, match=r"overrides: optim.lr must be > 0, got -1.0$"):  # not "optim: optim.lr ..."
        load_train_config(None, ["optim.lr=-1"])
    with pytest.raises(UserError, match=r"'loss.text' expected float, got True \(YAML reads yes/no/on/off/true/false "
                                        r"as a boolean\)"):
        load_train_config(None, ["loss.text=yes"])


def test_package_weights_with_another_backbones_arguments_name_the_override_that_clears_them():
    """Was: refused only when the backbone was made, after the tokenizer was trained, with no way out."""
    swap = ["model.image_backbone=efficientnet_lite0", "model.image_pretrained=package"]
    with pytest.raises(UserError, match=r"model.image_backbone_args must be empty with model.image_pretrained=package"
                                        r".*: add the override model.image_backbone_args=\{\}$"):
        load_train_config(REPO / "configs" / "quickstart.yaml", swap)
    assert load_train_config(REPO / "configs" / "quickstart.yaml",
                             [*swap, "model.image_backbone_args={}"]).model.image_backbone_args == {}


def test_a_folder_given_as_the_config_is_named_as_a_folder(tmp_path):
    """`train.py --config DIR` said 'DIR: config file not found'."""
    with pytest.raises(UserError) as err:
        load_train_config(tmp_path)
    assert str(err.value) == f"{tmp_path}: a folder; expected a YAML config file"


def test_config_io_refuses_a_boolean_int_and_a_base_loop_and_reads_an_empty_file_as_no_key(tmp_path):
    """Mutation audit of data_prep.config_io: `steps: yes` is no step count (YAML reads it as True, which Python
    counts as 1); a _base_ chain that comes back to a file is one line, not a RecursionError; an empty file (or
    comments only) reads as no key, which the training config refuses as empty; a leading -- on an override key is
    dropped."""
    with pytest.raises(UserError, match=r"key 'steps' expected int, got True \(YAML reads yes/no/on/off/true/false"):
        load_train_config(write(tmp_path, "steps: yes\n"), [])
    first = write(tmp_path, "_base_: second.yaml\nsteps: 3\n", "first.yaml")
    write(tmp_path, "_base_: first.yaml\nseed: 2\n", "second.yaml")
    with pytest.raises(UserError, match=rf"^{first}: _base_ chain loops back on itself$"):
        load_train_config(first, [])
    from data_prep.config_io import read_yaml

    assert read_yaml(write(tmp_path, "", "empty.yaml")) == {} == read_yaml(write(tmp_path, "# notes\n", "notes.yaml"))
    with pytest.raises(UserError, match=r"empty.yaml: the config file is empty \(no key\)"):
        load_train_config(tmp_path / "empty.yaml", [])
    assert parse_overrides(["--steps=5", "model.layers=2"]) == {"steps": 5, "model": {"layers": 2}}


@dataclasses.dataclass
class _Small:
    """A config of each kind of field config_io converts (a mapping, a number, a class YAML builds itself)."""

    name: str
    weights: dict[str, int] = dataclasses.field(default_factory=dict)
    rate: float = 0.1
    day: datetime.date | None = None


def test_config_io_names_the_key_and_the_file_for_each_kind_of_wrong_value(tmp_path):
    """A mapping given a list, a number given words, a required key missing, a _base_ that is no file name and a
    file that is not UTF-8 are each one line naming the file (or overrides) and the key; a number written as "3e-4"
    (a YAML string) and a date YAML reads itself are taken."""
    from data_prep.config_io import load_config as load

    def error(text: str) -> str:
        path = write(tmp_path, text)
        with pytest.raises(UserError) as err:
            load(_Small, path)
        return str(err.value)

    path = tmp_path / "c.yaml"
    assert error("name: a\nweights: [1, 2]\n") == f"{path}: key 'weights' expected a mapping, got [1, 2]"
    assert error("name: a\nrate: fast\n") == f"{path}: key 'rate' expected float, got 'fast'"
    assert error("rate: 0.5\n").startswith(f"{path}: _Small: ") and "'name'" in error("rate: 0.5\n")
    assert error("_base_: 5\nname: a\n") == f"{path}: key '_base_' expected a file name, got 5"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(UserError, match=rf"^{path}: not UTF-8 text$"):
        load(_Small, path)
    small = load(_Small, write(tmp_path, "name: a\nrate: 3e-4\nday: 2024-05-01\nweights: {x: 2}\n"))
    assert (small.rate, small.day, small.weights) == (3e-4, datetime.date(2024, 5, 1), {"x": 2})


def test_an_override_value_that_is_no_yaml_is_its_text_and_an_empty_key_is_refused():
    assert parse_overrides(["run.name=a: b: c"]) == {"run": {"name": "a: b: c"}}  # not YAML: the text as given
    with pytest.raises(UserError, match="^override '=5': empty key$"):
        parse_overrides(["=5"])
    with pytest.raises(UserError, match="^override '--=5': empty key$"):
        parse_overrides(["--=5"])
