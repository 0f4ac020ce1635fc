"""Putting outputs in place without harming anything: never over an input, never over
what is not a file of ours, never half-written, never with private permissions.

- :func:`refuse_overlap`: an output that is, holds or lies inside an input is refused
  before anything is written. Paths are compared resolved (symlinks, ``./x`` and ``x``)
  and by identity (``st_dev``, ``st_ino``: hard links, bind mounts), never as strings.
- :func:`check_output`: an output that exists must be a regular file (or, where a
  folder is written, a folder); a device node, FIFO or socket is refused, never replaced.
- :func:`writing`: a temporary file renamed into place once complete (removed on any
  exception, ``KeyboardInterrupt`` included), with the mode any new file gets
  (:func:`new_temporary`: ``mkstemp`` would leave 0600), under a name that fits in
  :data:`NAME_MAX` bytes however long the destination's name.
- :func:`replace_dir`: a finished folder swapped into place.

Failures of the file system that are the user's to fix (a read-only folder, a parent
that is a file, a full disk) are :class:`~neurontrace.errors.BadInput` naming the output,
in one line.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import secrets
import shutil
import signal
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from neurontrace.errors import BadInput

#: Bytes a file name may have on the file systems we write to (Linux, macOS).
NAME_MAX = 255
#: Characters :func:`new_temporary` adds to a name (its random part).
_RANDOM = 8
#: Errors of a write that say the disk is full or read-only (never a bug of ours).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def new_temporary(parent: Path, name: str, tag: str, suffix: str = "", folder: bool = False
                  ) -> Path:
    """A new empty file (or ``folder``) ``<hidden name><8 random characters><suffix>`` in
    ``parent``, the hidden name :func:`hidden_name` of ``name`` and ``tag`` (so that the
    whole fits in :data:`NAME_MAX` bytes), made with the mode any new one gets (``0o666``,
    a folder ``0o777``, less the umask, as the kernel applies it): ``mkstemp`` and
    ``mkdtemp`` make theirs private (0600, 0700), which would stay on an output renamed
    into place."""
    prefix = hidden_name(name, tag, _RANDOM + len(os.fsencode(suffix)))
    while True:
        path = parent / f"{prefix}{secrets.token_hex(_RANDOM // 2)}{suffix}"
        try:
            if folder:
                os.mkdir(path, 0o777)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            continue  # another's name: draw again


def hidden_name(name: str, tag: str, room: int = 0) -> str:
    """``.<name>.<tag>``, or, when that and ``room`` more bytes would not fit in
    :data:`NAME_MAX` bytes, ``.nt-<hash of name>.<tag>`` (the same for the same name, so
    it can be found again)."""
    full = f".{name}.{tag}"
    if len(os.fsencode(full)) + room <= NAME_MAX:
        return full
    digest = hashlib.blake2b(os.fsencode(name), digest_size=8).hexdigest()
    return f".nt-{digest}.{tag}"


def first_line(e: BaseException) -> str:
    """The first line of an error's message (a filesystem's may run to several)."""
    return (str(e).splitlines() or [type(e).__name__])[0]


def reason(e: OSError) -> str:
    """What the system said of ``e``, on one line, lower case first (``permission
    denied``): its errno's text (pyarrow's errors carry theirs too), else the first line
    of its message."""
    why = os.strerror(e.errno) if e.errno is not None else first_line(e)
    return why[:1].lower() + why[1:]


def cannot_write(dst: os.PathLike[str] | str, e: OSError) -> BadInput:
    """The one-line error for an output that the file system refuses."""
    return BadInput(f"{os.fspath(dst)}: cannot write ({reason(e)})")


#: What a file is that is not a regular file, by the test of its mode that says so.
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def special_kind(mode: int) -> str | None:
    """What a file of ``mode`` is when it is neither a regular file nor a folder (a
    device, a FIFO, a socket), else None."""
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else _kind(mode)


def check_output(dst: Path, folder: bool | None = False) -> None:
    """Refuse an existing ``dst`` that is not a regular file (with ``folder``: not a
    folder; with None: neither); a missing one is fine. A symlink is judged by what it
    points to. A path the system refuses (a name too long) is refused too."""
    try:
        st = os.stat(dst)
    except FileNotFoundError:
        return
    except OSError as e:
        raise cannot_write(dst, e) from None
    if folder is not False and stat.S_ISDIR(st.st_mode):
        return
    if stat.S_ISREG(st.st_mode) and not folder:
        return
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{dst}: is a folder; one input writes one file (name a file, "
                       "or give several inputs to write a dataset folder)")
    if folder and stat.S_ISREG(st.st_mode):
        raise BadInput(f"{dst}: exists and is not a folder (several inputs make a folder)")
    raise BadInput(f"{dst}: exists and is {_kind(st.st_mode)}, not a regular file; "
                   "it is not replaced")


def make_parent(dst: Path) -> list[Path]:
    """Create the folder ``dst`` goes in; the folders created, outermost first (a
    parent that is a file, or that cannot be created, is BadInput)."""
    missing = list(itertools.takewhile(lambda p: not os.path.lexists(p), dst.parents))
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BadInput(f"{dst}: cannot write (a parent of it is a file, not a folder)") \
            from None
    except OSError as e:
        raise cannot_write(dst, e) from None
    return missing[::-1]


def remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (outermost first, as :func:`make_parent` gives them) that are
    empty, innermost first: what a failed run created and left unused."""
    for p in reversed(folders):
        try:
            p.rmdir()
        except OSError:
            return


def _identity(path: Path, follow: bool = True) -> tuple[int, int] | None:
    """(``st_dev``, ``st_ino``) of ``path`` (of a symlink itself unless ``follow``), or
    None when it cannot be had."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _lineage(path: Path) -> set[tuple[int, int]]:
    """The identities of ``path`` and of each existing folder above it."""
    return {ident for p in (path, *path.parents) if (ident := _identity(p)) is not None}


def _holds_link_to(folder: Path, ident: tuple[int, int]) -> bool:
    """Whether a file under ``folder`` (symlinks not followed) is ``ident``."""
    return any(_identity(Path(root, name), follow=False) == ident
               for root, _, files in os.walk(folder) for name in files)


def refuse_overlap(inputs: Iterable[os.PathLike[str] | str], output: os.PathLike[str] | str
                   ) -> None:
    """BadInput when ``output`` is an input, lies inside an input folder, or is a folder
    that holds an input: writing there would destroy the input.

    Compared by (``st_dev``, ``st_ino``) of the paths and of the folders above their
    resolved paths (an existing place has one identity however it is reached), so that
    a symlink, a hard link, a bind mount or another spelling of the same place is
    caught. Missing inputs are left to the reader to report.
    """
    out = Path(os.path.abspath(output))
    out_id = _identity(out)
    out_up = _lineage(out.resolve())  # out_id too, when it exists
    for given in inputs:
        src = Path(os.path.abspath(given))
        src_id = _identity(src)
        if src_id is None:
            continue
        if src_id == out_id:
            raise BadInput(f"{output}: is the input {given}; refusing to write over it")
        if os.path.isdir(src) and src_id in out_up:
            raise BadInput(f"{output}: lies inside the input folder {given}; write it "
                           "elsewhere")
        if out_id is not None and out_id in _lineage(src.resolve()):
            raise BadInput(f"{output}: holds the input {given}; writing there would "
                           "replace it")
        if out_id is not None and os.path.isdir(src) and os.path.isfile(out) \
                and os.stat(out).st_nlink > 1 and _holds_link_to(src, out_id):
            raise BadInput(f"{output}: is a hard link to a file in the input folder "
                           f"{given}; refusing to write over it")


@contextmanager
def writing(dst: Path, tmp_dir: Path | None = None) -> Iterator[Path]:
    """A temporary path to write ``dst``'s content to; renamed to ``dst`` when the block
    ends without an exception, removed otherwise (whatever the exception).

    The temporary file is made in ``tmp_dir`` when that is on ``dst``'s file system
    (a run's temporary folder, see :mod:`neurontrace.io.scratch`), else next to ``dst``;
    its name fits in :data:`NAME_MAX` bytes, and it has the mode a new file gets
    (:func:`new_temporary`).
    An existing ``dst`` that is not a regular file is refused (:func:`check_output`).
    """
    check_output(dst)
    make_parent(dst)
    there = _identity(tmp_dir) if tmp_dir is not None else None
    here = _identity(dst.parent)
    folder = tmp_dir if tmp_dir and there and here and there[0] == here[0] else dst.parent
    try:
        tmp = new_temporary(folder, dst.name, "", ".tmp")
    except OSError as e:
        raise cannot_write(dst, e) from None
    try:
        yield tmp
        check_output(dst)  # nothing else appeared there meanwhile
        try:
            os.replace(tmp, dst)
        except OSError as e:
            raise cannot_write(dst, e) from None
    except OSError as e:
        if e.errno in FULL_ERRNOS:
            raise cannot_write(dst, e) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)


def replace_dir(tmp: Path, dst: Path, trash: Path | None = None) -> None:
    """Move the complete folder ``tmp`` to ``dst``, replacing whatever folder is there.

    The old folder is moved aside first, into a new folder (:func:`new_temporary`) in
    ``trash`` (a run's temporary folder, on the same file system) when given, else next
    to ``dst``, then deleted. ``SIGINT`` and
    ``SIGTERM`` wait for the two renames (in the main thread), so that an interrupted
    run cannot take the old folder away without putting the new one in its place."""
    if dst.exists():
        aside = new_temporary(trash or dst.parent, dst.name, "old-", folder=True)
        with _signals_held():
            os.replace(dst, aside / "old")
            os.replace(tmp, dst)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, dst)


@contextmanager
def _signals_held() -> Iterator[None]:
    """``SIGINT`` and ``SIGTERM`` held back (delivered when the block ends) in the main
    thread (where Python runs their handlers); elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
