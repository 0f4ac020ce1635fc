"""A reader's batches on disk, with the narrow columns the derivations need.

Wide columns (names, ``args``) are most of a trace's bytes and no derivation reads them,
so the reader's batches go whole to a temporary Arrow IPC file as they arrive and are
streamed back when the output is written; memory holds only the narrow columns (about a
hundred bytes a row), and for a trace of more than :func:`memory_rows` rows not even
those: they go to files too, which :mod:`neurontrace.table.sweep` reads a bucket at a time.
A file decoded in chunks in parallel (:mod:`neurontrace.table.chunks`) has one spill file
per chunk, each written by the process that reads it. The sweep keeps its own frames
between passes by key (:class:`Parts`: a bucket, a row range), each key's frames a
:class:`SpilledFrames` too.

The spill is bounded (:class:`Budget`): one spill (a trace read serially, or one chunk of
it: its rows, narrow columns and flow events) may write at most :data:`SPILL_LIMIT`
bytes if that variable is set, else half the space that was free where it is written
when it began, so that a small compressed input that inflates without end (a gzip bomb
of events) stops with one line instead of filling the disk.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from neurontrace import schema as S
from neurontrace.errors import BadInput
from neurontrace.readers.base import Batch, Flows

STEP_NAME = r"^ProfilerStep#(\d+)$"

#: Columns kept in memory for the derivations.
NARROW = (
    S.LAYER, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS, S.PID, S.TID,
    S.PID_LABEL, S.TID_LABEL, S.EXTERNAL_ID, S.CORRELATION,
    # Readers that know these better than the assembler supply them (Neuron Explorer
    # gives tracks and flow ids per row); they stay in memory for the derivations.
    S.TRACK, S.FLOW_IDS,
    # The execution/time link fallbacks need a row's NeuronCore and execution; flow links
    # stay within a model (only where a reader gives model_id: Neuron).
    S.DEVICE_COL, S.EXECUTION, S.MODEL_ID,
    # What a row is: device rows that are not work (profiler ranges) need no launch.
    S.ROLE,
)
CATEGORICAL = (S.LAYER, S.CATEGORY, S.KIND, S.PID_LABEL, S.TID_LABEL, S.TRACK, S.EXECUTION,
               S.ROLE)
#: Narrow columns every reader may leave out, and their types once filled with nulls.
_OPTIONAL = {c: pl.Categorical if c in CATEGORICAL else pl.Int64 for c in NARROW
             if c not in (S.START_NS, S.DUR_NS, S.TRACK, S.FLOW_IDS, S.MODEL_ID)}


#: Environment variable: bytes one spill may write (suffixes K, M, G, T: powers of 1024).
SPILL_LIMIT = "NEURONTRACE_SPILL_LIMIT"
#: Without it: this share of the space free where the spill is written, when it begins.
FREE_SHARE = 0.5
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class SpillLimit(BadInput):
    """A spill passed its :class:`Budget` (the message does not name the input: the
    caller, who knows it, puts it in front)."""


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged process may still write in ``folder``'s file system."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def spill_limit(folder: Path) -> tuple[int, str]:
    """The bytes one spill in ``folder`` may write, and where that figure comes from."""
    given = os.environ.get(SPILL_LIMIT, "").strip()
    if given:
        text = given.upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number = text[: len(text) - len(unit)].strip()
        if not number.isdecimal():
            raise BadInput(f"{SPILL_LIMIT}={given}: not a size in bytes (e.g. 500G)")
        return int(number) * _UNITS[unit], f"{SPILL_LIMIT}={given}"
    free = free_bytes(folder)
    return int(free * FREE_SHARE), f"half the {_size(free)} free in {folder}"


def _size(n: int) -> str:
    """``n`` bytes, readably (``512 B``, ``3.5 GiB``)."""
    power = min((n.bit_length() - 1) // 10, 4) if n >= 1024 else 0  # of 1024
    return f"{n} B" if power == 0 else f"{n / (1 << 10 * power):.1f} {'KMGT'[power - 1]}iB"


class Budget:
    """Bytes the temporary files of one spill may still take (see the module doc)."""

    def __init__(self, folder: Path) -> None:
        self.limit, self.why = spill_limit(folder)
        self.used = 0

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise SpillLimit(
                f"its events take more than {_size(self.limit)} of temporary files "
                f"({self.why}); stopped before filling the disk (set {SPILL_LIMIT}, in "
                "bytes or with K/M/G/T, to allow more)")


def temporary(workdir: Path | None, suffix: str = ".spill.arrow") -> Path:
    """A new, empty spill file in ``workdir`` (None: the system's temporary folder)."""
    fd, name = tempfile.mkstemp(prefix=".neurontrace-", suffix=suffix, dir=workdir)
    os.close(fd)
    return Path(name)


#: Rows whose narrow columns a conversion holds in memory; past that they go to disk
#: too and the derivations sweep the trace in buckets (see :mod:`neurontrace.table.sweep`).
MEMORY_ROWS = "NEURONTRACE_MEMORY_ROWS"
DEFAULT_MEMORY_ROWS = 1_000_000


def memory_rows() -> int:
    """``$NEURONTRACE_MEMORY_ROWS``, else :data:`DEFAULT_MEMORY_ROWS`."""
    return rows_setting(MEMORY_ROWS, DEFAULT_MEMORY_ROWS)


def rows_setting(name: str, default: int) -> int:
    """The environment variable ``name`` when it is a count of rows, else ``default``."""
    given = os.environ.get(name, "").strip()
    return int(given) if given.isdecimal() and int(given) > 0 else default


@dataclass
class SpilledFrames:
    """Frames in order (a trace's narrow columns, or its flow events), collected by
    :meth:`add`: held in memory up to ``limit`` rows (None: :func:`memory_rows`), then all
    of them in Arrow IPC files in ``folder`` (None: the system's temporary folder), which
    take from ``budget`` (:func:`spill_all` gives the one of its read)."""

    pieces: list[pl.DataFrame | Path] = field(default_factory=list)
    rows: int = 0
    folder: Path | None = None
    limit: int | None = None
    suffix: str = ".narrow.arrow"
    budget: Budget | None = None
    _held: list[pl.DataFrame] = field(default_factory=list, init=False)
    _out: Writer | None = field(default=None, init=False)

    def add(self, part: pl.DataFrame) -> None:
        self.rows += part.height
        limit = memory_rows() if self.limit is None else self.limit
        if self._out is None and self.rows <= limit:
            self._held.append(part)
            return
        for held in self._held:
            self._write(held)
        self._held = []
        self._write(part)

    def _write(self, part: pl.DataFrame) -> None:
        table = part.to_arrow()
        if self._out is not None and self._out.schema != table.schema:
            self._close()
        if self._out is None:
            path = temporary(self.folder, self.suffix)
            self.pieces.append(path)
            self._out = Writer(path, table.schema, self.budget)
        self._out.write(table)

    def _close(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.close()

    def finish(self) -> SpilledFrames:
        """Close the files; every frame added, in order."""
        self._close()
        if self._held:
            self.pieces.append(pl.concat(self._held, rechunk=False))
            self._held = []
        return self

    def extend(self, other: SpilledFrames) -> None:
        self.pieces.extend(other.pieces)
        self.rows += other.rows

    def frames(self) -> Iterator[pl.DataFrame]:
        """The rows a batch at a time, in order."""
        for p in self.pieces:
            yield from [p] if isinstance(p, pl.DataFrame) else map(frame, read_batches(p))

    def discard(self) -> None:
        self._held = []
        try:
            self._close()
        finally:
            for p in self.pieces:
                if isinstance(p, Path):
                    p.unlink(missing_ok=True)
            self.pieces = []


class Writer:
    """An Arrow IPC stream file being written (created or emptied), the bytes of each
    table or batch charged to ``budget`` when one is given."""

    def __init__(self, path: Path, schema: pa.Schema, budget: Budget | None = None) -> None:
        self.schema = schema
        self.budget = budget
        self._sink = pa.OSFile(str(path), "wb")
        try:
            self._writer = pa.ipc.new_stream(self._sink, schema)
        except BaseException:
            self._sink.close()
            raise

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        before = self._sink.tell()
        self._writer.write(data)
        if self.budget is not None:
            self.budget.charge(self._sink.tell() - before)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()


def frame(data: pa.Table | pa.RecordBatch) -> pl.DataFrame:
    """``data`` as a frame that keeps its batches as chunks: ``pl.DataFrame(table)``
    copies every column into one while the table is alive (2 GB CUDA trace: 1,150 MiB,
    not 680)."""
    out = pl.from_arrow(data)
    assert isinstance(out, pl.DataFrame)
    return out


class Parts:
    """Frames by key (a bucket, a row range): each key's :class:`SpilledFrames`, held in
    memory or (``folder`` given) each frame in an Arrow IPC stream file of its own there
    (closed once written: nothing is left open)."""

    def __init__(self, folder: Path | None, stem: str) -> None:
        self.folder = folder
        self.suffix = f".{stem}.arrow"
        self._keys: dict[int, SpilledFrames] = {}

    def write(self, key: int, frame: pl.DataFrame) -> None:
        held = self._keys.setdefault(key, SpilledFrames(
            folder=self.folder, limit=0 if self.folder else sys.maxsize, suffix=self.suffix))
        try:
            held.add(frame)
        finally:
            held.finish()

    def read(self, key: int) -> pl.DataFrame | None:
        return self._whole(key) if key in self._keys else None

    def _whole(self, key: int) -> pl.DataFrame:
        frames = [p if isinstance(p, pl.DataFrame) else _read_all(p)
                  for p in self._keys[key].pieces]
        return frames[0] if len(frames) == 1 else pl.concat(frames)

    def remove(self, key: int) -> None:
        if key in self._keys:
            self._keys.pop(key).discard()

    def each(self) -> Iterator[pl.DataFrame]:
        """The frames of each key, in key order."""
        for k in sorted(self._keys):
            yield self._whole(k)

    def spread(self, frame: pl.DataFrame, keys: np.ndarray | None) -> None:
        """Append each row of ``frame`` to the frames of its key in ``keys`` (None: all
        of them to key 0, even none)."""
        if keys is None:
            self.write(0, frame)
            return
        for (k,), part in frame.with_columns(_k=keys).partition_by("_k", as_dict=True).items():
            self.write(int(k), part.drop("_k"))

    def map(self, into: Parts, how: Callable[[int, pl.DataFrame], pl.DataFrame]) -> None:
        """Write ``how(k, frame)`` to ``into`` for the frame of each key ``k``, which is
        then removed from these."""
        for k in sorted(self._keys):
            into.write(k, how(k, self._whole(k)))
            self.remove(k)


def _read_all(path: Path) -> pl.DataFrame:
    with pa.OSFile(str(path), "rb") as f:
        return frame(pa.ipc.open_stream(f).read_all())


def read_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The batches of an Arrow IPC stream file, mapped rather than read.

    A mapping reads the file's pages where they are, in the page cache (reading would
    copy every batch into new memory, which the system must zero first: see
    ``bench/README.md``). They would stay resident while mapped, so the pages before the
    batch just handed out are dropped (``MADV_DONTNEED``, where there is one: a file's
    pages are read again from the cache if touched again, so this never changes what a
    batch holds, only what stays resident).
    """
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise pa.ArrowInvalid(f"{path}: empty Arrow IPC stream")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    source = pa.BufferReader(pa.py_buffer(mapped))
    drop = getattr(mapped, "madvise", None) if hasattr(mmap, "MADV_DONTNEED") else None
    start = 0
    for batch in pa.ipc.open_stream(source):
        if drop is not None and start >= mmap.PAGESIZE:
            drop(mmap.MADV_DONTNEED, 0, start - start % mmap.PAGESIZE)
        yield batch
        start = source.tell()


def spill_all(batches: Iterable[Batch], path: Path, limit: int | None = None
              ) -> tuple[SpilledFrames, SpilledFrames]:
    """Spill every batch of rows to ``path`` (Arrow IPC stream); their narrow columns,
    with each row's ``ProfilerStep`` number (``_step_no``), and the reader's flow events
    (:class:`~neurontrace.readers.base.Flows`), each in memory up to ``limit`` rows, then
    in files beside ``path`` (:class:`SpilledFrames`). The files of one call share a
    :class:`Budget`; on failure nothing is left of them."""
    budget = Budget(path.parent)
    narrow = SpilledFrames(folder=path.parent, limit=limit, budget=budget)
    flows = SpilledFrames(folder=path.parent, limit=limit, suffix=".flows.arrow",
                          budget=budget)
    out: Writer | None = None  # opened with the first batch's schema
    try:
        for batch in batches:
            if isinstance(batch, Flows):
                flows.add(frame(batch.events))
                continue
            if out is None:
                out = Writer(path, batch.schema, budget)
            out.write(batch)
            part = frame(batch.select([c for c in NARROW if c in batch.schema.names]))
            names = pl.Series(batch.column(S.NAME))
            narrow.add(part.with_columns(
                *(pl.col(c).cast(pl.Categorical) for c in CATEGORICAL if c in part.columns),
                _step_no=names.str.extract(STEP_NAME, 1).cast(pl.Int64),
            ))
        if out is None:  # no rows at all
            out = Writer(path, pa.schema([(S.NAME, pa.string())]))
        done, out = out, None  # closed: not again if what follows fails
        done.close()
        return narrow.finish(), flows.finish()
    except BaseException:
        with contextlib.ExitStack() as undo:  # last in, first run: each even if one fails
            undo.callback(flows.discard)
            undo.callback(narrow.discard)
            undo.callback(path.unlink, missing_ok=True)
            if out is not None:
                undo.callback(out.close)
        raise


def complete(narrow: pl.DataFrame) -> pl.DataFrame:
    """The narrow frame with every column the derivations read (nulls where absent)."""
    return narrow.with_columns(pl.lit(None, t).alias(c) for c, t in _OPTIONAL.items()
                               if c not in narrow.columns)
