"""Which events an analysis sees: a rank, some steps, a window of time.

:func:`keep` narrows a LazyFrame of events before any analysis runs, so every figure is
that of the narrowed run. What is kept (every condition given must hold):

- ``rank``: the rows of that rank (``rank`` column).
- ``steps``: the rows whose ``step`` is one of them: host rows that start in
  ``ProfilerStep#N`` (the span itself included), and device work and runtime calls by
  the step of the op that launched them (the table's ``step`` column says so). Rows
  outside every step (``step`` null) are dropped.
- ``window`` ``(start, end)``: nanoseconds from the trace's start (the first start of
  any row of the same rank: each rank's trace has its own clock), ``start`` included,
  ``end`` excluded, either end open (``None``). A row is kept when its time is in the
  window: a host row's time is its own start (a span that starts before the window is
  dropped whole, even if it ends inside; one that starts inside is kept whole, even if
  it ends after); a row linked to a launching op (``framework_row``: device work,
  runtime calls) goes with that op, as for ``steps``, so a kernel is never parted from
  the op it is charged to. Nothing is cut at the window's edges.

:func:`window` and :func:`duration_ns` read the command line's ``START:END`` spelling.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import polars as pl

from neurontrace import schema as S

#: Nanoseconds per unit of a duration on the command line.
UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)$")


@dataclass(frozen=True)
class Filter:
    """What :func:`keep` keeps (``None``: no condition of that kind)."""

    rank: int | None = None
    steps: tuple[int, ...] | None = None
    window: tuple[int | None, int | None] | None = None

    def __bool__(self) -> bool:
        return self.rank is not None or self.steps is not None or self.window is not None


def duration_ns(text: str) -> int:
    """``1.5ms`` -> 1500000: a non-negative decimal with a unit (ns, us or µs, ms, s),
    exact, fractions of a nanosecond dropped. A bare number is refused (ValueError), as
    ambiguous (Kineto writes microseconds, our table nanoseconds), except ``0``."""
    t = text.strip()
    if re.fullmatch(r"0+(\.0*)?", t):
        return 0
    m = _DURATION.match(t)
    if m is None:
        if re.fullmatch(r"\d+(\.\d*)?|\.\d+", t):
            raise ValueError(f"{text!r} has no unit (ns, us, ms or s: e.g. 1.5ms)")
        raise ValueError(f"{text!r} is not a duration (e.g. 200us, 1.5ms, 2s)")
    return int(Decimal(m.group(1)) * UNITS[m.group(2)])


def window(text: str) -> tuple[int | None, int | None]:
    """``START:END`` -> (start_ns, end_ns) from the trace's start; either side may be
    empty (``200us:``, ``:2s``), not both; END must be after START (ValueError)."""
    if text.count(":") != 1:
        raise ValueError(f"{text!r} is not START:END (e.g. 1.5ms:3ms, 200us:, :2s)")
    a, b = text.split(":")
    start = duration_ns(a) if a.strip() else None
    end = duration_ns(b) if b.strip() else None
    if start is None and end is None:
        raise ValueError(f"{text!r} gives neither START nor END")
    if start is not None and end is not None and end <= start:
        raise ValueError(f"{text!r} ends before it starts")
    return start, end


def steps(text: str) -> tuple[int, ...]:
    """``3`` or ``2,5,7`` -> the step numbers (ValueError for anything else)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"\d+", p) for p in parts):
        raise ValueError(f"{text!r} is not a step number or a list of them (e.g. 3 or 2,5)")
    return tuple(sorted({int(p) for p in parts}))


def keep(lf: pl.LazyFrame, f: Filter) -> pl.LazyFrame:
    """The rows of ``lf`` that ``f`` keeps (see the module docstring), columns unchanged."""
    if f.rank is not None:
        lf = lf.filter(pl.col(S.RANK) == f.rank)
    if f.steps is not None:
        lf = lf.filter(pl.col(S.STEP).is_in(list(f.steps)))
    if f.window is not None:
        lf = _in_window(lf, *f.window)
    return lf


def _in_window(lf: pl.LazyFrame, start: int | None, end: int | None) -> pl.LazyFrame:
    names = lf.collect_schema().names()
    launcher = lf.select(pl.col(S.ROW).alias("_fw"), pl.col(S.START_NS).alias("_fw_start"))
    timed = lf.join(launcher, left_on=S.FRAMEWORK_ROW, right_on="_fw", how="left").with_columns(
        _t=pl.coalesce("_fw_start", S.START_NS) - pl.col(S.START_NS).min().over(S.RANK))
    cond = pl.lit(True)
    if start is not None:
        cond = cond & (pl.col("_t") >= start)
    if end is not None:
        cond = cond & (pl.col("_t") < end)
    return timed.filter(cond).select(names)


def present(lf: pl.LazyFrame, f: Filter) -> tuple[list[int], list[int]]:
    """The ranks of ``lf``, and the steps of the rank ``f`` names (all ranks' without
    one), sorted: what a command checks ``f`` against before analysing."""
    scope = lf if f.rank is None else lf.filter(pl.col(S.RANK) == f.rank)
    ranks, found = pl.collect_all([lf.select(pl.col(S.RANK).unique()),
                                   scope.select(pl.col(S.STEP).drop_nulls().unique())])
    return sorted(ranks.to_series().to_list()), sorted(found.to_series().to_list())


def missing(lf: pl.LazyFrame, f: Filter) -> str | None:
    """Why ``f`` cannot apply to ``lf`` (a rank or step it lacks), or None."""
    if f.rank is None and f.steps is None:
        return None
    ranks, found = present(lf, f)
    if f.rank is not None and f.rank not in ranks:
        return f"no rank {f.rank} (ranks: {_listed(ranks)})"
    if f.steps is not None:
        absent = [s for s in f.steps if s not in found]
        if absent:
            where = f" of rank {f.rank}" if f.rank is not None else ""
            return (f"no step {_listed(absent)}{where} "
                    f"(steps: {_listed(found) if found else 'none, no ProfilerStep#N spans'})")
    return None


def _listed(values: Sequence[int]) -> str:
    """``1-5`` for a run of numbers, else ``1, 3, 7`` (at most 12 shown)."""
    if len(values) > 2 and list(values) == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    shown = ", ".join(map(str, values[:12]))
    return shown + (f", ... ({len(values):,})" if len(values) > 12 else "")
