"""``neurontrace kernels``: device work by its own name (kernels, executions, copies)."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.cli.options import (
    events,
    json_option,
    path_argument,
    rows_shown,
    top_option,
    verbose_option,
)
from neurontrace.views import terminal as T


@click.command()
@path_argument
@top_option(20)
@json_option
@verbose_option
def kernels(path: Path, top: int, as_json: bool) -> None:
    """Device work in PATH (a trace, a run folder, or what convert wrote) by its own
    name, as key_averages()' device rows and HTA's kernel breakdown: kernels, NeuronCore
    executions, memcpys and memsets on the device, whatever op launched them.

    Per name: calls, total, mean, min and max time per call, and share of all device
    work (calls on different streams each count in full). Largest total first.
    --json prints [{name, calls, total_ns, mean_ns, min_ns, max_ns, share}], every row
    unless --top is given.
    """
    table = analyses.kernels(events(path))
    if as_json:
        n = rows_shown(top, as_json)
        T.emit_json(T.records(table.head(n) if n else table))
        return
    T.show(T.kernels(table, top, str(path)))
