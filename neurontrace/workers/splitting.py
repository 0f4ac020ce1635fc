"""How a large trace file is split into chunks (byte ranges) decoded by several processes.

The decoding itself is :mod:`neurontrace.table.chunks` (with the reader's cuts); this
module only decides which files are split, for how many processes, and where to aim the
cuts. It imports neither Arrow nor Polars, so that the command line can start the worker
processes (:func:`start_workers`) before it imports them itself: the workers then import
in parallel and are ready when the first chunk is.
"""

from __future__ import annotations

import os
from pathlib import Path

from neurontrace.workers import executors
from neurontrace.workers.executors import READ_WORKERS

#: Files smaller than two of these are read in one go; no chunk is smaller, unless it is
#: the last ...
MIN_CHUNK = 16 << 20
#: ... or the file is cut in more than this many.
MAX_CHUNKS = 16
#: Processes per file unless ``$NEURONTRACE_READ_WORKERS`` says otherwise.
DEFAULT_MAX = 4
#: Each chunk worker keeps to one core: Polars and Arrow would start a thread per CPU in
#: every process, which then contend for the same cores.
ONE_THREAD = {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1"}
#: Where the chunk workers' function lives (it is imported by each worker as it starts).
CHUNKS_MODULE = "neurontrace.table.chunks"


def workers() -> int:
    """Processes one file may be decoded by: 1 in a process that may not start any
    (:func:`~neurontrace.workers.executors.may_start_processes`), else
    ``$NEURONTRACE_READ_WORKERS``, else the CPUs this process may run on, at most
    :data:`DEFAULT_MAX` (each process holds about 200 MiB besides its share of the rows)."""
    if not executors.may_start_processes():
        return 1
    given = os.environ.get(READ_WORKERS, "").strip()
    if given.isdecimal() and int(given) > 0:
        return int(given)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(cpus or 1, DEFAULT_MAX)  # os.cpu_count: not Linux


def processes(path: Path) -> int:
    """How many processes decode ``path``: 1 for a small or compressed file (a gzip
    stream cannot be entered midway), else :func:`workers`."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":  # gzip
                return 1
    except OSError:
        return 1
    return workers() if size >= 2 * MIN_CHUNK else 1


def targets(first: int, size: int, n: int) -> list[int]:
    """Where to cut the bytes from ``first`` to ``size`` for ``n`` processes: each chunk
    about ``1 / (2n)`` of what is left after the ones before it, none smaller than
    :data:`MIN_CHUNK` or a :data:`MAX_CHUNKS`-th of the whole, but the last (at least
    half that)."""
    smallest = max(MIN_CHUNK, (size - first) // MAX_CHUNKS, 2)
    at, rest = first, size - first
    out = []
    while rest - smallest >= smallest // 2:
        step = max(rest // (2 * n), smallest)
        at, rest = at + step, rest - step
        out.append(at)
    return out


def start_workers(path: Path) -> None:
    """Start the worker processes that decoding ``path`` will ask for, now.

    A guess made before the file's format is known: if it is not read in chunks after
    all, the processes started end unused when this process does.
    """
    n = processes(path)
    if n > 1:
        executors.prestart(CHUNKS_MODULE, n - 1, ONE_THREAD)
