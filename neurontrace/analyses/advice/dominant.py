"""Rule ``dominant-op``: one op takes most of the time.

**Condition.** Of two or more ops, one (not ``(unlinked)`` work) takes at least
:data:`DOMINANT` of the time of a typical step: of the device time by the op that
launched it (as :func:`.ops.device_ops`), or, on a trace without device work, of the time
of the operators the user's code called directly (each top-level operator's duration;
its CPU kernels run inside it). An op's
time in a typical step is the median over the steps of its time in each (at most its
mean), so that a warm-up or stalled step weighs nothing (:func:`typical`)::

    device  |==== mul ====|=mean=|a|r|===== mul =====|===== mul =====|
            mul: 85% of device time  ->  look at mul first

**Time at stake** (measured, per step): the op's time in a typical step: the most any
change to it saves.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.advice.base import DEVICE, HOST, Facts, Finding, count, us
from neurontrace.analyses.ops import UNLINKED

RULE = "dominant-op"
#: The least share of the time that makes an op dominant.
DOMINANT = 0.40


def find(facts: Facts) -> list[Finding]:
    if facts.has_device:
        members, scope, of = facts.launches, DEVICE, "device time"
    else:
        members, scope, of = facts.top_ops, HOST, "the time of the ops called"
    if facts.steps.height:
        of += " in the steps"
    table = typical(members, facts)
    total = float(table.get_column("time").sum()) if table.height else 0.0
    ops = table.filter(pl.col("name") != UNLINKED)  # work no op launched is no candidate
    if table.height < 2 or total <= 0 or not ops.height:
        return []
    top = ops.row(0, named=True)
    share = top["time"] / total
    if share < DOMINANT:
        return []
    at = int(top["time"])
    calls = top["calls"] / facts.windows
    title = (f"{top['name']} takes {share:.1%} of {of}: {us(at)} a step "
             f"in {count(calls)} call(s)")
    others = table.filter(pl.col("name") != top["name"])
    evidence = {"share_of_time": share, "calls_per_step": calls, "time_ns_per_step": at,
                "next": others.row(0, named=True)["name"]}
    hint = ("look at this op first: fewer calls (is it repeated on the same data?), a "
            "fused version (see the fusion findings), a lower precision or a better layout")
    return [facts.finding(RULE, scope, title, (str(top["name"]),), (at, at), evidence, hint,
                          device_time=scope == DEVICE)]


def typical(members: pl.DataFrame, facts: Facts) -> pl.DataFrame:
    """Per op name: ``name, calls, time``: ``time`` is its time in a typical step: the
    median over the steps of its time in each (0 in a step without it), at most its mean
    per step; its mean per step on a trace without steps. Largest first."""
    stepped = facts.steps.height > 0
    if stepped:
        members = members.filter(pl.col("step").is_not_null())
    totals = members.group_by(name="op").agg(calls=pl.len(), total=pl.col("dur").sum())
    if not stepped:
        time = pl.col("total") / facts.windows
        return totals.select("name", "calls", time=time).sort(
            "time", "name", descending=[True, False])
    grid = facts.steps.select(S.RANK, "step").join(totals.select("name"), how="cross")
    per = members.group_by(S.RANK, "step", name="op").agg(t=pl.col("dur").sum())
    medians = (grid.join(per, on=[S.RANK, "step", "name"], how="left")
               .group_by("name").agg(median=pl.col("t").fill_null(0).median()))
    return (
        totals.join(medians, on="name")
        .select("name", "calls",
                time=pl.min_horizontal("median", pl.col("total") / facts.windows))
        .sort("time", "name", descending=[True, False])
    )
