"""The three answers on one screen: op share, device idle time and copies.

:func:`report` gathers the figures; the command line words them (``neurontrace
report``). Everything here is a table from the other analyses, cut to the top rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.copies import by_direction, copies, copy_summary
from neurontrace.analyses.gaps import CAUSES, Gaps, gaps, inputs
from neurontrace.analyses.ops import device_ops, host_ops
from neurontrace.analyses.steps import steps


@dataclass(frozen=True)
class Computed:
    """What the analyses a report is made of returned, whole (not cut to ``top``), for
    other readers of the same run (the advice: :func:`.advice.advise` given a report
    computes none of them again): :func:`.gaps.gaps`, :func:`.copies.copies`,
    :func:`.steps.steps`, :func:`.ops.host_ops`, :func:`.ops.device_ops`."""

    gaps: Gaps
    copies: pl.DataFrame
    steps: pl.DataFrame
    host_ops: pl.DataFrame
    device_ops: pl.DataFrame


@dataclass(frozen=True)
class Report:
    """``host_ops`` / ``device_ops``: the top rows of :func:`.ops.ops`'s two views;
    ``devices``: :func:`.gaps.gaps`'s per-device table (each device the union of its
    streams or queues); ``tracks``: its per-track table (a detail); ``idle``: ``cause,
    idle_ns`` over all devices, largest first; ``largest_gaps``: the longest gaps of the
    devices (times when none of a device's streams had work); ``copies``:
    :func:`.copies.copy_summary`; ``transfers``: how many transfers;
    ``directions``: :func:`.copies.by_direction` of all of them; ``steps``: how many
    ``ProfilerStep`` spans (per rank, the most of any rank); ``device_rows``:
    :func:`device_rows` (what the device rows are, device work or not);
    ``runtime_calls``: how many runtime-layer rows (calls into the device runtime);
    ``computed``: the analyses' results the tables were cut from (:class:`Computed`)."""

    host_ops: pl.DataFrame
    device_ops: pl.DataFrame
    devices: pl.DataFrame
    tracks: pl.DataFrame
    idle: pl.DataFrame
    largest_gaps: pl.DataFrame
    copies: pl.DataFrame
    transfers: int
    directions: pl.DataFrame
    steps: int
    device_rows: pl.DataFrame
    runtime_calls: int
    computed: Computed | None = field(default=None, repr=False, compare=False)


def device_rows(lf: pl.LazyFrame) -> pl.DataFrame:
    """``role, category, rows``: the device-layer rows counted by role and category, most
    first (then by role and category). Says what a trace's device rows are when none is
    device work (e.g. only CUPTI profiler ranges, role ``other``)."""
    return (
        lf.filter(pl.col(S.LAYER) == S.DEVICE)
        .group_by(S.ROLE, S.CATEGORY)
        .agg(pl.len().cast(pl.Int64).alias("rows"))
        .sort(["rows", S.ROLE, S.CATEGORY], descending=[True, False, False],
              nulls_last=True)
        .collect()
    )


def report(lf: pl.LazyFrame, top: int = 5) -> Report:
    read = inputs(lf)  # once, for both gaps and steps
    idle = gaps(lf, read=read)
    moved = copies(lf)
    per_step = steps(lf, read)
    host, device = host_ops(lf), device_ops(lf)
    by_cause = pl.DataFrame(
        {
            "cause": list(CAUSES),
            "idle_ns": [int(idle.devices.get_column(f"{c}_ns").sum()) for c in CAUSES],
        }
    ).filter(pl.col("idle_ns") > 0).sort("idle_ns", descending=True)
    n_steps = (
        int(per_step.group_by("rank").len().get_column("len").max() or 0)  # type: ignore[arg-type]
        if per_step.height else 0
    )
    return Report(
        host_ops=host.head(top),
        device_ops=device.head(top),
        devices=idle.devices,
        tracks=idle.tracks,
        idle=by_cause,
        largest_gaps=idle.device_gaps.sort(S.DUR_NS, descending=True).head(top),
        copies=copy_summary(moved).head(top),
        transfers=moved.height,
        directions=by_direction(moved),
        steps=n_steps,
        device_rows=device_rows(lf),
        runtime_calls=int(lf.filter(pl.col(S.LAYER) == S.RUNTIME).select(pl.len())
                          .collect().item()),
        computed=Computed(idle, moved, per_step, host, device),
    )
