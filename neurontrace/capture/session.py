"""A profiled block: ``torch.profiler`` configured for the device, N steps, one trace.

A session records one profiler warm-up step and then ``steps`` steps, each marked by a
``ProfilerStep#N`` span, with ``record_shapes``. :meth:`Session.step` synchronises the
device before closing a step, so that each step's span covers the device work it
launched (device execution is asynchronous on Neuron and CUDA)::

    step:      | warm-up (not recorded) | ProfilerStep#1 | ProfilerStep#2 | ...
    calls:       fn() sync step()         fn() sync step() ...

:func:`profile` is the same thing for a user's own loop, with the run folder, rank and
step count taken from the environment that ``neurontrace capture -- CMD`` sets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from neurontrace.capture import devices, manifest, neuron

#: What a Kineto trace of a CPU or CUDA session is called inside its folder.
TRACE = "trace.json.gz"
PROFILER_WARMUP = 1
DEFAULT_STEPS = 10

# Set by ``neurontrace capture -- CMD`` for the helper in the user's program.
ENV_DIR = "NEURONTRACE_CAPTURE_DIR"
ENV_DEVICE = "NEURONTRACE_CAPTURE_DEVICE"
ENV_STEPS = "NEURONTRACE_CAPTURE_STEPS"


class Session:
    """Profile ``steps`` steps on ``device``; traces land in ``folder``."""

    def __init__(self, device: devices.Device, folder: Path, steps: int, *,
                 neff_cache: Path | None = None, record_shapes: bool = True,
                 with_stack: bool = False) -> None:
        if steps < 1:
            raise ValueError("a session needs at least one step")
        self.device = device
        self.folder = folder
        self.steps = steps
        self.neff_cache = neff_cache or folder / neuron.NEFF_CACHE
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.settings: dict[str, Any] = {}
        self._prof: Any = None

    @property
    def calls(self) -> int:
        """How many times the workload runs inside the session (warm-up step included)."""
        return PROFILER_WARMUP + self.steps

    def __enter__(self) -> Session:
        torch = devices.import_torch()
        self.folder.mkdir(parents=True, exist_ok=True)
        schedule = {"wait": 0, "warmup": PROFILER_WARMUP, "active": self.steps, "repeat": 1}
        options: dict[str, Any] = {
            "activities": self.device.activities(),
            "schedule": torch.profiler.schedule(**schedule),
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
        }
        if self.device.kind == "neuron":
            extra, record = neuron.profiler_options(self.folder, self.neff_cache)
        else:
            extra, record = {"on_trace_ready": self._export}, {"trace": TRACE}
        options.update(extra)
        self.settings = {
            "activities": [a.name for a in options["activities"]],
            "schedule": schedule,
            "steps": self.steps,
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "synchronize_in_block": self.device.synchronize_call,
            **record,
        }
        self._prof = torch.profiler.profile(**options)
        self._prof.__enter__()
        return self

    def step(self) -> None:
        """End a step: wait for the device, then mark the step boundary."""
        self.device.synchronize()
        self._prof.step()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc is None:
                self.device.synchronize()
        finally:
            self._prof.__exit__(exc_type, exc, tb)

    def _export(self, prof: Any) -> None:
        tmp = self.folder / f".{os.getpid()}.{TRACE}"  # the .gz suffix makes torch gzip it
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, self.folder / TRACE)

    def traces(self) -> list[Path]:
        """The framework traces the session wrote."""
        if self.device.kind == "neuron":
            return neuron.framework_traces(self.folder)
        return [self.folder / TRACE] if (self.folder / TRACE).exists() else []


def rank() -> int:
    """This process's rank as the launcher (``torchrun``, ``mpirun``, Slurm) gives it."""
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(var)
        if value is not None and value.strip().isdecimal():
            return int(value)
    return 0


def world_size() -> int:
    value = os.environ.get("WORLD_SIZE", "1")
    return int(value) if value.isdecimal() else 1


@contextmanager
def profile(out: str | os.PathLike[str] | None = None, *, device: str | None = None,
            steps: int | None = None, record_shapes: bool = True,
            with_stack: bool = False) -> Iterator[Session]:
    """Profile a training or inference loop; call ``prof.step()`` at the end of each step.

    ::

        from neurontrace.capture import profile

        with profile("runs/train") as prof:
            for batch in loader:
                train_step(batch)
                prof.step()

    Records one warm-up step then ``steps`` steps (default 10, or ``--steps`` of
    ``neurontrace capture -- CMD``); later steps run unprofiled. Each rank writes its own
    folder, ``<out>/rank<N>/``, with the trace(s) and a ``manifest.json``. Under
    ``neurontrace capture -- CMD`` the folder, device and steps come from the command.
    """
    base = Path(out if out is not None else os.environ.get(ENV_DIR, "neurontrace-capture"))
    wanted = device or os.environ.get(ENV_DEVICE, "auto")
    n = steps if steps is not None else int(os.environ.get(ENV_STEPS, DEFAULT_STEPS))
    for key, value in neuron.environment(base).items():
        if wanted in ("auto", "neuron") and neuron.installed():
            os.environ.setdefault(key, value)
    dev = devices.resolve(wanted)
    r = rank()
    folder = base / f"rank{r}"
    record = manifest.base("rank")
    session = Session(dev, folder, n, neff_cache=base / neuron.NEFF_CACHE,
                      record_shapes=record_shapes, with_stack=with_stack)
    with session:
        yield session
    manifest.write(folder, {
        **record,
        "device": dev.record(),
        "workload": {"name": "command", "program": sys.argv},
        "rank": r,
        "world_size": world_size(),
        "finished_at": manifest.now(),
        "profiler": session.settings,
        "traces": [str(t.relative_to(folder)) for t in session.traces()],
    })
