"""A run's temporary files: one folder per run, next to the output, gone when it ends.

Every temporary file of one conversion (the reader's spill, the narrow columns and flow
events of each chunk, the sweep's buckets, the files of the worker processes, the
Parquet file before its rename) is made in one folder, :func:`run_folder`: created by
``tempfile.mkdtemp`` next to the output (the same file system, so that the space
checked is the space used and the finished file is renamed, not copied), named
``.neurontrace-tmp-<random>`` (mode 0700: private and unpredictable, also in a shared
folder such as ``/tmp``) and removed on every exit path: success, an exception,
``KeyboardInterrupt``, and ``SIGTERM`` (the command line makes it an exception,
:func:`sigterm_raises`, so that ``finally`` blocks run).

Only ``SIGKILL`` (or a power cut) can leave one behind. A run holds an exclusive
``flock`` on :data:`LOCK` inside its folder for as long as it lives (the kernel drops it
when the process dies), and every run first removes the folders of earlier runs in the
same place whose lock it can take without waiting, that is those no live process
holds (and only folders of its own user). A folder without its lock file (a run killed
between creating the folder and its lock, or half removed) is removed once it is
:data:`GRACE` seconds old.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from neurontrace.io.atomic import cannot_write

PREFIX = ".neurontrace-tmp-"
LOCK = "lock"
#: Seconds after which a run folder without a lock file counts as abandoned.
GRACE = 60.0
#: Cache of external converters (neuron-explorer): ``.neurontrace-cache`` next to the
#: output, or ``.neurontrace-cache-<uid>`` in a folder anyone may write to.
CACHE = ".neurontrace-cache"


def clean_stale(parent: Path) -> None:
    """Remove the run folders in ``parent`` that no live process holds (see the module
    doc)."""
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX)]
    except OSError:
        return
    for entry in entries:
        if _abandoned(entry):
            shutil.rmtree(entry.path, ignore_errors=True)


def _abandoned(entry: os.DirEntry[str]) -> bool:
    """Whether the run folder ``entry`` is this user's and held by no live process: its
    lock can be taken without waiting, or it has none and is :data:`GRACE` seconds old.
    (Once abandoned, a folder is never taken again: its lock may be let go before it
    is removed.)"""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False  # a symlink, a file, another user's: not ours to judge
    try:
        fd = os.open(Path(entry.path, LOCK), os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return time.time() - st.st_mtime > GRACE
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a live run holds it
    finally:
        os.close(fd)
    return True


@contextmanager
def run_folder(parent: Path | None, output: Path | None = None) -> Iterator[Path]:
    """A new run folder in ``parent`` (None: the system's temporary folder), locked while
    the block runs and removed with everything in it when it ends. Stale run folders in
    ``parent`` are removed first (:func:`clean_stale`). A folder that cannot be made
    there is BadInput naming ``output`` (default: ``parent``)."""
    where = Path(tempfile.gettempdir()) if parent is None else parent
    clean_stale(where)
    try:
        folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=where))
    except OSError as e:
        raise cannot_write(output or where, e) from None
    fd = -1
    try:
        # locked under another name, then renamed: a cleaner never sees it unlocked
        fd = os.open(folder / f"{LOCK}.new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(folder / f"{LOCK}.new", folder / LOCK)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


@contextmanager
def job_folder(run: str | os.PathLike[str] | None, parent: Path | None) -> Iterator[Path]:
    """A folder for one job's temporary files: a new one inside the run folder ``run``
    when that is here (this process, or a worker process on this machine), else a run
    folder of its own in ``parent`` (a job on another machine). Removed when it ends."""
    if run is not None and os.path.isdir(run):
        with tempfile.TemporaryDirectory(prefix="job-", dir=run, ignore_cleanup_errors=True
                                         ) as folder:
            yield Path(folder)
        return
    with run_folder(parent if parent is not None and parent.is_dir() else None) as folder:
        yield folder


@contextmanager
def cache_folder(parent: Path | None, run: Path) -> Iterator[Path]:
    """Where external converters keep their output between runs: ``parent/`` (None: the
    system's temporary folder) :data:`CACHE`, this user's.

    In a folder others may write to (``/tmp``), the name carries the user id, and the
    folder is made now, mode 0700 (removed again when the block ends if still empty);
    it must be this user's, not a symlink, and closed to others. Where that cannot be
    had (someone else made it first), a folder inside the run folder ``run`` is used
    instead, which lasts only for the run. A cached conversion is reused only when the
    content hashes its name carries are the input's (see :mod:`neurontrace.readers.neuron.raw`).
    """
    where = Path(tempfile.gettempdir()) if parent is None else parent
    try:
        shared = bool(os.stat(where).st_mode & stat.S_IWOTH)
    except OSError:
        shared = True
    if not shared:  # the user's own folder: made by the converter when it first runs
        path = where / CACHE
        foreign = path.is_symlink() or (path.exists() and (
            not path.is_dir() or path.stat().st_uid != os.geteuid()))
        yield _private(run) if foreign else path
        return
    path = where / f"{CACHE}-{os.geteuid()}"
    made, st = False, None
    for _ in range(3):  # another run may remove the folder it made between our two calls
        with suppress(OSError):  # there already, or not to be made (then lstat fails too)
            path.mkdir(mode=0o700)
            made = True
        with suppress(OSError):  # gone again (retried), or not to be looked at (private)
            st = os.lstat(path)
            break
    try:
        yield path if st is not None and private_folder(st) else _private(run)
    finally:
        if made:
            with suppress(OSError):
                path.rmdir()  # only when empty


def private_folder(st: os.stat_result) -> bool:
    """Whether ``st`` (from ``lstat``: a symlink is not) is a folder of this user's, closed
    to every other user."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _private(run: Path) -> Path:
    path = run / "cache"
    path.mkdir(exist_ok=True)
    return path


class Terminated(BaseException):
    """``SIGTERM`` arrived (see :func:`sigterm_raises`): a BaseException, like
    ``KeyboardInterrupt``, so that no ``except Exception`` stops it on its way out."""

    exit_code = 128 + signal.SIGTERM


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While the block runs (in the main thread), ``SIGTERM`` raises :class:`Terminated`
    in it, so that ``finally`` blocks remove temporary files; the handler before is put
    back after. Elsewhere than the main thread, nothing changes."""
    try:
        before = signal.getsignal(signal.SIGTERM)

        def handler(*_: object) -> None:  # (the signal's number, the frame it stopped)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one kills
            raise Terminated()

        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
