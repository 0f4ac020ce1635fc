"""Stand-in for ``torch_neuronx.profiling`` (synthetic; see the package docstring).

``NeuronProfiler.export_trace`` writes what TorchNeuron's documentation says a capture
leaves, one folder per process::

    <profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/
        trace.json  ntrace.pb  trace_info.pb  neff_<hash>_vnc_0.neff  profile_nc_0_session_0.ntff

The framework trace is the real Kineto export of the session; the other files hold
placeholder bytes (their format is proprietary; neurontrace never decodes them).
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Any

from torch._C._profiler import _ExperimentalConfig

CONFIGS: list[NeuronConfig] = []
#: One entry per export: the config and what the torch profiler was set up with.
EXPORTS: list[dict[str, Any]] = []
INSTANCE = "i-0123456789abcdef0"


class ProfileMode(enum.Enum):
    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(_ExperimentalConfig):
    def __init__(self, modes: list[ProfileMode] | None = None, max_events_per_nc: int | None = None,
                 capture_enabled_for_nc: str | None = None, profile_output_dir: str | None = None,
                 neff_cache_dir: str | None = None, precache_node_info: bool = True) -> None:
        super().__init__()
        self.modes = modes if modes is not None else [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        self.profile_output_dir = profile_output_dir
        self.neff_cache_dir = neff_cache_dir
        CONFIGS.append(self)


class NeuronProfiler:
    def __init__(self, config: NeuronConfig) -> None:
        self.config = config

    def export_trace(self, prof: Any) -> None:
        session = (Path(self.config.profile_output_dir or "output")
                   / f"{INSTANCE}_pid_{os.getpid()}" / f"{len(EXPORTS):04d}")
        session.mkdir(parents=True)
        prof.export_chrome_trace(str(session / "trace.json"))
        for name in ("ntrace.pb", "trace_info.pb", "neff_4242_vnc_0.neff",
                     "profile_nc_0_session_0.ntff"):
            (session / name).write_bytes(b"stand-in, not a real Neuron file")
        EXPORTS.append({
            "config": self.config,
            "session": session,
            "activities": sorted(a.name for a in prof.activities),
            "record_shapes": prof.record_shapes,
            "experimental_config": prof.experimental_config,
        })
