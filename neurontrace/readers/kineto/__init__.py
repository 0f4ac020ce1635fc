"""PyTorch profiler traces (Kineto Chrome-trace JSON, ``.json`` / ``.json.gz``).

The file is streamed a chunk of events at a time (see :mod:`.jsonstream`) and decoded
with msgspec into small structs whose ``ts``, ``dur`` and ``args`` stay raw text: times
are converted exactly from that text (:mod:`neurontrace.readers.units`) and ``args`` is kept as
JSON text, so nothing the profiler wrote is lost or rounded. The few ``args`` keys that
link layers (``External id``, ``correlation``, ``device``, ``stream``, byte counts) are
read into typed columns from that text.

A large plain file is decoded in spans, in parallel (see :mod:`.spans`).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.base import FLOWS_SCHEMA, Events, Progress, rank_from_name
from neurontrace.readers.jsonstream import ArrayStream, Decoded, NumberText, text_head
from neurontrace.readers.kineto.columns import Metadata, chunk_columns
from neurontrace.readers.kineto.events import (
    Event,
    decode_events,
    lenient,
    record_repairs,
    show_surrogates,
)
from neurontrace.table.spill import FrameSpiller, SpilledFrames

_HEADER_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"',
                b'"distributedInfo"', b'"displayTimeUnit"', b'"baseTimeNanoseconds"')
KEY = b"traceEvents"
_SPACE = b" \t\r\n"


def _sniff(path: Path, head: bytes) -> bool:
    start = head.lstrip()[:1]
    if start == b"{":
        # traceEvents may come after a long header (distributedInfo lists every rank)
        return any(k in head for k in _HEADER_KEYS)
    return start == b"[" and path.name.endswith((".json", ".json.gz")) and b'"ph"' in head


class KinetoReader:
    name = "kineto"
    description = "PyTorch profiler trace (Kineto Chrome-trace JSON, .json or .json.gz)"

    def sniff(self, path: Path, head: bytes) -> bool:
        if _sniff(path, head):
            return True
        # A head that does not say: after a byte-order mark, or all space (before or
        # after the opening brace). Look again at the text from its first token on.
        start = head.lstrip(_SPACE)
        if start.startswith(codecs.BOM_UTF8) or (
                start[:1] in (b"", b"{", b"[") and not start[1:].strip(_SPACE)):
            return _sniff(path, text_head(path))
        return False

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        from neurontrace.readers.kineto import spans

        ev = Events(batches=iter(()), format=self.name)
        ev.batches = self._batches(path, diag, progress, ev)
        plan = spans.plan(path)
        if plan:
            ev.spill = lambda workdir: spans.spill(path, plan, diag, progress, ev, workdir)
        return ev

    def _batches(
        self, path: Path, diag: Diagnostics, progress: Progress | None, ev: Events
    ) -> Iterator[pa.RecordBatch]:
        stream = ArrayStream(path, KEY)
        part = Part(FrameSpiller(ev.workdir, suffix=".flows.arrow"))
        try:
            yield from part.rows(stream, path, diag, progress)
        except BaseException:
            part.flows.discard()
            raise
        finish(ev, path, stream.outer, part.flows.finish(), part.meta)


class Part:
    """What reading the events of one span of a trace (or all of it) collects besides
    its rows: flows and track names."""

    def __init__(self, flows: FrameSpiller) -> None:
        self.flows = flows
        self.meta = Metadata()

    def rows(self, stream: ArrayStream, path: Path, diag: Diagnostics,
             progress: Progress | None) -> Iterator[pa.RecordBatch]:
        total = path.stat().st_size
        for chunk in stream.decoded(decode_events, lenient=True):
            batch, flow = _convert(chunk, path, self.meta, diag)
            if flow is not None:
                events = pl.from_arrow(flow)
                assert isinstance(events, pl.DataFrame)
                self.flows.add(events)
            if progress is not None:
                progress(min(stream.position(), total), total)
            yield batch


def finish(ev: Events, path: Path, trace: dict[str, Any], flows: SpilledFrames,
           meta: Metadata) -> None:
    """Fill in what the whole trace has been read for."""
    base_ns = _integer(trace, "baseTimeNanoseconds", path) or 0
    if base_ns and meta.times is not None:
        low, high = meta.times
        if not (_I64_MIN <= base_ns + low and base_ns + high <= _I64_MAX):
            raise BadInput(
                f"{path}: baseTimeNanoseconds {base_ns} puts event times outside the "
                "64-bit range of nanoseconds"
            )
    held = flows.in_memory()
    if held is None:  # too many to hold: in files (see neurontrace.table.sweep)
        ev.flows, ev.flow_files = None, flows
    else:
        ev.flows = held.to_arrow().cast(FLOWS_SCHEMA) if held.width else \
            FLOWS_SCHEMA.empty_table()
    ev.trace = trace
    ev.clock = {
        "method": "kineto",
        "base_time_ns": base_ns,
        "note": "ts (microseconds, 3 decimals) converted exactly from text"
        + ("; offset by baseTimeNanoseconds (epoch)" if base_ns else ""),
    }
    ev.thread_names = meta.thread_names
    ev.process_names = meta.process_names
    ev.rank = _rank(trace, path)


def _convert(chunk: Decoded[list[Event]], path: Path, meta: Metadata, diag: Diagnostics
             ) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """One decoded chunk as a row batch and its flows (None when it has none)."""
    events = chunk.value
    if chunk.repairs is not None:
        record_repairs(chunk, path, diag)
    if events is None:  # wrong types somewhere: lenient path
        events = lenient(chunk, path, diag)
    if chunk.repairs is not None and chunk.repairs.surrogates:
        show_surrogates(events, chunk.repairs.placeholders)
    return chunk_columns(events, chunk.offset, path, meta, diag)


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _integer(fields: dict[str, Any], key: str, path: Path, where: str = "",
             floats: bool = False) -> int | None:
    """A header field the table needs as a 64-bit integer: None when absent or not a
    number (as if absent); refused when a number that is not an integer in range. With
    ``floats``, a float that holds an integer exactly (under 2**53) is taken too."""
    v = fields.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float, NumberText)):
        return None
    if isinstance(v, int) and _I64_MIN <= v <= _I64_MAX:
        return v
    if floats and isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    what = "out of the 64-bit range" if isinstance(v, (int, NumberText)) else "not an integer"
    raise BadInput(f"{path}: {where}{key} {v} is {what}")


def _rank(trace: dict[str, Any], path: Path) -> int | None:
    info = trace.get("distributedInfo")
    if isinstance(info, dict):
        rank = _integer(info, "rank", path, "distributedInfo.", floats=True)
        if rank is not None:
            return rank
    return rank_from_name(path.name)
