"""Our own Parquet files: written atomically, read back strictly."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.ahead import ahead
from neurontrace.errors import BadInput, SchemaMismatch

ROW_GROUP = 256 * 1024
#: ... or fewer, where rows are wide: the writer holds a row group's pages until it ends.
GROUP_BYTES = 64 << 20


def metadata(**fields: Any) -> dict[bytes, bytes]:
    """Key-value metadata for a file of ours (values JSON-encoded)."""
    from neurontrace import __version__

    meta = {
        S.META_SCHEMA_VERSION: S.SCHEMA_VERSION.encode(),
        S.META_PRODUCER: f"neurontrace {__version__}".encode(),
    }
    for key, value in fields.items():
        meta[f"neurontrace.{key}".encode()] = json.dumps(value, default=str).encode()
    return meta


def write_batches(batches: Iterable[pa.RecordBatch], dst: Path,
                  meta: dict[bytes, bytes]) -> None:
    """Write event batches to ``dst`` through a temporary file renamed into place."""
    schema = S.SCHEMA.with_metadata(meta)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        with pq.ParquetWriter(
            tmp,
            schema,
            compression="zstd",
            use_dictionary=[S.LAYER, S.CATEGORY, S.NAME, S.KIND, S.TRACK, S.LINK],
            column_encoding={S.ROW: "DELTA_BINARY_PACKED", S.START_NS: "DELTA_BINARY_PACKED"},
        ) as w:
            for group in _row_groups(ahead(batches), schema):
                w.write_table(group, row_group_size=ROW_GROUP)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _row_groups(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.Table]:
    """Small batches gathered into tables of ``ROW_GROUP`` rows or ``GROUP_BYTES`` bytes
    (the last may be short)."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for b in batches:
        pending.append(b)
        rows += b.num_rows
        size += b.nbytes
        if rows >= ROW_GROUP or size >= GROUP_BYTES:
            yield pa.Table.from_batches(pending, schema=schema)
            pending, rows, size = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending, schema=schema)


def write_table(table: pa.Table, dst: Path, meta: dict[bytes, bytes]) -> None:
    write_batches(table.cast(S.SCHEMA).to_batches(), dst, meta)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.parquet") if not p.name.startswith("."))
        if not files:
            raise BadInput(f"{path}: folder holds no .parquet files")
        return files
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    return [path]


def check(path: Path) -> dict[bytes, bytes]:
    """Refuse a file that is not ours or has another schema version."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError) as e:
        raise BadInput(f"{path}: not a Parquet file ({e})") from None
    version = meta.get(S.META_SCHEMA_VERSION)
    if version is None:
        raise BadInput(f"{path}: not written by neurontrace (no schema version in metadata)")
    if version.decode() != S.SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{path}: written with neurontrace schema version {version.decode()}, this "
            f"neurontrace reads version {S.SCHEMA_VERSION}; convert the trace again"
        )
    return meta


def is_ours(path: Path) -> bool:
    if path.is_dir():
        return any(path.rglob("*.parquet"))
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def read(path: str | os.PathLike[str]) -> pa.Table:
    """The event table of a file (or dataset folder) that ``convert`` wrote.

    The files of a dataset folder are numbered on from one another (see :func:`scan`).
    """
    files = _files(Path(path))
    for f in files:
        check(f)
    tables = [pq.read_table(f, schema=S.SCHEMA) for f in files]
    if len(tables) == 1:
        return tables[0]
    offset = 0
    for i, t in enumerate(tables):
        if offset:
            for c in S.ROW_REFS:
                k = t.schema.get_field_index(c)
                t = t.set_column(k, S.SCHEMA.field(c), pc.add(t.column(c), offset))
            tables[i] = t
        offset += t.num_rows
    return pa.concat_tables(tables)


def scan(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A lazy Polars scan of a file (or dataset folder) that ``convert`` wrote.

    Each file numbers its rows from 0; in a dataset folder the rows of the second file
    and on are offset (with the ``parent`` and ``framework_row`` that point at them) so
    that ``row`` stays unique in the whole frame.
    """
    files = _files(Path(path))
    for f in files:
        check(f)
    if len(files) == 1:
        return pl.scan_parquet(str(files[0]), hive_partitioning=False)
    parts = []
    offset = 0
    for f in files:
        parts.append(offset_rows(pl.scan_parquet(str(f), hive_partitioning=False), offset))
        offset += pq.ParquetFile(f).metadata.num_rows
    return pl.concat(parts, how="vertical")


def offset_rows(lf: pl.LazyFrame, offset: int) -> pl.LazyFrame:
    """``lf`` with ``row`` and the columns that refer to rows moved on by ``offset``."""
    if not offset:
        return lf
    return lf.with_columns(pl.col(c) + offset for c in S.ROW_REFS)


def file_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``neurontrace.*`` metadata of one file, JSON-decoded."""
    meta = check(Path(path))
    out: dict[str, Any] = {}
    for k, v in meta.items():
        key = k.decode()
        if key.startswith("neurontrace."):
            try:
                out[key.removeprefix("neurontrace.")] = json.loads(v)
            except ValueError:
                out[key.removeprefix("neurontrace.")] = v.decode()
    return out
