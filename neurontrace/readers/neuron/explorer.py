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

This module reads a folder: what it holds before any row is read (its tables, the device
folders a session binds, what ``Metadata`` says), then its rows through
:mod:`.explorer_rows` (each column of an event table read as one type; table rows as event
columns) and :mod:`.clock` (device time placed on host time).

Columns this reader does not know go to ``args``; missing optional columns are null.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
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
from neurontrace.readers.neuron import explorer_rows as R
from neurontrace.readers.neuron.clock import Placement, place

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
    return folder.is_dir() and bool(tables(folder).keys() & R.EVENT_TABLES)


@dataclass(frozen=True)
class DeviceProfile:
    """A device folder of a ``view -d`` session, bound to its ``DeviceProfileList`` row."""

    device_profile_name: str
    folder: Path
    instance_id: str | None
    process_id: int | None
    nc_id: int | None
    session_id: int | None
    model_id: int | None


def device_profiles(folder: Path, rows: list[dict[str, Any]] | None,
                    diag: Diagnostics) -> list[DeviceProfile]:
    """The device folders bound to the system folder ``folder`` by its ``DeviceProfileList``
    ``rows``: ``<device_profile_name>@latest`` beside ``folder`` (in ``folder`` itself as a
    fallback). A row whose folder is missing is warned about and skipped."""
    out: list[DeviceProfile] = []
    for r in rows or []:
        name = r.get("device_profile_name")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            continue
        cands = [folder.parent / f"{name}@latest", folder / f"{name}@latest", folder / name]
        found = next((c for c in cands if c != folder and is_explorer_folder(c)), None)
        if found is None:
            diag.warn("device_profile_missing",
                      f"{shown(folder)}: DeviceProfileList names {name!r}, but no folder "
                      f"{name}@latest is beside it; its device rows are not read")
            continue
        inst = r.get("instance_id")
        ids = (N.int_value(r.get(k)) for k in ("process_id", "nc_id", "session_id", "model_id"))
        out.append(DeviceProfile(name, found, inst if isinstance(inst, str) else None, *ids))
    return out


def bound_folders(folder: Path) -> set[Path]:
    """The device folders the Explorer folder ``folder``'s ``DeviceProfileList`` binds
    (read with it; its warnings are given then)."""
    quiet = Diagnostics()
    try:
        side = _Read(folder, quiet, None)._side(("DeviceProfileList",))
    except BadInput:
        return set()  # refused, in one line, when the folder itself is read
    return {p.folder for p in device_profiles(folder, side.get("DeviceProfileList"), quiet)}


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
    if (not major.isdecimal() or int(major) not in KNOWN_MAJORS) and major not in majors:
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



BATCH_ROWS = 256 * 1024
#: Side tables, by name: their rows (at most :data:`SIDE_ROWS`).
Side = dict[str, list[dict[str, Any]]]


class ExplorerReader:
    name = "neuron-explorer"
    description = "Neuron Explorer Parquet folder (neuron-explorer view --output-format parquet)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return is_explorer_folder(path)

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        if not is_explorer_folder(path):  # --format neuron-explorer on something else
            raise BadInput(f"{shown(path)}: not a Neuron Explorer folder (a folder of "
                           f"<table>.parquet files with {R.SYSTEM} or one of "
                           f"{', '.join(R.DEVICE_TABLES)})")
        return read_folder(path, None, diag, progress)


def read_folder(folder: Path, tool_schema: dict[str, object] | None, diag: Diagnostics,
                progress: Progress | None) -> Events:
    """The Explorer folder ``folder`` read; with ``tool_schema`` (what the tool that wrote
    it printed of its profile schema) in the trace's ``neuron`` metadata."""
    return Events.filled_by(ExplorerReader.name,
                            lambda ev: _Read(folder, diag, progress).batches(ev, tool_schema))


class _Read:
    def __init__(self, folder: Path, diag: Diagnostics, progress: Progress | None,
                 prof: DeviceProfile | None = None) -> None:
        self.folder = folder
        self.prof = prof
        self.diag = diag
        self.progress = progress
        self.tables = tables(folder)
        self.total = sum(p.stat().st_size for ps in self.tables.values() for p in ps)
        self.done = 0
        self.noted: set[str] = set()

    def batches(self, ev: Events,
                tool_schema: dict[str, object] | None) -> Iterator[pa.RecordBatch]:
        side = self._side(SIDE_TABLES)
        majors: set[str] = set()  # unknown major versions warned about in this read
        version = schema_version(side.get("Metadata"), self.folder, self.diag, majors)
        timing: list[pl.DataFrame] = []  # the system rows that place device time
        for frame in self._frames(R.SYSTEM):
            yield N.to_batch(R.system_rows(frame, self.diag, self.folder))
            timing.append(R.timing_rows(frame))
        host = R.host_windows(timing)
        placements: dict[str, Placement] = {}  # by NeuronCore label, for all the folders
        if self.tables.keys() & set(R.DEVICE_TABLES):
            yield from self.device_batches(
                side, host, placements, profile_nc(self.folder, side.get("Metadata"), self.diag))
        profiles = device_profiles(self.folder, side.get("DeviceProfileList"), self.diag)
        for prof in profiles:
            sub = _Read(prof.folder, self.diag, None, prof)
            sub_side = sub._side(("Metadata", "ExecutionInfo"))
            if sub_side.get("Metadata"):
                schema_version(sub_side["Metadata"], prof.folder, self.diag, majors)
            nc = (prof.nc_id if prof.nc_id is not None
                  else profile_nc(prof.folder, sub_side.get("Metadata"), self.diag))
            yield from sub.device_batches(sub_side, host, placements, nc)
        ev.trace = {"neuron": {
            "format": "explorer-parquet",
            "profile_schema_version": version,
            "tables": side,
            "tables_read": sorted(self.tables.keys() & R.EVENT_TABLES),
            "tables_not_read": sorted(self.tables.keys() - R.EVENT_TABLES - set(SIDE_TABLES)),
            **({"device_profiles": [{**asdict(p), "folder": str(p.folder)} for p in profiles]}
               if profiles else {}),
            **({"tool_profile_schema": tool_schema} if tool_schema is not None else {}),
        }}
        ev.clock = {
            "base_time_ns": 0,
            "host": "SystemProfileEvents start_ts, epoch ns, exact",
            "device": {label: p.describe() for label, p in placements.items()},
            "note": "host and device clocks are not synchronised; device times are "
                    "placed on host time by the method given per NeuronCore",
        }

    # -- reading ------------------------------------------------------------------

    def _frames(self, table: str, columns: list[str] | None = None) -> Iterator[pl.DataFrame]:
        """The table's rows a batch at a time, each column of the type this reader reads
        it as (:func:`conform`); warnings about types are given on the full read only
        (``columns`` None), which every event table has once."""
        warn = self._warn if columns is None else lambda code, message, n: None
        for f in self.tables.get(table, []):
            try:
                pf = pq.ParquetFile(f)
                names = pf.schema_arrow.names
                twice = sorted({n for n in names if names.count(n) > 1})
                if twice:
                    raise BadInput(f"{shown(f)}: column {twice[0]!r} appears more than once")
                cols = None if columns is None else [c for c in columns if c in names]
                for b in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
                    df = R.importable(b, f, warn)
                    yield R.conform(df, table, f, warn) if table in R.EVENT_TABLES else df
            except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
                raise BadInput(f"{shown(f)}: not a readable Parquet file "
                               f"({one_line(str(e))})") from None
            if columns is None:
                self.done += f.stat().st_size
                if self.progress is not None:
                    self.progress(self.done, self.total)

    def _warn(self, code: str, message: str, n: int) -> None:
        """Warn, each message once per read."""
        if message not in self.noted:
            self.noted.add(message)
            self.diag.warn(code, message, n)

    def _side(self, names: tuple[str, ...]) -> Side:
        """The rows of the side tables ``names`` this folder has."""
        side: Side = {}
        for table in (t for t in names if t in self.tables):
            rows = side[table] = []
            for df in self._frames(table):
                rows.extend(df.head(SIDE_ROWS - len(rows)).to_dicts())
                if len(rows) >= SIDE_ROWS:
                    self.diag.warn("side_table_truncated", f"{shown(self.folder)}: {table} "
                                   f"kept to its first {SIDE_ROWS} rows")
                    break
        return side

    # -- device tables ----------------------------------------------------------------

    def device_batches(self, side: Side, host: tuple[pl.DataFrame, pl.DataFrame],
                       placements: dict[str, Placement],
                       nc_default: int | None) -> Iterator[pa.RecordBatch]:
        """This folder's device tables, placed on host time by ``host``
        (:func:`.host_windows`) and this folder's ``side`` tables (``ExecutionInfo``;
        ``Metadata``: :func:`bridge`), each NeuronCore's placement made once in
        ``placements``; rows without an ``nc_idx`` are NeuronCore ``nc_default``'s. With
        ``self.prof`` (a bound device folder) its rows carry the profile's instance and
        process."""
        prof = self.prof
        starts = self._device_starts()
        for table in R.DEVICE_TABLES:
            for df in self._frames(table):
                df = R.with_defaults(df, ["nc_idx", "end_ts", "duration_ns", "pcore_idx"])
                df = df.with_columns(
                    pl.coalesce(pl.col("nc_idx").cast(pl.Int64, strict=False),
                                pl.lit(nc_default, pl.Int64)).alias("_nc"),
                    *R.times(df, self.diag, f"{shown(self.folder)}/{table}"),
                )
                for (nc,), part in df.group_by("_nc", maintain_order=True):
                    nc_i = None if nc is None else int(nc)  # type: ignore[call-overload]
                    # the key of a placement: "nc 0", or "i-0abc pid 4242 nc 0" in a profile
                    label = (f"{prof.instance_id or '?'} pid {prof.process_id} " if prof
                             else "") + f"nc {'?' if nc_i is None else nc_i}"
                    if label not in placements:
                        placements[label] = self._placement(table, nc_i, side, host, starts)
                    rows = placements[label].apply(R.device_rows(table, part))
                    if prof is not None:
                        rows = rows.with_columns(
                            pl.lit(prof.instance_id, pl.String).alias(S.INSTANCE_ID),
                            pl.lit(prof.process_id, pl.Int64).alias(S.PID),
                            pl.lit(prof.model_id, pl.Int64).alias(S.MODEL_ID))
                    yield N.to_batch(rows)

    def _device_starts(self) -> pl.DataFrame:
        """The earliest ``start_ts`` per ``nc_idx`` (``nc``) of each device-table batch
        (``start``; ``has_nc``: whether the batch has an ``nc_idx``), read once for all
        the placements of the folder. Two columns, not the whole tables: on a 2 M-row,
        11-column ``Instruction`` table 0.04-0.16 s against 1.0-1.7 s."""
        parts = [
            R.with_defaults(df, ["nc_idx"]).group_by(
                nc=pl.col("nc_idx").cast(pl.Int64, strict=False)
            ).agg(start=pl.col("start_ts").cast(pl.Int64).min(),
                  has_nc=pl.lit("nc_idx" in df.columns))
            for t in R.DEVICE_TABLES for df in self._frames(t, ["start_ts", "nc_idx"])
        ]
        return pl.concat(parts) if parts else pl.DataFrame(
            schema={"nc": pl.Int64, "start": pl.Int64, "has_nc": pl.Boolean})

    def _placement(self, table: str, nc: int | None, side: Side,
                   host: tuple[pl.DataFrame, pl.DataFrame], starts: pl.DataFrame) -> Placement:
        prof = self.prof
        if nc is not None:  # rows of this NeuronCore, or of a table that names none
            starts = starts.filter(~pl.col("has_nc") | (pl.col("nc") == nc))
        device_start = starts.select(pl.col("start").min()).item()
        windows, syncs = host
        # nc_idx is process-local: another process's NeuronCore 0 is not this one; and the
        # profile is one model's: pair only with that model's executions.
        for col, want in (("pid", prof.process_id), ("model", prof.model_id)) if prof else ():
            if want is not None:
                windows = windows.filter(pl.col(col).is_null() | (pl.col(col) == want))
        if nc is not None:
            windows = windows.filter(pl.col("nc") == nc)
        elif windows.get_column("nc").drop_nulls().n_unique() > 1:
            windows = windows.clear()  # which NeuronCore's executions? unknown: do not guess
        p = place(device_start, R.executions(side.get("ExecutionInfo"), nc),
                  windows.drop("pid", "model"), syncs, bridge(side.get("Metadata")))
        if p.method == "none":
            self.diag.warn("device_clock_unplaced",
                           f"{shown(self.folder)}/{table}: nothing places NeuronCore {nc}'s "
                           "timeline on host time; device rows keep device-relative times")
        return p
