"""The event table as one Chrome-trace JSON file that Perfetto UI and chrome://tracing open.

Layout (viewer ``pid``/``tid`` are small integers of our own; each event's real ids
travel in its args, see below)::

    rank 0 · process 569          <- one viewer process per host process
        thread 569 (python3)      <- framework ops and runtime calls, nested
    rank 0 · GPU 0                <- one per GPU / NeuronCore (the part of the device
        stream 7                     track's name before " / ")
    neurontrace · device idle     <- view-only marks: gaps, named by cause
    neurontrace · copies          <- view-only marks: host <-> device transfers

Flow arrows (``s`` at the source, ``f`` with ``bp: "e"`` at the target) run from each
framework op to the runtime calls it made, and from the runtime call (or, without one,
the op) to the device work it launched.

Lossless: times are microsecond decimals with exactly three places computed from integer
nanoseconds relative to ``baseTimeNanoseconds`` (exact, no float). Each event's
``args`` is its own ``args`` object with one key added last, ``"neurontrace"``,
holding every column Kineto has no field for (``row``, ``layer``, ``track``, the real
``pid``/``tid``, ``parent``, ``framework_row``, ``link``, ``step``, ``rank``, ...; null
values left out). :mod:`neurontrace.readers.exported` recognises the file by its first
key (``{"neurontrace": ...``) and restores the table exactly; the marks and arrows are
dropped on reading.

The file is written a batch of rows at a time, to a temporary name renamed into place;
an ``out`` whose name ends in ``.gz`` is gzip-compressed (:func:`compressed`), as
Perfetto UI and chrome://tracing open it and every reader of neurontrace reads it.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import polars as pl

from neurontrace import schema as S
from neurontrace.io import atomic

#: First key of the file: how :mod:`neurontrace.readers.exported` recognises it.
MARKER = "neurontrace"
FORMAT = "chrome-trace-export"
#: ``args`` key of a view-only event (gap, copy): not a row of the table.
VIEW_KEY = "neurontrace.view"
VIEW_CATEGORY = "neurontrace.view"
FLOW_CATEGORY = "neurontrace.launch"

#: Columns the export carries in each event's ``args``: all but those Chrome-trace
#: fields hold exactly (name, cat, ph, ts, dur) and ``args`` itself.
CARRIED: tuple[str, ...] = tuple(
    c for c in S.NAMES
    if c not in (S.NAME, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS, S.ARGS)
)

_PHASE = {S.SPAN: "X", S.INSTANT: "i", S.COUNTER: "C"}
_LANE_KEYS = (S.RANK, S.PID, S.TID, S.TRACK)
BATCH_ROWS = 50_000

Progress = Callable[[int, "int | None"], None]


@dataclass(frozen=True)
class Marks:
    """The view-only tracks' content, computed by the caller: ``gaps`` is
    :func:`neurontrace.analyses.gaps`'s ``gaps`` table, ``copies`` the table of
    :func:`neurontrace.analyses.copies`, both of the exported events."""

    gaps: pl.DataFrame
    copies: pl.DataFrame


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote: rows of the table, arrows, and view-only marks."""

    path: Path
    rows: int
    flows: int
    gaps: int
    copies: int
    base_ns: int


def micros(ns: int) -> str:
    """Integer nanoseconds as microseconds with exactly three decimals (exact)."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def export(lf: pl.LazyFrame, out: str | os.PathLike[str], marks: Marks | None = None,
           progress: Progress | None = None) -> Exported:
    """Write the events of ``lf`` to ``out`` as Chrome-trace JSON (see the module doc).

    ``marks``: the gaps and copies of the same events, added as view-only tracks (none
    when ``None``, or when there are no events).
    """
    dst = Path(out)
    narrow = lf.select(
        S.ROW, S.RANK, S.LAYER, S.PID, S.TID, S.TRACK, S.START_NS, S.KIND,
        S.FRAMEWORK_ROW, S.CORRELATION,
    ).collect()
    base = int(narrow.get_column(S.START_NS).min() or 0) if narrow.height else 0  # type: ignore[arg-type]
    lanes = _lanes(narrow)
    shown = marks if marks is not None and narrow.height else None
    with atomic.writing(dst) as tmp, _opened(tmp, compressed(dst)) as f:
        w = _Writer(f)
        header = {MARKER: {"format": FORMAT, "schema_version": S.SCHEMA_VERSION},
                  "displayTimeUnit": "ns", "baseTimeNanoseconds": base}
        f.write(orjson.dumps(header)[:-1] + b',"traceEvents":[\n')
        for ev in _metadata(lanes):
            w.raw(ev)
        done = 0
        for chunk in _chunks(lf, narrow.height):
            keyed = chunk.join(lanes.select(*_LANE_KEYS, "vpid", "vtid"), on=list(_LANE_KEYS),
                               how="left", nulls_equal=True, maintain_order="left")
            for ev in _rows(keyed, base):
                w.raw(ev)
            done += chunk.height
            if progress is not None:
                progress(done, narrow.height)
        n_flows = 0
        for ev in _flows(narrow, lanes, base):
            w.raw(ev)
            n_flows += 1
        n_gaps = n_copies = 0
        if shown is not None:
            for ev in _marks(shown.gaps, shown.copies, lanes, base):
                w.raw(ev)
            n_gaps, n_copies = shown.gaps.height, shown.copies.height
        f.write(b"\n]}\n")
    return Exported(dst, narrow.height, n_flows // 2, n_gaps, n_copies, base)


def compressed(path: str | os.PathLike[str]) -> bool:
    """Whether the export to ``path`` is gzip-compressed: its name ends in ``.gz`` (any
    case: ``trace.json.gz``, ``TRACE.JSON.GZ``)."""
    return os.fspath(path).lower().endswith(".gz")


@contextmanager
def _opened(tmp: Path, gz: bool) -> Iterator[IO[bytes]]:
    """``tmp`` open for writing, through gzip when ``gz`` (level 6: about as fast as the
    rows are made; no file name or time in the header, so equal exports are equal
    bytes)."""
    with open(tmp, "wb") as raw:
        if not gz:
            yield raw
            return
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6,
                           mtime=0) as f:
            yield f  # type: ignore[misc]


class _Writer:
    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.first = True

    def raw(self, ev: bytes) -> None:
        self.f.write(ev if self.first else b",\n" + ev)
        self.first = False


def _chunks(lf: pl.LazyFrame, n: int) -> Iterator[pl.DataFrame]:
    for offset in range(0, n, BATCH_ROWS):
        yield lf.slice(offset, BATCH_ROWS).collect()


# -- lanes ------------------------------------------------------------------------------

#: Viewer processes sort host first, then devices, then the marks.
_HOST, _DEVICE, _MARKS = 0, 1, 2


def _process_of(rank: int, layer: str, pid: int | None, track: str) -> tuple[int, str, str]:
    """(sort group, process label, thread label) of a lane."""
    if layer == S.DEVICE and " / " in track:
        owner, lane = track.split(" / ", 1)
        return _DEVICE, f"rank {rank} · {owner}", lane
    if layer == S.DEVICE:
        return _DEVICE, f"rank {rank} · device", track
    return _HOST, f"rank {rank} · " + (f"process {pid}" if pid is not None else "host"), track


def _lanes(narrow: pl.DataFrame) -> pl.DataFrame:
    """One row per lane (rank, pid, tid, track): viewer ``vpid``/``vtid`` and labels."""
    lanes = (
        narrow.group_by(list(_LANE_KEYS), maintain_order=True)
        .agg(pl.col(S.LAYER).first(), pl.col(S.START_NS).min().alias("_first"))
        .sort(S.RANK, "_first")
    )
    procs: dict[tuple[int, str], int] = {}
    rows: list[dict[str, Any]] = []
    for k, (rank, pid, _tid, track, layer, _first) in enumerate(lanes.iter_rows()):
        group, process, thread = _process_of(rank, layer, pid, track)
        vpid = procs.setdefault((group, process), len(procs) + 1)
        rows.append({"vpid": vpid, "vtid": k + 1, "process": process, "thread": thread,
                     "group": group})
    info = pl.DataFrame(rows, schema={"vpid": pl.Int64, "vtid": pl.Int64, "process": pl.String,
                                      "thread": pl.String, "group": pl.Int64})
    return pl.concat([lanes.drop("_first"), info], how="horizontal")


def _metadata(lanes: pl.DataFrame) -> Iterator[bytes]:
    seen: set[int] = set()
    for vpid, vtid, process, thread, group in lanes.select(
        "vpid", "vtid", "process", "thread", "group"
    ).iter_rows():
        if vpid not in seen:
            seen.add(vpid)
            yield _meta("process_name", vpid, 0, {"name": process})
            yield _meta("process_sort_index", vpid, 0, {"sort_index": group * 10_000 + vpid})
        yield _meta("thread_name", vpid, vtid, {"name": thread})
        yield _meta("thread_sort_index", vpid, vtid, {"sort_index": vtid})


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> bytes:
    return orjson.dumps({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args})


# -- rows -------------------------------------------------------------------------------

def _rows(df: pl.DataFrame, base: int) -> Iterator[bytes]:
    dumps = orjson.dumps
    carried = [c for c in CARRIED]
    cols = [S.NAME, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS, S.ARGS, "vpid", "vtid", *carried]
    for values in df.select(cols).iter_rows():
        name, cat, kind, start, dur, args, vpid, vtid = values[:8]
        payload = {k: v for k, v in zip(carried, values[8:], strict=True) if v is not None}
        args_text = _splice_args(payload, args)
        ph = _PHASE.get(kind, "i")
        head = b'{"ph":"' + ph.encode() + b'","name":' + dumps(name)
        if cat is not None:
            head += b',"cat":' + dumps(cat)
        head += (f',"pid":{vpid},"tid":{vtid},"ts":{micros(start - base)}').encode()
        if ph == "X":
            head += b',"dur":' + micros(dur).encode()
        elif ph == "i":
            head += b',"s":"t"'
        yield head + b',"args":' + args_text + b"}"


def _splice_args(payload: dict[str, Any], args: str | None) -> bytes:
    """The row's own ``args`` object with ``"neurontrace": payload`` added as its last key.

    A row's ``args`` that is a non-empty JSON object keeps its text and key order, so the
    viewer shows its keys as they were; anything else (null, ``{}``, another JSON value)
    goes inside the payload under ``args``, as text. The payload is a flat object (our
    ``}`` is never followed by ``,``: the Kineto reader's chunker cuts there).
    """
    if args is not None and _spliceable(args):
        return (args[:-1] + ',"' + MARKER + '":').encode() + orjson.dumps(payload) + b"}"
    payload = {**payload, S.ARGS: args}
    return b'{"' + MARKER.encode() + b'":' + orjson.dumps(payload) + b"}"


def _spliceable(args: str) -> bool:
    return args.startswith("{") and args.endswith("}") and not args[1:].lstrip().startswith("}")


# -- arrows and marks ---------------------------------------------------------------------

def _flows(narrow: pl.DataFrame, lanes: pl.DataFrame, base: int) -> Iterator[bytes]:
    """Arrows: framework op -> runtime call; runtime call (same correlation, same op) or
    else the op -> device work."""
    at = narrow.join(lanes.select(*_LANE_KEYS, "vpid", "vtid"), on=list(_LANE_KEYS),
                     how="left", nulls_equal=True).select(
        S.ROW, S.RANK, S.LAYER, S.START_NS, S.FRAMEWORK_ROW, S.CORRELATION, "vpid", "vtid")
    src = at.select(pl.col(S.ROW).alias("_src"), pl.col(S.START_NS).alias("_src_ns"),
                    pl.col("vpid").alias("_src_pid"), pl.col("vtid").alias("_src_tid"))
    linked = at.filter(pl.col(S.FRAMEWORK_ROW).is_not_null() & (pl.col(S.LAYER) != S.FRAMEWORK))
    calls = (
        linked.filter((pl.col(S.LAYER) == S.RUNTIME) & pl.col(S.CORRELATION).is_not_null())
        .group_by(S.RANK, S.CORRELATION, S.FRAMEWORK_ROW)
        .agg(pl.col(S.ROW).min().alias("_call"))
    )
    arrows = (
        linked.join(calls, on=[S.RANK, S.CORRELATION, S.FRAMEWORK_ROW], how="left")
        .with_columns(
            pl.when(pl.col(S.LAYER) == S.DEVICE).then(pl.coalesce("_call", S.FRAMEWORK_ROW))
            .otherwise(pl.col(S.FRAMEWORK_ROW)).alias("_src")
        )
        .join(src, on="_src", how="inner")
        .sort(S.ROW)
    )
    for row, start, vpid, vtid, src_ns, src_pid, src_tid in arrows.select(
        S.ROW, S.START_NS, "vpid", "vtid", "_src_ns", "_src_pid", "_src_tid"
    ).iter_rows():
        common = f'"cat":"{FLOW_CATEGORY}","name":"launch","id":{row}'
        yield (f'{{"ph":"s",{common},"pid":{src_pid},"tid":{src_tid},'
               f'"ts":{micros(src_ns - base)}}}').encode()
        yield (f'{{"ph":"f","bp":"e",{common},"pid":{vpid},"tid":{vtid},'
               f'"ts":{micros(start - base)}}}').encode()


def _marks(gap_rows: pl.DataFrame, copy_rows: pl.DataFrame, lanes: pl.DataFrame,
           base: int) -> Iterator[bytes]:
    """View-only tracks: device idle gaps (named by cause) and copies."""
    vpid = int(lanes.get_column("vpid").max() or 0) + 1  # type: ignore[arg-type]
    vtid = int(lanes.get_column("vtid").max() or 0) + 1  # type: ignore[arg-type]
    threads: dict[str, int] = {}

    def thread(label: str, pid: int) -> Iterator[bytes]:
        if label not in threads:
            threads[label] = vtid + len(threads)
            yield _meta("thread_name", pid, threads[label], {"name": label})

    gap_pid, copy_pid = vpid, vpid + 1
    yield _meta("process_name", gap_pid, 0, {"name": "neurontrace · device idle"})
    yield _meta("process_sort_index", gap_pid, 0, {"sort_index": _MARKS * 10_000})
    yield _meta("process_name", copy_pid, 0, {"name": "neurontrace · copies"})
    yield _meta("process_sort_index", copy_pid, 0, {"sort_index": _MARKS * 10_000 + 1})
    for rank, track, start, dur, cause, before, after in gap_rows.select(
        S.RANK, S.TRACK, S.START_NS, S.DUR_NS, "cause", "before", "after"
    ).iter_rows():
        label = f"rank {rank} · idle on {track}"
        yield from thread(label, gap_pid)
        yield _mark(gap_pid, threads[label], cause.replace("_", " "), start - base, dur,
                    {VIEW_KEY: "gap", "cause": cause, "before": before, "after": after})
    for rank, start, dur, nbytes, direction, op, via in copy_rows.select(
        S.RANK, S.START_NS, S.DUR_NS, S.BYTES, "direction", "op", "via"
    ).iter_rows():
        label = f"rank {rank} · copies"
        yield from thread(label, copy_pid)
        name = f"{direction or 'copy'} {nbytes if nbytes is not None else '?'} B ({op})"
        yield _mark(copy_pid, threads[label], name, start - base, dur,
                    {VIEW_KEY: "copy", "direction": direction, "bytes": nbytes, "op": op,
                     "via": via})


def _mark(pid: int, tid: int, name: str, start: int, dur: int, args: dict[str, Any]) -> bytes:
    return (
        b'{"ph":"X","cat":"' + VIEW_CATEGORY.encode() + b'","name":' + orjson.dumps(name)
        + f',"pid":{pid},"tid":{tid},"ts":{micros(start)},"dur":{micros(max(dur, 0))}'.encode()
        + b',"args":' + orjson.dumps(args) + b"}"
    )
