"""What a capture runs: the bundled study, or a user's ``FILE.py``.

A workload is one or more *variants*: zero-argument callables that each compute the
same thing a different way (one step each). A user's file defines::

    def workload(device: torch.device):
        x = torch.randn(4096, 4096, device=device)
        return {"matmul": lambda: x @ x, "einsum": lambda: torch.einsum("ij,jk", x, x)}

returning either one callable or a dict of named ones. Each variant is warmed up, checked
against the first, and profiled into its own folder.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurontrace.capture.devices import Device, import_torch
from neurontrace.errors import BadInput, WorkloadFailed

#: bundled workload name -> module under this package exposing ``build``.
BUNDLED: dict[str, str] = {"rmsnorm": "rmsnorm"}
ENTRY = "workload"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Variant:
    name: str
    run: Callable[[], Any]
    description: str = ""
    #: May fail to build or run on some machines (e.g. ``torch.compile`` without a C++
    #: compiler): it is then skipped, with the reason, instead of failing the capture.
    optional: bool = False


@dataclass
class Workload:
    name: str
    variants: list[Variant]
    #: Shapes, dtype and any other parameter that defines the workload, for the manifest.
    params: dict[str, Any] = field(default_factory=dict)


def load(spec: str, device: Device, shape: str | None = None,
         dtype: str | None = None) -> Workload:
    """The bundled workload named ``spec``, or the one a ``.py`` file at ``spec`` defines."""
    if spec in BUNDLED:
        module = importlib.import_module(f"{__name__}.{BUNDLED[spec]}")
        workload: Workload = module.build(device, shape, dtype)
        return workload
    path = Path(spec)
    if path.suffix != ".py":
        raise BadInput(
            f"--workload {spec!r}: neither a bundled workload ({', '.join(BUNDLED)}) "
            "nor a .py file"
        )
    if not path.is_file():
        raise BadInput(f"--workload {path}: no such file")
    if shape is not None or dtype is not None:
        raise BadInput("--shape and --dtype apply to the bundled rmsnorm study only; "
                       f"{path} sets its own")
    return _from_file(path, device)


def _from_file(path: Path, device: Device) -> Workload:
    torch = import_torch()
    source = path.read_bytes()
    spec = importlib.util.spec_from_file_location(f"neurontrace_workload_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise WorkloadFailed(f"{path}: importing it raised {type(e).__name__}: {e}") from e
    entry = getattr(module, ENTRY, None)
    if not callable(entry):
        raise BadInput(f"{path}: defines no function `{ENTRY}(device)` returning the "
                       "function(s) to profile")
    try:
        made = entry(torch.device(device.torch_device))
    except Exception as e:
        raise WorkloadFailed(f"{path}: {ENTRY}() raised {type(e).__name__}: {e}") from e
    named: Mapping[str, Any] = made if isinstance(made, Mapping) else {path.stem: made}
    if not named:
        raise BadInput(f"{path}: {ENTRY}() returned no function to profile")
    variants = []
    for name, fn in named.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise BadInput(f"{path}: variant name {name!r} is not usable as a folder name "
                           "(letters, digits, _ . -)")
        if not callable(fn):
            raise BadInput(f"{path}: {ENTRY}() returned {type(fn).__name__} for {name!r}, "
                           "not a function")
        variants.append(Variant(name, fn, f"{path.name}: {name}"))
    return Workload(path.stem, variants, {
        "file": str(path.resolve()),
        "sha256": hashlib.sha256(source).hexdigest(),
    })
