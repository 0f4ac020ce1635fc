"""``neurontrace ops``: op share, the key_averages view (host) or device time per op."""

from __future__ import annotations

from pathlib import Path

import click

from neurontrace import analysis
from neurontrace.cli import render as R
from neurontrace.cli.options import events, json_option, path_argument, top_option, verbose_option

COLUMNS = (
    R.Col("name", "op", flex=True, right=False),
    R.Col("calls", "calls", R.count),
    R.Col("self_ns", "self", R.duration),
    R.Col("total_ns", "total", R.duration),
    R.Col("share", "share", R.percent),
)


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
    table = analysis.ops(events(path),
                         layer="device" if layer == "device" else "framework")
    shown = table.head(top) if top else table
    if as_json:
        R.emit_json(R.records(shown))
        return
    if table.height == 0:
        R.echo(f"{path}: no {'device work' if layer == 'device' else 'host ops'} found")
        return
    R.echo(R.table(shown, COLUMNS))
    if shown.height < table.height:
        R.echo(f"... {table.height - shown.height:,} more (--top 0 shows all)")
