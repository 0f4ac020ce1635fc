"""Op share: where the time went, per op name (the ``key_averages()`` view).

Two views, both one row per name with ``calls, self_ns, total_ns, share``, largest
``self_ns`` first:

**framework** (host): what ``torch.profiler``'s ``key_averages()`` shows for the same
run: ``calls`` (# of Calls), ``self_ns`` (Self CPU), ``total_ns`` (CPU total) and
``share`` = self / the sum of all self times. Built the way torch builds it:

- the events are the host spans torch keeps (operators, ``record_function`` ranges,
  Python frames under ``with_stack``, runtime calls on host threads: the roles
  :data:`.vocab.HOST_ROLES`), minus the utility ops torch filters out
  (``aten::is_leaf``, ...); every ``ProfilerStep#N`` is named ``ProfilerStep*``;
- they are nested per thread among themselves only (other spans on the thread are
  ignored) by torch's rule (:func:`neurontrace.containment.containers`), and self =
  duration - the durations of the direct children (negative where ``with_stack``'s
  Python frames overlap ``record_function`` ranges: torch reports the same);
- an op nested directly in an op of the same name that has no other child is merged
  into it (``EventList._remove_dup_nodes``): it is not a call of its own and its
  duration is not added again to the total::

      aten::div_  |-------------- 10 --------------|
      aten::div_     |---------- 7 ----------|          (its only child)
      aten::empty       |-2-|
      -> aten::div_: calls 1, total 10, self 8;  aten::empty: calls 1, total 2, self 2

**device**: device time charged to the framework op that launched the work (the row's
``framework_row``: the innermost op, as ``Self CUDA`` / ``Self NEURON`` in
``key_averages()``). ``calls`` = launches, ``self_ns`` = ``total_ns`` = device time,
``share`` = fraction of all device time. One execution seen on several cores (rows
sharing ``execution``) is one launch lasting from its first start to its last end.
Work without a link is charged to ``(unlinked)``. A collective's kernels are charged to
the collective op the user called, not to the bookkeeping op torch records inside it
(:data:`.vocab.COLLECTIVE_RECORDS`) to which Kineto links them: work linked to a
``record_param_comms`` goes to its parent operator, as in ``key_averages()``'s device
total of ``c10d::allreduce_`` (its Self column would charge ``record_param_comms``)::

    c10d::allreduce_      |------------------------|      <- charged here
    record_param_comms       |-------------------|          (External id of the launch)
    cudaLaunchKernelExC         |-|
    stream 40                     |--ncclKernel_AllReduce--|
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V
from neurontrace.containment import containers

Layer = Literal["framework", "device"]
UNLINKED = "(unlinked)"

NAME, CALLS, SELF_NS, TOTAL_NS, SHARE = "name", "calls", "self_ns", "total_ns", "share"
COLUMNS = (NAME, CALLS, SELF_NS, TOTAL_NS, SHARE)

_SCHEMA = {NAME: pl.String, CALLS: pl.Int64, SELF_NS: pl.Int64, TOTAL_NS: pl.Int64,
           SHARE: pl.Float64}


def ops(lf: pl.LazyFrame, layer: Layer = "framework") -> pl.DataFrame:
    """Per op name: ``name, calls, self_ns, total_ns, share``, largest self time first."""
    if layer == "framework":
        return host_ops(lf)
    if layer == "device":
        return device_ops(lf)
    raise ValueError(f"layer must be 'framework' or 'device', not {layer!r}")


def host_events(lf: pl.LazyFrame) -> pl.DataFrame:
    """The spans ``key_averages()`` is built from, nested among themselves.

    Columns: ``row, rank, name`` (as key_averages names it), ``start_ns, dur_ns``,
    ``parent`` and ``self_ns`` (of this nesting: torch's, where a span that partly
    overlaps another is not its child, and self time is not clipped at 0, so it can be
    negative as in torch), ``merged`` (folded into a parent of the same name).

    A lane is a thread (``rank, pid, tid``), else the track of a row without one.
    """
    lane = [S.RANK, S.PID, S.TID, "_track"]
    rows = (
        lf.filter(V.is_host_event() & ~pl.col(S.NAME).is_in(V.KEY_AVERAGES_SKIPPED))
        .select(
            S.ROW, S.RANK, V.op_name().alias(S.NAME), S.START_NS, S.DUR_NS, S.PID, S.TID,
            _track=pl.when(pl.col(S.PID).is_null() | pl.col(S.TID).is_null()).then(S.TRACK),
        )
        .sort([*lane, S.START_NS, S.DUR_NS, S.ROW],
              descending=[False] * 5 + [True, False], nulls_last=True)
        .collect(engine=I.ENGINE)
    )
    new_lane = rows.select(
        pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift()) for c in lane)
    ).to_series().fill_null(True)
    start = rows.get_column(S.START_NS).to_numpy()
    dur = rows.get_column(S.DUR_NS).to_numpy()
    parent = containers(new_lane.cum_sum().to_numpy(), start, dur)
    has = parent >= 0
    kids_ns = np.zeros(len(parent), np.int64)
    np.add.at(kids_ns, parent[has], dur[has])  # exact int64 sums
    kids = np.bincount(parent[has], minlength=len(parent))
    at = np.maximum(parent, 0)  # a position to gather at (where a span has no parent: 0)
    names = rows.get_column(S.NAME)
    merged = pl.Series(has & (kids[at] == 1)) & (names.gather(at) == names).fill_null(False)
    parent_row = rows.get_column(S.ROW).gather(at).scatter(np.nonzero(~has)[0], None)
    return rows.select(
        S.ROW, S.RANK, S.NAME, S.START_NS, S.DUR_NS,
        parent_row.alias(S.PARENT),
        pl.Series(S.SELF_NS, dur - kids_ns),
        merged.alias("merged"),
    )


def host_ops(lf: pl.LazyFrame) -> pl.DataFrame:
    """The framework view (see the module docstring)."""
    ev = host_events(lf)
    # A merged op's self time stays with its name (it telescopes into the surviving
    # parent of the same name), so summing self over every row is already the merged sum.
    out = ev.group_by(S.NAME).agg(
        (~pl.col("merged")).sum().cast(pl.Int64).alias(CALLS),
        pl.col(S.SELF_NS).sum().alias(SELF_NS),
        pl.col(S.DUR_NS).filter(~pl.col("merged")).sum().alias(TOTAL_NS),
    )
    return _finish(out)


def launches(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Device work as launches: ``rank, framework_row, start_ns, end_ns, dur_ns, step``.

    Rows sharing ``execution`` (one execution seen on several cores) are one launch.
    ``step`` is the step of the launching op (``framework_row``); null for work that no
    op of the trace launched (launched before the profiler started, or not linked),
    whenever it ran.
    """
    work = lf.filter(V.is_device_work()).select(
        S.ROW, S.RANK, S.FRAMEWORK_ROW, S.START_NS,
        end_ns=pl.col(S.START_NS) + pl.col(S.DUR_NS),
        _key=V.work_key(),
    )
    grouped = work.group_by(S.RANK, "_key").agg(
        pl.col(S.FRAMEWORK_ROW).drop_nulls().first(),
        pl.col(S.START_NS).min(),
        pl.col("end_ns").max(),
        pl.col(S.ROW).min(),
    )
    op_step = lf.filter(pl.col(S.LAYER) == S.FRAMEWORK).select(
        pl.col(S.ROW).alias(S.FRAMEWORK_ROW), pl.col(S.STEP).alias("_op_step")
    )
    return (
        grouped.join(op_step, on=S.FRAMEWORK_ROW, how="left")
        .select(
            S.ROW, S.RANK, S.FRAMEWORK_ROW, S.START_NS, "end_ns",
            dur_ns=pl.col("end_ns") - pl.col(S.START_NS),
            step=pl.col("_op_step"),
        )
    )


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


def device_ops(lf: pl.LazyFrame) -> pl.DataFrame:
    """The device view (see the module docstring)."""
    out = (
        launches(lf)
        .join(op_names(lf), on=S.FRAMEWORK_ROW, how="left")
        .group_by(pl.col("op").fill_null(UNLINKED).alias(NAME))
        .agg(
            pl.len().cast(pl.Int64).alias(CALLS),
            pl.col(S.DUR_NS).sum().alias(SELF_NS),
        )
        .with_columns(pl.col(SELF_NS).alias(TOTAL_NS))
        .collect()
    )
    return _finish(out)


def _finish(df: pl.DataFrame) -> pl.DataFrame:
    total = df.get_column(SELF_NS).sum() if df.height else 0
    return (
        df.with_columns(
            (pl.col(SELF_NS) / total if total else pl.lit(0.0)).cast(pl.Float64).alias(SHARE)
        )
        .select(COLUMNS)
        .sort([SELF_NS, TOTAL_NS, NAME], descending=[True, True, False])
        .cast(_SCHEMA)  # type: ignore[arg-type]
    )
