"""Rule ``step-outliers``: steps much slower than the median step, and what differs.

**Condition.** A rank with at least :data:`MIN_STEPS` steps has steps whose wall time is
above the median step's by more than :data:`MARGIN` of it. What differs is read from
:func:`.steps.steps`: the parts of the step (device busy, idle by cause, host only) and
the launches, each against its median over the rank's steps; the parts are listed by
how much they exceed their median::

    step 2  |host|== busy ==| idle |== busy ==|                  median 186 µs
    step 1  |host only ......|== busy ==|  idle ......  |== busy ==|   409 µs: +223 µs,
                                                                       host only +111 µs

**Time at stake** (measured, per step): the outliers' time above the median, summed and
divided by the number of steps.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.advice.base import Facts, Finding, per_step, us
from neurontrace.analyses.gaps import CAUSES

RULE = "step-outliers"
STEP = "step"
MIN_STEPS = 3
MARGIN = 0.5
#: The parts of a step compared with their median.
PARTS = ("busy_ns", *(f"{c}_ns" for c in CAUSES), "host_only_ns")


def find(facts: Facts) -> list[Finding]:
    table = facts.steps
    if not table.height:
        return []
    rows = []
    for (rank,), steps in table.group_by(S.RANK, maintain_order=True):
        if steps.height < MIN_STEPS:
            continue
        median = {c: float(steps.get_column(c).median() or 0)  # type: ignore[arg-type]
                  for c in ("wall_ns", *PARTS, "launches")}
        slow = steps.filter(pl.col("wall_ns") > median["wall_ns"] * (1 + MARGIN))
        first = int(steps.get_column(STEP).min())  # type: ignore[arg-type]
        for s in slow.iter_rows(named=True):
            more = sorted(((c.removesuffix("_ns"), int(s[c] - median[c])) for c in PARTS
                           if s[c] > median[c]), key=lambda x: -x[1])
            rows.append({
                "rank": rank, "step": s[STEP], "wall_ns": s["wall_ns"],
                "median_ns": int(median["wall_ns"]),
                "excess_ns": int(s["wall_ns"] - median["wall_ns"]),
                "more": [{"part": p, "ns": n} for p, n in more[:3]],
                "launches": s["launches"], "median_launches": median["launches"],
                "first": s[STEP] == first,
            })
    if not rows:
        return []
    at = per_step(sum(r["excess_ns"] for r in rows), facts)
    worst = max(rows, key=lambda r: r["excess_ns"])
    part = worst["more"][0]["part"].replace("_", " ") if worst["more"] else "?"
    title = (f"{len(rows)} step(s) slower than the median by more than {MARGIN:.0%}: step "
             f"{worst['step']} takes {us(worst['wall_ns'])} against {us(worst['median_ns'])}"
             f", mostly more {part}")
    warmup = all(r["first"] for r in rows)
    hint = ("the slow step is the first profiled one: a warm-up (allocations, caches, lazy "
            "initialisation); leave it out with a warmup step in the profiler's schedule"
            if warmup else
            "look at what the slow steps do that the others do not (the parts listed): a "
            "recompilation, a data-loader stall, a copy, a garbage collection, a checkpoint")
    return [facts.finding(RULE, "step", title, (), (at, at), {"steps": rows}, hint)]
