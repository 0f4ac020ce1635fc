"""``neurontrace steps``: each ProfilerStep's wall time: device busy, idle by cause, host only."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.cli.options import events, json_option, path_argument, verbose_option
from neurontrace.views import terminal as T


@click.command()
@path_argument
@json_option
@verbose_option
def steps(path: Path, as_json: bool) -> None:
    """Per ProfilerStep#N in PATH: wall time split into device busy, idle by cause
    (as in `gaps`, all device tracks of a rank taken together) and host-only time,
    plus the device launches made by the step's ops."""
    table = analyses.steps(events(path))
    if as_json:
        T.emit_json(T.records(table))
        return
    T.show(T.steps(table, str(path)))
