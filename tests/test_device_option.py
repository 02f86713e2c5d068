"""``--device`` of every tool is checked when the command line is read: a typo or a GPU the machine lacks is a
one-line usage error (exit 2) naming the value, before any data is read."""
from __future__ import annotations

import argparse
import re
import sys

import pytest
import torch

import backretrieval as br
import globetrotter
from backretrieval import cli as backretrieval_cli
from backretrieval.devices import check_device, torch_device
from backretrieval.errors import BackRetrievalError
from globetrotter import data_cli
from globetrotter.errors import UserError
from globetrotter.evaluation import cli as eval_cli
from globetrotter.zeroshot import cli as zeroshot_cli


def test_the_device_type_accepts_what_the_machine_has_and_names_what_it_lacks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert torch_device("cpu") == "cpu" and torch_device("cuda") == "cuda" and torch_device("cuda:1") == "cuda:1"
    for value, message in [("gpu", "expected a torch device"), ("cuda:2", r"this machine has 2 CUDA device\(s\)")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            torch_device(value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(argparse.ArgumentTypeError, match="torch sees no CUDA device"):
        torch_device("cuda")


def test_a_device_type_torch_cannot_use_here_is_refused_up_front():
    """xpu, meta, hpu passed the check and failed later in a traceback (meta: 'Cannot copy out of meta tensor')."""
    for value in ("meta", "hpu", "xpu:0"):
        if value == "xpu:0" and getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
            continue
        with pytest.raises(argparse.ArgumentTypeError, match=rf"{value}: torch has no usable .* device on this "
                                                              r"machine \(use cpu\)"):
            torch_device(value)


def test_forwarded_zeroshot_commands_name_the_command_typed(capsys):
    with pytest.raises(SystemExit):
        eval_cli.main(["tag", "--device", "bogus"])
    assert "usage: globetrotter-eval tag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        eval_cli.main(["zeroshot", "train", "--device", "bogus"])
    assert "usage: globetrotter-eval zeroshot train" in capsys.readouterr().err


def test_eval_py_names_itself_in_usage_lines(monkeypatch, capsys):
    """Started as the repository's eval.py, its usage lines say eval.py, as every other message of it does."""
    monkeypatch.setattr(sys, "argv", ["eval.py"])
    for argv, usage in ((["nope"], "usage: eval.py [-h] COMMAND"), (["tag", "--device", "bogus"], "usage: eval.py tag"),
                        (["zeroshot", "train", "--device", "bogus"], "usage: eval.py zeroshot train")):
        with pytest.raises(SystemExit):
            eval_cli.main(argv)
        assert capsys.readouterr().err.startswith(usage)


@pytest.mark.parametrize("main, argv", [
    (backretrieval_cli.main, ["eval", "--data", "missing", "--model", "USE=use"]),
    (zeroshot_cli.main, ["retrieval", "--test", "missing", "--adapter", "a=missing"]),
    (data_cli.main, ["features", "build", "missing"]),
    (eval_cli.main, ["retrieval", "--model", "missing", "--split", "missing"]),
])
def test_every_tool_refuses_a_device_it_cannot_use(main, argv, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--device", "cuda"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "argument --device: cuda: torch sees no CUDA device on this machine (use cpu)")


def test_mps_is_accepted_where_torch_has_it_and_refused_where_it_has_not(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert torch_device("mps") == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^mps: MPS is not available on this machine \(use cpu\)$"):
        torch_device("mps")


def _zero_shot_trainers() -> list:
    """Each zero-shot trainer as ``train(device)`` on a few random rows (one epoch)."""
    import numpy as np

    from globetrotter.zeroshot import ZeroShotConfig, train_adapter, train_siamese
    from globetrotter.zeroshot.config import OptimConfig
    from globetrotter.zeroshot.triplet import TripletConfig

    rng = np.random.default_rng(0)
    text, images = rng.normal(size=(20, 6)).astype(np.float32), rng.normal(size=(10, 8)).astype(np.float32)
    config = ZeroShotConfig(optim=OptimConfig(epochs=1, batch_size=8))
    triplet = TripletConfig(hidden_dim=4, out_dim=4, batch_size=8, epochs=1)
    return [lambda device: train_adapter(text, images, np.arange(20) % 10, config, device=device, progress=False),
            lambda device: train_siamese(text, text[::-1].copy(), np.arange(20) % 2, triplet, progress=False,
                                         device=device)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a CUDA device")
@pytest.mark.parametrize("trainer", range(2), ids=["train_adapter", "train_siamese"])
def test_the_zero_shot_trainers_refuse_a_cuda_device_this_machine_lacks_in_one_line(trainer):
    """train_adapter and train_siamese moved their tensors to device="cuda" unchecked: torch's 'Found no NVIDIA
    driver' traceback on a CPU-only machine."""
    train = _zero_shot_trainers()[trainer]
    with pytest.raises(UserError, match=r"^device: cuda: torch sees no CUDA device on this machine \(use cpu\)$"):
        train("cuda")
    assert train(torch.device("cpu"))[1] is not None  # a torch.device is read as its string


def test_every_device_argument_is_one_check_with_one_wording(tiny_run, monkeypatch):
    """The --device type, globetrotter.load, image_feature_extractor and the zero-shot trainers say the same line (the
    argparse type without 'device: ', as argparse starts its line with the flag), each in its caller's error class."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    why = "cuda:3: this machine has 1 CUDA device(s), cuda:0 to cuda:0"
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(why)}$"):
        torch_device("cuda:3")
    with pytest.raises(BackRetrievalError, match=f"^device: {re.escape(why)}$"):
        check_device("cuda:3")
    with pytest.raises(BackRetrievalError, match=f"^device: {re.escape(why)}$"):
        br.image_feature_extractor(device="cuda:3")
    with pytest.raises(UserError, match=f"^device: {re.escape(why)}$"):
        globetrotter.load(tiny_run, device="cuda:3")
    for train in _zero_shot_trainers():
        with pytest.raises(UserError, match=f"^device: {re.escape(why)}$"):
            train(torch.device("cuda", 3))
    assert check_device(None) == "cpu" and check_device(torch.device("cuda", 0)) == "cuda:0"
