"""One Kineto file decoded in parallel chunks (byte ranges) gives exactly the whole
read's table.

The chunks are forced on small files (``MIN_CHUNK`` 1 byte, three processes), so every
test below runs real worker processes.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace.cli.main import cli
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.readers.jsonlex import Misaligned, cuts
from neurontrace.readers.jsonouter import outer_fields
from neurontrace.readers.jsonstream import ArrayStream
from neurontrace.readers.kineto import KinetoReader
from neurontrace.table import chunks
from neurontrace.workers import executors, splitting

from support import FIXTURES, KINETO


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Chunks on any file; returns the log of fallbacks to the whole read taken."""
    monkeypatch.setattr(splitting, "MIN_CHUNK", 1)
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "3")
    fallbacks: list[str] = []
    parallel = chunks.read

    def logged(*args: Any) -> Any:
        done = parallel(*args)
        if done is None:
            fallbacks.append("serial")
        return done

    monkeypatch.setattr(chunks, "read", logged)
    return fallbacks


def chunks_of(path: Path) -> list[Any]:
    return chunks.plan(KinetoReader(), path)


def _serial_load(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[pa.Table, Diagnostics]:
    with monkeypatch.context() as m:
        m.setenv("NEURONTRACE_READ_WORKERS", "1")
        diag = Diagnostics()
        return neurontrace.load(path, diag=diag), diag


def _plain(src: Path, tmp: Path) -> Path:
    """``src`` uncompressed (chunks need a plain file)."""
    if src.suffix != ".gz":
        return src
    out = tmp / src.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


@pytest.mark.parametrize("name", [
    "kineto/cpu-mlp-training.json.gz",  # real torch CPU trace: nesting, steps, flows
    "capture/cuda/naive/trace.json.gz",  # real CUDA trace: runtime/device links
    "kineto/control-characters.json",  # repairs counted per chunk
    "kineto/huge-integers.json",
    "kineto/string-pid-tid.json",
    "kineto/unsorted-events.json",
])
def test_chunks_give_the_whole_reads_table(name: str, tmp_path: Path, forced: list[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(FIXTURES / name, tmp_path)
    assert len(chunks_of(path)) >= 2  # the parallel path is taken
    want, want_diag = _serial_load(path, monkeypatch)
    diag = Diagnostics()
    got = neurontrace.load(path, diag=diag)
    assert forced == []  # no fallback: the chunks themselves gave this
    assert got.equals(want)
    assert got.schema.metadata == want.schema.metadata  # trace fields, clock, warnings
    assert diag.counts == want_diag.counts


def test_chunks_shrink_along_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(splitting, "MIN_CHUNK", 10)
    monkeypatch.setattr(splitting, "MAX_CHUNKS", 100)
    first, size = 7, 1007
    cut = splitting.targets(first, size, 2)
    lengths = [b - a for a, b in zip([first, *cut], [*cut, size], strict=True)]
    assert lengths[0] == 1000 // 4  # a quarter of the array for the first of 2 processes
    assert lengths[:-1] == sorted(lengths[:-1], reverse=True)  # then less and less
    assert min(lengths[:-1]) == 10 and 5 <= lengths[-1] < 15  # down to MIN_CHUNK
    assert sum(lengths) == 1000
    monkeypatch.setattr(splitting, "MAX_CHUNKS", 4)  # no more than about this many
    assert len(splitting.targets(first, size, 2)) == 4 - 1
    assert splitting.targets(first, first + 14, 2) == []  # too small to cut


_READ_HERE: list[int] = []  # chunks read by this process (a worker has its own list)
_read_chunk = chunks.read_chunk


def _read_chunk_logged(job: chunks.Job, progress: Any = None, here: bool = False
                       ) -> chunks.Result:
    """read_chunk, logged. This process waits after chunk 0 until the worker has taken a
    chunk, and the worker is slow, so that both read some whatever their speeds."""
    _READ_HERE.append(job.index)
    result = _read_chunk(job, progress, here)
    marker = Path(os.environ["NT_TEST_WORKER_TOOK_ONE"])
    if os.getpid() != int(os.environ["NT_TEST_MAIN_PID"]):
        marker.touch()
        time.sleep(0.2)
    elif job.index == 0:
        for _ in range(3000):
            if marker.exists():
                break
            time.sleep(0.01)
    return result


def test_every_process_takes_chunks_as_it_is_free(
        tmp_path: Path, forced: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads chunk 0 and then, like the worker, the next chunk left."""
    path = _plain(FIXTURES / "kineto/cpu-mlp-training.json.gz", tmp_path)
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "2")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # workers import this
    monkeypatch.setenv("NT_TEST_WORKER_TOOK_ONE", str(tmp_path / "took"))
    monkeypatch.setenv("NT_TEST_MAIN_PID", str(os.getpid()))
    monkeypatch.setattr(chunks, "read_chunk", _read_chunk_logged)
    want, _ = _serial_load(path, monkeypatch)
    _READ_HERE.clear()
    got = neurontrace.load(path)
    n = len(chunks_of(path))
    assert n > 4 and _READ_HERE[0] == 0 and _READ_HERE == sorted(_READ_HERE)
    assert 1 < len(_READ_HERE) < n  # the worker read the others
    assert forced == [] and got.equals(want)


def _trace_with_string_across_the_middle(path: Path) -> None:
    """Events around one whose args hold ``}, {`` patterns over the middle of the file."""
    small = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1,
              "ts": 1000.0 + i, "dur": 0.5, "args": {"External id": i}} for i in range(20)]
    big = {"ph": "X", "cat": "cpu_op", "name": "big", "pid": 1, "tid": 1, "ts": 999.0,
           "dur": 30.0, "args": {"note": "}, {" * 20000}}
    path.write_text(json.dumps({"traceEvents": small[:10] + [big] + small[10:]}, indent=1))


def test_a_cut_inside_a_string_falls_back_to_the_whole_read(
        tmp_path: Path, forced: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    _trace_with_string_across_the_middle(path)
    text = path.read_bytes()
    opens = text.index(b'"note": "') + len(b'"note": "')
    inside = (opens, opens + len(b"}, {") * 20000)  # the string's characters
    plan = chunks_of(path)
    assert any(start is not None and inside[0] < start < inside[1] for start, _ in plan)
    want, _ = _serial_load(path, monkeypatch)
    got = neurontrace.load(path)
    assert forced == ["serial"]
    assert got.equals(want)


def test_a_cut_after_the_array_falls_back_to_the_whole_read(
        tmp_path: Path, forced: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A long top-level field after traceEvents (objects, commas): the last cut lands
    there, and the chunk before it meets the array's end instead of its stop."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1,
               "ts": 1000.0 + i, "dur": 0.5} for i in range(10)]
    after = [{"i": i, "pad": "x" * 40} for i in range(2000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": after}, indent=1))
    end = path.read_bytes().index(b'"deviceProperties"')
    assert any(start is not None and start > end for start, _ in chunks_of(path))
    want, _ = _serial_load(path, monkeypatch)
    got = neurontrace.load(path)
    assert forced == ["serial"]
    assert got.equals(want)
    assert b"deviceProperties" in (got.schema.metadata or {})[b"neurontrace.trace"]


def test_bad_input_in_a_later_chunk_is_the_whole_reads_error(
        tmp_path: Path, forced: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(KINETO / "cpu-mlp-training.json.gz", tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 9 // 10])  # truncated inside the last chunk
    with monkeypatch.context() as m:
        m.setenv("NEURONTRACE_READ_WORKERS", "1")
        with pytest.raises(BadInput) as serial:
            neurontrace.load(path)
    with pytest.raises(BadInput) as parallel:
        neurontrace.load(path)
    assert str(parallel.value) == str(serial.value)
    assert forced == ["serial"]


def test_array_stream_chunks_cover_the_array_once(tmp_path: Path) -> None:
    path = _plain(KINETO / "cpu-mlp-training.json.gz", tmp_path)
    size = path.stat().st_size
    whole = ArrayStream(path, b"traceEvents", block=1 << 16)
    everything = [e for c in whole.decoded(msgspec.json.decode) for e in c.value or []]
    cut = cuts(path, [size // 3, 2 * size // 3])
    assert len(cut) == 2
    bounds = list(zip([None, *cut], [*cut, None], strict=True))
    streams = [ArrayStream(path, b"traceEvents", block=1 << 16, start=a, stop=b)
               for a, b in bounds]
    parts = [[e for c in s.decoded(msgspec.json.decode) for e in c.value or []]
             for s in streams]
    assert all(parts) and sum(parts, []) == everything
    tail = streams[-1].tail
    assert streams[0].head and tail is not None
    outer = outer_fields(path, b"traceEvents", streams[0].head, *tail)
    assert outer == whole.outer and outer


def test_a_stop_inside_an_element_is_misaligned(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    _trace_with_string_across_the_middle(path)
    text = path.read_bytes()
    stop = text.index(b"}, {", text.index(b'"note"')) + 3  # a '{' inside the string
    with pytest.raises(Misaligned):
        list(ArrayStream(path, b"traceEvents", stop=stop).decoded(msgspec.json.decode))


def test_workers_follow_the_environment(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "1")
    assert splitting.workers() == 1
    monkeypatch.setattr(splitting, "MIN_CHUNK", 1)
    assert chunks_of(_plain(KINETO / "cpu-mlp-training.json.gz", tmp_path)) == []
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "6")
    assert splitting.workers() == 6  # given: more than the default cap is allowed
    monkeypatch.delenv("NEURONTRACE_READ_WORKERS")
    assert 1 <= splitting.workers() <= splitting.DEFAULT_MAX
    assert chunks_of(KINETO / "cpu-mlp-training.json.gz") == []  # gzip: serial


def _children() -> set[int]:
    """The ids of this process's live child processes (those of the executors' pools)."""
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def test_workers_started_ahead_are_taken_by_a_run_that_matches() -> None:
    before = _children()
    executors.prestart("posix", 1, {"NT_TEST": "a"})
    (a,) = _children() - before
    executors.prestart("posix", 1, {"NT_TEST": "b"})
    (b,) = _children() - before - {a}
    got: list[str] = []
    # os.readlink("/proc/self") answers the pid of the process that runs it
    executors.Processes(1, env={"NT_TEST": "a"}).run(
        os.readlink, ["/proc/self"] * 2, got.append)
    assert got == [str(a)] * 2  # taken, not started again
    assert _children() - before == {b}  # the other waits for a run that matches it
    got.clear()
    executors.Processes(1, env={"NT_TEST": "b"}).run(
        os.readlink, ["/proc/self"] * 2, got.append)
    assert got == [str(b)] * 2
    assert _children() == before


def test_workers_started_ahead_and_never_taken_end_with_the_process() -> None:
    code = ("import multiprocessing\nfrom neurontrace.workers import executors\n"
            "executors.prestart('posix', 2)\n"
            "print(*[p.pid for p in multiprocessing.active_children()])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    pids = [int(pid) for pid in out.split()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_that_dies_fails_the_run_and_leaves_no_process() -> None:
    """A worker killed mid-job (here it ends itself, as the OOM killer would) is
    WorkerDied, raised once the others have answered; no worker outlives the run."""
    before = _children()
    executors.prestart("posix", 2)
    pids = _children() - before
    assert len(pids) == 2
    with pytest.raises(executors.WorkerDied, match="ended without answering"):
        executors.Processes(2).run(os._exit, [9, 9, 9], lambda _: None)
    assert _children() == before  # the workers started ahead were taken, and ended
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_jobs_error_is_raised_after_the_others_finish(tmp_path: Path) -> None:
    """The first failure stops new jobs; those running finish; then it is raised, as
    the worker raised it."""
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        executors.Processes(2).run(os.stat, [missing, missing, str(tmp_path)], lambda _: None)


def test_the_command_line_starts_chunk_workers_before_it_imports(
        tmp_path: Path, forced: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import neurontrace.cli.convert as command

    path = _plain(KINETO / "cpu-mlp-training.json.gz", tmp_path)
    before = _children()
    events: list[str] = []
    prestart, imports = executors.prestart, command.arrow_without_pandas

    def logged(module: str, n: int, env: dict[str, str] | None = None) -> None:
        events.extend([module] * n)
        prestart(module, n, env)

    monkeypatch.setattr(executors, "prestart", logged)
    monkeypatch.setattr(command, "arrow_without_pandas",
                        lambda: events.append("pyarrow") or imports())
    r = CliRunner().invoke(cli, ["convert", str(path), str(tmp_path / "o.parquet")])
    assert r.exit_code == 0, r.output
    # 3 processes: 2 workers, started before pyarrow is first used, then taken
    assert events == [splitting.CHUNKS_MODULE, splitting.CHUNKS_MODULE, "pyarrow"]
    assert _children() == before  # taken by the run, and ended with it
    assert forced == []
    code = "import sys, neurontrace.cli.convert; print({'pyarrow', 'polars'} & set(sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "set()"  # nor does the module


def test_the_command_line_keeps_pandas_out(tmp_path: Path) -> None:
    """pyarrow would import pandas (a quarter second) on its first conversion of a
    Python value; the command line tells it once that pandas is absent. A stand-in
    pandas on the path records whether anything imported it."""
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    marker = tmp_path / "pandas-imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    code = (
        "import sys\n"
        "from neurontrace.cli.main import main\n"
        f"sys.argv = ['neurontrace', 'convert', {str(KINETO / 'nested-ops.json')!r}, "
        f"{str(tmp_path / 'o.parquet')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
    )
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    assert (tmp_path / "o.parquet").exists()
    assert not marker.exists()
    # still importable afterwards, by anything else
    subprocess.run([sys.executable, "-c", code + "import pandas\n"], check=True, env=env,
                   capture_output=True)
    assert marker.exists()


def _in_a_daemon(results: Any) -> None:
    """Run in a daemonic process: what it may start, and a two-job run of Processes."""
    from neurontrace.workers import executors, splitting

    got: list[int] = []
    executors.Processes(2).run(abs, [-1, -2], got.append)
    results.put((splitting.workers(), executors.may_start_processes(), sorted(got)))


def test_a_daemonic_process_decodes_and_runs_jobs_itself() -> None:
    # A multiprocessing.Pool worker (or a harness's daemon) may not have children:
    # convert there once failed with "daemonic processes are not allowed to have
    # children" (exit 1, found by tests/fuzzing.py); it now does the work itself.
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_in_a_daemon, args=(results,), daemon=True)
    proc.start()
    try:
        assert results.get(timeout=120) == (1, False, [1, 2])
    finally:
        proc.join(timeout=30)
