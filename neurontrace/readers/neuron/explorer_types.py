"""The column types of Explorer event tables: each column read as the type this reader
reads it as, whatever Arrow type the file gives (:func:`conform`), and Arrow types Polars
cannot take read as text or left out (:func:`importable`), each change a warning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa

from neurontrace.errors import BadInput, one_line, shown
from neurontrace.readers import neuron as N
from neurontrace.readers.neuron.explorer_folders import DEVICE_TABLES, SYSTEM

#: Where warnings about a table's columns go: (code, message, count).
Warn = Callable[[str, str, int], None]

#: How each event-table column is read: as integers (int64), as text, as integers where
#: they are, else as text (``int_or_label``: ``id``), as a list of flow ids (or text
#: holding them); any other column is ``other``.
KINDS: dict[str, str] = {
    **dict.fromkeys(("start_ts", "end_ts", "duration_ns", "nc_idx", "pcore_idx",
                     "framework_stream_id", "transfer_bytes", "read_bytes", "write_bytes"),
                    "int"),
    **dict.fromkeys(("name", "trace_event_source", "instance_id", "engine", "opcode",
                     "queue_name", "extra_attributes_json"), "text"),
    **dict.fromkeys(("process_id", "thread_id"), "id"),
    "flow_id": "flow",
}
#: Columns without which an event table is refused.
REQUIRED: dict[str, tuple[str, ...]] = {SYSTEM: ("name", "start_ts"),
                                        **{t: ("start_ts",) for t in DEVICE_TABLES}}


def importable(batch: pa.RecordBatch, path: Path, warn: Warn) -> pl.DataFrame:
    """``batch`` as a Polars frame. A column of an Arrow type Polars does not take (a
    256-bit decimal, an interval, a union: Polars errors or panics on them) is read as
    text where Arrow can cast it to text, else left out; either with a warning."""
    for i in reversed(range(batch.num_columns)):
        field = batch.schema.field(i)
        if polars_type(field.type) is not None:
            continue
        try:
            batch = batch.set_column(i, pa.field(field.name, pa.string()),
                                     batch.column(i).cast(pa.string()))
            warn("explorer_column_type", f"{shown(path)}: column {field.name!r} is "
                 f"{field.type}; read as text", 1)
        except pa.ArrowException:
            batch = batch.remove_column(i)
            warn("explorer_column_type", f"{shown(path)}: column {field.name!r} is "
                 f"{field.type}, which cannot be read; left out", 1)
    bare = pa.schema([pa.field(f.name, polars_type(f.type) or f.type) for f in batch.schema])
    if not bare.equals(batch.schema, check_metadata=True):
        batch = batch.cast(bare)
    try:
        df = pl.from_arrow(batch)
    except (pl.exceptions.PolarsError, pa.ArrowException) as e:
        raise BadInput(f"{shown(path)}: cannot be read ({one_line(str(e))})") from None
    assert isinstance(df, pl.DataFrame)
    return df


#: Arrow types of no nesting that Polars takes, each as its ``pyarrow.types`` test.
_PLAIN = tuple(getattr(pa.types, f"is_{kind}") for kind in (
    "null", "boolean", "integer", "floating", "string", "large_string", "string_view",
    "binary", "large_binary", "fixed_size_binary", "binary_view", "date", "time",
    "timestamp", "duration"))


def polars_type(t: pa.DataType) -> pa.DataType | None:
    """``t`` as :func:`polars.from_arrow` takes it: with no key-value metadata on the
    fields nested in it (keys or values that are not UTF-8 make Polars panic; neither is
    used); None for a type Polars does not take (checked, not tried: some types make it
    panic)."""
    if pa.types.is_dictionary(t):
        takes = pa.types.is_integer(t.index_type) and polars_type(t.value_type) is not None
        return t if takes else None
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = polars_type(t.value_type)
        if inner is None:
            return None
        item = pa.field(t.value_field.name, inner, t.value_field.nullable)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(item, t.list_size)
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_map(t):
        key, value = polars_type(t.key_type), polars_type(t.item_type)
        if key is None or value is None:
            return None
        return pa.map_(key, pa.field(t.item_field.name, value, t.item_field.nullable))
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        types = [polars_type(f.type) for f in fields]
        if any(b is None for b in types):
            return None
        return pa.struct([pa.field(f.name, b, f.nullable)
                          for f, b in zip(fields, types, strict=True)])
    if pa.types.is_decimal(t):
        return t if pa.types.is_decimal128(t) else None
    return t if any(is_(t) for is_ in _PLAIN) else None


def conform(df: pl.DataFrame, table: str, path: Path, warn: Warn) -> pl.DataFrame:
    """An event table's frame with each column of the type this reader reads it as
    (:data:`KINDS`; any other column, kept in ``args``, as something Polars encodes as
    JSON: bytes as
    hex). Text of digits, floats, unsigned and temporal integers convert to integers,
    values that do not (``"abc"``, ``1e30``) are read as missing; a column that cannot
    convert at all (a list where a number belongs) is refused if :data:`REQUIRED`, else
    left out; one missing is refused. Every change is a warning."""
    missing = [c for c in REQUIRED[table] if c not in df.columns]
    if missing:
        raise BadInput(f"{shown(path.parent)}/{table}: no {missing[0]} column")
    fixed: list[pl.Series] = []
    dropped: list[str] = []
    for name, dtype in df.schema.items():
        expected, read = _READ[KINDS.get(name, "other")]
        s = df.get_column(name)
        out = read(s)
        if out is s:
            continue
        if out is None:
            if name in REQUIRED[table]:
                raise BadInput(f"{shown(path)}: column {name!r} is {dtype}, not "
                               f"{expected}")
            warn("explorer_column_type", f"{shown(path)}: column {name!r} is "
                 f"{dtype}, not {expected}; left out", 1)
            dropped.append(name)
            continue
        lost = out.null_count() - s.null_count()
        if lost > 0:
            warn("explorer_bad_value", f"{shown(path)}: {lost} value(s) of column "
                 f"{name!r} ({dtype}) are not {expected}; read as missing", lost)
        fixed.append(out.alias(name))
    return df.with_columns(fixed).drop(dropped)


def _to_int(s: pl.Series) -> pl.Series | None:
    dt = s.dtype
    if dt in (pl.String, pl.Categorical) or isinstance(dt, pl.Enum):
        return s.to_frame().select(N.int_text(pl.col(s.name).cast(pl.String))).to_series()
    if dt.is_temporal():
        s = s.to_physical()
    elif not (dt == pl.Null or dt.is_numeric() or dt == pl.Boolean):
        return None
    return s.cast(pl.Int64, strict=False)


def _to_text(s: pl.Series) -> pl.Series | None:
    dt = s.dtype
    if dt == pl.Binary:
        return pl.Series(s.name, [None if v is None else v.decode("utf-8", "backslashreplace")
                                  for v in s.to_list()], pl.String)
    if isinstance(dt, pl.Duration):
        return s.to_physical().cast(pl.String)
    if dt.is_nested() or dt == pl.Object:
        return None
    return s.cast(pl.String, strict=False)


def _to_flows(s: pl.Series) -> pl.Series | None:
    dt = s.dtype
    if isinstance(dt, pl.Array):
        s, dt = s.cast(pl.List(dt.inner)), pl.List(dt.inner)
    listed = isinstance(dt, pl.List)
    inner = dt.inner if isinstance(dt, pl.List) else dt
    if inner == pl.String:
        return s
    if inner == pl.Null or inner.is_integer() or inner == pl.Categorical:
        return s.cast(pl.List(pl.String) if listed else pl.String)
    return None


def _json_safe(s: pl.Series) -> pl.Series:
    """``s`` itself, or, where it holds bytes (which Polars' JSON encoder panics on),
    bytes as hex text, or each value as JSON text (bytes as base64) inside a nesting."""
    if not _holds_bytes(s.dtype):
        return s
    if s.dtype == pl.Binary:
        return s.bin.encode("hex")
    return pl.Series(s.name, list(map(N.json_text, s.to_list())), pl.String)


def _holds_bytes(dt: pl.DataType | pl.datatypes.DataTypeClass) -> bool:
    if dt == pl.Binary:
        return True
    if isinstance(dt, (pl.List, pl.Array)):
        return _holds_bytes(dt.inner)
    if isinstance(dt, pl.Struct):
        return any(_holds_bytes(f.dtype) for f in dt.fields)
    return dt.is_nested() and "Binary" in str(dt)  # a nesting not named above (a map)


#: Per kind of column (:data:`KINDS`): what its values are said to be in warnings, and
#: the column as read: itself when it already is, None when it cannot be.
_READ: dict[str, tuple[str, Callable[[pl.Series], pl.Series | None]]] = {
    "int": ("integers", lambda s: s if s.dtype == pl.Int64 else _to_int(s)),
    "text": ("text", lambda s: s if s.dtype == pl.String else _to_text(s)),
    "id": ("integers or text",
           lambda s: s if s.dtype == pl.String or s.dtype.is_integer() else _to_text(s)),
    "flow": ("a list of flow ids", _to_flows),
    "other": ("a type Polars can encode as JSON", _json_safe),
}
