"""The registry: the only place that knows every input format.

Detection tries the file name first, then the content (the first few KiB). Adding a
format means one module under ``readers/`` and one line in ``READERS``.
"""

from __future__ import annotations

from pathlib import Path

from neurontrace.errors import BadInput, UnknownFormat, shown
from neurontrace.readers.base import Events, Reader
from neurontrace.readers.exported import ExportReader
from neurontrace.readers.jsonopen import read_head
from neurontrace.readers.kineto import KinetoReader
from neurontrace.readers.neuron.device_json import DeviceJsonReader, SummaryJsonReader
from neurontrace.readers.neuron.explorer import ExplorerReader
from neurontrace.readers.neuron.raw import RawReader
from neurontrace.readers.neuron.run import RunReader
from neurontrace.readers.neuron.system_json import LiveFetchReader, SystemJsonReader

READERS: dict[str, Reader] = {
    "neurontrace-export": ExportReader(),  # before kineto: it is Kineto-shaped
    "kineto": KinetoReader(),
    "neuron-explorer": ExplorerReader(),
    "neuron-run": RunReader(),
    "neuron-raw": RawReader(),
    "neuron-system-json": SystemJsonReader(),
    "neuron-live-json": LiveFetchReader(),
    "neuron-device-json": DeviceJsonReader(),  # before summary-json: it holds a summary too
    "neuron-summary-json": SummaryJsonReader(),
}

__all__ = ["READERS", "Events", "Reader", "detect"]


def detect(path: Path, fmt: str | None = None) -> Reader:
    """The reader of ``path``: the one ``fmt`` names, else the first whose ``sniff``
    accepts it. Refused: a path that does not exist, and one that is neither a regular
    file nor a folder (a FIFO would block the read; UnknownFormat, so that a folder's
    walk skips it)."""
    if fmt is not None and fmt not in READERS:
        raise BadInput(
            f"--format {fmt!r} is not a known format (known: {', '.join(READERS)})"
        )
    if not path.exists():
        raise BadInput(f"{shown(path)}: no such file or folder")
    if not (path.is_dir() or path.is_file()):
        raise UnknownFormat(f"{shown(path)}: not a regular file or a folder; not read")
    if fmt is not None:
        return READERS[fmt]
    head = b"" if path.is_dir() else read_head(path)
    for reader in READERS.values():
        if reader.sniff(path, head):
            return reader
    if path.is_file() and path.stat().st_size == 0:
        raise UnknownFormat(f"{shown(path)}: empty file")
    raise UnknownFormat(
        f"{shown(path)}: not a format neurontrace reads (tried: {', '.join(READERS)})"
    )
