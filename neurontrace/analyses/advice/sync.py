"""Rule ``sync-in-loop``: the host waits for the device inside the steps.

**Condition.** In every step (on a trace without steps, at least once), a
synchronisation (a runtime ``sync`` call such as a device or stream synchronize, or a
device-side ``wait``: :func:`.vocab.is_sync`) or a device-to-host copy (``.item()``,
``.cpu()``, printing a tensor)::

    host    [mul][launch] [mean][launch] .. [synchronize.............]  [next step ..
    device      |==mul==|     |=mean=|            |==mul==|             idle: sync
                                                          <-- device drained, host blocked

The evidence names each sync call with the operator it was made in (none when the
user's code called it directly, as ``torch.cuda.synchronize()``).

**Time at stake** (measured, per step): the device idle time whose cause is ``sync``
(:mod:`.gaps`: idle while a synchronisation is in progress), which removing the sync
from the loop gives back; the sync calls' own host time is evidence.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.advice.base import DEVICE, Facts, Finding, per_step, us
from neurontrace.analyses.gaps import SYNC

RULE = "sync-in-loop"


def find(facts: Facts) -> list[Finding]:
    if not facts.has_device:
        return []
    fw = facts.lf.filter(V.is_op()).select(pl.col(S.ROW).alias(S.FRAMEWORK_ROW),
                                          _op=V.op_name())
    calls = (
        facts.lf.filter(V.is_sync())
        .select(S.RANK, S.NAME, S.DUR_NS, S.STEP, S.FRAMEWORK_ROW)
        .join(fw, on=S.FRAMEWORK_ROW, how="left")
        .collect()
    )
    back = facts.copies.filter(pl.col("direction") == V.D2H)
    stepped = facts.steps.height > 0
    if stepped:
        calls = calls.filter(pl.col(S.STEP).is_not_null())
        every = {(int(r), int(s)) for r, s in facts.steps.select(S.RANK, "step").iter_rows()}
        seen = {(int(r), int(s)) for r, s in calls.select(S.RANK, S.STEP).iter_rows()}
        if back.height:  # a d2h copy counts for the step begun last before it
            starts = facts.steps.select(S.RANK, "step", S.START_NS).sort(S.START_NS)
            steps_of = back.sort(S.START_NS).join_asof(starts, on=S.START_NS, by=S.RANK,
                                                                 check_sortedness=False)
            seen |= {(int(r), int(s)) for r, s in
                     steps_of.select(S.RANK, "step").drop_nulls().iter_rows()}
        if not every <= seen:
            return []
        idle = int(facts.steps.get_column(f"{SYNC}_ns").sum())
    else:
        if not (calls.height or back.height):
            return []
        idle = int(facts.gaps.devices.get_column(f"{SYNC}_ns").sum())
    at = per_step(idle, facts)
    by_name = (calls.group_by(S.NAME, op="_op")
               .agg(calls=pl.len(), host_ns=pl.col(S.DUR_NS).sum())
               .sort("host_ns", S.NAME, descending=[True, False]))
    names = [f"{r[S.NAME]}" for r in by_name.iter_rows(named=True)]
    what = ", ".join(dict.fromkeys(names)) if names else "device-to-host copies"
    ops = tuple(dict.fromkeys(str(o) for o in [*by_name.get_column("op").to_list(),
                                               *back.get_column("op").to_list()] if o))
    title = (f"The host waits for the device in every step ({what}): "
             f"{us(at)} of device idle a step")
    evidence = {
        "syncs": [{"name": r[S.NAME], "op": r["op"], "per_step": r["calls"] / facts.windows,
                   "host_ns_per_step": per_step(r["host_ns"], facts)}
                  for r in by_name.iter_rows(named=True)],
        "d2h_copies_per_step": back.height / facts.windows,
        "sync_idle_ns_per_step": at,
    }
    hint = ("keep the loop free of synchronisations: no .item(), .cpu(), print(tensor) or "
            "torch.cuda.synchronize() inside a step; read values back once, after the loop "
            "(or every N steps)")
    return [facts.finding(RULE, DEVICE, title, ops, (at, at), evidence, hint)]
