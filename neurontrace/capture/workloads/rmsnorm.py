"""The bundled study: RMSNorm three ways, at a Llama-7B-like activation shape.

- ``naive``: the textbook formula in eager mode, one aten op per arithmetic step::

      x * rsqrt(mean(x * x, -1) + eps) * weight      # mul, mean, add, rsqrt, mul, mul

  ``eps`` is a Python float, as in most model code; on an accelerator it has to reach
  the device, which is the host -> device copy the copy analysis finds.
- ``rms_norm``: ``torch.rms_norm``, the fused library op.
- ``compiled``: ``naive`` under ``torch.compile`` (inductor on CPU/CUDA, the ``neuron``
  backend on Trainium). Optional: where it cannot compile it is skipped with the reason.

Inputs are seeded, so every variant sees the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

from neurontrace.capture.devices import Device, import_torch
from neurontrace.capture.workloads import Variant, Workload
from neurontrace.errors import BadInput

EPS = 1e-6
#: batch x sequence x hidden: one 2048-token sequence at Llama-7B's hidden size.
DEFAULT_SHAPE = (1, 2048, 4096)
DTYPES = ("float32", "bfloat16", "float16")


def naive(x: Any, weight: Any, eps: float = EPS) -> Any:
    variance = (x * x).mean(-1, keepdim=True)
    return x * (variance + eps).rsqrt() * weight


def parse_shape(text: str | None) -> tuple[int, ...]:
    if text is None:
        return DEFAULT_SHAPE
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise BadInput(f"--shape {text!r}: expected positive sizes like 1x2048x4096 "
                       "(the last one is the normalised dimension)")
    return dims


def build(device: Device, shape: str | None, dtype: str | None) -> Workload:
    torch = import_torch()
    dims = parse_shape(shape)
    dtype_name = device.default_dtype if dtype in (None, "auto") else dtype
    if dtype_name not in DTYPES:
        raise BadInput(f"--dtype {dtype!r}: expected auto or one of {', '.join(DTYPES)}")
    dt = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(dims, generator=gen).to(device=device.torch_device, dtype=dt)
    weight = (1 + 0.1 * torch.randn(dims[-1], generator=gen)).to(
        device=device.torch_device, dtype=dt)
    hidden = (dims[-1],)
    # Built on first call, inside the warm-up, so that a backend that cannot load here
    # makes the variant skipped (with the reason) rather than failing the study.
    compiled = functools.cache(
        lambda: torch.compile(naive, backend=device.compile_backend, dynamic=False))
    variants = [
        Variant("naive", lambda: naive(x, weight),
                "x * rsqrt(mean(x * x) + eps) * w, eager: six aten ops"),
        Variant("rms_norm", lambda: torch.rms_norm(x, hidden, weight, EPS),
                "torch.rms_norm: the fused library op"),
        Variant("compiled", lambda: compiled()(x, weight),
                f"the naive code under torch.compile(backend={device.compile_backend!r})",
                optional=True),
    ]
    return Workload("rmsnorm", variants, {
        "shape": list(dims),
        "dtype": dtype_name,
        "eps": EPS,
        "inputs": {"x": list(dims), "weight": list(hidden)},
        "compile_backend": device.compile_backend,
    })
