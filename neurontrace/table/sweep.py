"""The derivations: the columns that relate rows (tracks, nesting, steps, flows, links).

Everything here is format-independent: a reader supplies rows with times, ids and
categories (their narrow columns, :mod:`neurontrace.table.spill`), and this module derives the
columns that relate rows to one another, in one way for every trace: a sweep over time
buckets. A trace whose narrow columns fit :func:`~neurontrace.table.spill.memory_rows` is one
bucket, held in memory; a larger one is cut into buckets of :func:`bucket_rows` rows in
files, and memory follows the size of a bucket, not of the trace::

    narrow columns --survey--> lanes, ProfilerStep spans, bucket bounds (by start)
                   --split---> buckets: the rows that start in each bucket
    bucket 0, 1, 2, ...    --sweep---> row ranges: lane, parent, depth, self_ns, step
                                       + flow bindings, runtime/device rows to link
    row ranges     --write---> the derived columns a batch at a time (:mod:`.derived`)

What the passes keep between them is kept by key (:class:`~neurontrace.table.spill.Parts`),
in files, or in memory for one bucket.

Each derivation relates a row to rows that start no later than it, or to a few rows
kept whole. Nesting (:mod:`neurontrace.table.nesting`): the containers of a span start before
it and end after the next bucket's first start, so the spans still open at a bucket's
end are carried into the next, with the child time counted so far (a span's ``self_ns``
is known when it closes). Flows: a flow binds to a span starting at its time (same
bucket) or the last span on its thread started before it, so each thread's last span is
carried. Steps: the ``ProfilerStep`` spans are few and kept whole. Links
(``framework_row``) join runtime and device rows to framework rows anywhere in the
trace: they are computed at the end by :mod:`neurontrace.table.linking`, a row range at a
time, from tables with one entry per link key (none in a CPU-only trace), so their
memory follows the number of keys.

The result does not depend on the bucket size; ``tests/test_sweep.py`` checks that on
every fixture with buckets of a few rows.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers.base import Events
from neurontrace.table.derived import Ranges
from neurontrace.table.flows import flow_id_lists, flow_pairs, with_flows
from neurontrace.table.linking import COLUMNS, links
from neurontrace.table.nesting import at_positions, nearest, nest
from neurontrace.table.spill import Parts, SpilledFrames, complete, memory_rows, rows_setting

#: Rows per bucket (and per row range) of a trace past :func:`memory_rows`, unless
#: ``$NEURONTRACE_BUCKET_ROWS`` says.
BUCKET_ROWS = "NEURONTRACE_BUCKET_ROWS"
DEFAULT_BUCKET_ROWS = 250_000
#: Start times sampled to place the bucket bounds.
_SAMPLE = 100_000

_I64 = pl.Int64
#: The narrow columns of a trace without rows.
_EMPTY = pl.DataFrame(schema={S.START_NS: _I64, S.DUR_NS: _I64, "_step_no": _I64})
#: The steps of no rows.
_NO_STEPS = pl.DataFrame(schema={S.ROW: _I64, S.STEP: _I64})
#: What a carried (open) span holds.
_CARRIED = {"row": _I64, "lane": _I64, "start": _I64, "dur": _I64, S.STEP: pl.Int32,
            "fw": pl.Boolean, S.EXTERNAL_ID: _I64, "covered": _I64, "old": pl.Boolean}



def bucket_rows() -> int:
    return rows_setting(BUCKET_ROWS, DEFAULT_BUCKET_ROWS)


def derive(narrow: SpilledFrames, ev: Events, diag: Diagnostics, workdir: Path | None,
           flows: SpilledFrames) -> Ranges:
    """The derived columns of every row of ``narrow``, the flow events being ``flows``:
    one bucket in memory when its rows and its flow events each fit :func:`memory_rows`,
    else buckets in files under ``workdir`` (a few rows with many flow events would hold
    every flow event at once)."""
    if max(narrow.rows, flows.rows) <= memory_rows():
        return _Sweep(narrow, ev, diag, None, max(narrow.rows, 1), flows).run()
    folder = Path(tempfile.mkdtemp(prefix=".neurontrace-sweep-", dir=workdir))
    try:
        return _Sweep(narrow, ev, diag, folder, bucket_rows(), flows).run()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


class _Sweep:
    def __init__(self, narrow: SpilledFrames, ev: Events, diag: Diagnostics,
                 folder: Path | None, size: int, flow_events: SpilledFrames) -> None:
        self.narrow = narrow
        self.ev = ev
        self.flow_events = flow_events
        self.diag = diag
        self.folder = folder  # None: one bucket, in memory
        self.size = size  # rows per bucket
        # Rows per row range: a bucket's in files; in memory at most as many, so that
        # the derived columns are sorted, joined and written a range at a time (one
        # range of every row held the whole table's columns twice while writing)
        self.range_size = min(size, bucket_rows())
        self.buckets = Parts(folder, "bucket")  # rows by start time
        self.flows = Parts(folder, "flows")  # flow events by time
        # by row range:
        self.ranges = Parts(folder, "range")  # lane, nesting, step (every row)
        self.pairs = Parts(folder, "pairs")  # flow ids bound to rows
        self.fids = Parts(folder, "fids")  # flow_ids of the rows with bound flows
        self.links = Parts(folder, "links")  # runtime and device rows to link
        self.linked = Parts(folder, "linked")  # framework_row and link of those rows

    def run(self) -> Ranges:
        self._survey()
        self._split()
        self._sweep()
        # ``row, flow_ids, fw`` of the rows bound to flows, a row range at a time (a
        # row's flows may have been bound in several buckets)
        self.pairs.map(self.fids, lambda _, pairs: flow_id_lists(pairs))
        launch_steps = self._link()
        return Ranges((self.ranges, self.fids, self.linked), self.narrow.rows, self.range_size,
                      self.names, launch_steps)

    # -- pass 1: what is kept whole, and where the buckets start ---------------------
    def _survey(self) -> None:
        rows = self.narrow.rows
        stride = max(1, rows // _SAMPLE)
        firsts, spans_of_steps, samples = [], [], []
        self.keys: list[str] = []
        self.given_flows = False
        self.has_links = False
        offset = 0
        for f in self._frames():
            self.keys = lane_keys(f)
            self.given_flows = S.FLOW_IDS in f.columns
            firsts.append(f.select(*self.keys, S.LAYER).unique(
                subset=self.keys, keep="first", maintain_order=True))
            spans_of_steps.append(step_spans(f))
            # a copy: a view would keep the whole batch it was read with alive
            samples.append(f.get_column(S.START_NS).to_numpy()[(-offset) % stride::stride].copy())
            self.has_links = self.has_links or bool(
                f.select((pl.col(S.LAYER) != S.FRAMEWORK).any()).item())
            offset += f.height
        lanes = pl.concat(firsts).unique(subset=self.keys, keep="first", maintain_order=True)
        lanes = lanes.with_columns(lane=pl.struct(self.keys).rank("dense").cast(_I64) - 1)
        self.lanes = lanes.select(*self.keys, "lane")
        self.names = lane_names(lanes.sort("lane"), self.ev)
        self.step_spans = pl.concat(spans_of_steps)
        sample = np.sort(np.concatenate(samples))
        n = max(1, -(-rows // self.size))  # buckets
        # equal starts share a bucket: bucket i holds bounds[i-1] <= start < bounds[i]
        self.bounds = np.unique(sample[np.arange(1, n) * len(sample) // n])

    def _frames(self) -> Iterator[pl.DataFrame]:
        """The narrow frames with every column the derivations read (of a trace without
        rows: one frame without rows)."""
        return map(complete, self.narrow.frames() if self.narrow.rows else [_EMPTY])

    def _bucket(self, start: pl.Series) -> np.ndarray | None:
        """The bucket of each start time (None: one bucket)."""
        if len(self.bounds) == 0:
            return None
        return np.searchsorted(self.bounds, start.to_numpy(), side="right")

    # -- pass 2: the rows into bucket files, by start time -----------------------------
    def _split(self) -> None:
        offset = 0
        text = pl.String if self.folder is not None else pl.Categorical
        for f in self._frames():
            n = f.height
            f = f.with_columns(pl.Series(S.ROW, np.arange(offset, offset + n), _I64))
            offset += n
            # the keys alone are joined: the bucket shares the frame's other columns
            lane = f.select(self.keys).join(self.lanes, on=self.keys, how="left",
                                            nulls_equal=True, maintain_order="left")
            f = f.with_columns(lane.get_column("lane"))
            cols = [
                S.ROW, "lane", (pl.col(S.KIND) == S.SPAN).alias("span"),
                (pl.col(S.LAYER) == S.FRAMEWORK).alias("fw"),
                # as text in files (each file has its own dictionary); in memory
                # the categories are kept (a code per row, not the text)
                pl.col(S.LAYER, S.CATEGORY, S.EXECUTION).cast(text),
                S.START_NS, S.DUR_NS, S.PID, S.TID, S.EXTERNAL_ID, S.CORRELATION,
                S.DEVICE_COL, pl.col(S.ROLE).cast(text),
            ]
            if S.MODEL_ID in f.columns:  # Neuron readers only: a column of nulls costs
                cols.append(S.MODEL_ID)  # 8 bytes a row in every bucket (linking adds it)
            f = f.select(cols + [S.FLOW_IDS] if self.given_flows else cols)
            self.bucket_schema = f.schema  # of a bucket without rows
            self.buckets.spread(f, self._bucket(f.get_column(S.START_NS)))
        for fl in self.flow_events.frames():  # the flow events by bucket (of their time)
            self.flows.spread(fl, self._bucket(fl.get_column("ts_ns")))
        self.narrow.discard()  # each row is in its bucket now

    # -- pass 3: the buckets in time order ---------------------------------------------
    def _sweep(self) -> None:
        given = {S.FLOW_IDS: pl.List(pl.String)} if self.given_flows else {}
        carried = pl.DataFrame(schema={**_CARRIED, **given})
        last = pl.DataFrame(schema={S.ROW: _I64, S.PID: _I64, S.TID: _I64,
                                    S.START_NS: _I64, S.DUR_NS: _I64, "fw": pl.Boolean})
        missed = 0
        for b in range(len(self.bounds) + 1):
            df = self.buckets.read(b)
            if df is None:
                df = pl.DataFrame(schema=self.bucket_schema)
            st = steps(df.select(S.ROW, S.START_NS), self.step_spans)
            # a bucket's rows are in row order: a column beside them, not a join
            # (which would copy the bucket)
            df = df.with_columns(st.sort(S.ROW).get_column(S.STEP).cast(pl.Int32))
            nxt = int(self.bounds[b]) if b < len(self.bounds) else None
            carried = self._nest(df, carried, nxt)
            spans = pl.concat([last.lazy(), df.lazy().filter("span").select(
                S.ROW, S.PID, S.TID, S.START_NS, S.DUR_NS, "fw")])
            # in files, a bucket's spans are taken out once: lazy (each use filtering the
            # bucket again) took 5% more CPU time on a 0.5 GB CPU trace (same-run bench)
            if self.folder is not None:
                spans = spans.collect().lazy()
            # (in memory, lazy: each use takes only the spans it needs out of the bucket)
            fl = self.flows.read(b)
            if fl is not None:
                pairs, m = flow_pairs(spans, fl)
                # (a span is once in ``spans``: the carried ones are of earlier buckets)
                self._emit(self.pairs, pairs.lazy().join(
                    spans.select(S.ROW, "fw"), on=S.ROW, how="left").collect())
                missed += m
            # the spans starting last on each thread (all of them where several tie)
            last = spans.filter(pl.col(S.START_NS) == pl.col(S.START_NS).max().over(
                S.PID, S.TID)).collect()
            self.flows.remove(b)
            if not self.has_links:  # else read again for the framework rows linked
                self.buckets.remove(b)
        if missed:
            self.diag.warn(
                "unbound_flow",
                f"{missed} flow event(s) fall in no span on their thread; their link is "
                "kept only where the other end binds",
                missed,
            )

    def _nest(self, df: pl.DataFrame, carried: pl.DataFrame, nxt: int | None) -> pl.DataFrame:
        """Nest this bucket's spans under the carried ones; write the rows now final
        (spans that close before the next bucket, and every non-span); return the spans
        still open."""
        given = [S.FLOW_IDS] if self.given_flows else []
        s, parent = nest(pl.concat([carried, df.filter("span").select(
            row=S.ROW, lane="lane", start=S.START_NS, dur=S.DUR_NS, step=S.STEP, fw="fw",
            external_id=S.EXTERNAL_ID, covered=pl.lit(0, _I64), old=pl.lit(False),
            **{c: c for c in given})]))
        out = s.select("row", "lane", S.PARENT, S.DEPTH, S.SELF_NS, S.STEP, *given)
        if self.has_links:
            self._keep_for_links(df, s, parent)
        end = s.get_column("start").to_numpy() + s.get_column("dur").to_numpy()
        keep = end > nxt if nxt is not None else np.zeros(len(end), bool)
        self._emit(self.ranges, out.filter(~keep) if keep.any() else out)
        others = df.filter(~pl.col("span")).select(
            S.ROW, "lane", pl.lit(None, _I64).alias(S.PARENT),
            pl.lit(None, pl.Int32).alias(S.DEPTH), pl.lit(None, _I64).alias(S.SELF_NS),
            S.STEP, *given)
        self._emit(self.ranges, others)
        if not keep.any():
            return carried.clear()
        return s.select(carried.columns).with_columns(old=True).filter(keep)

    def _emit(self, files: Parts, out: pl.DataFrame) -> None:
        """Append ``out``'s rows to ``files``, each to the file of its row range."""
        if out.height:
            files.spread(out, None if self._ranges() == 1 else
                         out.get_column(S.ROW).to_numpy() // self.range_size)

    def _keep_for_links(self, df: pl.DataFrame, s: pl.DataFrame, parent: np.ndarray) -> None:
        """Runtime and device rows, with their nearest framework ancestor (its row and
        External id), for :mod:`neurontrace.table.linking` at the end."""
        fw = s.get_column("fw").to_numpy()
        up = nearest(parent, fw)
        ancestors = pl.DataFrame({
            S.ROW: s.get_column("row"),
            "_nest_row": at_positions(s.get_column("row"), up),
            "_nest_ext": at_positions(s.get_column(S.EXTERNAL_ID), up),
        }).filter(pl.Series(~fw & ~s.get_column("old").to_numpy()))
        mine = df.filter(~pl.col("fw")).join(ancestors, on=S.ROW, how="left")
        self._emit(self.links, mine.select(c for c in COLUMNS if c in mine.columns))

    # -- links, at the end -------------------------------------------------------------
    def _link(self) -> pl.DataFrame:
        """Link runtime and device rows (:mod:`neurontrace.table.linking`), a row range at a
        time, into the ``linked`` files; the step of each op that launched device work."""
        if not self.has_links:  # (the buckets are removed once swept)
            return _NO_STEPS
        # the runtime and device rows to link, with their flow ids (bound by the sweep)
        with_ids = Parts(self.folder, "linkrows")
        self.links.map(with_ids, lambda k, c: with_flows(c, self.fids.read(k)))
        launchers = []
        for out in links(with_ids.each, self._framework,
                         self._fw_flows(), self.diag):
            self._emit(self.linked, out)
            launchers.append(out.filter(
                (pl.col(S.LAYER) == S.DEVICE) & pl.col(S.FRAMEWORK_ROW).is_not_null()
            ).get_column(S.FRAMEWORK_ROW).unique())
        rows = pl.concat([pl.Series(S.ROW, [], _I64), *launchers]).unique().to_frame(S.ROW)
        found = [b.select(S.ROW, S.START_NS).join(rows, on=S.ROW, how="semi")
                 for b in self.buckets.each()]
        for b in range(len(self.bounds) + 1):
            self.buckets.remove(b)
        return steps(pl.concat(found), self.step_spans) if found else _NO_STEPS

    def _ranges(self) -> int:
        return -(-self.narrow.rows // self.range_size)

    def _framework(self, refs: pl.Series) -> pl.DataFrame:
        """The framework rows that carry one of the External ids ``refs``."""
        ids = refs.to_frame(S.EXTERNAL_ID)
        found = [b.filter("fw").select(S.ROW, S.CATEGORY, S.EXTERNAL_ID).join(
            ids, on=S.EXTERNAL_ID, how="semi") for b in self.buckets.each()]
        return pl.concat(found) if found else \
            pl.DataFrame(schema={S.ROW: _I64, S.CATEGORY: pl.String, S.EXTERNAL_ID: _I64})

    def _fw_flows(self) -> pl.DataFrame:
        """``row, flow_ids`` of the framework rows with flow arrows (the reader's, else
        those bound here)."""
        empty = pl.DataFrame(schema={S.ROW: _I64, S.FLOW_IDS: pl.List(pl.String)})
        given = self.buckets.each() if self.given_flows else iter(())
        mine = pl.concat([empty, *(b.filter(pl.col("fw") & pl.col(S.FLOW_IDS).is_not_null())
                                   .select(S.ROW, S.FLOW_IDS) for b in given)])
        theirs = pl.concat([empty, *(f.filter("fw").select(S.ROW, S.FLOW_IDS)
                                     for f in self.fids.each())])
        return pl.concat([mine, theirs.join(mine, on=S.ROW, how="anti")])


# -- the derivations of a bucket -----------------------------------------------------
def lane_keys(df: pl.DataFrame) -> list[str]:
    """The columns whose values make a lane."""
    keys = [S.PID, S.TID, S.PID_LABEL, S.TID_LABEL]
    return [*keys, S.TRACK] if S.TRACK in df.columns else keys


def lane_names(lanes: pl.DataFrame, ev: Events) -> pl.Series:
    """The readable name of each lane: ``lanes`` has the keys and the layer of each
    lane's first row, in lane order."""
    keys = lane_keys(lanes)
    track = pl.col(S.TRACK).cast(pl.String) if S.TRACK in keys else pl.lit(None, pl.String)
    return pl.Series(S.TRACK, [
        given if given is not None else _track_name(pid, tid, pl_, tl, layer, ev)
        for pid, tid, pl_, tl, layer, given in lanes.select(*keys[:4], S.LAYER, track).iter_rows()
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
    (device rows are then given their launching op's step, see
    :class:`~neurontrace.table.derived.Ranges`); ``spans`` are the ProfilerStep spans
    (:func:`step_spans`)."""
    spans = spans.sort("s_start")
    if spans.height == 0:  # no steps: no sort of every row (0.3 s for a million rows)
        return df.select(S.ROW, pl.lit(None, _I64).alias(S.STEP))
    order = df.select(S.ROW, S.START_NS).sort(S.START_NS)
    hit = order.join_asof(spans, left_on=S.START_NS, right_on="s_start", strategy="backward")
    inside = pl.col(S.START_NS) < pl.col("s_end")
    return hit.select(S.ROW, pl.when(inside).then(pl.col("step")).alias(S.STEP))


