"""The speed options of a run (``mixed_precision``, ``compile``) and their fallbacks.

Neither option may fail a run or slow it down silently: bf16 asked for on a GPU without it,
or fp16 on CPU, falls back to float32, and a model that ``torch.compile`` cannot compile (an unsupported
op, no C++ compiler for inductor on CPU, ...) falls back to the eager model; each says so in
one line. ``compile`` wraps the (possibly DDP-wrapped) training model for the training
forward only: checkpoints, validation and ``globetrotter.load`` keep using the eager module,
whose parameters the compiled one shares, so saved weights carry no ``_orig_mod.`` prefix.
The cloze head indexes the token states with a boolean mask (a data-dependent shape): the
compiled forward is traced with dynamo's ``capture_dynamic_output_shape_ops``, so the number of
masked tokens is a symbolic size inside one graph instead of a graph break, and the caption
length (captions are padded to the batch's longest) is marked dynamic: one compilation serves
the whole run.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch

from ..shell import program_name


def bf16_supported(device: torch.device) -> bool:
    """Can ``device`` run bf16 autocast? CUDA asks the GPU; CPU autocast always can (slower without AVX512-BF16/AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return True


def resolve_mixed_precision(requested: str, device: torch.device, log: Callable[[str], None]) -> str:
    """The ``mixed_precision`` a run can use on ``device``: ``requested``, or ``"no"`` (float32) with a warning line.
    fp16 autocast is a GPU mode: on CPU Accelerate leaves it off, so the run says so and records float32."""
    if requested == "fp16" and device.type == "cpu":
        log("warning: mixed_precision=fp16 does not run on CPU (Accelerate autocasts fp16 on GPUs only); training in "
            "float32 (mixed_precision=no); mixed_precision=bf16 autocasts on CPU")
        return "no"
    if requested == "bf16" and not bf16_supported(device):
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
        log(f"warning: mixed_precision=bf16 is not supported on {device} ({name}); falling back to "
            f"mixed_precision=no (float32)")
        return "no"
    return requested


def warn_launcher_precision(requested: str, log: Callable[[str], None], env: dict | None = None) -> None:
    """One line when ``accelerate launch --mixed_precision X`` asks for another precision than the run's
    ``mixed_precision`` key (``requested``): the key decides, the launcher's flag is not used."""
    launcher = (os.environ if env is None else env).get("ACCELERATE_MIXED_PRECISION")
    if launcher and launcher != "no" and launcher != requested:
        log(f"warning: accelerate launch --mixed_precision {launcher} is not used: the run's config key decides "
            f"(mixed_precision={requested}); pass mixed_precision={launcher} to {program_name('train')} instead")


class CompiledForward:
    """Calls ``torch.compile(model)``, or ``model`` when compilation is off or failed.

    Compilation is lazy: the first call traces and compiles. An exception from
    ``torch.compile`` itself or from that first call logs one line naming the error and
    switches to the eager ``model`` for the rest of the run (the first call is repeated
    eagerly with the same RNG state). Later errors are real errors and propagate.
    """

    def __init__(self, model: torch.nn.Module, enabled: bool, log: Callable[[str], None]) -> None:
        self.model, self.log = model, log
        self.compiled: Callable | None = None
        self.checked = False
        if enabled:
            try:
                self.compiled = torch.compile(model)
            except Exception as err:  # noqa: BLE001 - any failure falls back to eager
                self._fall_back(err)

    def _run_compiled(self, *args: Any, **kwargs: Any) -> Any:
        """The compiled forward, with the data-dependent number of cloze targets kept in the graph and the length of
        every token tensor (``[B, L]`` integer or bool: captions are padded to the batch's longest) marked dynamic,
        so one compilation serves every batch."""
        for t in (*args, *kwargs.values()):
            if torch.is_tensor(t) and t.dim() == 2 and not t.is_floating_point():
                torch._dynamo.maybe_mark_dynamic(t, 1)
        assert self.compiled is not None  # called only while the compiled model is in use (__call__ checks)
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            return self.compiled(*args, **kwargs)

    @property
    def active(self) -> bool:
        """True while the compiled model is in use."""
        return self.compiled is not None

    def _fall_back(self, err: BaseException) -> None:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        self.log(f"warning: compile=true failed ({type(err).__name__}: {first}); falling back to the eager model "
                 f"(compile=false)")
        self.compiled = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled is None:
            return self.model(*args, **kwargs)
        if self.checked:
            return self._run_compiled(*args, **kwargs)
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        try:
            out = self._run_compiled(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - the first call is the compilation
            self._fall_back(err)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
            return self.model(*args, **kwargs)
        self.checked = True
        return out
