"""``neurontrace ops``: op share, the key_averages view (host) or device time per op."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analyses
from neurontrace.analyses.ops import COLUMNS
from neurontrace.cli.options import analysis_options, events, machine_output, rows_shown, sorted_by
from neurontrace.views import terminal as T


@click.command()
@click.option("--layer", type=click.Choice(["framework", "device"]), default="framework",
              show_default=True,
              help="framework: host time per op as key_averages(); device: device time "
                   "per launching op.")
@analysis_options(COLUMNS, top=20)
def ops(path: Path, layer: str, top: int, sort: str | None, as_json: bool,
        as_csv: bool) -> None:
    """Time per op name in PATH (a trace, a run folder, or what convert wrote).

    Largest self time first. With --layer framework (the default) the figures agree
    with torch.profiler's key_averages(): calls, Self CPU, CPU total; share is of the
    summed self time. With --layer device: device time charged to the op that launched
    it (calls = launches; share of all device time).
    """
    table = sorted_by(analyses.ops(events(path),
                                   layer="device" if layer == "device" else "framework"),
                      sort)
    if machine_output(table, rows_shown(top, True), as_json, as_csv):
        return
    T.show(T.ops(table, top, str(path), layer))
