"""Frames kept by key between the sweep's passes, and the derived columns read back.

:class:`Parts` holds frames by key (a bucket, a row range): Arrow IPC files in a folder
for a trace swept in buckets, or frames in memory for a trace that is one bucket.
:class:`Ranges` reads the derived columns back a range of rows at a time, in row order.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from neurontrace import schema as S
from neurontrace.table.flows import with_flows
from neurontrace.table.spill import Writer, frame

_I64 = pl.Int64
#: The output columns derived by the sweep, in schema order (the others are the
#: reader's, or ``row`` and ``rank``, made when writing).
DERIVED = tuple(c.name for c in S.COLUMNS if c.name in (
    S.TRACK, S.SELF_NS, S.PARENT, S.DEPTH, S.FLOW_IDS, S.FRAMEWORK_ROW, S.LINK, S.STEP))


class Parts:
    """Frames by key (a bucket, a row range), each appended a frame at a time: Arrow IPC
    stream files in ``folder``, one per key, or (``folder`` None) frames in memory."""

    def __init__(self, folder: Path | None, stem: str) -> None:
        self.folder = folder
        self.stem = stem
        self._open: dict[int, Writer] = {}
        self._held: dict[int, list[pl.DataFrame]] = {}

    def path(self, key: int) -> Path:
        assert self.folder is not None
        return self.folder / f"{self.stem}-{key}.arrow"

    def write(self, key: int, frame: pl.DataFrame) -> None:
        if self.folder is None:
            self._held.setdefault(key, []).append(frame)
            return
        table = frame.to_arrow()
        out = self._open.get(key)
        if out is None:
            out = self._open[key] = Writer(self.path(key), table.schema)
        out.write(table)

    def close(self) -> None:
        opened, self._open = self._open, {}
        for out in opened.values():
            out.close()

    def read(self, key: int) -> pl.DataFrame | None:
        if self.folder is None:
            held = self._held.get(key)
            if held is None:
                return None
            return held[0] if len(held) == 1 else pl.concat(held)
        path = self.path(key)
        if not path.exists():
            return None
        with pa.OSFile(str(path), "rb") as f:
            return frame(pa.ipc.open_stream(f).read_all())

    def remove(self, key: int) -> None:
        if self.folder is None:
            self._held.pop(key, None)
        else:
            self.path(key).unlink(missing_ok=True)

    def each(self, keys: int) -> Iterator[pl.DataFrame]:
        """The frames of keys 0 to ``keys`` - 1, in order (keys without any left out)."""
        for k in range(keys):
            frame = self.read(k)
            if frame is not None:
                yield frame

    def spread(self, frame: pl.DataFrame, keys: np.ndarray | None) -> None:
        """Append each row of ``frame`` to the frames of its key in ``keys`` (None: all
        of them to key 0, even none)."""
        if keys is None:
            self.write(0, frame)
            return
        for (k,), part in frame.with_columns(_k=keys).partition_by("_k", as_dict=True).items():
            self.write(int(k), part.drop("_k"))

    def map(self, keys: int, into: Parts, how: Callable[[int, pl.DataFrame], pl.DataFrame]
            ) -> None:
        """Write ``how(k, frame)`` to ``into`` (closed at the end) for the frame of each
        key ``k`` below ``keys``, which is then removed from these."""
        try:
            for k in range(keys):
                frame = self.read(k)
                if frame is not None:
                    into.write(k, how(k, frame))
                    self.remove(k)
        finally:
            into.close()


class Ranges:
    """The derived columns, read back a range of rows at a time, in row order.

    ``files``: the sweep's frames by row range (lane, nesting and step; flow ids; links),
    ranges of ``size`` rows, ``height`` rows in all; ``names`` the track of each lane;
    ``launch_steps`` (row, step) the step of each op that launched device work.
    """

    def __init__(self, files: tuple[Parts, Parts, Parts], height: int, size: int,
                 names: pl.Series, launch_steps: pl.DataFrame) -> None:
        self.folder = files[0].folder
        self.files = files
        self.height = height
        self.size = size
        self.names = names
        self.launch_steps = launch_steps.select(
            pl.col(S.ROW).alias(S.FRAMEWORK_ROW), pl.col(S.STEP).cast(pl.Int32).alias("_op_step"))
        self._cached: tuple[int, pl.DataFrame] | None = None

    def _range(self, k: int) -> pl.DataFrame:
        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        ranges, fids, linked = self.files
        base = ranges.read(k)
        assert base is not None
        base = base.sort(S.ROW)
        want = min(self.size, self.height - k * self.size)
        assert base.height == want, f"range {k}: {base.height} rows, not {want}"
        base = with_flows(base, fids.read(k))
        links = linked.read(k)
        if self.folder is None:  # held in memory and read once, in order: let them go
            for parts in self.files:
                parts.remove(k)
        if links is None:  # no row of the range to link (a join would copy the range)
            base = base.with_columns(pl.lit(None, _I64).alias(S.FRAMEWORK_ROW),
                                     pl.lit(None, pl.String).alias(S.LINK))
            step = pl.col(S.STEP)
        else:
            base = base.join(links, on=S.ROW, how="left", maintain_order="left").join(
                self.launch_steps, on=S.FRAMEWORK_ROW, how="left", maintain_order="left")
            launched = (pl.col(S.LAYER) == S.DEVICE) & pl.col(S.FRAMEWORK_ROW).is_not_null()
            step = pl.when(launched).then("_op_step").otherwise(S.STEP)
        frame = base.select(
            self.names.gather(base.get_column("lane")).alias(S.TRACK), S.SELF_NS, S.PARENT,
            S.DEPTH, S.FLOW_IDS, S.FRAMEWORK_ROW, S.LINK,
            step.cast(pl.Int32).alias(S.STEP)).select(DERIVED)
        self._cached = (k, frame)
        return frame

    def slice(self, offset: int, length: int) -> pl.DataFrame:
        end = min(offset + length, self.height)
        parts = []
        for k in range(offset // self.size, -(-end // self.size)):
            lo = max(offset, k * self.size) - k * self.size
            hi = min(end, (k + 1) * self.size) - k * self.size
            parts.append(self._range(k).slice(lo, hi - lo))
        if parts:
            return pl.concat(parts)
        # no rows: the columns as the schema types them (the writer casts them anyway)
        return pl.DataFrame(S.SCHEMA.empty_table()).select(DERIVED)

    def close(self) -> None:
        self._cached = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
