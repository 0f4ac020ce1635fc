"""Any input as a LazyFrame of events: our Parquet, a raw trace, or a run folder.

Several traces are analysed together only as the ranks of one run: each must have a rank
of its own (the trace's ``distributedInfo.rank``, the run folder's rank, ``convert
--rank``). Traces that share a rank are not ranks of one run (the variants of a capture,
a folder of unrelated traces): merged, their figures would add up as if one program had
done it all (30 steps of 3 variants, a device "span" of a year across traces recorded
months apart), so the folder is refused with the commands that analyse them apart::

    runs/demo/naive/trace.json.gz      rank 0  \\
    runs/demo/rms_norm/trace.json.gz   rank 0   > refused: "3 traces of rank 0 ...;
    runs/demo/compiled/trace.json.gz   rank 0  /   neurontrace compare runs/demo/naive ..."

    runs/ddp/rank0/trace.json          rank 0  \\  merged, and said (a note, shown with
    runs/ddp/rank1/trace.json          rank 1  /   the figures): "2 traces merged ..."
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.convert import convert, load_all
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, UnknownFormat, shown
from neurontrace.io import scratch, store
from neurontrace.io.destination import matching
from neurontrace.io.digest import content_digest
from neurontrace.readers import detect
from neurontrace.readers.base import Progress

#: How many traces a refusal names before "...".
NAMED = 6


def events(path: str | os.PathLike[str], diag: Diagnostics | None = None,
           progress: Progress | None = None, cache: Path | None = None) -> pl.LazyFrame:
    """The event table of ``path`` as a :class:`polars.LazyFrame`.

    - a Parquet file or dataset folder written by ``convert``: scanned lazily (only the
      columns an analysis asks for are read);
    - a folder a reader recognises as a whole (a Neuron run folder): read in memory;
    - any other folder: every trace in it read in memory, stacked with ``row`` kept
      unique;
    - a raw trace file: read in memory, or, with ``cache`` (a folder, see
      :func:`cache_folder`), converted once into it and scanned from there
      (:func:`cached`).

    Several traces (the files of a dataset, the traces of a folder) are the ranks of one
    run, or refused (:class:`BadInput`, naming the fix) when two of them share a rank;
    when several are merged, ``diag`` gets a note saying which (see the module
    docstring). ``diag`` collects the readers' warnings (repairs) when given;
    ``progress`` is told how far reading a raw input has come.
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{shown(p)}: no such file or folder")
    if store.is_ours(p) and not (p.is_dir() and _claimed(p)):
        if p.is_dir():
            one_run(p, _dataset_parts(p), diag)
        return store.scan(p)
    if cache is not None:
        hit = cached(p, cache, diag, progress)
        if hit is not None:
            return store.scan(hit)
    tables = load_all(p, diag=diag, progress=progress)
    one_run(p, [_table_part(p, t) for t in tables], diag)
    parts = []
    offset = 0
    for table in tables:
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        parts.append(store.offset_rows(frame.lazy(), offset))
        offset += frame.height
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")


#: The variable that says where converted raw traces are cached (a folder), or that
#: none is (``off``, ``0``, ``no``, ``false`` or empty).
CACHE_ENV = "NEURONTRACE_CACHE"
#: Bytes the cache may hold: past it, the conversions used least recently are removed
#: (the one just written is always kept).
CACHE_LIMIT = 4 << 30
_OFF = ("", "0", "off", "no", "false", "none")


def cache_folder() -> Path | None:
    """Where the command line caches the conversions of raw traces: ``$NEURONTRACE_CACHE``
    (None when it says off), else ``$XDG_CACHE_HOME/neurontrace``, else
    ``~/.cache/neurontrace`` (None when there is no home folder)."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        return None if given.strip().lower() in _OFF else Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "neurontrace"
    home = os.path.expanduser("~")
    return None if home == "~" else Path(home) / ".cache" / "neurontrace"


def _private_folder(folder: Path) -> bool:
    """Make ``folder`` (mode 0700, parents as the umask gives) if missing; whether it is
    now a folder of this user's, not a symlink, closed to every other user."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        st = os.lstat(folder)
    except OSError:
        return False
    return scratch.private_folder(st)


def cached(path: Path, cache: Path, diag: Diagnostics | None = None,
           progress: Progress | None = None) -> Path | None:
    """The conversion of the raw trace file ``path`` in the folder ``cache``: reused when
    one converted from the same bytes (the BLAKE3 content hash of
    :mod:`neurontrace.io.digest`, in its name and its metadata) by this neurontrace
    version is there, else converted into it now (``convert``: written to a temporary
    name and renamed, so a cache holds only complete files, mode 0600), with a note in
    ``diag`` saying so. None, to read ``path`` in memory instead, when ``path`` is not a
    regular file (a folder, a FIFO) or holds several traces, or when ``cache`` is not a
    private folder of this user's (made mode 0700 when missing; a symlink, another
    user's, or one open to others is not trusted). A reused conversion's warning counts
    go to ``diag`` (not their examples). A bad input is BadInput here as in memory;
    nothing is cached for it.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    if not _private_folder(cache):
        return None
    digest = content_digest(path)
    out = cache / f"{digest.split(':', 1)[1]}.parquet"
    want = {"digest": digest, "format": detect(path).name, "options": {"rank": None}}
    meta = matching(pafs.LocalFileSystem(), str(out), want) if out.is_file() else None
    if meta is not None:
        os.utime(out)  # used now: the last to be removed when the cache is full
        if diag is not None:
            diag.counts.update(json.loads(meta.get(S.META_WARNINGS, b"{}")))
        return out
    done = convert(path, out, progress=progress)
    if not out.is_file():  # a file that holds several traces: a dataset, read in memory
        shutil.rmtree(out, ignore_errors=True)
        return None
    os.chmod(out, 0o600)  # in a folder closed to others; closed itself too
    if diag is not None:
        diag.merge(done.diagnostics)
        diag.note(f"{shown(path)}: converted once into {out}; later commands on the same "
                  f"bytes reuse it ({CACHE_ENV}=off: never cache)")
    _trim(cache, keep=out)
    return out


def _trim(cache: Path, keep: Path, limit: int = CACHE_LIMIT) -> None:
    """Remove the least recently used conversions from ``cache`` until it holds at most
    ``limit`` bytes; ``keep`` stays whatever its size."""
    files = []
    for entry in os.scandir(cache):
        if entry.name.endswith(".parquet") and not entry.name.startswith(".") \
                and entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            files.append((st.st_mtime_ns, st.st_size, Path(entry.path)))
    total = sum(size for _, size, _ in files)
    for _, size, f in sorted(files):
        if total <= limit:
            break
        if f != keep:
            f.unlink(missing_ok=True)
            total -= size


@dataclass(frozen=True)
class Part:
    """One trace of an input: ``name`` (its path, as a command would take it) and the
    ranks it holds."""

    name: str
    ranks: frozenset[int]


def one_run(path: Path, parts: Sequence[Part], diag: Diagnostics | None) -> None:
    """Refuse ``parts`` unless each rank is in one of them; note what is merged."""
    if len(parts) < 2:
        return
    owners: dict[int, list[str]] = {}
    for part in parts:
        for rank in part.ranks:
            owners.setdefault(rank, []).append(part.name)
    shared = {r: names for r, names in owners.items() if len(names) > 1}
    if shared:
        rank, names = max(shared.items(), key=lambda kv: (len(kv[1]), -kv[0]))
        apart = [part.name for part in parts]
        listed = " ".join(shlex.quote(n) for n in apart[:NAMED])
        more = " ..." if len(apart) > NAMED else ""
        raise BadInput(
            f"{shown(path)}: {len(parts)} traces that are not the ranks of one run "
            f"({len(names)} of them are rank {rank}: {', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}), so their figures cannot be added "
            f"up; analyse one at a time (neurontrace report {shlex.quote(apart[0])}) or "
            f"side by side (neurontrace compare {listed}{more})")
    if diag is not None:
        ranks = sorted(owners)
        diag.note(f"{shown(path)}: {len(parts)} traces merged as the ranks of one run "
                  f"(ranks {_ranks(ranks)}): figures per op, kernel and copy add up "
                  "their ranks; idle time is per rank and device")


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


def _table_part(path: Path, table: pa.Table) -> Part:
    """A table ``load_all`` read: named after its first source (relative to ``path``'s
    folder entry that holds it: ``runs/demo/naive`` for ``runs/demo/naive/trace.json``)."""
    ranks = frozenset(int(r) for r in pc.unique(table.column(S.RANK)).to_pylist()
                      if r is not None)
    try:
        sources = json.loads((table.schema.metadata or {}).get(S.META_SOURCE, b"[]"))
        source = Path(sources[0]["path"])
    except (ValueError, LookupError, TypeError):
        return Part(str(path), ranks)
    return Part(str(_entry(path, source)), ranks)


def _entry(path: Path, source: Path) -> Path:
    """The entry of the folder ``path`` that holds ``source`` (``source`` itself when it
    is not inside ``path``)."""
    try:
        first = source.resolve().relative_to(path.resolve()).parts[0]
    except (ValueError, IndexError, OSError):
        return source
    return path / first


def _dataset_parts(folder: Path) -> list[Part]:
    """The files of a dataset folder ``convert`` wrote, with the ranks their footers'
    statistics give (the file's whole range where a statistic is missing)."""
    parts = []
    for f in store._files(folder):
        try:
            meta = pq.read_metadata(f)
            schema = meta.schema.to_arrow_schema()
            column = schema.get_field_index(S.RANK)
            if column < 0 or schema.field(column).type != pa.int64():
                raise ValueError("no rank column")
            lows, highs = [], []
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(column).statistics
                if stats is None or not stats.has_min_max:
                    raise ValueError("no statistics")
                lows.append(int(stats.min))
                highs.append(int(stats.max))
        except (pa.ArrowException, OSError, ValueError, TypeError, IndexError):
            continue  # not a file of ours: store.scan says what is wrong with it
        if lows and max(highs) - min(lows) < 1 << 16:
            parts.append(Part(str(f), frozenset(range(min(lows), max(highs) + 1))))
    return parts


def _claimed(folder: Path) -> bool:
    """A folder a reader reads as a whole (Explorer output, run folder), Parquet or not."""
    try:
        detect(folder)
    except UnknownFormat:
        return False
    return True
