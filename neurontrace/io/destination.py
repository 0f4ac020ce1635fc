"""Where ``convert`` writes: a local path or any pyarrow filesystem URI, and what is there.

``OUT`` is a local path, a ``file://`` URI, or any URI ``pyarrow.fs.FileSystem.from_uri``
resolves (``s3://bucket/prefix``, ``gs://...``, ``hdfs://...``). Files are always
written locally first (a temporary name, renamed: see :func:`store.write_batches`); on
another filesystem the finished file is then copied up, which an object store makes
visible in one piece or not at all.
"""

from __future__ import annotations

import fcntl
import json
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.errors import BadInput
from neurontrace.io.atomic import first_line, hidden_name


@dataclass(frozen=True)
class Place:
    """A file or folder on a filesystem (pickles, so jobs on other machines can write)."""

    fs: pafs.FileSystem
    path: str

    @classmethod
    def of(cls, dst: str | os.PathLike[str]) -> Place:
        text = os.fspath(dst)
        if "://" not in text:
            return cls(pafs.LocalFileSystem(), os.path.abspath(text))
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise BadInput(f"{text}: not a path or filesystem URI that pyarrow knows ({e})") \
                from None
        return cls(fs, path)

    @property
    def local(self) -> Path | None:
        """The local path, when this place is on the local filesystem."""
        return Path(self.path) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def __str__(self) -> str:
        """The local path, or ``<filesystem>://<path>`` (no query options, no credentials)."""
        return self.path if self.local is not None else f"{self.fs.type_name}://{self.path}"

    def kind(self) -> pafs.FileType:
        return self.fs.get_file_info(self.path).type

    def check(self) -> None:
        """BadInput, naming this place, when its filesystem cannot be reached or its top
        folder (an object store's bucket, which ``convert`` does not create) is missing."""
        top = self.path.split("/", 1)[0] or "/"
        try:
            missing = self.fs.get_file_info(top).type == pafs.FileType.NotFound
        except OSError as e:
            raise BadInput(f"{self}: cannot reach the destination ({first_line(e)})") from None
        if missing:
            raise BadInput(f"{self}: {top} does not exist (create the bucket or folder first)")

    def parquet_files(self) -> list[str]:
        """Paths of the ``.parquet`` files under this folder (hidden names skipped)."""
        if self.kind() != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        return sorted(
            i.path for i in infos
            if i.type == pafs.FileType.File and i.path.endswith(".parquet")
            and not any(part.startswith(".")
                        for part in posixpath.relpath(i.path, self.path).split("/"))
        )

    def drop_if_empty(self, folder: str) -> None:
        """Delete ``folder``, a folder under this one, if it is there and holds nothing."""
        if folder.rstrip("/") == self.path.rstrip("/"):
            return
        if self.fs.get_file_info(folder).type == pafs.FileType.Directory \
                and not self.fs.get_file_info(pafs.FileSelector(folder)):
            self.fs.delete_dir(folder)

    def publish(self, local: Path, path: str) -> None:
        """Copy the finished local file ``local`` to ``path`` on this filesystem."""
        try:
            self.fs.create_dir(posixpath.dirname(path), recursive=True)
            pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        except OSError as e:
            raise BadInput(f"{self.fs.type_name}://{path}: cannot write ({first_line(e)})") \
                from None


def matching(fs: pafs.FileSystem, path: str, want: dict[str, Any]) -> dict[bytes, bytes] | None:
    """The metadata of our file at ``path`` if it was converted from the same input bytes
    with the same options by this neurontrace (schema version and producer), else None.

    ``want``: ``digest`` and ``format`` of the input, and ``options`` of the conversion.
    A file that cannot be read (truncated, not Parquet) does not match.
    """
    from neurontrace import __version__

    try:
        meta = pq.read_schema(path, filesystem=fs).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return None
    try:
        sources = json.loads(meta.get(S.META_SOURCE, b"[]"))
        options = json.loads(meta.get(S.META_OPTIONS, b"null"))
    except ValueError:
        return None
    ok = (
        meta.get(S.META_SCHEMA_VERSION) == S.SCHEMA_VERSION.encode()
        and meta.get(S.META_PRODUCER) == f"neurontrace {__version__}".encode()
        and len(sources) == 1
        and sources[0].get("digest") == want["digest"]
        and sources[0].get("format") == want["format"]
        and options == want["options"]
    )
    return meta if ok else None


@contextmanager
def lock(dst: Path) -> Iterator[None]:
    """Hold ``.<name>.lock`` next to ``dst`` (:func:`~neurontrace.io.atomic.hidden_name`: a
    shorter name for a long one): a second ``convert`` into the same local destination
    waits for the first to finish (``flock``).

    Not ``filelock``: its Unix lock leaves the lock file behind, and a run must leave no
    file; removing it safely needs the inode check below."""
    path = dst.with_name(hidden_name(dst.name, "lock"))
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # the holder before us may have removed the file: lock the current one
        with suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
