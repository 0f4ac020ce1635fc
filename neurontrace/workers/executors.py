"""Where ``convert``'s jobs run: in this process, in local worker processes, or on Ray.

An executor runs ``fn(job)`` for every job and hands each result to ``done`` in the
calling thread, as it arrives (not in job order). ``fn`` and the jobs must pickle (``fn``
by reference: a module-level function). On the first failure no further job is started;
the jobs already running finish (their outputs are kept, so a rerun resumes from them),
then that first error is raised.

Local workers are fresh interpreters (``python -m neurontrace.workers.executors``) fed pickled
jobs through pipes: ``multiprocessing`` children would re-run the caller's ``__main__``
or fork a process whose Arrow and Polars thread pools are running.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any, Protocol, TypeVar

from neurontrace.errors import BadInput, NeurontraceError, ToolMissing

J = TypeVar("J")
R = TypeVar("R")

EXECUTORS = ("local", "ray")
#: Environment variable: processes one trace file may be decoded by (default: the CPUs
#: this process may use). See :mod:`neurontrace.table.chunks`.
READ_WORKERS = "NEURONTRACE_READ_WORKERS"


class Executor(Protocol):
    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        ...


def executor_of(name: str = "local", jobs: int = 1, address: str | None = None) -> Executor:
    """``local`` with ``jobs`` processes (1: in this process), or ``ray`` at ``address``."""
    if name == "ray":
        return Ray(address)
    if name != "local":
        raise BadInput(f"--executor {name!r} is not known (known: {', '.join(EXECUTORS)})")
    if jobs < 1:
        raise BadInput(f"--jobs {jobs}: must be at least 1")
    return Processes(jobs) if jobs > 1 else Serial()


class Serial:
    """Every job in this process, in order."""

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        for job in jobs:
            done(fn(job))


class WorkerDied(NeurontraceError):
    """A worker process ended without answering (killed, out of memory)."""


class Processes:
    """Up to ``n`` worker processes, each taking the next job when it finishes one.

    A single job runs in this process, unless ``always`` (the caller is busy meanwhile).
    Workers never decode one file in parallel themselves (``NEURONTRACE_READ_WORKERS``
    is 1 there): the processes are the parallelism. ``env`` adds to their environment.
    Workers started ahead by :func:`prestart` for the same module and ``env`` are taken
    first.
    """

    def __init__(self, n: int, always: bool = False, env: dict[str, str] | None = None
                 ) -> None:
        self.n = n
        self.always = always
        self.env = dict(env or {})

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        if len(jobs) < (1 if self.always else 2):
            Serial().run(fn, jobs, done)
            return
        todo: queue.SimpleQueue[J] = queue.SimpleQueue()
        for job in jobs:
            todo.put(job)
        self.share(fn, todo, done, min(self.n, len(jobs)))

    def share(self, fn: Callable[[J], R], todo: queue.SimpleQueue[J],
              done: Callable[[R], None], n: int | None = None) -> None:
        """Run the jobs in ``todo`` in ``n`` (default ``self.n``) worker processes until
        it is empty. Other threads may take jobs from ``todo`` too (and run them
        themselves): the workers and they share the work as each is free."""
        results: queue.SimpleQueue[tuple[bool, Any] | None] = queue.SimpleQueue()
        stop = threading.Event()
        threads = [
            threading.Thread(target=_drive,
                             args=(fn, todo, results, stop, self.env),
                             daemon=True)
            for _ in range(self.n if n is None else n)
        ]
        for t in threads:
            t.start()
        error: BaseException | None = None
        try:
            running = len(threads)
            while running:
                item = results.get()
                if item is None:
                    running -= 1
                    continue
                ok, value = item
                if ok and error is None:
                    done(value)
                elif not ok and error is None:
                    error = value
                    stop.set()
        finally:
            stop.set()
            for t in threads:
                t.join()
        if error is not None:
            raise error


def _spawn(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A worker process that imports ``module`` before it says it is ready; its
    environment is this process's with ``env`` added."""
    return subprocess.Popen([sys.executable, "-m", "neurontrace.workers.executors", module],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, READ_WORKERS: "1", **env})


#: Worker processes started ahead (:func:`prestart`), with their module and the
#: environment variables they were given besides this process's.
_started: list[tuple[str, dict[str, str], subprocess.Popen[bytes]]] = []
_started_lock = threading.Lock()


def prestart(module: str, n: int, env: dict[str, str] | None = None) -> None:
    """Start ``n`` worker processes for functions of ``module`` now, for a
    :class:`Processes` run with the same ``env`` to take over instead of starting its
    own: the caller spends the time a worker takes to start (its imports) importing.
    Their environment is this process's as it is now, with ``env`` added.
    Workers never taken end when this process does."""
    extra = dict(env or {})
    with _started_lock:
        if not _started:
            atexit.register(_end_started)
        _started.extend((module, extra, _spawn(module, extra)) for _ in range(n))


def _take_started(module: str, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    with _started_lock:
        for i, (m, e, proc) in enumerate(_started):
            if m == module and e == env and proc.poll() is None:
                return _started.pop(i)[2]
    return None


def _end_started() -> None:
    with _started_lock:
        for _, _, proc in _started:
            proc.kill()
            proc.wait()
        _started.clear()


def _drive(fn: Callable[[Any], Any], todo: queue.SimpleQueue[Any],
           results: queue.SimpleQueue[tuple[bool, Any] | None], stop: threading.Event,
           env: dict[str, str]) -> None:
    """One worker process: send it jobs until none is left or ``stop`` is set.

    The worker imports ``fn``'s module, then says it is ready; only then is a job taken,
    so that a job waits for whoever is free first (another worker, or the caller)
    rather than for a process still starting."""
    proc = _take_started(fn.__module__, env) or _spawn(fn.__module__, env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.read(len(_READY)) != _READY:
            results.put((False, WorkerDied(
                f"a convert worker process did not start (exit status {proc.wait()})")))
            return
        while not stop.is_set():
            try:
                job = todo.get_nowait()
            except queue.Empty:
                break
            try:
                pickle.dump((fn, job), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                proc.stdin.flush()
                results.put(pickle.load(proc.stdout))
            except (EOFError, OSError, pickle.UnpicklingError):
                code = proc.poll()
                results.put((False, WorkerDied(
                    f"a convert worker process ended without answering (exit status {code})"
                )))
                break
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.wait()
        results.put(None)


def _portable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


#: What a worker process writes once it is ready for jobs.
_READY = b"ready\n"


def _serve(stdin: IO[bytes], stdout: IO[bytes], preload: Sequence[str] = ()) -> None:
    for module in preload:
        importlib.import_module(module)
    stdout.write(_READY)
    stdout.flush()
    while True:
        try:
            fn, job = pickle.load(stdin)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, fn(job))
        except Exception as e:
            answer = (False, _portable(e))
        pickle.dump(answer, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


class Ray:
    """One Ray task per job on the cluster at ``address`` (``ray.init(address=...)``).

    ``None`` uses ``$RAY_ADDRESS`` when set, else starts a local Ray instance; a Ray
    already initialised in this process is used as it is (and left running). Each task
    asks for one CPU; Ray retries a task whose worker died, not one that raised.
    """

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        try:
            import ray
        except ImportError:
            raise ToolMissing(
                "--executor ray needs Ray: pip install 'neurontrace[ray]'"
            ) from None
        started = not ray.is_initialized()
        if started:
            try:
                ray.init(address=self.address, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise BadInput(f"ray: cannot connect to {self.address or 'a cluster'}: "
                               f"{str(e).splitlines()[0]}") from None
        try:
            task = ray.remote(num_cpus=1, runtime_env={"env_vars": {READ_WORKERS: "1"}})(fn)
            pending = [task.remote(job) for job in jobs]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                try:
                    result = ray.get(ready[0])
                except ray.exceptions.RayTaskError as e:
                    for ref in pending:
                        ray.cancel(ref)
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, Exception):
                        raise cause from None
                    raise
                done(result)
        finally:
            if started:
                ray.shutdown()


if __name__ == "__main__":
    from neurontrace.workers.settings import arrow_without_pandas, before_imports

    before_imports()
    arrow_without_pandas()
    _stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    try:
        _serve(sys.stdin.buffer, _stdout, sys.argv[1:])
    except (BrokenPipeError, KeyboardInterrupt):
        pass
