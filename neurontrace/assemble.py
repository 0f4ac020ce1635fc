"""From a reader's raw rows to the event table: tracks, nesting, steps, flows, links.

Everything here is format-independent: a reader supplies rows with times, ids and
categories, and this module derives the columns that relate rows to one another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from neurontrace import linking
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.nesting import at_positions, nearest, nest
from neurontrace.readers.base import Events
from neurontrace.spill import complete, read_batches, spill_all, temporary

_I64 = pl.Int64
_EMPTY = pl.DataFrame(schema={S.START_NS: _I64, S.DUR_NS: _I64, "_step_no": _I64})
#: Columns a reader may give for some rows, which the derivations complete.
_COMPLETED = (S.TRACK, S.FLOW_IDS)
#: The output columns derived here, in schema order (the others are the reader's, or
#: ``row`` and ``rank``, made when writing).
DERIVED = tuple(c.name for c in S.COLUMNS if c.name in (
    S.TRACK, S.SELF_NS, S.PARENT, S.DEPTH, S.FLOW_IDS, S.FRAMEWORK_ROW, S.LINK, S.STEP))


class Derived(Protocol):
    """The derived columns of every row (a frame, or :class:`neurontrace.sweep.Ranges`)."""

    @property
    def height(self) -> int: ...

    def slice(self, offset: int, length: int) -> pl.DataFrame: ...


class Assembled:
    """A trace's rows, ready to stream out in schema order (see :meth:`batches`)."""

    def __init__(self, derived: Derived, spills: list[Path], ev: Events, rank: int
                 ) -> None:
        self.derived = derived  # derived columns only (row and rank are made when writing)
        self.spills = spills
        self.events = ev
        self.rank = rank
        self.num_rows = derived.height

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Rows in schema order: the reader's columns from the spill, the rest derived."""
        base = int(self.events.clock.get("base_time_ns") or 0)
        offset = 0
        for raw in self._spilled():
            n = raw.num_rows
            part = self.derived.slice(offset, n)
            offset += n
            names = raw.schema.names
            cols = []
            made = {
                S.ROW: pa.array(np.arange(offset - n, offset, dtype=np.int64)),
                S.RANK: pa.array(np.full(n, self.rank, dtype=np.int64)),
            }
            for c in S.COLUMNS:
                if c.name in names and c.name not in _COMPLETED:
                    arr = raw.column(c.name)
                    if c.name == S.START_NS and base:
                        arr = pc.add(arr, pa.scalar(base, pa.int64()))
                elif c.name in made:
                    arr = made[c.name]
                elif c.name in part.columns:
                    arr = part.get_column(c.name).to_arrow()
                else:
                    arr = pa.nulls(n, c.type)
                cols.append(arr.cast(c.type) if arr.type != c.type else arr)
            yield pa.RecordBatch.from_arrays(cols, schema=S.SCHEMA)

    def _spilled(self) -> Iterator[pa.RecordBatch]:
        for path in self.spills:
            yield from read_batches(path)

    def table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=S.SCHEMA)

    def close(self) -> None:
        for path in self.spills:
            path.unlink(missing_ok=True)
        close = getattr(self.derived, "close", None)
        if close is not None:
            close()


def assemble(ev: Events, diag: Diagnostics, rank: int | None = None,
             workdir: Path | None = None, read: Callable[[], None] | None = None
             ) -> Assembled:
    """Consume the reader's batches and derive the columns that relate rows.

    The reader's batches go to temporary Arrow IPC files as they arrive (see
    :mod:`neurontrace.spill`); only the narrow columns the derivations need are kept.
    Each derivation computes a few columns on a slice of the narrow frame; they are
    joined back by row number. A trace too large to hold even its narrow columns is
    derived a time bucket at a time instead (:mod:`neurontrace.sweep`), with the same
    result. ``read`` is called once the input has been read.
    """
    ev.workdir = workdir
    if ev.spill is not None:  # the reader spills its own batches (in parallel)
        spills, narrow = ev.spill(workdir)
    else:
        spills = [temporary(workdir)]
        narrow = spill_all(ev.batches, spills[0])
    if read is not None:
        read()
    try:
        held = narrow.in_memory()
        derived: Derived
        if held is not None:
            narrow.discard()  # read into ``held``: drop the frames and remove the files
            derived = _derive(complete(held if held.width else _EMPTY), ev, diag)
        else:
            from neurontrace.sweep import derive  # (it builds on this module)

            derived = derive(narrow, ev, diag, workdir)
    except BaseException:
        for path in spills:
            path.unlink(missing_ok=True)
        raise
    finally:
        narrow.discard()
        if ev.flow_files is not None:
            ev.flow_files.discard()
    r = rank if rank is not None else (ev.rank if ev.rank is not None else 0)
    return Assembled(derived, spills, ev, r)


def _derive(df: pl.DataFrame, ev: Events, diag: Diagnostics) -> pl.DataFrame:
    df = df.with_row_index(S.ROW).with_columns(pl.col(S.ROW).cast(_I64))
    rows = df.select(S.ROW)
    lanes = _aligned(rows, _lanes(df, ev))
    df = df.drop(S.TRACK, strict=False).hstack(lanes)
    df = df.hstack(_aligned(rows, _nesting(df, diag)))
    df = df.hstack(_aligned(rows, steps(df, step_spans(df))))
    flows = _aligned(rows, _flows(df, ev, diag))
    if S.FLOW_IDS in df.columns:  # given by the reader; flow events fill the rest
        df = df.with_columns(pl.coalesce(pl.col(S.FLOW_IDS), flows.get_column(S.FLOW_IDS)))
    else:
        df = df.hstack(flows)
    df = df.hstack(_aligned(rows, _framework_rows(df, diag)))
    # Device work belongs to the step that launched it, even when it runs after that
    # step's span has ended on the host (asynchronous devices).
    launcher_step = pl.col(S.STEP).gather(pl.col(S.FRAMEWORK_ROW).fill_null(0))
    df = df.with_columns(
        pl.when((pl.col(S.LAYER) == S.DEVICE) & pl.col(S.FRAMEWORK_ROW).is_not_null())
        .then(launcher_step).otherwise(pl.col(S.STEP)).alias(S.STEP)
    )
    # Keep what the output takes from here (the reader's own columns come from the
    # spill; row and rank are made when writing), small integers as 32 bits.
    return df.select(DERIVED).with_columns(pl.col(S.DEPTH, S.STEP).cast(pl.Int32))


def _aligned(rows: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """``part``'s columns (keyed by row) in row order, nulls where it has no row.

    ``row`` is a position here, so this is a gather by an inverted index: no hash table,
    which for a part of every row would cost more memory than the columns themselves.
    """
    values = part.drop(S.ROW)
    rows_of_part = part.get_column(S.ROW).to_numpy()
    if part.height == rows.height and bool(np.all(rows_of_part == np.arange(part.height))):
        return values  # already in row order
    where = np.full(rows.height, -1, np.int64)
    where[rows_of_part] = np.arange(part.height)
    index = pl.Series("i", where).scatter(np.nonzero(where < 0)[0], None)
    return values.select(pl.all().gather(index))


def _lanes(df: pl.DataFrame, ev: Events) -> pl.DataFrame:
    """A lane id per (pid, tid, given track) and its readable name.

    A reader may give ``track`` for some rows (Neuron device rows) and leave it null for
    others (host threads), which are then named from pid/tid like any trace's threads.
    """
    keys = lane_keys(df)
    rows = df.select(
        S.ROW, *keys, S.LAYER, lane=pl.struct(keys).rank("dense").cast(_I64) - 1
    )
    lanes = rows.group_by("lane").agg(pl.col(*keys, S.LAYER).first()).sort("lane")
    lane = rows.get_column("lane")
    return pl.DataFrame([rows.get_column(S.ROW), lane,
                         lane_names(lanes, ev).gather(lane)])  # a code per row


def lane_keys(df: pl.DataFrame) -> list[str]:
    """The columns whose values make a lane."""
    keys = [S.PID, S.TID, S.PID_LABEL, S.TID_LABEL]
    return [*keys, S.TRACK] if S.TRACK in df.columns else keys


def lane_names(lanes: pl.DataFrame, ev: Events) -> pl.Series:
    """The readable name of each lane: ``lanes`` has the keys and the layer of each
    lane's first row, in lane order."""
    keys = lane_keys(lanes)
    given = (lanes.get_column(S.TRACK).cast(pl.String).to_list() if S.TRACK in keys
             else [None] * lanes.height)
    return pl.Series(S.TRACK, [
        track if track is not None else _track_name(pid, tid, pl_, tl, layer, ev)
        for (pid, tid, pl_, tl, layer), track in zip(
            lanes.select(*keys[:4], S.LAYER).iter_rows(), given, strict=True)
    ], pl.String).cast(pl.Categorical)


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
        return f"{p or '(empty)'} / {t or '(empty)'}"
    return f"thread {t}"


def _nesting(df: pl.DataFrame, diag: Diagnostics) -> pl.DataFrame:
    spans = df.filter(pl.col(S.KIND) == S.SPAN).select(
        row=S.ROW, lane="lane", start=S.START_NS, dur=S.DUR_NS
    )
    return nest(spans, diag).rename(
        {"row": S.ROW, "parent": S.PARENT, "depth": S.DEPTH, "self_ns": S.SELF_NS}
    )


def step_spans(df: pl.DataFrame) -> pl.DataFrame:
    """The ``ProfilerStep#N`` spans of ``df``: ``s_start``, ``s_end``, ``step``."""
    return (
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
    )


def steps(df: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``step``: N of the ProfilerStep#N span whose time range holds the event's start
    (device rows are then given their launching op's step, see :func:`_derive`);
    ``spans`` are the ProfilerStep spans (:func:`step_spans`)."""
    spans = spans.sort("s_start")
    if spans.height == 0:
        return df.select(S.ROW, pl.lit(None, _I64).alias(S.STEP))
    order = df.select(S.ROW, S.START_NS).sort(S.START_NS)
    hit = order.join_asof(spans, left_on=S.START_NS, right_on="s_start", strategy="backward")
    hit = hit.select(
        S.ROW,
        pl.when(pl.col(S.START_NS) < pl.col("s_end")).then(pl.col("step")).alias(S.STEP),
    )
    return hit


def _flows(df: pl.DataFrame, ev: Events, diag: Diagnostics) -> pl.DataFrame:
    """Bind flow events to the spans they start or finish in (same pid/tid)."""
    fl = flow_events(ev)
    if fl is None:
        return df.select(S.ROW, pl.lit(None, pl.List(pl.String)).alias(S.FLOW_IDS))
    spans = df.lazy().filter(pl.col(S.KIND) == S.SPAN).select(
        S.ROW, S.PID, S.TID, S.START_NS, S.DUR_NS
    )
    bound, missed = flow_pairs(spans, fl)
    warn_unbound(diag, missed)
    return flow_ids(bound)


def flow_events(ev: Events) -> pl.DataFrame | None:
    """All of the reader's flow events (None if it has none)."""
    if ev.flow_files is not None:
        frames = list(ev.flow_files.frames())
        return pl.concat(frames) if frames else None
    if ev.flows is None or ev.flows.num_rows == 0:
        return None
    fl = pl.from_arrow(ev.flows)
    assert isinstance(fl, pl.DataFrame)
    return fl


def warn_unbound(diag: Diagnostics, missed: int) -> None:
    if missed:
        diag.warn(
            "unbound_flow",
            f"{missed} flow event(s) fall in no span on their thread; their link is "
            "kept only where the other end binds",
            missed,
        )


def flow_ids(bound: pl.DataFrame) -> pl.DataFrame:
    """``row, flow_ids`` from the (row, flow_id) pairs of :func:`flow_pairs`."""
    return bound.group_by(S.ROW).agg(pl.col("flow_id").unique().sort().alias(S.FLOW_IDS))


def flow_pairs(spans: pl.LazyFrame, fl: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The span (``row``) each flow event of ``fl`` binds to, and how many bind to none.

    ``spans`` (row, pid, tid, start_ns, dur_ns) must hold every span that starts at a
    flow's time on its thread and, per thread, the last span starting before each flow.
    """
    # Exact start match first (Kineto places a flow at its slice's start), else the
    # innermost span on that thread open at the flow's time. Only the spans that can
    # match are taken out of the frame (semi joins: memory follows the flows, not rows).
    at = fl.select(S.PID, S.TID, pl.col("ts_ns").alias(S.START_NS)).unique()
    starting = spans.join(at.lazy(), on=[S.PID, S.TID, S.START_NS], how="semi").select(
        S.ROW, S.PID, S.TID, ts_ns=S.START_NS
    ).collect()
    exact = fl.join(starting, on=[S.PID, S.TID, "ts_ns"], how="left").group_by(
        ["flow_id", "phase", S.PID, S.TID, "ts_ns"], maintain_order=True
    ).agg(pl.col(S.ROW).max())
    unbound = exact.filter(pl.col(S.ROW).is_null()).drop(S.ROW)
    bound = exact.filter(pl.col(S.ROW).is_not_null())
    if unbound.height:
        threads = unbound.select(S.PID, S.TID).unique().lazy()
        on_threads = (
            spans.join(threads, on=[S.PID, S.TID], how="semi")
            .select(S.ROW, S.PID, S.TID, S.START_NS, end=pl.col(S.START_NS) + pl.col(S.DUR_NS))
            .sort(S.START_NS)
            .collect()
        )
        cand = (
            unbound.sort("ts_ns")
            .join_asof(
                on_threads,
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
        bound = pl.concat([bound, cand])
    else:
        missed = 0
    return bound.select(S.ROW, "flow_id"), missed


def _framework_rows(df: pl.DataFrame, diag: Diagnostics) -> pl.DataFrame:
    """``framework_row`` and ``link`` of runtime and device rows (see
    :mod:`neurontrace.linking`); framework rows themselves have none."""
    not_fw = pl.col(S.LAYER) != S.FRAMEWORK
    if not df.select(not_fw.any()).item():  # a CPU-only trace: nothing to link
        return df.select(S.ROW, pl.lit(None, _I64).alias(S.FRAMEWORK_ROW),
                         pl.lit(None, pl.String).alias(S.LINK))
    df = df.select(
        S.ROW, S.LAYER, S.CATEGORY, S.START_NS, S.EXTERNAL_ID, S.CORRELATION, S.FLOW_IDS,
        S.PARENT, S.DEVICE_COL, S.EXECUTION,
    )
    # The nearest framework span up each row's parent chain (rows are positions here).
    up = nearest(df.get_column(S.PARENT).fill_null(-1).to_numpy(),
                 df.select(pl.col(S.LAYER) == S.FRAMEWORK).to_series().to_numpy())
    df = df.with_columns(at_positions(df.get_column(S.ROW), up).alias("_nest_row"),
                         at_positions(df.get_column(S.EXTERNAL_ID), up).alias("_nest_ext"))
    mine = df.filter(not_fw).select(linking.COLUMNS)
    fw = df.filter(~not_fw)
    linker = linking.Linker(
        lambda: iter([mine]),
        lambda refs: fw.select(S.ROW, S.CATEGORY, S.EXTERNAL_ID).join(
            refs.to_frame(S.EXTERNAL_ID), on=S.EXTERNAL_ID, how="semi", maintain_order="left"),
        fw.filter(pl.col(S.FLOW_IDS).is_not_null()).select(S.ROW, S.FLOW_IDS),
        diag,
    )
    return pl.concat(list(linker.links())).drop(S.LAYER)
