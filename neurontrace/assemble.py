"""From a reader's raw rows to the event table: tracks, nesting, steps, flows, links.

Everything here is format-independent: a reader supplies rows with times, ids and
categories, and this module derives the columns that relate rows to one another.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.nesting import nest
from neurontrace.readers.base import Events

_STEP_NAME = r"^ProfilerStep#(\d+)$"
_I64 = pl.Int64


def assemble(ev: Events, diag: Diagnostics, rank: int | None = None) -> pa.Table:
    df = pl.from_arrow(ev.table)
    assert isinstance(df, pl.DataFrame)
    df = df.with_row_index(S.ROW).with_columns(pl.col(S.ROW).cast(_I64))
    for col in ("pid_label", "tid_label"):
        if col not in df.columns:
            df = df.with_columns(pl.lit(None, pl.String).alias(col))
    df = _lanes(df, ev)
    df = _nesting(df, diag)
    df = _steps(df)
    df = _flows(df, ev, diag)
    df = _framework_rows(df)
    r = rank if rank is not None else (ev.rank if ev.rank is not None else 0)
    df = df.with_columns(pl.lit(r, _I64).alias(S.RANK))
    for c in S.COLUMNS:
        if c.name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=_polars_type(c.type)).alias(c.name))
    return df.select(S.NAMES).to_arrow().cast(S.SCHEMA)


def _polars_type(t: pa.DataType) -> Any:
    return pl.from_arrow(pa.array([], t)).dtype  # type: ignore[union-attr]


def _lanes(df: pl.DataFrame, ev: Events) -> pl.DataFrame:
    """A lane id per (pid, tid) and its readable name."""
    keys = [S.PID, S.TID, "pid_label", "tid_label"]
    lanes = df.select(keys).unique(maintain_order=True).with_row_index("lane")
    if S.TRACK in df.columns:
        return df.join(lanes, on=keys, how="left", nulls_equal=True)
    layer_of_lane = (
        df.group_by(keys, maintain_order=True).agg(pl.col(S.LAYER).first())
    )
    lanes = lanes.join(layer_of_lane, on=keys, how="left", nulls_equal=True)
    names = [
        _track_name(pid, tid, pl_, tl, layer, ev)
        for pid, tid, pl_, tl, layer in lanes.select(*keys, S.LAYER).iter_rows()
    ]
    lanes = lanes.with_columns(pl.Series(S.TRACK, names, pl.String)).drop(S.LAYER)
    return df.join(lanes, on=keys, how="left", nulls_equal=True)


def _track_name(pid: Any, tid: Any, pid_label: Any, tid_label: Any, layer: str, ev: Events) -> str:
    p = pid if pid is not None else pid_label
    t = tid if tid is not None else tid_label
    thread = ev.thread_names.get((p, t))
    process = ev.process_names.get(p)
    if layer == S.DEVICE:
        lane = thread or f"stream {t}"
        owner = process if process and process != "CPU" else f"device {p}"
        return f"{owner} / {lane}"
    if thread:
        return thread
    if isinstance(p, str) or isinstance(t, str):
        return f"{p} / {t}"
    return f"thread {t}"


def _nesting(df: pl.DataFrame, diag: Diagnostics) -> pl.DataFrame:
    spans = df.filter(pl.col(S.KIND) == S.SPAN).select(
        row=S.ROW, lane="lane", start=S.START_NS, dur=S.DUR_NS
    )
    n = nest(spans, diag).rename({"parent": S.PARENT, "depth": S.DEPTH, "self_ns": S.SELF_NS})
    df = df.join(n.rename({"row": S.ROW}), on=S.ROW, how="left")
    # Instants and counters: the span they fall in on their track, if any.
    return df


def _steps(df: pl.DataFrame) -> pl.DataFrame:
    """``step``: N of the ProfilerStep#N span whose time range holds the event's start."""
    steps = (
        df.filter(
            (pl.col(S.KIND) == S.SPAN)
            & (pl.col(S.LAYER) == S.FRAMEWORK)
            & pl.col(S.NAME).str.contains(_STEP_NAME)
        )
        .select(
            s_start=S.START_NS,
            s_end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
            step=pl.col(S.NAME).str.extract(_STEP_NAME, 1).cast(_I64),
        )
        .sort("s_start")
    )
    if steps.height == 0:
        return df.with_columns(pl.lit(None, _I64).alias(S.STEP))
    order = df.select(S.ROW, S.START_NS).sort(S.START_NS)
    hit = order.join_asof(steps, left_on=S.START_NS, right_on="s_start", strategy="backward")
    hit = hit.select(
        S.ROW,
        pl.when(pl.col(S.START_NS) < pl.col("s_end")).then(pl.col("step")).alias(S.STEP),
    )
    return df.join(hit, on=S.ROW, how="left")


def _flows(df: pl.DataFrame, ev: Events, diag: Diagnostics) -> pl.DataFrame:
    """Bind flow events to the spans they start or finish in (same pid/tid)."""
    if S.FLOW_IDS in df.columns:
        return df
    if ev.flows is None or ev.flows.num_rows == 0:
        return df.with_columns(pl.lit(None, pl.List(pl.String)).alias(S.FLOW_IDS))
    fl = pl.from_arrow(ev.flows)
    assert isinstance(fl, pl.DataFrame)
    spans = df.filter(pl.col(S.KIND) == S.SPAN).select(
        S.ROW, S.PID, S.TID, S.START_NS, end=pl.col(S.START_NS) + pl.col(S.DUR_NS)
    )
    # Exact start match first (Kineto places a flow at its slice's start), else the
    # innermost span on that thread open at the flow's time.
    exact = fl.join(
        spans.select(S.ROW, S.PID, S.TID, ts_ns=S.START_NS),
        on=[S.PID, S.TID, "ts_ns"],
        how="left",
    ).group_by(["flow_id", "phase", S.PID, S.TID, "ts_ns"], maintain_order=True).agg(
        pl.col(S.ROW).max()
    )
    unbound = exact.filter(pl.col(S.ROW).is_null()).drop(S.ROW)
    bound = exact.filter(pl.col(S.ROW).is_not_null())
    if unbound.height:
        cand = (
            unbound.sort("ts_ns")
            .join_asof(
                spans.sort(S.START_NS),
                left_on="ts_ns",
                right_on=S.START_NS,
                by=[S.PID, S.TID],
                strategy="backward",
                check_sortedness=False,
            )
            .filter(pl.col("end") > pl.col("ts_ns"))
            .select(bound.columns)
        )
        missed = unbound.height - cand.height
        if missed:
            diag.warn(
                "unbound_flow",
                f"{missed} flow event(s) fall in no span on their thread; their link is "
                "kept only where the other end binds",
                missed,
            )
        bound = pl.concat([bound, cand])
    per_row = bound.group_by(S.ROW).agg(pl.col("flow_id").unique().sort().alias(S.FLOW_IDS))
    return df.join(per_row, on=S.ROW, how="left")


def _framework_rows(df: pl.DataFrame) -> pl.DataFrame:
    """``framework_row`` and ``link`` for runtime and device rows.

    1. ``external_id``: the framework op carrying the same Kineto ``External id``;
    2. ``correlation``: the runtime call with the same ``correlation`` that has a link;
    3. ``flow``: a row sharing a flow arrow with a linked row;
    4. ``nesting``: for runtime calls, the innermost framework op enclosing them on the
       same thread.
    """
    if S.FRAMEWORK_ROW in df.columns:
        return df
    fw = df.filter(pl.col(S.LAYER) == S.FRAMEWORK)
    not_fw = pl.col(S.LAYER) != S.FRAMEWORK
    by_ext = (
        fw.filter(pl.col(S.EXTERNAL_ID).is_not_null())
        .sort(pl.col(S.CATEGORY) != "cpu_op")  # prefer ops over annotations
        .group_by(S.EXTERNAL_ID)
        .agg(pl.col(S.ROW).first().alias("_ext_row"))
    )
    df = df.join(by_ext, on=S.EXTERNAL_ID, how="left").with_columns(
        pl.when(not_fw).then(pl.col("_ext_row")).alias("_ext_row")
    )
    by_corr = (
        df.filter(not_fw & pl.col(S.CORRELATION).is_not_null() & pl.col("_ext_row").is_not_null())
        .group_by(S.CORRELATION)
        .agg(pl.col("_ext_row").first().alias("_corr_row"))
    )
    df = df.join(by_corr, on=S.CORRELATION, how="left").with_columns(
        pl.when(not_fw).then(pl.col("_corr_row")).alias("_corr_row")
    )
    linked = pl.coalesce("_ext_row", "_corr_row")
    flow_src = (
        df.filter(linked.is_not_null() & pl.col(S.FLOW_IDS).is_not_null())
        .select(linked.alias("_flow_row"), pl.col(S.FLOW_IDS).alias("_fid"))
        .explode("_fid")
        .group_by("_fid")
        .agg(pl.col("_flow_row").first())
    )
    via_flow = (
        df.filter(not_fw & linked.is_null() & pl.col(S.FLOW_IDS).is_not_null())
        .select(S.ROW, pl.col(S.FLOW_IDS).alias("_fid"))
        .explode("_fid")
        .join(flow_src, on="_fid")
        .group_by(S.ROW)
        .agg(pl.col("_flow_row").first())
    )
    df = df.join(via_flow, on=S.ROW, how="left")
    # Nesting: walk up the parent chain (a few levels) to the first framework row.
    layer_of = df.select(pl.col(S.ROW).alias("_p"), pl.col(S.LAYER).alias("_pl"),
                         pl.col(S.PARENT).alias("_pp"))
    cur = df.select(S.ROW, pl.col(S.PARENT).alias("_p")).filter(
        pl.col("_p").is_not_null()
    )
    found = []
    for _ in range(8):
        if cur.height == 0:
            break
        step = cur.join(layer_of, on="_p", how="left")
        found.append(step.filter(pl.col("_pl") == S.FRAMEWORK).select(S.ROW, _nest_row="_p"))
        cur = step.filter((pl.col("_pl") != S.FRAMEWORK) & pl.col("_pp").is_not_null()).select(
            S.ROW, _p="_pp"
        )
    nest_rows = pl.concat(found) if found else pl.DataFrame(
        schema={S.ROW: _I64, "_nest_row": _I64}
    )
    df = df.join(nest_rows, on=S.ROW, how="left").with_columns(
        pl.when(not_fw).then(pl.col("_nest_row")).alias("_nest_row")
    )
    link = (
        pl.when(pl.col("_ext_row").is_not_null()).then(pl.lit("external_id"))
        .when(pl.col("_corr_row").is_not_null()).then(pl.lit("correlation"))
        .when(pl.col("_flow_row").is_not_null()).then(pl.lit("flow"))
        .when(pl.col("_nest_row").is_not_null()).then(pl.lit("nesting"))
    )
    return df.with_columns(
        pl.coalesce("_ext_row", "_corr_row", "_flow_row", "_nest_row").alias(S.FRAMEWORK_ROW),
        link.alias(S.LINK),
    ).drop("_ext_row", "_corr_row", "_flow_row", "_nest_row")


def rank_from_name(name: str) -> int | None:
    m = re.search(r"rank[_-]?(\d+)", name, re.IGNORECASE)
    return int(m.group(1)) if m else None
