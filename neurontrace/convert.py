"""``convert``: any supported trace (or several) to our Parquet event table."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from neurontrace import schema as S
from neurontrace import store
from neurontrace.assemble import Assembled, assemble
from neurontrace.diagnostics import Diagnostics
from neurontrace.errors import BadInput, UnknownFormat
from neurontrace.readers import detect
from neurontrace.readers.base import Progress

PathLike = str | os.PathLike[str]


@dataclass
class Converted:
    """What a conversion wrote."""

    outputs: list[Path] = field(default_factory=list)
    rows: int = 0
    inputs: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)


def _assemble(path: Path, fmt: str | None, rank: int | None, progress: Progress | None,
              diag: Diagnostics, workdir: Path | None) -> tuple[Assembled, dict[bytes, bytes]]:
    reader = detect(path, fmt)
    ev = reader.read(path, diag, progress)
    built = assemble(ev, diag, rank=rank, workdir=workdir)
    meta = store.metadata(
        source=[{"path": str(path), "format": reader.name, "bytes": _size(path)}],
        trace=ev.trace,
        clock=ev.clock,
        warnings=dict(diag.counts),
    )
    return built, meta


def load(src: PathLike, fmt: str | None = None, rank: int | None = None,
         diag: Diagnostics | None = None) -> pa.Table:
    """Read one trace straight into the event table (in memory; no file written)."""
    built, meta = _assemble(Path(src), fmt, rank, None, diag or Diagnostics(), None)
    try:
        return built.table().replace_schema_metadata(meta)
    finally:
        built.close()


def _write(path: Path, dst: Path, fmt: str | None, rank: int | None,
           progress: Progress | None, diag: Diagnostics) -> int:
    built, meta = _assemble(path, fmt, rank, progress, diag, dst.parent)
    try:
        store.write_batches(built.batches(), dst, meta)
        return built.num_rows
    finally:
        built.close()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def inputs_of(srcs: Sequence[PathLike], fmt: str | None) -> tuple[list[Path], list[Path]]:
    """Expand folders into the traces they hold; (inputs, skipped files)."""
    found: list[Path] = []
    skipped: list[Path] = []
    for s in srcs:
        p = Path(s)
        if p.is_dir():
            for f in sorted(q for q in p.rglob("*") if q.is_file()):
                try:
                    detect(f, fmt)
                    found.append(f)
                except UnknownFormat:
                    skipped.append(f)
        elif p.exists():
            found.append(p)
        else:
            raise BadInput(f"{p}: no such file or folder")
    if not found:
        raise BadInput(
            f"{', '.join(str(s) for s in srcs)}: no trace found"
            + (f" ({len(skipped)} file(s) of no known format)" if skipped else "")
        )
    return found, skipped


def convert(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    fmt: str | None = None,
    rank: int | None = None,
    progress: Progress | None = None,
) -> Converted:
    """Convert ``src`` to Parquet at ``dst``.

    One input file becomes one Parquet file. Several inputs, or a folder, become a
    dataset folder partitioned by rank (``dst/rank=N/<input>.parquet``). Outputs appear
    only when complete: a failure leaves nothing at ``dst``.
    """
    srcs = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    single = len(srcs) == 1 and not Path(srcs[0]).is_dir()
    out = Converted()
    files, out.skipped = inputs_of(srcs, fmt)
    out.inputs = files
    dst = Path(dst)
    if single:
        dst.parent.mkdir(parents=True, exist_ok=True)
        out.rows = _write(files[0], dst, fmt, rank, progress, out.diagnostics)
        out.outputs.append(dst)
        return out
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        names: set[str] = set()
        for f in files:
            diag = Diagnostics()
            name = _unique(_stem(f), names)
            staged = tmp / f"{name}.parquet"
            out.rows += _write(f, staged, fmt, rank, progress, diag)
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
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
        os.replace(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, dst)
