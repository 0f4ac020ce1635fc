"""``neurontrace ranks``: the ranks of a run side by side."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses as A
from neurontrace.analyses.ranks import BREAKDOWN_COLUMNS
from neurontrace.cli.options import analysis_options, events, machine_output, sorted_by
from neurontrace.views import launches as V
from neurontrace.views import terminal as T


@click.command()
@analysis_options(BREAKDOWN_COLUMNS)
def ranks(path: Path, sort: str | None, as_json: bool, as_csv: bool) -> None:
    """The ranks of PATH (a dataset of several ranks, a run folder, or one trace):
    each rank's step times (ProfilerStep#N) and the slowest rank of each step; then
    per rank, its device time with all streams merged: compute, communication not
    hidden by compute, memory (copies, memsets) and idle, which add up to the span of
    its device work; collective time and the share of it overlapped by compute (HTA's
    comm/compute overlap). Communication is device work launched by a collective
    (record_param_comms, c10d::*, nccl:*) or an NCCL kernel (nccl*).
    --json prints {steps, slowest, ranks, breakdown}; --csv and --sort: the per-rank
    device time (breakdown).
    """
    lf = events(path)
    breakdown = sorted_by(A.breakdown(lf), sort)
    if as_csv:
        machine_output(breakdown, 0, as_json, as_csv)
        return
    times = A.step_times(lf)
    tables = {
        "steps": times,
        "slowest": A.slowest(times),
        "ranks": A.per_rank(times),
        "breakdown": breakdown,
    }
    if as_json:
        T.emit_json(V.as_json(tables, 0))
        return
    T.show(V.ranks(tables, str(path)))
