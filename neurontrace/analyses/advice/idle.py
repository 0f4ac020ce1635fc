"""Rule ``launch-bound``: the device waits for the host to give it work.

**Condition.** The devices sit idle at least :data:`IDLE_SHARE` of their span (first
work to last, each device the union of its streams or queues: :func:`.gaps.gaps`), and
some of that idle time is caused by the host: ``host_dispatch`` (a framework op is
running on the host, nothing launched yet) or ``launch_latency`` (the launch has begun,
the work has not started)::

    host    [ aten::mul ....[launch]] [ aten::mean ...[launch]]
    device                       |=mul=|  host dispatch  | lat |=mean=|
                                       <--- idle, caused by the host --->

**Time at stake** (measured, per step): the idle time of those two causes (per step from
:func:`.steps.steps` when the trace has steps; the idle of the other causes, copies and
syncs, belongs to the ``host-scalar`` and ``sync-in-loop`` findings and is listed as
evidence). Fewer, larger launches (fusion, CUDA graphs) give it back.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses.advice.base import DEVICE, Facts, Finding, per_step, us
from neurontrace.analyses.gaps import CAUSES, DISPATCH, LAUNCH

RULE = "launch-bound"
#: The least share of the devices' span spent idle.
IDLE_SHARE = 0.30
#: Longest gaps listed as evidence.
LONGEST = 3


def find(facts: Facts) -> list[Finding]:
    if not facts.has_device:
        return []
    dev = facts.gaps.devices
    span, idle = int(dev.get_column("span_ns").sum()), int(dev.get_column("idle_ns").sum())
    if span <= 0 or idle / span < IDLE_SHARE:
        return []
    table = facts.steps if facts.steps.height else dev
    by_cause = {c: per_step(int(table.get_column(f"{c}_ns").sum()), facts) for c in CAUSES}
    at = by_cause[DISPATCH] + by_cause[LAUNCH]
    if at <= 0:
        return []
    gaps = facts.gaps.device_gaps.sort(S.DUR_NS, descending=True).head(LONGEST)
    ops = _ops_around(facts, gaps)
    title = (f"The device is idle {idle / span:.1%} of its span, waiting for the host: "
             f"host dispatch {us(by_cause[DISPATCH])}, launch latency {us(by_cause[LAUNCH])} "
             "a step")
    evidence = {
        "idle_share": idle / span,
        "idle_ns_per_step_by_cause": by_cause,
        "longest_gaps": ops.to_dicts(),
    }
    names = tuple(dict.fromkeys(n for n in ops.get_column("op_before").to_list()
                                + ops.get_column("op_after").to_list() if n))
    hint = ("launch fewer, larger pieces of work: fuse small ops (torch.compile), capture "
            "the step in a CUDA graph (torch.compile(mode='reduce-overhead')), or give each "
            "launch more work (a larger batch)")
    return [facts.finding(RULE, DEVICE, title, names, (at, at), evidence, hint)]


def _ops_around(facts: Facts, gaps: pl.DataFrame) -> pl.DataFrame:
    """The longest gaps with the ops whose work ends and starts them: ``rank, start_ns,
    dur_ns, cause, before, after, op_before, op_after``."""
    work = facts.launches.select(S.RANK, "start", "end", "op")
    before = work.group_by(S.RANK, "end").agg(op_before=pl.col("op").first())
    after = work.group_by(S.RANK, "start").agg(op_after=pl.col("op").first())
    return (
        gaps.select(S.RANK, S.START_NS, S.DUR_NS, "cause", "before", "after")
        .with_columns(_end=pl.col(S.START_NS) + pl.col(S.DUR_NS))
        .join(before, left_on=[S.RANK, S.START_NS], right_on=[S.RANK, "end"], how="left")
        .join(after, left_on=[S.RANK, "_end"], right_on=[S.RANK, "start"], how="left")
        .drop("_end")
    )
