"""What every reader hands to the pipeline: batches of rows plus what names and links them.

A reader only turns bytes into batches. Spilling them, decoding a file in parallel and
deriving the columns that relate rows are the pipeline's (:mod:`neurontrace.table`): no
module under ``readers/`` imports ``neurontrace.table`` or ``neurontrace.workers``
(``tests/test_layers.py`` checks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias, runtime_checkable

import pyarrow as pa

from neurontrace.diagnostics import Diagnostics

#: Progress callback: (bytes done, bytes total or None).
Progress = Callable[[int, "int | None"], None]

#: Columns a reader fills (besides those in ``schema``, a reader may add ``pid_label``
#: and ``tid_label``: the original text of a non-numeric pid/tid). The assembler fills
#: the rest: row, self_ns, parent, depth, track (if absent), flow_ids, framework_row,
#: link, step, rank.
FLOWS_SCHEMA = pa.schema(
    [
        ("flow_id", pa.string()),  # "<category>:<id>"
        ("phase", pa.string()),  # "s" start, "t" step, "f" finish
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts_ns", pa.int64()),
        ("enclosing", pa.bool_()),  # bp == "e": bind to the enclosing slice
    ]
)


@dataclass(frozen=True)
class Flows:
    """Flow events (:data:`FLOWS_SCHEMA`), an item of :attr:`Events.batches` among the
    batches of rows: the flows of the rows read so far. The pipeline keeps them apart
    from the rows (in memory, or in files when they are too many to hold)."""

    events: pa.RecordBatch


#: What a reader's ``batches`` yields: rows, or the flow events that came with them.
Batch: TypeAlias = "pa.RecordBatch | Flows"


@dataclass
class Events:
    """A reader's output for one input.

    ``batches`` is consumed once, in order; the other fields are complete only after it
    is exhausted (a trace may name its threads after their events). ``start_ns`` values
    in the batches and flows are relative to ``clock["base_time_ns"]`` (0 if absent).
    """

    batches: Iterator[Batch]
    #: Top-level fields of the trace, kept in the Parquet metadata.
    trace: dict[str, Any] = field(default_factory=dict)
    #: How times were placed on one clock.
    clock: dict[str, Any] = field(default_factory=dict)
    #: (pid, tid) -> readable lane name; pid -> process label.
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    rank: int | None = None
    format: str = ""

    @classmethod
    def filled_by(cls, fmt: str, fill: Callable[[Events], Iterator[Batch]]) -> Events:
        """The events of a reader of format ``fmt`` whose batches are ``fill(events)``: a
        generator that sets the other fields of ``events`` once its batches are read."""
        ev = cls(batches=iter(()), format=fmt)
        ev.batches = fill(ev)
        return ev


class Reader(Protocol):
    """One input format."""

    name: str
    description: str

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when ``path`` (its name, or ``head``, its first bytes) is this format."""

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        ...


#: A byte range of a file, ``[start, stop)``; None: the start / the end of its events.
Chunk = tuple[int | None, int | None]


class ChunkUnreadable(Exception):
    """A chunk that does not begin and end on whole events (a cut that fell inside a
    string): the pipeline then reads the file whole."""


@dataclass
class ChunkRead:
    """What a reader makes of one chunk of a file: ``batches`` as in :class:`Events`;
    once they are exhausted, ``summary``: what :meth:`Divisible.join` needs of the
    chunk (it must pickle: the chunk may be read in another process)."""

    batches: Iterator[Batch]
    summary: Any = None


@runtime_checkable
class Divisible(Protocol):
    """A reader whose plain files can be read in chunks, each on its own, in any
    process; the pipeline decodes a large file in parallel through it
    (:mod:`neurontrace.table.chunks`). A chunk's table, chunk after chunk, must be the
    whole read's table."""

    def chunks(self, path: Path, aims: Callable[[int, int], list[int]]) -> list[Chunk]:
        """The chunks to read ``path`` in, or [] to read it whole. ``aims(first, size)``
        says about where to cut the bytes from ``first`` (the first event) to ``size``."""

    def read_chunk(self, path: Path, chunk: Chunk, diag: Diagnostics,
                   progress: Progress | None) -> ChunkRead:
        """Read one chunk; its batches raise :class:`ChunkUnreadable` (or BadInput) when
        it cannot be read on its own."""

    def join(self, path: Path, summaries: list[Any]) -> Events:
        """The trace's fields (``batches`` empty) from the chunks' summaries in file
        order, as a whole read sets them."""


@dataclass(frozen=True)
class Source:
    """One input of a conversion: what to read, as which format, and what to call it.

    A plain file is one source read by its reader. A reader whose inputs are folders
    holding several traces (a Neuron run folder: one per rank) or captures that need an
    external converter (a raw Neuron capture) implements ``expand(path, cache)``, which
    returns the sources instead (``cache`` is a folder next to the output where an
    external converter may write, kept between runs, never inside the input); ``convert``
    consults it before any per-file walk.
    """

    path: Path  # named in messages and in the output's metadata
    format: str  # the reader's name
    read: Callable[[Diagnostics, Progress | None], Events]
    name: str  # output file stem within a dataset folder
    rank: int | None = None  # rank to record when the trace itself names none
    #: The reader, when it can read the file in chunks (decoded in parallel).
    divisible: Divisible | None = None


def rank_from_name(name: str) -> int | None:
    """A rank written into a file name (``rank_3``, ``rank-3``, ``rank3``); a number too
    large for a 64-bit rank is not one."""
    m = re.search(r"rank[_-]?([0-9]+)", name, re.IGNORECASE)
    if m is None or len(m.group(1)) > 19 or int(m.group(1)) >= 1 << 63:
        return None
    return int(m.group(1))
