"""``neurontrace kernels``: device work by its own name (kernels, executions, copies)."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.analyses.kernels import COLUMNS
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import terminal as T


@click.command()
@analysis_options(COLUMNS, top=20)
def kernels(path: Path, top: int, sort: str | None, as_json: bool, as_csv: bool) -> None:
    """Device work in PATH (a trace, a run folder, or what convert wrote) by its own
    name, as key_averages()' device rows and HTA's kernel breakdown: kernels, NeuronCore
    executions, memcpys and memsets on the device, whatever op launched them.

    Per name: calls, total, mean, min and max time per call, and share of all device
    work (calls on different streams each count in full). Largest total first.
    --json prints [{name, calls, total_ns, mean_ns, min_ns, max_ns, share}], every row
    unless --top is given.
    """
    table = sorted_by(analyses.kernels(events(path)), sort)
    if machine_output(table, rows_shown(top, True), as_json, as_csv):
        return
    T.show(T.kernels(table, top, str(path)))
