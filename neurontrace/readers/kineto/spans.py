"""One large trace decoded in parallel: spans of its event array, one per process.

    {"traceEvents": [ e0, e1, ... ek, | ek+1, ... em, | em+1, ... ], "traceName": ...}
                     span 0: this process | span 1: worker | span 2: worker

Each span is read by the code that reads a whole file (:class:`ArrayStream` with a
start and a stop, then :class:`Part`) and spilled to its own Arrow IPC file, in its own
process; this process reads the first span meanwhile, longer by what it reads while the
workers start. Rows keep file order, span after span, so the table is the one a serial
read gives; the spans' warnings, flows and track names are merged in order.

A cut is found by a byte pattern (``},`` then ``{``) that could sit inside a string:
the span that stops there proves it by ending on a whole event. When one does not, or a
span meets bad input, the file is read again serially, which gives the serial read's
table or its error message; so parallel decoding never changes a result, only the time.
Compressed files are read serially (a gzip stream cannot be entered midway).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.executors import READ_WORKERS, Processes
from neurontrace.readers.base import Events, Progress
from neurontrace.readers.jsonstream import (
    ArrayStream,
    Misaligned,
    array_start,
    cuts,
    outer_fields,
)
from neurontrace.readers.kineto import KEY, Part, finish
from neurontrace.readers.kineto.columns import Metadata
from neurontrace.spill import Frames, Held, memory_rows, spill_all, temporary

#: Files smaller than two of these are read in one go.
MIN_SPAN = 48 << 20
#: Processes per file unless ``$NEURONTRACE_READ_WORKERS`` says otherwise.
DEFAULT_MAX = 4
#: About what this process reads while a worker process starts (0.3-0.4 s).
LEAD = 64 << 20

#: Each span worker keeps to one core: Polars and Arrow would start a thread per CPU in
#: every process, which then contend for the same cores.
_ONE_THREAD = {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1"}

Span = tuple[int | None, int | None]  # (start, stop); None: the array's start / end


def workers() -> int:
    """Processes one file may be decoded by: ``$NEURONTRACE_READ_WORKERS``, else the
    CPUs this process may run on, at most :data:`DEFAULT_MAX` (each process holds about
    200 MiB besides its share of the rows)."""
    given = os.environ.get(READ_WORKERS, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(cpus, DEFAULT_MAX)


def plan(path: Path) -> list[Span]:
    """The spans to decode ``path`` in, or [] to read it serially."""
    n = workers()
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":  # gzip
                return []
    except OSError:
        return []
    parts = min(n, size // MIN_SPAN)
    if parts < 2:
        return []
    try:
        first = array_start(path, KEY)
    except BadInput:
        return []  # the serial read says what is wrong
    lead = min(LEAD, (size - first) // parts)
    rest = size - first - lead
    found = cuts(path, [first + lead + rest * i // parts for i in range(1, parts)])
    if not found:
        return []
    return list(zip([None, *found], [*found, None], strict=True))


@dataclass(frozen=True)
class Job:
    index: int
    path: Path
    start: int | None
    stop: int | None
    spill: Path
    limit: int  # rows whose narrow columns stay in memory (see neurontrace.spill)


@dataclass
class Result:
    index: int
    narrow: Frames | None  # None: the span could not be read (see ``failed``)
    failed: str = ""
    flows: Frames = field(default_factory=Frames)
    meta: Metadata = field(default_factory=Metadata)
    diag: Diagnostics = field(default_factory=Diagnostics)
    head: bytes = b""
    tail: tuple[bytes, int] | None = None


def read_span(job: Job, progress: Progress | None = None) -> Result:
    """Decode one span and spill its rows (runs in a worker process, or this one)."""
    diag = Diagnostics()
    part = Part(Held(job.spill.parent, job.limit, ".flows.arrow"))
    stream = ArrayStream(job.path, KEY, start=job.start, stop=job.stop)
    try:
        narrow = spill_all(part.rows(stream, job.path, diag, progress), job.spill, job.limit)
    except (Misaligned, BadInput) as e:
        part.flows.discard()
        return Result(job.index, None, failed=str(e))
    except BaseException:
        part.flows.discard()
        raise
    return Result(job.index, narrow, "", part.flows.finish(), part.meta, diag, stream.head,
                  stream.tail)


def spill(path: Path, spans: list[Span], diag: Diagnostics, progress: Progress | None,
          ev: Events, workdir: Path | None) -> tuple[list[Path], Frames]:
    """Decode ``spans`` of ``path`` in parallel; fill ``ev`` as a serial read would."""
    limit = max(1, memory_rows() // len(spans))  # every span's rows may come back here
    jobs = [Job(i, path, a, b, temporary(workdir), limit) for i, (a, b) in enumerate(spans)]
    results: list[Result | None] = [None] * len(jobs)
    errors: list[BaseException] = []

    def keep(r: Result) -> None:
        results[r.index] = r

    def others() -> None:
        try:
            Processes(len(jobs) - 1, always=True, env=_ONE_THREAD).run(read_span, jobs[1:], keep)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            errors.append(e)

    def discard() -> None:
        for job in jobs:
            job.spill.unlink(missing_ok=True)
        for r in results:
            if r is not None and r.narrow is not None:
                r.narrow.discard()
                r.flows.discard()

    thread = threading.Thread(target=others, name="neurontrace-spans", daemon=True)
    thread.start()
    try:
        keep(read_span(jobs[0], _scaled(progress, jobs[0].stop)))
    except BaseException:
        thread.join()
        discard()
        raise
    thread.join()
    if errors or any(r is None or r.narrow is None for r in results):
        discard()
        if errors and not isinstance(errors[0], BadInput):
            raise errors[0]
        return _serial(ev, workdir)
    done = [r for r in results if r is not None]
    meta = Metadata()
    flows = Frames()
    for r in done:
        diag.merge(r.diag)
        meta.merge(r.meta)
        flows.extend(r.flows)
    head, tail = done[0].head, done[-1].tail
    assert tail is not None  # the last span reads to the array's end
    finish(ev, path, outer_fields(path, KEY, head, *tail), flows, meta)
    narrow = Frames()
    for r in done:
        if r.narrow is not None:
            narrow.extend(r.narrow)
    return [job.spill for job in jobs], narrow


def _serial(ev: Events, workdir: Path | None) -> tuple[list[Path], Frames]:
    out = temporary(workdir)
    return [out], spill_all(ev.batches, out)


def _scaled(progress: Progress | None, stop: int | None) -> Progress | None:
    """Progress of the whole file, estimated from this process's span (the first)."""
    if progress is None or not stop:
        return progress
    return lambda done, total: progress(min(done * (total or 0) // stop, total or 0), total)
