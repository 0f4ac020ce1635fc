"""One large trace decoded in parallel: spans of its event array, shared by processes.

    {"traceEvents": [ e0, ... ek, | ek+1, ... em, | em+1, ... | ... | ...], "traceName": ...}
                      span 0       span 1          span 2       ...  (each smaller)

Each span is read by the code that reads a whole file (:class:`ArrayStream` with a
start and a stop, then :class:`Part`) and spilled to its own Arrow IPC file. This
process and the worker processes take the spans in order, each the next one as soon as
it is free: this process starts on span 0 at once, a worker once it has started. The
spans shrink along the file (each about ``1 / (2 * processes)`` of what is left), so
the processes finish within a small span of each other whatever their speeds. Rows keep
file order, span after span, so the table is the one a serial read gives; the spans'
warnings, flows and track names are merged in order.

A cut is found by a byte pattern (``},`` then ``{``) that could sit inside a string:
the span that stops there proves it by ending on a whole event. When one does not, or a
span meets bad input, the file is read again serially, which gives the serial read's
table or its error message; so parallel decoding never changes a result, only the time.
Compressed files are read serially (a gzip stream cannot be entered midway).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
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
from neurontrace.table.spill import (
    Budget,
    FrameSpiller,
    SpilledFrames,
    SpillLimit,
    memory_rows,
    spill_all,
    temporary,
)
from neurontrace.workers import splitting
from neurontrace.workers.executors import Processes

Span = tuple[int | None, int | None]  # (start, stop); None: the array's start / end


def plan(path: Path) -> list[Span]:
    """The spans to decode ``path`` in, or [] to read it serially."""
    n = splitting.processes(path)
    if n < 2:
        return []
    try:
        first = array_start(path, KEY)
    except BadInput:
        return []  # the serial read says what is wrong
    found = cuts(path, splitting.targets(first, path.stat().st_size, n))
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
    limit: int  # rows whose narrow columns stay in memory (see neurontrace.table.spill)


@dataclass
class Result:
    index: int
    narrow: SpilledFrames | None  # None: the span could not be read (see ``failed``)
    failed: str = ""
    flows: SpilledFrames = field(default_factory=SpilledFrames)
    meta: Metadata = field(default_factory=Metadata)
    diag: Diagnostics = field(default_factory=Diagnostics)
    head: bytes = b""
    tail: tuple[bytes, int] | None = None


def read_span(job: Job, progress: Progress | None = None, here: bool = False) -> Result:
    """Decode one span and spill its rows (runs in a worker process, or ``here``).

    In a worker process every narrow column and flow event goes to a file too: the
    result then crosses to this process as a few paths, not as pickled frames read from
    a pipe by a thread that waits for the GIL while this process decodes."""
    limit = job.limit if here else 0
    diag = Diagnostics()
    budget = Budget(job.spill.parent)  # the span's spill, narrow columns and flows
    part = Part(FrameSpiller(job.spill.parent, limit, ".flows.arrow", budget))
    stream = ArrayStream(job.path, KEY, start=job.start, stop=job.stop)
    try:
        narrow = spill_all(part.rows(stream, job.path, diag, progress), job.spill, limit,
                           budget)
    except SpillLimit:  # reading it again serially would only meet it again
        part.flows.discard()
        raise
    except (Misaligned, BadInput) as e:
        part.flows.discard()
        return Result(job.index, None, failed=str(e))
    except BaseException:
        part.flows.discard()
        raise
    return Result(job.index, narrow, "", part.flows.finish(), part.meta, diag, stream.head,
                  stream.tail)


def spill(path: Path, spans: list[Span], diag: Diagnostics, progress: Progress | None,
          ev: Events, workdir: Path | None) -> tuple[list[Path], SpilledFrames]:
    """Decode ``spans`` of ``path`` in parallel; fill ``ev`` as a serial read would."""
    size = path.stat().st_size
    jobs = [Job(i, path, a, b, temporary(workdir), _limit(a or 0, b or size, size))
            for i, (a, b) in enumerate(spans)]
    results: list[Result | None] = [None] * len(jobs)
    errors: list[BaseException] = []
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    finished = [0]  # bytes of the spans read so far, for progress
    lock = threading.Lock()  # keep() runs in this thread and in the workers' one

    def keep(r: Result) -> None:
        results[r.index] = r
        job = jobs[r.index]
        with lock:
            finished[0] += (job.stop or size) - (job.start or 0)
        if r.narrow is None:  # the file is read again serially: stop taking spans
            _drain(todo)

    def others() -> None:
        try:
            Processes(splitting.workers() - 1, always=True, env=splitting.ONE_THREAD).share(
                read_span, todo, keep)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            errors.append(e)
            _drain(todo)

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
        while True:  # this process takes spans too, from span 0 on
            try:
                job = todo.get_nowait()
            except queue.Empty:
                break
            keep(read_span(job, _shared(progress, finished), here=True))
    except BaseException:
        _drain(todo)
        thread.join()
        discard()
        raise
    thread.join()
    if errors or any(r is None or r.narrow is None for r in results):
        discard()
        if errors and (not isinstance(errors[0], BadInput) or isinstance(errors[0], SpillLimit)):
            raise errors[0]
        return _serial(ev, workdir)
    done = [r for r in results if r is not None]
    meta = Metadata()
    flows = SpilledFrames()
    for r in done:
        diag.merge(r.diag)
        meta.merge(r.meta)
        flows.extend(r.flows)
    head, tail = done[0].head, done[-1].tail
    assert tail is not None  # the last span reads to the array's end
    finish(ev, path, outer_fields(path, KEY, head, *tail), flows, meta)
    if ev.flow_files is None:  # read into memory by finish: the files are done with
        flows.discard()
    narrow = SpilledFrames()
    for r in done:
        if r.narrow is not None:
            narrow.extend(r.narrow)
    return [job.spill for job in jobs], narrow


def _limit(start: int, stop: int, size: int) -> int:
    """Rows of a span read in this process whose narrow columns stay in memory (a
    worker's go to files): its share, by bytes, of :func:`~neurontrace.table.spill.memory_rows`,
    and half as much again (events are not spread evenly), so that the spans together
    never hold much more than that."""
    return max(1, int(memory_rows() * (stop - start) / max(size, 1) * 1.5))


def _drain(todo: queue.SimpleQueue[Job]) -> None:
    """Take every job left, so that no process starts another."""
    try:
        while True:
            todo.get_nowait()
    except queue.Empty:
        pass


def _serial(ev: Events, workdir: Path | None) -> tuple[list[Path], SpilledFrames]:
    out = temporary(workdir)
    return [out], spill_all(ev.batches, out)


def _shared(progress: Progress | None, finished: list[int]) -> Progress | None:
    """Progress of the whole file: the spans read so far (by any process) and what this
    process has read of its current one."""
    if progress is None:
        return None
    return lambda done, total: progress(min(finished[0] + done, total or 0), total)
