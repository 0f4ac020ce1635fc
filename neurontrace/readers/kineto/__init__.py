"""PyTorch profiler traces (Kineto Chrome-trace JSON, ``.json`` / ``.json.gz``).

The file is streamed a chunk of events at a time (see :mod:`.jsonstream`) and decoded
with msgspec into small structs whose ``ts``, ``dur`` and ``args`` stay raw text: times
are converted exactly from that text (:mod:`neurontrace.readers.units`) and ``args`` is kept as
JSON text, so nothing the profiler wrote is lost or rounded. The few ``args`` keys that
link layers (``External id``, ``correlation``, ``device``, ``stream``, byte counts) are
read into typed columns from that text.

A plain file can also be read in chunks (byte ranges of its event array), each on its
own: the pipeline decodes a large one in parallel (:mod:`neurontrace.table.chunks`).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.base import (
    Batch,
    Chunk,
    ChunkRead,
    ChunkUnreadable,
    Events,
    Flows,
    Progress,
    rank_from_name,
)
from neurontrace.readers.jsonlex import Misaligned, cuts
from neurontrace.readers.jsonopen import WS, text_head
from neurontrace.readers.jsonouter import NumberText, outer_fields
from neurontrace.readers.jsonstream import ArrayStream, array_start
from neurontrace.readers.kineto.columns import Metadata, chunk_columns
from neurontrace.readers.kineto.events import (
    EVENTS,
    lenient,
    record_repairs,
    show_surrogates,
)
from neurontrace.readers.units import I64_MAX, I64_MIN

_HEADER_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"',
                b'"distributedInfo"', b'"displayTimeUnit"', b'"baseTimeNanoseconds"')
KEY = b"traceEvents"


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
        start = head.lstrip(WS)
        if start.startswith(codecs.BOM_UTF8) or (
                start[:1] in (b"", b"{", b"[") and not start[1:].strip(WS)):
            return _sniff(path, text_head(path))
        return False

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        def batches(ev: Events) -> Iterator[Batch]:
            stream = ArrayStream(path, KEY)
            meta = Metadata()
            yield from _rows(stream, path, meta, diag, progress)
            finish(ev, path, stream.outer, meta)

        return Events.filled_by(self.name, batches)

    # -- chunks (see neurontrace.readers.base.Divisible) -----------------------------------
    def chunks(self, path: Path, aims: Callable[[int, int], list[int]]) -> list[Chunk]:
        """Chunks of the event array that begin where an element follows ``},`` (a cut
        that falls inside a string is found out when its chunk is read)."""
        try:
            first = array_start(path, KEY)
        except BadInput:
            return []  # the whole read says what is wrong
        found = cuts(path, aims(first, path.stat().st_size))
        return list(zip([None, *found], [*found, None], strict=True)) if found else []

    def read_chunk(self, path: Path, chunk: Chunk, diag: Diagnostics,
                   progress: Progress | None) -> ChunkRead:
        stream = ArrayStream(path, KEY, start=chunk[0], stop=chunk[1])
        meta = Metadata()
        out = ChunkRead(iter(()))

        def batches() -> Iterator[Batch]:
            try:
                yield from _rows(stream, path, meta, diag, progress)
            except Misaligned as e:
                raise ChunkUnreadable(str(e)) from None
            # Besides its rows: track names and times, the text before the array (first
            # chunk) and after it (last chunk, with its offset).
            out.summary = (meta, stream.head, stream.tail)

        out.batches = batches()
        return out

    def join(self, path: Path, summaries: list[Any]) -> Events:
        meta = Metadata()
        for part, _, _ in summaries:
            meta.merge(part)
        head, tail = summaries[0][1], summaries[-1][2]
        assert tail is not None  # the last chunk reads to the array's end
        ev = Events(batches=iter(()), format=self.name)
        finish(ev, path, outer_fields(path, KEY, head, *tail), meta)
        return ev


def _rows(stream: ArrayStream, path: Path, meta: Metadata, diag: Diagnostics,
          progress: Progress | None) -> Iterator[Batch]:
    """The rows of ``stream``'s events a batch at a time, each after its flow events."""
    total = path.stat().st_size
    for chunk in stream.decoded(EVENTS.decode, lenient=True):
        events = chunk.value
        if chunk.repairs is not None:
            record_repairs(chunk, path, diag)
        if events is None:  # wrong types somewhere: lenient path
            events = lenient(chunk, path, diag)
        if chunk.repairs is not None and chunk.repairs.surrogates:
            show_surrogates(events, chunk.repairs.placeholders)
        batch, flow = chunk_columns(events, chunk.offset, path, meta, diag)
        if flow is not None:
            yield Flows(flow)
        if progress is not None:
            progress(min(stream.position(), total), total)
        yield batch


def finish(ev: Events, path: Path, trace: dict[str, Any], meta: Metadata) -> None:
    """Fill in what the whole trace has been read for."""
    base_ns = _integer(trace, "baseTimeNanoseconds", path) or 0
    if base_ns and meta.times is not None:
        low, high = meta.times
        if not (I64_MIN <= base_ns + low and base_ns + high <= I64_MAX):
            raise BadInput(
                f"{path}: baseTimeNanoseconds {base_ns} puts event times outside the "
                "64-bit range of nanoseconds"
            )
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


def _integer(fields: dict[str, Any], key: str, path: Path, where: str = "",
             floats: bool = False) -> int | None:
    """A header field the table needs as a 64-bit integer: None when absent or not a
    number (as if absent); refused when a number that is not an integer in range. With
    ``floats``, a float that holds an integer exactly (under 2**53) is taken too."""
    v = fields.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float, NumberText)):
        return None
    if isinstance(v, int) and I64_MIN <= v <= I64_MAX:
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
