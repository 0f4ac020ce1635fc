"""A reader's batches on disk, with the narrow columns the derivations need in memory.

Wide columns (names, ``args``) are most of a trace's bytes and no derivation reads them,
so the reader's batches go whole to a temporary Arrow IPC file as they arrive and are
streamed back when the output is written; memory holds only the narrow columns (about a
hundred bytes a row). Readers that decode parts of a file in parallel write one spill
file per part, each in its own process.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc

from neurontrace import schema as S

STEP_NAME = r"^ProfilerStep#(\d+)$"

#: Columns kept in memory for the derivations.
NARROW = (
    S.LAYER, S.CATEGORY, S.KIND, S.START_NS, S.DUR_NS, S.PID, S.TID,
    S.PID_LABEL, S.TID_LABEL, S.EXTERNAL_ID, S.CORRELATION,
    # Readers that know these better than the assembler supply them (Neuron Explorer
    # gives tracks and flow ids per row); they stay in memory for the derivations.
    S.TRACK, S.FLOW_IDS,
    # The execution/time link fallbacks need a row's NeuronCore and execution.
    S.DEVICE_COL, S.EXECUTION,
)
CATEGORICAL = (S.LAYER, S.CATEGORY, S.KIND, S.PID_LABEL, S.TID_LABEL, S.TRACK, S.EXECUTION)
#: Narrow columns every reader may leave out, and their types once filled with nulls.
_OPTIONAL = (
    (S.LAYER, pl.Categorical), (S.CATEGORY, pl.Categorical), (S.KIND, pl.Categorical),
    (S.PID_LABEL, pl.Categorical), (S.TID_LABEL, pl.Categorical), (S.PID, pl.Int64),
    (S.TID, pl.Int64), (S.EXTERNAL_ID, pl.Int64), (S.CORRELATION, pl.Int64),
    (S.DEVICE_COL, pl.Int64), (S.EXECUTION, pl.Categorical),
)


def temporary(workdir: Path | None) -> Path:
    """A new, empty spill file in ``workdir`` (None: the system's temporary folder)."""
    fd, name = tempfile.mkstemp(prefix=".neurontrace-", suffix=".spill.arrow", dir=workdir)
    os.close(fd)
    return Path(name)


class Spill:
    """Writes batches to ``path`` (Arrow IPC stream) and keeps their narrow columns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sink = pa.OSFile(str(path), "wb")
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._parts: list[pl.DataFrame] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            self._writer = pa.ipc.new_stream(self._sink, batch.schema)
        self._writer.write_batch(batch)
        part = pl.from_arrow(batch.select([c for c in NARROW if c in batch.schema.names]))
        assert isinstance(part, pl.DataFrame)
        names = pl.Series(batch.column(S.NAME))
        self._parts.append(part.with_columns(
            *(pl.col(c).cast(pl.Categorical) for c in CATEGORICAL if c in part.columns),
            _step_no=names.str.extract(STEP_NAME, 1).cast(pl.Int64),
        ))

    def finish(self) -> pl.DataFrame:
        """Close the file; the narrow columns of every row added, in order."""
        try:
            if self._writer is None:  # no rows at all
                self._writer = pa.ipc.new_stream(self._sink, pa.schema([(S.NAME, pa.string())]))
            self._writer.close()
        finally:
            self._sink.close()
        parts, self._parts = self._parts, []
        return pl.concat(parts, rechunk=False) if parts else \
            pl.DataFrame(schema={S.START_NS: pl.Int64, S.DUR_NS: pl.Int64, "_step_no": pl.Int64})

    def discard(self) -> None:
        self._parts = []
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            self._sink.close()
            self.path.unlink(missing_ok=True)


def spill_all(batches: Iterable[pa.RecordBatch], path: Path) -> pl.DataFrame:
    """Spill every batch to ``path``; their narrow columns. On failure nothing is left."""
    spill = Spill(path)
    try:
        for batch in batches:
            spill.add(batch)
        return spill.finish()
    except BaseException:
        spill.discard()
        raise


def complete(narrow: pl.DataFrame) -> pl.DataFrame:
    """The narrow frame with every column the derivations read (nulls where absent)."""
    for c, t in _OPTIONAL:
        if c not in narrow.columns:
            narrow = narrow.with_columns(pl.lit(None, t).alias(c))
    return narrow
