"""Interval arithmetic on sorted frames: unions, and how much of a window a union covers.

Both are vectorised: a union is a running maximum of end times, and coverage is an as-of
join against the union's cumulative length::

    intervals:   |--a--|   |---b---|
                     |--c--|            |-d-|
    union:       |-----------------|    |---|
    covered(t):  time in the union before t; covered(t1) - covered(t0) is the busy
                 time inside [t0, t1), exact, without pairing every window with every
                 interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

_I64 = pl.Int64


def union(
    frame: pl.DataFrame | pl.LazyFrame,
    by: Sequence[str],
    start: str = "start",
    end: str = "end",
    first: Sequence[pl.Expr] = (),
) -> pl.LazyFrame:
    """Merge overlapping or touching intervals per ``by`` group.

    Returns ``by..., start, end`` (the union's disjoint pieces, sorted) plus the
    aggregates ``first`` computed over the intervals of each piece (e.g. the name of the
    one that ends last).
    """
    keys = list(by)
    lf = frame.lazy().select(*keys, pl.col(start).alias("start"), pl.col(end).alias("end"),
                             *_inputs(first))
    lf = lf.sort([*keys, "start"])
    reach = pl.col("end").cum_max().shift(1)
    if keys:
        reach = reach.over(keys)
    piece = (pl.col("start") > reach).fill_null(True).cum_sum()
    if keys:
        piece = piece.over(keys)
    return (
        lf.with_columns(_piece=piece)
        .group_by([*keys, "_piece"], maintain_order=True)
        .agg(pl.col("start").min(), pl.col("end").max(), *first)
        .drop("_piece")
    )


def _inputs(exprs: Sequence[pl.Expr]) -> list[str]:
    cols: list[str] = []
    for e in exprs:
        for c in e.meta.root_names():
            if c not in cols and c not in ("start", "end"):
                cols.append(c)
    return cols


def coverage(
    pieces: pl.DataFrame | pl.LazyFrame,
    points: pl.DataFrame | pl.LazyFrame,
    by: Sequence[str],
    at: str,
    out: str,
) -> pl.LazyFrame:
    """Add column ``out`` to ``points``: the length of ``pieces`` before time ``at``.

    ``pieces`` must be disjoint per ``by`` group (as :func:`union` returns them). The
    points keep their order.
    """
    keys = list(by)
    cum = (
        pieces.lazy()
        .select(*keys, "start", "end")
        .sort([*keys, "start"])
        .with_columns(
            _before=(pl.col("end") - pl.col("start")).cum_sum().over(keys)
            - (pl.col("end") - pl.col("start"))
            if keys
            else (pl.col("end") - pl.col("start")).cum_sum() - (pl.col("end") - pl.col("start"))
        )
        .rename({"start": "_p_start", "end": "_p_end"})
        .sort("_p_start")
    )
    pts = points.lazy().with_row_index("_order").sort(at)
    joined = pts.join_asof(
        cum, left_on=at, right_on="_p_start", by=keys or None, strategy="backward",
        check_sortedness=False,
    )
    inside = (
        pl.min_horizontal(pl.col(at), pl.col("_p_end")) - pl.col("_p_start")
    ).clip(lower_bound=0)
    return (
        joined.with_columns((pl.col("_before") + inside).fill_null(0).cast(_I64).alias(out))
        .sort("_order")
        .drop("_order", "_before", "_p_start", "_p_end")
    )


def overlap(
    pieces: pl.DataFrame | pl.LazyFrame,
    windows: pl.DataFrame | pl.LazyFrame,
    by: Sequence[str],
    start: str,
    end: str,
    out: str,
) -> pl.LazyFrame:
    """Add column ``out`` to ``windows``: how much of ``[start, end)`` the pieces cover."""
    w = coverage(pieces, windows, by, start, "_cov0")
    w = coverage(pieces.lazy(), w, by, end, "_cov1")
    return w.with_columns((pl.col("_cov1") - pl.col("_cov0")).alias(out)).drop("_cov0", "_cov1")
