"""Decode the chunks of a big JSON array on all cores, in order, falling back safely.

The main process cuts the array into candidate slices (cheap, see
:meth:`ArrayStream.slices`) and worker processes decode and convert them. A slice is
trusted only if every slice before it decoded: then it starts on an element boundary,
and its own successful decode proves it ends on one. The first slice that fails (a cut
inside a string, a quirk the worker cannot repair, bad JSON) and everything after it is
redone by the sequential path, which extends cuts and reports errors with exact offsets.

Workers are fresh interpreters (``python -m neurontrace.readers.parallel``) fed through
pipes, not ``multiprocessing`` children: those would re-run the caller's ``__main__``
(a script without a main guard would recurse), and forking a process whose Arrow and
Polars thread pools are running is unsafe.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

from neurontrace.readers.jsonstream import ArrayStream, Decoded

R = TypeVar("R")

#: Files smaller than this are read in-process: starting workers costs more than it saves.
MIN_BYTES = 48 << 20
#: Slices in flight per worker.
DEPTH = 2


def workers() -> int:
    """Worker processes to use: $NEURONTRACE_WORKERS (``auto``: one per core), else 1."""
    env = os.environ.get("NEURONTRACE_WORKERS", "1")
    if env == "auto":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    return max(1, int(env))


class _Worker:
    def __init__(self, work: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "neurontrace.readers.parallel", work],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self.jobs: queue.Queue[tuple[bytes, int, str] | None] = queue.Queue()
        self.sender = threading.Thread(target=self._send, daemon=True)
        self.sender.start()

    def _send(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                job = self.jobs.get()
                pickle.dump(job, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
                if job is None:
                    break
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                stdin.close()
            except OSError:
                pass

    def result(self) -> Any:
        assert self.proc.stdout is not None
        try:
            return pickle.load(self.proc.stdout)
        except (EOFError, pickle.UnpicklingError):
            return None  # the worker died: redo sequentially

    def close(self) -> None:
        self.jobs.put(None)
        try:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()
        self.sender.join(timeout=10)


def decode_all(
    stream: ArrayStream,
    decode: Callable[[bytes], Any],
    finish: Callable[[Decoded[Any]], R],
    work: str,
) -> Iterator[R]:
    """Results for every chunk of ``stream``'s array, in file order.

    ``work`` names (``module:function``) a function ``(slice, offset, path) -> R | None``
    run in the workers, returning None when the slice does not decode; ``finish``
    converts a chunk decoded in this process.
    """
    n = workers()
    if n < 2 or stream.path.stat().st_size < MIN_BYTES:
        for chunk in stream.decoded(decode):
            yield finish(chunk)
        return
    pool = [_Worker(work) for _ in range(n)]
    resume: int | None = None
    order: list[tuple[int, _Worker]] = []  # (offset, worker) of slices in flight
    slices = stream.slices()
    try:
        k = 0
        for data, offset in slices:
            w = pool[k % n]
            k += 1
            w.jobs.put((data, offset, str(stream.path)))
            order.append((offset, w))
            if len(order) > DEPTH * n:
                offset0, w0 = order.pop(0)
                result = w0.result()
                if result is None:
                    resume = offset0
                    break
                yield result
        while resume is None and order:
            offset0, w0 = order.pop(0)
            result = w0.result()
            if result is None:
                resume = offset0
                break
            yield result
    finally:
        slices.close()
        for w in pool:
            w.close()
    start = stream.rest_offset if resume is None else resume
    for chunk in stream.decoded(decode, start=start):
        yield finish(chunk)


def _serve(work: str, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    module, _, name = work.partition(":")
    fn = getattr(importlib.import_module(module), name)
    while True:
        job = pickle.load(stdin)
        if job is None:
            return
        try:
            result = fn(*job)
        except Exception:  # any failure: the main process redoes it and reports
            result = None
        pickle.dump(result, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    try:
        _serve(sys.argv[1], sys.stdin.buffer, sys.stdout.buffer)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
