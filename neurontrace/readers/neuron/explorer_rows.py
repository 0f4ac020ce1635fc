"""Explorer event tables read: each column as the type this reader reads it as, whatever
Arrow type the file gives (:func:`conform`), Arrow types Polars cannot take read as text
or left out (:func:`importable`), each change a warning; then table rows as event columns:
``SystemProfileEvents`` (:func:`system_rows`; its ``nc_exec_running`` and sync points as
what places device time: :func:`host_windows`), the device tables ``Instruction``,
``DmaPacket``, ``ActiveTime`` (:func:`device_rows`), the ``ExecutionInfo`` windows the
clock pairs with (:func:`executions`), and the expressions they share (:func:`duration`,
:func:`execution`, :func:`json_int`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, one_line, shown
from neurontrace.readers import neuron as N

SYSTEM = "SystemProfileEvents"
DEVICE_TABLES = ("Instruction", "DmaPacket", "ActiveTime")
EVENT_TABLES = {SYSTEM, *DEVICE_TABLES}
#: Where warnings about a table's columns go: (code, message, count).
Warn = Callable[[str, str, int], None]

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
        what = f"{shown(path)}: column {field.name!r} is {field.type}"
        try:
            batch = batch.set_column(i, pa.field(field.name, pa.string()),
                                     batch.column(i).cast(pa.string()))
            warn("explorer_column_type", f"{what}; read as text", 1)
        except pa.ArrowException:
            batch = batch.remove_column(i)
            warn("explorer_column_type", f"{what}, which cannot be read; left out", 1)
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
    JSON: bytes as hex). Text of digits, floats, unsigned and temporal integers convert to integers,
    values that do not (``"abc"``, ``1e30``) are read as missing; a column that cannot
    convert at all (a list where a number belongs) is refused if :data:`REQUIRED`, else
    left out; one missing is refused. Every change is a warning."""
    missing = [c for c in REQUIRED[table] if c not in df.columns]
    if missing:
        raise BadInput(f"{shown(path.parent)}/{table}: no {missing[0]} column")
    fixed: list[pl.Series] = []
    dropped: list[str] = []
    for name, dtype in df.schema.items():
        expected, read = KINDS.get(name, _OTHER)
        s = df.get_column(name)
        out = read(s)
        if out is s:
            continue
        if out is None:
            what = f"{shown(path)}: column {name!r} is {dtype}, not {expected}"
            if name in REQUIRED[table]:
                raise BadInput(what)
            warn("explorer_column_type", f"{what}; left out", 1)
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
    listed = isinstance(dt, (pl.List, pl.Array))
    inner = dt.inner if isinstance(dt, (pl.List, pl.Array)) else dt
    if inner in (pl.String, pl.Null, pl.Categorical) or inner.is_integer():
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


#: A kind of column: what its values are said to be in warnings, and the column as read:
#: itself when it already is, None when it cannot be.
Kind = tuple[str, Callable[[pl.Series], pl.Series | None]]
_INT: Kind = ("integers", lambda s: s if s.dtype == pl.Int64 else _to_int(s))
_TEXT: Kind = ("text", lambda s: s if s.dtype == pl.String else _to_text(s))
#: Integers where they are, else text (``int_or_label``).
_ID: Kind = ("integers or text",
             lambda s: s if s.dtype == pl.String or s.dtype.is_integer() else _to_text(s))
#: Any column not in :data:`KINDS`, kept in ``args``.
_OTHER: Kind = ("a type Polars can encode as JSON", _json_safe)
#: How each event-table column is read: as integers (int64), as text, as integers where
#: they are, else as text, as a list of flow ids (or text holding them).
KINDS: dict[str, Kind] = {
    **dict.fromkeys(("start_ts", "end_ts", "duration_ns", "nc_idx", "pcore_idx",
                     "framework_stream_id", "transfer_bytes", "read_bytes", "write_bytes"),
                    _INT),
    **dict.fromkeys(("name", "trace_event_source", "instance_id", "engine", "opcode",
                     "queue_name", "extra_attributes_json"), _TEXT),
    **dict.fromkeys(("process_id", "thread_id"), _ID),
    "flow_id": ("a list of flow ids", _to_flows),
}


LAYER_OF_SOURCE = {"framework": S.FRAMEWORK, "neuron_rt": S.RUNTIME, "neuron_hw": S.DEVICE}

#: System-table columns read (the last four are kept in ``args`` too).
_SYSTEM_KNOWN = {"name", "start_ts", "end_ts", "duration_ns", "trace_event_source",
                 "instance_id", "process_id", "thread_id", "nc_idx", "flow_id",
                 "framework_stream_id", "id", "pcore_idx", "worker_gid", "extra_attributes_json"}
#: Device-table columns that may be missing, and are left out of ``args`` where null.
_DEVICE_OPTIONAL = ("engine", "opcode", "queue_name", "transfer_bytes", "read_bytes",
                    "write_bytes")


def with_defaults(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    missing = [c for c in cols if c not in df.columns]
    return df.with_columns(pl.lit(None).alias(c) for c in missing) if missing else df


def times(df: pl.DataFrame, diag: Diagnostics, where: str) -> list[pl.Expr]:
    """``start_ns`` (``start_ts`` as int64) and ``dur_ns`` (:func:`duration`, 0 when
    unknown, never negative); a row without a start (null, or a value :func:`conform`
    could not read) is placed at time 0, with a warning, as the other readers do."""
    missing = df.get_column("start_ts").null_count()
    if missing:
        diag.warn("bad_ts", f"{where}: {missing} row(s) have no usable start_ts; placed at "
                  "time 0", missing)
    return [pl.col("start_ts").cast(pl.Int64).fill_null(0).alias(S.START_NS),
            duration().fill_null(0).clip(0).alias(S.DUR_NS)]


def duration() -> pl.Expr:
    return pl.coalesce(
        pl.col("duration_ns").cast(pl.Int64, strict=False),
        pl.col("end_ts").cast(pl.Int64, strict=False) - pl.col("start_ts").cast(pl.Int64),
    )


def json_int(*keys: str) -> pl.Expr:
    """The first of ``keys`` in ``extra_attributes_json`` that holds an integer (keys read
    into columns: exec id, bytes, model, the device time of a sync point)."""
    c = pl.col("extra_attributes_json").cast(pl.String)
    return pl.coalesce(
        [c.str.json_path_match(f"$.{k}").cast(pl.Int64, strict=False) for k in keys]
    )


def execution(df: pl.DataFrame) -> pl.Expr:
    """The execution key: ``exec_id`` from the extra attributes (``nc0:exec7``); for an
    ``nc_exec_running`` without one, its ``model_id`` and first flow id
    (``nc0:model7:execf1``, shared by its LNC=2 rows): flow ids are per-model counters,
    so two NEFFs can reuse one (Tilebench ``nki_timer.py`` keys by model and flow)."""
    exec_id = json_int("exec_id", "execution_id").cast(pl.String)
    flow = pl.when(pl.col("name") == N.EXEC_EVENT).then(
        flows(df).list.first().str.strip_prefix(N.FLOW_PREFIX))
    nc = pl.col("nc_idx").cast(pl.Int64, strict=False)
    return pl.coalesce(
        N.execution_key(nc, exec_id),
        N.execution_key(nc, flow, json_int("model_id")),
    )


def flows(df: pl.DataFrame) -> pl.Expr:
    """``flow_id`` as ``neuron:<id>`` strings, whether stored as a list or as text (ids
    separated by commas, in brackets or not, each in quotes or not)."""
    dt = df.schema["flow_id"]
    if isinstance(dt, pl.List):
        lst = pl.col("flow_id").cast(pl.List(pl.String))
    else:  # "1,2" or a JSON list, '["1", "2"]' or "[1, 2]": split, never parsed
        lst = pl.col("flow_id").cast(pl.String).str.strip_chars().str.strip_chars("[]") \
            .str.split(",")
    flow = pl.element().str.strip_chars().str.strip_chars('"').str.strip_chars()
    return lst.list.eval(
        pl.when(flow != "").then(pl.lit(N.FLOW_PREFIX) + flow)
    ).list.drop_nulls()


def system_rows(df: pl.DataFrame, diag: Diagnostics, folder: Path) -> pl.DataFrame:
    extra = [c for c in df.columns if c not in _SYSTEM_KNOWN]
    df = with_defaults(df, sorted(_SYSTEM_KNOWN))
    src = pl.col("trace_event_source").cast(pl.String)
    unknown = df.filter(src.is_not_null() & ~src.is_in(list(LAYER_OF_SOURCE)))
    if unknown.height:
        diag.warn("unknown_event_source",
                  f"{shown(folder)}/{SYSTEM}: trace_event_source "
                  f"{unknown.get_column('trace_event_source')[0]!r} is not framework, "
                  "neuron_rt or neuron_hw; read as runtime", unknown.height)
    hw_name = pl.col("name").is_in(list(N.HARDWARE_EVENTS))
    layer = pl.coalesce(
        src.replace_strict(LAYER_OF_SOURCE, default=None, return_dtype=pl.String),
        pl.when(src.is_null() & hw_name).then(pl.lit(S.DEVICE)),
        pl.lit(S.RUNTIME),
    )
    pid, pid_label = N.int_or_label(df.get_column("process_id"))
    tid, tid_label = N.int_or_label(df.get_column("thread_id"))
    nc = pl.col("nc_idx").cast(pl.Int64, strict=False)
    name = pl.col("name").cast(pl.String).fill_null("")
    # pcore_idx here is the physical core within the device (not 0/1 within nc_idx).
    pcore = pl.col("pcore_idx").cast(pl.Int64, strict=False)
    return df.with_columns(  # each column from df's (args too)
        layer.alias(S.LAYER),
        src.alias(S.CATEGORY),
        name.alias(S.NAME),
        pl.when(duration().is_not_null()).then(pl.lit(S.SPAN))
        .otherwise(pl.lit(S.INSTANT)).alias(S.KIND),
        *times(df, diag, f"{shown(folder)}/{SYSTEM}"),
        pid.alias(S.PID), tid.alias(S.TID),
        pid_label.alias(S.PID_LABEL), tid_label.alias(S.TID_LABEL),
        nc.alias(S.DEVICE_COL),
        pl.col("framework_stream_id").cast(pl.Int64, strict=False).alias(S.STREAM),
        json_int("size", "bytes").alias(S.BYTES),
        flows(df).alias(S.FLOW_IDS),
        execution(df).alias(S.EXECUTION),
        pl.col("instance_id").cast(pl.String).alias(S.INSTANCE_ID),
        json_int("model_id").alias(S.MODEL_ID),
        pcore.alias(S.DEVICE_CORE),
        pl.when(layer == S.DEVICE).then(N.device_track(nc, name, pcore, "device core"))
        .alias(S.TRACK),
        N.args_json(df, ["id", "pcore_idx", "worker_gid", *extra, "extra_attributes_json"],
                    raw_json="extra_attributes_json"),
    )


def device_rows(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """One device table's frame (with ``_nc``, start_ns, dur_ns) as event columns."""
    nc = pl.col("_nc")
    pcore = pl.col("pcore_idx").cast(pl.Int64, strict=False)
    df = with_defaults(df, list(_DEVICE_OPTIONAL))
    eng = N.engine(pl.col("engine").cast(pl.String).fill_null("unknown"))
    queue = pl.col("queue_name").cast(pl.String).fill_null("dma")
    name, lane = {  # ActiveTime: merged busy intervals of an engine
        "Instruction": (pl.col("opcode").cast(pl.String).fill_null("instruction"), eng),
        "DmaPacket": (queue, pl.concat_str(pl.lit("dma / "), queue)),
        "ActiveTime": (pl.concat_str(pl.lit("active "), eng),
                       pl.concat_str(eng, pl.lit(" / active"))),
    }[table]
    moved = pl.lit(None, pl.Int64) if table != "DmaPacket" else pl.coalesce(*(
        pl.col(c).cast(pl.Int64, strict=False)
        for c in ("transfer_bytes", "write_bytes", "read_bytes")))
    used = {"_nc", S.START_NS, S.DUR_NS, "start_ts", "end_ts", "duration_ns", "nc_idx", "engine",
            "opcode", "queue_name"}
    present = [c for c in df.columns if c not in used
               and not (c in _DEVICE_OPTIONAL and df.get_column(c).null_count() == df.height)]
    return N.device_spans(df, table, name, nc, lane, S.START_NS, S.DUR_NS, pcore.alias(S.PCORE),
                          moved.alias(S.BYTES), N.args_json(df, present), pcore=pcore)


def executions(execinfo: list[dict[str, Any]] | None, nc: int | None) -> pl.DataFrame | None:
    """ExecutionInfo's device windows (``d_start``, ``d_end``) of NeuronCore ``nc`` (all
    rows when None or no ``nc_idx``), in execution order; a row whose times are not
    integers (:func:`neuron.int_value`) is left out. None without those columns."""
    if not execinfo or not {"execution_start_ts", "execution_end_ts"} <= execinfo[0].keys():
        return None
    rows = [r for r in execinfo
            if nc is None or "nc_idx" not in r or N.int_value(r["nc_idx"]) == nc]
    order = "execution_index" if "execution_index" in execinfo[0] else "execution_start_ts"
    rows.sort(key=lambda r: ((v := N.int_value(r.get(order))) is not None, v or 0))  # None first
    windows = [(N.int_value(r.get("execution_start_ts")), N.int_value(r.get("execution_end_ts")))
               for r in rows]
    return pl.DataFrame([w for w in windows if None not in w], schema={
        "d_start": pl.Int64, "d_end": pl.Int64}, orient="row")


#: System-table columns that place device time (:func:`host_windows`).
TIMING = ["name", "start_ts", "end_ts", "duration_ns", "nc_idx", "flow_id",
          "extra_attributes_json", "process_id"]


def timing_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of a system-table frame that place device time (:data:`TIMING`)."""
    return with_defaults(frame, TIMING).select(TIMING).filter(
        pl.col("name").is_in([N.EXEC_EVENT, N.SYNC_EVENT]))


def host_windows(timing: list[pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What places device timelines on host time: ``nc_exec_running`` per execution
    (``nc``, ``pid``, ``model``, ``start``, ``end``, ``execution``) and sync points
    (``host_ts``, ``device_ts``), from the system table's ``nc_exec_running`` and
    ``timestamp_sync_point`` rows (columns :data:`TIMING`, :func:`timing_rows`)."""
    parts = [p for p in timing if p.height]
    df = (pl.concat(parts, how="diagonal_relaxed") if parts  # else: empty, typed alike
          else pl.DataFrame(schema=dict.fromkeys(TIMING, pl.String)))
    df = df.with_columns(N.int_or_label(df.get_column("process_id"))[0].alias("_pid"))
    ex = df.filter(pl.col("name") == N.EXEC_EVENT).select(
        nc=pl.col("nc_idx").cast(pl.Int64, strict=False),
        pid=pl.col("_pid").cast(pl.Int64, strict=False),
        model=json_int("model_id"),
        start=pl.col("start_ts").cast(pl.Int64),
        end=pl.col("start_ts").cast(pl.Int64) + duration().fill_null(0),
        execution=execution(df),
    ).filter(pl.col("start").is_not_null()).with_columns(
        pl.coalesce(S.EXECUTION, pl.format("nc{}@{}", "nc", "start"))  # no id: one per row
        .alias(S.EXECUTION))
    host = ex.group_by("nc", "pid", "model", S.EXECUTION).agg(pl.col("start").min(),
                                                              pl.col("end").max())
    syncs = df.filter(pl.col("name") == N.SYNC_EVENT).select(
        host_ts=pl.coalesce(json_int("cpu_timestamp_ns"),
                            pl.col("start_ts").cast(pl.Int64)),
        # keys unconfirmed on a real capture
        device_ts=json_int("nc_timestamp_ns", "device_timestamp_ns", "device_ts"),
    ).drop_nulls()
    return host.select("nc", "pid", "model", "start", "end", S.EXECUTION), syncs
