"""A dataset folder's files number their rows from 0; scanned together, rows stay unique."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import neurontrace
from neurontrace import schema as S
from neurontrace.io import store

from synthetic import dev, op, table


def write(lf: pl.LazyFrame, path: Path) -> None:
    store.write_table(lf.collect().to_arrow(), path, store.metadata())


def test_rows_and_the_columns_pointing_at_them_are_offset_per_file(tmp_path: Path) -> None:
    one = table(op("aten::mul", 0, 10), dev("k", 20, 5, framework_row=0))
    two = table(op("aten::add", 0, 10, rank=1), op("aten::x", 1, 2, rank=1),
                dev("k", 20, 5, framework_row=0, rank=1))
    write(one, tmp_path / "rank=0" / "a.parquet")
    write(two, tmp_path / "rank=1" / "b.parquet")
    for frame in (neurontrace.scan(tmp_path).collect(),
                  pl.from_arrow(neurontrace.read(tmp_path))):
        assert isinstance(frame, pl.DataFrame)
        assert frame.get_column(S.ROW).to_list() == [0, 1, 2, 3, 4]
        assert frame.get_column(S.FRAMEWORK_ROW).to_list() == [None, 0, None, None, 2]
        assert frame.get_column(S.PARENT).to_list() == [None, None, None, 2, None]
