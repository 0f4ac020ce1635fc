"""``manifest.json``: what a run folder holds and how it was made.

Every run folder (a study, each of its variants, each rank of a user's command) has one:
device and count, versions, workload and shapes, command line, host, rank, start time,
profiler settings, and the files written (paths relative to the folder, with sizes).
Written through a temporary file renamed into place.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from neurontrace.errors import BadInput
from neurontrace.io import atomic

NAME = "manifest.json"
#: Bumped when a field is removed or changes meaning.
FORMAT = 1


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def versions() -> dict[str, str | None]:
    from neurontrace import __version__
    from neurontrace.capture import neuron

    try:
        torch: str | None = dist_version("torch")
    except PackageNotFoundError:
        torch = None
    return {
        "neurontrace": __version__,
        "torch": torch,
        "torch_neuronx": neuron.version(),
        "python": platform.python_version(),
    }


def host() -> dict[str, Any]:
    return {"name": socket.gethostname(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "pid": os.getpid()}


def base(kind: str, argv: list[str] | None = None) -> dict[str, Any]:
    """The fields every manifest has; the caller adds the rest."""
    return {
        "manifest_format": FORMAT,
        "kind": kind,
        "command_line": list(sys.argv if argv is None else argv),
        "host": host(),
        "versions": versions(),
        "started_at": now(),
    }


def files(folder: Path) -> list[dict[str, Any]]:
    """Every file under ``folder`` (relative path and bytes), hidden temporaries left out."""
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if not p.is_file() or rel.as_posix() == NAME or any(
            part.startswith(".") for part in rel.parts
        ):
            continue
        out.append({"path": rel.as_posix(), "bytes": p.stat().st_size})
    return out


def write(folder: Path, data: dict[str, Any]) -> Path:
    """Write ``folder/manifest.json`` with the folder's current file list."""
    data = {**data, "files": files(folder)}
    with atomic.writing(folder / NAME) as tmp:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return folder / NAME


def read(folder: Path) -> dict[str, Any]:
    path = folder / NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{folder}: not a capture run folder (no {NAME})") from None
    except ValueError as e:
        raise BadInput(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a manifest (top level is not an object)")
    return data


def update(folder: Path, **fields: Any) -> dict[str, Any]:
    """Add ``fields`` to the manifest and refresh its file list."""
    data = {**read(folder), **fields}
    write(folder, data)
    return data
