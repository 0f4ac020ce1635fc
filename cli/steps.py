"""``neurontrace steps``: each ProfilerStep's wall time: device busy, idle by cause, host only."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.analyses.steps import COLUMNS
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import terminal as T


@click.command()
@analysis_options(COLUMNS, top=0)
def steps(path: Path, top: int, sort: str | None, as_json: bool, as_csv: bool) -> None:
    """Per ProfilerStep#N in PATH: wall time split into device busy, idle by cause
    (as in `gaps`, all device tracks of a rank taken together) and host-only time,
    plus the device launches made by the step's ops. In step order, or --sort's (e.g.
    --sort wall_ns --top 3: the three slowest steps)."""
    table = sorted_by(analyses.steps(events(path)), sort)
    n = rows_shown(top, True)
    if machine_output(table, n, as_json, as_csv):
        return
    T.show(T.steps(table.head(top) if top else table, str(path)))
