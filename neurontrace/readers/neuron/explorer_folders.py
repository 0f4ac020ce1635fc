"""What a Neuron Explorer output holds, before any row is read: its tables, the device
folders a ``view -d`` session binds (``DeviceProfileList``), and what a folder's
``Metadata`` says (schema version, NeuronCore, the device clock's start).

A ``neuron-explorer view -d <session>`` writes one system folder (``SystemProfileEvents``,
``DeviceProfileList``, ...) and, beside it, one ``<device_profile_name>@latest`` folder per
``DeviceProfileList`` row (seen in Deep-Learning-Profiling-Tools/Tilebench
``tilebench/core/nki_timer.py``, run on trn2; the device folder's name is the schema's
``device_profile_name`` plus ``@latest``, a guess until a real session confirms it).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import shown
from neurontrace.readers import neuron as N

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
