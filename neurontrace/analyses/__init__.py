"""Analyses: pure functions from a :class:`polars.LazyFrame` of events to tables.

::

    from neurontrace import analyses as A
    lf = A.events("run.parquet")            # or a raw trace, or a run folder
    A.ops(lf, layer="device")               # op share (key_averages view)
    A.gaps(lf).gaps                         # device idle time and its causes
    A.copies(lf)                            # host <-> device transfers
    A.kernels(lf)                           # device work by its own name
    A.steps(lf)                             # per ProfilerStep: busy / idle / host only
    A.launch_summary(A.launches(lf))        # launch delay per kernel (HTA's launch stats)
    A.breakdown(lf)                         # per rank: compute / comm / memory / idle
    A.compare({"naive": lf1, "fused": lf2}) # runs side by side
    A.compare_results({"naive": A.Measured(report, *A.extent(lf)), ...})  # from results

None of them prints or writes; the command line renders what they return.
"""

from __future__ import annotations

from neurontrace.analyses.compare import (
    ALL,
    Measured,
    compare,
    compare_results,
    extent,
    measure,
)
from neurontrace.analyses.copies import copies, copy_summary
from neurontrace.analyses.gaps import Gaps, gaps
from neurontrace.analyses.kernels import kernels
from neurontrace.analyses.launches import device_annotations, launch_summary, launches, outliers
from neurontrace.analyses.ops import device_ops, host_ops, ops
from neurontrace.analyses.ranks import breakdown, per_rank, slowest, step_times
from neurontrace.analyses.report import Report, report
from neurontrace.analyses.steps import steps
from neurontrace.loading import events

__all__ = [
    "ALL",
    "Gaps",
    "Measured",
    "Report",
    "breakdown",
    "compare",
    "compare_results",
    "copies",
    "copy_summary",
    "device_annotations",
    "device_ops",
    "events",
    "extent",
    "gaps",
    "host_ops",
    "kernels",
    "launch_summary",
    "launches",
    "measure",
    "ops",
    "outliers",
    "per_rank",
    "report",
    "slowest",
    "step_times",
    "steps",
]
