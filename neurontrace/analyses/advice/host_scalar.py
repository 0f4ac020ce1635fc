"""Rule ``host-scalar``: a scalar living on the host, copied to the device every step.

**Condition.** Tiny host-to-device transfers (``tiny`` in :func:`.copies.copies`: at most
:data:`.vocab.TINY_BYTES` bytes) made by the same user op (the transfer's ``op``, the
outermost framework op above it) in every step (a transfer belongs to the last step
begun before it) (on a trace without steps, at least
once)::

    host    [aten::to [_to_copy [copy_ [cudaMemcpyAsync 2 B][cudaStreamSynchronize]]]]
    device                                 |h2d 2 B|
            <--- every step: the copy, and the host waiting for it --->

**Time at stake** (measured, per step): the transfers' durations plus the
synchronisations made inside the same framework op as the copy (a pageable copy waits
for the device; ``wait_ns_per_step``; counted only where one op makes all the tiny
copies). The copy's launch and the host op around it cost
more host time still; that is not counted.
"""

from __future__ import annotations

import polars as pl

from neurontrace import schema as S
from neurontrace.analyses import vocab as V
from neurontrace.analyses.advice.base import DEVICE, Facts, Finding, count, per_step, us

RULE = "host-scalar"


def _waits(facts: Facts) -> pl.DataFrame:
    """Per framework op row that made a tiny host-to-device copy: ``framework_row,
    wait_ns`` (the synchronisations linked to that same op) and ``step``."""
    linked = facts.lf.filter(pl.col(S.FRAMEWORK_ROW).is_not_null())
    tiny = linked.filter(V.is_copy() & (pl.col(S.DIRECTION) == V.H2D)
                         & (pl.col(S.BYTES) <= V.TINY_BYTES))
    rows = tiny.select(S.FRAMEWORK_ROW).unique()
    return (
        linked.filter(V.is_sync() & (pl.col(S.LAYER) == S.RUNTIME))
        .join(rows, on=S.FRAMEWORK_ROW)
        .group_by(S.FRAMEWORK_ROW)
        .agg(wait_ns=pl.col(S.DUR_NS).sum())
        .collect()
    )


def find(facts: Facts) -> list[Finding]:
    moved = facts.copies
    if not moved.height:
        return []
    tiny = moved.filter(pl.col("tiny").fill_null(False))
    if not tiny.height:
        return []
    tiny = _with_step(tiny, facts)
    stepped = facts.steps.height > 0
    every = {(int(r), int(s)) for r, s in facts.steps.select(S.RANK, "step").iter_rows()}
    waits = int(_waits(facts).get_column("wait_ns").sum())
    out = []
    for (op, via), group in tiny.group_by("op", "via", maintain_order=True):
        seen = {(int(r), int(s)) for r, s in group.select(S.RANK, "step").drop_nulls().iter_rows()}
        if stepped and not every <= seen:
            continue
        copies_ns = int(group.get_column(S.DUR_NS).sum())
        # waits go to the op of the copies when one op makes them all (the usual case)
        wait = waits if tiny.select("op").n_unique() == 1 else 0
        at = per_step(copies_ns, facts) + per_step(wait, facts)
        n = group.height
        nbytes = int(group.get_column(S.BYTES).max())  # type: ignore[arg-type]
        title = (f"{op} copies a {nbytes}-byte host value to the device "
                 f"{count(n / facts.windows)} time(s) a step: {us(at)} a step of copy and wait")
        evidence = {
            "via": via, "copies": n, "copies_per_step": n / facts.windows,
            "bytes": nbytes, "copy_ns_per_step": per_step(copies_ns, facts),
            "wait_ns_per_step": per_step(wait, facts),
            "steps": sorted({int(s) for s in group.get_column("step").drop_nulls()}),
            "first_start_ns": int(group.get_column(S.START_NS).min()),  # type: ignore[arg-type]
        }
        hint = ("keep the scalar a Python number (e.g. eps=1e-6), or create the tensor on "
                "the device once, outside the loop, instead of moving a host tensor every step")
        out.append(facts.finding(RULE, DEVICE, title, (str(op),), (at, at), evidence, hint))
    return out


def _with_step(transfers: pl.DataFrame, facts: Facts) -> pl.DataFrame:
    """``transfers`` with ``step``: the last step of its rank begun before the transfer
    (a copy the device makes after the host left the step is still that step's); null
    before the first."""
    if not facts.steps.height:
        return transfers.with_columns(step=pl.lit(None, pl.Int64))
    windows = facts.steps.select(S.RANK, "step", S.START_NS).sort(S.START_NS)
    return transfers.sort(S.START_NS).join_asof(windows, on=S.START_NS, by=S.RANK,
                                                 strategy="backward",
                                                 check_sortedness=False)
