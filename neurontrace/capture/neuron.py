"""Everything specific to TorchNeuron (``torch_neuronx``) and the Neuron tools, in one place.

Written against the documented API (Neuron SDK "Capture profiles with Neuron Explorer",
PyTorch section, and ``docs/formats.md`` §2); it has not yet run on a Trainium host. When
it meets the real thing and a name is off, this is the one module to fix:

- ``torch_neuronx.profiling``: ``NeuronConfig(modes=[ProfileMode.DEVICE,
  ProfileMode.RUNTIME], profile_output_dir=..., neff_cache_dir=...)`` passed to
  ``torch.profiler.profile(experimental_config=...)`` with activities CPU + PrivateUse1,
  and ``NeuronProfiler(config).export_trace`` as ``on_trace_ready``: it writes the
  framework trace next to the runtime's files, one folder per process::

      <profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/
          trace.json  ntrace.pb  trace_info.pb  neff_<hash>_vnc_<k>.neff  *.ntff

- ``torch_neuronx.synchronize()`` inside the profiled block (execution is asynchronous);
- the device is ``neuron`` (TorchNeuron registers as PrivateUse1); ``torch.compile``
  uses ``backend="neuron"``;
- ``neuron-explorer view -d SESSION_DIR --output-format parquet --data-path DIR
  --ingest-only --display-name NAME`` decodes the proprietary NTFF / ``.pb`` files into
  Parquet tables and returns (without ``--ingest-only`` it then serves its UI and never
  returns); it runs with a timeout (``NEURONTRACE_EXPLORER_TIMEOUT``, default 600 s) and
  its whole process group is killed on timeout or Ctrl-C.

Nothing here is imported unless a capture runs; ``torch_neuronx`` is imported only when
it is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The torch device type TorchNeuron registers (a PrivateUse1 backend), and the device
#: module it adds to torch (``torch.neuron.device_count()``).
DEVICE_TYPE = "neuron"
DEVICE_MODULE = "neuron"
COMPILE_BACKEND = "neuron"
#: ProfileMode members a capture enables: the NeuronCore instruction trace (NEFF + NTFF)
#: and the runtime's system trace (ntrace.pb + trace_info.pb).
MODES = ("DEVICE", "RUNTIME")
NEFF_CACHE = "neff_cache"
EXPLORER = "neuron-explorer"
EXPLORER_OUT = "explorer"
SYNCHRONIZE = "torch_neuronx.synchronize()"

#: Names the framework trace has had in TorchNeuron run folders (formats.md §2).
FRAMEWORK_TRACE = re.compile(
    r"^(trace|pytorch_trace|neuron_framework_trace_rank_\d+)\.json(\.gz)?$"
)


def installed() -> bool:
    """Whether ``torch_neuronx`` can be imported (without importing it)."""
    return importlib.util.find_spec("torch_neuronx") is not None


def environment(run_dir: Path) -> dict[str, str]:
    """Variables to set before ``torch_neuronx`` compiles anything.

    Descriptive layer names in the device trace (``XLA_IR_DEBUG``, ``XLA_HLO_DEBUG``), and
    the NEFF cache inside the run folder so that every compiled graph a trace refers to is
    kept with it. Set in the capturing process, or passed to the user's command.
    """
    return {
        "XLA_IR_DEBUG": "1",
        "XLA_HLO_DEBUG": "1",
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(run_dir / NEFF_CACHE),
    }


def _torch_neuronx() -> Any:
    return importlib.import_module("torch_neuronx")


def device_count() -> int:
    """Neuron devices visible to TorchNeuron; 0 when it is absent or sees none."""
    if not installed():
        return 0
    try:
        _torch_neuronx()  # registers the ``neuron`` device with torch
        import torch

        module = getattr(torch, DEVICE_MODULE, None)
        return int(module.device_count()) if module is not None else 0
    except Exception:  # a broken install is "no Neuron here"; why_absent() says more
        return 0


def why_absent() -> str:
    if not installed():
        return "torch_neuronx is not installed (the PyPI `torch-neuronx` is a placeholder; "\
               "install the Neuron SDK's)"
    try:
        _torch_neuronx()
    except Exception as e:
        return f"torch_neuronx does not import ({type(e).__name__}: {e})"
    return "torch_neuronx sees no Neuron device (torch.neuron.device_count() == 0)"


def version() -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    for dist in ("torch-neuronx", "torch_neuronx"):
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            continue
    return None


def synchronize() -> None:
    _torch_neuronx().synchronize()


def profiler_options(folder: Path, neff_cache: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``torch.profiler.profile`` keyword arguments for a Neuron capture, and their record.

    The framework trace, the runtime and device traces and the NEFFs they ran all land
    under ``folder`` in TorchNeuron's own layout.
    """
    profiling = importlib.import_module("torch_neuronx.profiling")
    modes = [getattr(profiling.ProfileMode, m) for m in MODES]
    config = profiling.NeuronConfig(
        modes=modes,
        profile_output_dir=str(folder),
        neff_cache_dir=str(neff_cache),
    )
    exporter = profiling.NeuronProfiler(config)
    options: dict[str, Any] = {"experimental_config": config,
                               "on_trace_ready": exporter.export_trace}
    record = {
        "neuron_config": {
            "modes": [f"ProfileMode.{m}" for m in MODES],
            "profile_output_dir": ".",
            "neff_cache_dir": os.path.relpath(neff_cache, folder),
        },
        "on_trace_ready": "NeuronProfiler(config).export_trace",
    }
    return options, record


def framework_traces(folder: Path) -> list[Path]:
    """The framework (Kineto) traces TorchNeuron wrote under ``folder``."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and FRAMEWORK_TRACE.match(p.name))


def session_dirs(folder: Path) -> list[Path]:
    """Capture output folders (``<instance>_pid_<pid>/<timestamp>``) under ``folder``."""
    found = {p.parent for p in folder.rglob("*") if p.is_file() and (
        p.suffix in (".ntff", ".pb") or FRAMEWORK_TRACE.match(p.name))}
    return sorted(found)


Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``neuron-explorer`` (its process group killed on timeout or Ctrl-C); a timeout
    is a failed run (exit status None) whose ``stderr`` says so."""
    from neurontrace.readers.neuron import raw

    timeout = raw.explorer_timeout()
    try:
        return raw.run_tool(args, timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, None,  # type: ignore[arg-type]
                                           "", raw.timeout_message(EXPLORER, timeout))


def explorer_command(session: Path, out: Path) -> list[str]:
    """``view -d SESSION`` ingested into ``out`` (``--data-path``) and returning
    (``--ingest-only``), under the session folder's name (``--display-name``)."""
    return [EXPLORER, "view", "-d", str(session), "--output-format", "parquet",
            "--data-path", str(out), "--ingest-only", "--display-name", session.name]


def explore(folder: Path, run: Runner = _run) -> list[dict[str, Any]]:
    """Decode each capture session under ``folder`` with ``neuron-explorer``, if on PATH.

    Returns one record per session (command, exit status, output folder, or why it was
    not run); a failure is recorded, never raised: the framework trace stands on its own.
    """
    sessions = session_dirs(folder)
    if shutil.which(EXPLORER) is None:
        return [{"session": str(s.relative_to(folder)), "ran": False,
                 "reason": f"{EXPLORER} is not on PATH; run: "
                           + " ".join(explorer_command(s, folder / EXPLORER_OUT / s.name))}
                for s in sessions]
    records = []
    for s in sessions:
        out = folder / EXPLORER_OUT / s.name
        out.parent.mkdir(parents=True, exist_ok=True)
        args = explorer_command(s, out)
        done = run(args)
        if done.returncode is None:  # timed out: its half-written output goes
            shutil.rmtree(out, ignore_errors=True)
        records.append({
            "session": str(s.relative_to(folder)),
            "ran": True,
            "command": args,
            "returncode": done.returncode,
            "output": str(out.relative_to(folder)) if out.exists() else None,
            "stderr_tail": (done.stderr or "")[-2000:] if done.returncode != 0 else "",
        })
    return records
