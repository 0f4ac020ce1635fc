"""``neurontrace ranks``: the ranks of a run side by side."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses as A
from neurontrace.cli.options import events, json_option, path_argument, verbose_option
from neurontrace.views import launches as V
from neurontrace.views import terminal as T


@click.command()
@path_argument
@json_option
@verbose_option
def ranks(path: Path, as_json: bool) -> None:
    """The ranks of PATH (a dataset of several ranks, a run folder, or one trace):
    each rank's step times (ProfilerStep#N) and the slowest rank of each step; then
    per rank, its device time with all streams merged: compute, communication not
    hidden by compute, memory (copies, memsets) and idle, which add up to the span of
    its device work; collective time and the share of it overlapped by compute (HTA's
    comm/compute overlap). Communication is device work launched by a collective
    (record_param_comms, c10d::*, nccl:*) or an NCCL kernel (nccl*).
    --json prints {steps, slowest, ranks, breakdown}.
    """
    lf = events(path)
    times = A.step_times(lf)
    tables = {
        "steps": times,
        "slowest": A.slowest(times),
        "ranks": A.per_rank(times),
        "breakdown": A.breakdown(lf),
    }
    if as_json:
        T.emit_json(V.as_json(tables, 0))
        return
    T.show(V.ranks(tables, str(path)))
