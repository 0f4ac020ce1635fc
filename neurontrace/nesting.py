"""Which span encloses which: ``parent``, ``depth`` and ``self_ns`` per track.

On one track (a thread, a stream, an engine) spans nest: ``aten::linear`` contains
``aten::addmm``. The parent of a span is the innermost span that is open when it starts::

    track 1:  |------------ A -------------|
                 |--- B ---|  |-- C --|
                   |-D-|
    parent(B) = parent(C) = A, parent(D) = B;  self(A) = dur(A) - dur(B) - dur(C)

Ties: a span that ends exactly when another starts does not contain it; of two spans
starting together the longer is the outer one; a zero-length span contains nothing.

The computation is vectorised: opening and closing boundaries are sorted per track, a
running sum gives each span's depth, and the parent is the latest span opened one level
up (an as-of join). That is exact when spans nest properly. Tracks where a span outlives
its parent (clock glitches, or tracks whose spans are not nested by construction) are
redone one span at a time with a stack, and counted as a warning.
"""

from __future__ import annotations

import polars as pl

from neurontrace.diagnostics import Diagnostics

_I64 = pl.Int64


def nest(spans: pl.DataFrame, diag: Diagnostics | None = None) -> pl.DataFrame:
    """Parent, depth and self time of spans.

    ``spans`` has columns ``row`` (unique), ``lane`` (track key), ``start``, ``dur``.
    Returns ``row, parent, depth, self_ns`` for every input row.
    """
    if spans.height == 0:
        return pl.DataFrame(
            schema={"row": _I64, "parent": _I64, "depth": _I64, "self_ns": _I64}
        )
    s = (
        spans.select(
            pl.col("row").cast(_I64),
            pl.col("lane"),
            pl.col("start").cast(_I64),
            pl.col("dur").cast(_I64),
        )
        .sort(["lane", "start", "dur", "row"], descending=[False, False, True, False])
        .with_row_index("ord")
        .with_columns(pl.col("ord").cast(_I64) * 2, end=pl.col("start") + pl.col("dur"))
    )
    opens = s.select(
        "lane", "row", t="start", cls=pl.lit(1, _I64), key="ord", delta=pl.lit(1, _I64)
    )
    closes = s.select(
        "lane",
        "row",
        t="end",
        # A zero-length span closes right after it opens; others close before any span
        # opening at the same time, innermost (latest opened) first.
        cls=pl.when(pl.col("dur") == 0).then(1).otherwise(0).cast(_I64),
        key=pl.when(pl.col("dur") == 0).then(pl.col("ord") + 1).otherwise(-pl.col("ord")),
        delta=pl.lit(-1, _I64),
    )
    b = (
        pl.concat([opens, closes])
        .sort(["lane", "t", "cls", "key"])
        .with_columns(depth=pl.col("delta").cum_sum().over("lane"))
        .with_row_index("pos")
    )
    o = b.filter(pl.col("delta") == 1).select(
        "lane", "row", "pos", depth=pl.col("depth") - 1
    )
    up = o.select(
        "lane", pos="pos", parent="row", depth=pl.col("depth") + 1
    ).sort("pos")
    o = o.sort("pos").join_asof(
        up, on="pos", by=["lane", "depth"], strategy="backward", check_sortedness=False
    )
    out = o.select("row", "parent", "depth", "lane")

    # Check containment; redo offending lanes with a stack.
    chk = out.join(s.select("row", "start", "end"), on="row").join(
        s.select(parent="row", p_start="start", p_end="end"), on="parent", how="left"
    )
    bad_lanes = (
        chk.filter(pl.col("parent").is_not_null() & (pl.col("end") > pl.col("p_end")))
        .get_column("lane")
        .unique()
    )
    if bad_lanes.len():
        fixed = _stack(s.filter(pl.col("lane").is_in(bad_lanes.implode())))
        if diag is not None:
            diag.warn(
                "overlapping_spans",
                f"{bad_lanes.len()} track(s) have spans that outlive their enclosing span; "
                "nested by a stack (a child's time counts only where it overlaps)",
                bad_lanes.len(),
            )
        out = pl.concat(
            [out.filter(~pl.col("lane").is_in(bad_lanes.implode())).drop("lane"), fixed]
        )
    else:
        out = out.drop("lane")
    return _self_time(out, s)


def _self_time(out: pl.DataFrame, s: pl.DataFrame) -> pl.DataFrame:
    se = s.select("row", "start", "end", "dur")
    child = (
        out.filter(pl.col("parent").is_not_null())
        .join(se, on="row")
        .join(se.select(parent="row", p_end="end"), on="parent")
        .group_by("parent")
        .agg(
            covered=(pl.min_horizontal("end", "p_end") - pl.col("start")).clip(0).sum()
        )
    )
    return (
        out.join(se.select("row", "dur"), on="row")
        .join(child, left_on="row", right_on="parent", how="left")
        .select(
            "row",
            "parent",
            "depth",
            self_ns=(pl.col("dur") - pl.col("covered").fill_null(0)).clip(0),
        )
    )


def _stack(s: pl.DataFrame) -> pl.DataFrame:
    rows: list[int] = []
    parents: list[int | None] = []
    depths: list[int] = []
    lane_prev = object()
    stack: list[tuple[int, int]] = []  # (end, row)
    for lane, row, start, end in s.select("lane", "row", "start", "end").iter_rows():
        if lane != lane_prev:
            stack = []
            lane_prev = lane
        while stack and stack[-1][0] <= start:
            stack.pop()
        rows.append(row)
        parents.append(stack[-1][1] if stack else None)
        depths.append(len(stack))
        if end > start:
            stack.append((end, row))
    return pl.DataFrame(
        {"row": rows, "parent": parents, "depth": depths},
        schema={"row": _I64, "parent": _I64, "depth": _I64},
    )


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
