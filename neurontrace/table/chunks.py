"""One large file decoded in parallel: chunks (byte ranges) of it, read by processes.

    {"traceEvents": [ e0, ... ek, | ek+1, ... em, | em+1, ... | ... | ...], "traceName": ...}
                      chunk 0      chunk 1         chunk 2      ...  (each smaller)

The reader says where its file may be cut (:class:`~neurontrace.readers.base.Divisible`);
each chunk is read by the reader's own code and spilled to its own Arrow IPC file, with
its narrow columns and flow events (:mod:`neurontrace.table.spill`). This process and the
worker processes take the chunks in order, each the next one as soon as it is free:
this process starts on chunk 0 at once, a worker once it has started. The chunks shrink
along the file (:func:`neurontrace.workers.splitting.targets`), so the processes finish
within a short time of each other whatever their speeds. Rows keep file order, chunk
after chunk, so the table is the one a whole read gives; the chunks' warnings, flows and
track names are merged in order.

A chunk that cannot be read on its own (a cut inside a string:
:class:`~neurontrace.readers.base.ChunkUnreadable`) or that meets bad input makes
:func:`read` answer None: the file is then read whole, which gives the whole read's table
or its error message; so parallel decoding never changes a result, only the time.
Compressed files are read whole (a gzip stream cannot be entered midway).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.base import Chunk, ChunkUnreadable, Divisible, Events, Progress
from neurontrace.table.spill import (
    SpilledFrames,
    SpillLimit,
    memory_rows,
    spill_all,
    temporary,
)
from neurontrace.workers import splitting
from neurontrace.workers.executors import Processes


def plan(reader: Divisible, path: Path) -> list[Chunk]:
    """The chunks to decode ``path`` in, or [] to read it whole."""
    n = splitting.processes(path)
    if n < 2:
        return []
    return reader.chunks(path, lambda first, size: splitting.targets(first, size, n))


@dataclass(frozen=True)
class Job:
    index: int
    reader: Divisible
    path: Path
    chunk: Chunk
    spill: Path
    limit: int  # rows whose narrow columns stay in memory (see neurontrace.table.spill)


@dataclass
class Result:
    index: int
    narrow: SpilledFrames | None  # None: the chunk could not be read
    flows: SpilledFrames = field(default_factory=SpilledFrames)
    summary: Any = None
    diag: Diagnostics = field(default_factory=Diagnostics)


@dataclass
class Spilled:
    """A file read (whole or in chunks) and spilled: its fields, the spill files in row
    order, the rows' narrow columns and the flow events the reader streamed."""

    events: Events
    spills: list[Path]
    narrow: SpilledFrames
    flows: SpilledFrames

    def discard(self) -> None:
        for path in self.spills:
            path.unlink(missing_ok=True)
        self.narrow.discard()
        self.flows.discard()


def read_chunk(job: Job, progress: Progress | None = None, here: bool = False) -> Result:
    """Decode one chunk and spill its rows (runs in a worker process, or ``here``).

    In a worker process every narrow column and flow event goes to a file too: the
    result then crosses to this process as a few paths, not as pickled frames read from
    a pipe by a thread that waits for the GIL while this process decodes."""
    limit = job.limit if here else 0
    diag = Diagnostics()
    part = job.reader.read_chunk(job.path, job.chunk, diag, progress)
    try:
        narrow, flows = spill_all(part.batches, job.spill, limit)
    except BaseException as e:
        # read whole again, unless over the spill's limit (a whole read would meet it too)
        if isinstance(e, (ChunkUnreadable, BadInput)) and not isinstance(e, SpillLimit):
            return Result(job.index, None)
        raise
    return Result(job.index, narrow, flows, part.summary, diag)


def read(reader: Divisible, path: Path, chunks: list[Chunk], diag: Diagnostics,
         progress: Progress | None, workdir: Path | None) -> Spilled | None:
    """Decode ``chunks`` of ``path`` in parallel; None when the file must be read whole
    (nothing of the chunks is left then)."""
    size = path.stat().st_size
    jobs = [Job(i, reader, path, chunk, temporary(workdir),
                _limit(chunk[0] or 0, chunk[1] or size, size))
            for i, chunk in enumerate(chunks)]
    results: list[Result | None] = [None] * len(jobs)
    errors: list[BaseException] = []
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    finished = [0]  # bytes of the chunks read so far, for progress
    lock = threading.Lock()  # keep() runs in this thread and in the workers' one

    def keep(r: Result) -> None:
        results[r.index] = r
        start, stop = jobs[r.index].chunk
        with lock:
            finished[0] += (stop or size) - (start or 0)
        if r.narrow is None:  # the file is read again whole: stop taking chunks
            _drain(todo)

    def others() -> None:
        try:
            Processes(splitting.workers() - 1, env=splitting.ONE_THREAD).share(
                read_chunk, todo, keep)
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

    thread = threading.Thread(target=others, name="neurontrace-chunks", daemon=True)
    thread.start()
    try:
        with contextlib.suppress(queue.Empty):  # till none is left
            while True:  # this process takes chunks too, from chunk 0 on
                keep(read_chunk(todo.get_nowait(), _shared(progress, finished), here=True))
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
        return None
    try:
        return join(reader, path, [r for r in results if r is not None],
                    [job.spill for job in jobs], diag)
    except BaseException:
        discard()
        raise


def join(reader: Divisible, path: Path, done: list[Result], spills: list[Path],
         diag: Diagnostics) -> Spilled:
    """The chunks' results (and spill files), in order, as one read of the file."""
    ev = reader.join(path, [r.summary for r in done])
    narrow, flows = SpilledFrames(), SpilledFrames()
    for r in done:
        diag.merge(r.diag)
        assert r.narrow is not None
        narrow.extend(r.narrow)
        flows.extend(r.flows)
    return Spilled(ev, spills, narrow, flows)


def _limit(start: int, stop: int, size: int) -> int:
    """Rows of a chunk read in this process whose narrow columns stay in memory (a
    worker's go to files): its share, by bytes, of :func:`~neurontrace.table.spill.memory_rows`,
    and half as much again (events are not spread evenly), so that the chunks together
    never hold much more than that."""
    return max(1, int(memory_rows() * (stop - start) / max(size, 1) * 1.5))


def _drain(todo: queue.SimpleQueue[Job]) -> None:
    """Take every job left, so that no process starts another."""
    with contextlib.suppress(queue.Empty):
        while True:
            todo.get_nowait()


def _shared(progress: Progress | None, finished: list[int]) -> Progress | None:
    """Progress of the whole file: the chunks read so far (by any process) and what this
    process has read of its current one."""
    if progress is None:
        return None
    return lambda done, total: progress(min(finished[0] + done, total or 0), total)
