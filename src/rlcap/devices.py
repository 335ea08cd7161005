"""Where a run computes: ``device: auto | cpu | cuda | cuda:N | mps``.

``auto`` is the first CUDA device when torch sees one, else the CPU. A device that this machine's
torch cannot use is refused in one line (``resolve_device``) before any work starts.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import torch

from rlcap.errors import ConfigError

AUTO = "auto"
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_device_name(name: str, key: str = "device") -> None:
    """ConfigError unless ``name`` is auto, cpu, cuda, cuda:N or mps."""
    if not isinstance(name, str) or not DEVICE_PATTERN.fullmatch(name):
        raise ConfigError(f"{key}: {name!r} is not one of auto, cpu, cuda, cuda:N, mps")


def resolve_device(name: str, key: str = "device") -> torch.device:
    """The torch device ``name`` stands for on this machine; one line when it cannot be used."""
    check_device_name(name, key)
    cpu = f"{key} cpu" if key.startswith("--") else f"{key}=cpu"  # as the command takes it
    if name == AUTO:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}: {name} asked for, but this torch ({torch.__version__}) sees no CUDA device; "
                              f"give {cpu}, or install a CUDA build of torch (README)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}: {name} asked for, but there are {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}: mps asked for, but this torch sees no Apple GPU; give {cpu}")
    return device


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's parameters (the CPU for one without any)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(name: str) -> None:
    if name not in PRECISIONS:
        raise ConfigError(f"precision: {name!r} is not one of {', '.join(PRECISIONS)}")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` at ``precision`` on ``device`` (nothing for fp32): under it the matrix products run
    in bf16 or fp16 while softmaxes stay in fp32 (autocast's own op lists). A run enters it around its
    forward passes only (:class:`Precision`)."""
    check_precision(precision)
    dtype = PRECISIONS[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


@dataclass(frozen=True)
class Precision:
    """The precision of a run's forward passes, which the engine owns (nanoGPT's ``ctx``): a loop enters
    :meth:`forward` around each call of a learned part (the policy's decoding and teacher forcing, a value
    network, a discriminator), and nothing else runs under autocast: rewards, losses, the optimizer step and
    checkpoints compute in fp32. Leaving the region drops autocast's low-precision copies of the weights,
    so the next forward reads the weights the optimizer has just changed."""

    name: str = "fp32"
    device_type: str = "cpu"

    def __post_init__(self) -> None:
        check_precision(self.name)

    def forward(self) -> contextlib.AbstractContextManager:
        """The context of one forward pass (or one decoding): autocast at this precision, nothing for fp32."""
        return autocast(torch.device(self.device_type), self.name)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's loss scaler (gradients of fp16 activations underflow without it); None otherwise."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
