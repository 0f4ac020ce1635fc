"""From a reader's raw rows to the event table: tracks, nesting, steps, flows, links.

Everything here is format-independent: a reader supplies rows with times, ids and
categories, and this module derives the columns that relate rows to one another.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.nesting import nest
from neurontrace.readers.base import Events

_STEP_NAME = r"^ProfilerStep#(\d+)$"
_I64 = pl.Int64


#: Columns kept in memory for the derivations; all others are spilled to a temporary
#: Parquet file while reading and streamed back when writing, so memory holds only
#: these (a few dozen bytes a row) and never the wide text columns such as ``args``.
_NARROW = (
    S.LAYER, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS, S.PID, S.TID,
    "pid_label", "tid_label", S.EXTERNAL_ID, S.CORRELATION,
    # Readers that know these better than the assembler supply them (Neuron Explorer
    # gives tracks and flow ids per row); they stay in memory for the derivations.
    S.TRACK, S.FLOW_IDS,
)
_CATEGORICAL = (S.LAYER, S.CATEGORY, S.KIND, "pid_label", "tid_label", S.TRACK)


class Assembled:
    """A trace's rows, ready to stream out in schema order (see :meth:`batches`)."""

    def __init__(self, narrow: pl.DataFrame, spill: Path, wide: list[str], ev: Events) -> None:
        self.narrow = narrow
        self.spill = spill
        self.wide = wide
        self.events = ev
        self.num_rows = narrow.height

    def batches(self, size: int = 128 * 1024) -> Iterator[pa.RecordBatch]:
        base = int(self.events.clock.get("base_time_ns") or 0)
        pf = pq.ParquetFile(self.spill)
        offset = 0
        for wide in pf.iter_batches(batch_size=size):
            n = wide.num_rows
            part = self.narrow.slice(offset, n)
            offset += n
            cols = []
            for c in S.COLUMNS:
                if c.name in self.wide:
                    arr = wide.column(c.name)
                elif c.name in part.columns:
                    arr = part.get_column(c.name).to_arrow()
                    if c.name == S.START_NS and base:
                        arr = pc.add(arr, pa.scalar(base, pa.int64()))
                else:
                    arr = pa.nulls(n, c.type)
                cols.append(arr.cast(c.type) if arr.type != c.type else arr)
            yield pa.RecordBatch.from_arrays(cols, schema=S.SCHEMA)

    def table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=S.SCHEMA)

    def close(self) -> None:
        self.spill.unlink(missing_ok=True)


def assemble(ev: Events, diag: Diagnostics, rank: int | None = None,
             workdir: Path | None = None) -> Assembled:
    """Consume the reader's batches and derive the columns that relate rows.

    Derivations run on the narrow in-memory frame; each step computes a few columns on
    a slice of it and they are joined back by row number.
    """
    fd, name = tempfile.mkstemp(prefix=".neurontrace-", suffix=".spill.parquet", dir=workdir)
    os.close(fd)
    spill = Path(name)
    try:
        narrow, wide = _spill(ev, spill)
        df = _derive(narrow, ev, diag, rank)
    except BaseException:
        spill.unlink(missing_ok=True)
        raise
    return Assembled(df, spill, wide, ev)


def _spill(ev: Events, spill: Path) -> tuple[pl.DataFrame, list[str]]:
    parts: list[pl.DataFrame] = []
    writer: pq.ParquetWriter | None = None
    wide: list[str] = []
    try:
        for batch in ev.batches:
            if writer is None:
                wide = [c for c in batch.schema.names if c not in _NARROW]
                writer = pq.ParquetWriter(spill, batch.schema.select(wide).remove_metadata()
                                          if hasattr(batch.schema, "select")
                                          else pa.schema([batch.schema.field(c) for c in wide]),
                                          compression="none")
            writer.write_batch(batch.select(wide))
            part = pl.from_arrow(batch.select([c for c in _NARROW if c in batch.schema.names]))
            assert isinstance(part, pl.DataFrame)
            names = pl.Series(batch.column(S.NAME))
            parts.append(part.with_columns(
                *(pl.col(c).cast(pl.Categorical) for c in _CATEGORICAL if c in part.columns),
                _step_no=names.str.extract(_STEP_NAME, 1).cast(_I64),
            ))
    finally:
        if writer is not None:
            writer.close()
    if writer is None:  # no rows at all
        pq.write_table(pa.table({S.NAME: pa.array([], pa.string())}), spill)
        wide = [S.NAME]
    narrow = pl.concat(parts, rechunk=True) if parts else pl.DataFrame(
        schema={S.START_NS: pl.Int64, S.DUR_NS: pl.Int64, "_step_no": pl.Int64}
    )
    for c, t in ((S.LAYER, pl.Categorical), (S.CATEGORY, pl.Categorical),
                 (S.KIND, pl.Categorical), ("pid_label", pl.Categorical),
                 ("tid_label", pl.Categorical), (S.PID, pl.Int64), (S.TID, pl.Int64),
                 (S.EXTERNAL_ID, pl.Int64), (S.CORRELATION, pl.Int64)):
        if c not in narrow.columns:
            narrow = narrow.with_columns(pl.lit(None, t).alias(c))
    return narrow, wide


def _derive(df: pl.DataFrame, ev: Events, diag: Diagnostics, rank: int | None) -> pl.DataFrame:
    df = df.with_row_index(S.ROW).with_columns(pl.col(S.ROW).cast(_I64))
    rows = df.select(S.ROW)
    df = df.hstack(_aligned(rows, _lanes(df, ev)))
    df = df.hstack(_aligned(rows, _nesting(df, diag)))
    df = df.hstack(_aligned(rows, _steps(df, ev)))
    if S.FLOW_IDS not in df.columns:
        df = df.hstack(_aligned(rows, _flows(df, ev, diag)))
    df = df.hstack(_aligned(rows, _framework_rows(df)))
    r = rank if rank is not None else (ev.rank if ev.rank is not None else 0)
    return df.with_columns(pl.lit(r, _I64).alias(S.RANK))


def _aligned(rows: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """``part``'s columns (keyed by row) in row order, nulls where it has no row."""
    return rows.join(part, on=S.ROW, how="left", maintain_order="left").drop(S.ROW)


def _lanes(df: pl.DataFrame, ev: Events) -> pl.DataFrame:
    """A lane id per (pid, tid) and its readable name."""
    keys = [S.PID, S.TID, "pid_label", "tid_label"]
    if S.TRACK in df.columns:
        keys.append(S.TRACK)
    lanes = df.select(keys).unique(maintain_order=True).with_row_index("lane")
    narrow = df.select(S.ROW, *keys)
    if S.TRACK in df.columns:
        return narrow.join(lanes, on=keys, how="left", nulls_equal=True).select(S.ROW, "lane")
    layer_of_lane = (
        df.group_by(keys, maintain_order=True).agg(pl.col(S.LAYER).first())
    )
    lanes = lanes.join(layer_of_lane, on=keys, how="left", nulls_equal=True)
    names = [
        _track_name(pid, tid, pl_, tl, layer, ev)
        for pid, tid, pl_, tl, layer in lanes.select(*keys, S.LAYER).iter_rows()
    ]
    lanes = lanes.with_columns(pl.Series(S.TRACK, names, pl.String)).drop(S.LAYER)
    return narrow.join(lanes, on=keys, how="left", nulls_equal=True).select(
        S.ROW, "lane", S.TRACK
    )


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
    return nest(spans, diag).rename(
        {"row": S.ROW, "parent": S.PARENT, "depth": S.DEPTH, "self_ns": S.SELF_NS}
    )


def _steps(df: pl.DataFrame, ev: Events) -> pl.DataFrame:
    """``step``: N of the ProfilerStep#N span whose time range holds the event's start."""
    steps = (
        df.filter(
            (pl.col(S.KIND) == S.SPAN)
            & (pl.col(S.LAYER) == S.FRAMEWORK)
            & pl.col("_step_no").is_not_null()
        )
        .select(
            s_start=S.START_NS,
            s_end=pl.col(S.START_NS) + pl.col(S.DUR_NS),
            step="_step_no",
        )
        .sort("s_start")
    )
    if steps.height == 0:
        return df.select(S.ROW, pl.lit(None, _I64).alias(S.STEP))
    order = df.select(S.ROW, S.START_NS).sort(S.START_NS)
    hit = order.join_asof(steps, left_on=S.START_NS, right_on="s_start", strategy="backward")
    hit = hit.select(
        S.ROW,
        pl.when(pl.col(S.START_NS) < pl.col("s_end")).then(pl.col("step")).alias(S.STEP),
    )
    return hit


def _flows(df: pl.DataFrame, ev: Events, diag: Diagnostics) -> pl.DataFrame:
    """Bind flow events to the spans they start or finish in (same pid/tid)."""
    if ev.flows is None or ev.flows.num_rows == 0:
        return df.select(S.ROW, pl.lit(None, pl.List(pl.String)).alias(S.FLOW_IDS))
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
    return bound.group_by(S.ROW).agg(pl.col("flow_id").unique().sort().alias(S.FLOW_IDS))


def _framework_rows(df: pl.DataFrame) -> pl.DataFrame:
    """``framework_row`` and ``link`` for runtime and device rows.

    1. ``external_id``: the framework op carrying the same Kineto ``External id``;
    2. ``correlation``: the op of the runtime call with the same ``correlation`` (that
       call linked by ``external_id`` or by ``nesting``);
    3. ``flow``: a row sharing a flow arrow with a linked row;
    4. ``nesting``: for runtime calls, the innermost framework op enclosing them on the
       same thread.
    """
    df = df.select(S.ROW, S.LAYER, S.CATEGORY, S.EXTERNAL_ID, S.CORRELATION, S.FLOW_IDS, S.PARENT)
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
    # A launch linked by its External id or by nesting (the runtime call inside the op)
    # lends its op to the device work that shares its correlation.
    launcher = pl.coalesce("_ext_row", "_nest_row")
    by_corr = (
        df.filter(not_fw & pl.col(S.CORRELATION).is_not_null() & launcher.is_not_null())
        .group_by(S.CORRELATION)
        .agg(launcher.first().alias("_corr_row"))
    )
    df = df.join(by_corr, on=S.CORRELATION, how="left").with_columns(
        pl.when(not_fw & pl.col("_ext_row").is_null() & pl.col("_nest_row").is_null())
        .then(pl.col("_corr_row")).alias("_corr_row")
    )
    known = pl.coalesce("_ext_row", "_corr_row", "_nest_row")
    flow_src = (
        df.filter(known.is_not_null() & pl.col(S.FLOW_IDS).is_not_null())
        .select(known.alias("_flow_row"), pl.col(S.FLOW_IDS).alias("_fid"))
        .explode("_fid")
        .group_by("_fid")
        .agg(pl.col("_flow_row").first())
    )
    via_flow = (
        df.filter(not_fw & known.is_null() & pl.col(S.FLOW_IDS).is_not_null())
        .select(S.ROW, pl.col(S.FLOW_IDS).alias("_fid"))
        .explode("_fid")
        .join(flow_src, on="_fid")
        .group_by(S.ROW)
        .agg(pl.col("_flow_row").first())
    )
    df = df.join(via_flow, on=S.ROW, how="left")
    link = (
        pl.when(pl.col("_ext_row").is_not_null()).then(pl.lit("external_id"))
        .when(pl.col("_corr_row").is_not_null()).then(pl.lit("correlation"))
        .when(pl.col("_flow_row").is_not_null()).then(pl.lit("flow"))
        .when(pl.col("_nest_row").is_not_null()).then(pl.lit("nesting"))
    )
    return df.select(
        S.ROW,
        pl.coalesce("_ext_row", "_corr_row", "_flow_row", "_nest_row").alias(S.FRAMEWORK_ROW),
        link.alias(S.LINK),
    )
