"""The derivations of :mod:`neurontrace.assemble` for a trace too large to hold.

Memory follows the size of a bucket, not of the trace::

    narrow columns (files) --survey--> lanes, ProfilerStep spans, bucket bounds (by start)
                           --split---> bucket files: the rows that start in each bucket
    bucket 0, 1, 2, ...    --sweep---> row-range files: lane, parent, depth, self_ns, step
                                       + flow bindings, runtime/device rows to link
    row-range files        --write---> the derived columns a batch at a time (:class:`Ranges`)

Each derivation relates a row to rows that start no later than it, or to a few rows
kept whole. Nesting: the containers of a span start before it and end after the next
bucket's first start, so the spans still open at a bucket's end are carried into the
next, with the child time counted so far (a span's ``self_ns`` is known when it closes).
Flows: a flow binds to a span starting at its time (same bucket) or the last span on its
thread started before it, so each thread's last span is carried. Steps: the
``ProfilerStep`` spans are few and kept whole. Links (``framework_row``) join runtime and
device rows to framework rows anywhere in the trace: they are computed at the end, on
the runtime and device rows and only the framework rows they name, so their memory
follows the number of runtime and device rows (none in a CPU-only trace).

The result is the in-memory derivation's, row for row; ``tests/test_sweep.py`` checks
that on every fixture with buckets of a few rows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from neurontrace import schema as S
from neurontrace.assemble import (
    DERIVED,
    _step_spans,
    _steps,
    flow_ids,
    flow_pairs,
    lane_keys,
    lane_names,
    links,
    warn_unbound,
)
from neurontrace.diagnostics import Diagnostics
from neurontrace.nesting import depths, in_order, parents_in_order
from neurontrace.readers.base import Events
from neurontrace.spill import Narrow, complete

#: Rows per bucket (and per row range), unless ``$NEURONTRACE_BUCKET_ROWS`` says.
BUCKET_ROWS = "NEURONTRACE_BUCKET_ROWS"
DEFAULT_BUCKET_ROWS = 250_000
#: Start times sampled to place the bucket bounds.
_SAMPLE = 100_000

_I64 = pl.Int64
#: What the sweep writes per row into the row-range files.
_OUT = {S.ROW: _I64, "lane": _I64, S.PARENT: _I64, S.DEPTH: pl.Int32, S.SELF_NS: _I64,
        S.STEP: pl.Int32}
#: What a carried (open) span holds.
_CARRIED = {"row": _I64, "lane": _I64, "start": _I64, "dur": _I64, S.STEP: pl.Int32,
            "fw": pl.Boolean, S.EXTERNAL_ID: _I64, "covered": _I64, "old": pl.Boolean}
#: What a runtime or device row keeps for linking.
_LINK = (S.ROW, S.LAYER, S.CATEGORY, S.START_NS, S.EXTERNAL_ID, S.CORRELATION,
         S.DEVICE_COL, S.EXECUTION, S.STEP)


def bucket_rows() -> int:
    given = os.environ.get(BUCKET_ROWS, "").strip()
    return int(given) if given.isdigit() and int(given) > 0 else DEFAULT_BUCKET_ROWS


def derive(narrow: Narrow, ev: Events, diag: Diagnostics, workdir: Path | None) -> Ranges:
    """The derived columns of every row of ``narrow``, in files under ``workdir``."""
    folder = Path(tempfile.mkdtemp(prefix=".neurontrace-sweep-", dir=workdir))
    try:
        return _Sweep(narrow, ev, diag, folder).run()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


class _Files:
    """Arrow IPC stream files in ``folder``, one per key, each appended a frame at a time."""

    def __init__(self, folder: Path, stem: str) -> None:
        self.folder = folder
        self.stem = stem
        self._open: dict[int, tuple[pa.OSFile, pa.ipc.RecordBatchStreamWriter]] = {}

    def path(self, key: int) -> Path:
        return self.folder / f"{self.stem}-{key}.arrow"

    def write(self, key: int, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        out = self._open.get(key)
        if out is None:
            sink = pa.OSFile(str(self.path(key)), "wb")
            out = self._open[key] = (sink, pa.ipc.new_stream(sink, table.schema))
        out[1].write_table(table)

    def close(self) -> None:
        opened, self._open = self._open, {}
        for sink, writer in opened.values():
            writer.close()
            sink.close()

    def read(self, key: int) -> pl.DataFrame | None:
        path = self.path(key)
        if not path.exists():
            return None
        with pa.OSFile(str(path), "rb") as f:
            frame = pl.from_arrow(pa.ipc.open_stream(f).read_all())
        assert isinstance(frame, pl.DataFrame)
        return frame

    def remove(self, key: int) -> None:
        self.path(key).unlink(missing_ok=True)


class _Sweep:
    def __init__(self, narrow: Narrow, ev: Events, diag: Diagnostics, folder: Path) -> None:
        self.narrow = narrow
        self.ev = ev
        self.diag = diag
        self.folder = folder
        self.size = bucket_rows()
        self.buckets = _Files(folder, "bucket")
        self.ranges = _Files(folder, "range")

    def run(self) -> Ranges:
        self._survey()
        self._split()
        self._sweep()
        return Ranges(self.ranges, self.narrow.rows, self.size, self.names, *self._link())

    # -- pass 1: what is kept whole, and where the buckets start ---------------------
    def _survey(self) -> None:
        rows = self.narrow.rows
        stride = max(1, rows // _SAMPLE)
        firsts, steps, samples = [], [], []
        self.keys: list[str] = []
        self.given_flows = False
        self.has_links = False
        offset = 0
        for f in self.narrow.frames():
            f = complete(f)
            self.keys = lane_keys(f)
            self.given_flows = S.FLOW_IDS in f.columns
            firsts.append(f.select(*self.keys, S.LAYER).unique(
                subset=self.keys, keep="first", maintain_order=True))
            steps.append(_step_spans(f))
            # a copy: a view would keep the whole batch it was read with alive
            samples.append(f.get_column(S.START_NS).to_numpy()[(-offset) % stride::stride].copy())
            self.has_links = self.has_links or bool(
                f.select((pl.col(S.LAYER) != S.FRAMEWORK).any()).item())
            offset += f.height
        lanes = pl.concat(firsts).unique(subset=self.keys, keep="first", maintain_order=True)
        lanes = lanes.with_columns(lane=pl.struct(self.keys).rank("dense").cast(_I64) - 1)
        self.lanes = lanes.select(*self.keys, "lane")
        self.names = lane_names(lanes.sort("lane"), self.ev)
        self.steps = pl.concat(steps)
        sample = np.sort(np.concatenate(samples)) if samples else np.zeros(0, np.int64)
        n = -(-rows // self.size)
        if n <= 1 or len(sample) == 0:
            self.bounds = np.zeros(0, np.int64)
        else:  # equal starts share a bucket: bucket i holds bounds[i-1] <= start < bounds[i]
            self.bounds = np.unique(sample[np.arange(1, n) * len(sample) // n])

    def _bucket(self, start: pl.Series) -> np.ndarray:
        return np.searchsorted(self.bounds, start.to_numpy(), side="right")

    # -- pass 2: the rows into bucket files, by start time -----------------------------
    def _split(self) -> None:
        offset = 0
        try:
            for f in self.narrow.frames():
                f = complete(f)
                n = f.height
                f = f.with_columns(pl.Series(S.ROW, np.arange(offset, offset + n), _I64))
                offset += n
                f = f.join(self.lanes, on=self.keys, how="left", nulls_equal=True,
                           maintain_order="left")
                cols = [
                    S.ROW, "lane", (pl.col(S.KIND) == S.SPAN).alias("span"),
                    (pl.col(S.LAYER) == S.FRAMEWORK).alias("fw"),
                    pl.col(S.LAYER, S.CATEGORY, S.EXECUTION).cast(pl.String),
                    S.START_NS, S.DUR_NS, S.PID, S.TID, S.EXTERNAL_ID, S.CORRELATION,
                    S.DEVICE_COL,
                ]
                if self.given_flows:
                    cols.append(S.FLOW_IDS)
                f = f.select(cols).with_columns(_b=self._bucket(f.get_column(S.START_NS)))
                for (b,), part in f.partition_by("_b", as_dict=True).items():
                    self.buckets.write(int(b), part.drop("_b"))
        finally:
            self.buckets.close()

    # -- pass 3: the buckets in time order ---------------------------------------------
    def _sweep(self) -> None:
        carried = pl.DataFrame(schema={**_CARRIED, **self._given_schema()})
        last = pl.DataFrame(schema={S.ROW: _I64, S.PID: _I64, S.TID: _I64,
                                    S.START_NS: _I64, S.DUR_NS: _I64})
        self._flows: pl.DataFrame | None = None
        if self.ev.flows is not None and self.ev.flows.num_rows:
            every = pl.from_arrow(self.ev.flows)
            assert isinstance(every, pl.DataFrame)
            self._flows = every
            self._flow_bucket = self._bucket(every.get_column("ts_ns"))
        self.bound: list[pl.DataFrame] = []
        self.to_link: list[pl.DataFrame] = []
        missed = 0
        try:
            for b in range(len(self.bounds) + 1):
                df = self.buckets.read(b)
                if df is None:
                    df = self._empty_bucket()
                st = _steps(df.select(S.ROW, S.START_NS), self.steps)
                df = df.join(st.select(S.ROW, pl.col(S.STEP).cast(pl.Int32)), on=S.ROW,
                             how="left")
                nxt = int(self.bounds[b]) if b < len(self.bounds) else None
                carried = self._nest(df, carried, nxt)
                spans = df.filter("span").select(S.ROW, S.PID, S.TID, S.START_NS, S.DUR_NS)
                fl = self._flows_in(b)
                if fl is not None:
                    pairs, m = flow_pairs(pl.concat([last, spans]).lazy(), fl)
                    self.bound.append(pairs)
                    missed += m
                last = _last_per_thread(pl.concat([last, spans]))
                if not self.has_links:  # else read again for the framework rows linked
                    self.buckets.remove(b)
        finally:
            self.ranges.close()
        warn_unbound(self.diag, missed)

    def _given_schema(self) -> dict[str, pl.DataType]:
        return {S.FLOW_IDS: pl.List(pl.String)} if self.given_flows else {}

    def _empty_bucket(self) -> pl.DataFrame:
        return pl.DataFrame(schema={
            S.ROW: _I64, "lane": _I64, "span": pl.Boolean, "fw": pl.Boolean,
            S.LAYER: pl.String, S.CATEGORY: pl.String, S.EXECUTION: pl.String,
            S.START_NS: _I64, S.DUR_NS: _I64, S.PID: _I64, S.TID: _I64,
            S.EXTERNAL_ID: _I64, S.CORRELATION: _I64, S.DEVICE_COL: _I64,
            **self._given_schema()})

    def _flows_in(self, b: int) -> pl.DataFrame | None:
        """The flow events of bucket ``b`` (by their time), None if it has none."""
        if self._flows is None:
            return None
        fl = self._flows.filter(pl.Series(self._flow_bucket == b))
        return fl if fl.height else None

    def _nest(self, df: pl.DataFrame, carried: pl.DataFrame, nxt: int | None) -> pl.DataFrame:
        """Nest this bucket's spans under the carried ones; write the rows now final
        (spans that close before the next bucket, and every non-span); return the spans
        still open."""
        given = [S.FLOW_IDS] if self.given_flows else []
        new = df.filter("span").select(
            row=S.ROW, lane="lane", start=S.START_NS, dur=S.DUR_NS, step=S.STEP, fw="fw",
            external_id=S.EXTERNAL_ID, covered=pl.lit(0, _I64), old=pl.lit(False),
            **{c: c for c in given})
        s = in_order(pl.concat([carried, new]))
        parent = parents_in_order(s)
        rows = s.get_column("row").to_numpy()
        dur = s.get_column("dur").to_numpy()
        end = s.get_column("start").to_numpy() + dur
        child = (parent >= 0) & ~s.get_column("old").to_numpy()  # old children: counted
        covered = s.get_column("covered").to_numpy().copy()
        np.add.at(covered, parent[child], dur[child])  # exact int64 sums
        has = parent >= 0
        out = s.select(
            "row", "lane",
            pl.Series(S.PARENT, rows[np.maximum(parent, 0)], _I64).scatter(
                np.nonzero(~has)[0], None),
            pl.Series(S.DEPTH, depths(parent)).cast(pl.Int32),
            pl.Series(S.SELF_NS, np.maximum(dur - covered, 0), _I64),
            S.STEP, *given,
        )
        if self.has_links:
            self._keep_for_links(df, s, parent)
        keep = end > nxt if nxt is not None else np.zeros(len(rows), bool)
        self._emit(out.filter(~keep))
        others = df.filter(~pl.col("span")).select(
            S.ROW, "lane", pl.lit(None, _I64).alias(S.PARENT),
            pl.lit(None, pl.Int32).alias(S.DEPTH), pl.lit(None, _I64).alias(S.SELF_NS),
            S.STEP, *given)
        self._emit(others)
        return s.with_columns(covered=covered, old=True).filter(keep)

    def _emit(self, out: pl.DataFrame) -> None:
        if out.height == 0:
            return
        part = out.get_column(S.ROW).to_numpy() // self.size
        for (k,), piece in out.with_columns(_k=part).partition_by("_k", as_dict=True).items():
            self.ranges.write(int(k), piece.drop("_k"))

    def _keep_for_links(self, df: pl.DataFrame, s: pl.DataFrame, parent: np.ndarray) -> None:
        """Runtime and device rows, with their nearest framework ancestor (its row,
        External id and step), for :func:`links` at the end."""
        fw = s.get_column("fw").to_numpy()
        up = parent.copy()
        todo = np.nonzero(up >= 0)[0]
        todo = todo[~fw[up[todo]]]
        while len(todo):  # climb until a framework span (or the top)
            up[todo] = parent[up[todo]]
            todo = todo[up[todo] >= 0]
            todo = todo[~fw[up[todo]]]
        found = up >= 0
        at = np.maximum(up, 0)
        rows = s.get_column("row").to_numpy()
        nest = pl.DataFrame({
            S.ROW: rows,
            "_nest_row": pl.Series(rows[at], dtype=_I64).scatter(np.nonzero(~found)[0], None),
            "_nest_ext": s.get_column(S.EXTERNAL_ID).gather(at).scatter(
                np.nonzero(~found)[0], None),
            "_nest_step": s.get_column(S.STEP).gather(at).scatter(np.nonzero(~found)[0], None),
        }).filter(pl.Series(~fw & ~s.get_column("old").to_numpy()))
        given = [S.FLOW_IDS] if self.given_flows else []
        mine = df.filter(~pl.col("fw")).select(*_LINK, *given)
        self.to_link.append(mine.join(nest, on=S.ROW, how="left"))

    # -- links, at the end -------------------------------------------------------------
    def _link(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """Computed flow ids per row; ``framework_row``/``link`` of runtime and device
        rows; and the launching op's step of device rows that have one."""
        empty = pl.DataFrame(schema={S.ROW: _I64})
        bound = pl.concat(self.bound) if self.bound else \
            pl.DataFrame(schema={S.ROW: _I64, "flow_id": pl.String})
        fids = flow_ids(bound).sort(S.ROW)
        if not self.has_links:
            return fids, empty, empty
        try:
            mine = pl.concat(self.to_link).sort(S.ROW)
            self.to_link = []
            mine = self._with_flows(mine, fids)
            refs = mine.get_column(S.EXTERNAL_ID).drop_nulls().unique()
            flowing = fids.get_column(S.ROW)
            named = []
            for b in range(len(self.bounds) + 1):  # the framework rows they may name
                df = self.buckets.read(b)
                if df is None:
                    continue
                given = pl.col(S.FLOW_IDS).is_not_null() if self.given_flows else pl.lit(False)
                df = df.filter(pl.col("fw") & (
                    pl.col(S.EXTERNAL_ID).is_in(refs) | pl.col(S.ROW).is_in(flowing) | given))
                st = _steps(df.select(S.ROW, S.START_NS), self.steps)
                named.append(df.join(st.select(S.ROW, pl.col(S.STEP).cast(pl.Int32)),
                                     on=S.ROW, how="left").select(
                    *_LINK, *([S.FLOW_IDS] if self.given_flows else [])))
        finally:
            for b in range(len(self.bounds) + 1):
                self.buckets.remove(b)
        fw = self._with_flows(pl.concat(named), fids) if named else None
        df = pl.concat([mine, fw], how="diagonal_relaxed") if fw is not None else mine
        linked = links(df.sort(S.ROW).drop(S.STEP, "_nest_step"), self.diag)
        linked = mine.select(S.ROW, S.LAYER).join(linked, on=S.ROW, how="left")
        step_of = pl.concat([
            mine.select(pl.col("_nest_row").alias(S.ROW), pl.col("_nest_step").alias(S.STEP)),
            *([fw.select(S.ROW, S.STEP)] if fw is not None else []),
        ]).drop_nulls(S.ROW).unique(S.ROW)
        launched = linked.filter(
            (pl.col(S.LAYER) == S.DEVICE) & pl.col(S.FRAMEWORK_ROW).is_not_null()
        ).select(S.ROW, S.FRAMEWORK_ROW).join(
            step_of.rename({S.ROW: S.FRAMEWORK_ROW}), on=S.FRAMEWORK_ROW, how="left"
        ).select(S.ROW, S.STEP, _launch=pl.lit(True))
        return fids, linked.select(S.ROW, S.FRAMEWORK_ROW, S.LINK).sort(S.ROW), \
            launched.sort(S.ROW)

    def _with_flows(self, df: pl.DataFrame, fids: pl.DataFrame) -> pl.DataFrame:
        """``flow_ids`` of ``df``'s rows: the reader's where given, else the computed."""
        df = df.join(fids.rename({S.FLOW_IDS: "_fids"}), on=S.ROW, how="left")
        given = pl.col(S.FLOW_IDS) if self.given_flows else pl.lit(None, pl.List(pl.String))
        return df.with_columns(pl.coalesce(given, "_fids").alias(S.FLOW_IDS)).drop("_fids")


def _last_per_thread(spans: pl.DataFrame) -> pl.DataFrame:
    """The spans starting last on each thread (all of them where several tie)."""
    latest = pl.col(S.START_NS) == pl.col(S.START_NS).max().over(S.PID, S.TID)
    return spans.filter(latest)


class Ranges:
    """The derived columns, read back a range of rows at a time, in row order."""

    def __init__(self, files: _Files, rows: int, size: int, names: pl.Series,
                 fids: pl.DataFrame, linked: pl.DataFrame, launched: pl.DataFrame) -> None:
        self.files = files
        self.height = rows
        self.size = size
        self.names = names
        self.fids = fids
        self.linked = linked
        self.launched = launched
        self._cached: tuple[int, pl.DataFrame] | None = None

    def _range(self, k: int) -> pl.DataFrame:
        if self._cached is None or self._cached[0] != k:
            frame = self.files.read(k)
            assert frame is not None
            frame = frame.sort(S.ROW)
            want = min(self.size, self.height - k * self.size)
            assert frame.height == want, f"range {k}: {frame.height} rows, not {want}"
            self._cached = (k, frame)
        return self._cached[1]

    def slice(self, offset: int, length: int) -> pl.DataFrame:
        end = min(offset + length, self.height)
        parts = []
        for k in range(offset // self.size, (end - 1) // self.size + 1 if end > offset else 0):
            lo = max(offset, k * self.size) - k * self.size
            hi = min(end, (k + 1) * self.size) - k * self.size
            parts.append(self._range(k).slice(lo, hi - lo))
        base = pl.concat(parts) if parts else self.files_schema()
        fids = _within(self.fids, offset, end, S.FLOW_IDS)
        fw = _within(self.linked, offset, end, S.FRAMEWORK_ROW, S.LINK)
        launch = _within(self.launched, offset, end, "_launch", S.STEP)
        computed = fids.get_column(S.FLOW_IDS)
        flows = (pl.coalesce(base.get_column(S.FLOW_IDS), computed)
                 if S.FLOW_IDS in base.columns else computed)
        step = pl.when(launch.get_column("_launch")).then(
            launch.get_column(S.STEP)).otherwise(base.get_column(S.STEP))
        out = base.select(
            self.names.gather(base.get_column("lane")).alias(S.TRACK),
            S.SELF_NS, S.PARENT, S.DEPTH,
            flows.alias(S.FLOW_IDS),
            fw.get_column(S.FRAMEWORK_ROW), fw.get_column(S.LINK),
            step.cast(pl.Int32).alias(S.STEP),
        )
        return out.select(DERIVED)

    def files_schema(self) -> pl.DataFrame:
        return pl.DataFrame(schema=_OUT)

    def close(self) -> None:
        self._cached = None
        shutil.rmtree(self.files.folder, ignore_errors=True)


def _within(table: pl.DataFrame, lo: int, hi: int, *cols: str) -> pl.DataFrame:
    """``table``'s ``cols`` (keyed by a sorted ``row``) for rows ``lo``..``hi``, in row
    order, nulls where it has no row."""
    n = hi - lo
    schema = {c: table.schema[c] for c in cols if c in table.columns}
    if table.height == 0 or not schema:
        return pl.DataFrame([pl.Series(c, [None] * n, _dtype(c, schema)) for c in cols])
    row = table.get_column(S.ROW).to_numpy()
    a, b = np.searchsorted(row, [lo, hi])
    part = table.slice(int(a), int(b - a))
    where = np.full(n, -1, np.int64)
    where[part.get_column(S.ROW).to_numpy() - lo] = np.arange(part.height)
    index = pl.Series("i", where).scatter(np.nonzero(where < 0)[0], None)
    return part.select(pl.col(*cols).gather(index))


def _dtype(col: str, schema: dict[str, Any]) -> Any:
    known: dict[str, Any] = {
        S.FLOW_IDS: pl.List(pl.String), S.FRAMEWORK_ROW: _I64, S.LINK: pl.String,
        "_launch": pl.Boolean, S.STEP: pl.Int32}
    return schema.get(col, known[col])
