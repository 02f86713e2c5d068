"""``--device`` of every tool is checked when the command line is read: a typo or a GPU the machine lacks is a
one-line usage error (exit 2) naming the value, before any data is read."""
from __future__ import annotations

import argparse
import sys

import pytest
import torch

from backretrieval import cli as backretrieval_cli
from backretrieval.devices import torch_device
from globetrotter import data_cli
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
