"""Hostile file-system situations: inputs are never touched, nothing is left behind.

Every case goes through the command line (click's runner in this process, or a
subprocess where a signal, a hang or a mount namespace is involved) and checks, besides
its own point, that the inputs are unchanged and that no file is left: the whole test
folder is listed (symlinks not followed, contents hashed) before and after.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import neurontrace
from neurontrace.cli.main import cli
from neurontrace.io import scratch
from neurontrace.readers.kineto import KinetoReader
from neurontrace.table import chunks, spill
from neurontrace.workers import splitting

from support import KINETO

TRACE = KINETO / "nested-ops.json"
EVENTS = 9  # in nested-ops.json
TMP = scratch.PREFIX


# -- helpers ---------------------------------------------------------------------------

def tree(root: Path) -> dict[str, str]:
    """Everything under ``root``, symlinks not followed: relative path -> what it is
    (a regular file by the hash of its bytes, and its mode)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            st = os.lstat(p)
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "symlink to " + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "folder"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = f"file {oct(st.st_mode)} " + hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = stat.filemode(st.st_mode)
    return out


def added(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """What appeared between two :func:`tree` listings; everything there before must be
    there still, unchanged."""
    assert {k: after.get(k) for k in before} == before, "an input or earlier file changed"
    return set(after) - set(before)


def invoke(*args: object, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def run(*args: object, timeout: float = 120, env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The command line in a subprocess (a hang fails the test after ``timeout``)."""
    return subprocess.run([*prefix, sys.executable, "-m", "neurontrace.cli.main",
                           *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line_error(stderr: str, code: int, *needles: str) -> None:
    """Exit 2 and exactly one line on stderr, saying ``needles``."""
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("neurontrace: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def refused(r: Result, *needles: str) -> None:
    one_line_error(r.stderr, r.exit_code, *needles)


def no_temporary(folder: Path) -> None:
    """No run folder, lock, staging folder or temporary file anywhere under ``folder``."""
    left = [p for p in folder.rglob("*") if p.name.startswith(".")]
    assert not left, left


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with one trace, ``in/t.json``, and a folder of two, ``run/``."""
    (tmp_path / "in").mkdir()
    shutil.copy(TRACE, tmp_path / "in" / "t.json")
    (tmp_path / "run").mkdir()
    for r in range(2):
        shutil.copy(TRACE, tmp_path / "run" / f"rank_{r}.json")
    return tmp_path


def rows(path: Path) -> int:
    return neurontrace.scan(path).collect().height


# -- class 1: inputs are never destroyed ------------------------------------------------

def test_convert_a_folder_into_itself_is_refused(work: Path) -> None:
    before = tree(work)
    refused(invoke("convert", work / "run", work / "run"), "is the input")
    refused(invoke("convert", work / "run", f"{work}/./in/../run/"), "is the input")
    assert tree(work) == before


def test_convert_a_trace_onto_itself_is_refused(work: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    before = tree(work)
    monkeypatch.chdir(work / "in")
    refused(invoke("convert", "t.json", "t.json"), "is the input")
    refused(invoke("convert", "./t.json", work / "in" / "t.json"), "is the input")
    assert tree(work) == before


def test_an_output_inside_an_input_folder_is_refused(work: Path) -> None:
    before = tree(work)
    refused(invoke("convert", work / "run", work / "run" / "out.parquet"), "inside the input")
    refused(invoke("convert", work / "run", work / "run" / "sub" / "ds"), "inside the input")
    assert tree(work) == before


def test_an_output_folder_holding_an_input_is_refused(work: Path) -> None:
    before = tree(work)
    refused(invoke("convert", work / "run" / "rank_0.json", work / "run" / "rank_1.json",
                   work / "run"), "holds the input")
    refused(invoke("convert", work / "in" / "t.json", work), "holds the input")
    assert tree(work) == before


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_a_link_to_the_input_as_output_is_refused(work: Path, link: str) -> None:
    out = work / "out.parquet"
    if link == "hard":
        os.link(work / "in" / "t.json", out)
    else:
        out.symlink_to(work / "in" / "t.json")
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", out), "is the input")
    assert tree(work) == before


def test_a_hard_link_to_a_file_inside_an_input_folder_as_output_is_refused(work: Path) -> None:
    out = work / "out.parquet"
    os.link(work / "run" / "rank_1.json", out)
    before = tree(work)
    refused(invoke("convert", work / "run", out), "hard link to a file in the input folder")
    assert tree(work) == before


def test_export_onto_its_input_is_refused(work: Path) -> None:
    parquet = work / "t.parquet"
    assert invoke("convert", work / "in" / "t.json", parquet).exit_code == 0
    before = tree(work)
    refused(invoke("export", work / "in" / "t.json", work / "in" / "t.json"), "is the input")
    refused(invoke("export", parquet, parquet), "is the input")
    assert tree(work) == before


def test_report_html_onto_its_input_is_refused(work: Path) -> None:
    ds = work / "ds"
    assert invoke("convert", work / "run", ds).exit_code == 0
    before = tree(work)
    refused(invoke("report", work / "in" / "t.json", "--html", work / "in" / "t.json"),
            "is the input")
    refused(invoke("report", ds, "--html", ds / "rank=0" / "page.html"), "inside the input")
    assert tree(work) == before


def test_a_device_node_as_output_is_refused_and_not_replaced(work: Path) -> None:
    # Never the real /dev/null as output: code with the bug (run as root) replaces it.
    # A symlink to it (a bug replaces the link), and where allowed a node of our own.
    null = work / "null.parquet"
    null.symlink_to(os.devnull)
    targets = [null]
    node = work / "node.parquet"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # as /dev/null
        targets.append(node)
    except OSError:
        pass  # not root: the symlink has to do
    before = tree(work)
    for target in targets:
        refused(invoke("convert", work / "in" / "t.json", target), "character device")
        refused(invoke("convert", work / "run", target), "character device")
        refused(invoke("export", work / "in" / "t.json", target), "character device")
        refused(invoke("report", work / "in" / "t.json", "--html", target),
                "character device")
        assert stat.S_ISCHR(os.stat(target).st_mode)
    assert tree(work) == before


def test_a_fifo_as_output_is_refused_and_not_replaced(work: Path) -> None:
    fifo = work / "out.parquet"
    os.mkfifo(fifo)
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", fifo), "a FIFO")
    refused(invoke("export", work / "in" / "t.json", fifo), "a FIFO")
    refused(invoke("report", work / "in" / "t.json", "--html", fifo), "a FIFO")
    assert tree(work) == before


# -- class 4 (FIFOs): never opened for reading --------------------------------------------

def test_a_fifo_as_input_is_refused_without_opening_it(work: Path) -> None:
    fifo = work / "in" / "pipe.json"
    os.mkfifo(fifo)
    before = tree(work)
    r = run("convert", fifo, work / "out.parquet", timeout=60)  # a read would hang
    one_line_error(r.stderr, r.returncode, "pipe.json", "is a FIFO")
    assert tree(work) == before


def test_a_fifo_inside_an_input_folder_is_skipped_with_a_warning(work: Path) -> None:
    os.mkfifo(work / "run" / "pipe.json")
    before = tree(work)
    r = run("convert", work / "run", work / "ds", "-v", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pipe.json: skipped (is a FIFO" in r.stderr
    assert rows(work / "ds") == 2 * EVENTS
    new = added(before, tree(work))
    assert {n for n in new if not n.startswith("ds/")} == {"ds"}
    no_temporary(work)


# -- class 9: odd entries in an input folder, inputs given twice ---------------------------

def test_dangling_and_looping_symlinks_in_a_folder_are_skipped_with_a_warning(
        work: Path) -> None:
    folder = work / "run"
    (folder / "dangling.json").symlink_to(folder / "missing.json")
    (folder / "loop.json").symlink_to("loop.json")
    (folder / "up").symlink_to(".", target_is_directory=True)  # a folder loop
    before = tree(work)
    r = invoke("convert", folder, work / "ds", "-v")
    assert r.exit_code == 0, r.output
    assert "dangling.json: skipped (a symlink to nothing)" in r.stderr
    assert "loop.json: skipped (too many levels of symbolic links)" in r.stderr
    assert "up: skipped (a folder already read" in r.stderr
    assert rows(work / "ds") == 2 * EVENTS  # each trace once, the rest converted
    assert "warning: skipped_entry: 3" in r.stderr
    added(before, tree(work))
    no_temporary(work)


def test_the_same_input_given_twice_is_converted_once(work: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    os.link(work / "in" / "t.json", work / "hard.json")
    before = tree(work)
    r = invoke("convert", "in/t.json", work / "in" / "t.json", "./in/../hard.json",
               "o.parquet")
    assert r.exit_code == 0, r.output
    assert "from 1 input(s)" in r.stderr
    assert pq.read_table(work / "o.parquet").num_rows == EVENTS  # one file, one trace
    r = invoke("convert", "run", "run/rank_1.json", "ds")
    assert r.exit_code == 0, r.output
    assert "from 2 input(s)" in r.stderr and rows(work / "ds") == 2 * EVENTS
    assert sorted(added(before, tree(work))) == [
        "ds", "ds/rank=0", "ds/rank=0/rank_0.parquet", "ds/rank=1",
        "ds/rank=1/rank_1.parquet", "o.parquet"]
    no_temporary(work)


# -- class 8: permissions ---------------------------------------------------------------

@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_get_the_mode_the_umask_gives(work: Path, mask: int, mode: int) -> None:
    before = tree(work)
    old = os.umask(mask)
    try:
        assert invoke("convert", work / "in" / "t.json", work / "t.parquet").exit_code == 0
        assert invoke("convert", work / "run", work / "ds").exit_code == 0
        assert invoke("export", work / "t.parquet", work / "t.trace.json").exit_code == 0
        assert invoke("report", work / "t.parquet", "--html", work / "t.html").exit_code == 0
    finally:
        os.umask(old)
    files = [work / "t.parquet", *(work / "ds").rglob("*.parquet"), work / "t.trace.json",
             work / "t.html"]
    assert len(files) == 5
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == mode, f
    assert stat.S_IMODE((work / "ds").stat().st_mode) == 0o777 & ~mask
    added(before, tree(work))
    no_temporary(work)


# -- class 2: nothing left behind ---------------------------------------------------------

_read_chunk = chunks.read_chunk
#: A FIFO on which a worker process writes a byte each time it has read a chunk.
CHUNK_READ_ENV = "NEURONTRACE_TEST_CHUNK_READ"
#: This process's end of that FIFO (read, and a writer kept open so that it never reads
#: as closed): set by the ``split`` fixture.
_chunk_read: list[int] = []


def _worker_first(job: chunks.Job, progress: object = None, here: bool = False
                  ) -> chunks.Result:
    """read_chunk; this process waits before its first chunk until a worker process has
    handed over narrow columns as a file (the files that were left behind): it looks
    each time a worker says on the FIFO that it has read a chunk, for a minute at most
    (then it reads, and the test fails for want of a worker's file)."""
    if not here:
        result = _read_chunk(job, progress, here)  # type: ignore[arg-type]
        _say_chunk_read(os.environ.get(CHUNK_READ_ENV))
        return result
    deadline = time.monotonic() + 60
    while not any(job.spill.parent.glob("*.narrow.arrow")):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select(_chunk_read[:1], [], [], left)[0]:
            break
        os.read(_chunk_read[0], 1 << 16)
    return _read_chunk(job, progress, here)  # type: ignore[arg-type]


def _say_chunk_read(fifo: str | None) -> None:
    """One byte on ``fifo`` when someone reads it (a full FIFO has said it already)."""
    if fifo is None:
        return
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # nobody reads it
        return
    try:
        os.write(fd, b".")
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[list[list[str]]]:
    """Every plain trace is decoded in parallel chunks by three processes, the workers
    reading most; the run folder's files when the chunks are read are recorded (there
    were files to clean up)."""
    fifo = tmp_path_factory.mktemp("fifo") / "chunk-read"
    os.mkfifo(fifo)
    ends = [os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), os.open(fifo, os.O_WRONLY)]
    monkeypatch.setattr(sys.modules[__name__], "_chunk_read", ends)
    monkeypatch.setenv(CHUNK_READ_ENV, str(fifo))
    monkeypatch.setattr(splitting, "MIN_CHUNK", 1)
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "3")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # workers import this
    monkeypatch.setattr(chunks, "read_chunk", _worker_first)
    seen: list[list[str]] = []
    real = chunks.join

    def join(reader: object, path: Path, done: list[chunks.Result], spills: object,
             diag: object) -> chunks.Spilled:
        files = [p for r in done for p in r.flows.pieces if isinstance(p, Path)]
        seen.append(sorted(p.name for p in files[0].parent.iterdir()) if files else [])
        return real(reader, path, done, spills, diag)  # type: ignore[arg-type]

    monkeypatch.setattr(chunks, "join", join)
    yield seen
    for fd in ends:
        os.close(fd)


def test_a_parallel_decoded_convert_leaves_no_file_and_nor_does_a_rerun(
        work: Path, split: list[list[str]]) -> None:
    plain = gzip.decompress((KINETO / "cpu-mlp-training.json.gz").read_bytes())
    (work / "in" / "t.json").write_bytes(plain)  # flows all along: files of them too
    assert len(chunks.plan(KinetoReader(), work / "in" / "t.json")) >= 3
    before = tree(work)
    out = work / "out" / "t.parquet"
    for args in ([], [], ["--force"]):
        r = invoke("convert", work / "in" / "t.json", out, *args)
        assert r.exit_code == 0, r.output
        assert added(before, tree(work)) == {"out", "out/t.parquet"}
    assert len(split) == 2  # converted, kept, converted again
    assert any(n.endswith(".narrow.arrow") for n in split[0]), split  # workers' files
    assert any(n.endswith(".flows.arrow") for n in split[0]), split
    no_temporary(work)


#: A convert that stops, once its spill file is written, until a signal comes (or its
#: stdin closes): it writes "spilled" to the file descriptor ``argv[1]`` when it gets
#: there (the rest of argv is the command line).
SLOW = """
import os, sys
from neurontrace.cli.main import main
import neurontrace.workers.splitting as splitting
from neurontrace.table import spill
ready = int(sys.argv[1])
splitting.MIN_CHUNK = int(sys.argv[2])
real = spill.SpilledFrames.finish
def finish(self):
    os.write(ready, b"spilled")
    os.close(ready)
    sys.stdin.read()
    return real(self)
spill.SpilledFrames.finish = finish
sys.argv = ["neurontrace", *sys.argv[3:]]
main()
"""


def slow_convert(*args: object, parallel: bool = False) -> subprocess.Popen[str]:
    """:data:`SLOW` started; returns once its spill is written (it says so on a pipe;
    the test fails if it has not within a minute)."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW, str(w), "1" if parallel else str(16 << 20),
             *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, pass_fds=(w,),
            env={**os.environ, "NEURONTRACE_READ_WORKERS": "3" if parallel else "1"})
    finally:
        os.close(w)
    try:
        said = os.read(r, 16) if select.select([r], [], [], 60)[0] else b""
    finally:
        os.close(r)
    if said != b"spilled":  # it ended (the pipe closed) or a minute passed
        proc.kill()
        pytest.fail(f"the slow convert never spilled: {proc.communicate()}")
    return proc


def run_folders(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{TMP}*"))


def test_sigterm_mid_convert_leaves_nothing(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    shutil.copy(KINETO / "cuda-launch-chain.json", work / "in" / "t.json")
    before = tree(work)
    proc = slow_convert("convert", work / "in" / "t.json", out / "t.parquet", parallel=True)
    held = run_folders(out)
    assert len(held) == 1 and any(held[0].rglob("*.spill.arrow"))  # files to clean up
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.splitlines() == ["neurontrace: terminated (SIGTERM)"]
    assert tree(work) == before


def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    before = tree(work)
    proc = slow_convert("convert", work / "in" / "t.json", out / "t.parquet")
    proc.kill()  # SIGKILL: nothing can clean up
    proc.communicate(timeout=60)
    assert len(run_folders(out)) == 1 and any(run_folders(out)[0].rglob("*.spill.arrow"))
    r = invoke("convert", work / "in" / "t.json", out / "t.parquet")
    assert r.exit_code == 0, r.output
    assert added(before, tree(work)) == {"out/t.parquet"}


def test_a_live_runs_temporary_folder_is_kept(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    before = tree(work)
    proc = slow_convert("convert", work / "in" / "t.json", out / "slow.parquet")
    try:
        live = run_folders(out)
        assert len(live) == 1
        r = invoke("convert", work / "in" / "t.json", out / "t.parquet")
        assert r.exit_code == 0, r.output
        assert run_folders(out) == live and any(live[0].rglob("*.spill.arrow"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert added(before, tree(work)) == {"out/t.parquet"}


def test_an_abandoned_run_folder_without_its_lock_is_removed_once_old(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    old, young = out / f"{TMP}old", out / f"{TMP}young"
    for folder in (old, young):
        folder.mkdir()
        (folder / "x.spill.arrow").write_bytes(b"spill")
    past = time.time() - 2 * scratch.GRACE
    os.utime(old, (past, past))
    r = invoke("convert", work / "in" / "t.json", out / "t.parquet")
    assert r.exit_code == 0, r.output
    assert run_folders(out) == [young]  # made a moment ago: perhaps not locked yet


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_another_users_run_folder_is_left_alone(work: Path) -> None:
    out = work / "out"
    out.mkdir()
    theirs = out / f"{TMP}theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    past = time.time() - 2 * scratch.GRACE
    os.utime(theirs, (past, past))
    assert invoke("convert", work / "in" / "t.json", out / "t.parquet").exit_code == 0
    assert run_folders(out) == [theirs]


# -- class 3: file-system conditions are exit 2 in one line -------------------------------

def test_an_output_that_is_a_folder_is_one_line_exit_2(work: Path) -> None:
    (work / "out").mkdir()  # a folder is a dataset's (issue 18); one not ours is refused
    (work / "out" / "notes.txt").write_text("keep me")
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", work / "out"), "not a neurontrace dataset")
    refused(invoke("export", work / "in" / "t.json", work / "out"))  # click says it
    assert tree(work) == before


def test_a_folder_that_is_not_a_dataset_is_not_replaced(work: Path) -> None:
    (work / "mine").mkdir()
    (work / "mine" / "notes.txt").write_text("keep me")
    before = tree(work)
    refused(invoke("convert", work / "run", work / "mine"), "not a neurontrace dataset",
            "notes.txt")
    assert tree(work) == before


def test_an_output_whose_parent_is_a_file_is_one_line_exit_2(work: Path) -> None:
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", work / "in" / "t.json" / "o.parquet"),
            "o.parquet", "cannot write")
    refused(invoke("convert", work / "run", work / "in" / "t.json" / "a" / "ds"),
            "cannot write")
    refused(invoke("export", work / "in" / "t.json", work / "in" / "t.json" / "t.trace"),
            "cannot write")
    assert tree(work) == before


def _read_only(folder: Path) -> tuple[str, ...] | None:
    """A command prefix under which ``folder`` is read-only, or None when none can be
    made here. Not root: none needed (``chmod`` does it). Root ignores modes, so the
    command runs in a mount namespace where ``folder`` is bound read-only."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return ()
    if shutil.which("unshare") is None:
        return None
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    prefix = ("unshare", "-m", "sh", "-c", script, str(folder))
    probe = subprocess.run([*prefix, "sh", "-c", f"! touch {folder}/probe 2>/dev/null"],
                           capture_output=True)
    return prefix if probe.returncode == 0 else None


def test_a_read_only_output_folder_is_one_line_exit_2(work: Path) -> None:
    ro = work / "ro"
    ro.mkdir()
    prefix = _read_only(ro)
    if prefix is None:
        pytest.skip("no way to make a read-only folder here (root without mount namespaces)")
    before = tree(work)
    try:
        for args in (["convert", work / "in" / "t.json", ro / "t.parquet"],
                     ["convert", work / "run", ro / "ds"],
                     ["export", work / "in" / "t.json", ro / "t.trace.json"]):
            r = run(*args, prefix=prefix)
            one_line_error(r.stderr, r.returncode, str(ro / Path(str(args[2])).name),
                           "cannot write")
            assert "read-only" in r.stderr or "permission denied" in r.stderr
    finally:
        ro.chmod(0o755)
    assert tree(work) == before


def test_a_255_byte_output_name_is_written_and_a_256_byte_one_is_exit_2(work: Path) -> None:
    before = tree(work)
    name = "x" * (255 - len(".parquet")) + ".parquet"
    r = invoke("convert", work / "in" / "t.json", work / name)
    assert r.exit_code == 0, r.output
    assert pq.read_table(work / name).num_rows == EVENTS
    assert invoke("convert", work / "in" / "t.json", work / name).exit_code == 0  # rerun
    long_ds = "d" * 255
    r = invoke("convert", work / "run", work / long_ds)
    assert r.exit_code == 0, r.output
    assert rows(work / long_ds) == 2 * EVENTS
    export = "e" * (255 - len(".json")) + ".json"
    assert invoke("export", work / name, work / export).exit_code == 0
    assert added(before, tree(work)) >= {name, long_ds, export}
    no_temporary(work)
    middle = tree(work)
    refused(invoke("convert", work / "in" / "t.json", work / ("y" * 256)),
            "file name too long")
    refused(invoke("export", work / name, work / ("y" * 256)), "file name too long")
    assert tree(work) == middle


# -- class 4: the spill is bounded ---------------------------------------------------------

def _bomb(path: Path, events: int = 100_000) -> Path:
    """A gzip file of ``events`` small events: 0.6 MB that inflate to 11 MB."""
    ev = ('{"ph":"X","cat":"cpu_op","name":"aten::mul","pid":1,"tid":1,"ts":%d,"dur":1,'
          '"args":{"External id":%d}}')
    body = ",".join(ev % (2 * i, i) for i in range(events))
    path.write_bytes(gzip.compress(
        ('{"schemaVersion":1,"traceEvents":[' + body + "]}").encode(), 1))
    return path


def test_a_gzip_bomb_of_events_stops_at_the_spill_limit_in_one_line(work: Path) -> None:
    bomb = _bomb(work / "in" / "bomb.json.gz")
    before = tree(work)
    r = invoke("convert", bomb, work / "out" / "b.parquet",
               env={"NEURONTRACE_SPILL_LIMIT": "1M"})
    refused(r, "bomb.json.gz", "more than 1.0 MiB of temporary files",
            "NEURONTRACE_SPILL_LIMIT=1M")
    assert tree(work) == before  # not even the output's folder
    r = invoke("convert", bomb, work / "out" / "b.parquet",
               env={"NEURONTRACE_SPILL_LIMIT": "1G"})  # raised: it goes through
    assert r.exit_code == 0, r.output
    assert pq.read_table(work / "out" / "b.parquet").num_rows == 100_000
    no_temporary(work)


def test_by_default_the_spill_may_take_half_the_free_space(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURONTRACE_SPILL_LIMIT", raising=False)
    monkeypatch.setattr(spill, "free_bytes", lambda folder: 2 << 20)  # a nearly full disk
    bomb = _bomb(work / "in" / "bomb.json.gz")
    before = tree(work)
    refused(invoke("convert", bomb, work / "b.parquet"), "bomb.json.gz",
            "more than 1.0 MiB", "half the 2.0 MiB free")
    assert tree(work) == before


def test_a_spill_limit_that_is_not_a_size_is_one_line_exit_2(work: Path) -> None:
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", work / "o.parquet",
                   env={"NEURONTRACE_SPILL_LIMIT": "lots"}), "NEURONTRACE_SPILL_LIMIT=lots")
    assert tree(work) == before


#: "²" is a digit to ``str.isdigit`` that ``int`` refuses; "٤" (Arabic-Indic four) a
#: decimal digit ``int`` reads.
SUPERSCRIPT_TWO, ARABIC_FOUR = "\u00b2", "\u0664"


@pytest.mark.parametrize("name, needle", [
    ("NEURONTRACE_SPILL_LIMIT", "not a size in bytes"),
    ("NEURONTRACE_MAX_TOKEN_BYTES", "is not a positive number of bytes"),
])
def test_a_size_setting_of_a_superscript_digit_is_one_line_exit_2(
        work: Path, name: str, needle: str) -> None:
    before = tree(work)
    refused(invoke("convert", work / "in" / "t.json", work / "o.parquet",
                   env={name: SUPERSCRIPT_TWO}), name, needle)
    assert tree(work) == before


@pytest.mark.parametrize("name", ["NEURONTRACE_MEMORY_ROWS", "NEURONTRACE_BUCKET_ROWS"])
def test_a_row_setting_of_a_superscript_digit_is_the_default(work: Path, name: str) -> None:
    r = invoke("convert", work / "in" / "t.json", work / "o.parquet",
               env={name: SUPERSCRIPT_TWO})
    assert r.exit_code == 0, r.output
    assert rows(work / "o.parquet") == EVENTS


def test_a_worker_count_of_a_superscript_digit_is_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURONTRACE_READ_WORKERS", raising=False)
    default = splitting.workers()
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", SUPERSCRIPT_TWO)
    assert splitting.workers() == default
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", ARABIC_FOUR)  # int() reads it: 4
    assert splitting.workers() == 4


def test_a_launcher_rank_of_a_superscript_digit_is_not_a_rank(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace.capture import session
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", SUPERSCRIPT_TWO)
    monkeypatch.setenv("WORLD_SIZE", SUPERSCRIPT_TWO)
    assert (session.rank(), session.world_size()) == (0, 1)


def test_an_explorer_schema_version_of_a_superscript_digit_is_warned_not_a_crash(
        tmp_path: Path) -> None:
    folder = tmp_path / "explorer"
    shutil.copytree(KINETO.parent / "neuron" / "explorer_required_only", folder)
    meta = pq.read_table(folder / "Metadata.parquet")
    i = meta.schema.get_field_index("profile_schema_version")
    meta = meta.set_column(i, "profile_schema_version",
                           pa.array([SUPERSCRIPT_TWO + ".4.0"] * meta.num_rows))
    pq.write_table(meta, folder / "Metadata.parquet")
    r = invoke("convert", "-v", folder, tmp_path / "o.parquet")
    assert r.exit_code == 0, r.output
    assert f"profile schema version {SUPERSCRIPT_TWO}.4.0" in r.output


# -- class 8: the external converter's cache ---------------------------------------------

STAND_IN = """#!{python}
import sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
with open({log!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
out = Path(sys.argv[sys.argv.index("--data-path") + 1]) / "profiles" / "global" / "c@latest"
out.mkdir(parents=True)
t0 = 1_735_689_600_000_000_000
pq.write_table(pa.table({{"name": ["nrt_execute"], "start_ts": [t0], "duration_ns": [200],
                          "trace_event_source": ["neuron_rt"], "process_id": [7],
                          "thread_id": [8], "nc_idx": [0]}}), out / "SystemProfileEvents.parquet")
pq.write_table(pa.table({{"profile_schema_version": ["12.1.0"]}}), out / "Metadata.parquet")
while "--ingest-only" not in sys.argv:  # like the real one: serves its UI until killed
    time.sleep(1)
"""


@pytest.fixture
def explorer(tmp_path_factory: pytest.TempPathFactory,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in ``neuron-explorer`` first on PATH; the log of its calls."""
    bin_dir = tmp_path_factory.mktemp("bin")
    log = bin_dir / "calls.log"
    exe = bin_dir / "neuron-explorer"
    exe.write_text(STAND_IN.format(python=sys.executable, log=str(log)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield log


def _ntff(folder: Path) -> Path:
    folder.mkdir()
    (folder / "neff_1_vnc_0.neff").write_bytes(b"SYNTHETIC NEFF")
    (folder / "1_vnc_0.ntff").write_bytes(b"SYNTHETIC NTFF")
    return folder / "1_vnc_0.ntff"


def test_a_cached_conversion_is_reused_only_for_the_same_bytes(work: Path,
                                                               explorer: Path) -> None:
    ntff = _ntff(work / "capture")
    out = work / "out" / "c.parquet"
    assert invoke("convert", ntff, out).exit_code == 0
    assert invoke("convert", ntff, out).exit_code == 0
    views = [c for c in explorer.read_text().splitlines() if "--data-path" in c]
    assert len(views) == 1  # the cache was used
    st = ntff.stat()
    ntff.write_bytes(b"SYNTHETIC NTFG")  # same size, same time: other bytes
    os.utime(ntff, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert invoke("convert", ntff, out).exit_code == 0
    views = [c for c in explorer.read_text().splitlines() if "--data-path" in c]
    assert len(views) == 2  # converted again


def test_the_cache_in_a_shared_folder_is_private_to_the_user(work: Path,
                                                             explorer: Path) -> None:
    shared = work / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    ntff = _ntff(work / "capture")
    assert invoke("convert", ntff, shared / "c.parquet").exit_code == 0
    cache = shared / f"{scratch.CACHE}-{os.geteuid()}"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and not cache.is_symlink()
    assert not (shared / scratch.CACHE).exists()
    assert str(cache) in explorer.read_text()


def test_a_cache_folder_someone_else_made_is_not_used(work: Path, explorer: Path) -> None:
    shared = work / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / f"{scratch.CACHE}-{os.geteuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)  # open to all: someone could swap what is inside
    ntff = _ntff(work / "capture")
    before = tree(work)
    r = invoke("convert", ntff, shared / "c.parquet")
    assert r.exit_code == 0, r.output
    assert str(planted) not in explorer.read_text()
    assert not any(planted.iterdir())
    assert added(before, tree(work)) == {"shared/c.parquet"}


def test_a_shared_cache_folder_another_run_removes_meanwhile_is_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs at once: the first made the shared cache folder and removes it (empty)
    as it ends, between the second's mkdir (exists) and its lstat (gone). Once, that
    was an internal error; the second run makes the folder again."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    path = shared / f"{scratch.CACHE}-{os.geteuid()}"
    path.mkdir(mode=0o700)  # the first run's
    real = os.lstat

    def first_run_ends(p: os.PathLike[str] | str) -> os.stat_result:
        if Path(p) == path and path.exists():
            path.rmdir()
        monkeypatch.setattr(scratch.os, "lstat", real)
        return real(p)

    monkeypatch.setattr(scratch.os, "lstat", first_run_ends)
    run = tmp_path / "run"
    run.mkdir()
    with scratch.cache_folder(shared, run) as cache:
        assert cache == path and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert not path.exists()  # made by this run, removed again when empty


# -- capture run folders ------------------------------------------------------------------

@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_a_capture_staging_folder_fits_a_255_byte_name_and_follows_the_umask(
        tmp_path: Path, mask: int) -> None:
    from neurontrace.capture import rundir

    out = tmp_path / ("r" * 255)
    old = os.umask(mask)
    try:
        staging = rundir.stage(out)
    finally:
        os.umask(old)
    try:
        assert staging.parent == tmp_path and staging.name.startswith(".")
        assert stat.S_IMODE(staging.stat().st_mode) == 0o777 & ~mask
        (staging / "manifest.json").write_text("{}")
        rundir.publish(staging, out)
        assert (out / "manifest.json").is_file()
    finally:
        rundir.discard(staging)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
