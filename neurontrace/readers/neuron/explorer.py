"""Neuron Explorer Parquet output: a folder of ``<Table>.parquet`` files.

Written by ``neuron-explorer view --output-format parquet`` (AWS's recommended form),
under ``<data-path>/profiles/global/<name>@latest/``. Large tables are split
(``Instruction_0.parquet``, ``Instruction_1.parquet``, ...) and read as one.

Rows (see formats.md §3 for every field):

- ``SystemProfileEvents``: one row each; the layer follows ``trace_event_source``
  (``framework``, ``neuron_rt`` -> runtime, ``neuron_hw`` -> device); ``start_ns`` is
  ``start_ts`` exactly (host epoch ns); ``flow_id`` becomes ``flow_ids``
  (``neuron:<id>``), which the assembler uses to link framework -> runtime -> hardware.
- ``Instruction``, ``DmaPacket``, ``ActiveTime``: device rows on tracks per NeuronCore
  and engine or queue, moved from the device timeline to host time (see
  :mod:`.clock`).
- ``Metadata``, ``SchemaFields``, ``Summary``, ``ExecutionInfo``,
  ``SystemProfileMetadata``, ``DeviceProfileList``: kept whole in the output's
  ``neurontrace.trace`` metadata under ``neuron.tables``.

Reading a ``view -d`` session's system folder reads the device folders its
``DeviceProfileList`` binds too: their rows carry the row's instance and process, their
NeuronCore is ``DeviceProfileList.nc_id``, else ``Metadata.neuroncore_idx``, else (warned)
a ``_vnc_N`` in the folder name.

A ``neuron-explorer view -d <session>`` writes one system folder (``SystemProfileEvents``,
``DeviceProfileList``, ...) and, beside it, one ``<device_profile_name>@latest`` folder per
``DeviceProfileList`` row (seen in Deep-Learning-Profiling-Tools/Tilebench
``tilebench/core/nki_timer.py``, run on trn2; the device folder's name is the schema's
``device_profile_name`` plus ``@latest``, a guess until a real session confirms it).

The module in sections: the tables of a folder (what it holds before any row is read:
its tables, the device folders it binds, what ``Metadata`` says), column types (each
column of an event table read as one type whatever Arrow type the file gives,
:func:`conform`; Arrow types Polars cannot take read as text or left out,
:func:`importable`; each change a warning), rows as event columns, and the reader;
:mod:`.clock` places device time on host time.

Columns this reader does not know go to ``args``; missing optional columns are null.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, one_line, shown
from neurontrace.readers import neuron as N
from neurontrace.readers.base import Events, Progress
from neurontrace.readers.neuron.clock import Placement, place

# -- the tables of a folder ------------------------------------------------------------

SYSTEM = "SystemProfileEvents"
DEVICE_TABLES = ("Instruction", "DmaPacket", "ActiveTime")
SIDE_TABLES = ("Metadata", "SchemaFields", "Summary", "ExecutionInfo",
               "SystemProfileMetadata", "DeviceProfileList")
#: Rows kept per side table in the metadata (ExecutionInfo grows with executions).
SIDE_ROWS = 10_000
#: Major versions of ``Metadata.profile_schema_version`` this reader was written
#: against (7.x in SDK 2.31 ... 12.x in SDK 2.33).
KNOWN_MAJORS = range(7, 13)

_TABLE_FILE = re.compile(r"^([A-Za-z][A-Za-z0-9]*?)(?:_(\d+))?\.parquet$")


def tables(folder: Path) -> dict[str, list[Path]]:
    """Table name -> its files in order (``Instruction_0``, ``Instruction_1``, ...)."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for p in folder.iterdir():
        m = _TABLE_FILE.match(p.name)
        if m and p.is_file():
            found.setdefault(m.group(1), []).append((int(m.group(2) or -1), p))
    return {k: [p for _, p in sorted(v)] for k, v in found.items()}


def is_explorer_folder(folder: Path) -> bool:
    return folder.is_dir() and bool(tables(folder).keys() & {SYSTEM, *DEVICE_TABLES})


@dataclass(frozen=True)
class DeviceProfile:
    """A device folder of a ``view -d`` session, bound to its ``DeviceProfileList`` row."""

    name: str
    folder: Path
    instance_id: str | None
    process_id: int | None
    nc_id: int | None
    session_id: int | None
    model_id: int | None

    def label(self, nc: int | None) -> str:
        """``i-0abc pid 4242 nc 0``: the key of this profile's placement."""
        return f"{self.instance_id or '?'} pid {self.process_id} nc {'?' if nc is None else nc}"

    def describe(self) -> dict[str, Any]:
        fields = asdict(self)
        return {"device_profile_name": fields.pop("name"), "folder": str(fields.pop("folder")),
                **fields}


def device_profiles(folder: Path, rows: list[dict[str, Any]] | None,
                    diag: Diagnostics | None = None) -> list[DeviceProfile]:
    """The device folders bound to the system folder ``folder`` by its ``DeviceProfileList``
    ``rows``: ``<device_profile_name>@latest`` beside ``folder`` (in ``folder`` itself as a
    fallback). A row whose folder is missing is warned about (when ``diag``) and skipped."""
    out: list[DeviceProfile] = []
    for r in rows or []:
        name = r.get("device_profile_name")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            continue
        cands = [folder.parent / f"{name}@latest", folder / f"{name}@latest", folder / name]
        found = next((c for c in cands if c != folder and is_explorer_folder(c)), None)
        if found is None:
            if diag is not None:
                diag.warn("device_profile_missing",
                          f"{shown(folder)}: DeviceProfileList names {name!r}, but no folder "
                          f"{name}@latest is beside it; its device rows are not read")
            continue
        inst = r.get("instance_id")
        ids = (N.int_value(r.get(k)) for k in ("process_id", "nc_id", "session_id", "model_id"))
        out.append(DeviceProfile(name, found, inst if isinstance(inst, str) else None, *ids))
    return out


def bound_folders(folder: Path) -> set[Path]:
    """The device folders a system folder's ``DeviceProfileList`` binds (read with it)."""
    files = tables(folder).get("DeviceProfileList", []) if folder.is_dir() else []
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            rows += pq.read_table(f).to_pylist()[:SIDE_ROWS]
        except (pa.ArrowException, OSError):
            continue  # refused, in one line, when the folder itself is read
    return {p.folder for p in device_profiles(folder, rows)}


def schema_version(meta: list[dict[str, Any]] | None, folder: Path,
                    diag: Diagnostics, majors: set[str]) -> str | None:
    """``Metadata.profile_schema_version``. Tables are read by column presence whatever
    the version; a major version outside :data:`KNOWN_MAJORS` is warned about once per
    read (``majors`` holds those already warned about)."""
    version = next((str(row["profile_schema_version"]) for row in meta or []
                    if row.get("profile_schema_version") is not None), None)
    if version is None:
        diag.warn("explorer_schema_version",
                  f"{shown(folder)}: no Metadata.profile_schema_version; read as the known layout")
        return None
    major = version.split(".", 1)[0].strip()
    if (not major.isdigit() or int(major) not in KNOWN_MAJORS) and major not in majors:
        majors.add(major)
        diag.warn("explorer_schema_version",
                  f"{shown(folder)}: profile schema version {version} (major {major}) is not one "
                  f"this reader knows ({KNOWN_MAJORS.start}-{KNOWN_MAJORS.stop - 1}); read "
                  "by column name, unknown columns kept in args")
    return version


def bridge(meta: list[dict[str, Any]] | None) -> int | None:
    """The device profile's start on the raw device clock (ns):
    ``Metadata.first_hw_timestamp / ticks_per_nanosec`` (documented fields; that
    ``first_hw_timestamp`` counts ticks is a guess). None without both, or with a zero or
    negative tick rate or a zero start."""
    for row in meta or []:
        first = N.int_value(row.get("first_hw_timestamp"))
        ticks = N.int_value(row.get("ticks_per_nanosec"))
        if first and ticks and ticks > 0:
            return first // ticks
    return None


def profile_nc(folder: Path, meta: list[dict[str, Any]] | None,
                diag: Diagnostics) -> int | None:
    """The NeuronCore of a device folder: ``Metadata.neuroncore_idx`` (documented; the older
    guesses ``nc_idx``, ``logical_nc_idx``, ``vnc_idx`` after it), else, warned, a ``_vnc_N``
    in the folder's name or its parent's."""
    for row in meta or []:
        for key in ("neuroncore_idx", "nc_idx", "logical_nc_idx", "vnc_idx"):
            v = N.int_value(row.get(key))
            if v is not None:
                return v
    for part in (folder.name, folder.parent.name):
        nc = N.nc_from_name(part)
        if nc is not None:
            diag.warn("neuroncore_from_folder_name",
                      f"{shown(folder)}: no DeviceProfileList.nc_id or Metadata.neuroncore_idx; "
                      f"NeuronCore {nc} taken from the name {part!r}")
            return nc
    return None


# -- column types ---------------------------------------------------------------------

#: A warning about a table's columns: (code, message, count).
Note = tuple[str, str, int]

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


def importable(batch: pa.RecordBatch, path: Path) -> tuple[pl.DataFrame, list[Note]]:
    """``batch`` as a Polars frame. A column of an Arrow type Polars does not take (a
    256-bit decimal, an interval, a union: Polars errors or panics on them) is read as
    text where Arrow can cast it to text, else left out; either with a warning."""
    notes: list[Note] = []
    for i in reversed(range(batch.num_columns)):
        field = batch.schema.field(i)
        if polars_takes(field.type):
            continue
        try:
            batch = batch.set_column(i, pa.field(field.name, pa.string()),
                                     batch.column(i).cast(pa.string()))
            notes.append(("explorer_column_type", f"{shown(path)}: column {field.name!r} is "
                          f"{field.type}; read as text", 1))
        except pa.ArrowException:
            batch = batch.remove_column(i)
            notes.append(("explorer_column_type", f"{shown(path)}: column {field.name!r} is "
                          f"{field.type}, which cannot be read; left out", 1))
    bare = pa.schema([pa.field(f.name, _bare(f.type)) for f in batch.schema])
    if not bare.equals(batch.schema, check_metadata=True):  # keys or values that are not
        batch = batch.cast(bare)  # UTF-8 make Polars panic; neither is used
    try:
        df = pl.from_arrow(batch)
    except (pl.exceptions.PolarsError, pa.ArrowException) as e:
        raise BadInput(f"{shown(path)}: cannot be read ({one_line(str(e))})") from None
    assert isinstance(df, pl.DataFrame)
    return df, notes


def _bare(t: pa.DataType) -> pa.DataType:
    """``t`` with no key-value metadata on the fields nested in it."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _bare(f.type), f.nullable)
                          for f in (t.field(i) for i in range(t.num_fields))])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = pa.field(t.value_field.name, _bare(t.value_type), t.value_field.nullable)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(inner, t.list_size)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_map(t):
        return pa.map_(_bare(t.key_type), pa.field(t.item_field.name, _bare(t.item_type),
                                                   t.item_field.nullable))
    return t


#: Arrow types of no nesting that Polars takes, each as its ``pyarrow.types`` test.
_PLAIN = tuple(getattr(pa.types, f"is_{kind}") for kind in (
    "null", "boolean", "integer", "floating", "string", "large_string", "string_view",
    "binary", "large_binary", "fixed_size_binary", "binary_view", "date", "time",
    "timestamp", "duration"))


def polars_takes(t: pa.DataType) -> bool:
    """True for an Arrow type :func:`polars.from_arrow` takes (checked, not tried: some
    types make it panic)."""
    if pa.types.is_dictionary(t):
        return pa.types.is_integer(t.index_type) and polars_takes(t.value_type)
    if (pa.types.is_list(t) or pa.types.is_large_list(t)
            or pa.types.is_fixed_size_list(t)):
        return polars_takes(t.value_type)
    if pa.types.is_map(t):
        return polars_takes(t.key_type) and polars_takes(t.item_type)
    if pa.types.is_struct(t):
        return all(polars_takes(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_decimal(t):
        return pa.types.is_decimal128(t)
    return any(is_(t) for is_ in _PLAIN)


def conform(df: pl.DataFrame, table: str, path: Path) -> tuple[pl.DataFrame, list[Note]]:
    """An event table's frame with each column of the type this reader reads it as
    (:data:`KINDS`; any other column, kept in ``args``, as something Polars encodes as
    JSON: bytes as
    hex). Text of digits, floats, unsigned and temporal integers convert to integers,
    values that do not (``"abc"``, ``1e30``) are read as missing; a column that cannot
    convert at all (a list where a number belongs) is refused if :data:`REQUIRED`, else
    left out. Every change is a warning."""
    notes: list[Note] = []
    fixed: list[pl.Series] = []
    dropped: list[str] = []
    for name, dtype in df.schema.items():
        expected, read = _READ[KINDS.get(name, "other")]
        s = df.get_column(name)
        out = read(s)
        if out is s:
            continue
        if out is None:
            if name in REQUIRED.get(table, ()):
                raise BadInput(f"{shown(path)}: column {name!r} is {dtype}, not "
                               f"{expected}")
            notes.append(("explorer_column_type", f"{shown(path)}: column {name!r} is "
                          f"{dtype}, not {expected}; left out", 1))
            dropped.append(name)
            continue
        lost = out.null_count() - s.null_count()
        if lost > 0:
            notes.append(("explorer_bad_value", f"{shown(path)}: {lost} value(s) of column "
                          f"{name!r} ({dtype}) are not {expected}; read as missing",
                          lost))
        fixed.append(out.alias(name))
    if fixed:
        df = df.with_columns(fixed)
    return (df.drop(dropped) if dropped else df), notes


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


# -- rows as event columns ------------------------------------------------------------

LAYER_OF_SOURCE = {"framework": S.FRAMEWORK, "neuron_rt": S.RUNTIME, "neuron_hw": S.DEVICE}

#: System-table columns read (the last four are kept in ``args`` too).
_SYSTEM_KNOWN = {"name", "start_ts", "end_ts", "duration_ns", "trace_event_source",
                 "instance_id", "process_id", "thread_id", "nc_idx", "flow_id",
                 "framework_stream_id", "id", "pcore_idx", "worker_gid", "extra_attributes_json"}
_DEVICE_USED = {"start_ts", "end_ts", "duration_ns", "nc_idx", "engine", "opcode",
                "queue_name"}
#: Device-table columns that may be missing, and are left out of ``args`` where null.
_DEVICE_OPTIONAL = ("engine", "opcode", "queue_name", "transfer_bytes", "read_bytes",
                    "write_bytes")
#: Keys of ``extra_attributes_json`` read into columns (exec id, bytes, device time of a
#: sync point); the device-time keys are unconfirmed on a real capture.
_EXEC_KEYS = ("exec_id", "execution_id")
_SIZE_KEYS = ("size", "bytes")
MODEL_KEYS = ("model_id",)
SYNC_DEVICE_KEYS = ("nc_timestamp_ns", "device_timestamp_ns", "device_ts")
SYNC_HOST_KEYS = ("cpu_timestamp_ns",)


def with_defaults(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    missing = [c for c in cols if c not in df.columns]
    return df.with_columns(pl.lit(None).alias(c) for c in missing) if missing else df


def start_ns(df: pl.DataFrame, diag: Diagnostics, where: str) -> pl.Expr:
    """``start_ts`` as int64; a row without one (null, or a value :func:`conform` could
    not read) is placed at time 0, with a warning, as the other readers do."""
    missing = df.get_column("start_ts").null_count()
    if missing:
        diag.warn("bad_ts", f"{where}: {missing} row(s) have no usable start_ts; placed at "
                  "time 0", missing)
    return pl.col("start_ts").cast(pl.Int64).fill_null(0)


def duration() -> pl.Expr:
    return pl.coalesce(
        pl.col("duration_ns").cast(pl.Int64, strict=False),
        pl.col("end_ts").cast(pl.Int64, strict=False) - pl.col("start_ts").cast(pl.Int64),
    )


def json_int(col: str, keys: tuple[str, ...]) -> pl.Expr:
    c = pl.col(col).cast(pl.String)
    return pl.coalesce(
        [c.str.json_path_match(f"$.{k}").cast(pl.Int64, strict=False) for k in keys]
    )


def execution(df: pl.DataFrame) -> pl.Expr:
    """The execution key: ``exec_id`` from the extra attributes (``nc0:exec7``); for an
    ``nc_exec_running`` without one, its ``model_id`` and first flow id
    (``nc0:model7:execf1``, shared by its LNC=2 rows): flow ids are per-model counters,
    so two NEFFs can reuse one (Tilebench ``nki_timer.py`` keys by model and flow)."""
    exec_id = json_int("extra_attributes_json", _EXEC_KEYS).cast(pl.String)
    flow = pl.when(pl.col("name") == N.EXEC_EVENT).then(
        flows(df).list.first().str.strip_prefix(N.FLOW_PREFIX))
    nc = pl.col("nc_idx").cast(pl.Int64, strict=False)
    return pl.coalesce(
        N.execution_key(nc, exec_id),
        N.execution_key(nc, flow, json_int("extra_attributes_json", MODEL_KEYS)),
    )


def flows(df: pl.DataFrame) -> pl.Expr:
    """``flow_id`` as ``neuron:<id>`` strings, whether stored as a list or as text (ids
    separated by commas, in brackets or not, each in quotes or not)."""
    if "flow_id" not in df.columns:
        return pl.lit(None, pl.List(pl.String))
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
    if "name" not in df.columns or "start_ts" not in df.columns:
        missing = "name" if "name" not in df.columns else "start_ts"
        raise BadInput(f"{shown(folder)}/{SYSTEM}: no {missing} column")
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
    out = df.with_columns(
        layer.alias(S.LAYER),
        src.alias(S.CATEGORY),
        pl.col("name").cast(pl.String).fill_null("").alias(S.NAME),
        pl.when(duration().is_not_null()).then(pl.lit(S.SPAN))
        .otherwise(pl.lit(S.INSTANT)).alias(S.KIND),
        start_ns(df, diag, f"{shown(folder)}/{SYSTEM}").alias(S.START_NS),
        duration().fill_null(0).clip(0).alias(S.DUR_NS),
        pid.alias(S.PID), tid.alias(S.TID),
        pid_label.alias(S.PID_LABEL), tid_label.alias(S.TID_LABEL),
        nc.alias(S.DEVICE_COL),
        pl.col("framework_stream_id").cast(pl.Int64, strict=False).alias(S.STREAM),
        json_int("extra_attributes_json", _SIZE_KEYS).alias(S.BYTES),
        flows(df).alias(S.FLOW_IDS),
        execution(df).alias(S.EXECUTION),
        pl.col("instance_id").cast(pl.String).alias(S.INSTANCE_ID),
        json_int("extra_attributes_json", MODEL_KEYS).alias(S.MODEL_ID),
        # pcore_idx here is the physical core within the device (not 0/1 within nc_idx).
        pl.col("pcore_idx").cast(pl.Int64, strict=False).alias(S.DEVICE_CORE),
    )
    out = out.with_columns(
        pl.when(pl.col(S.LAYER) == S.DEVICE)
        # pcore_idx here is the physical core within the device (not 0/1 within nc_idx).
        .then(N.device_track(nc, pl.col(S.NAME), pl.col("pcore_idx"), "device core"))
        .alias(S.TRACK),
    )
    args = N.args_json(df, ["id", "pcore_idx", "worker_gid", *extra, "extra_attributes_json"],
                       raw_json="extra_attributes_json")
    return out.with_columns(args)


def device_rows(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """One device table's frame (with ``_nc``, start_ns, dur_ns) as event columns."""
    nc = pl.col("_nc")
    pcore = pl.col("pcore_idx").cast(pl.Int64, strict=False)
    df = with_defaults(df, list(_DEVICE_OPTIONAL))
    eng = N.engine(pl.col("engine").cast(pl.String).fill_null("unknown"))
    moved = pl.lit(None, pl.Int64)
    if table == "Instruction":
        name = pl.col("opcode").cast(pl.String).fill_null("instruction")
        lane = eng
    elif table == "DmaPacket":
        name = pl.col("queue_name").cast(pl.String).fill_null("dma")
        lane = pl.concat_str(pl.lit("dma / "), name)
        moved = pl.coalesce(*(pl.col(c).cast(pl.Int64, strict=False) for c in
                              ("transfer_bytes", "write_bytes", "read_bytes")))
    else:  # ActiveTime: merged busy intervals of an engine
        name = pl.concat_str(pl.lit("active "), eng)
        lane = pl.concat_str(eng, pl.lit(" / active"))
    used = {"_nc", S.START_NS, S.DUR_NS, *_DEVICE_USED}
    present = [c for c in df.columns if c not in used
               and not (c in _DEVICE_OPTIONAL and df.get_column(c).null_count() == df.height)]
    rows = N.device_spans(df, table, name, nc, lane, S.START_NS, S.DUR_NS, pcore.alias(S.PCORE),
                          moved.alias(S.BYTES), pcore=pcore)
    return rows.with_columns(N.args_json(df, present))


def executions(execinfo: list[dict[str, Any]] | None, nc: int | None) -> pl.DataFrame | None:
    """ExecutionInfo's device windows (``d_start``, ``d_end``) of NeuronCore ``nc`` (all
    rows when None or no ``nc_idx``), in execution order; a row whose times are not
    integers (:func:`neuron.int_value`) is left out. None without those columns."""
    if not execinfo or not {"execution_start_ts", "execution_end_ts"} <= execinfo[0].keys():
        return None
    rows = [r for r in execinfo
            if nc is None or "nc_idx" not in r or N.int_value(r["nc_idx"]) == nc]
    order = "execution_index" if "execution_index" in execinfo[0] else "execution_start_ts"

    def key(r: dict[str, Any]) -> tuple[bool, int]:
        v = N.int_value(r.get(order))
        return (v is not None, v or 0)

    windows = [(N.int_value(r.get("execution_start_ts")), N.int_value(r.get("execution_end_ts")))
               for r in sorted(rows, key=key)]
    return pl.DataFrame([w for w in windows if None not in w], schema={
        "d_start": pl.Int64, "d_end": pl.Int64}, orient="row")


# -- the reader -----------------------------------------------------------------------

BATCH_ROWS = 256 * 1024
#: System-table columns that place device time (:func:`_host_windows`).
_TIMING = ["name", "start_ts", "end_ts", "duration_ns", "nc_idx", "flow_id",
           "extra_attributes_json", "process_id"]
#: Side tables, by name: their rows (at most :data:`SIDE_ROWS`).
Side = dict[str, list[dict[str, Any]]]


@dataclass
class _Host:
    """What places device timelines on host time: the system table's ``nc_exec_running``
    per execution (``windows``: ``nc``, ``pid``, ``model``, ``start``, ``end``,
    ``execution``) and sync points (``syncs``: ``host_ts``, ``device_ts``), and the
    placements made so far, by NeuronCore label."""

    windows: pl.DataFrame
    syncs: pl.DataFrame
    placements: dict[str, Placement] = field(default_factory=dict)


def _host_windows(timing: list[pl.DataFrame]) -> _Host:
    """``nc_exec_running`` per execution and sync points, from the system table's
    ``nc_exec_running`` and ``timestamp_sync_point`` rows (columns :data:`_TIMING`)."""
    parts = [p for p in timing if p.height]
    df = (pl.concat(parts, how="diagonal_relaxed") if parts  # else: empty, typed alike
          else pl.DataFrame(schema=dict.fromkeys(_TIMING, pl.String)))
    df = df.with_columns(N.int_or_label(df.get_column("process_id"))[0].alias("_pid"))
    ex = df.filter(pl.col("name") == N.EXEC_EVENT).select(
        nc=pl.col("nc_idx").cast(pl.Int64, strict=False),
        pid=pl.col("_pid").cast(pl.Int64, strict=False),
        model=json_int("extra_attributes_json", MODEL_KEYS),
        start=pl.col("start_ts").cast(pl.Int64),
        end=pl.col("start_ts").cast(pl.Int64) + duration().fill_null(0),
        execution=execution(df),
    ).filter(pl.col("start").is_not_null()).with_columns(
        pl.coalesce(S.EXECUTION, pl.concat_str(  # no id: one per row
            pl.lit("nc"), pl.col("nc").cast(pl.String), pl.lit("@"),
            pl.col("start").cast(pl.String))).alias(S.EXECUTION))
    host = ex.group_by("nc", "pid", "model", S.EXECUTION).agg(pl.col("start").min(),
                                                              pl.col("end").max())
    syncs = df.filter(pl.col("name") == N.SYNC_EVENT).select(
        host_ts=pl.coalesce(json_int("extra_attributes_json", SYNC_HOST_KEYS),
                            pl.col("start_ts").cast(pl.Int64)),
        device_ts=json_int("extra_attributes_json", SYNC_DEVICE_KEYS),
    ).drop_nulls()
    return _Host(host.select("nc", "pid", "model", "start", "end", S.EXECUTION), syncs)


class ExplorerReader:
    name = "neuron-explorer"
    description = "Neuron Explorer Parquet folder (neuron-explorer view --output-format parquet)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return is_explorer_folder(path)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        if not is_explorer_folder(path):  # --format neuron-explorer on something else
            raise BadInput(f"{shown(path)}: not a Neuron Explorer folder (a folder of "
                           f"<table>.parquet files with {SYSTEM} or one of "
                           f"{', '.join(DEVICE_TABLES)})")
        return read_folder(path, None, diag, progress)


def read_folder(folder: Path, tool_schema: dict[str, object] | None, diag: Diagnostics,
                progress: Progress | None) -> Events:
    """The Explorer folder ``folder`` read; with ``tool_schema`` (what the tool that wrote
    it printed of its profile schema) in the trace's ``neuron`` metadata."""
    return Events.filled_by(ExplorerReader.name,
                            _Read(folder, diag, progress, tool_schema=tool_schema).batches)


class _Read:
    def __init__(self, folder: Path, diag: Diagnostics, progress: Progress | None,
                 prof: DeviceProfile | None = None,
                 tool_schema: dict[str, object] | None = None) -> None:
        self.folder = folder
        self.tool_schema = tool_schema
        self.prof = prof
        self.diag = diag
        self.progress = progress
        self.tables = tables(folder)
        self.total = sum(p.stat().st_size for ps in self.tables.values() for p in ps)
        self.done = 0
        self.noted: set[str] = set()

    def batches(self, ev: Events) -> Iterator[pa.RecordBatch]:
        side = self._side(SIDE_TABLES)
        majors: set[str] = set()  # unknown major versions warned about in this read
        version = schema_version(side.get("Metadata"), self.folder, self.diag, majors)
        timing: list[pl.DataFrame] = []  # the system rows that place device time
        for frame in self._frames(SYSTEM):
            yield N.to_batch(system_rows(frame, self.diag, self.folder))
            timing.append(with_defaults(frame, _TIMING).select(_TIMING)
                          .filter(pl.col("name").is_in([N.EXEC_EVENT, N.SYNC_EVENT])))
        host = _host_windows(timing)
        if self.tables.keys() & set(DEVICE_TABLES):
            yield from self.device_batches(
                side, host, profile_nc(self.folder, side.get("Metadata"), self.diag))
        profiles = device_profiles(self.folder, side.get("DeviceProfileList"), self.diag)
        for prof in profiles:
            sub = _Read(prof.folder, self.diag, None, prof)
            sub_side = sub._side(("Metadata", "ExecutionInfo"))
            if sub_side.get("Metadata"):
                schema_version(sub_side["Metadata"], prof.folder, self.diag, majors)
            nc = (prof.nc_id if prof.nc_id is not None
                  else profile_nc(prof.folder, sub_side.get("Metadata"), self.diag))
            yield from sub.device_batches(sub_side, host, nc)
        ev.trace = {"neuron": {
            "format": "explorer-parquet",
            "profile_schema_version": version,
            "tables": side,
            "tables_read": sorted(t for t in self.tables if t in (SYSTEM, *DEVICE_TABLES)),
            "tables_not_read": sorted(
                t for t in self.tables if t not in (SYSTEM, *DEVICE_TABLES, *SIDE_TABLES)
            ),
            **({"device_profiles": [p.describe() for p in profiles]} if profiles else {}),
            **({"tool_profile_schema": self.tool_schema} if self.tool_schema is not None else {}),
        }}
        ev.clock = {
            "base_time_ns": 0,
            "host": "SystemProfileEvents start_ts, epoch ns, exact",
            "device": {label: p.describe() for label, p in host.placements.items()},
            "note": "host and device clocks are not synchronised; device times are "
                    "placed on host time by the method given per NeuronCore",
        }

    # -- reading ------------------------------------------------------------------

    def _frames(self, table: str, columns: list[str] | None = None) -> Iterator[pl.DataFrame]:
        """The table's rows a batch at a time, each column of the type this reader reads
        it as (:func:`conform`); warnings about types are given on the full read only
        (``columns`` None), which every event table has once."""
        event_table = table in (SYSTEM, *DEVICE_TABLES)
        for f in self.tables.get(table, []):
            try:
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                twice = sorted({n for n in names if names.count(n) > 1})
                if twice:
                    raise BadInput(f"{shown(f)}: column {twice[0]!r} appears more than once")
                cols = None if columns is None else [c for c in columns if c in names]
                for b in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
                    df, notes = importable(b, f)
                    if event_table:
                        df, more = conform(df, table, f)
                        notes += more
                    if columns is None:
                        self._note(notes)
                    yield df
            except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
                raise BadInput(f"{shown(f)}: not a readable Parquet file "
                               f"({one_line(str(e))})") from None
            if columns is None:
                self.done += f.stat().st_size
                if self.progress is not None:
                    self.progress(self.done, self.total)

    def _note(self, notes: list[tuple[str, str, int]]) -> None:
        """Record ``(code, message, count)`` warnings, each message once per read."""
        for code, message, n in notes:
            if message not in self.noted:
                self.noted.add(message)
                self.diag.warn(code, message, n)

    def _side(self, names: tuple[str, ...]) -> Side:
        """The rows of the side tables ``names`` this folder has."""
        side: Side = {}
        for table in (t for t in names if t in self.tables):
            rows = side[table] = []
            for df in self._frames(table, None):
                rows.extend(df.head(SIDE_ROWS - len(rows)).to_dicts())
                if len(rows) >= SIDE_ROWS:
                    self.diag.warn("side_table_truncated", f"{shown(self.folder)}: {table} "
                                   f"kept to its first {SIDE_ROWS} rows")
                    break
        return side

    # -- device tables ----------------------------------------------------------------

    def device_batches(self, side: Side, host: _Host,
                       nc_default: int | None) -> Iterator[pa.RecordBatch]:
        """This folder's device tables, placed on host time by ``host`` and this folder's
        ``side`` tables (``ExecutionInfo``; ``Metadata``: :func:`bridge`); rows without an
        ``nc_idx`` are NeuronCore ``nc_default``'s. With ``self.prof`` (a bound device
        folder) its rows carry the profile's instance and process."""
        prof = self.prof
        starts = self._device_starts()
        for table in DEVICE_TABLES:
            for df in self._frames(table):
                if "start_ts" not in df.columns:
                    raise BadInput(f"{shown(self.folder)}/{table}: no start_ts column")
                df = with_defaults(df, ["nc_idx", "end_ts", "duration_ns", "pcore_idx"])
                df = df.with_columns(
                    pl.coalesce(pl.col("nc_idx").cast(pl.Int64, strict=False),
                                pl.lit(nc_default, pl.Int64)).alias("_nc"),
                    start_ns(df, self.diag, f"{shown(self.folder)}/{table}").alias(S.START_NS),
                    duration().fill_null(0).clip(0).alias(S.DUR_NS),
                )
                for (nc,), part in df.group_by("_nc", maintain_order=True):
                    nc_i = None if nc is None else int(nc)  # type: ignore[call-overload]
                    label = (prof.label(nc_i) if prof
                             else "nc ?" if nc_i is None else f"nc {nc_i}")
                    if label not in host.placements:
                        host.placements[label] = self._placement(table, nc_i, side, host,
                                                                  starts)
                    rows = host.placements[label].apply(device_rows(table, part))
                    if prof is not None:
                        rows = rows.with_columns(
                            pl.lit(prof.instance_id, pl.String).alias(S.INSTANCE_ID),
                            pl.lit(prof.process_id, pl.Int64).alias(S.PID),
                            pl.lit(prof.model_id, pl.Int64).alias(S.MODEL_ID))
                    yield N.to_batch(rows)

    def _device_starts(self) -> pl.DataFrame:
        """The earliest ``start_ts`` per ``nc_idx`` (``nc``) of each device-table batch
        (``start``; ``has_nc``: whether the batch has an ``nc_idx``), read once for all
        the placements of the folder."""
        parts = [
            with_defaults(df, ["nc_idx"]).group_by(
                nc=pl.col("nc_idx").cast(pl.Int64, strict=False)
            ).agg(start=pl.col("start_ts").cast(pl.Int64).min(),
                  has_nc=pl.lit("nc_idx" in df.columns))
            for t in DEVICE_TABLES for df in self._frames(t, ["start_ts", "nc_idx"])
            if "start_ts" in df.columns
        ]
        return pl.concat(parts) if parts else pl.DataFrame(
            schema={"nc": pl.Int64, "start": pl.Int64, "has_nc": pl.Boolean})

    def _placement(self, table: str, nc: int | None, side: Side, host: _Host,
                   starts: pl.DataFrame) -> Placement:
        prof = self.prof
        if nc is not None:  # rows of this NeuronCore, or of a table that names none
            starts = starts.filter(~pl.col("has_nc") | (pl.col("nc") == nc))
        device_start = starts.select(pl.col("start").min()).item()
        windows = host.windows
        if prof is not None and prof.process_id is not None:
            # nc_idx is process-local: another process's NeuronCore 0 is not this one.
            windows = windows.filter(pl.col("pid").is_null() | (pl.col("pid") == prof.process_id))
        if prof is not None and prof.model_id is not None:
            # The profile is one model's: pair only with that model's executions.
            windows = windows.filter(pl.col("model").is_null()
                                     | (pl.col("model") == prof.model_id))
        ncs = windows.get_column("nc").unique().drop_nulls().to_list()
        if nc is not None:
            windows = windows.filter(pl.col("nc") == nc)
        elif len(ncs) > 1:
            windows = windows.clear()  # which NeuronCore's executions? unknown: do not guess
        p = place(device_start, executions(side.get("ExecutionInfo"), nc),
                  windows.drop("pid", "model"), host.syncs, bridge(side.get("Metadata")))
        if p.method == "none":
            self.diag.warn("device_clock_unplaced",
                           f"{shown(self.folder)}/{table}: nothing places NeuronCore {nc}'s "
                           "timeline on host time; device rows keep device-relative times")
        return p
