"""The few lines a capture ends with: per variant (or rank), events, median step time and
the top ops, with the figures ``neurontrace report`` prints for the same run.

Nothing here computes a figure of its own: :func:`summarise` takes them from
:mod:`neurontrace.analyses` on the converted event table, and
:func:`neurontrace.views.terminal.capture_summary` lays them out:

- top ops: where the run has device work, :func:`neurontrace.analyses.device_ops` (each
  op's share of device time, charged to the op that launched it; ``ops --layer device``
  and the "Device time by the op that launched it" lines of ``report``); otherwise
  :func:`neurontrace.analyses.host_ops` (share of host self time, the ``key_averages()``
  view: ``ops`` and the "Host time by op" lines of ``report``);
- step (median): the median ``wall_ns`` of :func:`neurontrace.analyses.steps`.

The full comparison is ``neurontrace compare``, printed after it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from neurontrace import analyses

TOP = 3
DEVICE, HOST = "device time", "self CPU time"  # what the shares are of (as key_averages)


@dataclass
class Summary:
    name: str
    events: int = 0
    steps: int = 0  # ProfilerStep spans (all ranks)
    step_ns: int | None = None  # median ProfilerStep wall time
    basis: str = ""  # DEVICE | HOST
    top: list[tuple[str, float]] = field(default_factory=list)  # (op, share 0-1)
    skipped: str | None = None


def summarise(name: str, events: Path, top: int = TOP) -> Summary:
    """The summary of one converted event table (or any path the analyses read)."""
    lf = analyses.events(events)
    ops = analyses.device_ops(lf)
    basis = DEVICE
    if ops.height == 0:
        ops, basis = analyses.host_ops(lf), HOST
    walls = analyses.steps(lf).get_column("wall_ns")
    median = walls.median() if walls.len() else None
    return Summary(
        name=name,
        events=lf.select(pl.len()).collect().item(),
        steps=walls.len(),
        step_ns=int(median) if median is not None else None,  # type: ignore[arg-type]
        basis=basis,
        top=[(op, float(share)) for op, share in ops.head(top).select("name", "share").rows()],
    )


def compare_command(events: list[Path]) -> str:
    return "neurontrace compare " + " ".join(shlex.quote(str(p)) for p in events)
