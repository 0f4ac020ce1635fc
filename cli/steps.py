"""``neurontrace steps``: each ProfilerStep's wall time: device busy, idle by cause, host only."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analysis
from neurontrace.analysis.gaps import CAUSES
from neurontrace.cli import render as R
from neurontrace.cli.options import events, json_option, path_argument, verbose_option

COLUMNS = (
    R.Col("step", "step", R.count),
    R.Col("wall_ns", "wall", R.duration),
    R.Col("busy_ns", "busy", R.duration),
    R.Col("idle_ns", "idle", R.duration),
    *(R.Col(f"{c}_ns", c.replace("_", " "), R.duration) for c in CAUSES),
    R.Col("host_only_ns", "host only", R.duration),
    R.Col("launches", "launches", R.count),
)


@click.command()
@path_argument
@json_option
@verbose_option
def steps(path: Path, as_json: bool) -> None:
    """Per ProfilerStep#N in PATH: wall time split into device busy, idle by cause
    (as in `gaps`, all device tracks of a rank taken together) and host-only time,
    plus the device launches made by the step's ops."""
    table = analysis.steps(events(path))
    if as_json:
        R.emit_json(R.records(table))
        return
    if table.height == 0:
        R.echo(f"{path}: no ProfilerStep#N spans (profile with a schedule and call "
               "prof.step())")
        return
    ranks = table.get_column("rank").unique()
    cols = COLUMNS if ranks.len() == 1 else (R.Col("rank", "rank", R.count), *COLUMNS)
    R.echo(R.table(table, cols))
