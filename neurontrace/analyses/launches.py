"""Launch statistics: how long each launch call took on the host, how long its work ran
on the device, and how long the work waited to start (HolisticTraceAnalysis'
``get_cuda_kernel_launch_stats``); and the time of each ``record_function`` range on the
device.

A **launch** is a runtime call (layer ``runtime``, a span) and the piece of device work
(:func:`.vocab.is_device_work`: a kernel, a memcpy, a memset, a NeuronCore execution) it
started, found as ``framework_row``'s rules find them (:mod:`neurontrace.table.linking`):

1. ``correlation``: the runtime call with the work's ``correlation`` on the same rank,
   the link Kineto writes (of several calls, the first by ``row``);
2. ``flow``: else, of the runtime calls sharing a flow arrow with the work (Neuron's
   ``nrt_execute`` -> execution), the one that started last at or before the work did,
   within one ``model_id`` (a row of no model matches any).

Rows sharing ``execution`` (one NeuronCore execution seen on both cores of an LNC=2
pair) are one piece of work, from its first start to its last end. Work that neither
rule pairs with a call (work launched before the profiler started, work linked to its op
only by time) is not a launch here. ``via`` says which rule paired it::

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
from neurontrace.analyses.ops import UNLINKED, op_names

By = Literal["name", "op"]

#: HTA's default cutoffs (``runtime_cutoff``, ``launch_delay_cutoff``): 50 µs, 100 µs.
CALL_CUTOFF_NS = 50_000
DELAY_CUTOFF_NS = 100_000

LAUNCH_COLUMNS = (
    S.RANK, S.CORRELATION, "call", S.NAME, "op", S.STREAM, S.STEP, "call_start_ns",
    "call_ns", "device_start_ns", "device_ns", "launch_delay_ns", "queue_ns", "short", "via",
)
SUMMARY_COLUMNS = (
    "key", "launches", "call_ns", "device_ns", "mean_delay_ns", "median_delay_ns",
    "p95_delay_ns", "max_delay_ns", "short", "outliers",
)
ANNOTATION_COLUMNS = (S.NAME, "calls", "total_ns", "mean_ns", "min_ns", "max_ns")

_I64 = pl.Int64


def _work(lf: pl.LazyFrame) -> pl.DataFrame:
    """The device work as pieces: rows sharing ``execution`` (one NeuronCore execution
    seen on several cores) are one, from the first start to the last end, named after
    its first row; ``_key`` names the piece within its rank."""
    return (
        lf.filter(V.is_device_work())
        .select(
            S.ROW, S.RANK, S.NAME, S.STREAM, S.STEP, S.FRAMEWORK_ROW, S.CORRELATION,
            S.MODEL_ID, S.START_NS, _end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
            _key=V.work_key(),
        )
        .sort(S.ROW)
        .group_by(S.RANK, "_key", maintain_order=True)
        .agg(
            pl.col(S.NAME, S.STREAM, S.STEP, S.MODEL_ID).first(),
            pl.col(S.FRAMEWORK_ROW, S.CORRELATION).drop_nulls().first(),
            pl.col(S.START_NS).min().alias("device_start_ns"),
            (pl.col("_end").max() - pl.col(S.START_NS).min()).alias("device_ns"),
        )
        .collect(engine=I.ENGINE)
    )


def _calls(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.filter((pl.col(S.LAYER) == S.RUNTIME) & V.is_span()).select(
        S.ROW, S.RANK, S.CORRELATION, S.FLOW_IDS, S.MODEL_ID, call=S.NAME,
        call_start_ns=S.START_NS, call_ns=S.DUR_NS)


def _by_correlation(work: pl.DataFrame, calls: pl.LazyFrame) -> pl.DataFrame:
    """``rank, _key`` of the work with the runtime call of its correlation (of several,
    the first by ``row``)."""
    first = call_of_correlation(calls).select(
        S.RANK, S.CORRELATION, "call", "call_start_ns", "call_ns")
    return (
        work.lazy().filter(pl.col(S.CORRELATION).is_not_null())
        .select(S.RANK, "_key", S.CORRELATION)
        .join(first, on=[S.RANK, S.CORRELATION], how="inner")
        .drop(S.CORRELATION)
        .collect(engine=I.ENGINE)
    )


def _by_flow(work: pl.DataFrame, calls: pl.LazyFrame, lf: pl.LazyFrame) -> pl.DataFrame:
    """``rank, _key`` of the work with the runtime call that shares a flow arrow with one
    of its rows and started last at or before the work's start (ties: the first by
    ``row``); flow ids being per-model counters on Neuron, a call of another
    ``model_id`` than the work's is not its launch (a row of no model matches any, as in
    :mod:`neurontrace.table.linking`)."""
    if work.height == 0:
        return work.select(S.RANK, "_key").with_columns(
            call=pl.lit(None, pl.String), call_start_ns=pl.lit(None, _I64),
            call_ns=pl.lit(None, _I64))
    keys = work.select(S.RANK, "_key", "device_start_ns")
    flows = (
        lf.filter(V.is_device_work() & pl.col(S.FLOW_IDS).is_not_null())
        .select(S.RANK, S.MODEL_ID, _flow=S.FLOW_IDS, _key=V.work_key())
        .explode("_flow")
        .join(keys.lazy(), on=[S.RANK, "_key"], how="inner")
    )
    return (
        call_by_flow(flows, calls)
        .select(S.RANK, "_key", "call", "call_start_ns", "call_ns")
        .collect(engine=I.ENGINE)
    )


def call_of_correlation(calls: pl.LazyFrame) -> pl.LazyFrame:
    """Rule 1: the runtime call of each ``rank, correlation`` of ``calls`` (``row, rank,
    correlation``, ...; of several, the first by ``row``)."""
    return (
        calls.filter(pl.col(S.CORRELATION).is_not_null())
        .sort(S.ROW)
        .unique([S.RANK, S.CORRELATION], keep="first", maintain_order=True)
    )


def call_by_flow(work: pl.LazyFrame, calls: pl.LazyFrame) -> pl.LazyFrame:
    """Rule 2: for each ``rank, _key`` of ``work`` (a row per flow id ``_flow`` the work
    carries, with its ``model_id`` and ``device_start_ns``), the call of ``calls`` (``row,
    rank, flow_ids, model_id, call_start_ns``, ...) sharing one of its flows that started
    last at or before it (ties: the first by ``row``), within one ``model_id`` (a row of
    no model matches any): the work's columns and the call's."""
    call_flows = (
        calls.filter(pl.col(S.FLOW_IDS).is_not_null())
        .explode(S.FLOW_IDS)
        .rename({S.FLOW_IDS: "_flow"})
    )
    return (
        work.join(call_flows, on=[S.RANK, "_flow"], how="inner", suffix="_call")
        .filter(
            (pl.col("call_start_ns") <= pl.col("device_start_ns"))
            & (pl.col(S.MODEL_ID).is_null() | pl.col(f"{S.MODEL_ID}_call").is_null()
               | (pl.col(S.MODEL_ID) == pl.col(f"{S.MODEL_ID}_call")))
        )
        .sort([S.RANK, "_key", "call_start_ns", S.ROW], descending=[False, False, True, False])
        .unique([S.RANK, "_key"], keep="first", maintain_order=True)
    )


def launches(lf: pl.LazyFrame) -> pl.DataFrame:
    """One row per launch (see the module docstring): ``rank, correlation, call`` (the
    runtime call's name), ``name`` (the device work's), ``op``, ``stream``, ``step``,
    ``call_start_ns, call_ns, device_start_ns, device_ns, launch_delay_ns, queue_ns,
    short, via`` (``correlation`` or ``flow``); by rank and call start."""
    work = _work(lf)
    calls = _calls(lf)
    by_corr = _by_correlation(work, calls).with_columns(via=pl.lit("correlation"))
    rest = work.join(by_corr.select(S.RANK, "_key"), on=[S.RANK, "_key"], how="anti")
    by_flow = _by_flow(rest, calls, lf).with_columns(via=pl.lit("flow"))
    paired = pl.concat([by_corr, by_flow], how="vertical_relaxed")
    return (
        work.lazy().join(paired.lazy(), on=[S.RANK, "_key"], how="inner")
        .join(op_names(lf), on=S.FRAMEWORK_ROW, how="left")
        .with_columns(
            pl.col("op").fill_null(UNLINKED),
            launch_delay_ns=pl.col("device_start_ns") - pl.col("call_start_ns"),
            queue_ns=pl.col("device_start_ns") - pl.col("call_start_ns") - pl.col("call_ns"),
            short=pl.col("device_ns") < pl.col("call_ns"),
        )
        .select(LAUNCH_COLUMNS)
        .sort(S.RANK, "call_start_ns", "device_start_ns")
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
