"""Launch statistics: how long each launch call took on the host, how long its work ran
on the device, and how long the work waited to start (HolisticTraceAnalysis'
``get_cuda_kernel_launch_stats``); and the time of each ``record_function`` range on the
device.

A **launch** is a runtime call (layer ``runtime``, a span) and the device work
(:func:`.vocab.is_device_work`: a kernel, a memcpy, a memset) that carries the same
``correlation`` on the same rank, the link Kineto writes between them (and the one
``framework_row``'s ``correlation`` rule follows). One row per piece of device work; work
without a runtime call of its correlation (a Neuron execution, work launched before the
profiler started) is not a launch here::

    host    |--- cudaLaunchKernel ---|                 call_ns = 24
            ^ call start (t=0)       ^ call end (t=24)
    device                                 |- gemm -|  device_ns = 9, starts at t=40
            <--------- launch_delay_ns = 40 -->|
                                     <-- queue_ns = 16 -->|
    -> short: device_ns 9 < call_ns 24 (the GPU ran for less time than launching took)

- ``launch_delay_ns`` = device start - call start (the issue's definition: call to start
  on the device). HTA's ``launch_delay`` is device start - call *end*: here that is
  ``queue_ns``, given too;
- ``short``: ``device_ns < call_ns`` (HTA's "short GPU kernels");
- outliers (:func:`outliers`): ``call_ns > 50 µs`` (HTA's ``runtime_cutoff`` default) or
  ``launch_delay_ns > 100 µs`` (HTA's ``launch_delay_cutoff`` default, but measured from
  the call's start, as above).

:func:`launch_summary` groups the launches per kernel name (``by="name"``) or per
launching op (``by="op"``: the framework op of ``framework_row``; a collective's work
goes to the collective op the user called, as in :func:`.ops.device_ops`; ``(unlinked)``
without one). HTA gives the per-launch table and plots; the summary's figures (mean,
median, p95 delay) are ours.

``p95`` is the nearest-rank percentile: the ``ceil(0.95 n)``-th smallest of ``n``
values, always one of them; ``median`` is the middle value, the mean of the two middle
ones for an even count.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V
from neurontrace.analyses.ops import UNLINKED

By = Literal["name", "op"]

#: HTA's default cutoffs (``runtime_cutoff``, ``launch_delay_cutoff``): 50 µs, 100 µs.
CALL_CUTOFF_NS = 50_000
DELAY_CUTOFF_NS = 100_000

LAUNCH_COLUMNS = (
    S.RANK, S.CORRELATION, "call", S.NAME, "op", S.STREAM, S.STEP, "call_start_ns",
    "call_ns", "device_start_ns", "device_ns", "launch_delay_ns", "queue_ns", "short",
)
SUMMARY_COLUMNS = (
    "key", "launches", "call_ns", "device_ns", "mean_delay_ns", "median_delay_ns",
    "p95_delay_ns", "max_delay_ns", "short", "outliers",
)
ANNOTATION_COLUMNS = (S.NAME, "calls", "total_ns", "mean_ns", "min_ns", "max_ns")

_I64 = pl.Int64


def op_names(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``framework_row, op``: the name of each framework row as the device view charges
    it (a :data:`.vocab.COLLECTIVE_RECORDS` row goes to its parent op)."""
    framework = lf.filter(pl.col(S.LAYER) == S.FRAMEWORK)
    parents = framework.filter(V.is_op()).select(
        pl.col(S.ROW).alias(S.PARENT), V.op_name().alias("_parent_name"))
    return framework.select(S.ROW, S.PARENT, V.op_name().alias("op")).join(
        parents, on=S.PARENT, how="left"
    ).select(
        pl.col(S.ROW).alias(S.FRAMEWORK_ROW),
        pl.when(pl.col("op").is_in(V.COLLECTIVE_RECORDS) & pl.col("_parent_name").is_not_null())
        .then(pl.col("_parent_name")).otherwise(pl.col("op")).alias("op"),
    )


def launches(lf: pl.LazyFrame) -> pl.DataFrame:
    """One row per launch (see the module docstring): ``rank, correlation, call`` (the
    runtime call's name), ``name`` (the device work's), ``op``, ``stream``, ``step``,
    ``call_start_ns, call_ns, device_start_ns, device_ns, launch_delay_ns, queue_ns,
    short``; by rank and call start. Of several runtime calls with one correlation, the
    first (by ``row``) is the launch."""
    calls = (
        lf.filter((pl.col(S.LAYER) == S.RUNTIME) & V.is_span()
                  & pl.col(S.CORRELATION).is_not_null())
        .select(S.RANK, S.CORRELATION, S.ROW, call=S.NAME, call_start_ns=S.START_NS,
                call_ns=S.DUR_NS)
        .sort(S.ROW)
        .unique([S.RANK, S.CORRELATION], keep="first", maintain_order=True)
        .drop(S.ROW)
    )
    work = lf.filter(V.is_device_work() & pl.col(S.CORRELATION).is_not_null()).select(
        S.RANK, S.CORRELATION, S.NAME, S.STREAM, S.STEP, S.FRAMEWORK_ROW,
        device_start_ns=S.START_NS, device_ns=S.DUR_NS,
    )
    return (
        work.join(calls, on=[S.RANK, S.CORRELATION], how="inner")
        .join(op_names(lf), on=S.FRAMEWORK_ROW, how="left")
        .with_columns(
            pl.col("op").fill_null(UNLINKED),
            launch_delay_ns=pl.col("device_start_ns") - pl.col("call_start_ns"),
            queue_ns=pl.col("device_start_ns") - pl.col("call_start_ns") - pl.col("call_ns"),
            short=pl.col("device_ns") < pl.col("call_ns"),
        )
        .select(LAUNCH_COLUMNS)
        .sort(S.RANK, "call_start_ns", S.CORRELATION)
        .collect(engine=I.ENGINE)
    )


def is_outlier(call_cutoff_ns: int = CALL_CUTOFF_NS,
               delay_cutoff_ns: int = DELAY_CUTOFF_NS) -> pl.Expr:
    """A launch whose call took over ``call_cutoff_ns`` or whose work started over
    ``delay_cutoff_ns`` after the call began."""
    return (pl.col("call_ns") > call_cutoff_ns) | (pl.col("launch_delay_ns") > delay_cutoff_ns)


def outliers(table: pl.DataFrame, call_cutoff_ns: int = CALL_CUTOFF_NS,
             delay_cutoff_ns: int = DELAY_CUTOFF_NS) -> pl.DataFrame:
    """The launches of ``table`` (:func:`launches`) past either cutoff, longest delay
    first (then longest call)."""
    return table.filter(is_outlier(call_cutoff_ns, delay_cutoff_ns)).sort(
        ["launch_delay_ns", "call_ns"], descending=True)


def launch_summary(table: pl.DataFrame, by: By = "name",
                   call_cutoff_ns: int = CALL_CUTOFF_NS,
                   delay_cutoff_ns: int = DELAY_CUTOFF_NS) -> pl.DataFrame:
    """Per kernel name (``by="name"``) or launching op (``by="op"``) of ``table``
    (:func:`launches`): ``key, launches, call_ns`` (summed host time of the calls),
    ``device_ns`` (summed device time), ``mean_delay_ns, median_delay_ns, p95_delay_ns,
    max_delay_ns``, ``short`` (how many launches ran shorter than their call),
    ``outliers`` (how many are past a cutoff). Most launches first, then key."""
    if by not in ("name", "op"):
        raise ValueError(f"by must be 'name' or 'op', not {by!r}")
    delay = pl.col("launch_delay_ns")
    nearest = ((pl.len().cast(_I64) * 95 + 99) // 100 - 1).cast(pl.UInt32)
    return (
        table.group_by(pl.col(by).alias("key"))
        .agg(
            pl.len().cast(_I64).alias("launches"),
            pl.col("call_ns").sum().cast(_I64),
            pl.col("device_ns").sum().cast(_I64),
            delay.mean().cast(pl.Float64).alias("mean_delay_ns"),
            delay.median().cast(pl.Float64).alias("median_delay_ns"),
            delay.sort().gather(nearest).first().cast(_I64).alias("p95_delay_ns"),
            delay.max().cast(_I64).alias("max_delay_ns"),
            pl.col("short").sum().cast(_I64),
            is_outlier(call_cutoff_ns, delay_cutoff_ns).sum().cast(_I64).alias("outliers"),
        )
        .select(SUMMARY_COLUMNS)
        .sort(["launches", "key"], descending=[True, False])
    )


def device_annotations(lf: pl.LazyFrame) -> pl.DataFrame:
    """The time of each ``record_function`` / user annotation on the device: the
    device-layer ``annotation`` spans (Kineto's ``gpu_user_annotation``: a range drawn
    on a stream from the start of the first work launched inside the range to the end
    of the last), per name: ``name, calls, total_ns`` (summed durations), ``mean_ns,
    min_ns, max_ns``; largest total first, then name::

        host     |---- record_function("fwd") ----|
        stream 7        |-k1-|   |--k2--|     |-k3-|
        device          |========= fwd ===========|   -> fwd: calls 1, total = k3 end - k1 start
    """
    rows = lf.filter(
        (pl.col(S.LAYER) == S.DEVICE) & V.is_span() & (pl.col(S.ROLE) == S.ANNOTATION))
    return (
        rows.group_by(S.NAME)
        .agg(
            pl.len().cast(_I64).alias("calls"),
            pl.col(S.DUR_NS).sum().cast(_I64).alias("total_ns"),
            pl.col(S.DUR_NS).mean().cast(pl.Float64).alias("mean_ns"),
            pl.col(S.DUR_NS).min().cast(_I64).alias("min_ns"),
            pl.col(S.DUR_NS).max().cast(_I64).alias("max_ns"),
        )
        .select(ANNOTATION_COLUMNS)
        .sort(["total_ns", S.NAME], descending=[True, False])
        .collect(engine=I.ENGINE)
    )
