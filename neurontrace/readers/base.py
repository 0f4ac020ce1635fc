"""What every reader hands to the assembler: raw rows plus what names and links them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

if TYPE_CHECKING:
    from neurontrace.table.spill import SpilledFrames

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


@dataclass
class Events:
    """A reader's output for one input.

    ``batches`` is consumed once, in order; the other fields are complete only after it
    is exhausted (a trace may name its threads after their events). ``start_ns`` values
    in the batches and flows are relative to ``clock["base_time_ns"]`` (0 if absent).
    """

    batches: Iterator[pa.RecordBatch]
    flows: pa.Table | None = None
    #: Top-level fields of the trace, kept in the Parquet metadata.
    trace: dict[str, Any] = field(default_factory=dict)
    #: How times were placed on one clock.
    clock: dict[str, Any] = field(default_factory=dict)
    #: (pid, tid) -> readable lane name; pid -> process label.
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_names: dict[Any, str] = field(default_factory=dict)
    rank: int | None = None
    format: str = ""
    #: Set by a reader that spills its own batches (decoding parts of the file in
    #: parallel processes): called with the folder for temporary files (None: the
    #: system's), it returns the spill files in row order and the rows' narrow columns
    #: (see :mod:`neurontrace.table.spill`); ``batches`` is then not used.
    spill: Callable[[Path | None], tuple[list[Path], SpilledFrames]] | None = None
    #: The folder for temporary files, set by the assembler before ``batches`` is read.
    workdir: Path | None = None
    #: Flow events too many to hold, in files (``flows`` is then None); see
    #: :class:`neurontrace.table.spill.FrameSpiller`.
    flow_files: SpilledFrames | None = None


class Reader(Protocol):
    """One input format."""

    name: str
    description: str

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when ``path`` (its name, or ``head``, its first bytes) is this format."""
        ...

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        ...


@dataclass(frozen=True)
class Source:
    """One input of a conversion: what to read, as which format, and what to call it.

    A plain file is one source read by its reader. A reader whose inputs are folders
    holding several traces (a Neuron run folder: one per rank) or captures that need an
    external converter (a raw Neuron capture) implements :meth:`Expanding.expand`, which
    returns the sources instead; ``convert`` consults it before any per-file walk.
    """

    path: Path  # named in messages and in the output's metadata
    format: str  # the reader's name
    read: Callable[[Diagnostics, Progress | None], Events]
    name: str  # output file stem within a dataset folder
    rank: int | None = None  # rank to record when the trace itself names none


class Expanding(Protocol):
    """A reader that turns one input into several sources (or a converted one)."""

    def expand(self, path: Path, cache: Path) -> list[Source]:
        """The sources ``path`` holds; ``cache`` is a folder next to the output where
        an external converter may write (kept between runs, never inside the input)."""
        ...


def rank_from_name(name: str) -> int | None:
    """A rank written into a file name (``rank_3``, ``rank-3``, ``rank3``); a number too
    large for a 64-bit rank is not one."""
    m = re.search(r"rank[_-]?([0-9]+)", name, re.IGNORECASE)
    if m is None or len(m.group(1)) > 19 or int(m.group(1)) >= 1 << 63:
        return None
    return int(m.group(1))
