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

import polars as pl

from neurontrace.diagnostics import Diagnostics

_I64 = pl.Int64


def nest(spans: pl.DataFrame, diag: Diagnostics | None = None) -> pl.DataFrame:
    """Parent, depth and self time of spans.

    ``spans`` has columns ``row`` (unique), ``lane`` (track key), ``start``, ``dur``.
    Returns ``row, parent, depth, self_ns`` for every input row. ``diag`` is accepted
    for symmetry with other derivations; nesting never needs to repair anything.
    """
    if spans.height == 0:
        return pl.DataFrame(
            schema={"row": _I64, "parent": _I64, "depth": _I64, "self_ns": _I64}
        )
    tree = containers(spans).sort("row")
    rows = tree.get_column("row")
    parent_row = tree.get_column("parent")
    # Work on positions (row order) so that following a parent is a gather.
    pos_of = pl.DataFrame({"row": rows, "pos": pl.int_range(0, len(rows), eager=True,
                                                            dtype=_I64)})
    parent = (
        tree.select("parent").join(pos_of.rename({"row": "parent"}), on="parent", how="left",
                                   maintain_order="left")
        .get_column("pos")
    )
    depth = _depths(parent)
    dur = (
        spans.select(pl.col("row").cast(_I64), pl.col("dur").cast(_I64))
        .sort("row").get_column("dur")
    )
    covered = (
        pl.DataFrame({"p": parent, "d": dur})
        .filter(pl.col("p").is_not_null())
        .group_by("p").agg(pl.col("d").sum())
    )
    child_sum = (
        pos_of.select(p="pos").join(covered, on="p", how="left", maintain_order="left")
        .get_column("d").fill_null(0)
    )
    return pl.DataFrame({
        "row": rows,
        "parent": parent_row,
        "depth": depth,
        "self_ns": (dur - child_sum).clip(0),
    })


def _depths(parent: pl.Series) -> pl.Series:
    """Number of ancestors of each position, by pointer doubling (log2(depth) steps)."""
    hops = parent.is_not_null().cast(_I64)
    jump = parent
    while jump.null_count() < len(jump):
        safe = jump.fill_null(0)
        hops = hops + pl.select(
            pl.when(jump.is_not_null()).then(hops.gather(safe)).otherwise(0)
        ).to_series()
        jump = pl.select(pl.when(jump.is_not_null()).then(jump.gather(safe))).to_series()
    return hops


def containers(spans: pl.DataFrame) -> pl.DataFrame:
    """The parent of each span under ``torch.profiler``'s rule, which tolerates overlaps.

    ``spans`` has columns ``row`` (unique), ``lane``, ``start``, ``dur``; returns ``row,
    parent``. Spans are ordered by start, longer first, then ``row``; the parent of a
    span is the *last* span before it in that order, on its lane, that contains it
    (``start < p_end`` and ``end <= p_end``). A span that only partly overlaps another
    is not its child (``EventList._populate_cpu_children`` pops it)::

        |------ A ------|
             |------ B ------|        B partly overlaps A: parent(B) = none
               |- C -|                parent(C) = B (the last that contains it)

    That is the nearest earlier span whose end reaches ``max(end, start + 1)``: a
    "previous greater element" query, answered for all spans at once by descending a
    sparse table of running maxima of the ends (``log2(n)`` vectorised steps), so
    overlapping lanes cost no more than well-nested ones.
    """
    if spans.height == 0:
        return pl.DataFrame(schema={"row": _I64, "parent": _I64})
    s = spans.select(
        pl.col("row").cast(_I64), "lane", pl.col("start").cast(_I64), pl.col("dur").cast(_I64)
    ).sort(["lane", "start", "dur", "row"], descending=[False, False, True, False])
    n = s.height
    start = s.get_column("start")
    end = start + s.get_column("dur")
    need = pl.select(pl.max_horizontal(end, start + 1)).to_series()
    floor = pl.lit(-(1 << 63), _I64)
    levels = [end]  # levels[k][p] = max(end[p - 2**k + 1 .. p])
    while (1 << len(levels)) <= n:
        prev = levels[-1]
        width = 1 << (len(levels) - 1)
        levels.append(pl.select(pl.max_horizontal(prev, prev.shift(width, fill_value=floor)))
                      .to_series())
    pos = pl.int_range(-1, n - 1, dtype=_I64, eager=True)
    for k in range(len(levels) - 1, -1, -1):
        block = levels[k].gather(pos.clip(0))
        skip = (pos >= 0) & (block < need)
        pos = pl.select(pl.when(skip).then(pos - (1 << k)).otherwise(pos)).to_series()
    safe = pos.clip(0)
    lane = s.get_column("lane")
    found = (pos >= 0) & (end.gather(safe) >= need) & (lane.gather(safe) == lane)
    rows = s.get_column("row")
    parent = pl.select(pl.when(found).then(rows.gather(safe))).to_series()
    return pl.DataFrame({"row": rows, "parent": parent.cast(_I64)})
