"""From a reader's raw rows to the event table.

The reader's batches go to a spill file (:mod:`neurontrace.table.spill`), their narrow columns
to the derivations (:mod:`neurontrace.table.sweep`), and :class:`Assembled` streams the rows
out in schema order: the reader's columns from the spill, the derived ones beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers.base import Events
from neurontrace.table.spill import read_batches, spill_all, temporary
from neurontrace.table.sweep import derive

#: Columns a reader may give for some rows, which the derivations complete.
_COMPLETED = (S.TRACK, S.FLOW_IDS)


class Derived(Protocol):
    """The derived columns of every row (:class:`neurontrace.table.sweep.Ranges`)."""

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
    :mod:`neurontrace.table.spill`); only the narrow columns the derivations need are kept,
    and :func:`neurontrace.table.sweep.derive` derives the rest from them. ``read`` is called
    once the input has been read.
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
        derived = derive(narrow, ev, diag, workdir, ev.flow_files)
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
