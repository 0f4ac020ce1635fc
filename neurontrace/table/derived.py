"""The derived columns read back a range of rows at a time, in row order, for the writer:
what the sweep (:mod:`neurontrace.table.sweep`) kept by row range (lanes, nesting, steps;
flow ids; links), joined into the output's columns."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import polars as pl

from neurontrace import schema as S
from neurontrace.table.flows import with_flows
from neurontrace.table.spill import Parts

_I64 = pl.Int64
#: The output columns derived by the sweep, in schema order (the others are the
#: reader's, or ``row`` and ``rank``, made when writing).
DERIVED = tuple(c.name for c in S.COLUMNS if c.name in (
    S.TRACK, S.SELF_NS, S.PARENT, S.DEPTH, S.FLOW_IDS, S.FRAMEWORK_ROW, S.LINK, S.STEP))


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

    def frames(self) -> Iterator[pl.DataFrame]:
        """The derived columns of each range in turn (of a trace without rows, one frame
        without rows: the columns as the schema types them; the writer casts them)."""
        if self.height == 0:
            yield pl.DataFrame(S.SCHEMA.empty_table()).select(DERIVED)
        ranges, fids, linked = self.files
        for k in range(-(-self.height // self.size)):
            base = ranges.read(k)
            assert base is not None
            base = base.sort(S.ROW)
            want = min(self.size, self.height - k * self.size)
            assert base.height == want, f"range {k}: {base.height} rows, not {want}"
            base = with_flows(base, fids.read(k))
            links = linked.read(k)
            for parts in self.files:  # read once, in order: let them go (memory, or files)
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
            yield base.select(
                self.names.gather(base.get_column("lane")).alias(S.TRACK), S.SELF_NS, S.PARENT,
                S.DEPTH, S.FLOW_IDS, S.FRAMEWORK_ROW, S.LINK,
                step.cast(pl.Int32).alias(S.STEP)).select(DERIVED)

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
