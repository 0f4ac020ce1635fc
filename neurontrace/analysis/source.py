"""Any input as a LazyFrame of events: our Parquet, a raw trace, or a run folder."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from neurontrace import store
from neurontrace.convert import inputs_of, load
from neurontrace.errors import BadInput, UnknownFormat
from neurontrace.readers import detect


def events(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """The event table of ``path`` as a :class:`polars.LazyFrame`.

    - a Parquet file or dataset folder written by ``convert``: scanned lazily (only the
      columns an analysis asks for are read);
    - a folder a reader recognises as a whole (a Neuron run folder): read in memory;
    - any other folder: every trace in it read in memory, stacked with ``row`` kept
      unique;
    - a raw trace file: read in memory.
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such file or folder")
    if p.is_dir():
        try:
            detect(p)
        except UnknownFormat:
            if store.is_ours(p):
                return store.scan(p)
            files, _ = inputs_of([p], None)
            return _loaded(files)
        return _loaded([p])
    if store.is_ours(p):
        return store.scan(p)
    return _loaded([p])


def _loaded(paths: list[Path]) -> pl.LazyFrame:
    parts = []
    offset = 0
    for p in paths:
        frame = pl.from_arrow(load(p))
        assert isinstance(frame, pl.DataFrame)
        parts.append(store.offset_rows(frame.lazy(), offset))
        offset += frame.height
    if not parts:
        raise BadInput(f"{', '.join(map(str, paths))}: no trace found")
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
