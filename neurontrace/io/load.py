"""Any input as a LazyFrame of events: our Parquet, a raw trace, or a run folder."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from neurontrace.convert import load_all
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, UnknownFormat, shown
from neurontrace.io import store
from neurontrace.readers import detect
from neurontrace.readers.base import Progress


def events(path: str | os.PathLike[str], diag: Diagnostics | None = None,
           progress: Progress | None = None) -> pl.LazyFrame:
    """The event table of ``path`` as a :class:`polars.LazyFrame`.

    - a Parquet file or dataset folder written by ``convert``: scanned lazily (only the
      columns an analysis asks for are read);
    - a folder a reader recognises as a whole (a Neuron run folder): read in memory;
    - any other folder: every trace in it read in memory, stacked with ``row`` kept
      unique;
    - a raw trace file: read in memory.

    ``diag`` collects the readers' warnings (repairs) when given; ``progress`` is told
    how far reading a raw input has come.
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{shown(p)}: no such file or folder")
    if store.is_ours(p) and not (p.is_dir() and _claimed(p)):
        return store.scan(p)
    parts = []
    offset = 0
    for table in load_all(p, diag=diag, progress=progress):
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        parts.append(store.offset_rows(frame.lazy(), offset))
        offset += frame.height
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")


def _claimed(folder: Path) -> bool:
    """A folder a reader reads as a whole (Explorer output, run folder), Parquet or not."""
    try:
        detect(folder)
    except UnknownFormat:
        return False
    return True
