"""Steps: each ``ProfilerStep#N``'s wall time split into device busy, idle by cause, host only.

All of a rank's device tracks count as one device here: it is busy while any track is::

    step N   |<------------------------- wall --------------------------->|
    device         |== busy ==| idle |= busy =|    idle    |== busy ==|
             |host |                                                  | host |
             |only |<------------ device span within the step -------->| only |

- ``busy_ns``: time within the step when some device work runs;
- ``idle_ns``: gaps between device work that fall within the step, split by cause
  instant by instant as in :mod:`.gaps` (``<cause>_ns``); a gap that straddles two
  steps is split between them;
- ``host_only_ns``: the rest of the step: before the device's first work or after its
  last (on a CPU-only trace, the whole step);
- ``launches``: device launches made by the step's ops (see :func:`.ops.launches`);
  work no op of the trace launched (e.g. launched before the profiler started) is in
  no step's count.

``wall_ns = busy_ns + idle_ns + host_only_ns`` for every step.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import intervals as I
from neurontrace.analyses import vocab as V
from neurontrace.analyses.gaps import CAUSES, Inputs, explain, idle, inputs
from neurontrace.analyses.ops import launches

COLUMNS = (
    "step", S.RANK, S.START_NS, "wall_ns", "busy_ns", "idle_ns",
    *(f"{c}_ns" for c in CAUSES), "host_only_ns", "launches",
)


def step_windows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The steps: framework ``ProfilerStep#N`` spans, as ``step, rank, start_ns, wall_ns,
    w_end`` (``wall_ns`` the span's duration, ``w_end`` its end)."""
    return (
        lf.filter(
            (pl.col(S.LAYER) == S.FRAMEWORK)
            & V.is_span()
            & pl.col(S.NAME).str.contains(S.STEP_PATTERN)
        )
        .select(
            pl.col(S.NAME).str.extract(r"(\d+)$").cast(pl.Int64).alias("step"),
            S.RANK, S.START_NS,
            wall_ns=pl.col(S.DUR_NS),
            w_end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
        )
    )


def median_step_ns(lf: pl.LazyFrame) -> int | None:
    """The median of the steps' wall times (:func:`step_windows`' ``wall_ns``, every
    ``(rank, step)`` one value; for an even count, the mean of the two middle ones),
    rounded down to the nanosecond; ``None`` when the trace has no steps."""
    m = step_windows(lf).select(pl.col("wall_ns").median()).collect().item()
    return None if m is None else int(m)


def steps(lf: pl.LazyFrame, read: Inputs | None = None) -> pl.DataFrame:
    """One row per ``(rank, step)`` in time order; empty when the trace has no steps.

    ``read``: what :func:`.gaps.inputs` read from ``lf``, when the caller has it already
    (``None``: read here, only when the trace has steps)."""
    queries = [
        step_windows(lf),
        launches(lf)
        .filter(pl.col("step").is_not_null())
        .group_by(S.RANK, "step")
        .agg(launches=pl.len().cast(pl.Int64)),
    ]
    if read is None:  # to read the inputs only with device work (without it: no gaps)
        queries.append(lf.filter(V.is_device_work()).select(pl.len()))
    windows, per_step, *work = pl.collect_all(queries, engine=I.ENGINE)
    if windows.height == 0:
        return pl.DataFrame(schema={c: (pl.Int64) for c in COLUMNS})
    if read is None:
        read = inputs(lf if work[0].item() else lf.clear())
    by = [S.RANK]
    pieces, gaps = idle(read, by)
    parts = explain(read, cut_at(gaps, windows))
    # The steps of a rank follow each other: a part lies in the last step begun before it
    # (if that has not ended).
    w = windows.with_row_index("_w")
    inside = (
        parts.sort("g_start")
        .join_asof(w.select("_w", S.RANK, _s=S.START_NS, _e="w_end").sort("_s"),
                   left_on="g_start", right_on="_s", by=S.RANK, strategy="backward",
                   check_sortedness=False)
        .filter(pl.col("g_start") < pl.col("_e"))
    )
    per_cause = inside.group_by("_w").agg(pl.col(f"{c}_cover").sum().alias(f"{c}_ns")
                                          for c in CAUSES)
    out = (
        I.overlap(pieces, w, by, S.START_NS, "w_end", "busy_ns")
        .join(per_cause.lazy(), on="_w", how="left")
        .with_columns(pl.col(f"{c}_ns").fill_null(0) for c in CAUSES)
    )
    return (
        out.with_columns(idle_ns=pl.sum_horizontal(*(f"{c}_ns" for c in CAUSES)))
        .with_columns(
            host_only_ns=pl.col("wall_ns") - pl.col("busy_ns") - pl.col("idle_ns")
        )
        .join(per_step.lazy(), on=[S.RANK, "step"], how="left")
        .with_columns(pl.col("launches").fill_null(0))
        .select(COLUMNS)
        .sort(S.RANK, S.START_NS)
        .collect(engine=I.ENGINE)
    )


def cut_at(gaps: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The gaps found by :func:`.gaps.idle` over ``(rank,)``, cut where a step begins or
    ends, so that each part lies within one step or none: ``rank, g_start, g_end, _cut``
    (``_cut``, where launch latency may begin, clipped to the part)."""
    g = gaps.select(
        S.RANK, g_start=S.START_NS, g_end=pl.col(S.START_NS) + pl.col(S.DUR_NS), _cut="_cut",
    ).with_row_index("_gap")
    bounds = pl.concat([windows.select(S.RANK, _t=S.START_NS),
                        windows.select(S.RANK, _t="w_end")]).unique().sort("_t")
    inner = (  # the step boundaries inside a gap: a few per step at most
        bounds.join_asof(g.sort("g_start"), left_on="_t", right_on="g_start", by=S.RANK,
                         strategy="backward", check_sortedness=False)
        .filter((pl.col("_t") > pl.col("g_start")) & (pl.col("_t") < pl.col("g_end")))
        .select("_gap", "_t")
    )
    cut = g.filter(pl.col("_gap").is_in(inner.get_column("_gap").implode()))
    parts = (
        pl.concat([cut.select("_gap", _t="g_start"), inner])
        .sort("_gap", "_t")
        .join(cut.select("_gap", S.RANK, "g_end", "_cut"), on="_gap")
        .select(
            "_gap", S.RANK,
            g_start="_t",
            g_end=pl.col("_t").shift(-1).over("_gap").fill_null(pl.col("g_end")),
            _cut="_cut",
        )
        .with_columns(pl.col("_cut").clip(pl.col("g_start"), pl.col("g_end")))
    )
    return pl.concat([g.filter(~pl.col("_gap").is_in(cut.get_column("_gap").implode())),
                      parts]).drop("_gap")
