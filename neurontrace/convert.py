"""``convert``: any supported trace (or several) to our Parquet event table."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from neurontrace import atomic, store
from neurontrace import schema as S
from neurontrace.assemble import Assembled, assemble
from neurontrace.destination import Place, lock, matching
from neurontrace.diagnostics import Diagnostics
from neurontrace.digest import Later, content_digest
from neurontrace.errors import BadInput, UnknownFormat
from neurontrace.executors import Executor, Serial, executor_of
from neurontrace.readers import detect
from neurontrace.readers.base import Progress, Source

PathLike = str | os.PathLike[str]

#: Folder next to the output where external converters (neuron-explorer) write.
CACHE_DIR = ".neurontrace-cache"


@dataclass
class Converted:
    """What a conversion wrote."""

    outputs: list[Path] = field(default_factory=list)
    rows: int = 0
    inputs: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    #: Outputs converted by this run, and outputs kept because their input is unchanged.
    converted: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)


def _assemble(src: Source, rank: int | None, progress: Progress | None,
              diag: Diagnostics, workdir: Path | None,
              digest: Callable[[], str] | None = None) -> tuple[Assembled, dict[bytes, bytes]]:
    ev = src.read(diag, progress)
    if ev.rank is None:
        ev.rank = src.rank
    built = assemble(ev, diag, rank=rank, workdir=workdir,
                     read=digest.start if isinstance(digest, Later) else None)
    source: dict[str, object] = {"path": str(src.path), "format": src.format}
    try:
        source["bytes"] = _size(src.path)
        if digest is not None:
            source["digest"] = digest()
    except BaseException:
        built.close()  # its temporary files
        raise
    meta = store.metadata(
        source=[source],
        trace=ev.trace,
        clock=ev.clock,
        warnings=dict(diag.counts),
        options={"rank": rank},
    )
    return built, meta


def load(src: PathLike, fmt: str | None = None, rank: int | None = None,
         diag: Diagnostics | None = None) -> pa.Table:
    """Read one trace straight into the event table (in memory; no file written)."""
    tables = load_all(src, fmt, rank, diag)
    if len(tables) != 1:
        raise BadInput(f"{src}: holds {len(tables)} traces; use load_all, or convert to a folder")
    return tables[0]


def load_all(src: PathLike, fmt: str | None = None, rank: int | None = None,
             diag: Diagnostics | None = None,
             progress: Progress | None = None) -> list[pa.Table]:
    """Every trace in ``src`` (a file, a run folder, a folder of traces), each as an
    event table in memory, in the order ``convert`` would write them."""
    diag = diag if diag is not None else Diagnostics()
    tables = []
    with tempfile.TemporaryDirectory(prefix="neurontrace-cache-") as cache:
        sources, _, _ = inputs_of([src], fmt, Path(cache))
        for source in sources:
            built, meta = _assemble(source, rank, progress, diag, None)
            try:
                tables.append(built.table().replace_schema_metadata(meta))
            finally:
                built.close()
    return tables


def _write(src: Source, dst: Path, rank: int | None, progress: Progress | None,
           diag: Diagnostics, digest: Callable[[], str] | None = None) -> int:
    built, meta = _assemble(src, rank, progress, diag, dst.parent, digest)
    try:
        store.write_batches(built.batches(), dst, meta)
        return built.num_rows
    finally:
        built.close()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _sources_of(path: Path, fmt: str | None, cache: Path) -> tuple[list[Source], bool]:
    """``path`` as the sources it holds (its reader's expansion, else itself), and
    whether its reader always writes a dataset folder (a run folder, one file per rank)."""
    reader = detect(path, fmt)
    expand = getattr(reader, "expand", None)
    if expand is not None:
        sources: list[Source] = expand(path, cache)
        return sources, bool(getattr(reader, "dataset", False))
    return [Source(path, reader.name, partial(reader.read, path), stem(path))], False


def inputs_of(srcs: Sequence[PathLike], fmt: str | None,
              cache: Path) -> tuple[list[Source], list[Path], bool]:
    """Expand inputs into sources: (sources, skipped files, whether they make a dataset).

    A folder that a reader claims as a whole (a Neuron Explorer output, a run folder)
    is read by that reader; any other folder is walked (hidden entries skipped) and
    each file or claimed folder in it detected.
    """
    found: list[Source] = []
    skipped: list[Path] = []
    dataset = len(srcs) > 1
    for s in srcs:
        p = Path(s)
        if not p.exists():
            raise BadInput(f"{p}: no such file or folder")
        if p.is_dir() and not _claimed(p, fmt):
            dataset = True
            _walk(p, fmt, cache, found, skipped)
        else:
            expanded, always = _sources_of(p, fmt, cache)
            dataset = dataset or always or len(expanded) != 1
            found.extend(expanded)
    if not found:
        raise BadInput(
            f"{', '.join(str(s) for s in srcs)}: no trace found"
            + (f" ({len(skipped)} file(s) of no known format)" if skipped else "")
        )
    return found, skipped, dataset


def _walk(folder: Path, fmt: str | None, cache: Path, found: list[Source],
          skipped: list[Path]) -> None:
    for q in sorted(folder.iterdir()):
        if q.name.startswith("."):
            continue
        if q.is_dir() and not _claimed(q, fmt):
            _walk(q, fmt, cache, found, skipped)
            continue
        try:
            found.extend(_sources_of(q, fmt, cache)[0])
        except UnknownFormat:
            skipped.append(q)


def _claimed(folder: Path, fmt: str | None) -> bool:
    if fmt is not None:
        return detect(folder, fmt).sniff(folder, b"")
    try:
        detect(folder, fmt)
    except UnknownFormat:
        return False
    return True


@dataclass(frozen=True)
class Job:
    """One source to convert (or keep, when converted before) and where it goes.

    ``out`` is the output file, or for a dataset the folder written into (a staging
    folder next to a local destination, the destination itself elsewhere); ``previous``
    the local destination whose unchanged files a staging folder takes over;
    ``candidates`` the existing files (on ``out.fs``) named as this source's output.
    """

    source: Source
    name: str
    rank: int | None
    out: Place
    dataset: bool
    candidates: tuple[str, ...] = ()
    previous: Place | None = None
    force: bool = False


@dataclass
class Done:
    """A job's output: its path on the destination's filesystem, and what it holds."""

    path: str
    rows: int
    kept: bool
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)


def convert_one(job: Job, progress: Progress | None = None) -> Done:
    """Run one job: keep an existing output converted from the same bytes with the same
    options (unless ``force``), else convert, hashing the input alongside."""
    src = job.source
    want: dict[str, Any] = {"format": src.format, "options": {"rank": job.rank}}
    digest: Callable[[], str]
    if job.candidates and not job.force:
        want["digest"] = content_digest(src.path)
        for cand in job.candidates:
            meta = matching(job.out.fs, cand, want)
            if meta is not None:
                return _keep(job, cand, meta)
        digest = partial(str, want["digest"])
    else:
        digest = Later(src.path)
    diag = Diagnostics()
    local = job.out.local
    if local is not None:
        staged = local / f"{job.name}.parquet" if job.dataset else local
        rows = _write(src, staged, job.rank, progress, diag, digest)
        path = staged
        if job.dataset:
            path = local / f"rank={_rank_of(staged)}" / staged.name
            path.parent.mkdir(exist_ok=True)
            os.replace(staged, path)
        return Done(str(path), rows, False, dict(diag.counts), diag.examples)
    with tempfile.TemporaryDirectory(prefix="neurontrace-") as tmp:
        staged = Path(tmp) / f"{job.name}.parquet"
        rows = _write(src, staged, job.rank, progress, diag, digest)
        target = job.out.path
        if job.dataset:
            target = job.out.child(f"rank={_rank_of(staged)}/{staged.name}").path
        job.out.publish(staged, target)
    return Done(target, rows, False, dict(diag.counts), diag.examples)


def _keep(job: Job, found: str, meta: dict[bytes, bytes]) -> Done:
    fs = job.out.fs
    rows = pq.read_metadata(found, filesystem=fs).num_rows
    counts = json.loads(meta.get(b"neurontrace.warnings", b"{}"))
    path = found
    prev = job.previous
    if prev is not None and prev.local is not None and job.out.local is not None \
            and Path(found).is_relative_to(prev.local):
        target = job.out.local / Path(found).relative_to(prev.local)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(found, target)  # the old folder is dropped once the new one is in place
        except OSError:
            shutil.copy2(found, target)
        path = str(target)
    return Done(path, rows, True, counts, {})


def convert(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    fmt: str | None = None,
    rank: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    executor: str | Executor = "local",
    address: str | None = None,
    force: bool = False,
) -> Converted:
    """Convert ``src`` to Parquet at ``dst``: a local path or a pyarrow filesystem URI.

    One input file becomes one Parquet file. Several inputs, a folder, or an input that
    holds several traces (a Neuron run folder) become a dataset folder partitioned by
    rank (``dst/rank=N/<input>.parquet``), converted one input per job by ``executor``
    (``local`` with ``jobs`` processes, or ``ray`` at ``address``; see
    :mod:`neurontrace.executors`). An output already at ``dst`` that was converted from
    the same input bytes (BLAKE2b content hash in its metadata) with the same options and
    neurontrace version is kept, unless ``force``.

    Outputs appear only when complete. A local dataset is built in ``.<dst>.partial/``
    and swapped in whole; a failure leaves the old ``dst`` (or none) and keeps the
    finished files in ``.<dst>.partial/``, where the next run resumes. Concurrent runs
    into one local destination take turns (a lock file). On another filesystem each file
    is copied up once complete, and files of inputs no longer given are deleted last.
    External converters (``neuron-explorer``) write into ``.neurontrace-cache/`` next to
    a local ``dst`` (in the system's temporary folder for a remote one).
    """
    srcs = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    out = Converted()
    place = Place.of(dst)
    local = place.local
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        cache = local.parent / CACHE_DIR
    else:
        place.check()
        cache = Path(tempfile.gettempdir()) / CACHE_DIR
    sources, out.skipped, dataset = inputs_of(srcs, fmt, cache)
    out.inputs = [s.path for s in sources]
    run = executor if not isinstance(executor, str) else executor_of(executor, jobs, address)
    if not dataset:
        cands = (place.path,) if place.kind() == pafs.FileType.File else ()
        job = Job(sources[0], sources[0].name, rank, place, False, cands, None, force)
        _record(out, convert_one(job, progress))
        return out
    if local is None:
        _dataset(sources, place, None, rank, force, run, progress, out)
        return out
    if local.exists() and not local.is_dir():
        raise BadInput(f"{local}: exists and is not a folder (several inputs make a folder)")
    with lock(local):
        staging = local.with_name(f".{local.name}.partial")
        staging.mkdir(exist_ok=True)
        _dataset(sources, Place.of(staging), place, rank, force, run, progress, out)
        atomic.replace_dir(staging, local)
    out.outputs = [local / Path(p).relative_to(staging) for p in map(str, out.outputs)]
    return out


def _dataset(sources: list[Source], out: Place, previous: Place | None, rank: int | None,
             force: bool, run: Executor, progress: Progress | None,
             result: Converted) -> None:
    """Convert (or keep) every source into the folder ``out``, then drop its other files."""
    existing: dict[str, list[str]] = {}
    for where in (out, previous):
        for f in where.parquet_files() if where is not None else []:
            existing.setdefault(posixpath.basename(f), []).append(f)
    names: set[str] = set()
    jobs = []
    for source in sources:
        name = unique(source.name, names)
        cands = tuple(existing.get(f"{name}.parquet", ()))
        jobs.append(Job(source, name, rank, out, True, cands, previous, force))
    total = sum(_size(s.path) for s in sources)
    finished = 0

    def done(d: Done) -> None:
        nonlocal finished
        _record(result, d)
        finished += 1
        if progress is not None:
            progress(total * finished // len(jobs), total)

    fn: Callable[[Job], Done] = convert_one
    if isinstance(run, Serial) and progress is not None:
        fn = partial(convert_one, progress=progress)
    run.run(fn, jobs, done)
    keep = {str(p) for p in result.outputs}
    for f in out.parquet_files():
        if f not in keep:
            out.fs.delete_file(f)
            if out.local is None:  # an object store keeps the emptied folder's marker
                out.drop_if_empty(posixpath.dirname(f))
    if out.local is not None:
        _tidy(out.local, keep)


def _record(out: Converted, d: Done) -> None:
    out.outputs.append(Path(d.path))
    out.rows += d.rows
    (out.kept if d.kept else out.converted).append(Path(d.path))
    diag = Diagnostics()
    diag.counts.update(d.counts)
    diag.examples.update(d.examples)
    out.diagnostics.merge(diag)


def _tidy(folder: Path, keep: set[str]) -> None:
    """Remove from a staging folder what is not one of ``keep`` (temporary files of an
    interrupted run, outputs of inputs no longer given) and the folders left empty."""
    for p in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if p.is_dir():
            if not any(p.iterdir()):
                p.rmdir()
        elif str(p) not in keep:
            p.unlink(missing_ok=True)


def _rank_of(path: Path) -> int:
    col = pq.read_table(path, columns=[S.RANK])[S.RANK]
    return int(col[0].as_py()) if len(col) else 0


def stem(p: Path) -> str:
    """A trace's name from its path: the file name without its trace extensions."""
    name = p.name
    for ext in (".json.gz", ".json", ".parquet", ".gz"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return p.stem


def unique(name: str, names: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... if taken; the result joins ``names``."""
    base, k = name, 1
    while name in names:
        k += 1
        name = f"{base}-{k}"
    names.add(name)
    return name
