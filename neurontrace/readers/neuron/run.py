"""TorchNeuron run folders: one capture folder per process (rank), merged per rank.

Layout (formats.md §2)::

    OUT/<instance-id>_pid_<pid>/<timestamp>/
        trace.json | pytorch_trace.json | neuron_framework_trace_rank_<N>.json   framework
        ntrace.pb  trace_info.pb  *.neff  *.ntff                                 raw capture
        <anything>/profiles/global/<name>@latest/*.parquet                        converted
        system_profile.json, device-profile JSON, ...                             converted

Each capture folder becomes one source, converted to its own file under
``dest/rank=N/``. Its framework trace (Kineto) and its Neuron outputs are read into one
table: already converted outputs are used as they are; a capture with only raw files is
converted with ``neuron-explorer`` (see :mod:`.raw`). When a Kineto framework
trace is present, framework-source rows of the Neuron outputs are dropped (the same ops
twice would double every share) and counted as a warning; runtime calls then link to
the Kineto ops by nesting on the same thread, and hardware rows by flow or execution.

``rank``: the framework trace's ``distributedInfo.rank``, else ``rank_<N>`` in its file
name, else the capture's position in (instance, pid, timestamp) order.
``instance_id`` and ``pid`` come from the folder name where the rows have none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers import neuron as N
from neurontrace.readers.base import (
    Batch,
    Events,
    Flows,
    Progress,
    Reader,
    Source,
    rank_from_name,
)
from neurontrace.readers.jsonopen import read_head
from neurontrace.readers.kineto import KinetoReader
from neurontrace.readers.neuron.device_json import DeviceJsonReader, SummaryJsonReader
from neurontrace.readers.neuron.explorer import (
    ExplorerReader,
    bound_folders,
    is_explorer_folder,
    read_folder,
)
from neurontrace.readers.neuron.raw import SYSTEM_TRACE, explorer_output, pair_neff, view_args
from neurontrace.readers.neuron.system_json import LiveFetchReader, SystemJsonReader

PROCESS_DIR = re.compile(r"^(?P<instance>.+)_pid_(?P<pid>\d+)$")
#: Framework trace names, most preferred first.
FRAMEWORK_NAMES = tuple(re.compile(rf"^{stem}\.json(\.gz)?$")
                        for stem in ("trace", "pytorch_trace", r"neuron_framework_trace_rank_\d+"))
_JSON_READERS: tuple[Reader, ...] = (
    SystemJsonReader(), LiveFetchReader(), DeviceJsonReader(), SummaryJsonReader(),
)

MERGED_SCHEMA = pa.schema([
    *N.BATCH_SCHEMA, pa.field(S.EXTERNAL_ID, pa.int64()), pa.field(S.CORRELATION, pa.int64()),
])


@dataclass
class Capture:
    """What one capture folder holds."""

    folder: Path
    instance: str
    pid: int
    framework: Path | None = None
    converted: list[tuple[Reader, Path]] = field(default_factory=list)
    system_trace: Path | None = None
    pairs: list[tuple[Path, Path | None]] = field(default_factory=list)  # (ntff, neff)

    def describe(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "framework": str(self.framework) if self.framework else None,
            "converted": [{"format": r.name, "path": str(p)} for r, p in self.converted],
            "system_trace": str(self.system_trace) if self.system_trace else None,
            "ntff_neff": [[str(t), str(n) if n else None] for t, n in self.pairs],
        }


def capture_folders(path: Path) -> list[Path]:
    """The ``<instance>_pid_<pid>/<timestamp>/`` folders at or under ``path``."""
    if not path.is_dir():
        return []
    if PROCESS_DIR.match(path.parent.name):
        return [path]
    process_dirs = [path] if PROCESS_DIR.match(path.name) else sorted(
        d for d in path.iterdir() if d.is_dir() and PROCESS_DIR.match(d.name))
    return [t for d in process_dirs for t in ([d] if _flat(d) else sorted(d.iterdir()))
            if t.is_dir() and not t.name.startswith(".")]


def _flat(process_dir: Path) -> bool:
    """Whether ``process_dir`` holds its capture's files itself, with no timestamp
    folder (the layout ``neuron-explorer inspect`` writes; formats.md §3b)."""
    return any(f.is_file() and (f.name == SYSTEM_TRACE or f.suffix == ".ntff")
               for f in process_dir.iterdir())


def inspect(folder: Path) -> Capture:
    m = PROCESS_DIR.match(folder.parent.name) or PROCESS_DIR.match(folder.name)  # flat
    assert m is not None
    cap = Capture(folder, m.group("instance"), int(m.group("pid")))
    files = sorted(p for p in folder.rglob("*") if not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    cap.framework = next((f for p in FRAMEWORK_NAMES for f in files if p.match(f.name)), None)
    for f in files:
        if f.is_dir() and is_explorer_folder(f):
            cap.converted.append((ExplorerReader(), f))
        elif f.is_file() and f.name.endswith((".json", ".json.gz")) and f != cap.framework:
            head = read_head(f)
            reader = next((r for r in _JSON_READERS if r.sniff(f, head)), None)
            if reader is not None:
                cap.converted.append((reader, f))
        elif f.name == SYSTEM_TRACE:
            cap.system_trace = f
        elif f.suffix == ".ntff":
            cap.pairs.append((f, pair_neff(f)))
    # A view -d session's device folders are read with its system folder, not alone.
    bound = {b for r, f in cap.converted if isinstance(r, ExplorerReader)
             for b in bound_folders(f)}
    cap.converted = [(r, f) for r, f in cap.converted if f not in bound]
    return cap


class RunReader:
    name = "neuron-run"
    description = "TorchNeuron run folder (<instance>_pid_<pid>/<timestamp>/, one per rank)"
    #: Always writes a dataset folder (dest/rank=N/...), even for one rank.
    dataset = True

    def sniff(self, path: Path, head: bytes) -> bool:
        return bool(capture_folders(path))

    def read(self, path: Path, diag: Diagnostics, progress: Progress | None) -> Events:
        raise BadInput(f"{path}: a run folder is read through convert, one source per "
                       "capture (expand)")

    def expand(self, path: Path, cache: Path) -> list[Source]:
        caps = [inspect(f) for f in capture_folders(path)]
        caps.sort(key=lambda c: (c.instance, c.pid, c.folder.name))
        per_pid = Counter((c.instance, c.pid) for c in caps)
        order = {k: i for i, k in enumerate(per_pid)}  # a Counter keeps first-seen order
        sources = []
        for c in caps:
            name = f"{c.instance}_pid_{c.pid}"
            if per_pid[(c.instance, c.pid)] > 1:
                name += f"_{c.folder.name}"
            rank = rank_from_name(c.framework.name) if c.framework else None
            sources.append(Source(c.folder, self.name, partial(read_capture, c, cache), name,
                                  rank if rank is not None else order[(c.instance, c.pid)]))
        return sources


def read_capture(cap: Capture, cache: Path, diag: Diagnostics,
                 progress: Progress | None) -> Events:
    parts: list[tuple[str, Path, Events]] = []
    if cap.framework is not None:
        parts.append((KinetoReader.name, cap.framework,
                      KinetoReader().read(cap.framework, diag, progress)))
    # Without converted outputs: the session folder (system and device profiles), else each
    # NTFF with its NEFF, every one paired (view_args) before any is converted.
    if any(r.name in (ExplorerReader.name, SystemJsonReader.name, DeviceJsonReader.name)
           for r, _ in cap.converted):
        raws = []
    else:
        raws = [cap.folder] if cap.system_trace is not None else [t for t, _ in cap.pairs]
    paired = [(c, view_args(c)) for c in raws]
    converted = [explorer_output(args, c, cache) for c, args in paired]
    parts += [(reader.name, path, reader.read(path, diag, None)) for reader, path in cap.converted]
    parts += [(ExplorerReader.name, folder, read_folder(folder, schema, diag, None))
              for folder, schema in converted]  # with the schema, as a raw file's expand reads it
    return Events.filled_by(RunReader.name, lambda out: merge(parts, cap, out, diag))


def merge(parts: list[tuple[str, Path, Events]], cap: Capture, out: Events,
          diag: Diagnostics) -> Iterator[Batch]:
    """The batches of the parts as one stream on the first part's clock; ``out`` gets
    the other fields of the events.

    A Kineto part comes first: its ``start_ns`` are relative to its base time, known only
    once it is read; the Neuron parts (epoch ns) are then shifted by that base.
    """
    kineto = bool(parts) and parts[0][0] == KinetoReader.name
    base = 0
    dropped = 0
    for fmt, _, ev in parts:
        neuron_part = fmt != KinetoReader.name  # only the first part may be Kineto
        fill = {S.INSTANCE_ID: pa.scalar(cap.instance, pa.string()),
                **({S.PID: pa.scalar(cap.pid, pa.int64())} if neuron_part else {})}
        for b in ev.batches:
            if isinstance(b, Flows):  # a Kineto part's flow events, as they come
                yield b
                continue
            b = conform(b, base, fill)  # base is 0 until the Kineto part is read
            if neuron_part and kineto:
                keep = pc.not_equal(b.column(S.LAYER), S.FRAMEWORK)
                dropped += b.num_rows - pc.sum(keep).as_py() if b.num_rows else 0
                b = b.filter(keep)
            yield b
        if not neuron_part:
            base = int(ev.clock.get("base_time_ns") or 0)
            out.rank = ev.rank
        out.thread_names.update(ev.thread_names)
        out.process_names.update(ev.process_names)
    if dropped:
        diag.warn("framework_duplicate",
                  f"{cap.folder}: {dropped} framework-source row(s) of the Neuron system "
                  "trace dropped: the Kineto framework trace holds those ops", dropped)
    out.trace = {
        "neuron_run": cap.describe(),
        "parts": [{"format": fmt, "path": str(path), "trace": ev.trace}
                  for fmt, path, ev in parts],
    }
    out.clock = {
        "base_time_ns": base,
        "note": "parts on one clock: the framework trace's, Neuron host times (epoch ns) "
                "shifted to it; device placement per part below",
        "parts": [{"format": fmt, "path": str(path), **ev.clock} for fmt, path, ev in parts],
    }


def conform(b: pa.RecordBatch, shift: int, fill: dict[str, pa.Scalar]) -> pa.RecordBatch:
    """A batch of any reader, as a batch of :data:`MERGED_SCHEMA`: its ``start_ns`` less
    ``shift``, the nulls of the columns named in ``fill`` filled with their value."""
    cols = []
    for f in MERGED_SCHEMA:
        i = b.schema.get_field_index(f.name)
        arr = (b.column(i) if i >= 0 else pa.nulls(b.num_rows, f.type)).cast(f.type)
        if f.name == S.START_NS and shift:
            arr = pc.subtract(arr, shift)
        if f.name in fill and arr.null_count:
            arr = pc.fill_null(arr, fill[f.name])
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=MERGED_SCHEMA)
