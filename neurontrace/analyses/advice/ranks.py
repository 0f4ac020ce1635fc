"""Rule ``rank-imbalance``: in a run of several ranks, one rank's steps take longer.

**Condition.** Steps numbered alike on two or more ranks (``ProfilerStep#N`` of each
rank: :func:`.steps.steps`), where the slowest rank's wall time is above the median
rank's by more than :data:`MARGIN` of it. Where the slowest rank's extra time goes is
read from the same table: its parts of the step (device busy, idle by cause, host only)
against the median of the ranks' for that step, largest excess first::

    step 4  rank 0 |== busy ==| idle |== busy ==|            | (waits at the collective)
            rank 1 |== busy ==| idle |== busy ==|            |
            rank 2 |==== busy ====|  idle   |===== busy =====|   +40% over the median:
                                                                 busy +30 µs

**Time at stake** (measured, per step): the slowest rank's time above the median rank's,
over the steps compared (a synchronous step ends when its slowest rank does).
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.advice.base import Facts, Finding, us
from neurontrace.analyses.gaps import CAUSES

RULE = "rank-imbalance"
MARGIN = 0.10
PARTS = ("busy_ns", *(f"{c}_ns" for c in CAUSES), "host_only_ns")


def find(facts: Facts) -> list[Finding]:
    table = facts.steps
    if not table.height or table.get_column(S.RANK).n_unique() < 2:
        return []
    shared = table.filter(pl.len().over("step") >= 2)
    if not shared.height:
        return []
    rows = []
    for (step,), ranks in shared.group_by("step", maintain_order=True):
        median = {c: float(ranks.get_column(c).median() or 0)  # type: ignore[arg-type]
                  for c in ("wall_ns", *PARTS)}
        slow = ranks.sort("wall_ns", S.RANK, descending=[True, False]).row(0, named=True)
        excess = slow["wall_ns"] - median["wall_ns"]
        if excess <= MARGIN * median["wall_ns"]:
            continue
        more = sorted(((c.removesuffix("_ns"), int(slow[c] - median[c])) for c in PARTS
                       if slow[c] > median[c]), key=lambda x: -x[1])
        rows.append({"step": step, "rank": slow[S.RANK], "wall_ns": slow["wall_ns"],
                     "median_ns": int(median["wall_ns"]), "excess_ns": int(excess),
                     "more": [{"part": p, "ns": n} for p, n in more[:3]]})
    if not rows:
        return []
    compared = shared.get_column("step").n_unique()
    at = int(sum(r["excess_ns"] for r in rows) // compared)
    ranks_slow = [r["rank"] for r in rows]
    worst = max(set(ranks_slow), key=lambda r: (ranks_slow.count(r), -r))
    mine = [r for r in rows if r["rank"] == worst]
    part = mine[0]["more"][0]["part"].replace("_", " ") if mine[0]["more"] else "?"
    title = (f"Rank {worst} is the slowest in {len(mine)} of {compared} step(s), "
             f"{us(sum(r['excess_ns'] for r in mine) / len(mine))} over the median rank, "
             f"mostly more {part}")
    hint = ("the other ranks wait for the slowest at each collective: look at what it does "
            "differently (more work from uneven sharding or sequence lengths, its data "
            "loader, its host, a straggling device)")
    evidence = {"steps": rows, "steps_compared": compared,
                "ranks": table.get_column(S.RANK).n_unique()}
    return [facts.finding(RULE, "step", title, (), (at, at), evidence, hint)]
