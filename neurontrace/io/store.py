"""Our own Parquet files: written atomically, read back strictly."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.errors import BadInput, SchemaMismatch, is_panic, one_line, panic_message, shown
from neurontrace.io import atomic
from neurontrace.io.ahead import ahead

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
        meta[S.META_PREFIX + key.encode()] = json.dumps(value, default=str).encode()
    return meta


def write_batches(batches: Iterable[pa.RecordBatch], dst: Path,
                  meta: dict[bytes, bytes], tmp_dir: Path | None = None) -> None:
    """Write event batches to ``dst`` through a temporary file renamed into place
    (:func:`neurontrace.io.atomic.writing`: made in ``tmp_dir``, a run's temporary folder,
    when given; the mode any new file gets; nothing left on failure)."""
    schema = S.SCHEMA.with_metadata(meta)
    with atomic.writing(dst, tmp_dir) as tmp, pq.ParquetWriter(
        tmp,
        schema,
        compression="zstd",
        use_dictionary=[S.LAYER, S.CATEGORY, S.NAME, S.KIND, S.TRACK, S.LINK],
        column_encoding={S.ROW: "DELTA_BINARY_PACKED", S.START_NS: "DELTA_BINARY_PACKED"},
    ) as w:
        # the next batches are built in a thread while Arrow encodes these (GIL released)
        for group in _row_groups(ahead(batches), schema):
            w.write_table(group, row_group_size=ROW_GROUP)


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


#: The files of ours :func:`scan` opened in this process (the latest, at most
#: ``SCANNED_KEPT``), each with the number of the scan that opened it last: a scan is
#: lazy, so a corrupt page shows only when an analysis collects the frame; the command
#: line then asks :func:`unreadable` which of the files its command scanned it was.
_scanned: dict[Path, int] = {}
_scans = [0]
SCANNED_KEPT = 4096


def _files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.parquet`` regular files under a folder, in order
    (those under a hidden name left out: a temporary file or folder is not a part)."""
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*.parquet")
            if not any(s.startswith(".") for s in p.relative_to(path).parts) and p.is_file()
        )
        if not files:
            raise BadInput(f"{shown(path)}: folder holds no .parquet files")
        return files
    if not path.exists():
        raise BadInput(f"{shown(path)}: no such file or folder")
    if not path.is_file():
        raise BadInput(f"{shown(path)}: not a regular file")
    return [path]


def _footer(path: Path) -> tuple[dict[bytes, bytes], int]:
    """(key-value metadata, rows) of a file of ours, refused unless its footer says it
    holds every column of the schema, each of its type (the footer only is read)."""
    try:
        footer = pq.read_metadata(path)
        schema = footer.schema.to_arrow_schema()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        what = "cannot be read" if getattr(e, "errno", None) else "not a Parquet file"
        raise BadInput(f"{shown(path)}: {what} ({one_line(str(e))})") from None
    meta = schema.metadata or {}
    version = meta.get(S.META_SCHEMA_VERSION)
    if version is None:
        raise BadInput(
            f"{shown(path)}: not written by neurontrace (no schema version in metadata)"
        )
    if version != S.SCHEMA_VERSION.encode():
        raise SchemaMismatch(
            f"{shown(path)}: written by neurontrace schema version "
            f"{one_line(version.decode(errors='replace'))}; convert it again"
        )
    problem = schema_problem(schema)
    if problem is not None:
        raise BadInput(f"{shown(path)}: not an event table as neurontrace writes it: "
                       f"{problem}; convert the trace again")
    return meta, footer.num_rows


def schema_problem(schema: pa.Schema) -> str | None:
    """What makes ``schema`` unlike :data:`neurontrace.schema.SCHEMA` (a column missing,
    repeated, or of another type), or None. Columns it does not know are allowed."""
    for field in S.SCHEMA:
        found = schema.get_all_field_indices(field.name)
        if not found:
            return f"no column {field.name!r}"
        if len(found) > 1:
            return f"column {field.name!r} appears {len(found)} times"
        got = schema.field(found[0]).type
        if got != field.type:
            return f"column {field.name!r} is {got}, not {field.type}"
    return None


def is_ours(path: Path) -> bool:
    """A folder holding ``.parquet`` files, or a regular file starting with Parquet's
    magic bytes (nothing else is opened: a FIFO would block)."""
    if path.is_dir():
        return any(path.rglob("*.parquet"))
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _parts(path: str | os.PathLike[str]) -> list[tuple[Path, int]]:
    """The files of ``path`` (:func:`_files`), each checked (:func:`_footer`), with the
    number its first row takes in the whole: the rows of the files before it."""
    files = _files(Path(path))
    rows = [_footer(f)[1] for f in files]
    return list(zip(files, itertools.accumulate(rows, initial=0), strict=False))  # one spare


def read(path: str | os.PathLike[str]) -> pa.Table:
    """The event table of a file (or dataset folder) that ``convert`` wrote.

    The files of a dataset folder are numbered on from one another (see :func:`scan`).
    """
    tables = [_read_table(f, offset) for f, offset in _parts(path)]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _read_table(path: Path, offset: int) -> pa.Table:
    """One file's table, its rows numbered from ``offset`` (:func:`offset_rows`)."""
    try:
        t = pq.read_table(path, schema=S.SCHEMA)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{shown(path)}: corrupt Parquet file ({one_line(str(e))})") from None
    for c in S.ROW_REFS if offset else ():
        t = t.set_column(t.schema.get_field_index(c), S.SCHEMA.field(c), pc.add(t[c], offset))
    return t


def scan(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A lazy Polars scan of a file (or dataset folder) that ``convert`` wrote.

    Each file numbers its rows from 0; in a dataset folder the rows of the second file
    and on are offset (with the ``parent`` and ``framework_row`` that point at them) so
    that ``row`` stays unique in the whole frame. Every file's footer is checked first
    (:func:`_footer`); its pages are read only when the frame is collected.
    """
    files = _parts(path)
    _scans[0] += 1
    for f, _ in files:
        _scanned.pop(f, None)
        _scanned[f] = _scans[0]
    while len(_scanned) > SCANNED_KEPT:
        del _scanned[next(iter(_scanned))]
    parts = [offset_rows(pl.scan_parquet(str(f), hive_partitioning=False), offset)
             for f, offset in files]
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")


def scans() -> int:
    """How many times :func:`scan` has been called in this process."""
    return _scans[0]


def scanned(since: int = 0) -> list[Path]:
    """The files :func:`scan` opened in this process after its first ``since`` calls,
    latest last."""
    return [f for f, n in _scanned.items() if n > since]


def unreadable(paths: Iterable[Path]) -> str | None:
    """A one-line message naming the first of ``paths`` that cannot be read whole, or
    None when all of them read: pyarrow decodes every page and validates every batch,
    then Polars decodes every column (in its streaming engine: bounded memory).

    For an error raised where a scan was collected: a corrupt page (bytes flipped in a
    file whose footer is intact) fails only then, inside Polars, as an error or a panic.
    Polars is asked too because it checks some things pyarrow does not (and panics).
    """
    for p in paths:
        try:
            with pq.ParquetFile(p) as f:
                for batch in f.iter_batches(batch_size=64 * 1024):
                    batch.validate(full=True)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            return f"{shown(p)}: corrupt Parquet file ({_reason(e)})"
        try:
            pl.scan_parquet(p, hive_partitioning=False).select(
                pl.all().hash().max()
            ).collect(engine="streaming")
        except BaseException as e:
            if not (isinstance(e, Exception) or is_panic(e)):
                raise
            return f"{shown(p)}: corrupt Parquet file (Polars: {_reason(e)})"
    return None


def _reason(e: BaseException, limit: int = 200) -> str:
    """``e``'s message on one line, cut to about ``limit`` characters."""
    text = one_line((panic_message(e) if is_panic(e) else str(e)) or type(e).__name__, 2)
    return text if len(text) <= limit else text[:limit] + "..."


def offset_rows(lf: pl.LazyFrame, offset: int) -> pl.LazyFrame:
    """``lf`` with ``row`` and the columns that refer to rows moved on by ``offset``."""
    if not offset:
        return lf
    return lf.with_columns(pl.col(c) + offset for c in S.ROW_REFS)


def file_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``neurontrace.*`` metadata of one file, JSON-decoded (a file not ours, or of
    another schema, is refused: :func:`_footer`)."""
    meta, _ = _footer(Path(path))
    out: dict[str, Any] = {}
    for k, v in meta.items():
        if k.startswith(S.META_PREFIX):
            key = k.removeprefix(S.META_PREFIX).decode()
            try:
                out[key] = json.loads(v)
            except ValueError:
                out[key] = v.decode()
    return out
