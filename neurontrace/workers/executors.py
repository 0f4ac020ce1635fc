"""Where ``convert``'s jobs run: in this process, in local worker processes, or on Ray.

An executor runs ``fn(job)`` for every job and hands each result to ``done`` in the
calling thread, as it arrives (not in job order). ``fn`` and the jobs must pickle (``fn``
by reference: a module-level function). On the first failure no further job is started;
the jobs already running finish (their outputs are kept, so a rerun resumes from them),
then that first error is raised.

Local workers are :class:`concurrent.futures.ProcessPoolExecutor` processes started
with ``spawn`` (fresh interpreters: forking a process whose Arrow and Polars thread pools
are running can deadlock). A worker that dies (killed, out of memory) fails the run with
:class:`WorkerDied`; Ctrl-C or SIGTERM here kills the workers at once (their temporary
files are in the run's folder, removed by the caller).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import queue
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from typing import Any, Protocol, TypeVar

from neurontrace.errors import BadInput, NeurontraceError, ToolMissing

J = TypeVar("J")
R = TypeVar("R")

EXECUTORS = ("local", "ray")
#: Environment variable: processes one trace file may be decoded by (default: the CPUs
#: this process may use). See :mod:`neurontrace.table.chunks`.
READ_WORKERS = "NEURONTRACE_READ_WORKERS"


def may_start_processes() -> bool:
    """False inside a daemonic process (a ``multiprocessing.Pool`` worker, a fuzzing or
    serving harness), which Python forbids to have children: work runs here instead."""
    return not multiprocessing.current_process().daemon


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
    return Processes(jobs) if jobs > 1 and may_start_processes() else Serial()


class Serial:
    """Every job in this process, in order."""

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        for job in jobs:
            done(fn(job))


class WorkerDied(NeurontraceError):
    """A worker process ended without answering (killed, out of memory)."""


class Processes:
    """Up to ``n`` worker processes, each taking the next job when it finishes one.

    A single job runs in this process. Workers never decode one file in parallel
    themselves (``NEURONTRACE_READ_WORKERS`` is 1 there): the processes are the
    parallelism. ``env`` adds to their environment. Workers started ahead by
    :func:`prestart` for the same module, ``env`` and number are taken instead of new ones.
    """

    def __init__(self, n: int, env: dict[str, str] | None = None) -> None:
        self.n = n
        self.env = dict(env or {})

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], done: Callable[[R], None]) -> None:
        if len(jobs) < 2 or not may_start_processes():
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
        themselves): the workers and they share the work as each is free.

        A job is taken from ``todo`` only when a worker is free (it has started, its
        imports done, or it has finished a job), so that a job waits for whoever is free
        first (another worker, or the caller) rather than for a process still starting.
        """
        n = self.n if n is None else n
        workers = _started.pop((fn.__module__, n, frozenset(self.env.items())), None) \
            or _Workers(fn.__module__, n, self.env)
        pending: set[Future[Any]] = set(workers.ready)
        error: BaseException | None = None
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    try:
                        value = f.result()
                    except BrokenProcessPool:
                        error = error or _died()
                    except Exception as e:  # noqa: BLE001 - the job's error, raised below
                        error = error or e
                    if error is not None:  # results ignored, no job started, after one
                        continue
                    if f not in workers.ready:  # a job's result, not a worker saying it started
                        done(value)
                    with suppress(queue.Empty):
                        job = todo.get_nowait()
                        try:
                            pending.add(workers.submit(fn, job))
                        except BrokenProcessPool:  # a worker died since this one answered
                            error = _died()
        except BaseException:
            workers.kill()
            raise
        finally:
            workers.shutdown(wait=True, cancel_futures=True)
        if error is not None:
            raise error


def _died() -> WorkerDied:
    return WorkerDied("a convert worker process ended without answering (killed, or out "
                      "of memory)")


def _initialize(env: dict[str, str]) -> None:
    """A worker process as it starts: no parallel decoding of its own, ``env`` set,
    Ctrl-C ends it at once (the calling process cleans up), our settings applied."""
    os.environ.update({READ_WORKERS: "1", **env})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from neurontrace.workers.settings import arrow_without_pandas, before_imports

    before_imports()
    arrow_without_pandas()


def _ready(module: str) -> int:
    """Import ``module`` (where the jobs' function lives); this process's id."""
    importlib.import_module(module)
    return os.getpid()


class _Workers(ProcessPoolExecutor):
    """``n`` worker processes (spawned, with ``env``) for functions of ``module``, started
    now: ``ready`` holds a call per process that answers once it has started
    (:func:`_ready`)."""

    def __init__(self, module: str, n: int, env: dict[str, str]) -> None:
        super().__init__(n, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_initialize, initargs=(dict(env),))
        # one call each: the pool starts a process per call while none is idle
        self.ready = [self.submit(_ready, module) for _ in range(n)]

    def kill(self) -> None:
        """End every worker process now (a job running is lost)."""
        for proc in list((self._processes or {}).values()):
            with suppress(OSError, ValueError):  # already gone, or closed
                proc.kill()


#: Workers started ahead (:func:`prestart`), by module, number and environment, not yet
#: taken. Those never taken end when this process does, as every pool of
#: ``concurrent.futures`` ends at exit (once its processes have started: a second or so).
_started: dict[tuple[str, int, frozenset[tuple[str, str]]], _Workers] = {}


def prestart(module: str, n: int, env: dict[str, str] | None = None) -> None:
    """Start ``n`` worker processes for functions of ``module`` now, for a
    :class:`Processes` run of ``n`` with the same ``env`` to take over instead of
    starting its own: the caller spends the time a worker takes to start (its imports)
    importing."""
    env = env or {}
    _started[(module, n, frozenset(env.items()))] = _Workers(module, n, env)


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
