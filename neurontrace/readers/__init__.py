"""The registry: the only place that knows every input format.

Detection tries the file name first, then the content (the first few KiB). Adding a
format means one module under ``readers/`` and one line in ``READERS``.
"""

from __future__ import annotations

from pathlib import Path

from neurontrace.errors import BadInput, UnknownFormat
from neurontrace.readers.base import Events, Reader
from neurontrace.readers.exported import ExportReader
from neurontrace.readers.jsonstream import read_head
from neurontrace.readers.kineto import KinetoReader
from neurontrace.readers.neuron_device_json import DeviceJsonReader, SummaryJsonReader
from neurontrace.readers.neuron_json import LiveFetchReader, SystemJsonReader
from neurontrace.readers.neuron_parquet import ExplorerReader
from neurontrace.readers.neuron_raw import RawReader
from neurontrace.readers.neuron_run import RunReader

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
    if fmt is not None:
        try:
            return READERS[fmt]
        except KeyError:
            raise BadInput(
                f"--format {fmt!r} is not a known format (known: {', '.join(READERS)})"
            ) from None
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    head = b"" if path.is_dir() else read_head(path)
    for reader in READERS.values():
        if reader.sniff(path, head):
            return reader
    if path.is_file() and path.stat().st_size == 0:
        raise UnknownFormat(f"{path}: empty file")
    raise UnknownFormat(
        f"{path}: not a format neurontrace reads (tried: {', '.join(READERS)})"
    )
