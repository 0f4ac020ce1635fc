"""Which span encloses which: ``parent``, ``depth`` and ``self_ns`` per track.

On one track (a thread, a stream, an engine) spans nest: ``aten::linear`` contains
``aten::addmm``. The parent of a span is the innermost span that contains it, by the
rule ``torch.profiler`` uses for ``key_averages()`` (``EventList._populate_cpu_children``)::

    track 1:  |------------ A -------------|
                 |--- B ---|  |-- C --|
                   |-D-|
    parent(B) = parent(C) = A, parent(D) = B;  self(A) = dur(A) - dur(B) - dur(C)

Ties: a span that ends exactly when another starts is not inside it; of two spans
starting together the longer is the outer one; a zero-length span contains nothing. A
span that only partly overlaps another (with_stack's Python spans against ops, clock
glitches) is not its child, exactly as torch decides, so ``self_ns`` is
``key_averages()``'s self time before its merging of same-name parents and children.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from neurontrace import containment

_I64 = pl.Int64


def nest(spans: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """Parent, depth and self time of spans, some of which may have been nested before.

    ``spans`` has columns ``row`` (unique), ``lane`` (track key), ``start``, ``dur``,
    ``covered`` (the time of the children counted so far: 0 for a span not nested
    before), ``old`` (nested before: its time is counted in its parent's ``covered``
    already) and any others. Returns ``spans`` in containment order (:func:`in_order`)
    with ``parent`` (a row), ``depth`` (Int32, as the table types it) and ``self_ns``,
    ``covered`` counting the children found here too; and the position there of each
    span's parent (-1: none).
    """
    s = in_order(spans)
    parent = parents_in_order(s)
    dur = s.get_column("dur").to_numpy()
    covered = s.get_column("covered").to_numpy().copy()
    child = (parent >= 0) & ~s.get_column("old").to_numpy()  # old children: counted
    np.add.at(covered, parent[child], dur[child])  # exact int64 sums
    return s.with_columns(
        at_positions(s.get_column("row"), parent).alias("parent"),
        pl.Series("depth", depths(parent), pl.Int32),
        pl.Series("self_ns", np.maximum(dur - covered, 0), _I64),
        pl.Series("covered", covered, _I64),
    ), parent


def depths(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each position (``parent`` -1: none), by pointer doubling:
    log2(depth) rounds, each adding the hops of the position jumped to."""
    hops = (parent >= 0).astype(np.int64)
    jump = parent.copy()
    live = np.nonzero(jump >= 0)[0]
    while len(live):
        to = jump[live]
        hops[live] += hops[to]  # the right side is read before the update
        jump[live] = jump[to]
        live = live[jump[live] >= 0]
    return hops


def in_order(spans: pl.DataFrame) -> pl.DataFrame:
    """``spans`` in containment order: by lane, start, longer first, then row."""
    return spans.sort(["lane", "start", "dur", "row"], descending=[False, False, True, False])


def parents_in_order(s: pl.DataFrame) -> np.ndarray:
    """The parent of each span of ``s`` (in :func:`in_order`), as a position (-1: none)."""
    lane = s.select((pl.col("lane") != pl.col("lane").shift()).fill_null(True).cum_sum())
    return containment.containers(lane.to_series().to_numpy(),
                                  s.get_column("start").to_numpy(),
                                  s.get_column("dur").to_numpy())


def at_positions(values: pl.Series, positions: np.ndarray) -> pl.Series:
    """``values`` at ``positions`` (null where a position is -1)."""
    return values.gather(np.maximum(positions, 0)).scatter(np.nonzero(positions < 0)[0], None)


def nearest(parent: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """For each position, its nearest ancestor (climbing ``parent``, -1: none) at which
    ``stop`` holds, as a position (-1: none); rounds are the longest climb."""
    up = parent.copy()
    todo = np.nonzero(up >= 0)[0]
    todo = todo[~stop[up[todo]]]
    while len(todo):
        up[todo] = parent[up[todo]]
        todo = todo[up[todo] >= 0]
        todo = todo[~stop[up[todo]]]
    return up
