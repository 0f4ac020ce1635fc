"""``neurontrace ops``: op share, the key_averages view (host) or device time per op."""

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
@click.option("--layer", type=click.Choice(["framework", "device"]), default="framework",
              show_default=True,
              help="framework: host time per op as key_averages(); device: device time "
                   "per launching op.")
@top_option(20)
@json_option
@verbose_option
def ops(path: Path, layer: str, top: int, as_json: bool) -> None:
    """Time per op name in PATH (a trace, a run folder, or what convert wrote).

    Largest self time first. With --layer framework (the default) the figures agree
    with torch.profiler's key_averages(): calls, Self CPU, CPU total; share is of the
    summed self time. With --layer device: device time charged to the op that launched
    it (calls = launches; share of all device time).
    """
    table = analyses.ops(events(path),
                         layer="device" if layer == "device" else "framework")
    if as_json:
        n = rows_shown(top, as_json)
        T.emit_json(T.records(table.head(n) if n else table))
        return
    T.show(T.ops(table, top, str(path), layer))
