"""Placing a device-relative timeline (NeuronCore instructions, DMA) on host time.

Device tables count nanoseconds from the start of a device profile; the system trace
counts epoch nanoseconds on the host. The two clocks are not synchronised, so placement
is an estimate, and the method and its uncertainty go into the output's metadata. In
order of preference:

1. ``epoch``: device times already look epoch-based (>= 1e15 ns): kept.
2. ``execution_windows``: executions as the device saw them (``ExecutionInfo``) paired
   with the same NeuronCore's ``nc_exec_running`` spans on the host by duration (equal
   within :data:`PAIR_TOLERANCE_NS` or :data:`PAIR_TOLERANCE_RATIO` of the longer one),
   order only breaking ties (:func:`pair_by_duration`; a device profile may hold only
   some of the executions: Tilebench's ``nki_timer.py`` notes the NTFF covers the first);
   when no duration agrees, in order, said so. Each device row moves by its own
   execution's offset and takes that execution's key::

       host    |--- exec 0 ---|          |--- exec 1 ---|      nc_exec_running (epoch)
       device  |-- exec 0 --|        |-- exec 1 --|            ExecutionInfo (relative)
               offset_0 = h0 - d0    offset_1 = h1 - d1

   Uncertainty: the largest difference between the two durations of one paired
   execution (``largest_mismatch_ns``, with ``pairing`` ``duration`` or ``order``).
3. ``timestamp_sync_point``: host and device time of sync events (``cpu_timestamp_ns``
   and ``nc_timestamp_ns``; AWS's archived Profiler 2.0 guide:
   ``adjusted = sync_cpu + (event_dev - sync_dev)``), with the median offset; uncertainty:
   the spread of the offsets. ``nc_timestamp_ns`` is the raw device clock while device
   tables count from the profile's start: with ``Metadata.first_hw_timestamp`` and
   ``ticks_per_nanosec`` the profile's start on the raw clock is
   ``first_hw_timestamp / ticks_per_nanosec`` (``bridge_ns``; that it counts ticks is a
   guess, recorded); without them the two are assumed to share a timeline (recorded).
4. ``first_execution``: no ExecutionInfo, but ``nc_exec_running`` spans: the first
   device row is put at the start of the first execution; uncertainty not estimated.
5. ``none``: nothing to place by; device rows stay on their own timeline (warned).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from neurontrace import schema as S
from neurontrace.readers.neuron import EPOCH_MIN_NS

#: Two durations of one execution agree within 10 us or 0.2% of the longer, whichever is
#: larger (device and host see the same execution through different clocks).
PAIR_TOLERANCE_NS = 10_000
PAIR_TOLERANCE_RATIO = 0.002


def durations_agree(a: int, b: int) -> bool:
    """Whether two durations (ns) can be the same execution's (see the tolerances)."""
    return abs(a - b) <= max(PAIR_TOLERANCE_NS, PAIR_TOLERANCE_RATIO * max(a, b))


def pair_by_duration(device: list[int], host: list[int]) -> list[tuple[int, int]]:
    """``(i, j)`` pairs of device execution ``i`` with host execution ``j`` (both lists of
    durations in start order): each device execution takes the first host execution after
    the last pair whose duration agrees (:func:`durations_agree`); one without is left
    unpaired. Order is kept, so order breaks ties between equal durations."""
    pairs: list[tuple[int, int]] = []
    j0 = 0
    for i, d in enumerate(device):
        j = next((j for j in range(j0, len(host)) if durations_agree(d, host[j])), None)
        if j is not None:
            pairs.append((i, j))
            j0 = j + 1
    return pairs


@dataclass
class Placement:
    method: str
    #: per-execution offsets: columns ``d_start`` (device), ``offset``, ``execution``;
    #: empty for one offset for all rows.
    windows: pl.DataFrame | None = None
    offset: int = 0
    uncertainty_ns: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def apply(self, df: pl.DataFrame) -> pl.DataFrame:
        """Shift ``start_ns`` of device rows, and add ``execution`` (the window's key
        where windows place them, else null). ``df`` must not have ``execution`` yet."""
        if self.windows is None or self.windows.height == 0:
            return df.with_columns(pl.col(S.START_NS) + self.offset,
                                   pl.lit(None, pl.String).alias(S.EXECUTION))
        w = self.windows.sort("d_start")
        first = int(w.get_column("offset")[0])
        return (
            df.with_row_index("_i")
            .sort(S.START_NS)
            .join_asof(w, left_on=S.START_NS, right_on="d_start", strategy="backward")
            .sort("_i")
            # Rows before the first window move with the first one.
            .with_columns(pl.col(S.START_NS) + pl.col("offset").fill_null(first))
            .drop("_i", "d_start", "offset")
        )

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "uncertainty_ns": self.uncertainty_ns}
        if self.windows is not None:
            out["executions_paired"] = self.windows.height
        elif self.offset:
            out["offset_ns"] = self.offset
        out.update(self.details)
        return out


def place(device_start: int | None, executions: pl.DataFrame | None,
          host: pl.DataFrame | None, syncs: pl.DataFrame | None,
          bridge_ns: int | None = None) -> Placement:
    """Choose how to place a device timeline.

    ``device_start``: earliest device row (None: no device rows).
    ``executions``: ``d_start``, ``d_end`` per execution, device clock, in order.
    ``host``: ``start``, ``end``, ``execution`` of ``nc_exec_running`` on this NeuronCore
    (one row per execution, LNC=2 duplicates merged), host epoch ns.
    ``syncs``: ``host_ts``, ``device_ts`` of ``timestamp_sync_point`` events.
    ``bridge_ns``: the device timeline's start on the raw device clock of ``device_ts``
    (None: the same timeline).
    """
    if device_start is None:
        return Placement("none", details={"note": "no device rows"})
    if device_start >= EPOCH_MIN_NS:
        return Placement("epoch", uncertainty_ns=0,
                         details={"note": "device times are already epoch nanoseconds"})
    if executions is not None and executions.height and host is not None and host.height:
        return _by_windows(executions, host)
    if syncs is not None and syncs.height:
        # In integers: epoch-scale offsets lose up to 256 ns as float64 (Polars' median).
        offsets = syncs.select(pl.col("host_ts") - pl.col("device_ts")).to_series().to_list()
        median = (statistics.median_low(offsets) + statistics.median_high(offsets)) // 2
        bridge = {"bridge_ns": bridge_ns, "bridge": "Metadata.first_hw_timestamp / "
                  "ticks_per_nanosec (first_hw_timestamp assumed to count ticks)"
                  } if bridge_ns is not None else {
                  "bridge": "none: sync points' device time assumed on the device tables' "
                  "timeline (no Metadata.first_hw_timestamp)"}
        return Placement("timestamp_sync_point", offset=median + (bridge_ns or 0),
                         uncertainty_ns=max(offsets) - min(offsets),
                         details={"sync_points": syncs.height, **bridge})
    if host is not None and host.height:
        first = int(host.get_column("start").min())  # type: ignore[arg-type]
        return Placement("first_execution", offset=first - device_start,
                         details={"note": "first device row put at the start of the "
                                  "first nc_exec_running; uncertainty not estimated"})
    return Placement("none", details={
        "note": "no ExecutionInfo, nc_exec_running or timestamp_sync_point to place the "
                "device timeline by: device rows keep device-relative times"})


def _by_windows(executions: pl.DataFrame, host: pl.DataFrame) -> Placement:
    d = executions.sort("d_start")
    h = host.sort("start")
    d_dur = (d.get_column("d_end") - d.get_column("d_start")).to_list()
    h_dur = (h.get_column("end") - h.get_column("start")).to_list()
    pairs = pair_by_duration(d_dur, h_dur)
    method = "duration" if pairs else "order"
    # No duration agrees: in order, as far as both go.
    pairs = pairs or [(k, k) for k in range(min(d.height, h.height))]
    paired = pl.concat([d[[i for i, _ in pairs]], h[[j for _, j in pairs]]], how="horizontal")
    windows = paired.select(
        pl.col("d_start").cast(pl.Int64),
        (pl.col("start") - pl.col("d_start")).cast(pl.Int64).alias("offset"),
        pl.col("execution").alias(S.EXECUTION),
    )
    mismatch = paired.select(  # an int, or None with no pair
        ((pl.col("end") - pl.col("start")) - (pl.col("d_end") - pl.col("d_start")))
        .abs().max()
    ).item()
    details: dict[str, Any] = {
        "pairing": method, "largest_mismatch_ns": mismatch,
        "tolerance": f"{PAIR_TOLERANCE_NS} ns or {PAIR_TOLERANCE_RATIO:.1%}",
    }
    if len(pairs) != d.height or len(pairs) != h.height:
        details["note"] = (f"{d.height} device executions, {h.height} host executions: "
                           f"{len(pairs)} paired by {method}")
    return Placement("execution_windows", windows=windows, uncertainty_ns=mismatch,
                     details=details)
