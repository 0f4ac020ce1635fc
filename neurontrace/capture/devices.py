"""The device a capture runs on, and what profiling it needs there.

====== ============================ ============================ ==========================
kind   tensors on                   profiler activities          synchronised in the block
====== ============================ ============================ ==========================
neuron ``neuron`` (PrivateUse1)     CPU + PrivateUse1            ``torch_neuronx.synchronize()``
cuda   ``cuda:0``                   CPU + CUDA                   ``torch.cuda.synchronize()``
cpu    ``cpu``                      CPU                          (nothing to wait for)
====== ============================ ============================ ==========================

``auto`` picks the first present, in that order.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

from neurontrace.capture import neuron
from neurontrace.errors import BadInput, ToolMissing

KINDS = ("neuron", "cuda", "cpu")
CHOICES = ("auto", *KINDS)


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ToolMissing(
            "neurontrace capture needs torch: pip install 'neurontrace[capture]' "
            "(or the torch your device needs)"
        ) from None
    return torch


@dataclass(frozen=True)
class Device:
    kind: str
    count: int
    name: str

    @property
    def torch_device(self) -> str:
        return {"neuron": neuron.DEVICE_TYPE, "cuda": "cuda:0", "cpu": "cpu"}[self.kind]

    @property
    def compile_backend(self) -> str:
        return neuron.COMPILE_BACKEND if self.kind == "neuron" else "inductor"

    @property
    def default_dtype(self) -> str:
        # CPU bfloat16 kernels are slow and unrepresentative; accelerators run LLMs in bf16.
        return "float32" if self.kind == "cpu" else "bfloat16"

    @property
    def synchronize_call(self) -> str | None:
        return {"neuron": neuron.SYNCHRONIZE, "cuda": "torch.cuda.synchronize()",
                "cpu": None}[self.kind]

    def synchronize(self) -> None:
        if self.kind == "neuron":
            neuron.synchronize()
        elif self.kind == "cuda":
            import_torch().cuda.synchronize()

    def activities(self) -> list[Any]:
        activity = import_torch().profiler.ProfilerActivity
        extra = {"neuron": [activity.PrivateUse1], "cuda": [activity.CUDA], "cpu": []}
        return [activity.CPU, *extra[self.kind]]

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "name": self.name,
                "torch_device": self.torch_device}


def resolve(requested: str = "auto") -> Device:
    """The device to capture on; ``BadInput`` when the one asked for is not here."""
    if requested not in CHOICES:
        raise BadInput(f"--device {requested!r}: expected one of {', '.join(CHOICES)}")
    torch = import_torch()
    if requested in ("auto", "neuron"):
        count = neuron.device_count()
        if count:
            return Device("neuron", count, f"AWS Neuron ({count} visible)")
        if requested == "neuron":
            raise BadInput(f"--device neuron: {neuron.why_absent()}")
    if requested in ("auto", "cuda"):
        if torch.cuda.is_available():
            return Device("cuda", torch.cuda.device_count(), torch.cuda.get_device_name(0))
        if requested == "cuda":
            raise BadInput(
                f"--device cuda: torch {torch.__version__} sees no CUDA device "
                f"(built with CUDA {torch.version.cuda or 'none'})"
            )
    cores = os.cpu_count() or 1
    return Device("cpu", 1, f"{platform.machine()} CPU, {cores} cores")
