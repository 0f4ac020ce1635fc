"""The pipeline: from a source's bytes to the event table, one step after the other.

    read (whole, or in chunks in parallel: neurontrace.table.chunks)
      -> spill (rows to Arrow IPC files; narrow columns and flow events kept apart:
                neurontrace.table.spill)
      -> derive (neurontrace.table.sweep)
      -> Assembled.batches (the rows in schema order, for the writer)

The reader only turns bytes into batches (:mod:`neurontrace.readers.base`); every
temporary file goes to the folder the caller names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers.base import Events, Progress, Source
from neurontrace.table import chunks
from neurontrace.table.chunks import Spilled
from neurontrace.table.derived import Ranges
from neurontrace.table.spill import read_batches, spill_all, temporary
from neurontrace.table.sweep import derive

#: Columns a reader may give for some rows, which the derivations complete.
_COMPLETED = (S.TRACK, S.FLOW_IDS)


class Assembled:
    """A trace's rows, ready to stream out in schema order (see :meth:`batches`)."""

    def __init__(self, derived: Ranges, spills: list[Path], ev: Events, rank: int
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
        ranges = self.derived.frames()
        ahead = next(ranges)  # the derived rows from ``offset`` on, to the end of a range
        for raw in chain.from_iterable(map(read_batches, self.spills)):
            n = raw.num_rows
            while ahead.height < n:
                ahead = pl.concat([ahead, next(ranges)])
            part, ahead = ahead.head(n), ahead.slice(n)
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

    def table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=S.SCHEMA)

    def close(self) -> None:
        for path in self.spills:
            path.unlink(missing_ok=True)
        self.derived.close()


def read(src: Source, diag: Diagnostics, progress: Progress | None,
         workdir: Path | None) -> Spilled:
    """Read ``src`` and spill it: in chunks in parallel when its reader can and the file
    is large (:mod:`neurontrace.table.chunks`), else whole; the same table either way."""
    if src.divisible is not None:
        plan = chunks.plan(src.divisible, src.path)
        if plan:
            done = chunks.read(src.divisible, src.path, plan, diag, progress, workdir)
            if done is not None:
                return done
    ev = src.read(diag, progress)
    spills = [temporary(workdir)]
    return Spilled(ev, spills, *spill_all(ev.batches, spills[0]))


def assemble(src: Source, diag: Diagnostics, progress: Progress | None = None,
             rank: int | None = None, workdir: Path | None = None,
             after_read: Callable[[], object] | None = None) -> Assembled:
    """Read ``src``, spill it and derive the columns that relate rows.

    The batches go to temporary Arrow IPC files in ``workdir`` as they arrive (see
    :mod:`neurontrace.table.spill`); only the narrow columns the derivations need are
    kept, and :func:`neurontrace.table.sweep.derive` derives the rest from them.
    ``after_read`` is called once the input has been read.
    """
    done = read(src, diag, progress, workdir)
    ev = done.events
    if ev.rank is None:
        ev.rank = src.rank
    try:
        if after_read is not None:
            after_read()
        derived = derive(done.narrow, ev, diag, workdir, done.flows)
    except BaseException:
        done.discard()
        raise
    done.narrow.discard()
    done.flows.discard()
    r = rank if rank is not None else (ev.rank if ev.rank is not None else 0)
    return Assembled(derived, done.spills, ev, r)
