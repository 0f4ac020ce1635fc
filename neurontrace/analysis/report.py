"""The three answers on one screen: op share, device idle time and copies.

:func:`report` gathers the figures; the command line words them (``neurontrace
report``). Everything here is a table from the other analyses, cut to the top rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from neurontrace import schema as S
from neurontrace.analysis.copies import copies, copy_summary
from neurontrace.analysis.gaps import CAUSES, gaps
from neurontrace.analysis.ops import device_ops, host_ops
from neurontrace.analysis.steps import steps


@dataclass(frozen=True)
class Report:
    """``host_ops`` / ``device_ops``: the top rows of :func:`.ops.ops`'s two views;
    ``tracks``: :func:`.gaps.gaps`'s per-track table; ``idle``: ``cause, idle_ns`` over
    all tracks, largest first; ``largest_gaps``: the longest gaps; ``copies``:
    :func:`.copies.copy_summary`; ``transfers``: how many transfers; ``steps``: how many
    ``ProfilerStep`` spans (per rank, the most of any rank)."""

    host_ops: pl.DataFrame
    device_ops: pl.DataFrame
    tracks: pl.DataFrame
    idle: pl.DataFrame
    largest_gaps: pl.DataFrame
    copies: pl.DataFrame
    transfers: int
    steps: int


def report(lf: pl.LazyFrame, top: int = 5) -> Report:
    idle = gaps(lf)
    moved = copies(lf)
    per_step = steps(lf)
    by_cause = pl.DataFrame(
        {
            "cause": list(CAUSES),
            "idle_ns": [int(idle.tracks.get_column(f"{c}_ns").sum()) for c in CAUSES],
        }
    ).filter(pl.col("idle_ns") > 0).sort("idle_ns", descending=True)
    n_steps = (
        int(per_step.group_by("rank").len().get_column("len").max() or 0)  # type: ignore[arg-type]
        if per_step.height else 0
    )
    return Report(
        host_ops=host_ops(lf).head(top),
        device_ops=device_ops(lf).head(top),
        tracks=idle.tracks,
        idle=by_cause,
        largest_gaps=idle.gaps.sort(S.DUR_NS, descending=True).head(top),
        copies=copy_summary(moved).head(top),
        transfers=moved.height,
        steps=n_steps,
    )
