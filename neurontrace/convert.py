"""``convert``: any supported trace (or several) to our Parquet event table."""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
import stat
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput
from neurontrace.io import atomic, scratch, store
from neurontrace.io.destination import Place, lock, matching
from neurontrace.io.digest import background_digest
from neurontrace.readers.base import Progress, Source
from neurontrace.readers.inputs import inputs_of
from neurontrace.table.assemble import Assembled, assemble
from neurontrace.table.spill import SpillLimit
from neurontrace.workers.executors import Executor, Serial, executor_of

PathLike = str | os.PathLike[str]


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
              digest: Callable[[], Future[str]] | None = None
              ) -> tuple[Assembled, dict[bytes, bytes]]:
    try:
        built = assemble(src, diag, progress, rank=rank, workdir=workdir, after_read=digest)
    except SpillLimit as e:
        raise BadInput(f"{src.path}: {e}") from None
    ev = built.events
    source: dict[str, object] = {"path": str(src.path), "format": src.format}
    try:
        source["bytes"] = _size(src.path)
        if digest is not None:
            source["digest"] = digest().result()
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
    with scratch.run_folder(None) as work, scratch.cache_folder(None, work) as cache:
        sources, _, _ = inputs_of([src], fmt, cache, diag)
        for source in sources:
            built, meta = _assemble(source, rank, progress, diag, work)
            try:
                tables.append(built.table().replace_schema_metadata(meta))
            finally:
                built.close()
    return tables


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


@dataclass(frozen=True)
class Job:
    """One source to convert (or keep, when converted before) and where it goes.

    ``out`` is the output file, or for a dataset the folder written into (a staging
    folder next to a local destination, the destination itself elsewhere); ``previous``
    the local destination folder whose unchanged files a staging folder takes over;
    ``candidates`` the existing files (on ``out.fs``) named as this source's output.
    """

    source: Source
    name: str
    rank: int | None
    out: Place
    dataset: bool
    candidates: tuple[str, ...] = ()
    previous: Path | None = None
    force: bool = False
    #: The run's temporary folder (:func:`neurontrace.io.scratch.run_folder`), where the
    #: job makes a folder for its own temporary files; elsewhere (a job on another
    #: machine) it makes a run folder of its own.
    scratch: str | None = None


def convert_one(job: Job, progress: Progress | None = None) -> Converted:
    """Run one job: keep an existing output converted from the same bytes with the same
    options (unless ``force``), else convert, hashing the input alongside. What it wrote
    (the output's path on the destination's filesystem) or kept (with the warning counts
    its metadata recorded)."""
    src = job.source
    digest = background_digest(src.path)  # started here to compare, else once read
    if job.candidates and not job.force:
        want = {"digest": digest().result(), "format": src.format, "options": {"rank": job.rank}}
        for cand in job.candidates:
            if (meta := matching(job.out.fs, cand, want)) is not None:
                return _keep(job, cand, meta)
    diag = Diagnostics()
    local = job.out.local
    with scratch.job_folder(job.scratch, local.parent if local is not None else None) as work:
        built, meta = _assemble(src, job.rank, progress, diag, work, digest)
        try:
            target = job.out.path
            if job.dataset:  # in the folder of the rank its rows have (an empty file: 0)
                rank = built.rank if built.num_rows else 0
                target = posixpath.join(target, f"rank={rank}/{job.name}.parquet")
            # written in place locally, else in the job's folder and copied up
            staged = Path(target) if local is not None else work / f"{job.name}.parquet"
            store.write_batches(built.batches(), staged, meta, tmp_dir=work)
        finally:
            built.close()
        if local is None:
            job.out.publish(staged, target)
    return Converted([Path(target)], built.num_rows, converted=[Path(target)], diagnostics=diag)


def _keep(job: Job, found: str, meta: dict[bytes, bytes]) -> Converted:
    rows = pq.read_metadata(found, filesystem=job.out.fs).num_rows
    counts = Counter(json.loads(meta.get(S.META_WARNINGS, b"{}")))
    path = found
    if job.previous is not None and Path(found).is_relative_to(job.previous):
        target = Path(job.out.path) / Path(found).relative_to(job.previous)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(found, target)  # the old folder is dropped once the new one is in place
        except OSError:
            shutil.copy2(found, target)
        path = str(target)
    return Converted([Path(path)], rows, kept=[Path(path)], diagnostics=Diagnostics(counts))


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

    One input file becomes one Parquet file. Several inputs, a folder, an input that
    holds several traces (a Neuron run folder), or a ``dst`` that is a folder (spelled
    with a trailing slash, ``out/``, or an existing folder, empty or a dataset written
    before) become a dataset folder partitioned by rank (``dst/rank=N/<input>.parquet``),
    converted one input per job by ``executor``
    (``local`` with ``jobs`` processes, or ``ray`` at ``address``; see
    :mod:`neurontrace.workers.executors`). An output already at ``dst`` that was converted from
    the same input bytes (BLAKE3 content hash in its metadata) with the same options and
    neurontrace version is kept, unless ``force``. The same input given twice (another
    spelling, a link, a file also inside a folder given) is converted once.

    Inputs are never written to: a ``dst`` that is an input, lies inside an input folder
    or holds an input is refused before anything is written (``st_dev``/``st_ino`` of
    the paths and of the folders above them compared, see
    :func:`neurontrace.io.atomic.refuse_overlap`), and
    so is one that exists but is not a regular file, or, for a dataset, not a folder of
    our Parquet files (a device, a FIFO, a folder of other files).

    Outputs appear only when complete, with the mode the umask gives. A local dataset is
    built in ``.<dst>.partial/`` and swapped in whole; a failure leaves the old ``dst``
    (or none) and keeps the finished files in ``.<dst>.partial/`` (none: no such folder),
    where the next run resumes. Concurrent runs into one local destination take turns (a
    lock file). On another filesystem each file is copied up once complete, and files of
    inputs no longer given are deleted last. Every temporary file is in one run folder next to a
    local ``dst`` (the system's temporary folder for a remote one), removed however the
    run ends (:mod:`neurontrace.io.scratch`); the spill is bounded
    (:data:`neurontrace.table.spill.SPILL_LIMIT`). External converters (``neuron-explorer``)
    write into a cache next to a local ``dst`` (the system's temporary folder for a
    remote one), private to the user (:func:`neurontrace.io.scratch.cache_folder`).
    """
    srcs = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    place = Place.of(dst)
    local = place.local
    made: list[Path] = []
    if local is None:
        place.check()
    else:
        atomic.refuse_overlap(srcs, local)
        atomic.check_output(local, folder=None)
        made = atomic.make_parent(local)
    # even one trace makes a dataset in a folder: one spelled as such (``out/``), or there
    folder = os.fspath(dst).endswith(("/", os.sep)) or place.kind() == pafs.FileType.Directory
    near = local.parent if local is not None else None  # where temporary files go
    out = Converted()
    try:
        with scratch.run_folder(near, local) as work, scratch.cache_folder(near, work) as cache:
            sources, out.skipped, dataset = inputs_of(srcs, fmt, cache, out.diagnostics)
            out.inputs = [s.path for s in sources]
            run = executor_of(executor, jobs, address) if isinstance(executor, str) else executor
            if not (dataset or folder):
                cands = (place.path,) if place.kind() == pafs.FileType.File else ()
                _record(out, convert_one(Job(sources[0], sources[0].name, rank, place, False,
                                             cands, None, force, str(work)), progress))
            elif local is None:
                _dataset(sources, place, None, rank, force, run, progress, out, work)
            else:
                _replace_dataset(local, sources, rank, force, run, progress, out, work)
        return out
    except BaseException as e:
        atomic.remove_empty(made)  # the folders made for an output never written
        # the disk filled up, or turned read-only, while writing
        if local is not None and isinstance(e, OSError) and e.errno in atomic.FULL_ERRNOS:
            raise atomic.cannot_write(local, e) from None
        raise


def written_by_us(path: Path) -> bool:
    """Whether ``path`` is a Parquet file neurontrace wrote (any version), or a folder
    holding only such files (a dataset; an empty folder too)."""
    return _foreign(path) is None if path.is_dir() else _ours(path)


def _replace_dataset(local: Path, sources: list[Source], rank: int | None, force: bool,
                     run: Executor, progress: Progress | None, out: Converted, work: Path
                     ) -> None:
    """:func:`_dataset` into the local folder ``local``: built beside it and swapped in
    whole, one run at a time; only a dataset written before is replaced."""
    atomic.check_output(local, folder=True)
    foreign = _foreign(local)
    if foreign is not None:
        raise BadInput(f"{local}: a folder that is not a neurontrace dataset (it holds "
                       f"{foreign.relative_to(local)}); it is not replaced, choose "
                       "another output")
    with lock(local):
        staging = local.with_name(atomic.hidden_name(local.name, "partial"))
        staging.mkdir(exist_ok=True)
        try:
            _dataset(sources, Place.of(staging), local, rank, force, run, progress, out, work)
        except BaseException:
            _tidy(staging)  # finished files stay for the next run to resume from
            raise
        atomic.replace_dir(staging, local, trash=work)
    out.outputs = [local / Path(p).relative_to(staging) for p in map(str, out.outputs)]


def _foreign(folder: Path) -> Path | None:
    """The first file under ``folder`` that is not a Parquet file of ours, or None (none,
    or no such folder)."""
    return next((Path(root, name) for root, _, files in os.walk(folder) for name in files
                 if not (name.endswith(".parquet") and _ours(Path(root, name)))), None)


def _ours(path: Path) -> bool:
    """Whether ``path`` is a regular Parquet file that neurontrace wrote (any version)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return False
    return S.META_SCHEMA_VERSION in meta


def _dataset(sources: list[Source], out: Place, previous: Path | None, rank: int | None,
             force: bool, run: Executor, progress: Progress | None,
             result: Converted, work: Path) -> None:
    """Convert (or keep) every source into the folder ``out``, then drop its other files."""
    existing: dict[str, list[str]] = {}
    for where in [out] + ([Place.of(previous)] if previous is not None else []):
        for f in where.parquet_files():
            existing.setdefault(posixpath.basename(f), []).append(f)
    names: set[str] = set()
    jobs = []
    for source in sources:
        name = unique(source.name, names)
        cands = tuple(existing.get(f"{name}.parquet", ()))
        jobs.append(Job(source, name, rank, out, True, cands, previous, force, str(work)))
    total = sum(_size(s.path) for s in sources)

    def done(d: Converted) -> None:  # one output per job, added to none before
        _record(result, d)
        if progress is not None:
            progress(total * len(result.outputs) // len(jobs), total)

    fn: Callable[[Job], Converted] = convert_one
    if isinstance(run, Serial) and progress is not None:
        fn = partial(convert_one, progress=progress)
    run.run(fn, jobs, done)
    shared_ranks(result)
    keep = {str(p) for p in result.outputs}
    if out.local is not None:
        _tidy(out.local, keep)
        return
    for f in out.parquet_files():
        if f not in keep:
            out.fs.delete_file(f)
            out.drop_if_empty(posixpath.dirname(f))  # an object store keeps its marker


def shared_ranks(result: Converted) -> None:
    """A note when traces of the dataset share a rank: they are not the ranks of one run
    (a capture's variants, unrelated traces), and the analyses will take them only apart
    (:func:`neurontrace.loading.events` refuses them together)."""
    by_rank: dict[str, list[str]] = {}
    for p in result.outputs:
        by_rank.setdefault(posixpath.basename(posixpath.dirname(str(p))), []).append(
            posixpath.basename(str(p)))
    for folder, names in sorted(by_rank.items()):
        if len(names) > 1:
            result.diagnostics.note(
                f"{len(names)} of {len(result.outputs)} traces are {folder} "
                f"({', '.join(sorted(names)[:3])}{', ...' if len(names) > 3 else ''}): "
                "not the ranks of one run, so the analyses take them one at a time "
                "(report FILE) or side by side (compare A B), never added up")


def _record(out: Converted, d: Converted) -> None:
    """Add a job's outputs (:func:`convert_one`) to the run's."""
    out.outputs += d.outputs
    out.rows += d.rows
    out.converted += d.converted
    out.kept += d.kept
    out.diagnostics.merge(d.diagnostics)


def _tidy(folder: Path, keep: set[str] | None = None) -> None:
    """Remove from a staging folder the files that are not one of ``keep`` (None: keep
    every file), such as temporary files of an interrupted run and outputs of inputs no
    longer given, then the folders left empty (``folder`` too)."""
    for root, _, files in os.walk(folder, topdown=False):
        for path in (os.path.join(root, name) for name in files):
            if keep is not None and path not in keep:
                Path(path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.rmdir(root)


def unique(name: str, names: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... if taken; the result joins ``names``."""
    base, k = name, 1
    while name in names:
        k += 1
        name = f"{base}-{k}"
    names.add(name)
    return name
