"""``convert``: any supported trace (or several) to our Parquet event table."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa

from neurontrace import atomic, store
from neurontrace import schema as S
from neurontrace.assemble import Assembled, assemble
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, UnknownFormat
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
    diagnostics: Diagnostics = field(default_factory=Diagnostics)


def _assemble(src: Source, rank: int | None, progress: Progress | None,
              diag: Diagnostics, workdir: Path | None) -> tuple[Assembled, dict[bytes, bytes]]:
    ev = src.read(diag, progress)
    if ev.rank is None:
        ev.rank = src.rank
    built = assemble(ev, diag, rank=rank, workdir=workdir)
    meta = store.metadata(
        source=[{"path": str(src.path), "format": src.format, "bytes": _size(src.path)}],
        trace=ev.trace,
        clock=ev.clock,
        warnings=dict(diag.counts),
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
             diag: Diagnostics | None = None) -> list[pa.Table]:
    """Every trace in ``src`` (a file, a run folder, a folder of traces), each as an
    event table in memory, in the order ``convert`` would write them."""
    diag = diag if diag is not None else Diagnostics()
    tables = []
    with tempfile.TemporaryDirectory(prefix="neurontrace-cache-") as cache:
        sources, _, _ = inputs_of([src], fmt, Path(cache))
        for source in sources:
            built, meta = _assemble(source, rank, None, diag, None)
            try:
                tables.append(built.table().replace_schema_metadata(meta))
            finally:
                built.close()
    return tables


def _write(src: Source, dst: Path, rank: int | None,
           progress: Progress | None, diag: Diagnostics) -> int:
    built, meta = _assemble(src, rank, progress, diag, dst.parent)
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
    return [Source(path, reader.name, partial(reader.read, path), _stem(path))], False


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


def convert(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    fmt: str | None = None,
    rank: int | None = None,
    progress: Progress | None = None,
) -> Converted:
    """Convert ``src`` to Parquet at ``dst``.

    One input file becomes one Parquet file. Several inputs, a folder, or an input that
    holds several traces (a Neuron run folder) become a dataset folder partitioned by
    rank (``dst/rank=N/<input>.parquet``). Outputs appear only when complete: a failure
    leaves nothing at ``dst``. External converters (``neuron-explorer``) write into
    ``.neurontrace-cache/`` next to ``dst``.
    """
    srcs = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    out = Converted()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    sources, out.skipped, dataset = inputs_of(srcs, fmt, dst.parent / CACHE_DIR)
    out.inputs = [s.path for s in sources]
    if not dataset:
        out.rows = _write(sources[0], dst, rank, progress, out.diagnostics)
        out.outputs.append(dst)
        return out
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        names: set[str] = set()
        for source in sources:
            diag = Diagnostics()
            name = _unique(source.name, names)
            staged = tmp / f"{name}.parquet"
            out.rows += _write(source, staged, rank, progress, diag)
            out.diagnostics.merge(diag)
            r = _rank_of(staged)
            target = tmp / f"rank={r}" / staged.name
            target.parent.mkdir(exist_ok=True)
            os.replace(staged, target)
            out.outputs.append(dst / target.relative_to(tmp))
        _replace_dir(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _rank_of(path: Path) -> int:
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=[S.RANK])[S.RANK]
    return int(col[0].as_py()) if len(col) else 0


def _stem(p: Path) -> str:
    name = p.name
    for ext in (".json.gz", ".json", ".gz"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return p.stem


def _unique(name: str, names: set[str]) -> str:
    base, k = name, 1
    while name in names:
        k += 1
        name = f"{base}-{k}"
    names.add(name)
    return name


def _replace_dir(tmp: Path, dst: Path) -> None:
    if dst.exists() and not dst.is_dir():
        raise BadInput(f"{dst}: exists and is not a folder (several inputs make a folder)")
    atomic.replace_dir(tmp, dst)
