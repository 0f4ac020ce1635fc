"""Multi-rank views of a run: each rank's step times and the slowest rank per step;
collective time and how much of it compute hides; what each rank's device did.

**Step time** of a rank: the wall time of its ``ProfilerStep#N`` span
(:func:`.steps.step_windows`). Per step N, the ranks that recorded it are compared: the
slowest rank is the one with the longest ``ProfilerStep#N`` (ties: the lowest rank)::

    rank 0  |--- step 4: 10 ---|--- step 5: 12 ---|
    rank 1  |----- step 4: 14 -----|-- step 5: 9 --|
    -> step 4: slowest rank 1 (14), fastest 10, spread 4; step 5: slowest rank 0 (12)

**Communication** is device work (:func:`.vocab.is_device_work`) that a collective
launched: its launching op (``framework_row``) is one of the records torch's
distributed package writes inside every collective (:data:`.vocab.COLLECTIVE_RECORDS`,
``record_param_comms``) or has a name starting ``c10d::`` or ``nccl:``; or, whatever its
link, its own name starts with ``nccl`` (any case: the kernels NCCL names
``ncclKernel_*``, ``ncclDevKernel_*``). Other device work is **compute** (role
``compute``) or **memory** (role ``transfer``: memcpys and memsets).

Per rank, every device track of the rank (all its streams and devices) is merged: an
instant of the device is counted once, in the first class that has work then, by this
precedence: compute, then communication, then memory, then idle::

    stream 7   |== gemm ==|        |== relu ==|
    stream 40        |===== ncclAllReduce =====|      |= memcpy =|
    instants   | comp     | comp|comm| comp    |      | memory   |
               <------------------- span ------------------------>
    -> compute = 10 + 10, communication = 4 (the exposed part), memory 5, idle = rest

- ``span_ns``: the rank's first device work's start to its last work's end;
- ``compute_ns, communication_ns, memory_ns, idle_ns``: the split above, which adds up
  to ``span_ns``; ``communication_ns`` is thus the communication *not* hidden by compute
  (exposed);
- ``collective_ns``: the union of the rank's communication work (all of it, hidden or
  not); ``overlap_ns``: the part of it during which compute work runs;
  ``overlap`` = ``overlap_ns / collective_ns`` (HTA's comm/compute overlap: the share of
  communication time overlapped by compute; null without communication). HTA
  computes it per rank over the union of kernels in the same way.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V
from neurontrace.analyses.steps import step_windows

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
#: Classes of device work in their order of precedence (an instant goes to the first).
CLASSES = (COMPUTE, COMMUNICATION, MEMORY)
#: Framework op name prefixes of collectives (besides :data:`.vocab.COLLECTIVE_RECORDS`).
COLLECTIVE_OP_PREFIXES = ("c10d::", "nccl:")
#: Device work name prefix of NCCL kernels (compared in lower case).
NCCL_PREFIX = "nccl"

STEP_COLUMNS = (S.STEP, S.RANK, "wall_ns")
RANK_COLUMNS = (S.RANK, "steps", "mean_ns", "median_ns", "max_ns", "slowest")
SLOWEST_COLUMNS = (S.STEP, "ranks", "slowest_rank", "slowest_ns", "fastest_ns", "spread_ns")
BREAKDOWN_COLUMNS = (
    S.RANK, "span_ns", "compute_ns", "communication_ns", "memory_ns", "idle_ns",
    "collective_ns", "overlap_ns", "overlap",
)

_I64 = pl.Int64


def step_times(lf: pl.LazyFrame) -> pl.DataFrame:
    """``step, rank, wall_ns``: every rank's ``ProfilerStep#N`` spans, by step then rank."""
    return (
        step_windows(lf)
        .select(S.STEP, S.RANK, "wall_ns")
        .sort(S.STEP, S.RANK)
        .collect(engine=I.ENGINE)
    )


def slowest(times: pl.DataFrame) -> pl.DataFrame:
    """Per step of ``times`` (:func:`step_times`): ``step, ranks`` (how many recorded
    it), ``slowest_rank, slowest_ns, fastest_ns, spread_ns`` (slowest - fastest)."""
    return (
        times.sort([S.STEP, "wall_ns", S.RANK], descending=[False, True, False])
        .group_by(S.STEP, maintain_order=True)
        .agg(
            pl.len().cast(_I64).alias("ranks"),
            pl.col(S.RANK).first().alias("slowest_rank"),
            pl.col("wall_ns").first().alias("slowest_ns"),
            pl.col("wall_ns").last().alias("fastest_ns"),
        )
        .with_columns(spread_ns=pl.col("slowest_ns") - pl.col("fastest_ns"))
        .select(SLOWEST_COLUMNS)
    )


def per_rank(times: pl.DataFrame) -> pl.DataFrame:
    """Per rank of ``times`` (:func:`step_times`): ``rank, steps, mean_ns, median_ns,
    max_ns`` of its step times, and ``slowest``: in how many steps it was the slowest
    rank (:func:`slowest`; a step only one rank recorded counts too). By rank."""
    worst = slowest(times).group_by(pl.col("slowest_rank").alias(S.RANK)).agg(
        pl.len().cast(_I64).alias("slowest"))
    return (
        times.group_by(S.RANK)
        .agg(
            pl.len().cast(_I64).alias("steps"),
            pl.col("wall_ns").mean().cast(pl.Float64).alias("mean_ns"),
            pl.col("wall_ns").median().cast(pl.Float64).alias("median_ns"),
            pl.col("wall_ns").max().cast(_I64).alias("max_ns"),
        )
        .join(worst, on=S.RANK, how="left")
        .with_columns(pl.col("slowest").fill_null(0))
        .select(RANK_COLUMNS)
        .sort(S.RANK)
    )


def is_collective_op() -> pl.Expr:
    """Framework ops that are collectives (see the module docstring)."""
    name = pl.col(S.NAME)
    return name.is_in(V.COLLECTIVE_RECORDS) | pl.any_horizontal(
        name.str.starts_with(p) for p in COLLECTIVE_OP_PREFIXES)


def work_classes(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Device work as ``rank, start, end, class`` (one of :data:`CLASSES`)."""
    collective_ops = lf.filter(pl.col(S.LAYER) == S.FRAMEWORK).select(
        pl.col(S.ROW).alias(S.FRAMEWORK_ROW), _coll=is_collective_op())
    return (
        lf.filter(V.is_device_work())
        .select(S.RANK, S.NAME, S.ROLE, S.FRAMEWORK_ROW, start=S.START_NS,
                end=pl.col(S.START_NS) + pl.col(S.DUR_NS))
        .join(collective_ops, on=S.FRAMEWORK_ROW, how="left")
        .select(
            S.RANK, "start", "end",
            pl.when(pl.col("_coll").fill_null(False)
                    | pl.col(S.NAME).str.to_lowercase().str.starts_with(NCCL_PREFIX))
            .then(pl.lit(COMMUNICATION))
            .when(pl.col(S.ROLE) == S.COMPUTE).then(pl.lit(COMPUTE))
            .otherwise(pl.lit(MEMORY)).alias("class"),
        )
    )


def _covered(work: pl.LazyFrame, classes: tuple[str, ...], out: str) -> pl.LazyFrame:
    """``rank, <out>``: the length of the union of the work of ``classes``, per rank."""
    pieces = I.union(work.filter(pl.col("class").is_in(classes)), [S.RANK])
    return pieces.group_by(S.RANK).agg((pl.col("end") - pl.col("start")).sum().alias(out))


def breakdown(lf: pl.LazyFrame) -> pl.DataFrame:
    """Per rank with device work: ``rank, span_ns, compute_ns, communication_ns,
    memory_ns, idle_ns, collective_ns, overlap_ns, overlap`` (see the module
    docstring), by rank."""
    work = work_classes(lf).collect(engine=I.ENGINE).lazy()
    spans = work.group_by(S.RANK).agg(span_ns=pl.col("end").max() - pl.col("start").min())
    parts = [
        _covered(work, (COMPUTE,), "_comp"),
        _covered(work, (COMMUNICATION,), "_comm"),
        _covered(work, (COMPUTE, COMMUNICATION), "_cc"),
        _covered(work, CLASSES, "_all"),
    ]
    out = spans
    for p in parts:
        out = out.join(p, on=S.RANK, how="left")
    zero = [pl.col(c).fill_null(0).cast(_I64) for c in ("_comp", "_comm", "_cc", "_all")]
    return (
        out.with_columns(zero)
        .with_columns(
            compute_ns=pl.col("_comp"),
            communication_ns=pl.col("_cc") - pl.col("_comp"),
            memory_ns=pl.col("_all") - pl.col("_cc"),
            idle_ns=pl.col("span_ns") - pl.col("_all"),
            collective_ns=pl.col("_comm"),
            overlap_ns=pl.col("_comp") + pl.col("_comm") - pl.col("_cc"),
        )
        .with_columns(
            overlap=pl.when(pl.col("collective_ns") > 0)
            .then(pl.col("overlap_ns") / pl.col("collective_ns")).cast(pl.Float64),
        )
        .select(BREAKDOWN_COLUMNS)
        .sort(S.RANK)
        .collect(engine=I.ENGINE)
    )
