"""Checkpoint selection beyond noise: a marginally higher BkR keeps the best, a clearly higher one replaces it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from globetrotter.training import checkpoint as ckpt
from globetrotter.training.selection import HITS_FILE, judge
from globetrotter.training.trainer import train
from globetrotter.training.validation import Validator
from test_training import tiny_cfg  # tests/ is on sys.path (rootless conftest)

KEY = "val/bkr@10"
BASE = np.r_[np.ones(100), np.zeros(100)]  # 200 val queries, BkR@10 = 0.5
MARGINAL = BASE.copy()
MARGINAL[100:108], MARGINAL[:5] = 1, 0  # 8 queries gained, 5 lost: 0.515, McNemar one-sided p = 0.291
CLEAR = BASE.copy()
CLEAR[100:140] = 1  # +40 queries: 0.7, p ~ 1e-12


def test_judge_keeps_the_best_unless_beyond_noise():
    best = {"metric": KEY, "value": 0.5, "step": 2}
    assert judge(0.5, BASE, None, None, "mcnemar", 0.05).accept  # no best yet
    assert not judge(0.4, BASE, best, BASE, None, 0.05).accept
    assert judge(0.515, MARGINAL, best, BASE, None, 0.05).accept  # plain max
    for test in ("mcnemar", "bootstrap"):
        v = judge(0.515, MARGINAL, best, BASE, test, 0.05)
        assert not v.accept and v.noise and v.p_value > 0.05 and "not beyond noise" in v.note
        v = judge(0.7, CLEAR, best, BASE, test, 0.05)
        assert v.accept and not v.noise and v.p_value < 0.01
    assert judge(0.515, MARGINAL, best, BASE, "mcnemar", 0.3).accept  # p = 0.291 < 0.3
    v = judge(0.515, MARGINAL, best, None, "mcnemar", 0.05)  # nothing to compare with: plain max, said so
    assert v.accept and v.p_value is None and "plain max" in v.note


@pytest.mark.parametrize("test", [None, "mcnemar"])
def test_a_nan_metric_never_becomes_best_nor_blocks_a_later_finite_one(test):
    """A NaN first validation became best, and no later value compares higher than NaN: every later checkpoint was
    refused. Fed the sequence as the trainer does, NaN is never chosen and the finite values are chosen by max."""
    best, chosen, notes = None, [], []
    for step, value in enumerate([float("nan"), 0.3, float("nan"), 0.5, 0.4], start=1):
        verdict = judge(value, None, best, None, test, 0.05)
        notes.append(verdict.note)
        if verdict.accept:
            best = {"metric": KEY, "value": value, "step": step}
            chosen.append(step)
    assert chosen == [2, 4] and best["value"] == 0.5
    assert "NaN; never chosen as best" in notes[0] and "NaN; never chosen as best" in notes[2]
    # a best saved with a NaN value (null in the checkpoint's state) is replaced by the next finite value
    for saved in ({"metric": KEY, "value": float("nan"), "step": 2}, {"metric": KEY, "value": None, "step": 2}):
        verdict = judge(0.1, BASE, saved, BASE, test, 0.05)
        assert verdict.accept and "replaces a best with no value" in verdict.note


def test_a_val_set_of_another_size_is_judged_by_plain_max_and_said():
    """The stored hits of the best cover 200 val queries, the new checkpoint's 150 (a val set that changed size, e.g.
    val.max_per_lang after a resume): the two are not paired, so no test can compare them; the higher value wins and
    the note gives the two sizes."""
    best = {"metric": KEY, "value": 0.5, "step": 2}
    fewer = CLEAR[:150]
    for test in ("mcnemar", "bootstrap"):
        v = judge(0.6, fewer, best, BASE, test, 0.05)
        assert v.accept and v.p_value is None and not v.noise
        assert "the val queries changed (200 -> 150)" in v.note and "plain max" in v.note
        assert not judge(0.4, fewer, best, BASE, test, 0.05).accept  # lower stays lower, sizes aside


def scripted_validator(monkeypatch, *hit_vectors: np.ndarray) -> list[int]:
    """Validator.evaluate returns these hits (and their mean as val/bkr@10) in turn; returns the list of calls."""
    calls: list[int] = []

    def evaluate(self, encoder):
        hits = hit_vectors[len(calls)]
        calls.append(len(calls))
        return {KEY: float(hits.mean())}, {KEY: hits}

    monkeypatch.setattr(Validator, "evaluate", evaluate)
    return calls


def best_of(cfg) -> tuple[int, np.ndarray]:
    best = ckpt.checkpoint_root(cfg.run_dir) / "best"
    return ckpt.read_state(best)["step"], np.load(best / HITS_FILE)


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for events in (run_dir / "tensorboard").rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events.parent)).Reload()
        if tag in acc.Tags()["scalars"]:
            out.update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def test_mcnemar_selection_rejects_a_marginal_gain_and_takes_a_clear_one_across_resume(tiny_world, tmp_path,
                                                                                       monkeypatch, capsys):
    args = ["val.every=2", "checkpoint_every=100", "val.select_test=mcnemar"]
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=6", *args)
    calls = scripted_validator(monkeypatch, BASE, MARGINAL, MARGINAL)
    result = train(cfg)
    assert len(calls) == 3
    assert result["best"] == {"metric": KEY, "value": 0.5, "step": 2}  # 0.515 at steps 4 and 6 was noise
    step, hits = best_of(cfg)
    assert step == 2 and np.array_equal(hits, BASE)
    out = capsys.readouterr().out
    assert out.count("not beyond noise (mcnemar p=0.291 >= 0.05); best kept") == 2

    # a resumed run compares against the stored hits of best/: still noise at step 8, a clear gain at step 10
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=10", *args)
    scripted_validator(monkeypatch, MARGINAL, CLEAR)
    result = train(cfg, resume="latest")
    assert result["best"] == {"metric": KEY, "value": 0.7, "step": 10}
    step, hits = best_of(cfg)
    assert step == 10 and np.array_equal(hits, CLEAR)
    out = capsys.readouterr().out
    assert out.count("not beyond noise") == 1 and "plain max" not in out
    rejected = scalars(cfg.run_dir, "val/select_rejected")
    assert rejected == {4: 1.0, 6: 1.0, 8: 1.0, 10: 0.0}
    assert scalars(cfg.run_dir, "val/select_p_value")[8] == pytest.approx(2380 / 8192)


def test_a_nan_validation_is_never_best_and_result_json_and_states_stay_strict_json(tiny_world, tmp_path,
                                                                                   monkeypatch):
    """A NaN metric at the first validation became best and blocked every later one; and result.json and the
    checkpoints' states were written with NaN, which strict JSON readers refuse. Now the finite validation is best,
    and every file is strict JSON with the NaN as null."""
    import json

    def strict(path: Path) -> dict:
        def refuse(constant: str):
            raise ValueError(f"{path}: {constant} is not JSON")
        return json.loads(path.read_text(), parse_constant=refuse)

    nan = np.full(200, np.nan)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=6", "val.every=2", "checkpoint_every=2", "keep_checkpoints=3")
    scripted_validator(monkeypatch, nan, BASE, nan)
    result = train(cfg)
    assert result["best"] == {"metric": KEY, "value": 0.5, "step": 4}
    written = strict(cfg.run_dir / "result.json")
    assert written["metrics"] == {KEY: None} and written["best"] == result["best"]
    root = ckpt.checkpoint_root(cfg.run_dir)
    states = {p.name: strict(p / ckpt.STATE) for p in root.iterdir() if (p / ckpt.STATE).is_file()}
    assert states["step-00000002"]["metrics"] == {KEY: None} and states["step-00000002"]["best"] is None
    assert states["step-00000006"]["best"]["step"] == 4 and states["best"]["step"] == 4


def test_default_selection_is_the_plain_max(tiny_world, tmp_path, monkeypatch):
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=6", "val.every=2", "checkpoint_every=100")
    scripted_validator(monkeypatch, BASE, MARGINAL, MARGINAL)
    result = train(cfg)
    assert result["best"] == {"metric": KEY, "value": pytest.approx(0.515), "step": 4}
    assert not scalars(cfg.run_dir, "val/select_p_value")


def test_the_last_step_is_validated_when_it_is_no_multiple_of_val_every(tiny_world, tmp_path, monkeypatch):
    """steps=5, val.every=2: validations after steps 2 and 4, and after the last step 5 (its checkpoint is the run's
    final one, and may be the best)."""
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=5", "val.every=2", "checkpoint_every=100")
    calls = scripted_validator(monkeypatch, BASE, MARGINAL, CLEAR)
    result = train(cfg)
    assert len(calls) == 3
    assert result["best"] == {"metric": KEY, "value": pytest.approx(0.7), "step": 5}
    assert sorted(scalars(cfg.run_dir, KEY)) == [2, 4, 5]


def test_a_best_that_could_not_be_written_is_no_best_and_a_later_lower_one_takes_its_place(tiny_world, tmp_path,
                                                                                           monkeypatch, capsys):
    """best/ holds step 2 (0.5); step 4 (0.7) is accepted but its best/ cannot be written (disk full), so best/ still
    holds step 2 and step 6 (0.6), above what best/ holds, replaces it: it is not measured against the unwritten 0.7."""
    import errno

    cfg = tiny_cfg(tiny_world, tmp_path, "steps=6", "val.every=2", "checkpoint_every=100")
    middle = BASE.copy()
    middle[100:120] = 1  # 0.6
    scripted_validator(monkeypatch, BASE, CLEAR, middle)
    real_publish, bests = ckpt.publish, []

    def publish(tmp: Path, final: Path) -> None:
        if final.name == "best":
            bests.append(tmp)
            if len(bests) == 2:  # step 4's
                raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
        real_publish(tmp, final)

    monkeypatch.setattr(ckpt, "publish", publish)
    result = train(cfg)
    assert len(bests) == 3 and "checkpoint best not written" in capsys.readouterr().out
    assert result["best"] == {"metric": KEY, "value": pytest.approx(0.6), "step": 6}
    step, hits = best_of(cfg)
    assert step == 6 and np.array_equal(hits, middle)


def test_real_validation_stores_the_best_hits_and_never_reads_test_unasked(tiny_world, tmp_path):
    # chosen by BkR@1: the tiny val split's 8 images per language saturate BkR@10 (1 for any model, every hit 1)
    cfg = tiny_cfg(tiny_world, tmp_path, "steps=2", "val.every=1", "val.select_test=bootstrap",
                   "val.select_by=val/bkr@1")
    result = train(cfg)
    assert result["best"]["metric"] == "val/bkr@1" and 0 < result["best"]["value"] < 1
    assert not [k for k in result["metrics"] if k.startswith("test/")]  # val.test_groups=0: the test split is locked
    step, hits = best_of(cfg)
    assert result["best"]["step"] == step
    assert hits.ndim == 1 and len(hits) > 0 and set(np.unique(hits)) <= {0.0, 1.0}
    # the value is the mean over the ordered language pairs (a, b) of each pair's mean hit; the hits are every
    # pair's queries concatenated in that order (BackRetrievalSet.evaluate, backretrieval.evaluate_pairs): all the
    # val captions of a (a split showing each image in one language, fewer than QUERY_BUDGET queries)
    langs, counts = np.unique(Validator(cfg).val.langs, return_counts=True)
    sizes = [n for n in counts for _ in range(len(langs) - 1)]  # a -> each other language, a in sorted order
    assert len(langs) >= 2 and len(hits) == sum(sizes)
    per_pair = [part.mean() for part in np.split(hits, np.cumsum(sizes)[:-1])]
    assert result["best"]["value"] == pytest.approx(np.mean(per_pair), rel=1e-9, abs=1e-12)


def test_the_summary_dates_the_test_figure_beside_a_best_checkpoint_of_another_step(capsys):
    """The end-of-run summary printed the last validation's test figure next to "best checkpoint: step 5" as if it
    were the best's: it says whose figure it is now, as the val lines do."""
    from globetrotter.training.report import print_summary

    print_summary({"run_dir": "r", "metrics": {"test/sentence_translation": 0.067, "test/sentence_translation_chance":
                   0.05, "val/bkr@10": 0.15}, "best": {"step": 5, "metric": "val/bkr@10", "value": 0.1681}})
    out = capsys.readouterr().out
    assert "sentence translation (test, retrieval) at the last step: 6.7%" in out
    assert "chance: 5.0%" in out and "(1.3x chance)" in out  # 6.7 / 5.0 = 1.34 times chance
    assert "val/bkr@10 at the last step: 0.1500" in out and "best checkpoint: step 5" in out


def _best_dir(tmp_path: Path, hits: np.ndarray | bytes) -> Path:
    """A checkpoint folder of step 10 with its val ``hits`` (an array, or the bytes of a damaged file)."""
    (tmp_path / ckpt.STATE).write_text('{"step": 10}', encoding="utf-8")
    if isinstance(hits, bytes):
        (tmp_path / HITS_FILE).write_bytes(hits)
    else:
        np.save(tmp_path / HITS_FILE, hits)
    return tmp_path


@pytest.mark.parametrize("hits, said", [
    (b"", r"selection_hits\.npy: the best checkpoint's val hits is an empty file"),
    (b"\x80\x04junk", r"selection_hits\.npy: the best checkpoint's val hits is not a \.npy file"),
    (np.array(["a", "b"]), r"selection_hits\.npy: the best checkpoint's val hits holds <U1 values"),
    (np.ones((2, 3)), r"selection_hits\.npy: the best checkpoint's val hits have shape \(2, 3\), expected one per"),
])
def test_damaged_best_hits_are_one_line_naming_the_file(tmp_path, hits, said):
    """The best checkpoint's val hits, read back on resume, cut short, no .npy or of other values or shape: one line
    naming the file (it was an EOFError or pickle ValueError traceback, or hits compared as they were)."""
    from globetrotter.errors import UserError
    from globetrotter.training.selection import load_hits

    with pytest.raises(UserError, match=said):
        load_hits(_best_dir(tmp_path, hits), {"step": 10})
    assert load_hits(_best_dir(tmp_path, np.array([1.0, 0.0])), {"step": 10}).tolist() == [1.0, 0.0]


def test_best_hits_of_another_step_or_with_no_best_are_not_read(tmp_path):
    """The hits beside best/ belong to the checkpoint written there: a best recorded at another step (best/ not yet
    written again, or written by an earlier run) or no best at all gives None, so the next best is chosen by plain
    max instead of against another checkpoint's hits."""
    from globetrotter.training.selection import load_hits

    best = _best_dir(tmp_path, np.array([1.0, 0.0]))
    assert load_hits(best, {"step": 10}).tolist() == [1.0, 0.0]
    assert load_hits(best, {"step": 20}) is None
    assert load_hits(best, None) is None
    (best / ckpt.STATE).unlink()
    assert load_hits(best, {"step": 10}) is None


def test_a_damaged_best_state_is_one_line_when_its_hits_are_read(tmp_path):
    """Its trainer_state.json not an object: the checkpoint's one-line error (it was an AttributeError)."""
    from globetrotter.errors import UserError
    from globetrotter.training.selection import load_hits

    best = _best_dir(tmp_path, np.array([1.0, 0.0]))
    (best / ckpt.STATE).write_text("[10]", encoding="utf-8")
    with pytest.raises(UserError, match=r"trainer_state\.json: expected a JSON object, got list"):
        load_hits(best, {"step": 10})


@pytest.mark.parametrize("text", ["[1, 2]", '"position"', '{"cursors": [3], "bad": [], "bad_shard": ""}',
                                  '{"workers": "1", "cursors": [3], "bad": [], "bad_shard": ""}',
                                  '{"workers": 1, "cursors": ["a"], "bad": [], "bad_shard": ""}',
                                  '{"workers": 1, "cursors": [3], "shard": ""}'])
def test_a_damaged_data_stream_position_is_one_line_naming_it(tmp_path, text):
    """A checkpoint's data_stream_0.json of another JSON type, a key missing or of another type: one line naming it
    (it was a TypeError or KeyError traceback when the resume read it)."""
    from globetrotter.errors import UserError

    (tmp_path / "data_stream_0.json").write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=r"data_stream_0\.json: .* is no data stream position \(expected an object"):
        ckpt.read_stream_position(tmp_path, 0)
    ckpt.write_stream_position(tmp_path, 0, {"workers": 1, "cursors": [3], "bad": [], "bad_shard": ""})
    assert ckpt.read_stream_position(tmp_path, 0)["cursors"] == [3]
    ckpt.write_stream_position(tmp_path, 0, {"workers": 1, "cursors": [3]})  # the fields with a default may be absent
    assert ckpt.read_stream_position(tmp_path, 0) == {"workers": 1, "cursors": [3]}
